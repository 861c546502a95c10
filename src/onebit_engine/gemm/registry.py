"""Backends by name. Selection happens once, at load time; errors list the known names and why an
unavailable one cannot run here."""
from __future__ import annotations

import importlib
from typing import Any, Callable

from ..errors import BackendUnavailable
from .base import GemmBackend

_FACTORIES: dict[str, Callable[..., GemmBackend]] = {}
# Modules that register a backend when imported; a module that is absent is simply not offered.
_BUILTIN_MODULES = ("onebit_engine.gemm.host_int.backend", "onebit_engine.gemm.npu.xrt")


def register(name: str, factory: Callable[..., GemmBackend]) -> None:
    _FACTORIES[name] = factory


def known_backends() -> list[str]:
    _ensure_builtin()
    return sorted(_FACTORIES)


def backend_status() -> dict[str, str]:
    """name -> "available" or the reason it cannot run here (e.g. no pyxrt)."""
    out = {}
    for name in known_backends():
        try:
            backend = _FACTORIES[name]()
            getattr(backend, "close", lambda: None)()  # a device backend must not keep the NPU open
            out[name] = "available"
        except BackendUnavailable as e:
            out[name] = str(e)
    return out


def available_backends() -> list[str]:
    return [n for n, s in backend_status().items() if s == "available"]


def get_backend(name: "str | GemmBackend", **options: Any) -> GemmBackend:
    """Return a backend instance for ``name`` (an instance passes through unchanged)."""
    if not isinstance(name, str):
        return name
    _ensure_builtin()
    if name not in _FACTORIES:
        raise BackendUnavailable(f"GEMM backend {name!r} is not known; choose one of {sorted(_FACTORIES)}")
    return _FACTORIES[name](**options)


def _ensure_builtin() -> None:
    if "reference" in _FACTORIES:
        return
    from .reference import ReferenceBackend

    register("reference", lambda **_: ReferenceBackend())
    for mod in _BUILTIN_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:  # a real missing dependency inside the module is a bug, not an absence
                raise
