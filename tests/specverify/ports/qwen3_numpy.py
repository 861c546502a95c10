"""The second port: a tiny pure-attention Qwen3-style target in numpy, its own draft and loop.

Written independently of ``onebit_engine`` (no shared code) so the specverify fixtures are shown to be
reusable: it implements ``pytest_specverify.protocol.SpecPort`` and nothing else.

Model (Qwen3 dense): embed -> L x [RMSNorm -> GQA attention with per-head q/k RMSNorm and RoPE ->
residual -> RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> lm_head. Rows are processed as one
batched matmul, so a verify is *not* bitwise a sequence of steps: the port declares the ``fp32``
tolerance profile.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pytest_specverify.protocol import Rows, SpecRun, byte_encode

F32 = np.float32


@dataclass(frozen=True)
class Qwen3Config:
    vocab_size: int = 32
    hidden: int = 32
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 8
    mlp: int = 64
    theta: float = 10000.0
    eps: float = 1e-6


def rms_norm(x, w, eps):
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)).astype(F32) * w


def rope(x, pos, theta):
    """x [T, n, hd] at absolute positions pos [T] (rotate-half)."""
    hd = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)).astype(F32), np.sin(np.concatenate([ang, ang], -1)).astype(F32)
    half = hd // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


@dataclass
class KVCache:
    """keys/values [Hkv, capacity, hd]; rows [0, length) are live, the rest is dead space."""

    keys: np.ndarray
    values: np.ndarray
    length: int = 0

    def write(self, k, v):  # k, v [Hkv, T, hd]
        t = k.shape[1]
        if self.length + t > self.keys.shape[1]:
            grow = max(self.length + t, 2 * self.keys.shape[1])
            pad = lambda a: np.concatenate([a, np.zeros((a.shape[0], grow - a.shape[1], a.shape[2]), F32)], 1)  # noqa: E731
            self.keys, self.values = pad(self.keys), pad(self.values)
        self.keys[:, self.length:self.length + t] = k
        self.values[:, self.length:self.length + t] = v
        self.length += t


@dataclass
class Qwen3State:
    caches: list[KVCache]
    pos: int = 0
    pending: tuple[int, int] | None = None  # (start position, rows) of an uncommitted verify


class Qwen3Numpy:
    def __init__(self, cfg: Qwen3Config, seed: int = 0):
        self.cfg = cfg
        rng = np.random.default_rng(seed)
        lin = lambda n, k: (rng.standard_normal((k, n)) / np.sqrt(k)).astype(F32)  # noqa: E731  [in, out]
        D, H, Hk, hd = cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim
        self.embed = rng.standard_normal((cfg.vocab_size, D)).astype(F32)
        self.layers = []
        for _ in range(cfg.layers):
            self.layers.append(dict(
                n1=(1 + 0.1 * rng.standard_normal(D)).astype(F32), n2=(1 + 0.1 * rng.standard_normal(D)).astype(F32),
                wq=lin(H * hd, D), wk=lin(Hk * hd, D), wv=lin(Hk * hd, D), wo=lin(D, H * hd),
                qn=(1 + 0.1 * rng.standard_normal(hd)).astype(F32), kn=(1 + 0.1 * rng.standard_normal(hd)).astype(F32),
                wg=lin(cfg.mlp, D), wu=lin(cfg.mlp, D), wd=lin(D, cfg.mlp)))
        self.norm = (1 + 0.1 * rng.standard_normal(D)).astype(F32)
        self.lm_head = (2.0 * lin(cfg.vocab_size, D)).astype(F32)

    def new_state(self) -> Qwen3State:
        c = self.cfg
        return Qwen3State([KVCache(np.zeros((c.kv_heads, 16, c.head_dim), F32), np.zeros((c.kv_heads, 16, c.head_dim), F32))
                           for _ in range(c.layers)])

    def forward(self, tokens, state: Qwen3State):
        """tokens [T] -> logits [T, V], taps [T, L, D]; advances state by T."""
        c = self.cfg
        toks = np.asarray(tokens, np.int64)
        T = len(toks)
        pos = np.arange(state.pos, state.pos + T)
        x = self.embed[toks]
        taps = np.empty((T, c.layers, c.hidden), F32)
        for i, w in enumerate(self.layers):
            h = rms_norm(x, w["n1"], c.eps)
            rp = self.rope_positions(pos)
            q = rope(rms_norm((h @ w["wq"]).reshape(T, c.heads, c.head_dim), w["qn"], c.eps), rp, c.theta)
            k = rope(rms_norm((h @ w["wk"]).reshape(T, c.kv_heads, c.head_dim), w["kn"], c.eps), rp, c.theta)
            v = (h @ w["wv"]).reshape(T, c.kv_heads, c.head_dim)
            cache = state.caches[i]
            cache.write(k.transpose(1, 0, 2), v.transpose(1, 0, 2))
            lo = self.attention_start(cache.length, int(pos[0]), T)
            keys, values = cache.keys[:, lo:cache.length], cache.values[:, lo:cache.length]  # [Hk, S, hd]
            group = c.heads // c.kv_heads
            kq = np.repeat(keys, group, 0)  # [H, S, hd]
            vq = np.repeat(values, group, 0)
            scores = np.einsum("thd,hsd->hts", q, kq) / np.sqrt(c.head_dim)  # [H, T, S]
            mask = np.arange(lo, cache.length)[None, :] > pos[:, None]  # causal
            scores = np.where(mask[None], -np.inf, scores)
            scores = scores - scores.max(-1, keepdims=True)
            att = np.exp(scores)
            att = att / att.sum(-1, keepdims=True)
            o = np.einsum("hts,hsd->thd", att, vq).reshape(T, c.heads * c.head_dim).astype(F32)
            x = x + o @ w["wo"]
            h = rms_norm(x, w["n2"], c.eps)
            g = h @ w["wg"]
            x = x + ((g / (1 + np.exp(-g))) * (h @ w["wu"])) @ w["wd"]
            taps[:, i] = x
        state.pos += T
        return (rms_norm(x, self.norm, c.eps) @ self.lm_head).astype(F32), taps

    def rope_positions(self, pos):
        """The positions RoPE rotates by (a hook for the mutants; the truth is ``pos``)."""
        return pos

    def attention_start(self, length, first_pos, rows):
        """The first cached position a pass of ``rows`` tokens starting at ``first_pos`` attends to (a hook
        for the mutants; the truth is 0: every earlier position)."""
        return 0

    def verify(self, tokens, state: Qwen3State):
        if state.pending is not None:
            raise RuntimeError("verify() while a verify is pending; commit first")
        start = state.pos
        out = self.forward(tokens, state)
        state.pending = (start, len(tokens))
        return out

    def commit(self, state: Qwen3State, accepted_rows: int) -> None:
        """Attention KV rolls back by lowering its length: keep ``accepted_rows`` verify rows."""
        start, rows = state.pending
        if not 0 <= accepted_rows <= rows:
            raise ValueError(f"accepted_rows {accepted_rows} outside 0..{rows}")
        for cache in state.caches:
            cache.length = start + accepted_rows
        state.pos = start + accepted_rows
        state.pending = None


# -- the port's own draft: a bigram table nudged by the last context tap ----------------------------
@dataclass
class BigramState:
    length: int = 0
    last_tap: np.ndarray | None = None


@dataclass
class BigramProposal:
    tokens: np.ndarray
    q: np.ndarray


class BigramDraft:
    def __init__(self, vocab: int, hidden: int, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.table = 2.0 * rng.standard_normal((vocab, vocab))
        self.proj = 0.1 * rng.standard_normal((hidden, vocab))

    def new_state(self):
        return BigramState()

    def append_context(self, state, taps):
        state.length += len(taps)
        if len(taps):
            state.last_tap = np.asarray(taps[-1])[-1]

    def propose(self, state, anchor_token, n_draft, *, temperature=0.0, rng=None):
        bias = state.last_tap @ self.proj if state.last_tap is not None else 0.0
        tok, tokens, qs = int(anchor_token), [], []
        for _ in range(n_draft):
            logits = self.table[tok] + bias
            if temperature > 0:
                p = np.exp((logits - logits.max()) / temperature)
                p /= p.sum()
                tok = int(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right"))
                tok = min(tok, len(p) - 1)
            else:
                p = np.zeros_like(logits)
                tok = int(np.argmax(logits))
                p[tok] = 1.0
            tokens.append(tok)
            qs.append(p)
        return BigramProposal(np.asarray(tokens, np.int64), np.asarray(qs))


# -- the port's own loop ------------------------------------------------------------------------------
def _probs(logits, t):
    z = np.asarray(logits, np.float64) / t
    e = np.exp(z - z.max())
    return e / e.sum()


def _draw(p, rng):
    i = min(int(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right")), len(p) - 1)
    while p[i] <= 0:
        i -= 1
    return i


class SpecLoop:
    """One speculative decode. Pieces are methods so a mutant can break exactly one of them."""

    def __init__(self, model: Qwen3Numpy, draft, *, k: int, temperature: float, seed):
        self.model, self.draft, self.k, self.t = model, draft, k, temperature
        self.rng = np.random.default_rng(seed)

    def choose(self, logits):
        return int(np.argmax(logits)) if self.t <= 0 else _draw(_probs(logits, self.t), self.rng)

    def residual(self, p, q):
        """Where to draw the bonus after rejecting a draft: normalize(max(0, p - q))."""
        r = np.maximum(p - q, 0.0)
        return r / r.sum() if r.sum() > 0 else p

    def target_probs(self, logits):
        """p, the target's distribution the acceptance test and the residual use."""
        return _probs(logits, self.t)

    def q_row(self, q, i):
        """The draft's distribution for draft position i (a hook for the mutants; the truth is q[i])."""
        return q[i]

    def accept(self, drafts, q, logits):
        """(accepted count, bonus)."""
        if self.t <= 0:
            post = np.argmax(logits, -1)
            a = 0
            while a < len(drafts) and drafts[a] == post[a]:
                a += 1
            return a, int(post[a])
        for i, d in enumerate(drafts):
            p, qi = self.target_probs(logits[i]), np.asarray(self.q_row(q, i), np.float64)
            if self.rng.random() * qi[d] < p[d]:
                continue
            return i, _draw(self.residual(p, qi), self.rng)
        return len(drafts), _draw(_probs(logits[len(drafts)], self.t), self.rng)

    def context_rows(self, taps, a):
        """The rows the draft gets after a round: the committed ones, [last, d1..da]."""
        return taps[: a + 1]

    def emitted(self, drafts, a, bonus):
        return list(drafts[:a]) + [bonus]

    def ask(self, n):
        """How many drafts to ask the draft for when the round uses n of them (a hook for loop variants)."""
        return n

    def reported(self, a, n):
        """The (accepted, proposed) counts the run reports for a round (a hook for the mutants)."""
        return a, n

    def zero_draft_step(self, st, last):
        """A round with no drafts: one plain step of the anchor (a hook for the mutants)."""
        return self.model.forward([last], st)

    def run(self, prompt, max_new_tokens) -> SpecRun:
        m, d = self.model, self.draft
        st, ds = m.new_state(), d.new_state()
        logits, taps = m.forward(prompt, st)
        d.append_context(ds, taps)
        out = [self.choose(logits[-1])][:max_new_tokens]
        accepted, proposed = [], []
        while len(out) < max_new_tokens:
            last = out[-1]
            n = min(self.k, max_new_tokens - len(out) - 1)
            if n < 1:  # zero-draft round (k = 0, or near the end): a plain step
                logits, taps = self.zero_draft_step(st, last)
                d.append_context(ds, taps)
                out.append(self.choose(logits[0]))
                continue
            prop = d.propose(ds, last, self.ask(n), temperature=self.t, rng=self.rng if self.t > 0 else None)
            drafts = [int(x) for x in prop.tokens[:n]]
            logits, taps = m.verify([last] + drafts, st)
            a, bonus = self.accept(drafts, prop.q, logits)
            m.commit(st, a + 1)
            d.append_context(ds, self.context_rows(taps, a))
            out += self.emitted(drafts, a, bonus)
            a_rep, n_rep = self.reported(a, n)
            accepted.append(a_rep)
            proposed.append(n_rep)
        return SpecRun(out[:max_new_tokens], accepted, proposed)


