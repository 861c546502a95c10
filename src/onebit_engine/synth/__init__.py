"""Real model shapes (``shapes.py``) and seeded random servable checkpoints of any of them (``folder.py``),
written directly in their quantized form (no float copy of the model)."""
from .shapes import SHAPES, Shape, get_shape

__all__ = ["SHAPES", "Shape", "get_shape"]
