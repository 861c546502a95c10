"""The scale benchmark's ceilings (measure/roofline.py): the multiply-adds a step and a draft round do, the
rate the backend does them at, and the floors and ceiling they give."""
from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

from onebit_engine import load_draft, load_target
from onebit_engine.gemm import Linear, get_backend
from onebit_engine.hybrid.moe_mlp import sparse_blocks
from onebit_engine.measure.oracle import profile
from onebit_engine.measure.roofline import WEIGHT_SHAPE, MacRate, active_sum, ceilings, draft_round, linear_macs, verify_extra_bytes
from onebit_engine.measure.scale_bench import _summarize, step_bytes
from onebit_engine.measure.walk import linears, packed_bytes
from onebit_engine.synth import SHAPES
from onebit_engine.synth.folder import synthesize


# norms, conv taps, A_log and dt_bias: parameters the shape table counts that no GEMM
# multiplies; under 3% of a shrunk shape's parameters (less at full size)
NON_GEMM_PARAMS_SHARE = 0.03


@pytest.fixture(scope="module", params=["qwen3.6-27b", "qwen3.5-35b-a3b", "qwen3.5-0.8b"])
def pair(request, tmp_path_factory):
    shape = SHAPES[request.param].shrunk()
    folder = synthesize(shape, "int8", tmp_path_factory.mktemp("pair"), seed=2)
    target = load_target(folder / "target", backend="host-int")
    return shape, target, load_draft(folder / "draft", target, backend="host-int")


def test_a_steps_multiply_adds_agree_with_the_shape_table(pair):
    """Two independent counts: the shape table's parameter arithmetic and a walk over the loaded projections.
    Per row a step multiplies every active weight once, except the embedding (a lookup); an untied model
    stores the lm_head apart, a tied one reuses the embedding as its lm_head. Norms, conv taps and gates are
    not GEMM weights: the tolerance."""
    shape, target, _ = pair
    cfg = shape.target
    embedding = cfg.vocab_size * cfg.hidden_size
    expected = shape.active_params() - (0 if cfg.tie_word_embeddings else embedding)
    assert active_sum(target, linear_macs) == pytest.approx(expected, rel=NON_GEMM_PARAMS_SHARE)


def test_a_sparse_block_counts_top_k_experts_only(pair):
    shape, target, _ = pair
    everything = sum(linear_macs(x) for x in linears(target.layers)) + linear_macs(target.lm_head)
    moe = shape.target.moe
    if moe is None:
        assert active_sum(target, linear_macs) == everything
        return
    per_expert = linear_macs(target.layers[0].mlp.experts[0].gate_up) + linear_macs(target.layers[0].mlp.experts[0].down)
    skipped = sum(len(layer.mlp.experts) - moe.num_experts_per_tok for layer in target.layers) * per_expert
    assert active_sum(target, linear_macs) == everything - skipped
    assert step_bytes(target)["weights"] == active_sum(target, packed_bytes)


def test_a_draft_round_runs_its_layers_on_the_block_and_the_lm_head_on_the_drafts(pair):
    _, target, draft = pair
    layers, head = draft_round(draft, linear_macs)
    assert head == linear_macs(target.lm_head) == target.config.vocab_size * target.config.hidden_size
    assert layers == sum(linear_macs(x) for layer in draft.layers for x in linears(layer)) > 0
    assert draft_round(draft, packed_bytes)[1] == packed_bytes(target.lm_head)


def test_floors_and_ceiling_arithmetic():
    # a step of 1 G multiply-adds and 1 GB, 8 rows at 100 G/s: verify 80 ms of compute against 20 ms of memory
    out = ceilings(k=7, step_macs=10**9, step_bytes=10**9, draft_macs=(10**8, 10**8), draft_bytes=(10**8, 10**8),
                   gmac_s=100.0, stream_gb_s=50.0, tokens_per_round=4.0, plain_tokens_per_s=40.0, plain_step_ms=25.0)
    assert out["verify_floor_ms"] == pytest.approx(80.0) and out["verify_bound_by"] == "compute"
    assert out["draft_floor_ms"] == pytest.approx((8e8 + 7e8) / 100e9 * 1e3) and out["draft_bound_by"] == "compute"
    assert out["plain_floor_ms"] == pytest.approx(20.0)
    assert out["verify_floor_over_plain_step"] == pytest.approx(80.0 / 25.0)
    assert out["loop_ceiling_vs_plain"] == pytest.approx(4.0 / 0.095 / 40.0)
    # the same step at 10x the rate: memory-bound, the floor is the stream's
    fast = ceilings(k=7, step_macs=10**9, step_bytes=10**9, draft_macs=(10**8, 10**8), draft_bytes=(10**8, 10**8),
                    gmac_s=1000.0, stream_gb_s=50.0, tokens_per_round=4.0, plain_tokens_per_s=40.0, plain_step_ms=25.0)
    assert fast["verify_floor_ms"] == pytest.approx(20.0) and fast["verify_bound_by"] == "memory"
    assert fast["draft_floor_ms"] == pytest.approx(4.0) and fast["draft_bound_by"] == "memory"
    # a sparse verify that reads 3x a step's bytes: its memory floor triples, the plain step's does not
    wide = ceilings(k=7, step_macs=10**9, step_bytes=10**9, draft_macs=(10**8, 10**8), draft_bytes=(10**8, 10**8),
                    gmac_s=1000.0, stream_gb_s=50.0, tokens_per_round=4.0, plain_tokens_per_s=40.0, plain_step_ms=25.0,
                    verify_bytes=3 * 10**9)
    assert wide["verify_floor_ms"] == pytest.approx(60.0) and wide["plain_floor_ms"] == pytest.approx(20.0)
    assert "null_reason" in ceilings(k=7, step_macs=1, step_bytes=1, draft_macs=(1, 1), draft_bytes=(1, 1), gmac_s=None,
                                     stream_gb_s=50.0, tokens_per_round=4.0, plain_tokens_per_s=1.0, plain_step_ms=1.0)


