"""tools/avx2_int4_variants.c builds against the real avx2 tile (it includes gemm/host_int/avx2.c) and its three
reorganisations give that tile's bits: the tool checks them before it times anything, so a variant that drifts,
or a tile whose signature changes under the tool, fails here rather than on the next person to run it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from onebit_engine.gemm.host_int import native

TOOL = Path(__file__).resolve().parents[2] / "tools" / "avx2_int4_variants.c"


def _build(src: Path, out: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "ziglang", "cc", "-O2", "-mavx2", str(src), "-o", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]


def _run(exe: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not native.available("avx2"), reason="needs AVX2 and the ziglang compiler (the native library's path)")
def test_the_variants_match_the_real_tile_and_time_all_four(tmp_path):
    _build(TOOL, tmp_path / "int4v")
    res = _run(tmp_path / "int4v")
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert {(r["weights"], r["variant"]) for r in rows} == {(w, v) for w in ("L2", "streamed")
                                                            for v in ("real", "b128", "b64", "two_tiles")}
    assert all(r["gmac_s_median"] > 0 for r in rows)


@pytest.mark.skipif(not native.available("avx2"), reason="needs AVX2 and the ziglang compiler (the native library's path)")
def test_a_variant_that_drifts_from_the_tile_is_refused(tmp_path):
    """The tool's check has power: one weight bit flipped inside a variant (not in the tile) stops it."""
    text = TOOL.read_text()
    src = text.replace('#include "../src/', f'#include "{TOOL.parents[1]}/src/')
    hook = "static void real("
    assert hook in text
    src = src.replace(hook, "static void b64_broken(const uint8_t *w, int64_t ns, const int8_t *xs, int32_t *acc);\n" + hook, 1)
    src = src.replace("variant_fn fn[4] = {real, b128, b64, two_tiles};", "variant_fn fn[4] = {real, b128, b64_broken, two_tiles};")
    src += ("static void b64_broken(const uint8_t *w, int64_t ns, const int8_t *xs, int32_t *acc) {\n"
            "    uint8_t *v = (uint8_t *)w; v[3] ^= 1; b64(w, ns, xs, acc); v[3] ^= 1;\n}\n")
    (tmp_path / "broken.c").write_text(src)
    _build(tmp_path / "broken.c", tmp_path / "broken")
    res = _run(tmp_path / "broken")
    assert res.returncode == 1 and json.loads(res.stdout.splitlines()[-1]) == {"error": "b64 differs from the real tile"}
