"""Exception hierarchy. Every message names the value, the rule it broke and the way out."""
from __future__ import annotations


class OnebitError(Exception):
    """Base of every error this engine raises on purpose."""


class ConfigError(OnebitError, ValueError):
    """A config value is missing, inconsistent or unsupported."""


class WeightError(OnebitError, ValueError):
    """A checkpoint's tensors do not match what the config requires (all problems listed at once)."""


class CheckpointError(OnebitError, ValueError):
    """A checkpoint folder or file cannot be read (missing, truncated, malformed)."""


class MissingExtra(ConfigError, ImportError):
    """An optional package is not installed; the message names the extra that brings it."""


class BackendUnavailable(OnebitError, RuntimeError):
    """A GEMM backend was asked for but cannot run here; the message says why."""


class StateError(OnebitError, RuntimeError):
    """A state operation was called out of order (commit without verify, too many rows, ...)."""


class StateMismatch(StateError):
    """A commit path's state differs from the replayed reference (names layer, array and max diff)."""

    def __init__(self, layer: int, array: str, max_diff: float, path: str, detail: str = ""):
        self.layer, self.array, self.max_diff, self.path = layer, array, max_diff, path
        super().__init__(
            f"commit path {path!r}: layer {layer} array {array!r} differs from the replayed state "
            f"(max |diff| = {max_diff:.3e}){detail}; the fast path is wrong - use path='replay' "
            f"until it is fixed"
        )


class OutputError(OnebitError, OSError):
    """An output path cannot or must not be written (not a regular file, one of the command's inputs,
    a checkpoint's file, a full disk, no permission); the message names the path."""


class NumericalError(OnebitError, FloatingPointError):
    """A forward produced non-finite logits; the run stops at that step rather than emit a token."""


class NonFiniteActivations(NumericalError, ValueError):
    """An exact integer backend was handed activation rows holding NaN or inf (a forward overflowed before a
    GEMM); a ValueError too, as the quantizer's other refusals are."""


class ContextLimitError(OnebitError, ValueError):
    """A run would go past the model's ``max_position_embeddings``."""
