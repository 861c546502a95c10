"""safetensors headers are held to the format's rules (what the safetensors package enforces), and
shard indexes to their folder: each bad header or index is refused in one line naming file and tensor."""
import json
import struct

import numpy as np
import pytest

from onebit_engine import CheckpointError, load_target
from onebit_engine.checkpoint.safetensors import MAX_HEADER, read_header
from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint


def _write(path, header, data: bytes, raw_header: bytes | None = None):
    hj = raw_header if raw_header is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(hj)) + hj + data)
    return path


def _f32(n, begin=0):
    return {"dtype": "F32", "shape": [n], "data_offsets": [begin, begin + 4 * n]}


GOOD = {"a": _f32(2), "b": _f32(1, 8)}  # 12 data bytes, tiled

# (header, data bytes, text the refusal must contain)
HEADER_CASES = [
    ([1, 2], b"", "the safetensors header is [1, 2], must be a JSON object"),
    ({"a": [0, 4]}, b"\0" * 4, "a: entry is [0, 4], must be an object"),
    ({"a": {"shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "a: entry has no dtype"),
    ({"a": {"dtype": "F32", "data_offsets": [0, 4]}}, b"\0" * 4, "a: entry has no shape"),
    ({"a": {"dtype": "F32", "shape": [1]}}, b"\0" * 4, "a: entry has no data_offsets"),
    ({"a": {**_f32(1), "data_offsets": ["0", "4"]}}, b"\0" * 4, 'a: data_offsets ["0", "4"] must be two non-negative integers'),
    ({"a": {**_f32(1), "data_offsets": [-4, 0]}}, b"\0" * 4, "a: data_offsets [-4, 0] must be two non-negative integers"),
    ({"a": {**_f32(1), "data_offsets": [0.0, 4.0]}}, b"\0" * 4, "a: data_offsets [0.0, 4.0] must be two"),
    ({"a": {**_f32(1), "data_offsets": [False, 4]}}, b"\0" * 4, "a: data_offsets [false, 4] must be two"),
    ({"a": {**_f32(1), "data_offsets": [0, 4, 8]}}, b"\0" * 8, "a: data_offsets [0, 4, 8] must be two"),
    ({"a": {**_f32(1), "data_offsets": 4}}, b"\0" * 4, "a: data_offsets 4 must be two"),
    ({"a": {**_f32(1), "data_offsets": [8, 4]}}, b"\0" * 8, "a: data_offsets [8, 4] begin after they end"),
    ({"a": {**_f32(1), "shape": "1"}}, b"\0" * 4, 'a: shape "1" must be a list of non-negative integers'),
    ({"a": {**_f32(1), "shape": [-1]}}, b"\0" * 4, "a: shape [-1] must be a list of non-negative"),
    ({"a": {**_f32(1), "shape": [1.0]}}, b"\0" * 4, "a: shape [1.0] must be a list"),
    ({"a": {**_f32(1), "dtype": "F8"}}, b"\0" * 4, 'a: dtype "F8" is not supported'),
    ({"a": {**_f32(1), "dtype": 4}}, b"\0" * 4, "a: dtype 4 is not supported"),
    ({"a": {**_f32(1), "shape": [2]}}, b"\0" * 4, "a: 4 bytes stored for shape [2] F32 (needs 8)"),
    ({"a": _f32(2)}, b"\0" * 4, "a: data ends at byte 8 but the file holds 4 data bytes (truncated)"),
    ({"a": _f32(1), "b": _f32(1)}, b"\0" * 4, "b: bytes [0, 4) overlap a's bytes"),
    ({"a": _f32(2), "b": _f32(1, 4)}, b"\0" * 8, "b: bytes [4, 8) overlap a's bytes (ending at 8)"),
    ({"a": _f32(1, 4)}, b"\0" * 8, "data bytes [0, 4) before a belong to no tensor"),
    ({"a": _f32(1), "b": _f32(1, 8)}, b"\0" * 12, "data bytes [4, 8) before b belong to no tensor"),
    ({"a": _f32(1)}, b"\0" * 8, "data bytes [4, 8) after the last tensor belong to no tensor"),
    ({"a": _f32(1), "__metadata__": {"k": 1}}, b"\0" * 4, 'the safetensors __metadata__ is {"k": 1}, must be an object of strings'),
    ({"a": _f32(1), "__metadata__": "m"}, b"\0" * 4, "__metadata__ is \"m\""),
]


@pytest.mark.parametrize("header, data, text", HEADER_CASES, ids=[str(i) for i in range(len(HEADER_CASES))])
def test_bad_header_is_refused_naming_file_and_tensor(tmp_path, header, data, text):
    path = _write(tmp_path / "x.safetensors", header, data)
    with pytest.raises(CheckpointError) as e:
        read_header(path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and text in msg and "\n" not in msg, msg


def test_good_headers_pass_zero_size_tensors_and_any_order(tmp_path):
    header = {"z": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]}, "b": _f32(1, 8), "a": _f32(2),
              "e": {"dtype": "I8", "shape": [0], "data_offsets": [12, 12]}}
    got, start, meta = read_header(_write(tmp_path / "ok.safetensors", {**header, "__metadata__": {"k": "v"}}, b"\0" * 12))
    assert set(got) == {"z", "b", "a", "e"} and meta == {"k": "v"}


@pytest.mark.parametrize("raw, text", [
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
     "has the key 'a' twice"),
    (b"{\"a\": \xff}", "the safetensors header is not UTF-8"),
    (b"{not json", "the safetensors JSON header does not parse"),
])
def test_malformed_header_bytes(tmp_path, raw, text):
    path = _write(tmp_path / "x.safetensors", None, b"\0" * 4, raw_header=raw)
    with pytest.raises(CheckpointError, match=text) as e:
        read_header(path)
    assert str(path) in str(e.value)


def test_absurd_header_size_refused_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:  # a sparse file: the length fits the file, the limit refuses it
        f.write(struct.pack("<Q", MAX_HEADER + 1))
        f.truncate(MAX_HEADER + 100)
    reads = []
    real_open = open

    def spy(*a, **k):
        fh = real_open(*a, **k)
        orig = fh.read
        fh.read = lambda n=-1: reads.append(n) or orig(n)
        return fh

    monkeypatch.setattr("builtins.open", spy)
    with pytest.raises(CheckpointError, match="more than the safetensors limit"):
        read_header(path)
    assert reads == [8]


def test_cut_file_message_names_first_few_and_counts_the_rest(tmp_path):
    cfg = tiny_config()
    folder = write_checkpoint(tmp_path / "m", cfg, random_weights(cfg, 1))
    f = folder / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(CheckpointError) as e:
        load_target(folder)
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 600 and " more; the file is truncated" in msg, msg


# -- sharded index -------------------------------------------------------------------------------------
@pytest.fixture()
def sharded(tmp_path):
    cfg = tiny_config()
    return write_checkpoint(tmp_path / "s", cfg, random_weights(cfg, 0), shards=2)


def _index(folder, mutate):
    p = folder / "model.safetensors.index.json"
    raw = json.loads(p.read_text())
    raw = mutate(raw)
    p.write_text(json.dumps(raw))


def _set(raw, name, shard):
    raw["weight_map"][name] = shard
    return raw


A = "model.embed_tokens.weight"


@pytest.mark.parametrize("mutate, text", [
    (lambda raw: [raw], "not a valid shard index ('weight_map' is [{"),
    (lambda raw: {"weight_map": []}, "not a valid shard index ('weight_map' is [])"),
    (lambda raw: {"metadata": {}}, "not a valid shard index ('weight_map' is null)"),
    (lambda raw: {"weight_map": {}}, "its weight_map names no tensor"),  # was: every tensor "missing", config blamed
    (lambda raw: _set(raw, A, 3), f"weight_map values must be shard file names (strings): {A} -> 3"),
    (lambda raw: _set(raw, A, "/etc/passwd"), "shard name(s) '/etc/passwd' leave the checkpoint folder"),
    (lambda raw: _set(raw, A, "../outside.safetensors"), "'../outside.safetensors' leave the checkpoint folder"),
    (lambda raw: _set(raw, A, "sub/../../x.safetensors"), "'sub/../../x.safetensors' leave"),
    (lambda raw: _set(raw, A, ""), "'' leave the checkpoint folder"),
    (lambda raw: _set(raw, A, "model-00003-of-00002.safetensors"), "names shard file(s) model-00003-of-00002.safetensors that are not in"),
    (lambda raw: _set(raw, A, "model-00002-of-00002.safetensors" if raw["weight_map"][A].startswith("model-00001")
                      else "model-00001-of-00002.safetensors"), f"does not match its shards for 1 tensor(s): {A} (index: "),
    (lambda raw: _set(raw, "model.extra.weight", raw["weight_map"][A]), "model.extra.weight (index: model-0000"),
    (lambda raw: {**raw, "weight_map": {k: v for k, v in raw["weight_map"].items() if k != A}}, f"{A} (stored in model-"),
])
def test_bad_shard_index_is_refused(sharded, mutate, text):
    _index(sharded, mutate)
    with pytest.raises(CheckpointError) as e:
        load_target(sharded)
    msg = str(e.value)
    assert "model.safetensors.index.json" in msg and text in msg and "\n" not in msg, msg


def test_index_not_utf8_or_not_json(sharded):
    p = sharded / "model.safetensors.index.json"
    p.write_bytes(b'{"weight_map": "\xff"}')
    with pytest.raises(CheckpointError, match="index.json: the shard index is not UTF-8"):
        load_target(sharded)
    p.write_text("{nope")
    with pytest.raises(CheckpointError, match="index.json: the shard index is not valid JSON"):
        load_target(sharded)


def test_shard_symlink_inside_folder_is_followed(sharded, tmp_path):
    """Files placed in the folder are trusted (the HF hub cache is a folder of symlinks into ../../blobs)."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    shard = sharded / "model-00001-of-00002.safetensors"
    shard.rename(blobs / "abc")
    shard.symlink_to(blobs / "abc")
    t = load_target(sharded)
    assert t.forward([1, 2], t.new_state()).logits.shape == (2, 96)


def test_config_and_index_bytes_that_are_not_utf8(tmp_path):
    cfg = tiny_config()
    folder = write_checkpoint(tmp_path / "m", cfg, random_weights(cfg, 1))
    (folder / "config.json").write_bytes(b'{"model_type": "\xe9"}')
    with pytest.raises(CheckpointError, match=r"config.json: config.json is not UTF-8 text \(byte 16"):
        load_target(folder)


def test_integer_views_of_floats_in_data_are_read_exactly(tmp_path):
    """An I32 tensor that is valid safetensors still reads (the dtype rule is the loader's, per tensor)."""
    v = np.arange(3, dtype=np.int32)
    path = _write(tmp_path / "i.safetensors", {"i": {"dtype": "I32", "shape": [3], "data_offsets": [0, 12]}}, v.tobytes())
    from onebit_engine.checkpoint.safetensors import iter_tensors

    assert np.array_equal(dict(iter_tensors(path))["i"], v)


@pytest.mark.parametrize("name, text", [
    ("model.safetensors", "model.safetensors: is a folder, not a regular file"),
    ("model.safetensors.index.json", "index.json: the shard index cannot be read (Is a directory)"),
])
def test_folder_where_a_file_belongs(tmp_path, name, text):
    cfg = tiny_config()
    folder = write_checkpoint(tmp_path / "m", cfg, random_weights(cfg, 1))
    (folder / "model.safetensors").unlink()
    (folder / name).mkdir()
    with pytest.raises(CheckpointError, match=text.replace("(", r"\(").replace(")", r"\)")):
        load_target(folder)


def test_a_fifo_or_device_where_a_file_belongs_is_refused_not_read(tmp_path):
    """A FIFO would block the header's read for ever and a device never end it: both are refused by their kind
    before any read (an alarm turns a hang into a failure)."""
    import os
    import signal

    cfg = tiny_config()
    folder = write_checkpoint(tmp_path / "m", cfg, random_weights(cfg, 1))
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")
    old = signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError("the reader blocked on the FIFO")))
    signal.alarm(10)
    try:
        with pytest.raises(CheckpointError, match="model.safetensors: is a FIFO, not a regular file"):
            load_target(folder)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match="model.safetensors: is a device or a socket, not a regular file"):
        load_target(folder)
