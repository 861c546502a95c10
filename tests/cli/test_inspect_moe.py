"""`onebit inspect` on a mixture-of-experts checkpoint: experts, top-k, sparse layers, active vs total."""
from onebit_engine.hybrid.moe_config import MoeConfig
from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint


def test_inspect_moe_target(run, run_json, tmp_path):
    cfg = tiny_config(moe=MoeConfig(8, 2, 16, 24, True, 1, (0,)))
    folder = write_checkpoint(tmp_path / "moe", cfg, random_weights(cfg, 1))
    d = run_json("inspect", folder)
    moe = d["config"]["moe"]
    assert (moe["num_experts"], moe["top_k"], moe["sparse_layers"]) == (8, 2, [1, 2, 3])
    assert moe["total_params"] == d["total_elements"]  # the config's count agrees with the file's tensors
    assert moe["total_params"] - moe["active_params"] == 3 * 6 * 3 * 16 * 32  # 3 sparse layers x 6 idle experts
    code, out, _ = run("inspect", folder)
    assert code == 0
    assert "moe: 8 experts of 16, top-2, shared expert 24, sparse layers [1, 2, 3]; parameters 51,664 active per token of 79,312 total" in out


def test_inspect_dense_target_has_no_moe_line(run, run_json, pair):
    assert "moe" not in run_json("inspect", pair[0])["config"]
    assert "moe:" not in run("inspect", pair[0])[1]
