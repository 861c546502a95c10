"""What a measured figure was measured with: engine version and git revision, backend, row set, kernels."""
from __future__ import annotations

import platform
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any


@lru_cache(maxsize=1)
def git_revision() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5)
        rev = out.stdout.strip()
        if out.returncode == 0 and rev:
            dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=5)
            return rev + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def run_provenance(target, **extra: Any) -> dict[str, Any]:
    from . import __version__

    desc = target.backend.describe()
    return {
        "engine_version": __version__, "git_revision": git_revision(), "backend": desc.get("backend"),
        "kernel_set": desc.get("kernel_set"), "row_set": target.row_set, "model_type": target.config.model_type,
        "machine": f"{platform.machine()} {platform.processor() or platform.system()}", **extra,
    }
