"""For battery suites over two models of one adapter: the second model shares the adapter, the loop and the draft,
so CI runs only the checks of what differs (its model and caches) on it; an environment variable runs all."""
import os

import pytest

CACHE_CHECKS = ("test_commit_equivalence", "test_replay_check", "test_short_prompts", "test_long_context",
                "test_decode_prefill_consistency", "test_stateful_fuzz")


def cache_checks_only(items, folder, model: str, full_env: str) -> None:
    """Skip every battery test under ``folder`` on ``model`` but the cache checks, unless ``full_env`` is set (a
    conftest's collection hook sees the whole session's items, hence the folder)."""
    if os.environ.get(full_env):
        return
    skip = pytest.mark.skip(reason=f"{model} runs the cache checks only in CI ({full_env}=1: all)")
    for item in items:
        if item.path.is_relative_to(folder) and model in item.nodeid and item.originalname not in CACHE_CHECKS:
            item.add_marker(skip)
