"""onebit_engine: a readable hybrid-LLM speculative-decoding engine (numpy, pluggable GEMM backends)."""
from .config import TargetConfig
from .errors import (
    BackendUnavailable, CheckpointError, ConfigError, ContextLimitError, MissingExtra, NumericalError, OnebitError, OutputError,
    StateError, StateMismatch, WeightError,
)
from .gemm import available_backends, get_backend, known_backends
from .state import TargetState
from .target import COMMIT_PATHS, Output, Target, load_target
from .generate import GenerateResult, generate
from .speculative import RoundStats, SpecResult, speculative_generate
from .draft import Draft, load_draft

__version__ = "0.1.0"

__all__ = [
    "TargetConfig", "Target", "TargetState", "Output", "load_target", "COMMIT_PATHS",
    "get_backend", "known_backends", "available_backends", "generate", "GenerateResult", "speculative_generate", "SpecResult",
    "RoundStats", "Draft", "load_draft",
    "OnebitError", "ConfigError", "WeightError", "CheckpointError", "BackendUnavailable", "StateError", "StateMismatch",
    "OutputError", "NumericalError", "ContextLimitError", "MissingExtra",
]
