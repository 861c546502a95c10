"""llama.cpp's sequence state (``llama_state_seq_get_data``) of a hybrid model, parsed into named arrays.

The layout, as llama-cpp-python 0.3.36's vendored llama.cpp writes it: a header (``u32 magic 0xaf143cd8,
i32 seq_id``, ``llama_context::state_seq_get_data``), then ``llama_memory_hybrid::state_write``: the
attention KV cache, then the recurrent memory.

KV cache (``llama_kv_cache::state_write``)::

    u32 n_stream; per stream: u32 cell_count, then (if cells)
      per cell:  i32 pos, u32 n_seq_id, [ext: i32 x, i32 y, i32 tok when the model uses M-RoPE], i32 seq_id * n_seq_id
      u32 v_trans, u32 n_layer (attention layers only, in layer order)
      per layer: i32 k_type, u64 k_row_bytes, cell_count rows of K
      v_trans == 0: per layer i32 v_type, u64 v_row_bytes, cell_count rows of V
      v_trans == 1: per layer i32 v_type, u32 v_elem_bytes, u32 n_embd_v, then per V channel cell_count elements

Recurrent memory (``llama_memory_recurrent::state_write``)::

    u32 cell_count; per cell: i32 pos, u32 n_seq_id (0 for one sequence)
    u32 s_trans (0), u32 n_layer (every layer); per recurrent layer: i32 r_type, u64 r_row_bytes, rows of R (conv)
    then per recurrent layer: i32 s_type, u64 s_row_bytes, rows of S (delta-net state)

Arrays (batch row 0, float32): ``layer.{i}.keys`` / ``.values`` ``[n_kv_heads, T, head_dim]`` with the T rows
in *position* order (KV slots are reused after a ``seq_rm``), ``kv.positions`` [T], ``layer.{i}.conv``
``[channels, kernel - 1]``, ``layer.{i}.recurrent`` ``[v_heads, head_dim, head_dim]`` (ggml's order),
``recurrent.position`` [1] (the position the recurrent state has consumed up to).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...helpers.state_blob import BlobReader, ggml_array, rows_by_position

CELL_EXT_BYTES = 12  # llama_kv_cell_ext: i32 x, i32 y, i32 tok
MAGIC = 0xAF143CD8  # llama-context.cpp's io_magic


@dataclass(frozen=True)
class Layout:
    """What the blob does not say itself: which layers are which, and the per-row shapes (from the GGUF)."""

    n_layer: int
    recurrent: tuple[bool, ...]
    n_kv_heads: int
    head_dim: int
    conv_channels: int
    conv_kernel: int
    v_heads: int
    state_dim: int
    cell_ext: bool  # the model uses M-RoPE: every KV cell carries its 2-D position and token

    @property
    def attention_layers(self) -> list[int]:
        return [i for i, r in enumerate(self.recurrent) if not r]

    @property
    def recurrent_layers(self) -> list[int]:
        return [i for i, r in enumerate(self.recurrent) if r]


def _kv(rd: BlobReader, lay: Layout, out: dict) -> None:
    import numpy as np

    n_stream = rd.u32("the KV stream count")
    rd.expect(1, n_stream, "the KV stream count (one sequence per context)")
    cells = rd.u32("the KV cell count")
    layers = lay.attention_layers
    width = lay.n_kv_heads * lay.head_dim
    if cells == 0:
        for i in layers:
            out[f"layer.{i}.keys"] = out[f"layer.{i}.values"] = np.zeros((lay.n_kv_heads, 0, lay.head_dim), np.float32)
        out["kv.positions"] = np.zeros(0, np.int64)
        return
    pos = []
    for _ in range(cells):
        pos.append(rd.i32("a KV cell position"))
        n_seq = rd.u32("a KV cell's sequence count")
        if lay.cell_ext:
            rd.raw(CELL_EXT_BYTES, "a KV cell's M-RoPE extension")
        rd.raw(4 * n_seq, "a KV cell's sequence ids")
    v_trans = rd.u32("v_trans")
    rd.expect(len(layers), rd.u32("the KV layer count"), "the KV layer count")
    keys = []
    for i in layers:
        kt, row = rd.i32("a K type"), rd.u64("a K row size")
        keys.append(ggml_array(rd.raw(row * cells, f"layer {i} keys"), kt, (cells, width), label=f"layer {i} keys"))
    values = []
    for i in layers:
        vt = rd.i32("a V type")
        if not v_trans:
            row = rd.u64("a V row size")
            values.append(ggml_array(rd.raw(row * cells, f"layer {i} values"), vt, (cells, width), label=f"layer {i} values"))
        else:
            el, n_embd = rd.u32("a V element size"), rd.u32("a V width")
            rd.expect(width, n_embd, f"layer {i}'s V width")
            v = ggml_array(rd.raw(el * n_embd * cells, f"layer {i} values"), vt, (n_embd, cells), label=f"layer {i} values")
            values.append(v.T)
    order, out["kv.positions"] = rows_by_position(np.arange(cells), pos)
    for i, k, v in zip(layers, keys, values):
        for name, a in (("keys", k), ("values", v)):
            out[f"layer.{i}.{name}"] = a[order].reshape(cells, lay.n_kv_heads, lay.head_dim).transpose(1, 0, 2).copy()


def _recurrent(rd: BlobReader, lay: Layout, out: dict) -> None:
    import numpy as np

    cells = rd.u32("the recurrent cell count")
    layers = lay.recurrent_layers
    if cells == 0:
        out["recurrent.position"] = np.full(1, -1, np.int64)
        return
    rd.expect(1, cells, "the recurrent cell count (one sequence per context)")
    out["recurrent.position"] = np.array([rd.i32("the recurrent cell position")], np.int64)
    rd.expect(0, rd.u32("the recurrent cell's sequence count"), "the recurrent cell's sequence count")
    rd.expect(0, rd.u32("s_trans"), "s_trans")
    rd.expect(lay.n_layer, rd.u32("the recurrent layer count"), "the recurrent layer count")
    conv_shape = (lay.conv_channels, lay.conv_kernel - 1)
    for i in layers:
        t, row = rd.i32("a conv state type"), rd.u64("a conv state row size")
        out[f"layer.{i}.conv"] = ggml_array(rd.raw(row, f"layer {i} conv"), t, conv_shape, label=f"layer {i} conv")
    state_shape = (lay.v_heads, lay.state_dim, lay.state_dim)
    for i in layers:
        t, row = rd.i32("a delta-net state type"), rd.u64("a delta-net state row size")
        out[f"layer.{i}.recurrent"] = ggml_array(rd.raw(row, f"layer {i} state"), t, state_shape, label=f"layer {i} state")


def parse_seq_state(blob: "bytes | memoryview", layout: Layout) -> dict:
    """Every array of one sequence's state, named as in the module docstring; fails on any byte it cannot place."""
    rd = BlobReader(blob, what="llama.cpp sequence state")
    out: dict = {}
    rd.expect(MAGIC, rd.u32("the magic number"), "the magic number")
    rd.i32("the sequence id")
    _kv(rd, layout, out)
    _recurrent(rd, layout, out)
    rd.done()
    return out
