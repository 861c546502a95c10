"""docs/shapes.md agrees with the shapes table in the code: every shape is listed with its parameter counts."""
from __future__ import annotations

import re
from pathlib import Path

from onebit_engine.synth import SHAPES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "shapes.md"


def test_the_shapes_page_lists_every_shape_with_its_sizes():
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", PAGE.read_text(), re.M)}
    assert set(rows) == set(SHAPES)
    for name, s in SHAPES.items():
        assert f"{s.target_params / 1e9:.2f} B ({s.active_params() / 1e9:.2f} B)" in rows[name], name
        assert f"{s.draft_params / 1e9:.2f} B" in rows[name], name
        assert f"hidden {s.target.hidden_size}, {s.target.num_hidden_layers} layers" in rows[name], name
