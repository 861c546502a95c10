"""The DFlash / DFlash 2 block-diffusion draft (numpy). See docs/draft.md."""
from .config import DraftConfig
from .loader import load_draft
from .model import Draft, Proposal
from .state import DraftState
from .synthetic import write_synthetic_draft

__all__ = ["Draft", "DraftConfig", "DraftState", "Proposal", "load_draft", "write_synthetic_draft"]
