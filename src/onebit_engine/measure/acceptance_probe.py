"""The staged acceptance probe: capture -> draft -> score (the seed PR's ``dflash2_probe`` stages).

* ``capture``: the target decodes each prompt greedily; the generated tokens and the draft's context
  taps (the target rows after the layers in ``target_layer_ids``) are kept.
* ``draft_offline``: the draft runs over the capture with no target: for every committed anchor
  position it proposes ``block - 1`` tokens from the context up to that position.
* ``score``: how far each proposal agrees with what the target actually produced: acceptance by draft
  position, tokens per round for a given k, the ceiling that implies and the break-even round cost.

Stage files (``onebit_engine.measure.stagefile``) are safetensors with a JSON header (metadata key
``onebit.stage``) holding the stage kind, the format version, the provenance (engine version, git
revision, model and draft sha256, backend, kernel set, row set), the payload (counts, costs, block
size) and one sha256 over header and tensors. They are written atomically; every field read back is
checked. A stage from
another model, draft, engine version or kernel set is refused: acceptance measured against one build's
tokens says nothing about another's (the seed's trap: a reference from another kernel set parts at
token 23).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..atomic import atomic_write_bytes
from ..errors import ConfigError
from . import stagefile
from .provenance import upgraded
from .stagefile import HEADER_KEY, STAGE_VERSION, StageError

# Provenance fields that must agree between stages (and with the model the stage is used with).
STRICT_FIELDS = ("engine_version", "model_hash", "draft_hash", "backend", "kernel_set", "kernel_hash", "row_set")

Progress = Callable[[int], None]


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
    vocab_size: int | None = None  # the target's; token ids are checked against it


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
    vocab_size: int | None = None


# -- running the stages -------------------------------------------------------------------------------
def check_capture_length(max_new_tokens: int) -> None:
    """A capture needs one timed plain step and one anchor with a truth after it: 2 tokens per prompt."""
    if max_new_tokens < 2:
        raise ConfigError(f"--max-new-tokens {max_new_tokens} is too short to probe: a capture needs at least 2 "
                          f"generated tokens per prompt (one timed plain step); give --max-new-tokens 2 or more")


def capture(target, prompts: Sequence[Sequence[int]], max_new_tokens: int, *, tap_layers: Sequence[int],
            provenance: dict[str, Any], progress: Progress | None = None) -> Capture:
    """Greedy-decode every prompt (one forward per token, as ``generate``) and keep the taps."""
    from ..ops.sampling import greedy

    check_capture_length(max_new_tokens)
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
                   int(target.config.num_hidden_layers), float(np.median(steps)), vocab_size=int(target.config.vocab_size))


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
    return DraftStage(dict(provenance), cap.checksum, int(draft.config.block_size), props, float(np.median(times)),
                      vocab_size=cap.vocab_size)


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


# Below this, a round's tokens (up to a block of 64) over its cost overflow to inf: the predicted speedup of a
# round cost of 5e-324 was dropped as a figure "nothing was measured for".
MIN_ROUND_COST = 1e-300


def check_round_cost(round_cost: float | None) -> None:
    """A round's cost in plain steps is a finite number > 0 (it verifies at least one row), and not so small that
    the predicted speedup overflows."""
    if round_cost is not None and not (isinstance(round_cost, (int, float)) and math.isfinite(round_cost) and round_cost > 0):
        raise ConfigError(f"--round-cost {round_cost!r} is not a round cost: a round's cost in plain steps must be a "
                          f"finite number > 0 (it runs the draft and a verify); give e.g. --round-cost 2.5")
    if round_cost is not None and round_cost < MIN_ROUND_COST:
        raise ConfigError(f"--round-cost {round_cost!r} is below {MIN_ROUND_COST:g}, where the predicted speedup (tokens a "
                          f"round over its cost) overflows; give e.g. --round-cost 2.5")


def score(cap: Capture, ds: DraftStage, ks: Sequence[int] | None = None, *, round_cost: float | None = None) -> dict[str, Any]:
    """Acceptance by position, tokens per round (over every anchor and along the loop's own path),
    the ceiling and the break-even, for each k in ``ks`` (default 1..block-1). A figure with nothing to
    measure it on is None, with its reason under ``null_reasons`` of the object holding it."""
    check_round_cost(round_cost)
    check_pair(cap, ds)
    width = ds.block_size - 1
    ks = list(ks) if ks else list(range(1, width + 1))
    bad = [k for k in ks if not (isinstance(k, (int, np.integer)) and 1 <= k <= width)]
    if bad:
        raise StageError(f"k={bad[0]} is out of range: the draft stage holds {width} drafts per anchor "
                         f"(block size {ds.block_size} minus 1); give k in 1..{width}")
    per = [accept_lengths(t, p) for t, p in zip(cap.tokens, ds.proposals)]
    by_pos, cond, reasons = [], [], {}
    for i in range(width):
        seen = [(L > i).astype(float)[kn > i] for L, kn in per]
        cond_seen = [(L > i)[(kn > i) & (L >= i)] for L, kn in per]
        s, c = np.concatenate(seen), np.concatenate(cond_seen)
        by_pos.append(float(s.mean()) if s.size else None)
        cond.append(float(c.mean()) if c.size else None)
        if not s.size:
            reasons[f"acceptance_by_position[{i}]"] = (f"no anchor has a generated token {i + 1} positions after it; "
                                                       f"capture more tokens (--max-new-tokens)")
        if not c.size:
            reasons[f"conditional_acceptance_by_position[{i}]"] = (f"no anchor reached draft position {i + 1} with a "
                                                                   f"truth to compare; capture more tokens")
    d_steps = ds.draft_ms / cap.step_ms  # both validated finite > 0
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
        loop_tpr = emitted / rounds  # every prompt has an anchor: rounds >= 1
        # ceiling: the speedup if a whole round cost one plain step; break-even: a round must cost
        # fewer plain steps than it emits tokens, so the draft leaves (ceiling - draft) for verify + commit.
        row = {"k": k, "anchors": len(tpr_all), "tokens_per_round": None, "tokens_per_round_loop": loop_tpr,
               "per_token_acceptance": None, "expected_tokens_geometric": None, "ceiling": loop_tpr,
               "break_even_round_steps": loop_tpr, "verify_commit_budget_steps": loop_tpr - d_steps}
        if tpr_all:  # acc + rej > 0 exactly when some anchor has k tokens of truth after it
            a_hat = acc / (acc + rej)
            row.update(tokens_per_round=float(np.mean(tpr_all)), per_token_acceptance=a_hat,
                       expected_tokens_geometric=expected_tokens(a_hat, k))
        else:
            why = f"no anchor has {k} generated tokens after it to score {k} drafts against; capture more tokens (--max-new-tokens)"
            row["null_reasons"] = dict.fromkeys(("tokens_per_round", "per_token_acceptance", "expected_tokens_geometric"), why)
        if round_cost is not None:
            row["predicted_speedup"] = loop_tpr / round_cost
            row["break_even_acceptance"] = break_even_acceptance(round_cost, k)
            if row["break_even_acceptance"] is None:
                row.setdefault("null_reasons", {})["break_even_acceptance"] = (
                    f"a round of {round_cost:g} plain steps costs more than the {k + 1} tokens it can emit at k={k}")
        rows.append(row)
    if round_cost is None:
        reasons["round_cost_steps"] = "no --round-cost given"
    out = {"acceptance_by_position": by_pos, "conditional_acceptance_by_position": cond, "k": rows,
           "step_ms": cap.step_ms, "draft_ms": ds.draft_ms, "draft_cost_steps": d_steps,
           "round_cost_steps": round_cost, "prompts": len(cap.prompts),
           "generated_tokens": sum(len(t) for t in cap.tokens), "provenance": cap.provenance}
    if reasons:
        out["null_reasons"] = reasons
    return out


# -- provenance checks --------------------------------------------------------------------------------
def provenance_mismatch(expected: dict[str, Any], found: dict[str, Any], fields: Sequence[str] = STRICT_FIELDS) -> list[str]:
    """The fields (of ``fields``) on which two provenances differ, as ``name: a != b`` strings."""
    return [f"{k}: {found.get(k)!r} != {expected.get(k)!r}" for k in fields if found.get(k) != expected.get(k)]


def check_provenance(path: "str | Path", found: dict[str, Any], expected: dict[str, Any], against: str) -> None:
    diffs = provenance_mismatch(expected, found)
    if diffs:
        raise StageError(f"stage file {str(path)!r} was made with another model, draft or build than {against} "
                         f"({'; '.join(diffs)}); re-run the earlier stage with this model, draft and build")


def check_capture_fits(path: "str | Path", cap: Capture, target) -> None:
    """The capture's layer count, hidden width and vocabulary are the target's (its provenance says it
    is this model; a crafted file must not make the draft stage allocate or index past it)."""
    cfg = target.config
    want = {"num_target_layers": int(cfg.num_hidden_layers), "vocab_size": int(cfg.vocab_size),
            "taps width": int(cfg.hidden_size)}
    got = {"num_target_layers": cap.num_target_layers, "vocab_size": cap.vocab_size,
           "taps width": cap.taps[0].shape[2] if cap.taps else None}
    bad = [f"{k} {got[k]} != {v}" for k, v in want.items() if got[k] != v]
    if bad:
        raise StageError(f"stage file {str(path)!r} does not fit this target ({'; '.join(bad)}); re-run "
                         f"`onebit probe capture` with this model")


def check_pair(cap: Capture, ds: DraftStage) -> None:
    if ds.capture_checksum != cap.checksum:
        raise StageError("the draft stage was not made from this capture (its capture checksum "
                         f"{ds.capture_checksum[:12]} != {cap.checksum[:12]}); run `onebit probe draft` on this capture")
    # the draft stage's provenance is the run's; compare only the model / draft / engine identity
    diffs = provenance_mismatch(cap.provenance, ds.provenance, ("engine_version", "model_hash", "draft_hash"))
    if diffs:
        raise StageError(f"the draft stage and the capture come from different models or engines ({'; '.join(diffs)})")
    # shapes: the checksum ties the draft stage to the capture, but a stage built in code is not checksummed
    again = "run `onebit probe draft` on this capture"
    if len(ds.proposals) != len(cap.tokens):
        raise StageError(f"the draft stage holds proposals for {len(ds.proposals)} prompts but the capture has "
                         f"{len(cap.tokens)}; {again}")
    for i, (props, toks) in enumerate(zip(ds.proposals, cap.tokens)):
        if props.ndim != 2 or props.shape != (len(toks) - 1, ds.block_size - 1):
            raise StageError(f"the draft stage's proposals for prompt {i} are {list(props.shape)}, but the capture's "
                             f"{len(toks)} tokens and block size {ds.block_size} need [{len(toks) - 1}, "
                             f"{ds.block_size - 1}]; {again}")
    if cap.vocab_size is not None and ds.vocab_size is not None and cap.vocab_size != ds.vocab_size:
        raise StageError(f"the draft stage's vocab_size {ds.vocab_size} != the capture's {cap.vocab_size}; {again}")


# -- files --------------------------------------------------------------------------------------------
def save_capture(path: "str | Path", cap: Capture) -> str:
    tensors = {}
    for i, (p, t, taps) in enumerate(zip(cap.prompts, cap.tokens, cap.taps)):
        tensors[f"p{i}.prompt"] = np.asarray(p, np.int64)
        tensors[f"p{i}.tokens"] = np.asarray(t, np.int64)
        tensors[f"p{i}.taps"] = taps
    payload = {"prompts": len(cap.prompts), "tap_layers": cap.tap_layers,
               "num_target_layers": cap.num_target_layers, "step_ms": cap.step_ms, "vocab_size": cap.vocab_size}
    data, cap.checksum = stagefile.encode("capture", cap.provenance, payload, tensors)
    atomic_write_bytes(path, data)
    return cap.checksum


def save_draft_stage(path: "str | Path", ds: DraftStage) -> str:
    tensors = {f"p{i}.proposals": p for i, p in enumerate(ds.proposals)}
    payload = {"prompts": len(ds.proposals), "capture_sha256": ds.capture_checksum, "block_size": ds.block_size,
               "draft_ms": ds.draft_ms, "vocab_size": ds.vocab_size}
    data, ds.checksum = stagefile.encode("draft", ds.provenance, payload, tensors)
    atomic_write_bytes(path, data)
    return ds.checksum


def load_capture(path: "str | Path") -> Capture:
    """A capture stage, every field checked: counts and layers in range, step_ms > 0, one prompt /
    tokens / taps tensor per prompt with consistent shapes, token ids inside the vocabulary, finite taps."""
    head, t = stagefile.read(path, "capture")
    f, pl = stagefile.Fields(str(path), "capture"), head["payload"]
    n = f.integer(pl, "prompts", 1, max(len(t) // 3, 1), f" (the file holds {len(t)} tensors, 3 a prompt)")
    layers_total = f.integer(pl, "num_target_layers", 1)
    layers = f.int_list(pl, "tap_layers", 0, layers_total - 1)
    step_ms = f.positive(pl, "step_ms", "a plain step's measured cost (ms)")
    vocab = f.integer(pl, "vocab_size", 1)
    f.names(t, [f"p{i}.{part}" for i in range(n) for part in ("prompt", "tokens", "taps")])
    prompts, tokens, taps, width = [], [], [], None
    for i in range(n):
        pr = f.tensor(t, f"p{i}.prompt", np.int64, (None,))
        tk = f.tensor(t, f"p{i}.tokens", np.int64, (None,))
        if tk.shape[0] < 2:
            raise f.fail(f"tensor 'p{i}.tokens'", f"{tk.shape[0]} token long", "a capture keeps at least 2 "
                         "generated tokens per prompt")
        f.token_ids(pr, f"p{i}.prompt", vocab)
        f.token_ids(tk, f"p{i}.tokens", vocab)
        tp = f.tensor(t, f"p{i}.taps", np.float32, (pr.shape[0] + tk.shape[0], len(layers), width))
        width = tp.shape[2]
        if not np.isfinite(tp).all():
            raise f.fail(f"tensor 'p{i}.taps'", "NaN or infinity", "taps must be finite", verb="holds")
        prompts.append(pr.tolist())
        tokens.append(tk.tolist())
        taps.append(tp)
    return Capture(upgraded(head["provenance"]), prompts, tokens, taps, layers, layers_total, step_ms, head["sha256"], vocab)


def load_draft_stage(path: "str | Path") -> DraftStage:
    """A draft stage, every field checked: block_size >= 2, draft_ms > 0, one [anchors, block - 1]
    int64 proposal tensor per prompt, token ids inside the vocabulary."""
    head, t = stagefile.read(path, "draft")
    f, pl = stagefile.Fields(str(path), "draft"), head["payload"]
    n = f.integer(pl, "prompts", 1, max(len(t), 1), f" (the file holds {len(t)} tensors, 1 a prompt)")
    cap_sha = f.text(pl, "capture_sha256", 64)
    block = f.integer(pl, "block_size", 2)
    draft_ms = f.positive(pl, "draft_ms", "a proposal's measured cost (ms)")
    vocab = f.integer(pl, "vocab_size", 1)
    f.names(t, [f"p{i}.proposals" for i in range(n)])
    props = []
    for i in range(n):
        a = f.tensor(t, f"p{i}.proposals", np.int64, (None, block - 1))
        f.token_ids(a, f"p{i}.proposals", vocab)
        props.append(a)
    return DraftStage(upgraded(head["provenance"]), cap_sha, block, props, draft_ms, head["sha256"], vocab)


__all__ = ["Capture", "DraftStage", "StageError", "STAGE_VERSION", "HEADER_KEY", "check_capture_length",
           "check_round_cost", "capture", "draft_offline", "score", "expected_tokens",
           "break_even_acceptance", "save_capture", "save_draft_stage", "load_capture", "load_draft_stage",
           "check_provenance", "check_capture_fits", "provenance_mismatch"]
