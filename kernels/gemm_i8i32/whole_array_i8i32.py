"""IRON design of the onebit NPU GEMM: C[M, N] int32 = A[M, K] int8 @ B[K, N] int8, whole array.

Modelled on mlir-aie's programming_examples/basic/matrix_multiplication/whole_array (whole_array_iron.py),
narrowed to what the engine needs: i8 in, i32 out, B row-major [K, N] (the host stores W.T once), A and C
row-major, 4 compute rows x ``n_cols`` columns. The shim/mem-tile/core DMAs do all re-tiling; the host
does none. Must match ``onebit_engine.gemm.npu.emulator.run_launch``; the manifest that
``kernels/build.py`` writes for the artifact records every parameter below.

NOT built or run in this repository's CI (no toolchain, no NPU). ``python whole_array_i8i32.py --dev npu2
-M 64 -K 2048 -N 2048 -m 16 -k 64 -n 64 --n-cols 8`` prints the MLIR that aiecc turns into the xclbin and
the instruction stream (see kernels/README.md).
"""
from __future__ import annotations

import argparse

import numpy as np

N_ROWS = 4                                   # compute rows used by the design
MAC_TILE = {"npu": (4, 8, 8), "npu2": (8, 8, 8)}  # i8 mmul r x s x t (AIE2 / AIE2P)


def check_sizes(dev: str, M: int, K: int, N: int, m: int, k: int, n: int, n_cols: int) -> None:
    r, s, t = MAC_TILE[dev]
    max_cols = 4 if dev == "npu" else 8
    problems = []
    if not 1 <= n_cols <= max_cols:
        problems.append(f"n_cols={n_cols}: {dev} has {max_cols} usable columns")
    if M % (m * N_ROWS) or K % k or N % (n * n_cols):
        problems.append(f"need M % {m * N_ROWS}, K % {k}, N % {n * n_cols} == 0 (got {M}, {K}, {N})")
    if m % (2 * r) or k % s or n % (2 * t):
        problems.append(f"tile {m}x{k}x{n} must be a multiple of {2 * r}x{s}x{2 * t} (2x2 expanded {r}x{s}x{t})")
    if K * 127 * 128 >= 2**31:
        problems.append(f"K={K}: an int32 accumulator could overflow")
    if problems:
        raise SystemExit("invalid design: " + "; ".join(problems))


