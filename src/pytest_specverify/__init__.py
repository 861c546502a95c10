"""pytest-specverify: reusable checks that prove a speculative-decoding engine right.

Public API (nothing heavy is imported here): the port protocol, tolerance profiles, the failure type, the
``DeviceStatus`` a ``pytest_specverify_device_status`` hook returns.
The checks themselves live in ``checks``, ``sampling_check``, ``fuzz`` and their neighbours; ``verifier.Verifier``
binds them to a port, and ``plugin`` hands it out as the ``specverify`` fixture (the ``check_*`` fixtures are its
methods).
"""
from .failure import SpecVerifyFailure
from .device_gate import DeviceStatus
from .protocol import DraftLike, NotSupported, PortOptions, Rows, SpecPort, SpecRun, byte_encode
from .tolerance import PROFILES, Tolerance, profile

__all__ = ["SpecPort", "DraftLike", "Rows", "SpecRun", "PortOptions", "NotSupported", "byte_encode",
           "Tolerance", "PROFILES", "profile", "SpecVerifyFailure", "DeviceStatus"]
