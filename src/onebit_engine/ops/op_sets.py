"""The one name that picks which twin of the non-GEMM ops a model runs: ``ops=`` of ``Target``,
``load_target``, ``load_draft`` and ``Draft``, chosen once when the model is built.

* ``"numpy"``: the readable reference twins, numpy, one token or one row at a time where order matters;
* ``"numba"``: their compiled twins (``ops/*_fast.py``, ``draft/kernels/``), the same math and the same
  per-row order, sums in float32 loops (so within a named tolerance of numpy, not bitwise);
* ``"auto"``: numba when it is installed, else numpy.

Each model holds a table of its ops for either name (``hybrid/ops.py``, ``draft/ops.py``) and calls only
through it: one choice per model, made here, recorded in a run's provenance (``ops``, ``draft_ops``). The
choice is not made inside each op (as mlx-lm picks a Metal kernel per call) because the two twins round
differently: a model must run one of them end to end, and say which.
"""
from __future__ import annotations

from ..errors import ConfigError
from .norm_fast import nb

OPS_NAMES = ("auto", "numpy", "numba")


def numba_installed() -> bool:
    return nb is not None


def resolve_ops_name(name: object, what: str) -> str:
    """``"numpy"`` or ``"numba"`` for an ``ops=`` value; ``what`` names the model in the error ("target", "draft")."""
    if name not in OPS_NAMES:
        raise ConfigError(f"{what} ops {name!r} is not one of {OPS_NAMES}; pass ops='auto' (numba when installed) or 'numpy'")
    if name == "numba" and not numba_installed():
        raise ConfigError(f"{what} ops 'numba' needs the numba package (pip install 'onebit-specverify[fast]'); or use ops='numpy'")
    return "numba" if name != "numpy" and numba_installed() else "numpy"
