"""Fixtures of the device tests: a fresh strict fake XRT per test and a small fake kernel artifact.

The artifact's launch is 32 x 64 x 32 (M_cap x K x N), so the tiny models' weights (K and N up to
~100) exercise padding and splitting in all three dimensions.
"""
from __future__ import annotations

import pytest

from onebit_engine.gemm.npu.xrt import XrtBackend
from tests.fakes.fake_pyxrt import FakePyxrt, write_fake_artifact


@pytest.fixture
def fake() -> FakePyxrt:
    return FakePyxrt()


@pytest.fixture
def artifact(tmp_path):
    return write_fake_artifact(tmp_path / "kernels")


@pytest.fixture
def make_backend(fake, artifact):
    made = []

    def make(xrt=None, manifest=None, **kw):
        b = XrtBackend(xrt or fake, manifest or artifact, **kw)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()
