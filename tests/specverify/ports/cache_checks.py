"""For battery suites over two models of one adapter: the second model shares the adapter, the loop and the draft,
so CI runs only the checks of what differs (its model and caches) on it; an environment variable runs all."""
import os

import pytest

CACHE_CHECKS = ("test_commit_equivalence", "test_replay_check", "test_short_prompts", "test_long_context",
                "test_decode_prefill_consistency", "test_stateful_fuzz", "test_reference_agreement",
                "test_prefill_onto_a_state_that_holds_tokens")


def cache_checks_only(items, folder, model: str, full_env: str) -> None:
    """Skip every battery test under ``folder`` on ``model`` but the cache checks, unless ``full_env`` is set (a
    conftest's collection hook sees the whole session's items, hence the folder)."""
    if os.environ.get(full_env):
        return
    skip = pytest.mark.skip(reason=f"not run on {model}: it shares the adapter, loop and draft checked on the first "
                                   f"model, so only its cache checks run ({full_env}=1 runs every check on it)")
    for item in items:
        if item.path.is_relative_to(folder) and model in item.nodeid and item.originalname not in CACHE_CHECKS:
            item.add_marker(skip)
