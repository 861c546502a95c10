"""The installed `onebit` console script, run as a user would."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _onebit():
    exe = Path(sys.executable).with_name("onebit")
    return [str(exe)] if exe.exists() else ([shutil.which("onebit")] if shutil.which("onebit") else None)


def test_console_script_generate_json_and_error(cache_dir):
    cmd = _onebit()
    if cmd is None:
        pytest.skip("the onebit console script is not installed next to this interpreter (pip install -e .)")
    env = dict(os.environ, ONEBIT_CACHE_DIR=str(cache_dir))
    ok = subprocess.run(cmd + ["generate", "--max-new-tokens", "3", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert len(json.loads(ok.stdout)["tokens"]) == 3
    assert ok.stderr == ""  # not a TTY: no progress bar
    bad = subprocess.run(cmd + ["inspect", "/no/such/path"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("onebit: error: ") and "Traceback" not in bad.stderr
    mod = subprocess.run([sys.executable, "-m", "onebit_engine", "--help"], capture_output=True, text=True, timeout=120)
    assert mod.returncode == 0 and "probe" in mod.stdout and "bench" in mod.stdout
