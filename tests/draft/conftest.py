"""Fixtures of the draft tests."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from draft_helpers import make_target


@pytest.fixture
def target() -> SimpleNamespace:
    return make_target()
