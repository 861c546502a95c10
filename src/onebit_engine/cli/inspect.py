"""``onebit inspect PATH`` (what a checkpoint, quantized file or stage file holds) and ``onebit quantize``."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError, ConfigError, WeightError
from ..hybrid.weights import value_problems
from . import models, ui

_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def _tensors(files: list[Path]) -> list[dict[str, Any]]:
    from ..checkpoint.safetensors import read_header

    out = []
    for f in files:
        header, _, _ = read_header(f)
        for name, ent in sorted(header.items()):
            b, e = ent["data_offsets"]
            out.append({"name": name, "shape": list(ent["shape"]), "dtype": ent["dtype"], "bytes": e - b, "file": f.name})
    return out


def _quantization(path: Path, meta: dict, tensors: list[dict[str, Any]]) -> dict[str, Any]:
    """What a quantized file holds: its formats and, per weight, format, shape, bytes and bits/weight."""
    from ..quant.io import quant_header

    head = quant_header(path, meta)
    sizes = {t["name"]: t["bytes"] for t in tensors}
    weights = []
    for name, e in sorted(head["weights"].items()):
        n, k = e["shape"]
        nbytes = sizes.get(f"{name}.qdata", 0) + sizes.get(f"{name}.scale", 0)
        weights.append({"name": name, "format": e["format"], "shape": [n, k], "bytes": nbytes,
                        "bits_per_weight": 8 * nbytes / (n * k) if n * k else 0.0})
    return {"format_version": head["version"], "formats": sorted({w["format"] for w in weights}), "weights": weights}


def _unchecked(kind: str) -> str:
    """What the folder check leaves to loading (said with its verdict)."""
    later = "values are scanned when the weights load"
    if kind == "draft":  # the draft's fit needs the target it is loaded with
        later += "; its fit to a target (hidden size, vocabulary, tapped layers) is checked when it loads with one"
    return later


def _loads(folder: Path, kind: str, cfg) -> dict[str, Any]:
    """Whether the loader would take the folder: its structure check (names and shapes, quantized ones too),
    no weight values read, so inspecting a large checkpoint stays cheap."""
    from ..hybrid.model import folder_weights
    from ..hybrid.weights import check_and_map

    try:
        if kind == "target":
            check_and_map(folder_weights(folder, values=False), cfg, str(folder), values=False)
        else:
            from ..draft.loader import check_structure

            check_structure(folder, cfg)
        problem = None
    except (WeightError, CheckpointError, ConfigError) as e:
        problem = " ".join(line.strip() for line in str(e).splitlines() if line.strip())  # one line, as main's
    return {"ok": problem is None, "checked": f"names and shapes ({_unchecked(kind)})", "problem": problem}


def describe(path: "str | Path") -> dict[str, Any]:
    """A JSON-ready description: kind, config summary, quantization, tensors and totals; for a folder,
    ``loads``: whether the loader's structure check passes (names and shapes; values are not read).

    A folder written by ``onebit quantize --out DIR`` reports the quantization of its
    ``quantized.safetensors`` (formats and weights) and lists that file's tensors with the float ones."""
    from ..checkpoint.safetensors import (
        QUANT_FILE,
        checkpoint_files,
        read_config,
        read_header,
    )

    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"{str(p)!r} does not exist; give a checkpoint folder, a quantized .safetensors file or a stage file")
    loads = None
    if p.is_dir():
        raw = read_config(p)
        tensors = _tensors(checkpoint_files(p))
        source = str(p / "config.json")
        if models.folder_kind(raw) == "draft":
            from ..draft import DraftConfig

            c = DraftConfig.from_hf(raw, source=source)
            kind, cfg = "draft", {k: getattr(c, k) for k in (
                "version", "block_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "head_dim", "intermediate_size", "target_layer_ids", "mask_token_id", "vocab_size")}
        else:
            from ..hybrid.config import TargetConfig

            c = TargetConfig.from_hf(raw, source=source)
            kind, cfg = "target", {k: getattr(c, k) for k in (
                "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "layer_types",
                "num_attention_heads", "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads",
                "tie_word_embeddings")}
            if c.moe is not None:  # mixture of experts: experts, top-k, active vs total parameters
                from ..hybrid.weights import moe_summary

                cfg["moe"] = moe_summary(c)
        dtypes = sorted({t["dtype"] for t in tensors})
        quant = raw.get("quantization_config") or f"none (float checkpoint, dtypes {', '.join(dtypes)})"
        qfile = p / QUANT_FILE
        if qfile.is_file():  # a servable quantized folder: projections quantized, the rest float
            qtensors = _tensors([qfile])
            quant = {**_quantization(qfile, read_header(qfile)[2], qtensors), "file": QUANT_FILE,
                     "float_dtypes": dtypes}
            tensors += qtensors
        loads = _loads(p, kind, c)
    else:
        _, _, meta = read_header(p)
        tensors = _tensors([p])
        if "onebit.quant" in meta:
            quant = _quantization(p, meta, tensors)
            kind, cfg = "quantized", {"format_version": quant["format_version"]}
        elif "onebit.stage" in meta:
            from ..measure.stagefile import (
                read,  # the checked read: one line for a corrupt or foreign stage file
            )

            head, _ = read(p, None)
            kind, cfg = f"stage ({head.get('kind')})", {"version": head.get("version"), **head.get("payload", {})}
            quant = None
            cfg["provenance"] = head.get("provenance")
        else:
            kind, cfg, quant = "safetensors", {"metadata": meta}, None
    total = sum(t["bytes"] for t in tensors)
    params = sum(int(np.prod(t["shape"])) for t in tensors)
    d = {"path": str(p), "kind": kind, "config": cfg, "quantization": quant, "tensors": tensors,
         "total_bytes": total, "total_elements": params}
    if loads is not None:
        d["loads"] = loads
    return d


def cmd_inspect(args) -> int:
    """Exit 2 when a folder does not load: the description is still printed (what it holds helps find
    the problem), then the loader's refusal as the one error line."""
    d = describe(args.path)
    loads = d.get("loads")
    if args.json:
        ui.print_json(d)
    else:
        _print_description(d)
        if loads is not None and loads["ok"]:
            print(f"loads: yes (names and shapes checked; {_unchecked(d['kind'])})")
    if loads is not None and not loads["ok"]:
        ui.error(f"{d['path']} does not load: {loads['problem']}")
        return 2
    return 0


def _print_description(d: dict[str, Any]) -> None:
    print(f"{d['path']}: {d['kind']}, {len(d['tensors'])} tensors, {d['total_elements']:,} elements, "
          f"{d['total_bytes'] / 2**20:.2f} MiB")
    for k, v in d["config"].items():
        if k != "moe":
            print(f"  {k}: {v}")
    moe = d["config"].get("moe")
    if moe:
        shared = f"shared expert {moe['shared_expert_intermediate_size']}" if moe["shared_expert_intermediate_size"] else "no shared expert"
        print(f"  moe: {moe['num_experts']} experts of {moe['moe_intermediate_size']}, top-{moe['top_k']}, {shared}, "
              f"sparse layers {moe['sparse_layers']}; parameters {moe['active_params']:,} active per token of "
              f"{moe['total_params']:,} total ({moe['active_params'] / moe['total_params']:.1%})")
    q = d["quantization"]
    if isinstance(q, dict) and "weights" in q:
        where = f" in {q['file']}; other tensors float ({', '.join(q['float_dtypes'])})" if "file" in q else ""
        print(f"quantization: {', '.join(q['formats'])}, {len(q['weights'])} weights{where} "
              f"(one float32 scale per output channel)")
        print(ui.table(["weight", "format", "shape", "bytes", "bits/weight"],
                       [(w["name"], w["format"], "x".join(map(str, w["shape"])), w["bytes"], w["bits_per_weight"]) for w in q["weights"]]))
        if "file" not in q:
            return
        print()
    elif q is not None:
        print(f"quantization: {q}")
    print(ui.table(["tensor", "shape", "dtype", "bytes"],
                   [(t["name"], "x".join(map(str, t["shape"])) or "scalar", t["dtype"], t["bytes"]) for t in d["tensors"]]))


def is_projection(name: str, arr) -> bool:
    """2-D weights a GEMM multiplies (not the embedding table, the selector codebooks or norms)."""
    return len(arr.shape) == 2 and name.endswith(".weight") and "embed_tokens" not in name and "codebook" not in name


def _check_config(folder: Path, *, servable: bool) -> Any:
    """The folder's config must be one this engine reads (a target's; a draft's too for a weights-only
    .safetensors output), so a broken checkpoint is refused before any weight is quantized. Returns the config."""
    from ..checkpoint.safetensors import read_config
    from ..draft.config import DraftConfig
    from ..hybrid.config import TargetConfig

    raw = read_config(folder)
    source = str(folder / "config.json")
    draft = isinstance(raw, dict) and "dflash_config" in raw
    if servable and draft:
        raise ConfigError(f"{folder} is a DFlash draft (its config.json has dflash_config), and quantize --out DIR writes "
                          f"a servable target folder; give --out X.safetensors to quantize the draft's projections into "
                          f"one file, or serve the float draft (the host-int backend quantizes it as it loads)")
    return DraftConfig.from_hf(raw, source) if draft else TargetConfig.from_hf(raw, source)


def _check_structure(raw: dict, cfg, folder: Path) -> None:
    """A servable folder's tensors against its config, as ``load_target`` checks them (names and shapes; the
    values are scanned as they are quantized or copied): a folder the loader would refuse is not written."""
    from ..hybrid.weights import check_and_map

    try:
        check_and_map(raw, cfg, str(folder), values=False)
    except WeightError as e:
        raise WeightError(f"cannot quantize, nothing was written (the loader would refuse the folder): {e}") from None


def _stored_dtype(w) -> str:
    """The safetensors dtype a projection is stored in (a fused expert's rows: its fused tensor's)."""
    from ..checkpoint.lazy import TensorRef

    while not isinstance(w, TensorRef):
        w = getattr(w, "src", None)
        if w is None:
            return "F32"
    return w.dtype


def cmd_quantize(args) -> int:
    """Quantize a float checkpoint's projections, reading, quantizing and writing a block of rows at a time
    (no weight is ever whole in memory); the other tensors are copied in their stored dtype."""
    from ..atomic import atomic_folder, atomic_path
    from ..checkpoint.safetensors import QUANT_FILE, folder_refs
    from ..checkpoint.writer import copy_tensors
    from ..hybrid.moe_weights import idle_shared, split_fused_experts
    from ..quant.rows import as_rows
    from ..quant.stream_write import write_quantized

    folder = Path(args.model) if args.model else models.builtin_paths()[0]
    servable = not str(args.out).endswith(".safetensors")
    cfg = _check_config(folder, servable=servable)
    if (folder / QUANT_FILE).exists():
        raise CheckpointError(f"{folder} is already quantized (it holds {QUANT_FILE}); serve it as it is, or quantize the "
                              f"float checkpoint it came from")
    raw = folder_refs(folder)
    if servable:  # a folder that says "run it" must be one the loader takes: its names and shapes, before any work
        _check_structure(raw, cfg, folder)
    refs = split_fused_experts(raw)  # fused 3-D experts: one projection per expert
    chosen = {n: a for n, a in sorted(refs.items()) if is_projection(n, a) and not idle_shared(n, a.shape, cfg)}
    if not chosen:
        raise CheckpointError(f"{folder} holds no 2-D projection weights to quantize; give a float checkpoint folder")
    empty = [f"{n} {tuple(a.shape)}" for n, a in chosen.items() if 0 in tuple(a.shape)]
    if empty:
        raise WeightError(f"{folder}: cannot quantize {len(empty)} projection(s) with no rows or no columns: "
                          f"{', '.join(empty[:3])}; a projection needs at least one of each - re-export the weights")
    # the load-time rule, before any work: no code quantizes a NaN or an integer (nor copies one into a servable folder)
    bad = value_problems(refs if servable else chosen)
    if bad:
        raise WeightError(f"{folder}: cannot quantize: {'; '.join(bad)}; re-export the weights (float dtypes, finite values)")
    sources = {n: as_rows(a) for n, a in chosen.items()}
    total = sum(src.shape[0] for src in sources.values())
    ui.note(args, f"quantizing {len(sources)} projections of {folder} to {args.format}")
    with ui.Bar(total, "quantize", ui.progress_enabled(args)) as bar:
        if not servable:
            with atomic_path(args.out) as tmp:
                written = write_quantized(tmp, sources, args.format, bar)
        else:
            import shutil

            with atomic_folder(Path(args.out)) as tmp:
                shutil.copyfile(folder / "config.json", tmp / "config.json")
                copy_tensors(tmp / "model.safetensors", {n: r for n, r in refs.items() if n not in chosen}, {"format": "pt"})
                written = write_quantized(tmp / QUANT_FILE, sources, args.format, bar)
    rows = []
    for w in written:
        dtype = _stored_dtype(chosen[w.name])
        itemsize = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}.get(str(dtype), 4)
        rows.append({"name": w.name, "shape": list(w.shape), "stored_dtype": str(dtype), "stored_bytes": w.shape[0] * w.shape[1] * itemsize,
                     "bytes": w.bytes, "rel_error": w.rel_error})
    dtypes = sorted({r["stored_dtype"] for r in rows})
    info = {"command": "quantize", "model": str(folder), "format": args.format, "out": str(args.out), "weights": rows,
            "stored_dtypes": dtypes, "stored_bytes": sum(r["stored_bytes"] for r in rows), "bytes": sum(r["bytes"] for r in rows)}
    if args.json:
        ui.print_json(info)
        return 0
    print(ui.table(["weight", "shape", "stored as", "stored bytes", f"{args.format} bytes", "rel. error"],
                   [(r["name"], "x".join(map(str, r["shape"])), r["stored_dtype"], r["stored_bytes"], r["bytes"], r["rel_error"])
                    for r in rows], digits=4))
    how = ("read it back with `onebit inspect " + str(args.out) + "`" if not servable
           else "run it with `onebit loop --model " + str(args.out) + " --backend host-int`")
    print(f"\n{len(rows)} projections, {info['stored_bytes'] / 2**20:.2f} MiB stored as {'/'.join(dtypes)} -> "
          f"{info['bytes'] / 2**20:.2f} MiB {args.format} (codes and per-row scales) -> {args.out} ({how})")
    return 0
