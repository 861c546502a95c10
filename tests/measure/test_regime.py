"""regime: the last-level cache read from sysfs (a fake tree), its fallbacks, the weight bytes a round
reads, and the in-cache verdict with its sentence."""
import numpy as np
import pytest
from safetensors.numpy import load_file

from onebit_engine.draft import load_draft, write_synthetic_draft
from onebit_engine.hybrid.synthetic import file_shapes, random_target, tiny_config
from onebit_engine.measure import regime
from onebit_engine.measure.regime import CacheSize, Regime


def _index(root, i, level, kind, size):
    d = root / f"index{i}"
    d.mkdir(parents=True)
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{kind}\n")
    (d / "size").write_text(f"{size}\n")


def test_parse_size():
    assert regime.parse_size("48K") == 48 << 10
    assert regime.parse_size("32768K\n") == 32 << 20
    assert regime.parse_size("1M") == 1 << 20
    assert regime.parse_size("4096") == 4096
    with pytest.raises(ValueError):
        regime.parse_size("lots")


def test_last_level_cache_is_the_highest_data_level(tmp_path):
    _index(tmp_path, 0, 1, "Data", "48K")
    _index(tmp_path, 1, 1, "Instruction", "32K")
    _index(tmp_path, 2, 2, "Unified", "1024K")
    _index(tmp_path, 3, 3, "Unified", "32768K")
    c = regime.last_level_cache(tmp_path)
    assert (c.size, c.level) == (32 << 20, 3) and "index3" in c.source


def test_an_instruction_cache_is_never_the_last_level(tmp_path):
    _index(tmp_path, 0, 1, "Data", "32K")
    _index(tmp_path, 1, 2, "Instruction", "8M")  # a (made-up) big instruction cache holds no weights
    c = regime.last_level_cache(tmp_path)
    assert (c.size, c.level) == (32 << 10, 1)


@pytest.mark.parametrize("broken", ["missing", "garbage"])
def test_no_sysfs_falls_back_to_sysconf_then_unknown(tmp_path, monkeypatch, broken):
    if broken == "garbage":
        _index(tmp_path, 0, 3, "Unified", "a lot")
    root = tmp_path if broken == "garbage" else tmp_path / "absent"
    monkeypatch.setattr(regime.os, "sysconf", lambda name: 8 << 20 if name == "SC_LEVEL3_CACHE_SIZE" else 0)
    c = regime.last_level_cache(root)
    assert (c.size, c.level) == (8 << 20, 3) and c.source.startswith("sysconf")

    def refuse(name):
        raise ValueError(name)

    monkeypatch.setattr(regime.os, "sysconf", refuse)
    c = regime.last_level_cache(root)
    assert c.size is None and c.source.startswith("unknown")
    assert Regime(1000, c).in_cache is None and "unknown" in Regime(1000, c).why()


def test_this_machine_reads_a_size_or_says_unknown():
    c = regime.last_level_cache()
    assert (c.size is None) == c.source.startswith("unknown")
    assert c.size is None or c.size > 0


def test_weight_bytes_counts_every_projection_once(tmp_path):
    cfg = tiny_config()
    target = random_target(cfg, 1, backend="reference", row_set=8)
    # the reference backend holds float32 weights: every 2-D projection of the checkpoint, not the embedding
    want = 4 * sum(int(np.prod(s)) for n, s in file_shapes(cfg).items() if len(s) == 2 and "embed_tokens" not in n)
    assert regime.weight_bytes(target) == want
    folder = write_synthetic_draft(tmp_path, cfg, version=1, block_size=4, seed=2)
    draft = load_draft(folder, target, backend="reference")
    shapes = {n: a.shape for n, a in load_file(str(next(folder.glob("*.safetensors")))).items() if a.ndim == 2}
    # the draft's own projections, k_proj and v_proj twice (fused for the block and again for the context
    # rows); the lm_head it shares with the target is not counted again
    own = sum(int(np.prod(s)) for s in shapes.values()) + sum(int(np.prod(s)) for n, s in shapes.items()
                                                             if n.endswith(("k_proj.weight", "v_proj.weight")))
    assert draft.lm_head is target.lm_head
    assert regime.weight_bytes(target, draft) == want + 4 * own


def test_verdict_and_sentences():
    l3 = CacheSize(32 << 20, 3, "sysfs test")
    small, big = Regime(3 << 20, l3), Regime(900 << 20, l3)
    assert small.in_cache is True and big.in_cache is False
    assert Regime(32 << 20, l3).in_cache is True and Regime((32 << 20) + 1, l3).in_cache is False
    assert "fit in this CPU's 32.0 MiB L3 cache" in small.why() and "k+1 plain steps" in small.why()
    assert "do not fit" in big.why() and "ride along" in big.why()
    assert small.describe() == {"weight_bytes": 3 << 20, "cache_bytes": 32 << 20, "cache_level": 3,
                                "cache_source": "sysfs test", "in_cache": True}


def test_planner_for_probes_only_an_auto_planner_whose_weights_stream(tmp_path):
    """The loop's planner gets a probe of the memory's minute where the weights stream (a 4 KiB "cache" here),
    not where they fit in the cache (32 MiB), nor for a fixed schedule; a planner object passes through as given."""
    from onebit_engine.loop.stages import StagePlanner

    target = random_target(tiny_config(), 1, backend="reference", row_set=8)
    small, big = tmp_path / "small", tmp_path / "big"
    _index(small, 0, 3, "Unified", "4K")
    _index(big, 0, 3, "Unified", "32768K")
    small, big = regime.regime(target, None, small), regime.regime(target, None, big)
    assert small.in_cache is False and big.in_cache is True
    b = target.backend
    streams = regime.planner_for("auto", small, b, threads=1)
    assert streams.mode == "auto" and streams.probe is not None
    rate, spent = streams.probe()  # a real read of the probe's buffer (the reference backend: numpy's loop)
    assert rate > 0 and spent > 0
    assert regime.planner_for("auto", big, b, threads=1).probe is None
    assert regime.planner_for("one", small, b, threads=1).probe is None
    assert regime.planner_for(3, small, b, threads=1).probe is None
    given = StagePlanner("auto")
    assert regime.planner_for(given, small, b, threads=1) is given and given.probe is None
