"""Stage files (format 2): the checksum covers header and payload; every field read back is checked.

A file damaged in place (an edited or bit-flipped header) fails the checksum; a file crafted with a
fresh checksum (the checksum is not a signature) still has every field checked: one line naming the
file and the field, exit 2.
"""
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save

from onebit_engine.measure import acceptance_probe as probe
from onebit_engine.measure import stagefile


def _parts(path, kind):
    head, tensors = stagefile.read(path, kind)
    return json.loads(json.dumps(head)), {k: np.array(v) for k, v in tensors.items()}


def _write(path, head, tensors, *, fresh=True):
    """Write a stage file from parts; ``fresh``: with a checksum that matches (a crafted file)."""
    if fresh:
        head["sha256"] = stagefile.digest(head, tensors)
    path.write_bytes(save({k: np.ascontiguousarray(v) for k, v in tensors.items()},
                          metadata={stagefile.HEADER_KEY: json.dumps(head)}))
    return path


def _one_line(code, out, err, *needles):
    assert code == 2, (code, out, err)
    assert out == "" and err.startswith("onebit: error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)


# -- the checksum covers the header ------------------------------------------------------------------
@pytest.mark.parametrize("kind,field,value", [
    ("capture", "step_ms", 1e-6),     # a faster plain step would make the draft look expensive
    ("capture", "tap_layers", [0]),
    ("draft", "draft_ms", 1e-6),
    ("draft", "block_size", 3),
])
def test_edited_header_is_refused(run, stages, tmp_path, kind, field, value):
    src = stages[0] if kind == "capture" else stages[1]
    head, tensors = _parts(src, kind)
    head["payload"][field] = value
    bad = _write(tmp_path / "edited.st", head, tensors, fresh=False)
    cap, dr = (bad, stages[1]) if kind == "capture" else (stages[0], bad)
    _one_line(*run("probe", "score", "--capture", cap, "--drafts", dr), "corrupt", "sha256", str(bad))


def test_bit_flipped_header_is_refused(run, stages, tmp_path):
    data = bytearray(stages[0].read_bytes())
    key = b'step_ms\\":'  # the stage header is a JSON string inside the safetensors header: quotes escaped
    at = data.index(key) + len(key)
    digit = next(i for i in range(at, at + 20) if chr(data[i]).isdigit() and data[i] != ord("9"))
    data[digit] += 1
    bad = tmp_path / "flipped.st"
    bad.write_bytes(bytes(data))
    _one_line(*run("probe", "score", "--capture", bad, "--drafts", stages[1]), "corrupt", "sha256")


def test_version_1_file_is_refused_with_the_way_out(run, stages, tmp_path):
    head, tensors = _parts(stages[0], "capture")
    head["version"] = 1
    _write(tmp_path / "v1.st", head, tensors)
    _one_line(*run("probe", "score", "--capture", tmp_path / "v1.st", "--drafts", stages[1]),
              "stage format version 1", "reads version 2", "run `onebit probe capture` again")


# -- every field of a crafted file is checked --------------------------------------------------------
def _set(d, key, value):
    if value is _DEL:
        d.pop(key)
    else:
        d[key] = value


_DEL = object()


def _id(key, value) -> str:
    """A test id that is the same in every process (an object's repr holds its address: xdist workers
    would collect different ids and refuse to run)."""
    return f"{key}=deleted" if value is _DEL else f"{key}={value!r}"[:30]
CAPTURE_PAYLOAD = [
    ("step_ms", 0, "payload.step_ms is 0 (int)"),
    ("step_ms", -2.5, "finite number > 0"),
    ("step_ms", "fast", "payload.step_ms is 'fast' (str)"),
    ("step_ms", True, "finite number > 0"),
    ("step_ms", _DEL, "payload.step_ms is missing"),
    ("prompts", 0, "payload.prompts is 0, but it must be in 1..1 (the file holds 3 tensors, 3 a prompt)"),
    ("prompts", "1", "it must be an integer"),
    ("prompts", 2, "payload.prompts is 2, but it must be in 1..1"),  # 3 tensors: one prompt
    ("prompts", 10**12, "payload.prompts is 1000000000000"),
    ("prompts", _DEL, "payload.prompts is missing"),
    ("tap_layers", [], "non-empty list of integers"),
    ("tap_layers", "1", "non-empty list of integers"),
    ("tap_layers", [99], "strictly increasing"),
    ("tap_layers", [1, 1], "strictly increasing"),
    ("num_target_layers", 0, "payload.num_target_layers is 0"),
    ("num_target_layers", 1.5, "it must be an integer"),
    ("vocab_size", _DEL, "payload.vocab_size is missing"),
    ("vocab_size", 2, "token ids must be in 0..1"),
]


@pytest.mark.parametrize("key,value,needle", CAPTURE_PAYLOAD, ids=[_id(k, v) for k, v, _ in CAPTURE_PAYLOAD])
def test_crafted_capture_payload_is_refused(run, stages, tmp_path, key, value, needle):
    head, tensors = _parts(stages[0], "capture")
    _set(head["payload"], key, value)
    bad = _write(tmp_path / "c.st", head, tensors)
    _one_line(*run("probe", "score", "--capture", bad, "--drafts", stages[1]), needle, f"stage file {str(bad)!r}",
              "run `onebit probe capture` again")


DRAFT_PAYLOAD = [
    ("draft_ms", 0.0, "payload.draft_ms is 0.0"),
    ("draft_ms", -1, "finite number > 0"),
    ("draft_ms", _DEL, "payload.draft_ms is missing"),
    ("block_size", 1, "payload.block_size is 1, but it must be >= 2"),
    ("block_size", 51, "tensor 'p0.proposals' is int64 [9, 3], but it must be int64 [N, 50]"),  # k=50 on 3 drafts
    ("block_size", "4", "it must be an integer"),
    ("capture_sha256", 7, "64-character hex digest"),
    ("capture_sha256", _DEL, "payload.capture_sha256 is missing"),
    ("vocab_size", 3, "token ids must be in 0..2"),
    ("prompts", 3, "payload.prompts is 3, but it must be in 1..1 (the file holds 1 tensors, 1 a prompt)"),
]


@pytest.mark.parametrize("key,value,needle", DRAFT_PAYLOAD, ids=[_id(k, v) for k, v, _ in DRAFT_PAYLOAD])
def test_crafted_draft_payload_is_refused(run, stages, tmp_path, key, value, needle):
    head, tensors = _parts(stages[1], "draft")
    _set(head["payload"], key, value)
    bad = _write(tmp_path / "d.st", head, tensors)
    _one_line(*run("probe", "score", "--capture", stages[0], "--drafts", bad, "--k", 1), needle, str(bad),
              "run `onebit probe draft` again")


@pytest.mark.parametrize("part,value,needle", [
    ("payload", [], "header field 'payload' is [] (list), not an object"),
    ("payload", None, "header field 'payload' is missing"),
    ("provenance", "x", "header field 'provenance' is 'x' (str), not an object"),
    ("kind", None, "is a None stage file, not a 'capture' one"),
    ("sha256", 12, "do not match the sha256"),
])
def test_crafted_header_shape_is_refused(run, stages, tmp_path, part, value, needle):
    head, tensors = _parts(stages[0], "capture")
    head[part] = value
    bad = _write(tmp_path / "h.st", head, tensors, fresh=part != "sha256")
    _one_line(*run("probe", "score", "--capture", bad, "--drafts", stages[1]), needle)


def test_header_that_is_not_an_object_or_not_strict_json(run, stages, tmp_path):
    _, tensors = _parts(stages[0], "capture")
    for text, needle in [("[1, 2]", "JSON list, not an object"), ('{"kind": "capture", "x": NaN}', "not strict JSON"),
                         ("{nope", "not strict JSON"), ("[" * 100_000 + "]" * 100_000, "nests too deeply")]:
        bad = tmp_path / "j.st"
        bad.write_bytes(save(tensors, metadata={stagefile.HEADER_KEY: text}))
        _one_line(*run("probe", "score", "--capture", bad, "--drafts", stages[1]), needle, "corrupt")


def _taps_nan(t):
    t["p0.taps"] = t["p0.taps"].copy()
    t["p0.taps"][0, 0, 0] = np.nan


TENSOR_DAMAGE = [
    ("taps shape", lambda t: t.update({"p0.taps": t["p0.taps"][:-1]}), "tensor 'p0.taps' is float32"),
    ("tokens dtype", lambda t: t.update({"p0.tokens": t["p0.tokens"].astype(np.float32)}), "it must be int64 [N]"),
    ("tokens 2-D", lambda t: t.update({"p0.tokens": t["p0.tokens"][None]}), "it must be int64 [N]"),
    ("one token", lambda t: t.update({"p0.tokens": t["p0.tokens"][:1], "p0.taps": t["p0.taps"][:4]}), "at least 2"),
    ("negative id", lambda t: t["p0.prompt"].__setitem__(0, -1), "holds token id -1"),
    ("id past vocab", lambda t: t["p0.tokens"].__setitem__(1, 10**6), "holds token id 1000000"),
    ("extra tensor", lambda t: t.update({"p9.junk": np.zeros(2, np.float32)}), "tensor 'p9.junk' is present"),
    ("missing tensor", lambda t: t.pop("p0.taps"), "tensor 'p0.taps' is missing"),
    ("nan taps", _taps_nan, "taps must be finite"),
]


@pytest.mark.parametrize("what,damage,needle", TENSOR_DAMAGE, ids=[w for w, _, _ in TENSOR_DAMAGE])
def test_crafted_capture_tensors_are_refused(run, stages, tmp_path, what, damage, needle):
    head, tensors = _parts(stages[0], "capture")
    damage(tensors)
    bad = _write(tmp_path / "t.st", head, tensors)
    _one_line(*run("probe", "score", "--capture", bad, "--drafts", stages[1]), needle)


def test_unsupported_tensor_dtype_is_refused(run, stages, tmp_path):
    head, tensors = _parts(stages[0], "capture")
    tensors["p0.tokens"] = tensors["p0.tokens"].astype(np.int32)
    bad = _write(tmp_path / "i32.st", head, tensors)
    _one_line(*run("probe", "score", "--capture", bad, "--drafts", stages[1]), "dtype I32", "corrupt")


def test_draft_stage_that_does_not_fit_its_capture(run, stages, tmp_path):
    """Right checksum link, wrong shapes: a crafted draft stage whose proposals do not match the capture."""
    head, tensors = _parts(stages[1], "draft")
    tensors["p0.proposals"] = tensors["p0.proposals"][:-2]
    bad = _write(tmp_path / "short.st", head, tensors)
    _one_line(*run("probe", "score", "--capture", stages[0], "--drafts", bad), "proposals for prompt 0 are [7, 3]",
              "need [9, 3]")


@pytest.mark.parametrize("key,value,needle", [
    ("num_target_layers", 10**9, "num_target_layers 1000000000 != 4"),
    ("vocab_size", 10**6, "vocab_size 1000000 != 96"),
])
def test_probe_draft_refuses_a_capture_that_does_not_fit_the_target(run, pair, stages, tmp_path, key, value, needle):
    head, tensors = _parts(stages[0], "capture")
    head["payload"][key] = value
    bad = _write(tmp_path / "big.st", head, tensors)
    _one_line(*run("probe", "draft", "--model", pair[0], "--draft", pair[1], "--capture", bad, "--out", tmp_path / "d.st"),
              "does not fit this target", needle)
    assert not (tmp_path / "d.st").exists()


def test_directory_and_unreadable_paths(run, stages, tmp_path):
    _one_line(*run("probe", "score", "--capture", tmp_path, "--drafts", stages[1]), "does not exist or is not a file")


def test_good_files_round_trip(stages):
    cap, ds = probe.load_capture(stages[0]), probe.load_draft_stage(stages[1])
    assert ds.capture_checksum == cap.checksum and cap.vocab_size == ds.vocab_size == 96
    assert [len(t) for t in cap.tokens] == [10] and ds.proposals[0].shape == (9, 3)
    assert cap.step_ms > 0 and ds.draft_ms > 0


def test_stage_files_from_before_the_ops_rename_still_load(stages, tmp_path):
    """A stage written when the target's op table was called its ``recurrence`` loads, the value read
    under today's name ``ops``; the file itself is not changed."""
    for kind, path, load in (("capture", stages[0], probe.load_capture), ("draft", stages[1], probe.load_draft_stage)):
        head, tensors = _parts(path, kind)
        ops = head["provenance"].pop("ops")
        assert load(path).provenance["ops"] == ops in ("numpy", "numba")
        head["provenance"]["recurrence"] = ops
        old = _write(tmp_path / f"old-{kind}.st", head, tensors)
        got = load(old).provenance
        assert got["ops"] == got["recurrence"] == ops
        assert "ops" not in stagefile.read(old, kind)[0]["provenance"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flipped_byte_is_refused_or_changes_nothing(stages, data):
    """Property: flip one byte anywhere; the load either refuses with a StageError or returns the same
    capture (a flip in JSON whitespace the parser ignores)."""
    import tempfile
    from pathlib import Path

    raw = stages[0].read_bytes()
    at = data.draw(st.integers(0, len(raw) - 1), label="offset")
    bit = data.draw(st.integers(0, 7), label="bit")
    flipped = bytearray(raw)
    flipped[at] ^= 1 << bit
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "f.st"
        path.write_bytes(bytes(flipped))
        try:
            got = probe.load_capture(path)
        except probe.StageError as e:
            assert "\n" not in str(e)
            return
    good = probe.load_capture(stages[0])
    assert got.checksum == good.checksum and got.step_ms == good.step_ms and got.tokens == good.tokens
    assert all(np.array_equal(a, b) for a, b in zip(got.taps, good.taps))


def test_inspect_reads_stage_files_through_the_checks(run, stages, tmp_path):
    code, out, err = run("inspect", stages[1])
    assert code == 0 and "stage (draft)" in out, err
    head, tensors = _parts(stages[0], "capture")
    for part, value in [("payload", [1]), ("kind", "other")]:
        h = json.loads(json.dumps(head))
        h[part] = value
        _one_line(*run("inspect", _write(tmp_path / "i.st", h, tensors)), str(tmp_path / "i.st"))
    bad = tmp_path / "j.st"
    bad.write_bytes(save(tensors, metadata={stagefile.HEADER_KEY: "{nope"}))
    _one_line(*run("inspect", bad), "not strict JSON")
