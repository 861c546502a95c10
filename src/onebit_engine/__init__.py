"""onebit_engine: a readable hybrid-LLM speculative-decoding engine (numpy, pluggable GEMM backends)."""
from .draft import Draft, load_draft
from .errors import (
    BackendUnavailable,
    CheckpointError,
    ConfigError,
    ContextLimitError,
    MissingExtra,
    NumericalError,
    OnebitError,
    OutputError,
    StateError,
    StateMismatch,
    WeightError,
)
from .gemm import available_backends, get_backend, known_backends
from .loop import GenerateResult, RoundStats, SpecResult, generate, speculative_generate
from .hybrid import COMMIT_PATHS, Output, Target, TargetConfig, TargetState, load_target
from .version import __version__

__all__ = [
    "__version__",
    "TargetConfig", "Target", "TargetState", "Output", "load_target", "COMMIT_PATHS",
    "get_backend", "known_backends", "available_backends", "generate", "GenerateResult", "speculative_generate", "SpecResult",
    "RoundStats", "Draft", "load_draft",
    "OnebitError", "ConfigError", "WeightError", "CheckpointError", "BackendUnavailable", "StateError", "StateMismatch",
    "OutputError", "NumericalError", "ContextLimitError", "MissingExtra",
]
