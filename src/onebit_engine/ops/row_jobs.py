"""Row-independent compiled ops as jobs on the host-int library's thread pool (``onebit_hi_team``).

A verify's rows are independent outside the GEMMs and the delta rule's recurrence: the RMSNorms, the SwiGLU
gate, the delta-net's gates, conv and q/k norms (``gated_delta_fast._conv_row``: a row's conv taps read from
the rows before it, not from a state advanced row by row) and its gated norm. Each op here is a numba ``cfunc``
that runs one row by calling the very function the one-thread path runs on that row, so a row's bits do not
depend on the threads or on which thread ran it (tests/ops/test_row_jobs.py). On 2 cores a verify of 8 rows
spent ~45 ms of a 27B round in these ops on one thread. A commit's replay (its conv, a few rows) stays on one
thread: on the pool it was no faster (27B 1.00x, 0.8B 1.04x a commit of 4 rows).

A call's jobs are one int64 array: the op's arguments (arrays and sizes), then the row numbers 0..n-1. The
pool hands job i a pointer to its row number; the arguments sit ``A + i`` words before it (A, the op's
argument count, is a constant of its cfunc). An array goes as its object's address, ``id(a)``, and the job
reads its data pointer at ``DATA_OFF`` bytes into the object (``a.ctypes.data`` costs ~1 us an array, 3 ms a
27B verify); ``RowJobs`` runs nothing on the pool unless the library found that offset. The caller keeps the
arrays alive, float32 and C-contiguous for the call (``plain``).
"""
from __future__ import annotations

import numpy as np

try:
    import numba as nb
    from llvmlite import ir
    from numba import carray, types
    from numba.core.extending import intrinsic
except ImportError:  # numba is the optional `fast` extra
    nb = None

# the sources of the compiled code this module's cached functions inline: numba drops a cached function only when its
# own file changes (tests/layout/test_numba_cache_keys.py)
NUMBA_INLINES = "2dcaf6e4f69e84aa"

F32 = np.float32
MIN_ROWS = 2  # one row: the direct call (a team would only add its ~5 us)
DATA_OFF = 16  # CPython's ndarray: the data pointer after the refcount and the type (native._array_data_offset)


def row_jobs_ready() -> bool:
    return nb is not None


if nb is not None:
    from .attention_fast import attention_angles, attention_append, attention_attend, attention_rows
    from .gated_delta_fast import gdn_conv4_advance, gdn_conv4_head, gdn_mixer_finish, gdn_mixer_prep_row
    from .norm_fast import rms_norm_rows, silu_mul

    @intrinsic
    def _ptr(typingctx, addr):  # int64 -> void*
        if isinstance(addr, types.Integer):
            return types.voidptr(addr), lambda ctx, b, sig, args: b.inttoptr(args[0], ir.IntType(8).as_pointer())

    @intrinsic
    def _int(typingctx, p):  # void* -> int64
        if p == types.voidptr:
            return types.int64(p), lambda ctx, b, sig, args: b.ptrtoint(args[0], ir.IntType(64))

    _jit = nb.njit(nogil=True, error_model="numpy")

    @_jit
    def job_args(job, A):
        """(row, the call's A argument words) of the job at ``job``."""
        t = carray(job, 1, np.int64)[0]
        return t, carray(_ptr(_int(job) - 8 * (A + t)), A, np.int64)

    @_jit
    def job_data(obj):
        """The data pointer of the ndarray object at address ``obj``."""
        return _ptr(carray(_ptr(obj + DATA_OFF), 1, np.int64)[0])

    @_jit
    def job_f32(obj, rows, cols):
        return carray(job_data(obj), (rows, cols), np.float32)

    # cache=True: numba keys a cached function on this file alone, yet each job inlines the row functions of
    # norm_fast, gated_delta_fast and attention_fast; NUMBA_INLINES (above) changes with them, which drops the cache
    row_job = nb.cfunc(types.void(types.voidptr), nogil=True, error_model="numpy", cache=True)

    @row_job
    def _silu_job(job):  # args: y, out, R, I
        t, a = job_args(job, 4)
        y, out = job_f32(a[0], a[2], 2 * a[3]), job_f32(a[1], a[2], a[3])
        silu_mul(y[t:t + 1], out[t:t + 1])

    @row_job
    def _norm_job(job):  # args: x, w, out, eps (float32 [1]), R, D, centred
        t, a = job_args(job, 7)
        x, out = job_f32(a[0], a[4], a[5]), job_f32(a[2], a[4], a[5])
        rms_norm_rows(x[t:t + 1], job_f32(a[1], 1, a[5])[0], job_f32(a[3], 1, 1)[0, 0], a[6] != 0, out[t:t + 1])

    @row_job
    def _finish_job(job):  # args: proj, o, norm_w, eps, out, R, P, HV, dv, C
        t, a = job_args(job, 10)
        R, HV, dv = a[5], a[7], a[8]
        proj, out = job_f32(a[0], R, a[6]), job_f32(a[4], R, HV * dv)
        o = carray(job_data(a[1]), (R, HV, dv), np.float32)
        gdn_mixer_finish(proj[t:t + 1], 1, o[t:t + 1], job_f32(a[2], 1, dv)[0], job_f32(a[3], 1, 1)[0, 0], a[9], out[t:t + 1])

    @row_job
    def _prep_job(job):  # args: proj, head, w, neg_A, dt_bias, xs, qs, ks, alphas, betas, rec_mixed, rec_alpha,
        t, a = job_args(job, 22)  # rec_beta, R, P, n, C, HV, n_k_heads, dk, dv, recorded rows (0 or n)
        R, P, n, C, HV, nk, dk, dv, nr = a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21]
        gdn_mixer_prep_row(job_f32(a[0], R, P), t, job_f32(a[1], 3, C), job_f32(a[2], C, 4), job_f32(a[3], 1, HV)[0],
                           job_f32(a[4], 1, HV)[0], nk, dk, dv, job_f32(a[5], n, C),
                           carray(job_data(a[6]), (n, nk, dk), np.float32), carray(job_data(a[7]), (n, nk, dk), np.float32),
                           job_f32(a[8], n, HV), job_f32(a[9], n, HV), job_f32(a[10], nr, C), job_f32(a[11], nr, HV),
                           job_f32(a[12], nr, HV))

    @row_job
    def _attend_job(job):  # args: qkv, keys, values, q_norm, cos, sin, out, eps_scale (float32 [2]), R, P, length,
        j, a = job_args(job, 16)  # H, HKV, hd, capacity, rot; job j is the pair (row j // H, head j % H)
        R, P, length, H, HKV, hd, cap, rot = a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15]
        t, h = j // H, j % H
        es = job_f32(a[7], 1, 2)[0]
        keys = carray(job_data(a[1]), (HKV, hd, cap), np.float32)
        values = carray(job_data(a[2]), (HKV, cap, hd), np.float32)
        n = t + 1  # the rows this pair may see: the cache up to its own row
        attention_attend(job_f32(a[0], R, P), t, h, length, keys, values, job_f32(a[3], 1, hd)[0], es[0],
                         job_f32(a[4], n, rot), job_f32(a[5], n, rot), H, es[1], job_f32(a[6], R, H * hd),
                         np.empty(hd, np.float32), np.empty(hd, np.float32), np.empty(length + n, np.float32))


