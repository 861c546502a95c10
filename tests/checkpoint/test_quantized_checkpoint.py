"""A quantized checkpoint folder (``onebit quantize --out DIR``) serves: host-int runs its codes as they
are, bitwise equal to host-int quantizing the float checkpoint itself; reference runs the dequantization."""
import numpy as np
import pytest

from onebit_engine import load_target
from onebit_engine.cli import main
from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint


@pytest.mark.parametrize("fmt", ["int8", "int4", "ternary"])
def test_quantized_folder_equals_on_the_fly_quantization(tmp_path, fmt):
    cfg = tiny_config(vocab_size=64)
    src = write_checkpoint(tmp_path / "float", cfg, random_weights(cfg, 4))
    dest = tmp_path / f"q-{fmt}"
    assert main(["quantize", "--model", str(src), "--format", fmt, "--out", str(dest), "--json"]) == 0
    served = load_target(dest, backend="host-int")
    on_the_fly = load_target(src, backend=HostIntBackend(weight_format=fmt))
    toks = [3, 1, 4, 1, 5, 9, 2, 6]
    a = served.forward(toks, served.new_state()).logits
    b = on_the_fly.forward(toks, on_the_fly.new_state()).logits
    assert np.array_equal(a, b)
    ref = load_target(dest, backend="reference")  # runs the dequantized weights in float
    assert np.isfinite(ref.forward(toks, ref.new_state()).logits).all()


def test_quantize_refuses_a_non_empty_folder(tmp_path, capsys):
    cfg = tiny_config(vocab_size=64)
    src = write_checkpoint(tmp_path / "float", cfg, random_weights(cfg, 4))
    dest = tmp_path / "busy"
    dest.mkdir()
    (dest / "keep.txt").write_text("x")
    assert main(["quantize", "--model", str(src), "--out", str(dest)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (dest / "keep.txt").exists() and not (dest / "config.json").exists()
