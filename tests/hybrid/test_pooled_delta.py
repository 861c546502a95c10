"""The compiled op table with its delta-net heads on the host-int pool (``hybrid.ops.on_backend``) against the
same table running them in numba: the whole target, bitwise - prefill, verify, every commit path, steps -
at 1 and 2 threads, on head layouts where value heads share key heads and dv is not a multiple of 8."""
from __future__ import annotations

import dataclasses

import pytest

from onebit_engine.gemm import get_backend
from onebit_engine.hybrid.ops import NUMBA_OPS, on_backend
from onebit_engine.hybrid.synthetic import random_target, tiny_config
from onebit_engine.ops import op_sets

pytestmark = pytest.mark.skipif(not op_sets.numba_installed(), reason="numba is not installed (the fast extra)")


def _backend(threads: int):
    from onebit_engine.gemm.host_int import native

    try:
        native.load()
    except native.NativeUnavailable as e:
        pytest.skip(f"the native host-int library cannot be built here: {e}")
    return get_backend("host-int", threads=threads)


def _run(target, path: str) -> list[bytes]:
    """Bits a run leaves: logits of a prefill, a verify, a step after the commit, and the delta-net states."""
    st = target.new_state()
    seen = [target.forward([3, 1, 4, 1, 5, 9, 2, 6], st).logits.tobytes()]
    out = target.verify([5, 3, 5, 8, 9, 7], st, checkpoints=(path == "checkpoint"))
    seen.append(out.logits.tobytes())
    target.commit(st, 3, path=path)
    seen.append(target.forward([2], st).logits.tobytes())
    seen += [layer.recurrent.tobytes() for layer in st.layers if hasattr(layer, "recurrent")]
    return seen


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("v_heads,dv", [(4, 8), (2, 12), (6, 5)])
@pytest.mark.parametrize("path", ["keep", "replay", "checkpoint"])
def test_pooled_heads_give_the_compiled_tables_bits(threads, v_heads, dv, path):
    cfg = tiny_config(linear_num_value_heads=v_heads, linear_value_head_dim=dv)
    backend = _backend(threads)
    pooled = random_target(cfg, 7, backend=backend, ops="numba")
    assert pooled.ops is not NUMBA_OPS and pooled.ops.name == "numba"  # the pool's heads, under the same name
    plain = random_target(cfg, 7, backend=backend, ops=dataclasses.replace(NUMBA_OPS))  # a copy: on_backend leaves it
    assert plain.ops.gdn_rows is NUMBA_OPS.gdn_rows
    assert _run(pooled, path) == _run(plain, path)


def test_on_backend_changes_only_the_compiled_table_and_only_with_a_pool():
    from onebit_engine.hybrid.ops import NUMPY_OPS

    assert on_backend(NUMPY_OPS, _backend(1)) is NUMPY_OPS
    assert on_backend(NUMBA_OPS, get_backend("reference")) is NUMBA_OPS
    assert on_backend(NUMBA_OPS, get_backend("host-int", kernel="numpy")) is NUMBA_OPS
