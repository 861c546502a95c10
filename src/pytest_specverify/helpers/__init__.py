"""Helpers a port author needs (none imports anything heavy at import time):

* ``snapshot.SnapshotCommit``: verify / commit for any state that can be copied (``keep`` and
  ``replay`` paths for free);
* ``loop.reference_speculative_generate`` / ``loop.ReferenceLoop``: the documented speculative rule and
  its round counts, for engines whose own loop does not speak the draft protocol;
* ``ngram.NgramDraft``: a seeded n-gram ``make_draft`` for any vocabulary;
* ``hf_cache``: snapshot / restore / ``state_arrays`` for transformers' caches.
"""
from .loop import ReferenceLoop, plain_generate, reference_speculative_generate
from .ngram import NgramDraft
from .snapshot import SnapshotCommit

__all__ = ["SnapshotCommit", "ReferenceLoop", "reference_speculative_generate", "plain_generate", "NgramDraft"]