# A thread joins only with ~40 us of work. Standalone, 2 threads ran SwiGLU's 8 x 17408 in 54 us against 88;
# inside a 27B verify the pool's worker joins a call later (it waits between GEMMs, and a VM keeps a spinning
# vCPU off its core), so a norm of 8 x 5120 (58 us) gained nothing there and a call of ~150 us ~1.3x.
WORK_NS_PER_THREAD = 40_000
# one-thread ns a row element inside a 27B verify (Zen 4, its inputs fresh from a GEMM): the rule's weights
NS_SILU, NS_NORM, NS_FINISH, NS_PREP = 1.14, 1.4, 3.4, 4.3
# one-thread ns of attention's (row, head) pair: a visible key's q.k and p.v per element of hd, and the pair's own
# (its q norm and RoPE, the gate); a 27B verify of 8 rows at ~100 keys: ~5 us a pair (Zen 4)
NS_ATTEND_KEY_DIM, NS_ATTEND_PAIR = 0.16, 500


def threads_for(rows: int, work_ns: float, threads: int) -> int:
    """Threads for a call of ``rows`` rows and ``work_ns`` of one-thread work: at most one a row and one per
    WORK_NS_PER_THREAD of work."""
    if rows < MIN_ROWS or threads < 2:
        return 1
    return max(1, min(threads, rows, int(work_ns // WORK_NS_PER_THREAD)))


def plain(*arrays: np.ndarray) -> bool:
    """Whether the jobs can read these arrays by address: float32, C-contiguous (else the one-thread call)."""
    return all(a.dtype == F32 and a.flags.c_contiguous for a in arrays)


addr = id  # the object's address: the jobs read its data pointer (DATA_OFF)


class RowJobs:
    """The ops above on a pool: ``team(fn_address, first_job_address, njobs, threads)`` runs the jobs
    (``NativeKernel.team``). Each method falls back to the one-thread function where the work rule says so."""

    def __init__(self, team, data_off: int):
        self._team = team
        self._ok = data_off == DATA_OFF  # else every call takes its one-thread path

    def threads(self, rows: int, work_ns: float, threads: int) -> int:
        return threads_for(rows, work_ns, threads) if self._ok else 1

    def run(self, job, args: list, n: int, t: int) -> None:
        buf = np.array(args + list(range(n)), np.int64)
        self._team(job.address, buf.ctypes.data + 8 * len(args), n, t)  # the arrays in args live in the caller

    def silu_mul(self, y: np.ndarray, threads: int) -> np.ndarray:
        R, I = y.shape[0], y.shape[1] // 2
        out = np.empty((R, I), F32)
        t = self.threads(R, NS_SILU * R * I, threads)
        if t < 2 or not plain(y):
            silu_mul(y, out)
        else:
            self.run(_silu_job, [addr(y), addr(out), R, I], R, t)
        return out

    def norm(self, x: np.ndarray, w: np.ndarray, eps: float, centred: bool, threads: int) -> np.ndarray:
        R, D = x.shape
        out = np.empty_like(x)
        t = self.threads(R, NS_NORM * R * D, threads)
        if t < 2 or not plain(x, w):
            rms_norm_rows(x, w, F32(eps), centred, out)
        else:
            e = np.full(1, eps, F32)
            self.run(_norm_job, [addr(x), addr(w), addr(out), addr(e), R, D, int(centred)], R, t)
        return out

    def mixer_finish(self, proj, n, o, norm_w, eps, C, out, threads: int) -> None:
        """``gated_delta_fast._mixer_finish``'s effect: rows 0..n-1 of out, the rest zeroed."""
        HV, dv = o.shape[1], o.shape[2]
        t = self.threads(n, NS_FINISH * n * HV * dv, threads)
        if t < 2 or not plain(proj, o, norm_w, out):
            gdn_mixer_finish(proj, n, o, norm_w, eps, C, out)
            return
        e = np.full(1, eps, F32)
        self.run(_finish_job, [addr(proj), addr(o), addr(norm_w), addr(e), addr(out), proj.shape[0],
                                proj.shape[1], HV, dv, C], n, t)
        out[n:] = 0.0

    def attention(self, qkv, n, pos, length, keys, values, q_norm, k_norm, eps, freqs, H, scale, out,
                  threads: int) -> None:
        """``attention_fast.attention_rows``'s effect (its arguments and shapes): every row's key and value
        appended on this thread, then each (row, head) pair a job - a pair's bits depend on its own inputs
        and the keys it sees alone."""
        HKV, hd, cap = keys.shape
        pairs = n * H
        work = pairs * ((length + (n + 1) / 2) * hd * NS_ATTEND_KEY_DIM + NS_ATTEND_PAIR)
        t = self.threads(pairs, work, threads)
        if t < 2 or not plain(qkv, keys, values, q_norm, k_norm, freqs, out):
            attention_rows(qkv, n, pos, length, keys, values, q_norm, k_norm, F32(eps), freqs, H, F32(scale), out)
            return
        rot = 2 * freqs.shape[0]
        cos, sin = np.empty((n, rot), F32), np.empty((n, rot), F32)
        attention_angles(n, pos, freqs, cos, sin)
        attention_append(qkv, n, length, keys, values, k_norm, F32(eps), cos, sin, H)
        es = np.array([eps, scale], F32)
        self.run(_attend_job, [addr(qkv), addr(keys), addr(values), addr(q_norm), addr(cos), addr(sin),
                                addr(out), addr(es), qkv.shape[0], qkv.shape[1], length, H, HKV, hd, cap, rot],
                  pairs, t)
        out[n:] = 0.0

    def mixer_prep(self, proj, n, conv, w, neg_A, dt_bias, n_k_heads, dk, dv, HV, rec_mixed, rec_alpha, rec_beta,
                   threads: int):
        """``gated_delta_fast._mixer_prep``'s results and effects (kernel size 4, no per-row conv checkpoints):
        xs, qs, ks, alphas, betas; conv advanced by n rows; the rec_* rows written when they have n rows.
        None where the rule keeps it on one thread (the caller runs ``_mixer_prep``)."""
        C = conv.shape[0]
        t = self.threads(n, NS_PREP * n * C, threads)
        if t < 2 or w.shape[1] != 4 or not plain(proj, conv, w, neg_A, dt_bias, rec_mixed, rec_alpha, rec_beta):
            return None
        xs, alphas, betas = np.empty((n, C), F32), np.empty((n, HV), F32), np.empty((n, HV), F32)
        qs, ks = np.empty((n, n_k_heads, dk), F32), np.empty((n, n_k_heads, dk), F32)
        head = gdn_conv4_head(conv)
        nr = rec_mixed.shape[0]
        if nr not in (0, n):
            raise ValueError(f"mixer_prep: {nr} recorded rows for a call of {n} (0 or n)")
        rec = (rec_mixed, rec_alpha, rec_beta) if nr else (xs, alphas, betas)  # any valid address when not recording
        self.run(_prep_job, [addr(proj), addr(head), addr(w), addr(neg_A), addr(dt_bias), addr(xs), addr(qs),
                              addr(ks), addr(alphas), addr(betas), *map(addr, rec), proj.shape[0], proj.shape[1],
                              n, C, HV, n_k_heads, dk, dv, nr], n, t)
        gdn_conv4_advance(conv, proj, n)
        return xs, qs, ks, alphas, betas