class Qwen3Port:
    """The second port's ``SpecPort`` adapter."""

    name = "qwen3-numpy"
    tolerance = "fp32"
    commit_paths = ("trim",)
    loop_class = SpecLoop

    def __init__(self, cfg: Qwen3Config | None = None, seed: int = 0, model_class=Qwen3Numpy):
        self.cfg = cfg or Qwen3Config()
        self.model = model_class(self.cfg, seed)
        self.vocab_size = self.cfg.vocab_size
        self.seed = seed

    def new_state(self):
        return self.model.new_state()

    def prefill(self, state, tokens):
        return Rows(*self.model.forward(list(tokens), state))

    def step(self, state, token):
        return Rows(*self.model.forward([int(token)], state))

    def verify(self, state, tokens, *, path):
        return Rows(*self.model.verify(list(tokens), state))

    def commit(self, state, accepted_rows, *, path, replay_check=False):
        self.model.commit(state, accepted_rows)

    def state_arrays(self, state):
        return {f"layer.{i}.{n}": getattr(c, n)[:, :c.length] for i, c in enumerate(state.caches) for n in ("keys", "values")}

    def encode(self, text):
        return byte_encode(text, self.vocab_size)

    def make_draft(self):
        return BigramDraft(self.vocab_size, self.cfg.hidden, seed=self.seed + 1)

    def generate(self, prompt, *, max_new_tokens, temperature=0.0, seed=None):
        loop = SpecLoop(self.model, None, k=0, temperature=temperature, seed=seed)
        st = self.model.new_state()
        logits, _ = self.model.forward(list(prompt), st)
        out = []
        while len(out) < max_new_tokens:
            out.append(loop.choose(logits[-1]))
            if len(out) < max_new_tokens:
                logits, _ = self.model.forward([out[-1]], st)
        return out

    def speculative_generate(self, prompt, draft, *, max_new_tokens, k, temperature=0.0, seed=None, commit_path=None):
        return self.loop_class(self.model, draft, k=k, temperature=temperature, seed=seed).run(list(prompt), max_new_tokens)


def make_port(options) -> Qwen3Port:
    """A ``specverify.ports`` factory (the test suite registers it through its conftest)."""
    return Qwen3Port(seed=options.seed)
