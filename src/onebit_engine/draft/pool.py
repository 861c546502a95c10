"""The draft block's attention on the host-int library's thread pool (``ops.row_jobs``' mechanism).

A block's attention is independent per (row, KV head): ``kernels.attend_pair`` writes that row's columns of
the query heads sharing the KV head and reads nothing another pair writes. Each job here is one pair calling
that very function, so the output has the one-thread bits whatever the threads (tests/draft/test_pool.py).
The heads' norm and RoPE and the block keys' transpose stay on the caller's thread (a few us).

Measured on a 27B-shaped draft (Zen 4, 2 threads, ~100 context keys, 8 rows x 32 heads): one thread spent
~6 ms of a ~62 ms draft round in attention, and it grows with the context (every row reads every key).
"""
from __future__ import annotations

import numpy as np

from ..ops import row_jobs
from ..ops.row_jobs import NS_ATTEND_KEY_DIM, NS_ATTEND_PAIR, RowJobs, addr, plain

# the sources of the compiled code this module's cached functions inline: numba drops a cached function only when its
# own file changes (tests/layout/test_numba_cache_keys.py)
NUMBA_INLINES = "a542d50fea9aab45"

F32 = np.float32

if row_jobs.row_jobs_ready():
    from numba import carray

    from .kernels.attention import attend_pair, attention_qkv, block_heads, block_keys_t
    from ..ops.row_jobs import job_args, job_data, row_job

    @row_job
    def _pair_job(job):  # args: q, kt, vc, kbt, vb, out, scale (float32 [1]), s, B, Hq, Hk, hd, kcap, vcap, causal,
        j, a = job_args(job, 16)  # window; job j is the pair (row j // Hk, KV head j % Hk)
        s, b, hq, hk, hd, kcap, vcap = a[7], a[8], a[9], a[10], a[11], a[12], a[13]
        q = carray(job_data(a[0]), (hq, b, hd), np.float32)
        kt = carray(job_data(a[1]), (hk, hd, kcap), np.float32)
        vc = carray(job_data(a[2]), (hk, vcap, hd), np.float32)
        kbt = carray(job_data(a[3]), (hk, hd, b), np.float32)
        vb = carray(job_data(a[4]), (hk, b, hd), np.float32)
        out = carray(job_data(a[5]), (b, hq * hd), np.float32)
        scale = carray(job_data(a[6]), 1, np.float32)[0]
        attend_pair(q, kt, vc, s, kbt, vb, a[14] != 0, a[15], scale, j // hk, j % hk,
                    np.empty((2, s + b), np.float32), np.empty((2, hd), np.float32), out)


def attention_work_ns(b: int, hq: int, hd: int, s: int, window: int) -> float:
    """One-thread ns of a block's attention: every (row, query head) pair reads its visible keys (all of
    [context; block], or about twice the window) for q.k and p.v, plus its fixed cost (``ops.row_jobs``' rates)."""
    keys = s + b if window <= 0 else min(s + b, 2 * window)
    return b * hq * (keys * hd * NS_ATTEND_KEY_DIM + NS_ATTEND_PAIR)


def pooled_attention(rows: "RowJobs | None", qkv, hq, hk, q_norm, k_norm, cos, sin, eps, kt, vc, s, causal, window,
                     scale, out, threads: int) -> np.ndarray:
    """``kernels.attention_qkv``'s result in ``out`` [B, Hq*hd], its (row, KV head) pairs on up to ``threads``
    threads of ``rows``' pool where the work pays for them (else, or with no pool, the one-thread kernel).
    window <= 0: none."""
    b, hd = qkv.shape[0], q_norm.shape[0]
    t = 1 if rows is None else rows.threads(b * hk, attention_work_ns(b, hq, hd, s, window), threads)
    if t < 2 or not plain(kt, vc, out):
        return attention_qkv(qkv, hq, hk, q_norm, k_norm, cos, sin, eps, kt, vc, s, causal, window, scale, out)
    q, kb, vb = block_heads(np.ascontiguousarray(qkv), hq, hk, q_norm, k_norm, cos, sin, eps)
    kbt = block_keys_t(kb)
    sc = np.full(1, scale, F32)
    rows.run(_pair_job, [addr(q), addr(kt), addr(vc), addr(kbt), addr(vb), addr(out), addr(sc), s, b, hq, hk, hd,
                         kt.shape[2], vc.shape[1], int(causal), window], b * hk, t)
    return out
