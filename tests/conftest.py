pytest_plugins = ["pytester"]

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("thorough", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def pool_jobs(monkeypatch):
    """``ops.row_jobs.RowJobs`` on the host-int library's pool that takes every call of 2+ jobs (the work rule's
    threshold set to nothing) and records its team calls in ``.calls`` (fn, first job, njobs, threads)."""
    from onebit_engine.gemm.host_int import native
    from onebit_engine.ops import row_jobs

    if not row_jobs.row_jobs_ready():
        pytest.skip("needs numba (the fast extra)")
    try:
        lib = native.load("main")
    except native.NativeUnavailable as e:
        pytest.skip(f"the host-int library is not built here: {e}")
    monkeypatch.setattr(row_jobs, "WORK_NS_PER_THREAD", 1e-9)
    calls = []

    def team(*a):
        calls.append(a)
        lib.team(*a)

    rj = row_jobs.RowJobs(team, lib.data_off)
    rj.calls = calls
    return rj
