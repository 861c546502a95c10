"""Host-side plan for the NPU GEMM: the kernel manifest, padding, splitting and packing.

A kernel artifact (one xclbin + one instruction stream, built from ``kernels/``) computes one
fixed-size product per launch::

    C[M_cap, N] (int32) = A[M_cap, K] (int8) @ B[K, N] (int8)       # exact, acc32, no shift

Everything else is the host's job, and this module plans it:

* a weight ``Wq [Nw, Kw]`` is zero-padded to whole ``(K, N)`` blocks and cut into ``kb x nb`` resident
  B blocks, each packed once in the artifact's B layout;
* an activation ``xq [M, Kw]`` is zero-padded to whole ``(M_cap, K)`` blocks, one A block per launch;
* the int32 partial products of the K blocks are summed on the host (exact: integers) and the
  result is cropped to ``[M, Nw]``.

Zero padding is exact for an integer GEMM. The compiled sizes are checked at load against the
padding rules of mlir-aie's whole_array design and the array's DMA limits
(docs/device.md, "The array and the GEMM design"), so every launch the plan makes is one the artifact
can run. The emulator (``emulator.py``) decodes the same bytes with its own code.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendUnavailable, ConfigError

SCHEMA = 1
GENERATIONS = ("npu1", "npu2")
# The one table of XDNA generations by device name (sysfs vbnv or XRT's name, lower-cased tokens)
GENERATION_TOKENS = {"npu2": ("npu4", "npu5", "npu6", "strix", "krackan", "kraken", "gorgon"),
                     "npu1": ("npu1", "phoenix", "hawk")}
MAX_COLS = {"npu1": 4, "npu2": 8}             # usable AIE columns (Phoenix/Hawk: 4 of 5; Strix/Krackan: 8)
MAC_TILE_I8 = {"npu1": (4, 8, 8), "npu2": (8, 8, 8)}  # r x s x t of the i8 mmul intrinsic
N_AIE_ROWS = 4                                  # compute rows of the whole_array design
B_LAYOUTS = ("row_major_KN", "col_major_NK")    # col_major_NK is nn.Linear's W[N, K] (b_col_maj=1)
C_LAYOUTS = ("row_major_MN",)
INSTS_UNITS = ("words", "bytes")
ABI_ARGS = ("opcode", "instr", "ninstr", "A", "B", "C")

# DMA and memory limits of the array (docs/device.md, "The array and the GEMM design").
DMA_MAX_STRIDE_BYTES = 4 << 20      # shim BD step: 20 bits at 32-bit granularity
DMA_MAX_REPEATS = 64                # 6-bit iteration wrap
CORE_BD_MAX_WORDS = 16383           # one core BD moves at most this many 32-bit words
L1_BYTES = 64 << 10                 # per core, stack included
L1_STACK_RESERVE = 1 << 10

INT32_MAX = 2**31 - 1


def generation_of(name: str | None) -> str | None:
    """``RyzenAI-npu5`` / ``NPU Strix Halo`` -> ``npu2``; ``RyzenAI-npu1`` / ``Phoenix`` -> ``npu1``; else None."""
    low = (name or "").lower()
    for generation, tokens in GENERATION_TOKENS.items():
        if any(t in low for t in tokens):
            return generation
    return None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Artifact:
    """One built file of a kernel: its path (relative to the manifest) and expected sha256."""

    file: str
    sha256: str | None


@dataclass(frozen=True)
class KernelManifest:
    """What one kernel artifact computes and how it is called (``kernels/*.json``).

    Validated at construction: the padding rules of the design, the array size of the generation,
    L1 and DMA limits, and the int32 bound of one launch (``K * 127 * 128 < 2^31``).
    """

    name: str
    generation: str
    kernel: str
    opcode: int
    args: tuple[str, ...]
    num_host_bos: int
    insts_len_unit: str
    m: int
    k: int
    n: int
    n_cols: int
    M_cap: int
    K: int
    N: int
    b_layout: str
    c_layout: str
    dtype_in: str
    dtype_out: str
    numerics: str
    xclbin: Artifact
    insts: Artifact
    root: Path = field(default=Path("."), compare=False)
    source: str = ""

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigError(f"kernel manifest {self.name!r} is invalid: " + "; ".join(problems))

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any], root: Path | str = ".") -> "KernelManifest":
        if d.get("schema") != SCHEMA:
            raise ConfigError(f"kernel manifest schema {d.get('schema')!r} is not supported; this engine reads schema {SCHEMA}")
        try:
            abi, des, art = d["abi"], d["design"], d["artifacts"]
            return cls(
                name=d["name"], generation=d["generation"], kernel=abi["kernel"], opcode=int(abi["opcode"]),
                args=tuple(abi["args"]), num_host_bos=int(abi["num_host_bos"]), insts_len_unit=abi["insts_len_unit"],
                m=int(des["tile"]["m"]), k=int(des["tile"]["k"]), n=int(des["tile"]["n"]), n_cols=int(des["n_cols"]),
                M_cap=int(des["M_cap"]), K=int(des["K"]), N=int(des["N"]), b_layout=des["b_layout"],
                c_layout=des["c_layout"], dtype_in=des["dtype_in"], dtype_out=des["dtype_out"], numerics=d["numerics"],
                xclbin=Artifact(art["xclbin"]["file"], art["xclbin"]["sha256"]),
                insts=Artifact(art["insts"]["file"], art["insts"]["sha256"]),
                root=Path(root), source=des.get("source", ""),
            )
        except KeyError as exc:
            raise ConfigError(f"kernel manifest {d.get('name', '?')!r} lacks the field {exc}") from None

    @classmethod
    def load(cls, path: Path | str) -> "KernelManifest":
        p = Path(path)
        try:
            d = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read kernel manifest {p}: {exc}") from None
        return cls.from_dict(d, p.parent)

    # -- checks --------------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Every rule the manifest breaks (empty when it is valid)."""
        out = []
        if self.generation not in GENERATIONS:
            return [f"generation {self.generation!r} is not one of {GENERATIONS}"]
        if (self.dtype_in, self.dtype_out) != ("i8", "i32"):
            out.append(f"dtypes {self.dtype_in}->{self.dtype_out}: only i8->i32 is bit-exact on the host")
        if self.opcode != 3 or self.args != ABI_ARGS or self.num_host_bos != 3:
            out.append(f"ABI {self.opcode}/{self.args}/{self.num_host_bos}: expected opcode 3, args {ABI_ARGS}, 3 host BOs")
        if self.insts_len_unit not in INSTS_UNITS:
            out.append(f"insts_len_unit {self.insts_len_unit!r} is not one of {INSTS_UNITS}")
        if self.b_layout not in B_LAYOUTS or self.c_layout not in C_LAYOUTS:
            out.append(f"layouts B={self.b_layout!r} C={self.c_layout!r}: supported B {B_LAYOUTS}, C {C_LAYOUTS}")
        if not 1 <= self.n_cols <= MAX_COLS[self.generation]:
            out.append(f"n_cols = {self.n_cols}: {self.generation} has {MAX_COLS[self.generation]} usable columns")
        r, s, t = MAC_TILE_I8[self.generation]
        if self.m % r or self.k % s or self.n % t:
            out.append(f"tile {self.m}x{self.k}x{self.n} is not a multiple of the i8 mmul tile {r}x{s}x{t}")
        if self.M_cap % (N_AIE_ROWS * self.m) or self.K % self.k or self.N % (self.n * self.n_cols):
            out.append(f"sizes M_cap={self.M_cap} K={self.K} N={self.N}: need M_cap % {N_AIE_ROWS * self.m}, "
                       f"K % {self.k}, N % {self.n * self.n_cols} == 0")
        if self.K * 127 * 128 > INT32_MAX:
            out.append(f"K = {self.K}: one launch could overflow int32 (K * 127 * 128 >= 2^31)")
        out += self.dma_problems()
        return out

    def dma_problems(self) -> list[str]:
        out = []
        strides = {"A row": self.K, "B row": self.N if self.b_layout == "row_major_KN" else self.K, "C row": 4 * self.N}
        for what, nbytes in strides.items():
            if nbytes > DMA_MAX_STRIDE_BYTES:
                out.append(f"{what} stride {nbytes} B exceeds the shim BD limit {DMA_MAX_STRIDE_BYTES} B; split the artifact")
        repeats = {"K blocks": self.K // self.k, "N tile groups": self.N // (self.n * self.n_cols),
                   "M tile rows": self.M_cap // (N_AIE_ROWS * self.m)}
        for what, count in repeats.items():
            if count > DMA_MAX_REPEATS:
                out.append(f"{what} = {count} exceeds the {DMA_MAX_REPEATS}-repeat BD wrap; use a smaller compiled size")
        words = {"A tile": self.m * self.k // 4, "B tile": self.k * self.n // 4, "C tile": self.m * self.n}
        for what, w in words.items():
            if w > CORE_BD_MAX_WORDS:
                out.append(f"{what} = {w} words exceeds one core BD ({CORE_BD_MAX_WORDS})")
        l1 = 2 * (self.m * self.k + self.k * self.n) + 2 * 4 * self.m * self.n  # double-buffered A, B, C
        if l1 > L1_BYTES - L1_STACK_RESERVE:
            out.append(f"double-buffered tiles need {l1} B of L1; a core has {L1_BYTES} B including its stack")
        return out

    def artifact_path(self, which: str) -> Path:
        return self.root / getattr(self, which).file

    def verify_artifacts(self) -> None:
        """Refuse (``BackendUnavailable``) unless both files exist and hash to the recorded sha256."""
        for which in ("xclbin", "insts"):
            art: Artifact = getattr(self, which)
            path = self.artifact_path(which)
            if art.sha256 is None:
                raise BackendUnavailable(
                    f"kernel {self.name!r}: the {which} artifact {path} is not built (its manifest records sha256 = null); "
                    f"build it with `nox -s kernels` on a machine with the mlir-aie toolchain (kernels/README.md)"
                )
            if not path.is_file():
                raise BackendUnavailable(f"kernel {self.name!r}: the {which} file {path} is missing; rebuild with `nox -s kernels`")
            got = sha256_file(path)
            if got != art.sha256:
                raise BackendUnavailable(
                    f"kernel {self.name!r}: {path} has sha256 {got[:16]}..., the manifest expects {art.sha256[:16]}...; "
                    f"the file and the manifest are from different builds - rebuild both with `nox -s kernels`"
                )

    def insts_len(self, nbytes: int) -> int:
        """The kernel's ``ninstr`` argument for an instruction stream of ``nbytes``."""
        return nbytes // 4 if self.insts_len_unit == "words" else nbytes

    def digest(self) -> str:
        """A short hash of everything that defines the launch (for provenance)."""
        key = json.dumps([self.name, self.generation, self.kernel, self.args, self.insts_len_unit, self.m, self.k,
                          self.n, self.n_cols, self.M_cap, self.K, self.N, self.b_layout, self.c_layout,
                          self.xclbin.sha256, self.insts.sha256])
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def a_bytes(self) -> int:
        return self.M_cap * self.K

    @property
    def b_bytes(self) -> int:
        return self.K * self.N

    @property
    def c_bytes(self) -> int:
        return 4 * self.M_cap * self.N

    @property
    def max_abs_out(self) -> int:
        """No output of one launch exceeds this in magnitude: the engine's codes lie in [-127, 127]."""
        return self.K * 127 * 127


@dataclass(frozen=True)
class WeightPlan:
    """How a weight ``[Nw, Kw]`` is cut: ``kb`` K blocks by ``nb`` N blocks of ``(K, N)`` each."""

    Nw: int
    Kw: int
    kb: int
    nb: int


def plan_weight(nw: int, kw: int, man: KernelManifest) -> WeightPlan:
    if nw < 1 or kw < 1:
        raise ValueError(f"weight shape [{nw}, {kw}] must be at least [1, 1]")
    return WeightPlan(nw, kw, -(-kw // man.K), -(-nw // man.N))


def pack_weight_blocks(wq: np.ndarray, man: KernelManifest) -> dict[tuple[int, int], np.ndarray]:
    """int8 codes ``[Nw, Kw]`` -> ``{(kb, nb): uint8 bytes of one B block}`` in the artifact's layout."""
    nw, kw = wq.shape
    p = plan_weight(nw, kw, man)
    padded = np.zeros((p.nb * man.N, p.kb * man.K), np.int8)
    padded[:nw, :kw] = wq
    out = {}
    for kb in range(p.kb):
        for nb in range(p.nb):
            blk = padded[nb * man.N : (nb + 1) * man.N, kb * man.K : (kb + 1) * man.K]  # [N, K]
            if man.b_layout == "row_major_KN":
                blk = blk.T  # [K, N]
            out[kb, nb] = np.ascontiguousarray(blk).view(np.uint8).reshape(-1)
    return out


def pack_a_block(xq: np.ndarray, mb: int, kb: int, man: KernelManifest, out: np.ndarray) -> None:
    """Write A block ``(mb, kb)`` of ``xq [M, Kw]`` (zero-padded) into ``out`` (uint8 ``[M_cap * K]``)."""
    a = out.view(np.int8).reshape(man.M_cap, man.K)
    rows = xq[mb * man.M_cap : (mb + 1) * man.M_cap, kb * man.K : (kb + 1) * man.K]
    a.fill(0)
    a[: rows.shape[0], : rows.shape[1]] = rows


def c_block(c: np.ndarray, man: KernelManifest) -> np.ndarray:
    """The C bytes (uint8 or int8 ``[4 * M_cap * N]``) as int32 ``[M_cap, N]``."""
    return np.frombuffer(np.ascontiguousarray(c).tobytes(), dtype="<i4").reshape(man.M_cap, man.N)


def m_blocks(m: int, man: KernelManifest) -> int:
    return -(-m // man.M_cap)