def design(dev: str, M: int, K: int, N: int, m: int, k: int, n: int, n_cols: int):
    from aie.helpers.taplib import TensorTiler2D
    from aie.iron import Kernel, ObjectFifo, Program, Runtime, Worker
    from aie.iron.device import NPU1Col1, NPU1Col2, NPU1Col4, NPU2, Tile
    from aie.iron.placers import SequentialPlacer
    from aie.iron.controlflow import range_

    check_sizes(dev, M, K, N, m, k, n, n_cols)
    r, s, t = MAC_TILE[dev]
    i8, i32 = np.dtype[np.int8], np.dtype[np.int32]
    n_shim_a = min(n_cols, N_ROWS)            # A enters through at most 4 shims
    a_rows_per_shim = N_ROWS // n_cols if n_cols < N_ROWS else 1
    tiles_per_core = (M // m) * (N // n) // (N_ROWS * n_cols)
    depth = 2

    A_ty, B_ty, C_ty = np.ndarray[(M * K,), i8], np.ndarray[(K * N,), i8], np.ndarray[(M * N,), i32]
    A_l2 = np.ndarray[(m * k * a_rows_per_shim,), i8]
    B_l2 = np.ndarray[(k * n,), i8]
    C_l2 = np.ndarray[(m * n * N_ROWS,), i32]
    A_l1, B_l1, C_l1 = np.ndarray[(m, k), i8], np.ndarray[(k, n), i8], np.ndarray[(m, n), i32]

    obj = f"mm_i8i32_{m}x{k}x{n}.o"
    zero = Kernel("zero_i32", obj, [C_l1])
    matmul = Kernel("matmul_i8_i32", obj, [A_l1, B_l1, C_l1])

    # A: (m * rows, k) blocks broadcast across columns, split across the 4 rows; re-tiled to r x s blocks.
    a_l3l2, a_l2l1 = [], [None] * N_ROWS
    for i in range(n_shim_a):
        fifo = ObjectFifo(A_l2, name=f"A_L3L2_{i}", default_depth=depth)
        first = i * a_rows_per_shim
        parts = fifo.cons().split(
            [m * k * j for j in range(a_rows_per_shim)], obj_types=[A_l1] * a_rows_per_shim,
            names=[f"A_L2L1_{row}" for row in range(first, first + a_rows_per_shim)],
            dims_to_stream=[[(m // r, r * k), (k // s, s), (r, k), (s, 1)]] * a_rows_per_shim,
            placement=Tile(2 * i if n_cols == 8 else i, 1),
        )
        a_l3l2.append(fifo)
        for j, p in enumerate(parts):
            a_l2l1[first + j] = p
    # B: (k, n) blocks per column, broadcast down the rows; re-tiled to s x t blocks. C: joined per column.
    b_l3l2, b_l2l1, c_l2l3 = [], [], []
    c_l1l2 = [[None] * n_cols for _ in range(N_ROWS)]
    for col in range(n_cols):
        fb = ObjectFifo(B_l2, name=f"B_L3L2_{col}", default_depth=depth)
        b_l3l2.append(fb)
        b_l2l1.append(fb.cons().forward(obj_type=B_l1, name=f"B_L2L1_{col}",
                                        dims_to_stream=[(k // s, s * n), (n // t, t), (s, n), (t, 1)],
                                        placement=Tile(col, 1)))
        fc = ObjectFifo(C_l2, name=f"C_L2L3_{col}", default_depth=depth,
                        dims_to_stream=[(m // r, r * n), (r, t), (n // t, r * t), (t, 1)])
        c_l2l3.append(fc)
        parts = fc.prod().join([m * n * row for row in range(N_ROWS)], obj_types=[C_l1] * N_ROWS,
                               names=[f"C_L1L2_{col}_{row}" for row in range(N_ROWS)],
                               depths=[depth] * N_ROWS, placement=Tile(col, 1))
        for row in range(N_ROWS):
            c_l1l2[row][col] = parts[row]

    def core(in_a, in_b, out_c, zero_fn, mm_fn):
        for _ in range_(tiles_per_core) if tiles_per_core > 1 else range(1):
            c = out_c.acquire(1)
            zero_fn(c)
            for _ in range_(K // k):
                a, b = in_a.acquire(1), in_b.acquire(1)
                mm_fn(a, b, c)   # C += A_chunk @ B_chunk, stored in int32 (exact)
                in_a.release(1)
                in_b.release(1)
            out_c.release(1)

    workers = [Worker(core, [a_l2l1[row].cons(), b_l2l1[col].cons(), c_l1l2[row][col].prod(), zero, matmul],
                      placement=Tile(col, 2 + row))
               for row in range(N_ROWS) for col in range(n_cols)]

    a_taps = TensorTiler2D.group_tiler((M, K), (m * a_rows_per_shim, k), (1, K // k), pattern_repeat=N // n // n_cols)
    b_taps = TensorTiler2D.step_tiler((K, N), (k, n), tile_group_repeats=(K // k, N // n // n_cols),
                                      tile_group_steps=(1, n_cols), tile_group_col_major=True)
    c_taps = TensorTiler2D.step_tiler((M, N), (m * N_ROWS, n), tile_group_repeats=(1, N // n // n_cols),
                                      tile_group_steps=(1, n_cols))

    rt = Runtime()
    with rt.sequence(A_ty, B_ty, C_ty) as (A, B, C):   # the host BOs, args 3, 4, 5 of the kernel
        rt.start(*workers)
        # One row block (m * 4 rows of C) per task group keeps every BD count and repeat within the
        # shim limits (16 BDs, 64 repeats); the manifest's M_cap bounds the number of row blocks.
        for rb in range(M // (m * N_ROWS)):
            tg = rt.task_group()
            for col in range(n_cols):
                rt.drain(c_l2l3[col].cons(), C, tap=c_taps[rb * n_cols + col], wait=True, task_group=tg)
                rt.fill(b_l3l2[col].prod(), B, tap=b_taps[col], task_group=tg)
            for i in range(n_shim_a):
                rt.fill(a_l3l2[i].prod(), A, tap=a_taps[rb * n_shim_a + i] if len(a_taps) > 1 else a_taps[0],
                        task_group=tg)
            rt.finish_task_group(tg)

    dev_ty = {1: NPU1Col1, 2: NPU1Col2, 4: NPU1Col4}[n_cols]() if dev == "npu" else NPU2()
    return Program(dev_ty, rt).resolve_program(SequentialPlacer())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dev", choices=["npu", "npu2"], default="npu2")
    for name, default in (("-M", 64), ("-K", 2048), ("-N", 2048), ("-m", 16), ("-k", 64), ("-n", 64)):
        p.add_argument(name, type=int, default=default)
    p.add_argument("--n-cols", type=int, choices=[1, 2, 4, 8], default=8)
    a = p.parse_args()
    print(design(a.dev, a.M, a.K, a.N, a.m, a.k, a.n, a.n_cols))


if __name__ == "__main__":
    main()