class _TimedBackend:
    """A backend whose products take the given seconds in turn (the last repeating): the rate must come out
    as rows x N x K over the fastest timed call."""

    def __init__(self, seconds: list):
        self.seconds = list(seconds)

    def pack(self, w, name=""):
        return w

    def matmul(self, x, w):
        time.sleep(self.seconds.pop(0) if len(self.seconds) > 1 else self.seconds[0])
        return x @ w.T


def test_the_rate_is_the_products_multiply_adds_over_the_fastest_call():
    # an untimed first call, then a slow one (a cold cache, a busy core), then steady ones
    rate = MacRate(_TimedBackend([0.0, 0.2, 0.1, 0.02]), rows=8).gmac_s()
    work = 8 * WEIGHT_SHAPE[0] * WEIGHT_SHAPE[1] / 1e9
    # a sleep overshoots (more on a busy machine), never undershoots; the slow calls must not count
    assert work / 0.08 < rate <= work / 0.02


def test_summary_carries_the_ceiling_and_the_share_of_it(pair):
    """The rate is the run's best per-thread rate times the loop's threads (a 2-thread product pays the pool's
    cost, which a ceiling must not): here 80 G/s on one thread beats 140 on two, so 160."""
    _, target, draft = pair
    rates = {("plain", 1): [10.0], ("loop", 1): [20.0], ("loop_one", 1): [18.0], ("stream", 1): [30.0],
             ("compute", 1): [50.0, 80.0], ("plain", 2): [12.0], ("loop", 2): [24.0], ("loop_one", 2): [21.0],
             ("stream", 2): [40.0], ("compute", 2): [100.0, 140.0]}
    rnd = SimpleNamespace(draft_ms=1.0, verify_ms=2.0, commit_ms=0.5, total_ms=3.5, emitted=4, proposed=3, accepted=3,
                          passes=(2, 2))
    one = SimpleNamespace(draft_ms=1.0, verify_ms=3.0, commit_ms=0.5, total_ms=4.5, emitted=4, proposed=3, accepted=3,
                          passes=(4,))
    rounds = {(kind, t): [rnd if kind == "loop" else one] for t in (1, 2) for kind in ("loop", "loop_one")}
    out = _summarize(target, profile("0.8", 3), 3, [1, 2], rates, rounds, [], [1, 2, 3], draft)
    roof = out["roofline"]
    assert out["multiply_add_gmac_s"] == {1: 80.0, 2: 140.0} and roof["gmac_s"] == 160.0 and roof["stream_gb_s"] == 40.0
    assert roof["speedup_share_of_ceiling"] == pytest.approx(2.0 / roof["loop_ceiling_vs_plain"])
    assert roof["step_macs"] == active_sum(target, linear_macs)
    assert np.isfinite(roof["loop_ceiling_vs_plain"])
    # the passes: the loop's own rounds for its phases, the one-pass loop's for verify(k+1), both speedups
    assert out["speedup_vs_plain"] == 2.0 and out["speedup_one_pass_vs_plain"] == 1.75
    assert out["phase_ms"]["verify"] == 2.0 and out["phase_ms_one_pass"]["verify"] == 3.0
    assert out["verify_passes"] == {"2+2": 1}
    assert out["verify_full_ms"] == {"mean": 3.0, "median": 3.0, "rounds": 1}  # the loop's threads' one-pass rounds
    assert roof["staged_verify_floor_ms"] <= roof["verify_floor_ms"] + 1e-12
    assert _summarize(target, profile("0.8", 3), 3, [1, 2], rates, rounds, [], [1, 2, 3])["roofline"] is None


def test_linear_macs_is_the_weights_shape():
    lin = Linear.from_weight(np.zeros((6, 10), np.float32), get_backend("reference"), 8, "w")
    assert linear_macs(lin) == 60


def test_the_rate_on_the_engines_own_backend_is_a_rate():
    rate = MacRate(get_backend("host-int", threads=1), rows=8).gmac_s()
    assert np.isfinite(rate) and rate > 0.1  # G multiply-adds a second: any CPU that runs the tests does more


def test_a_verify_reads_the_distinct_experts_its_rows_route_to(pair):
    """One row reads what a step reads; 8 rows of a sparse model read every distinct expert they chose once
    (counted here from the blocks' own traces); a dense model's verify reads a step's bytes."""
    shape, target, _ = pair
    total = step_bytes(target)["total"]
    prompt, rows = [3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5, 8, 9]
    assert verify_extra_bytes(target, prompt, rows[:1]) == 0
    got = total + verify_extra_bytes(target, prompt, rows)
    blocks = sparse_blocks(target)
    assert all(b.trace is None for b in blocks)  # the tracing is undone
    if shape.target.moe is None:
        assert got == total
        return
    state = target.new_state()
    target.forward(prompt, state)
    for b in blocks:
        b.trace = []
    target.verify(rows, state, logits=False)
    per = sum(packed_bytes(x) for x in linears(blocks[0].experts[0]))
    want = total + sum((len(set().union(*b.trace)) - shape.target.moe.num_experts_per_tok) * per for b in blocks)
    assert per > 0 and got == want > total
    mine = [list(b.trace) for b in blocks]  # a caller tracing its own run keeps its trace through the count
    assert verify_extra_bytes(target, prompt, rows) == got - total
    assert [b.trace for b in blocks] == mine
    for b in blocks:
        b.trace = None
