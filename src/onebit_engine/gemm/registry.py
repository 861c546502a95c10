"""Backends by name. Selection happens once, at load time; the error lists the known names."""
from __future__ import annotations

from typing import Any, Callable

from ..errors import BackendUnavailable
from .base import GemmBackend

_FACTORIES: dict[str, Callable[..., GemmBackend]] = {}


def register(name: str, factory: Callable[..., GemmBackend]) -> None:
    _FACTORIES[name] = factory


def known_backends() -> list[str]:
    _ensure_builtin()
    return sorted(_FACTORIES)


def get_backend(name: "str | GemmBackend", **options: Any) -> GemmBackend:
    """Return a backend instance for ``name`` (an instance passes through unchanged)."""
    if not isinstance(name, str):
        return name
    _ensure_builtin()
    if name not in _FACTORIES:
        raise BackendUnavailable(
            f"GEMM backend {name!r} is not known; choose one of {sorted(_FACTORIES)}"
        )
    return _FACTORIES[name](**options)


def _ensure_builtin() -> None:
    if "reference" in _FACTORIES:
        return
    from .reference import ReferenceBackend

    register("reference", lambda **_: ReferenceBackend())
    try:  # host-int and xrt register themselves if their modules are present
        from . import host_int  # noqa: F401
    except ImportError:
        pass
    try:
        from . import xrt  # noqa: F401
    except ImportError:
        pass
