"""HF Qwen3.5 / Qwen3-Next tensors in the form llama.cpp's ``qwen35`` / ``qwen3next`` graphs read them (float32).

Every rule, and why (the names stay HF-side; ``gguf``'s tensor-name table maps them afterwards):

* RMSNorm weights HF stores as ``w`` and applies as ``1 + w`` are stored as ``1 + w`` (every norm but the
  delta-net's gated norm, which HF applies as ``w``);
* ``A_log`` becomes ``A = -exp(A_log)`` (``ssm_a``), ``dt_bias`` is ``dt_proj.bias`` (``ssm_dt.bias``), and the
  conv1d weight ``[C, 1, K]`` loses its middle axis;
* ``qwen35``: with fewer key heads than value heads HF orders the value heads grouped by key head
  (``[k0: v0 v1, k1: v0 v1]``) while the graph broadcasts tiled (``[k0 k1, k0 k1]``): every value-head axis
  (the V rows of ``in_proj_qkv``, ``in_proj_z``, ``in_proj_a`` / ``_b``, ``A_log``, ``dt_bias``, the conv's V
  channels, ``out_proj``'s columns) is permuted to the tiled order (:func:`tiled_v_heads`);
* ``qwen3next``: HF's fused ``in_proj_qkvz`` (per key head ``[q, k, v, z]``) is split into ``in_proj_qkv``
  (all q, all k, all v, value heads kept grouped: this graph broadcasts grouped) and ``in_proj_z``;
  ``in_proj_ba`` stays as it is (per key head ``[b, a]``, which the graph splits itself); the experts'
  per-expert matrices are stacked ``[n_expert, rows, cols]`` and the shared-expert gate ``[1, D]`` is a vector.
"""
from __future__ import annotations

import re

EXPERT = re.compile(r"^(?P<p>.*\.mlp\.experts)\.(?P<e>\d+)\.(?P<w>\w+_proj\.weight)$")


def tiled_v_heads(a, axis: int, k_heads: int, v_per_k: int, head_dim: int):
    """Value heads along ``axis`` from HF's grouped order to ggml's tiled order."""
    import numpy as np

    a = np.moveaxis(np.asarray(a), axis, 0)
    rest = a.shape[1:]
    a = a.reshape(k_heads, v_per_k, head_dim, *rest).swapaxes(0, 1).reshape(k_heads * v_per_k * head_dim, *rest)
    return np.ascontiguousarray(np.moveaxis(a, 0, axis))


def _common(leaf: str, name: str, a):
    """The rules both archs share for a delta-net tensor; None when ``leaf`` is not one of them."""
    import numpy as np

    if leaf == "A_log":
        return name, -np.exp(a.astype(np.float64))
    if leaf == "dt_bias":
        return name.replace("dt_bias", "dt_proj.bias"), a
    if leaf == "conv1d.weight":
        return name, a.reshape(a.shape[0], a.shape[-1])
    return None


def _qwen35_linear_attn(name: str, leaf: str, a, cfg: dict):
    import numpy as np

    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, r = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], hv // hk
    qk = 2 * hk * dk

    def tiled(x, axis, head_dim):
        return tiled_v_heads(x, axis, hk, r, head_dim) if r > 1 else x

    if leaf in ("in_proj_qkv.weight", "conv1d.weight"):
        a = a.reshape(a.shape[0], a.shape[-1]) if leaf == "conv1d.weight" else a
        a = np.concatenate([a[:qk], tiled(a[qk:], 0, dv)])
    elif leaf == "in_proj_z.weight":
        a = tiled(a, 0, dv)
    elif leaf in ("in_proj_a.weight", "in_proj_b.weight", "A_log", "dt_bias"):
        a = tiled(a, 0, 1)
    elif leaf == "out_proj.weight":
        a = tiled(a, 1, dv)
    return [_common(leaf, name, a) or (name, a)]


def _qwen3next_linear_attn(name: str, leaf: str, a, cfg: dict):
    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, r = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], hv // hk
    if leaf == "in_proj_qkvz.weight":
        g = a.reshape(hk, 2 * dk + 2 * r * dv, a.shape[-1])
        parts = [g[:, :dk], g[:, dk:2 * dk], g[:, 2 * dk:2 * dk + r * dv]]
        qkv = [p.reshape(-1, a.shape[-1]) for p in parts]
        import numpy as np

        base = name.replace("in_proj_qkvz", "in_proj_qkv")
        return [(base, np.concatenate(qkv)), (name.replace("in_proj_qkvz", "in_proj_z"),
                                             g[:, 2 * dk + r * dv:].reshape(-1, a.shape[-1]))]
    return [_common(leaf, name, a) or (name, a)]


LINEAR_ATTN = {"qwen35": _qwen35_linear_attn, "qwen3next": _qwen3next_linear_attn}


def convert_tensor(name: str, a, cfg: dict, arch: str = "qwen35") -> list:
    """[(llama.cpp's HF-side name, float32 array)] for one HF tensor (experts are stacked by :func:`convert_all`)."""
    import numpy as np

    a = np.asarray(a, np.float32)
    if ".linear_attn." in name:
        out = LINEAR_ATTN[arch](name, name.rsplit("linear_attn.", 1)[1], a, cfg)
    elif name.endswith("norm.weight"):
        out = [(name, a + np.float32(1.0))]  # HF applies (1 + w) in these RMSNorms
    elif name.endswith("shared_expert_gate.weight"):
        out = [(name, a.reshape(-1))]
    else:
        out = [(name, a)]
    return [(n, np.ascontiguousarray(x, dtype=np.float32)) for n, x in out]


def convert_all(tensors: dict, cfg: dict, arch: str):
    """Every converted tensor, the per-expert matrices stacked into one ``...mlp.experts.<w>`` per layer."""
    import numpy as np

    experts: dict = {}
    for name in sorted(tensors):
        m = EXPERT.match(name)
        if m:
            experts.setdefault(f"{m['p']}.{m['w']}", {})[int(m["e"])] = np.asarray(tensors[name], np.float32)
            continue
        yield from convert_tensor(name, tensors[name], cfg, arch)
    for name, per in sorted(experts.items()):
        yield name, np.ascontiguousarray(np.stack([per[e] for e in sorted(per)]))
