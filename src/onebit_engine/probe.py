"""The staged acceptance probe: capture -> draft -> score (the seed PR's ``dflash2_probe`` stages).

* ``capture``: the target decodes each prompt greedily; the generated tokens and the draft's context
  taps (the target rows after the layers in ``target_layer_ids``) are kept.
* ``draft_offline``: the draft runs over the capture with no target: for every committed anchor
  position it proposes ``block - 1`` tokens from the context up to that position.
* ``score``: how far each proposal agrees with what the target actually produced: acceptance by draft
  position, tokens per round for a given k, the ceiling that implies and the break-even round cost.

Stage files are safetensors with a JSON header (metadata key ``onebit.stage``) holding the stage kind,
the format version, the provenance (engine version, git revision, model and draft sha256, backend,
kernel set, row set) and a sha256 of the tensor bytes. They are written atomically. A stage from
another model, draft, engine version or kernel set is refused: acceptance measured against one build's
tokens says nothing about another's (the seed's trap: a reference from another kernel set parts at
token 23).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .atomic import atomic_write_bytes
from .errors import CheckpointError, OnebitError

STAGE_VERSION = 1
HEADER_KEY = "onebit.stage"
# Provenance fields that must agree between stages (and with the model the stage is used with).
STRICT_FIELDS = ("engine_version", "model_hash", "draft_hash", "backend", "kernel_set", "kernel_hash", "row_set")

Progress = Callable[[int], None]


class StageError(OnebitError, ValueError):
    """A stage file is missing, corrupt, of the wrong kind, or from another model / draft / build."""


@dataclass
class Capture:
    """Greedy target runs. Per prompt: ``prompt`` ids, generated ``tokens`` [N], ``taps`` float32
    [P + N, n_taps, D] (row t = the target rows for position t at the layers ``tap_layers``)."""

    provenance: dict[str, Any]
    prompts: list[list[int]]
    tokens: list[list[int]]
    taps: list[np.ndarray]
    tap_layers: list[int]
    num_target_layers: int
    step_ms: float
    checksum: str = ""


@dataclass
class DraftStage:
    """Offline proposals. Per prompt: int64 [N - 1, block - 1]; row j = the proposal after generated
    token j (the anchor) given the context of every position before it."""

    provenance: dict[str, Any]
    capture_checksum: str
    block_size: int
    proposals: list[np.ndarray]
    draft_ms: float
    checksum: str = ""


# -- running the stages -------------------------------------------------------------------------------
def capture(target, prompts: Sequence[Sequence[int]], max_new_tokens: int, *, tap_layers: Sequence[int],
            provenance: dict[str, Any], progress: Progress | None = None) -> Capture:
    """Greedy-decode every prompt (one forward per token, as ``generate``) and keep the taps."""
    from .sampling import greedy

    if max_new_tokens < 2:
        raise ValueError(f"max_new_tokens={max_new_tokens} is too short to probe; give at least 2")
    layers = sorted({int(i) for i in tap_layers})
    all_tokens, all_taps, steps = [], [], []
    for prompt in prompts:
        state = target.new_state()
        out = target.forward(list(prompt), state)
        rows = [out.hidden[:, layers]]
        toks = [greedy(out.logits[-1])]
        while len(toks) < max_new_tokens:
            t0 = time.perf_counter()
            out = target.forward([toks[-1]], state)
            steps.append(1e3 * (time.perf_counter() - t0))
            rows.append(out.hidden[:, layers])
            toks.append(greedy(out.logits[0]))
            if progress:
                progress(1)
        out = target.forward([toks[-1]], state)  # the last token's taps: context for nothing, kept for symmetry
        rows.append(out.hidden[:, layers])
        all_tokens.append(toks)
        all_taps.append(np.ascontiguousarray(np.concatenate(rows), dtype=np.float32))
        if progress:
            progress(1)
    return Capture(dict(provenance), [list(map(int, p)) for p in prompts], all_tokens, all_taps, layers,
                   int(target.config.num_hidden_layers), float(np.median(steps)) if steps else float("nan"))


def draft_offline(draft, cap: Capture, *, provenance: dict[str, Any], progress: Progress | None = None) -> DraftStage:
    """Run the draft over a capture: one proposal of ``block - 1`` tokens per generated anchor."""
    ids = [int(i) for i in draft.config.target_layer_ids]
    missing = sorted(set(ids) - set(cap.tap_layers))
    if missing:
        raise StageError(f"the draft taps target layers {missing} that the capture did not keep (it kept "
                         f"{cap.tap_layers}); capture again with this draft")
    n = draft.config.block_size - 1
    props, times = [], []
    for prompt, toks, taps in zip(cap.prompts, cap.tokens, cap.taps):
        full = np.zeros((taps.shape[0], cap.num_target_layers, taps.shape[2]), np.float32)  # [T, L, D]
        for col, layer in enumerate(cap.tap_layers):
            full[:, layer] = taps[:, col]
        state = draft.new_state()
        p = len(prompt)
        draft.append_context(state, full[:p])
        rows = []
        for j, anchor in enumerate(toks[:-1]):
            t0 = time.perf_counter()
            rows.append(np.asarray(draft.propose(state, anchor, n).tokens, np.int64)[:n])
            draft.append_context(state, full[p + j : p + j + 1])
            times.append(1e3 * (time.perf_counter() - t0))
            if progress:
                progress(1)
        props.append(np.stack(rows) if rows else np.zeros((0, n), np.int64))
    return DraftStage(dict(provenance), cap.checksum, int(draft.config.block_size), props,
                      float(np.median(times)) if times else float("nan"))


# -- scoring ------------------------------------------------------------------------------------------
def expected_tokens(a: float, k: int) -> float:
    """Leviathan et al.: expected tokens per round ``(1 - a^(k+1)) / (1 - a)`` at per-token acceptance a."""
    return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def break_even_acceptance(round_cost: float, k: int) -> float | None:
    """The per-token acceptance at which a round of cost ``round_cost`` plain steps only ties plain
    decoding (``expected_tokens(a, k) == round_cost``); None when no acceptance can pay for it."""
    if round_cost <= 1.0:
        return 0.0
    if round_cost > k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, k) < round_cost else (lo, mid)
    return hi


def accept_lengths(tokens: Sequence[int], proposals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per anchor j: the accepted length (longest prefix of proposal j equal to tokens j+1..) and the
    number of positions that have a truth to compare with (the run ends)."""
    toks = np.asarray(tokens, np.int64)
    n_anchor, width = proposals.shape
    lengths, known = np.zeros(n_anchor, np.int64), np.zeros(n_anchor, np.int64)
    for j in range(n_anchor):
        truth = toks[j + 1 : j + 1 + width]
        known[j] = len(truth)
        eq = proposals[j, : len(truth)] == truth
        lengths[j] = len(truth) if eq.all() else int(np.argmin(eq))
    return lengths, known


