"""The GEMM seam: the one interface every matrix product of the model goes through.

A backend packs a float weight ``W [N, K]`` (PyTorch ``nn.Linear`` layout) once, at load time, and
then computes ``y = x @ W.T`` for activations ``x [M, K]``. The model never branches on the backend;
it only calls :class:`Linear`, which runs every product in fixed *row sets* of ``row_set`` rows
(a short call is zero-padded up to the set). That is what makes results batch invariant: a row's
output depends only on that row, never on how many other rows shared the call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import WeightError
from ..quant.rows import Stacked, as_rows, load

F32_DTYPE = np.dtype(np.float32)  # the dtype singleton: an identity test is the cheapest check


def backend_threads(linear) -> int:
    """The threads of a projection's GEMM backend, read at each call (a benchmark changes them between runs):
    the ops between GEMMs that run on the backend's pool take the same cores, which wait between GEMMs."""
    return int(getattr(linear.backend, "threads", 1))


@runtime_checkable
class GemmBackend(Protocol):
    """What a GEMM backend provides.

    ``exact`` is the backend's claim that, inside one call of a fixed row count, a row's result does
    not depend on its position or on the other rows (bitwise). The engine's exact claims (verify ==
    single steps, commit paths == sequential reference, loop == plain greedy) are tested on, and
    only made for, backends that set it.
    """

    name: str
    exact: bool
    # Optional (default False): a row's result does not depend on how many rows the call has either (an
    # exact integer product), so callers may skip the zero padding of a short row set.
    # row_invariant: bool
    # Optional (default False): ``pack`` takes a row source (``quant.rows``) and reads it a block at a
    # time, so a model loads without a float copy of any whole weight.
    # streams_rows: bool

    def pack(self, weight: np.ndarray, *, name: str = "") -> Any:
        """Pack ``weight`` float32 ``[N, K]`` into the backend's resident form."""

    def matmul(self, x: np.ndarray, packed: Any) -> np.ndarray:
        """``x`` float32 ``[M, K]`` -> float32 ``[M, N]`` (``x @ W.T``)."""

    def describe(self) -> dict[str, Any]:
        """Provenance: backend name, numerics, kernel set / manifest hash where there is one."""


@dataclass
class Linear:
    """A projection bound to a backend and a row set. The only caller of ``backend.matmul``.

    Shapes: ``x [M, K]`` -> ``[M, N]``; each chunk of ``row_set`` rows is one backend call, a short one
    zero-padded to ``row_set`` unless the backend is ``row_invariant``.
    """

    packed: Any
    backend: GemmBackend
    row_set: int
    in_features: int
    out_features: int
    name: str = ""
    row_invariant: bool = field(init=False)  # the backend's claim, read once: every call consults it

    def __post_init__(self) -> None:
        self.row_invariant = bool(getattr(self.backend, "row_invariant", False))

    @classmethod
    def fused(cls, weights: list, backend: GemmBackend, row_set: int, name: str = "") -> "Linear":
        """One projection for several weights that read the same input (rows stacked in order, never
        copied into one array first); split its output at the parts' widths. Fewer, larger calls per token."""
        try:
            stacked = Stacked(tuple(as_rows(w) for w in weights))
        except WeightError as e:
            raise WeightError(f"{name or 'a fused projection'}: {e}") from None
        return cls.from_weight(stacked, backend, row_set, name)

    @classmethod
    def from_weight(cls, weight: Any, backend: GemmBackend, row_set: int, name: str = "") -> "Linear":
        """``weight``: a float array ``[N, K]``, a QuantWeight or a row source (``quant.rows``). A backend
        that sets ``streams_rows`` packs a row source block by block; any other gets the whole weight."""
        if isinstance(weight, np.ndarray) and weight.ndim != 2:
            raise ValueError(f"weight {name!r} must be 2-D [N, K], got shape {weight.shape}")
        src = as_rows(weight)
        n, k = src.shape
        packed = backend.pack(src if getattr(backend, "streams_rows", False) else load(src), name=name)
        return cls(packed, backend, row_set, k, n, name)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        m = x.shape[0]
        rs = self.row_set
        if m == rs or (m < rs and self.row_invariant):  # one call: a full row set, or rows that need no padding
            return self.backend.matmul(np.ascontiguousarray(x, dtype=np.float32), self.packed)
        out = np.empty((m, self.out_features), dtype=np.float32)
        for r0 in range(0, m, rs):
            chunk = x[r0 : r0 + rs]
            n = chunk.shape[0]
            if n < rs and not self.row_invariant:
                padded = np.zeros((rs, self.in_features), dtype=np.float32)
                padded[:n] = chunk
                chunk = padded
            out[r0 : r0 + n] = self.backend.matmul(np.ascontiguousarray(chunk, dtype=np.float32), self.packed)[:n]
        return out


def run_packed(linears: "list[Linear]", x: np.ndarray, offs: "list[int]", counts: "list[int]") -> np.ndarray:
    """Product s: ``linears[s]`` on the ``counts[s]`` rows of its in_features at element ``offs[s]`` of the flat
    float32 ``x``; the outputs ``[counts[s], out_features]`` back to back in one flat float32 array. Why: a MoE
    layer's experts read rows of one input and their outputs feed one elementwise call, so one buffer each way
    spares a list of views, a concatenate and the checks per product (~8 ms of Python a 35B-A3B token).
    The twin: each linear on its rows, raveled, concatenated; in one backend call (``matmul_packed``, optional)
    when every projection is on that backend, it is ``row_invariant`` and each count fits one row set."""
    if not (len(offs) == len(counts) == len(linears)):
        raise ValueError(f"run_packed: {len(offs)} offsets and {len(counts)} counts for {len(linears)} linears")
    if linears:
        b = linears[0].backend
        packed = getattr(b, "matmul_packed", None)
        if packed is not None:
            for lin, c in zip(linears, counts):
                if lin.backend is not b or not lin.row_invariant or c > lin.row_set:
                    break
            else:
                return packed(x, offs, counts, [lin.packed for lin in linears])
    return each_product(linears, x, offs, counts, [lin.in_features for lin in linears])


def each_product(products: list, x: np.ndarray, offs: "list[int]", counts: "list[int]", ks: "list[int]") -> np.ndarray:
    """The slow twin of a packed call: ``products[s]`` (rows -> [rows, out]) on the ``counts[s]`` rows of
    ``ks[s]`` elements at element ``offs[s]`` of the flat ``x``, one call each, raveled back to back."""
    ys = [f(flat_rows(x, o, c, k)).ravel() for f, o, c, k in zip(products, offs, counts, ks)]
    return np.concatenate(ys) if ys else np.zeros(0, np.float32)


def flat_rows(x: np.ndarray, off: int, count: int, k: int) -> np.ndarray:
    """The ``[count, k]`` rows at element ``off`` of the flat ``x`` (a view); a range outside it is refused."""
    if x.ndim != 1 or off < 0 or count < 0 or off + count * k > x.shape[0]:
        raise ValueError(f"rows [{count}, {k}] at element {off} do not lie inside a flat x of shape {x.shape}")
    return x[off : off + count * k].reshape(count, k)
