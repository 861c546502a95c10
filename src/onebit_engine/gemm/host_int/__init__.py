"""The ``host-int`` backend: the device numerics contract computed on the host, bit for bit.

``backend.py`` (the backend and its dispatch), ``layout.py`` (the tiled weight layout), ``native.py``
(building the C kernels and reading the CPU's features), ``int_kernels.py`` (the integer products and
their numpy / numba twins), and the C sources (``kernel.c`` and its paths ``avx2.c`` / ``vnni.c``).
"""
from .backend import HostIntBackend

__all__ = ["HostIntBackend"]
