"""Fixtures of the draft tests."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from .draft_helpers import make_target
from onebit_engine.draft import kernels


@pytest.fixture
def target() -> SimpleNamespace:
    return make_target()


@pytest.fixture(params=["numpy", "numba"])
def ops(request) -> str:
    """Both op sets of ``draft.ops``: every draft claim holds on the numpy twins and the compiled kernels."""
    if request.param == "numba" and kernels.nb is None:
        pytest.skip("numba is not installed (the fast extra)")
    return request.param
