"""pytest-specverify: reusable checks that prove a speculative-decoding engine right.

Public API (nothing heavy is imported here): the port protocol, tolerance profiles, the failure type.
The checks themselves live in ``checks``, ``sampling`` and ``fuzz``; ``plugin`` hands them out as fixtures.
"""
from .compare import SpecVerifyFailure
from .protocol import DraftLike, NotSupported, PortOptions, Rows, SpecPort, SpecRun, byte_encode
from .tolerance import PROFILES, Tolerance, profile

__all__ = ["SpecPort", "DraftLike", "Rows", "SpecRun", "PortOptions", "NotSupported", "byte_encode",
           "Tolerance", "PROFILES", "profile", "SpecVerifyFailure"]
