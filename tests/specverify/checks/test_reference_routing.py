"""The reference check on a mixture-of-experts model: a port that rounds otherwise may route a row whose router
is at a near-tie to another expert (mlx-lm did, on a tiny Qwen3-Next: router gap 1.4e-7 at one row, that row's
logits 0.68 off); the check stops before such a row and says so, and still fails a port that routes otherwise
where the router is not tied."""
from dataclasses import replace

import numpy as np
import pytest

from onebit_engine.hybrid.moe_config import MoeConfig
from onebit_engine.hybrid.moe_mlp import MoeMLP
from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint
from onebit_engine.ops.moe import routing_margins
from pytest_specverify import SpecVerifyFailure, profile
from pytest_specverify.adapters.onebit import make_folder_port
from pytest_specverify.protocol import PortOptions
from pytest_specverify.session import Settings
from pytest_specverify.verifier import Verifier

BOUND = 0.05  # the port's declared reference bound: a router near-tie is a gap within 2 x BOUND
K = 2


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    cfg = tiny_config(vocab_size=64, num_hidden_layers=2, full_attention_interval=2, moe=MoeConfig(8, K, 16, 24, True))
    out = tmp_path_factory.mktemp("moe")
    write_checkpoint(out, cfg, random_weights(cfg, 7))
    return str(out)


def flipping_port(folder, window: float, bound: "float | None" = BOUND):
    """The engine on ``folder``, its routers swapping the last chosen and the first unchosen expert wherever their
    gap is at most ``window`` (what another rounding does at a near-tie), declaring ``bound`` against the reference."""
    port = make_folder_port(folder, PortOptions(backend="reference"), name="moe-flip")
    if bound is not None:
        port.tolerance = replace(profile("exact"), name="flip", reference=(bound, 0.0))
    for layer in port.target.layers:
        if isinstance(layer.mlp, MoeMLP):
            router = layer.mlp.router

            def flipped(h, _router=router):
                z = np.array(_router(h))
                near = routing_margins(z, K)[:, 0] <= window
                order = np.argsort(-z, axis=-1, kind="stable")
                for r in np.flatnonzero(near):
                    a, b = order[r, K - 1], order[r, K]
                    z[r, a], z[r, b] = z[r, b], z[r, a]
                return z

            layer.mlp.router = flipped
    return port


def check(port):
    return Verifier(port, profile(port.tolerance), Settings(num_prompts=4)).reference()


def test_a_flip_at_a_near_tie_is_noted_not_failed(folder):
    report = check(flipping_port(folder, window=2 * BOUND))
    assert report.counts["routing_ties"] >= 1 and any("near-tie of its router" in n for n in report.notes), report.notes
    assert report.metrics["max_abs_logit_diff"] <= BOUND


def test_a_flip_where_the_router_is_not_tied_fails(folder):
    with pytest.raises(SpecVerifyFailure, match="differ from the float32 reference model"):
        check(flipping_port(folder, window=20 * BOUND))


def test_a_bitwise_port_is_held_to_the_reference_routing(folder):
    """No declared bound: the port claims the reference's bits, so a flip even at a near-tie fails."""
    assert check(flipping_port(folder, window=-1.0, bound=None)).counts["routing_ties"] == 0
    with pytest.raises(SpecVerifyFailure):
        check(flipping_port(folder, window=2 * BOUND, bound=None))