def score(cap: Capture, ds: DraftStage, ks: Sequence[int] | None = None, *, round_cost: float | None = None) -> dict[str, Any]:
    """Acceptance by position, tokens per round (over every anchor and along the loop's own path),
    the ceiling and the break-even, for each k in ``ks`` (default 1..block-1)."""
    check_pair(cap, ds)
    width = ds.block_size - 1
    ks = list(ks) if ks else list(range(1, width + 1))
    bad = [k for k in ks if not 1 <= k <= width]
    if bad:
        raise StageError(f"k={bad[0]} is out of range: the draft stage holds {width} drafts per anchor "
                         f"(block size {ds.block_size} minus 1); give k in 1..{width}")
    per = [accept_lengths(t, p) for t, p in zip(cap.tokens, ds.proposals)]
    by_pos, cond = [], []
    for i in range(width):
        seen = [(L > i).astype(float)[kn > i] for L, kn in per]
        cond_seen = [(L > i)[(kn > i) & (L >= i)] for L, kn in per]
        s, c = np.concatenate(seen), np.concatenate(cond_seen)
        by_pos.append(float(s.mean()) if s.size else None)
        cond.append(float(c.mean()) if c.size else None)
    d_steps = ds.draft_ms / cap.step_ms if cap.step_ms > 0 else float("nan")
    rows = []
    for k in ks:
        acc, rej, tpr_all, emitted, rounds = 0, 0, [], 0, 0
        for (L, kn), toks in zip(per, cap.tokens):
            ok = kn >= k  # anchors with a full truth for k drafts
            a = np.minimum(L[ok], k)
            acc += int(a.sum())
            rej += int((a < k).sum())
            tpr_all.extend((a + 1).tolist())
            j = 0
            while j < len(L):  # the loop's own path: jump past what each round emits
                got = int(min(L[j], k, kn[j]))
                emitted += got + 1
                rounds += 1
                j += got + 1
        a_hat = acc / (acc + rej) if acc + rej else 0.0
        loop_tpr = emitted / rounds if rounds else 0.0
        # ceiling: the speedup if a whole round cost one plain step; break-even: a round must cost
        # fewer plain steps than it emits tokens, so the draft leaves (ceiling - draft) for verify + commit.
        row = {"k": k, "anchors": len(tpr_all), "tokens_per_round": float(np.mean(tpr_all)) if tpr_all else 0.0,
               "tokens_per_round_loop": loop_tpr, "per_token_acceptance": a_hat,
               "expected_tokens_geometric": expected_tokens(a_hat, k), "ceiling": loop_tpr,
               "break_even_round_steps": loop_tpr, "verify_commit_budget_steps": loop_tpr - d_steps}
        if round_cost is not None:
            row["predicted_speedup"] = loop_tpr / round_cost
            row["break_even_acceptance"] = break_even_acceptance(round_cost, k)
        rows.append(row)
    return {"acceptance_by_position": by_pos, "conditional_acceptance_by_position": cond, "k": rows,
            "step_ms": cap.step_ms, "draft_ms": ds.draft_ms, "draft_cost_steps": d_steps,
            "round_cost_steps": round_cost, "prompts": len(cap.prompts),
            "generated_tokens": sum(len(t) for t in cap.tokens), "provenance": cap.provenance}


