"""Rows read for the last time leave the page cache (``TensorRef.read(release=True)``): the same bytes, the
advice given for exactly the rows read (and the next block read ahead), refusals of the advice ignored and
other errors raised, and the loader releasing every projection it packs."""
from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from safetensors.numpy import save_file

from onebit_engine import load_target
from onebit_engine.checkpoint.safetensors import QUANT_FILE, file_refs, folder_refs
from onebit_engine.cli import main
from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint


@pytest.fixture
def advice(monkeypatch):
    """Every posix_fadvise call, recorded as (offset, length, advice) and passed on to the real one."""
    calls = []
    real = getattr(os, "posix_fadvise", None)

    def record(fd, offset, length, adv):
        calls.append((offset, length, adv))
        if real is not None:
            real(fd, offset, length, adv)

    monkeypatch.setattr(os, "posix_fadvise", record, raising=False)
    monkeypatch.setattr(os, "POSIX_FADV_DONTNEED", getattr(os, "POSIX_FADV_DONTNEED", 4), raising=False)
    monkeypatch.setattr(os, "POSIX_FADV_WILLNEED", getattr(os, "POSIX_FADV_WILLNEED", 3), raising=False)
    return calls


def test_a_released_read_gives_the_same_rows_and_advises_exactly_them(tmp_path, advice):
    a = np.random.default_rng(0).standard_normal((50, 12)).astype(np.float32)
    save_file({"w": a}, str(tmp_path / "a.safetensors"))
    ref = file_refs(tmp_path / "a.safetensors")["w"]
    kept = ref.read(10, 30)
    assert advice == []  # an ordinary read gives no advice
    got = ref.read(10, 30, release=True)
    assert np.array_equal(got, kept) and np.array_equal(got, a[10:30])
    at, n = ref.offset + 10 * 48, 20 * 48
    assert advice == [(at, n, os.POSIX_FADV_DONTNEED), (at + n, n, os.POSIX_FADV_WILLNEED)]
    assert np.array_equal(ref.rows(0, 5, release=True), a[:5]) and advice[-2][:2] == (ref.offset, 5 * 48)


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ESPIPE, errno.ENOSYS])
def test_advice_a_file_system_refuses_is_ignored(tmp_path, monkeypatch, code):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    save_file({"w": a}, str(tmp_path / "a.safetensors"))

    def refuse(*_):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "posix_fadvise", refuse, raising=False)
    assert np.array_equal(file_refs(tmp_path / "a.safetensors")["w"].read(0, 4, release=True), a)


def test_other_advice_errors_are_raised(tmp_path, monkeypatch):
    save_file({"w": np.zeros((4, 6), np.float32)}, str(tmp_path / "a.safetensors"))

    def broken(*_):
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    monkeypatch.setattr(os, "posix_fadvise", broken, raising=False)
    with pytest.raises(OSError, match="Bad file descriptor"):
        file_refs(tmp_path / "a.safetensors")["w"].read(0, 4, release=True)


@pytest.mark.parametrize("backend", ["host-int", "reference"])
@pytest.mark.parametrize("fmt", ["float", "int4"])
def test_the_loader_releases_every_projection_it_packs(tmp_path, advice, backend, fmt):
    cfg = tiny_config(vocab_size=200, hidden_size=64, intermediate_size=128)
    folder = write_checkpoint(tmp_path / "float", cfg, random_weights(cfg))
    if fmt != "float":  # a servable quantized folder: the codes are read from quantized.safetensors
        assert main(["quantize", "--model", str(folder), "--format", fmt, "--out", str(tmp_path / fmt), "--json"]) == 0
        folder = tmp_path / fmt
    advice.clear()
    load_target(folder, backend=backend)
    dropped = [(o, o + n) for o, n, adv in advice if adv == os.POSIX_FADV_DONTNEED]
    refs = folder_refs(folder) if fmt == "float" else file_refs(folder / QUANT_FILE)
    projections = [r for name, r in refs.items() if name.endswith(("proj.weight", "proj.weight.qdata")) and len(r.shape) == 2]
    assert projections
    for r in projections:  # every byte of the weight inside some released range
        lo, hi = r.offset, r.offset + r.nbytes
        cover = sorted((max(a, lo), min(b, hi)) for a, b in dropped if a < hi and b > lo)
        at = lo
        for a, b in cover:
            if a > at:
                break
            at = max(at, b)
        assert at >= hi, f"{r.name}: bytes [{at - lo}, {r.nbytes}) were packed but never released"


def test_a_large_written_file_is_synced_then_dropped_from_the_cache_and_a_small_one_is_not(tmp_path, advice, monkeypatch):
    from onebit_engine.checkpoint import writer
    from onebit_engine.errors import CheckpointError

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append((fd, len(advice))), real_fsync(fd)))
    a = np.arange(96, dtype=np.float32).reshape(8, 12)
    with writer.StreamWriter(tmp_path / "small.safetensors", [("w", "F32", a.shape)]) as w:  # under the threshold
        w.write("w", a)
    assert synced == [] and advice == []
    monkeypatch.setattr(writer, "DROP_CACHE_BYTES", 64)
    with pytest.raises(CheckpointError, match="never written"):  # a file cut short is not worth a sync
        with writer.StreamWriter(tmp_path / "cut.safetensors", [("w", "F32", a.shape), ("b", "F32", a.shape)]) as w:
            w.write("w", a)
            w.close()
    assert synced == [] and advice == []
    with writer.StreamWriter(tmp_path / "big.safetensors", [("w", "F32", a.shape)]) as w:
        w.write("w", a[:4], partial=True)
        w.write("w", a[4:], partial=True)
    size = (tmp_path / "big.safetensors").stat().st_size
    # synced before the advice (the cache drops clean pages only), the advice over the whole file
    assert len(synced) == 1 and synced[0][1] == 0 and advice == [(0, size, os.POSIX_FADV_DONTNEED)]
    assert np.array_equal(file_refs(tmp_path / "big.safetensors")["w"].load(), a)
