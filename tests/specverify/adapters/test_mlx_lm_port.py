"""The shipped mlx-lm adapter beyond its battery (tests/specverify/battery/mlx_lm): a port that rewinds with mlx-lm's own
``trim_prompt_cache`` is caught, ring-buffer (sliding-window) caches give their rows in position order, and
mlx-lm computes the model transformers computes on the same checkpoint."""
import numpy as np
import pytest

from pytest_specverify import SpecVerifyFailure, profile
from pytest_specverify.checks import commit_equivalence
from pytest_specverify.protocol import PortOptions

pytest.importorskip("mlx_lm")

PROMPT = list(b"The capital of France is")
#: mlx-lm vs transformers, float32, the same tiny checkpoint: measured up to ~6e-5 at |logit| ~ 4
REFERENCE_AGREEMENT = 2e-4


@pytest.fixture(scope="module")
def port():
    from pytest_specverify.adapters.mlx_lm import make_port

    return make_port(PortOptions(seed=0))


def test_a_keep_path_through_trim_prompt_cache_fails_commit_equivalence(port):
    """mlx-lm's trim_prompt_cache returns 0 and trims nothing when any layer is a delta-net (ArraysCache)."""
    from mlx_lm.models.cache import trim_prompt_cache

    from pytest_specverify.adapters.mlx_lm import MlxLmPort

    class TrimPromptCache(MlxLmPort):
        def commit(self, state, accepted_rows, *, path, replay_check=False):
            if path != "keep":
                return super().commit(state, accepted_rows, path=path, replay_check=replay_check)
            rw, state.pending = state.pending, None
            trimmed = trim_prompt_cache(state.cache, len(rw.rows) - accepted_rows)
            state.length -= trimmed

    broken = TrimPromptCache(port.model, name="mlx-lm[trim_prompt_cache]")
    with pytest.raises(SpecVerifyFailure, match=r"commit path 'keep', k=0, .*kept 0 rows \(no row kept\): after the commit, "
                                                r"array 'layer\.0\.conv'"):
        commit_equivalence(broken, PROMPT, [0, 1, 3], profile(broken.tolerance))


def _ring(max_size, steps, keep=0):
    import mlx.core as mx
    from mlx_lm.models.cache import RotatingKVCache

    c = RotatingKVCache(max_size=max_size, keep=keep)
    for p in range(steps):
        row = mx.full((1, 1, 1, 2), float(p))  # every key / value element holds its position
        c.update_and_fetch(row, row)
    return c


@pytest.mark.parametrize("steps", [3, 4, 6, 9])
def test_a_ring_buffer_gives_its_rows_in_position_order(steps):
    from pytest_specverify.adapters.mlx_lm import cache_arrays

    arrays = cache_arrays([_ring(4, steps)])
    want = list(range(max(0, steps - 4), steps))
    assert arrays["layer.0.positions"].tolist() == want
    assert arrays["layer.0.keys"][0, :, 0].tolist() == [float(p) for p in want]


def test_a_ring_buffer_rewinds_from_its_copy():
    import mlx.core as mx

    from pytest_specverify.adapters.mlx_lm import cache_arrays, restore_cache, save_cache

    ring = [_ring(4, 6)]
    before = cache_arrays(ring)
    saved = save_cache(ring)
    ring[0].update_and_fetch(mx.full((1, 1, 1, 2), 99.0), mx.full((1, 1, 1, 2), 99.0))  # written in place
    assert cache_arrays(ring)["layer.0.positions"].tolist() == [3, 4, 5, 6]
    restore_cache(ring, saved)
    after = cache_arrays(ring)
    assert all(np.array_equal(before[n], after[n]) for n in before)


def test_mlx_lm_agrees_with_transformers_on_the_same_checkpoint(port):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    model = tf.AutoModelForCausalLM.from_pretrained(port.reference_path, dtype="float32").eval()
    with torch.no_grad():
        want = model(input_ids=torch.tensor([PROMPT])).logits[0].numpy()
    got = port.prefill(port.new_state(), PROMPT).logits
    assert float(np.abs(got - want).max()) <= REFERENCE_AGREEMENT
