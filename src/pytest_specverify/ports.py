"""Finding ports by name: the ``specverify.ports`` entry-point group (``name = "module:factory"``,
factory(PortOptions) -> SpecPort), plus the built-in onebit adapter."""
from __future__ import annotations

from typing import Callable

ENTRY_POINT_GROUP = "specverify.ports"
BUILTIN = {"onebit": "pytest_specverify.adapters.onebit:make_port",
           "onebit-trained": "pytest_specverify.adapters.onebit:make_trained_port",
           "transformers": "pytest_specverify.adapters.transformers:make_port"}


def available_ports() -> dict[str, str]:
    from importlib.metadata import entry_points

    found = dict(BUILTIN)
    found.update({ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)})
    return found


def load_port_factory(name: str) -> Callable:
    import importlib

    known = available_ports()
    if name not in known:
        raise LookupError(f"no specverify port named {name!r}; known ports: {sorted(known)} (register one under the "
                          f"{ENTRY_POINT_GROUP!r} entry-point group, or override the specverify_port fixture in a conftest.py)")
    module, _, attr = known[name].partition(":")
    return getattr(importlib.import_module(module), attr)
