"""The hybrid target: config, checkpoint layouts, per-layer state, the layers, the model and the commit.

Read in this order: ``config.py`` (what a checkpoint says), ``weights.py`` (how its tensors map to the
engine's names), ``state.py`` (what a decode carries between calls), ``layers.py`` (Gated DeltaNet,
gated attention, the MLPs), ``ops.py`` (what the layers run between their projections: the numpy
twins and their compiled versions, one table chosen by ``ops=``), ``model.py`` (``Target``: prefill, step, batched verify), ``commit.py``
(keeping the accepted rows of a verify).
"""
from .commit import COMMIT_PATHS
from .config import TargetConfig
from .model import Output, Target, load_target
from .state import TargetState

__all__ = ["COMMIT_PATHS", "Output", "Target", "TargetConfig", "TargetState", "load_target"]
