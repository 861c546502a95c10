"""The shipped transformers adapter: its four broken variants are each caught by the check that should see
them (the correct port's battery runs in tests/specverify/battery/transformers), and the helpers it is built from."""
import numpy as np
import pytest

from pytest_specverify import SpecVerifyFailure, profile
from pytest_specverify.checks import commit_equivalence
from pytest_specverify.protocol import PortOptions
from pytest_specverify.sampling_check import sampling_distribution

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf():
    from pytest_specverify.adapters import transformers as adapter

    return adapter


def _port(hf, cls=None, loop=None):
    port = hf.make_port(PortOptions(model="tiny-qwen3_5"))
    if cls is not None:
        port.__class__ = type(cls.__name__, (cls, type(port)), {})
    if loop is not None:
        port.loop_class = loop
    return port


class CropWithoutRestore:
    """keep on a partial accept: the attention KV cropped, the conv and recurrent states left as the verify made them."""

    def commit(self, state, accepted_rows, *, path, replay_check=False):
        pend = state.pending
        if path != "keep" or accepted_rows == len(pend.rows):
            return super().commit(state, accepted_rows, path=path, replay_check=replay_check)
        state.pending = None
        for layer in state.cache.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys = layer.keys[..., : layer.keys.shape[-2] - (len(pend.rows) - accepted_rows), :]
                layer.values = layer.values[..., : layer.values.shape[-2] - (len(pend.rows) - accepted_rows), :]
        state.length -= len(pend.rows) - accepted_rows


class ShallowSnapshot:
    """The snapshot keeps references, not copies: HF updates conv and recurrent states in place."""

    def snapshot(self, state):
        return [dict(vars(layer)) for layer in state.cache.layers], state.length

    def restore(self, state, snap):
        for layer, saved in zip(state.cache.layers, snap[0]):
            for k, v in saved.items():
                setattr(layer, k, v)
        state.length = snap[1]


def _loops():
    from pytest_specverify.helpers.loop import ReferenceLoop, _probs

    class WrongResidual(ReferenceLoop):
        def residual(self, p, q):
            return p

    class TemperatureLeftOut(ReferenceLoop):
        def target_probs(self, logits):
            return _probs(logits, 1.0)

    return WrongResidual, TemperatureLeftOut


def _commit(port):
    return commit_equivalence(port, port.encode("The capital of France is"), (0, 1, 3), profile(port.tolerance))


def _sampling(port, temperature=1.0):
    return sampling_distribution(port, port.encode("ab"), samples=100, temperature=temperature, tol=port.tolerance)


def test_cropped_cache_without_the_recurrent_state_is_caught(hf):
    with pytest.raises(SpecVerifyFailure, match=r"commit path 'keep'.*array 'layer.0.(conv|recurrent)'"):
        _commit(_port(hf, CropWithoutRestore))


def test_a_shallow_snapshot_is_caught(hf):
    with pytest.raises(SpecVerifyFailure, match=r"array 'layer.0.(conv|recurrent)'"):
        _commit(_port(hf, ShallowSnapshot))


def test_a_wrong_residual_is_caught(hf):
    wrong, _ = _loops()
    with pytest.raises(SpecVerifyFailure, match=r"token at a rejection ~ normalize\(max\(0, p - q\)\)"):
        _sampling(_port(hf, loop=wrong))


def test_temperature_left_out_of_p_is_caught(hf):
    _, cold = _loops()
    with pytest.raises(SpecVerifyFailure, match=r"round's first token x1 \| t0 ~ p\(\. \| t0\)"):
        _sampling(_port(hf, loop=cold), temperature=0.7)


def test_the_correct_port_passes_what_catches_the_variants(hf):
    port = _port(hf)
    _commit(port)
    r = _sampling(port, temperature=0.7)
    assert r.metrics["power: temperature left out of p"] >= 0.99


def test_hf_cache_snapshot_is_deep_and_restores(hf):
    from pytest_specverify.helpers import hf_cache

    port = _port(hf)
    st = port.new_state()
    port.prefill(st, [3, 4, 5])
    before = hf_cache.state_arrays(st.cache)
    snap = hf_cache.snapshot(st.cache)
    port.step(st, 6)
    assert any(not np.array_equal(before[n], a) for n, a in hf_cache.state_arrays(st.cache).items() if n in before)
    hf_cache.restore(st.cache, snap)
    after = hf_cache.state_arrays(st.cache)
    assert sorted(after) == sorted(before) and all(np.array_equal(after[n], before[n]) for n in before)
