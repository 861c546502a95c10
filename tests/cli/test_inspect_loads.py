"""`onebit inspect DIR` says whether the folder loads: the loader's names-and-shapes check, exit 2 and one
error line when it would refuse the folder (the description is still printed)."""
import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

CHECKED = "loads: yes (names and shapes checked; values are scanned when the weights load"


def _edited(src, dest, edit):
    """A copy of a checkpoint folder with its model.safetensors changed by ``edit(tensors)``."""
    shutil.copytree(src, dest)
    t = load_file(str(dest / "model.safetensors"))
    edit(t)
    save_file(t, str(dest / "model.safetensors"))
    return dest


def _refused(run, folder, name):
    code, out, err = run("inspect", folder)
    assert code == 2, err
    assert "tensor" in out  # the description is still printed
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"onebit: error: {folder} does not load: "), err
    assert name in lines[0], err
    code, out, err = run("inspect", folder, "--json")
    loads = json.loads(out)["loads"]
    assert code == 2 and loads["ok"] is False and name in loads["problem"], out


@pytest.mark.parametrize("which", [0, 1])
def test_inspect_good_folder_loads(run, run_json, pair, which):
    d = run_json("inspect", pair[which])
    assert d["loads"]["ok"] is True and d["loads"]["problem"] is None
    assert d["loads"]["checked"].startswith("names and shapes (values are scanned when the weights load")
    code, out, err = run("inspect", pair[which])
    assert code == 0 and CHECKED in out and not err


def test_inspect_servable_quantized_folder_loads(run, run_json, pair, tmp_path):
    run_json("quantize", "--model", pair[0], "--format", "int4", "--out", tmp_path / "q")
    assert run_json("inspect", tmp_path / "q")["loads"]["ok"] is True


def test_inspect_target_missing_tensor(run, pair, tmp_path):
    name = "model.layers.0.mlp.up_proj.weight"
    _refused(run, _edited(pair[0], tmp_path / "m", lambda t: t.pop(name)), name)


def test_inspect_target_wrong_shape(run, pair, tmp_path):
    name = "model.layers.1.mlp.down_proj.weight"

    def shrink(t):
        t[name] = t[name][:, :-1].copy()

    _refused(run, _edited(pair[0], tmp_path / "m", shrink), name)


def test_inspect_target_layer_the_config_lacks(run, pair, tmp_path):
    name = "model.layers.9.mlp.up_proj.weight"

    def extra(t):
        t[name] = np.zeros_like(t["model.layers.0.mlp.up_proj.weight"])

    _refused(run, _edited(pair[0], tmp_path / "m", extra), name)


@pytest.mark.parametrize("broken", ["missing", "wrong-shape"])
def test_inspect_draft_that_does_not_match_its_config(run, pair, tmp_path, broken):
    name = "layers.0.mlp.gate_proj.weight"

    def edit(t):
        if broken == "missing":
            del t[name]
        else:
            t[name] = t[name][:-1].copy()

    _refused(run, _edited(pair[1], tmp_path / "d", edit), name)