# -- provenance checks --------------------------------------------------------------------------------
def provenance_mismatch(expected: dict[str, Any], found: dict[str, Any], fields: Sequence[str] = STRICT_FIELDS) -> list[str]:
    """The fields (of ``fields``) on which two provenances differ, as ``name: a != b`` strings."""
    return [f"{k}: {found.get(k)!r} != {expected.get(k)!r}" for k in fields if found.get(k) != expected.get(k)]


def check_provenance(path: "str | Path", found: dict[str, Any], expected: dict[str, Any], against: str) -> None:
    diffs = provenance_mismatch(expected, found)
    if diffs:
        raise StageError(f"stage file {str(path)!r} was made with another model, draft or build than {against} "
                         f"({'; '.join(diffs)}); re-run the earlier stage with this model, draft and build")


def check_pair(cap: Capture, ds: DraftStage) -> None:
    if ds.capture_checksum != cap.checksum:
        raise StageError("the draft stage was not made from this capture (its capture checksum "
                         f"{ds.capture_checksum[:12]} != {cap.checksum[:12]}); run `onebit probe draft` on this capture")
    # the draft stage's provenance is the run's; compare only the model / draft / engine identity
    diffs = provenance_mismatch(cap.provenance, ds.provenance, ("engine_version", "model_hash", "draft_hash"))
    if diffs:
        raise StageError(f"the draft stage and the capture come from different models or engines ({'; '.join(diffs)})")


# -- files --------------------------------------------------------------------------------------------
def _encode(kind: str, provenance: dict, payload: dict, tensors: dict[str, np.ndarray]) -> tuple[bytes, str]:
    from safetensors.numpy import save

    tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    digest = _tensor_digest(tensors)
    head = {"kind": kind, "version": STAGE_VERSION, "provenance": provenance, "payload": payload, "sha256": digest}
    return save(tensors, metadata={HEADER_KEY: json.dumps(head, sort_keys=True)}), digest


