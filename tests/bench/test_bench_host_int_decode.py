"""Plain greedy decode tokens/s: host-int (row_set=1) vs HF transformers fp32 CPU, same config, same run.

Group ``decode-medium``: hidden 768, 12 layers (3 delta-net : 1 attention), vocab 32000, intermediate
2048 (``tools/host_int_report.py medium_config``), random weights, 32 new tokens after an 8-token
prompt; one benchmark round = one whole ``generate`` (prefill included; compare the rounds, or use
``extra_info["tokens_per_s"]``, which excludes the prefill). Target: host-int >= 4x HF.

Group ``model-verify-medium`` (or ``-tiny``): on the same config, a plain 1-row step (row set 1) and a
verify of 8 rows (row set 8) of one prefilled state; verify(8) / step is the issue's ratio at model
level. With benchmarks disabled (the host suite) the tiny config runs once, so the setup stays light.
"""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from onebit_engine.gemm.host_int.backend import HostIntBackend
from onebit_engine.loop.generate import generate
from onebit_engine.quant import FORMATS
from onebit_engine.hybrid import Target
from onebit_engine.hybrid.synthetic import random_weights, tiny_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from host_int_report import _hf_model, medium_config  # noqa: E402

THREADS = 1  # explicit; the machine is shared (docs/host-int.md)
PROMPT = list(range(1, 9))


@pytest.fixture(scope="module")
def cfg(pytestconfig):
    return tiny_config() if pytestconfig.getoption("benchmark_disable", False) else medium_config()


@pytest.fixture(scope="module")
def new_tokens(pytestconfig):
    return 4 if pytestconfig.getoption("benchmark_disable", False) else 32


@pytest.mark.parametrize("fmt", FORMATS)
def test_decode_host_int(benchmark, cfg, new_tokens, fmt):
    benchmark.group = "decode-medium" if cfg.vocab_size == 32000 else "decode-tiny"
    t = Target(cfg, random_weights(cfg, 0), backend=HostIntBackend(weight_format=fmt, threads=THREADS), row_set=1)
    generate(t, PROMPT, max_new_tokens=2)
    r = benchmark(generate, t, PROMPT, max_new_tokens=new_tokens, stop_tokens=[])
    benchmark.extra_info.update(tokens_per_s=r.tokens_per_s, kernel=t.backend.kernel, threads=THREADS)


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs the oracle extra (transformers)")
def test_decode_hf_fp32(benchmark, cfg, new_tokens):
    import time

    import torch

    benchmark.group = "decode-medium" if cfg.vocab_size == 32000 else "decode-tiny"
    model = _hf_model(cfg, THREADS)
    ids = torch.tensor([PROMPT])
    run = lambda: model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,  # noqa: E731
                                 do_sample=False, use_cache=True)
    with torch.inference_mode():
        run()
        out = benchmark(run)
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=1, do_sample=False, use_cache=True)
        prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        run()
        total = time.perf_counter() - t0
    assert out.shape[1] == len(PROMPT) + new_tokens
    benchmark.extra_info.update(tokens_per_s=(new_tokens - 1) / max(total - prefill, 1e-9), threads=THREADS)
    np.testing.assert_equal(out.shape[0], 1)


@pytest.mark.parametrize("rows", [1, 8])
@pytest.mark.parametrize("fmt", FORMATS)
def test_model_verify_vs_step(benchmark, cfg, fmt, rows):
    benchmark.group = ("model-verify-medium" if cfg.vocab_size == 32000 else "model-verify-tiny") + f"-{fmt}"
    t = Target(cfg, random_weights(cfg, 0), backend=HostIntBackend(weight_format=fmt, threads=THREADS), row_set=rows)
    state = t.new_state()
    t.forward(PROMPT, state)
    toks = list(range(9, 9 + rows))
    run = t.forward if rows == 1 else t.verify
    benchmark.pedantic(run, setup=lambda: ((toks, state.copy()), {}), rounds=15, warmup_rounds=1)
    benchmark.extra_info.update(rows=rows, row_set=rows, kernel=t.backend.kernel, threads=THREADS)
