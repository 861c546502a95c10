"""GEMM backends behind one seam (see ``base.py``)."""
from .base import GemmBackend, Linear
from .registry import get_backend, known_backends, register

__all__ = ["GemmBackend", "Linear", "get_backend", "known_backends", "register"]
