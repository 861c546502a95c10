"""GEMM backends behind one seam (see ``base.py``)."""
from .base import GemmBackend, Linear
from .registry import (
    available_backends,
    backend_status,
    get_backend,
    known_backends,
    register,
)

__all__ = ["GemmBackend", "Linear", "available_backends", "backend_status", "get_backend", "known_backends", "register"]