def _tensor_digest(tensors: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        a = tensors[name]
        h.update(f"{name}|{a.dtype.str}|{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_capture(path: "str | Path", cap: Capture) -> str:
    tensors = {}
    for i, (p, t, taps) in enumerate(zip(cap.prompts, cap.tokens, cap.taps)):
        tensors[f"p{i}.prompt"] = np.asarray(p, np.int64)
        tensors[f"p{i}.tokens"] = np.asarray(t, np.int64)
        tensors[f"p{i}.taps"] = taps
    payload = {"prompts": len(cap.prompts), "tap_layers": cap.tap_layers,
               "num_target_layers": cap.num_target_layers, "step_ms": cap.step_ms}
    data, cap.checksum = _encode("capture", cap.provenance, payload, tensors)
    atomic_write_bytes(path, data)
    return cap.checksum


def save_draft_stage(path: "str | Path", ds: DraftStage) -> str:
    tensors = {f"p{i}.proposals": p for i, p in enumerate(ds.proposals)}
    payload = {"prompts": len(ds.proposals), "capture_sha256": ds.capture_checksum, "block_size": ds.block_size,
               "draft_ms": ds.draft_ms}
    data, ds.checksum = _encode("draft", ds.provenance, payload, tensors)
    atomic_write_bytes(path, data)
    return ds.checksum


def read_stage(path: "str | Path", kind: str) -> tuple[dict, dict[str, np.ndarray]]:
    """(header, tensors) of a stage file of ``kind``; one StageError line for anything wrong."""
    from .safetensors_io import iter_tensors, read_header

    p = Path(path)
    redo = "run `onebit probe capture`" if kind == "capture" else "run `onebit probe draft`"
    if not p.is_file():
        raise StageError(f"stage file {str(p)!r} does not exist; {redo} to make it")
    try:
        _, _, meta = read_header(p)
        tensors = dict(iter_tensors(p))
        head = json.loads(meta[HEADER_KEY])
        if not isinstance(head, dict):
            raise ValueError("header is not an object")
    except KeyError:
        raise StageError(f"{str(p)!r} is not a onebit stage file (no {HEADER_KEY!r} header); {redo}") from None
    except (CheckpointError, ValueError, TypeError, OSError) as e:
        first = str(e).splitlines()[0]
        raise StageError(f"stage file {str(p)!r} is corrupt ({first}); delete it and {redo} again") from None
    if head.get("kind") != kind:
        raise StageError(f"{str(p)!r} is a {head.get('kind')!r} stage file, not a {kind!r} one; give the {kind} stage file")
    if head.get("version") != STAGE_VERSION:
        raise StageError(f"{str(p)!r} has stage format version {head.get('version')!r}; this engine reads version "
                         f"{STAGE_VERSION} - {redo} again with this engine")
    if _tensor_digest(tensors) != head.get("sha256"):
        raise StageError(f"stage file {str(p)!r} is corrupt (its tensors do not match the sha256 in its header); "
                         f"delete it and {redo} again")
    return head, tensors


def load_capture(path: "str | Path") -> Capture:
    head, t = read_stage(path, "capture")
    pl = head["payload"]
    n = int(pl["prompts"])
    return Capture(head["provenance"], [t[f"p{i}.prompt"].tolist() for i in range(n)],
                   [t[f"p{i}.tokens"].tolist() for i in range(n)], [t[f"p{i}.taps"] for i in range(n)],
                   list(pl["tap_layers"]), int(pl["num_target_layers"]), float(pl["step_ms"]), head["sha256"])


def load_draft_stage(path: "str | Path") -> DraftStage:
    head, t = read_stage(path, "draft")
    pl = head["payload"]
    return DraftStage(head["provenance"], pl["capture_sha256"], int(pl["block_size"]),
                      [t[f"p{i}.proposals"] for i in range(int(pl["prompts"]))], float(pl["draft_ms"]), head["sha256"])


__all__ = ["Capture", "DraftStage", "StageError", "capture", "draft_offline", "score", "expected_tokens",
           "break_even_acceptance", "save_capture", "save_draft_stage", "load_capture", "load_draft_stage",
           "check_provenance", "provenance_mismatch"]
