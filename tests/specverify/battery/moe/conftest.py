"""The battery on mixture-of-experts targets, through the adapter pointed at a checkpoint folder:
a tiny qwen3_next checkpoint (one dense layer among sparse ones, a shared expert) and a qwen3_5_moe_text
one (every layer sparse, no shared expert); qwen3_next on reference and host-int, qwen3_5_moe on host-int
(three ports, not four: the battery's sampling checks cost ~16 s a port)."""
import pytest

from pytest_specverify.protocol import PortOptions

CHECKPOINTS = {
    "qwen3_next": dict(moe=(8, 2, 16, 16, True, 1, (0,)), layers=3),
    "qwen3_5_moe": dict(moe=(6, 3, 16, 0, True, 1, ()), layers=2),
}


@pytest.fixture(scope="session", params=["qwen3_next:reference", "qwen3_next:host-int", "qwen3_5_moe:host-int"])
def specverify_port(request, specverify_settings, tmp_path_factory):
    from onebit_engine.hybrid.moe_config import MoeConfig
    from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint
    from pytest_specverify.adapters.onebit import make_folder_port

    kind, backend = request.param.split(":")
    spec = CHECKPOINTS[kind]
    cfg = tiny_config(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=spec["layers"],
                      full_attention_interval=spec["layers"], moe=MoeConfig(*spec["moe"]))
    folder = write_checkpoint(tmp_path_factory.mktemp(kind), cfg, random_weights(cfg, 1000 + specverify_settings.seed))
    s = specverify_settings
    return make_folder_port(folder, PortOptions(backend=backend, row_set=s.row_set, seed=s.seed), name=f"onebit-{kind}-{backend}")
