"""The native kernel's persistent worker threads (gemm/host_int/pool.h): a call that finds the pool busy
(another Python thread: ctypes releases the GIL), a worker woken from its sleep, a fork after the pool
started, and more threads than the pool has yet - all give the bits of a 1-thread call and return."""
import multiprocessing as mp
import threading
import time

import numpy as np
import pytest

from onebit_engine.gemm.host_int import native
from onebit_engine.gemm.host_int.backend import HostIntBackend

pytestmark = pytest.mark.skipif(not native.available(), reason="the native kernel is not available here")


def _case(seed=3, n=700, k=2100, rows=8):
    """700 x 2100 int8 is large enough for 3 threads (>= 256 KiB of packed weights each)."""
    rng = np.random.default_rng(seed)
    b1 = HostIntBackend(threads=1, kernel="native")
    packed = b1.pack(rng.standard_normal((n, k)).astype(np.float32))
    x = rng.standard_normal((rows, k)).astype(np.float32)
    return packed, x, b1.matmul(x, packed)


def test_concurrent_calls_from_python_threads_keep_the_bits():
    packed, x, want = _case()
    b = HostIntBackend(threads=2, kernel="native")
    bad, errors = [], []

    def work(i):
        try:
            for j in range(40):
                rows = 1 + (i + j) % 8
                if not np.array_equal(b.matmul(x[:rows], packed), want[:rows]):
                    bad.append((i, j))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a concurrent call never returned"
    assert not errors and not bad


def _within(seconds, fn):
    """fn() on a daemon thread: a hang fails the test instead of stopping the suite."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(timeout=seconds)
    assert out, f"the call did not return within {seconds} s"
    return out[0]


def test_a_sleeping_worker_wakes_and_more_threads_start_later():
    packed, x, want = _case()
    b2, b3 = HostIntBackend(threads=2, kernel="native"), HostIntBackend(threads=3, kernel="native")
    for b in (b2, b3, b2, b3):  # a 2-thread call with 2 workers started: one of them sits it out
        time.sleep(0.05)  # >> the 2 ms spin: the workers are asleep on the condition variable
        assert np.array_equal(_within(60, lambda: b.matmul(x, packed)), want)


def _child(q):
    packed, x, want = _case()
    q.put(bool(np.array_equal(HostIntBackend(threads=2, kernel="native").matmul(x, packed), want)))


def test_fork_after_the_pool_started():
    packed, x, want = _case()
    assert np.array_equal(HostIntBackend(threads=2, kernel="native").matmul(x, packed), want)  # workers exist now
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    p.join(timeout=120)
    alive = p.is_alive()
    if alive:
        p.kill()
    assert not alive, "a 2-thread call in a forked child hung (its pool still counted the parent's workers)"
    assert p.exitcode == 0 and q.get(timeout=5) is True
