"""Deliberately broken ports: each breaks one thing a speculative engine can get wrong.

``build(name)`` returns a ``SpecPort``. Target-level mutants of the hybrid engine subclass
``onebit_engine.hybrid.model.Target`` (they need its GDN conv/recurrent state); KV and loop mutants break the
second port (``qwen3_numpy``), whose loop this suite owns. ``tests/specverify/checks/test_mutants_caught.py``
holds the table of which check catches which mutant.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tests.specverify.ports.qwen3_numpy import Qwen3Numpy, Qwen3Port, SpecLoop, _draw, _probs


# -- hybrid engine (onebit_engine) target mutants --------------------------------------------------------
def _onebit_port(target_class, name):
    from onebit_engine.hybrid.synthetic import random_weights, tiny_config
    from pytest_specverify.adapters.onebit import TINY, OnebitPort

    cfg = tiny_config(**TINY)
    return OnebitPort(target_class(cfg, random_weights(cfg, 1000)), name=name)


def _engine_mutants():
    from onebit_engine.hybrid.state import GDNLayerState
    from onebit_engine.hybrid import Target

    def gdn(state):
        return {i: s.copy() for i, s in enumerate(state.layers) if isinstance(s, GDNLayerState)}

    class ConvNotRestored(Target):
        """On a partial accept the conv window keeps every verified row (only the recurrent state is fixed)."""

        def commit(self, state, accepted_rows, **kw):
            after, partial = gdn(state), accepted_rows < state.pending.rows
            super().commit(state, accepted_rows, **kw)
            if partial:
                for i, s in after.items():
                    state.layers[i].conv = s.conv

    class RecurrentNotRestored(Target):
        """On a partial accept the delta-rule matrix keeps every verified row."""

        def commit(self, state, accepted_rows, **kw):
            after, partial = gdn(state), accepted_rows < state.pending.rows
            super().commit(state, accepted_rows, **kw)
            if partial:
                for i, s in after.items():
                    state.layers[i].recurrent = s.recurrent

    class FullAcceptBranchOnPartial(Target):
        """The keep path's "full accept: keep the batch state" branch also fires when one row is rejected."""

        def commit(self, state, accepted_rows, *, path="keep", **kw):
            after = gdn(state)
            taken = path == "keep" and accepted_rows == state.pending.rows - 1 and accepted_rows > 0
            super().commit(state, accepted_rows, path=path, **kw)
            if taken:
                for i, s in after.items():
                    state.layers[i] = s

    class SnapshotAfterVerify(Target):
        """The pre-verify snapshot is taken after the verify ran (so a rollback restores nothing)."""

        def verify(self, tokens, state, **kw):
            out = super().verify(tokens, state, **kw)
            state.pending.snapshot = {i: state.layers[i].copy() for i in state.pending.snapshot}
            return out

    class CheckpointRingOfFour(Target):
        """verify keeps the per-row delta-net checkpoints (commit path "checkpoint") in a ring of 4 slots,
        so with more than 4 rows a later row overwrites the slot of row j; with at most 4 rows (k <= 3)
        it is right, which is why the default k list reaches 7."""

        def verify(self, tokens, state, **kw):
            out = super().verify(tokens, state, **kw)
            rows = state.pending.per_row
            if rows:
                for i, lst in rows.items():
                    n = len(lst)  # slot j % 4 ends up holding the last row written to it
                    rows[i] = [lst[j + 4 * ((n - 1 - j) // 4)] for j in range(n)]
            return out

    class DecodeRopeTableOf256(Target):
        """Steps and verifies read RoPE from a 256-entry table indexed modulo its size (a prefill from
        position 0 computes it): from position 256 on, decode rotates queries and keys as if at pos - 256.
        Nothing goes wrong in the first 256 positions, which is all the other checks reach."""

        class Wrapped:  # the attention mixer, fed the wrapped position while decoding
            def __init__(self, inner, owner):
                self.inner, self.owner = inner, owner

            def __getattr__(self, name):
                return getattr(self.inner, name)

            def __call__(self, h, n, state):
                if not self.owner._decode:
                    return self.inner(h, n, state)
                pos, state.pos = state.pos, state.pos % 256  # the layer reads its rows' position here
                try:
                    return self.inner(h, n, state)
                finally:
                    state.pos = pos

        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            self._decode = False
            for layer in self.layers:
                if layer.kind == "full_attention":
                    layer.mixer = self.Wrapped(layer.mixer, self)

        def forward(self, tokens, state):
            self._decode = not (state.pos == 0 and len(tokens) > 1)
            try:
                return super().forward(tokens, state)
            finally:
                self._decode = False

        def verify(self, tokens, state, **kw):
            self._decode = True
            try:
                return super().verify(tokens, state, **kw)
            finally:
                self._decode = False

    class ShortPrefillDropsConv(Target):
        """A prefill shorter than the conv window (fewer than K - 1 tokens) does not store its columns: the
        conv window stays all zeros. Prompts of K - 1 tokens or more are right."""

        def forward(self, tokens, state):
            short = state.pos == 0 and len(tokens) < self.config.linear_conv_kernel_dim - 1
            out = super().forward(tokens, state)
            if short:
                for s in state.layers:
                    if isinstance(s, GDNLayerState):
                        s.conv = np.zeros_like(s.conv)
            return out

    class ReplayRecordOfEight(Target):
        """The per-row recurrence inputs a verify records for the replay path live in one row set's worth
        of slots (8): rows 9..16 of a longer verify overwrite slots 1..8, so replaying more than 8 rows
        reads later rows' inputs. Right for every verify of at most 8 rows (k <= 7)."""

        def verify(self, tokens, state, **kw):
            out = super().verify(tokens, state, **kw)
            record = state.pending
            for d in (record.mixed, record.alpha, record.beta):
                for i, a in d.items():
                    n = len(a)  # slot j % 8 ends up holding the last row written to it
                    d[i] = a[[t % 8 + 8 * ((n - 1 - t % 8) // 8) for t in range(n)]]
            return out

    class PrefillConvOffByOne(Target):
        """A prefill (several tokens from position 0) leaves the conv window one column late: it holds
        the K-1 pre-conv columns *before* the last one. Verify, commit and steps are right."""

        def forward(self, tokens, state):
            prefill = state.pos == 0 and len(tokens) > 1
            out = super().forward(tokens, state)
            if prefill:
                for s in state.layers:
                    if isinstance(s, GDNLayerState):
                        s.conv = np.roll(s.conv, 1, axis=-1)
            return out

    return {"prefill_conv_off_by_one": PrefillConvOffByOne, "conv_not_restored": ConvNotRestored, "recurrent_not_restored": RecurrentNotRestored,
            "full_accept_branch_on_partial": FullAcceptBranchOnPartial, "snapshot_after_verify": SnapshotAfterVerify,
            "checkpoint_ring_of_four": CheckpointRingOfFour, "decode_rope_table_of_256": DecodeRopeTableOf256,
            "short_prefill_drops_conv": ShortPrefillDropsConv, "replay_record_of_eight": ReplayRecordOfEight}


class _WrappedDraft:
    """A draft that delegates to ``inner``; the draft mutants override ``propose`` only."""

    def __init__(self, inner):
        self.inner = inner

    @property
    def block_size(self):
        return self.inner.block_size

    def new_state(self):
        return self.inner.new_state()

    def append_context(self, state, taps):
        self.inner.append_context(state, taps)


class DraftStaleRowAfterPropose(_WrappedDraft):
    """The hybrid engine's DFlash draft, but propose() leaves one more context row behind (a copy of the
    last one), as a draft that writes its block's K/V into the context cache and advances would: every
    later proposal attends to a stale row at shifted positions. The output stays right; acceptance drops."""

    def propose(self, state, anchor_token, n_draft, **kw):
        out = self.inner.propose(state, anchor_token, n_draft, **kw)
        for i in range(state.num_layers):
            k, v = state.view(i)
            state.append(i, k[:, -1:].copy(), v[:, -1:].copy())
        state.advance(1)
        return out


class DraftQAtTemperatureOne(_WrappedDraft):
    """The hybrid engine's DFlash draft samples its tokens at the loop's temperature but reports the q of
    T = 1. Greedy decoding never reads q, and the loop's sampling check brings its own draft, so only a
    check of the port's own draft at T != 1 sees it; the loop's outputs are biased all the same."""

    def propose(self, state, anchor_token, n_draft, *, temperature=0.0, rng=None):
        out = self.inner.propose(state, anchor_token, n_draft, temperature=temperature, rng=rng)
        if temperature > 0:
            q1 = self.inner.propose(state, anchor_token, n_draft, temperature=1.0, rng=np.random.default_rng(0)).q
            out = dataclasses.replace(out, q=q1)
        return out


# -- second port: KV / commit mutants ---------------------------------------------------------------------
class KVNotTrimmed(Qwen3Numpy):
    """commit() moves the position but leaves every verified row in the KV cache."""

    def commit(self, state, accepted_rows):
        start, rows = state.pending
        super().commit(state, accepted_rows)
        for c in state.caches:
            c.length = start + rows


class KVTrimShort(Qwen3Numpy):
    """The KV cache is trimmed one row short of the accepted rows."""

    def commit(self, state, accepted_rows):
        start, _ = state.pending
        super().commit(state, accepted_rows)
        for c in state.caches:
            c.length = max(start + accepted_rows - 1, 0)


class KVTrimLong(Qwen3Numpy):
    """The KV cache keeps one row more than accepted."""

    def commit(self, state, accepted_rows):
        start, rows = state.pending
        super().commit(state, accepted_rows)
        for c in state.caches:
            c.length = min(start + accepted_rows + 1, start + rows)


class ZeroDraftAdvances(Qwen3Numpy):
    """A zero-draft round (a 1-row verify of [last]) keeps its row even when nothing was accepted."""

    def commit(self, state, accepted_rows):
        if state.pending[1] == 1:
            accepted_rows = 1
        super().commit(state, accepted_rows)


class PrefillRopeOffset(Qwen3Numpy):
    """A prefill (several tokens from position 0) rotates queries and keys one position late. Its own
    logits barely move (attention sees relative positions), but the keys it caches are off by one
    for every later step."""

    def rope_positions(self, pos):
        return pos + 1 if pos[0] == 0 and len(pos) > 1 else pos


class PrefillIgnoresOffset(Qwen3Numpy):
    """A prefill of several tokens rotates them from position 0 whatever the state already holds (it assumes a
    fresh state): a second prompt chunk or a prefill after a commit is rotated as if it started the text.
    Verify and steps are right, and so is every prefill of a fresh state."""

    prefilling = False

    def rope_positions(self, pos):
        return pos - pos[0] if self.prefilling and len(pos) > 1 else pos


class PrefillIgnoresOffsetPort(Qwen3Port):
    def prefill(self, state, tokens):
        self.model.prefilling = True
        try:
            return super().prefill(state, tokens)
        finally:
            self.model.prefilling = False


class DecodeWindowOf128(Qwen3Numpy):
    """Steps and verifies attend only to the last 128 cached positions (a decode-time window or a ring
    buffer); a prefill from position 0 attends to every position. Right for the first 128 positions."""

    def attention_start(self, length, first_pos, rows):
        return max(0, length - 128) if first_pos > 0 else 0


class VerifyWindowOf128(Qwen3Numpy):
    """Only a verify (several rows after position 0) attends to just the last 128 cached positions;
    prefill and steps are right. Right for the first 128 positions."""

    def attention_start(self, length, first_pos, rows):
        return max(0, length - 128) if first_pos > 0 and rows > 1 else 0


# -- second port: loop mutants -------------------------------------------------------------------------
class BonusDropped(SpecLoop):
    """After a full accept the bonus token is not emitted (the next round's anchor is then wrong)."""

    def emitted(self, drafts, a, bonus):
        return list(drafts[:a]) + ([bonus] if a < len(drafts) else [])


class BonusDroppedAtK1(SpecLoop):
    """With k = 1 only: after an accepted draft the bonus token is not emitted."""

    def emitted(self, drafts, a, bonus):
        return list(drafts[:a]) + ([bonus] if self.k > 1 or a < len(drafts) else [])


class BonusDuplicated(SpecLoop):
    """The bonus token is emitted twice."""

    def emitted(self, drafts, a, bonus):
        return list(drafts[:a]) + [bonus, bonus]


class ContextWrongRows(SpecLoop):
    """The draft gets the verify rows shifted by one ([d1..d(a+1)] instead of [last, d1..da])."""

    def context_rows(self, taps, a):
        return taps[1 : a + 2]


class ResidualWrong(SpecLoop):
    """At a rejection the bonus is drawn from normalize(max(0, q - p)) instead of max(0, p - q)."""

    def residual(self, p, q):
        r = np.maximum(q - p, 0.0)
        return r / r.sum() if r.sum() > 0 else p


class ResidualFromP(SpecLoop):
    """At a rejection the token is drawn from p itself instead of normalize(max(0, p - q)) (held-out bug 8)."""

    def residual(self, p, q):
        return p


class ZeroDraftStepsTwice(SpecLoop):
    """A round with no drafts steps the anchor on a fast path and then also verifies and commits it
    (held-out bug 7): invisible to every check that reaches k = 0 through verify / commit only."""

    def zero_draft_step(self, st, last):
        self.model.forward([last], st)
        out = self.model.verify([last], st)
        self.model.commit(st, 1)
        return out


class TemperatureIgnoredInAccept(SpecLoop):
    """The acceptance test and the residual use p at T = 1 whatever the run's temperature (the draft's q
    and the bonus after a full accept do use it): invisible at T = 1."""

    def target_probs(self, logits):
        return _probs(logits, 1.0)


class SeedIgnored(SpecLoop):
    """The loop samples from an RNG that ignores the run's seed (seeded once, when the module loads)."""

    shared = np.random.default_rng(12345)

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.rng = SeedIgnored.shared


class AcceptUsesFirstQRow(SpecLoop):
    """At T > 0 every draft position's acceptance test and residual use the draft's first q row, q[0],
    instead of its own row q[i]. Right at k = 1 and at T = 0; biased from the second draft on."""

    def q_row(self, q, i):
        return q[0]


class LaterDraftBias(SpecLoop):
    """At T > 0, from the second draft position on, the acceptance test and the residual use p mixed with 5%
    of the uniform distribution (a sampler a few percent off in total variation at one later position of a
    round); the first draft, the bonus and the greedy path are right."""

    def accept(self, drafts, q, logits):
        if self.t <= 0:
            return super().accept(drafts, q, logits)
        for i, d in enumerate(drafts):
            p, qi = self.target_probs(logits[i]), np.asarray(self.q_row(q, i), np.float64)
            if i >= 1:
                p = 0.95 * p + 0.05 / p.size
            if self.rng.random() * qi[d] < p[d]:
                continue
            return i, _draw(self.residual(p, qi), self.rng)
        return len(drafts), _draw(_probs(logits[len(drafts)], self.t), self.rng)


class SharedCaches(Qwen3Numpy):
    """new_state() hands every state the same KV cache objects (one sequence at a time works; two states
    side by side, as every check keeps them, do not)."""

    _shared = None

    def new_state(self):
        st = super().new_state()
        if SharedCaches._shared is None:
            SharedCaches._shared = st.caches
        for c in SharedCaches._shared:
            c.length = 0
        st.caches = SharedCaches._shared
        return st


class BonusCountedAsAccepted(SpecLoop):
    """The output is right, but each round reports the bonus token as one more accepted draft."""

    def reported(self, a, n):
        return a + 1, n


class ProposedReportedAsAccepted(SpecLoop):
    """The output is right, but each round reports only its accepted drafts as proposed: 100% acceptance."""

    def reported(self, a, n):
        return a, a


_PORT_MODELS = {"kv_not_trimmed": KVNotTrimmed, "kv_trimmed_one_short": KVTrimShort, "kv_trimmed_one_long": KVTrimLong,
                "zero_draft_round_advances": ZeroDraftAdvances, "prefill_rope_offset": PrefillRopeOffset,
                "decode_window_of_128": DecodeWindowOf128, "verify_window_of_128": VerifyWindowOf128,
                "states_share_caches": SharedCaches, "prefill_ignores_offset": PrefillIgnoresOffset}
_PORT_LOOPS = {"bonus_dropped": BonusDropped, "bonus_dropped_at_k1": BonusDroppedAtK1, "bonus_duplicated": BonusDuplicated,
               "draft_context_wrong_rows": ContextWrongRows, "residual_wrong": ResidualWrong,
               "seed_ignored": SeedIgnored, "temperature_ignored_in_accept": TemperatureIgnoredInAccept,
               "bonus_counted_as_accepted": BonusCountedAsAccepted, "accept_uses_first_q_row": AcceptUsesFirstQRow, "proposed_reported_as_accepted": ProposedReportedAsAccepted,
               "residual_from_p": ResidualFromP, "zero_draft_steps_twice": ZeroDraftStepsTwice,
               "later_draft_bias": LaterDraftBias}
ENGINE_MUTANTS = ("prefill_conv_off_by_one", "conv_not_restored", "recurrent_not_restored", "full_accept_branch_on_partial", "snapshot_after_verify",
                  "checkpoint_ring_of_four", "decode_rope_table_of_256", "short_prefill_drops_conv", "replay_record_of_eight")
_DRAFT_WRAPPERS = {"draft_stale_row_after_propose": DraftStaleRowAfterPropose, "draft_q_at_temperature_one": DraftQAtTemperatureOne}
NAMES = ENGINE_MUTANTS + tuple(_DRAFT_WRAPPERS) + tuple(_PORT_MODELS) + tuple(_PORT_LOOPS)


def build(name: str):
    """The mutant port called ``name`` (one of ``NAMES``)."""
    if name in ENGINE_MUTANTS:
        return _onebit_port(_engine_mutants()[name], f"onebit[{name}]")
    if name in _DRAFT_WRAPPERS:
        from onebit_engine.hybrid import Target

        port = _onebit_port(Target, f"onebit[{name}]")
        port._draft = _DRAFT_WRAPPERS[name](port.make_draft())
        return port
    if name in _PORT_MODELS:
        port = (PrefillIgnoresOffsetPort if name == "prefill_ignores_offset" else Qwen3Port)(model_class=_PORT_MODELS[name])
    elif name in _PORT_LOOPS:
        port = Qwen3Port()
        port.loop_class = _PORT_LOOPS[name]
    else:
        raise KeyError(f"no mutant {name!r}; known: {NAMES}")
    port.name = f"qwen3-numpy[{name}]"
    return port
