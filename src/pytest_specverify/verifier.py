"""``Verifier``: the checks bound to one port, its tolerance profile, the run's settings and a seed.

The ``specverify`` fixture returns one (the plugin builds it from ``specverify_port``,
``specverify_tolerance``, ``specverify_settings`` and ``specverify_seed``): the one surface of the plugin
(the battery and the docs call ``specverify.<check>``). The checks are its methods marked ``@check``;
``Verifier.CHECKS`` is read from those marks, so the names are written once. It is a plain class (no
pytest here), so it also runs outside pytest::

    v = Verifier(port, profile("exact"), Settings(), seed=0)
    v.commit_equivalence(port.encode("hello"), k_values=(0, 1))

A parameter left at ``None`` takes the run's value (``--specverify-k``, ``--specverify-samples``...); any
other value, 0 included, is passed to the check as given. ``run(fn, *args, **kwargs)`` calls each check:
the plugin's turns ``NotSupported`` into a skip and files the report in the test's properties; the default
calls the check as it is (``NotSupported`` then propagates).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .protocol import own_draft_k
from .session import Settings

DRAFT_SAMPLES = 800  # proposals of the draft-sampling check when the run does not set --specverify-samples


def check(method: Callable) -> Callable:
    """Marks a ``Verifier`` method as one of the checks (``Verifier.CHECKS`` lists the marked ones)."""
    method.is_check = True
    return method


def call(fn: Callable[..., Any], *args, **kwargs) -> Any:
    """The default ``run``: the check, called as it is."""
    __tracebackhide__ = True
    return fn(*args, **kwargs)


class Verifier:
    """The checks of ``pytest_specverify`` on ``port``, judged by ``tolerance``, with ``settings`` (the
    run's options) for what a call leaves at ``None`` and ``seed`` (the test's seed) for the seeded ones."""

    #: the names of the methods marked ``@check``, in the order they are defined (set after the class)
    CHECKS: tuple[str, ...] = ()

    def __init__(self, port, tolerance, settings: Settings | None = None, seed: int = 0,
                 run: Callable[..., Any] = call):
        self.port = port
        self.tolerance = tolerance
        self.settings = settings if settings is not None else Settings()
        self.seed = seed
        self.run = run

    def __repr__(self) -> str:
        port, tol = getattr(self.port, "name", self.port), getattr(self.tolerance, "name", self.tolerance)
        return f"Verifier(port={port!r}, tolerance={tol!r}, seed={self.seed})"

    def _check(self, fn: Callable[..., Any], *args, **kwargs) -> Any:
        """Run one check; every state it obtained from the port is closed at the end (``port.close``)."""
        __tracebackhide__ = True
        from .owned import closing_states

        with closing_states(self.port):
            return self.run(fn, *args, **kwargs)

    # -- what a None leaves to the run -------------------------------------------------------------
    def _k(self, k: int | None, *, own_draft: bool = False) -> int:
        """``k`` as given, else the run's (``Settings.spec_k``; for a check that runs the port's own
        draft at most the port's ``max_k``)."""
        if k is not None:
            return k
        return own_draft_k(self.port, self.settings.spec_k) if own_draft else self.settings.spec_k

    def _max_new_tokens(self, max_new_tokens: int | None) -> int:
        return self.settings.max_new_tokens if max_new_tokens is None else max_new_tokens

    def _k_values(self, k_values: Sequence[int] | None) -> Sequence[int]:
        return self.settings.k_values if k_values is None else k_values

    def _prompts(self, prompts):
        """``prompts`` as given, else the run's prompt set as this port's ids."""
        if prompts is not None:
            return prompts
        from .prompts import select

        return [p.tokens(self.port) for p in select(self.settings.prompt_set, self.settings.num_prompts, self.settings.seed)]

    # -- the checks ------------------------------------------------------------------------------
    @check
    def commit_equivalence(self, prompt, k_values=None, **kw):
        """``commit_equivalence(prompt_ids, k_values=None, paths=None)``: check 1 (every commit path, every
        kept-row count 0..k+1, then one step, against single steps)."""
        __tracebackhide__ = True
        from .checks import commit_equivalence

        return self._check(commit_equivalence, self.port, prompt, self._k_values(k_values), tol=self.tolerance,
                        seed=self.seed, **kw)

    @check
    def greedy_identity(self, prompt, draft=None, *, k=None, max_new_tokens=None, **kw):
        """``greedy_identity(prompt_ids, draft=None, k=None, max_new_tokens=None)``: check 2 (default draft:
        the port's own ``make_draft()``, and k at most its ``max_k``). Returns the report with accept rate
        and tokens/round."""
        __tracebackhide__ = True
        from .checks import greedy_identity

        d = draft if draft is not None else self.run(self.port.make_draft)
        return self._check(greedy_identity, self.port, prompt, d, k=self._k(k, own_draft=draft is None),
                        max_new_tokens=self._max_new_tokens(max_new_tokens), tol=self.tolerance, **kw)

    @check
    def greedy_acceptance(self, prompts=None, draft=None, *, k=None, max_new_tokens=None, **kw):
        """``greedy_acceptance(prompts=None, draft=None, *, k=None, max_new_tokens=None)``: over the prompts (default:
        the run's prompt set) the draft (default: the port's own) gets at least one draft accepted, unless the
        port declares ``draft_may_never_match = True``."""
        __tracebackhide__ = True
        from .checks import greedy_acceptance

        d = draft if draft is not None else self.run(self.port.make_draft)
        return self._check(greedy_acceptance, self.port, self._prompts(prompts), d, k=self._k(k, own_draft=draft is None),
                        max_new_tokens=self._max_new_tokens(max_new_tokens), **kw)

    @check
    def forced_acceptance(self, prompt, k=None, **kw):
        """``forced_acceptance(prompt_ids, k=None, pattern=None, commit_path=None)``: the loop with a forcing
        draft; every accept count 0..k on purpose, counted (k = 0: the zero-draft loop)."""
        __tracebackhide__ = True
        from .checks import forced_acceptance

        return self._check(forced_acceptance, self.port, prompt, k=self._k(k), tol=self.tolerance, **kw)

    @check
    def self_draft(self, prompt, k=None, max_new_tokens=None, **kw):
        """``self_draft(prompt_ids, k=None, max_new_tokens=None)``: draft == target accepts everything."""
        __tracebackhide__ = True
        from .checks import self_draft_accepts_all

        return self._check(self_draft_accepts_all, self.port, prompt, k=self._k(k),
                        max_new_tokens=self._max_new_tokens(max_new_tokens), tol=self.tolerance, **kw)

    @check
    def replay(self, prompt, k_values=None):
        """``replay(prompt_ids, k_values=None)``: check 3 (full accepts: kept state == replayed state within
        the profile, bitwise for an exact one; the port's own replay check agrees or is NotSupported)."""
        __tracebackhide__ = True
        from .replay import replay_matches_keep

        return self._check(replay_matches_keep, self.port, prompt, self._k_values(k_values), tol=self.tolerance,
                        seed=self.seed)

    @check
    def sampling(self, prompt, samples=None, **kw):
        """``sampling(prompt_ids, samples=None, temperature=1.0)``: check 4 (distribution preservation at
        T > 0; samples None: ``--specverify-samples``, else sized by power)."""
        __tracebackhide__ = True
        from .sampling_check import sampling_distribution

        return self._check(sampling_distribution, self.port, prompt,
                        samples=self.settings.samples if samples is None else samples, seed=self.seed,
                        tol=self.tolerance, **kw)

    @check
    def draft_sampling(self, prompt, samples=None, k=None, **kw):
        """``draft_sampling(prompt_ids, samples=None, k=None, temperature=1.0)``: the port's own draft at
        T > 0 draws each token from the q it reports (q rows are distributions, q[0] fixed for a fixed
        state, first tokens ~ q[0] by chi-square)."""
        __tracebackhide__ = True
        from .draft_sampling import draft_sampling

        if samples is None:
            samples = DRAFT_SAMPLES if self.settings.samples is None else self.settings.samples
        return self._check(draft_sampling, self.port, prompt, samples=samples, k=self._k(k, own_draft=True),
                        tol=self.tolerance, seed=self.seed, **kw)

    @check
    def fuzz(self, prompt, k_max=None, **kw):
        """``fuzz(prompt_ids, k_max=None, max_examples=15, steps=8)``: check 5 (Hypothesis state machine,
        seeded from the test's seed unless a ``seed`` is given)."""
        __tracebackhide__ = True
        from .fuzz import run_commit_fuzz

        kw.setdefault("seed", self.seed)
        return self._check(run_commit_fuzz, self.port, prompt, k_max=self._k(k_max), tol=self.tolerance, **kw)

    @check
    def prefill_consistency(self, prompt, max_new_tokens=None, **kw):
        """``prefill_consistency(prompt_ids, max_new_tokens=None, temperature=1.0)``: decode with sampling
        one step at a time, re-prefill prompt + output in one pass, compare the tokens' log-probs (k3 KL
        and max |dlogprob| within the profile)."""
        __tracebackhide__ = True
        from .reprefill import decode_prefill_consistency

        return self._check(decode_prefill_consistency, self.port, prompt, max_new_tokens=self._max_new_tokens(max_new_tokens),
                        tol=self.tolerance, seed=self.seed, **kw)

    @check
    def prefill_onto_state(self, prompt, k=None, **kw):
        """``prefill_onto_state(prompt_ids, k=None)``: a prefill onto a state that holds tokens (the prompt in 2 and
        3 chunks; a prefill after a verify and a commit of 0, 1, k+1 and a seeded number of rows on every commit
        path) gives the log-probabilities of one prefill of the whole text (k: at most 3 by default)."""
        __tracebackhide__ = True
        from .prefill_state import prefill_onto_state

        return self._check(prefill_onto_state, self.port, prompt, tol=self.tolerance, seed=self.seed,
                        k=min(self.settings.spec_k, 3) if k is None else k, **kw)

    @check
    def long_context(self, prompt, length=None, k=None, **kw):
        """``long_context(prompt_ids, length=None, k=None)``: fill the context to ``length`` tokens
        (``--specverify-context``); step-by-step decode vs one prefill position by position, then one
        verify and partial commit per commit path at the end, against prefill + single steps."""
        __tracebackhide__ = True
        from .long_context import long_context

        return self._check(long_context, self.port, prompt, length=self.settings.context if length is None else length,
                        k=self._k(k), tol=self.tolerance, seed=self.seed, **kw)

    @check
    def draft_consistency(self, prompt, k=None, max_new_tokens=None, **kw):
        """``draft_consistency(prompt_ids, k=None, max_new_tokens=None, commit_path=None)``: the port's draft
        in the port's greedy loop proposes what a fresh draft state with the same context proposes."""
        __tracebackhide__ = True
        from .checks import draft_consistency

        return self._check(draft_consistency, self.port, prompt, k=self._k(k, own_draft=True),
                        max_new_tokens=self._max_new_tokens(max_new_tokens), tol=self.tolerance, **kw)

    @check
    def reference(self, prompts=None, *, path=None, max_new_tokens=None, **kw):
        """``reference(prompts=None, *, path=None, max_new_tokens=None)``: the port's logits over the prompts
        (default: the run's prompt set; prefill, then greedy steps, 8 by default) agree with the checkpoint at
        ``path`` (default: ``--specverify-reference``, else the port's ``reference_path``) on the engine's
        float32 reference backend; no reference at all is ``NotSupported`` (a skip that says how to give one)."""
        __tracebackhide__ = True
        from .reference import reference_agreement

        path = path or self.settings.reference or getattr(self.port, "reference_path", None)
        if path is None:
            return self._check(_no_reference, self.port)
        return self._check(reference_agreement, self.port, self._prompts(prompts), reference=str(path), tol=self.tolerance,
                        max_new_tokens=8 if max_new_tokens is None else max_new_tokens, **kw)


def _no_reference(port):
    from .protocol import NotSupported

    raise NotSupported(f"no reference model for port {getattr(port, 'name', port)!r}: pass --specverify-reference PATH "
                       f"(a Hugging Face checkpoint folder of the model the port computes) or set the port's "
                       f"reference_path, and the port's logits are compared with it on the engine's float32 reference "
                       f"backend")


Verifier.CHECKS = tuple(name for name, fn in vars(Verifier).items() if getattr(fn, "is_check", False))
