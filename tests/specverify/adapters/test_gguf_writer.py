"""helpers.gguf_writer / gguf_tensors without llama.cpp: the layout rules on small examples, and the folders it
refuses (llama.cpp itself runs the converted files in test_llama_cpp_port.py)."""
import json

import numpy as np
import pytest

from pytest_specverify.helpers.gguf_tensors import tiled_v_heads
from pytest_specverify.helpers.gguf_writer import GGUFConversionError, mrope_sections, write_gguf

pytest.importorskip("gguf")


def test_value_heads_go_from_grouped_to_tiled_order():
    # 2 key heads x 2 value heads each, head_dim 1: HF's [k0v0, k0v1, k1v0, k1v1] -> ggml's [k0v0, k1v0, k0v1, k1v1]
    grouped = np.array(["k0v0", "k0v1", "k1v0", "k1v1"])
    assert tiled_v_heads(grouped, 0, 2, 2, 1).tolist() == ["k0v0", "k1v0", "k0v1", "k1v1"]
    cols = np.arange(8).reshape(1, 8)  # head_dim 2 along the columns
    assert tiled_v_heads(cols, 1, 2, 2, 2).tolist() == [[0, 1, 4, 5, 2, 3, 6, 7]]


def _llama_cpp_section(pair: int, sections: list) -> str:
    """Which position llama.cpp's interleaved M-RoPE rotates rotary pair ``pair`` by (ggml-cpu ops.cpp)."""
    sector = pair % sum(sections)
    if sector % 3 == 1 and sector < 3 * sections[1]:
        return "h"
    if sector % 3 == 2 and sector < 3 * sections[2]:
        return "w"
    if sector % 3 == 0 and sector < 3 * sections[0]:
        return "t"
    return "e"  # the 4th position: 0 for a text token


@pytest.mark.parametrize("rope_dim", [2, 4, 6, 8, 16, 64, 128])
def test_mrope_sections_rotate_every_pair_by_a_text_position(rope_dim):
    sections = mrope_sections(rope_dim)
    assert sum(sections) == rope_dim // 2
    assert {_llama_cpp_section(p, sections) for p in range(rope_dim // 2)} <= {"t", "h", "w"}


def test_the_oracle_sees_a_split_that_leaves_a_pair_unrotated():
    assert _llama_cpp_section(1, [2, 0, 0, 0]) == "e"


def _folder(tmp_path, **config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_it_refuses_a_model_type_it_does_not_convert(tmp_path):
    with pytest.raises(GGUFConversionError, match="model_type 'qwen3_5_moe_text' is not one of"):
        write_gguf(_folder(tmp_path, model_type="qwen3_5_moe_text"), tmp_path / "m.gguf")


def test_it_refuses_a_qwen3_next_with_a_dense_layer(tmp_path):
    folder = _folder(tmp_path, model_type="qwen3_next", num_experts=4, mlp_only_layers=[0], shared_expert_intermediate_size=8)
    with pytest.raises(GGUFConversionError, match="needs a mixture of experts with a shared expert in every layer"):
        write_gguf(folder, tmp_path / "m.gguf")
