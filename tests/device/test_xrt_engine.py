"""The engine on xrt-with-the-fake: a Target forward and the speculative loop equal host-int bit for bit."""
from __future__ import annotations

import numpy as np

from onebit_engine.draft import load_draft
from onebit_engine.draft.synthetic import write_synthetic_draft
from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.loop.generate import generate
from onebit_engine.loop.speculative import speculative_generate
from onebit_engine.measure.provenance import loop_provenance
from onebit_engine.hybrid.synthetic import random_target, tiny_config


def test_target_forward_on_xrt_equals_host_int(make_backend):
    cfg = tiny_config()
    xb = make_backend()
    on_dev = random_target(cfg, 3, backend=xb, scale=2.0)
    on_host = random_target(cfg, 3, backend=HostIntBackend(), scale=2.0)
    tokens = [5, 17, 3, 88, 41, 0, 9, 9, 60, 2, 33]
    s1, s2 = on_dev.new_state(), on_host.new_state()
    a, b = on_dev.forward(tokens, s1), on_host.forward(tokens, s2)
    assert np.array_equal(a.logits.view(np.uint32), b.logits.view(np.uint32))
    assert np.array_equal(a.hidden.view(np.uint32), b.hidden.view(np.uint32))
    for name, arr in s1.arrays().items():
        assert np.array_equal(arr, s2.arrays()[name]), name
    assert xb.events["dispatches"] > 0 and xb.events["fallbacks"] == 0


def test_target_forward_survives_faults_bitwise(make_backend, fake):
    cfg = tiny_config()
    xb = make_backend(retries=1)
    on_dev = random_target(cfg, 4, backend=xb, scale=2.0)
    on_host = random_target(cfg, 4, backend=HostIntBackend(), scale=2.0)
    fake.inject(*(["ok"] * 5 + ["timeout", "noop", "abort", "abort", "garbage", "timeout_late"]) * 3)
    tokens = list(range(1, 14))
    a = on_dev.forward(tokens, on_dev.new_state())
    b = on_host.forward(tokens, on_host.new_state())
    assert np.array_equal(a.logits.view(np.uint32), b.logits.view(np.uint32))
    ev = xb.events
    assert all(ev[k] >= 1 for k in ("timeout", "noop", "abort", "bad_output", "retries", "fallbacks")), ev


def test_draft_on_xrt_target_on_host_int_loop_unchanged(tmp_path, make_backend, fake):
    cfg = tiny_config(vocab_size=72)
    target = random_target(cfg, 1, backend="host-int", scale=2.0)
    folder = write_synthetic_draft(tmp_path / "draft", cfg, version=2, seed=1)
    d_host = load_draft(folder, target, backend="host-int")
    xb = make_backend()
    d_xrt = load_draft(folder, target, backend=xb)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    plain = generate(target, prompt, max_new_tokens=24).tokens
    ref = speculative_generate(target, d_host, prompt, max_new_tokens=24, k=4)
    fake.inject(*["ok"] * 40 + ["timeout", "noop"] * 3)
    got = speculative_generate(target, d_xrt, prompt, max_new_tokens=24, k=4)
    assert got.tokens == ref.tokens == plain
    assert [r.accepted for r in got.rounds] == [r.accepted for r in ref.rounds]  # the draft proposed the same
    assert xb.events["dispatches"] > 0 and xb.events["noop"] >= 1
    # the run's result says where the draft ran and what the device did (retries, no-ops, fallbacks)
    prov = loop_provenance(target, d_xrt, k=4)  # the caller reports it (the loop computes none)
    assert prov["backend"] == "host-int" and prov["draft_backend"] == "xrt"
    assert prov["draft_backend_events"]["noop"] >= 1 and "draft_npu_generation" in prov
