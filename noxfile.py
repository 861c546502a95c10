"""Sessions: ``host`` (CI, no NPU), ``device`` (needs an NPU; fails without one), ``bench``,
``kernels`` (needs the mlir-aie toolchain), ``lint``. Every session forwards ``session.posargs``."""
from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["host"]
nox.options.reuse_existing_virtualenvs = True

# torch is pinned to the CPU build this platform carries; a bare "torch" would pull a CUDA build.
TORCH = "torch==2.13.0"


def _install(session: nox.Session, extras: str) -> None:
    session.install("--upgrade", "pip")
    session.install(TORCH)
    session.install("-e", f".[{extras}]")
    # z-lab's DFlash reference (torch): its own pins (datasets, an older transformers) are not needed to
    # import dflash.model, so it is installed without them.
    session.install("--no-deps", "dflash==0.1.0")


@nox.session(python="3.11")
def host(session: nox.Session) -> None:
    """The whole host test suite (no NPU): engine, HF/DFlash oracles, plugin, fake-XRT device side."""
    _install(session, "test,oracle,fast,cli,train")
    session.run(
        "pytest", "-p", "no:cacheprovider", "-n", os.environ.get("PYTEST_WORKERS", "2"), "-m", "not device",
        *session.posargs, env={"HYPOTHESIS_PROFILE": "ci", "OMP_NUM_THREADS": "1"},
    )
