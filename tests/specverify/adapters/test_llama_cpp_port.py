"""The shipped llama.cpp adapter beyond its battery (tests/specverify/battery/llama_cpp): the llama.cpp rollback bug it works
around is caught when the workaround is taken out, flash attention's f16 K/V is what the long-context check
sees, the state blob parser refuses what it cannot place, and the GGUF writer makes llama.cpp compute the
model transformers computes (each conversion step shown to matter)."""
import numpy as np
import pytest

from pytest_specverify import SpecVerifyFailure, profile
from pytest_specverify.checks import commit_equivalence
from pytest_specverify.long_context import long_context
from pytest_specverify.protocol import PortOptions

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

PROMPT = list(b"The capital of France is")
#: llama.cpp (float32 GGUF, f32 KV, no flash attention) vs transformers on the same tiny checkpoint: measured
#: up to 3.5e-5 over 24 rows at |logit| ~ 4 (different summation orders); a conversion mistake moves them by 1e-3+.
REFERENCE_AGREEMENT = 2e-4


@pytest.fixture(scope="module")
def llama():
    from pytest_specverify.adapters import llama_cpp

    return llama_cpp


def _port(llama, **kw):
    from pytest_specverify.adapters.llama_cpp.port import LlamaCppPort

    port = llama.make_port(PortOptions(seed=0, backend=kw.pop("backend", None)))
    if kw:
        port = LlamaCppPort(port.model, reference=port.reference_path, **kw)
    return port


def test_zero_row_keep_through_seq_rm_fails_commit_equivalence(llama):
    """llama.cpp accepts a seq_rm of every row of the last decode but keeps the delta-net state from after it."""
    port = _port(llama, zero_row_keep="seq_rm")
    with pytest.raises(SpecVerifyFailure, match=r"commit path 'keep', k=0, .*kept 0 rows \(no row kept\): after the commit, "
                                                r"array 'layer\.0\.(conv|recurrent)'"):
        commit_equivalence(port, PROMPT, [0, 1, 3], profile(port.tolerance))


def test_the_shipped_port_passes_the_same_check(llama):
    port = _port(llama)
    report = commit_equivalence(port, PROMPT, [0, 1, 3, 7, 15], profile(port.tolerance))
    assert report.counts[("keep", 15, 0)] == 1


def test_keep_falls_back_to_restore_and_rerun_where_llama_cpp_refuses_the_rollback(llama):
    """With 2 recurrent snapshots llama.cpp refuses a rollback of more than 2 rows (seq_rm returns false, as on
    qwen3next always): the keep path then restores the saved state and re-runs the kept rows in one batch."""
    from pytest_specverify.adapters.llama_cpp.native import ContextSettings, Model
    from pytest_specverify.adapters.llama_cpp.port import LlamaCppPort

    shipped = _port(llama)
    port = LlamaCppPort(Model(shipped.model.path, ContextSettings(n_rs_seq=2)))
    st = port.new_state()
    port.prefill(st, PROMPT)
    port.verify(st, [1, 2, 3, 4], path="keep")
    assert not st.ctx.seq_rm(len(PROMPT) + 1)  # 3 rows back: refused, and the state is left as it was
    port.commit(st, 1, path="keep")
    assert port.state_arrays(st)["kv.positions"].tolist() == list(range(len(PROMPT) + 1))
    report = commit_equivalence(port, PROMPT, [0, 1, 3, 7], profile(port.tolerance))
    assert report.counts[("keep", 7, 1)] == 1


def test_flash_attention_drifts_where_the_default_does_not(llama):
    """llama.cpp's CPU flash attention computes with f16 K/V: at ~1000 tokens the decode and a one-pass prefill
    drift past logprob_max (checkpoint seed 3; measured 8e-4 to 1.2e-3 over checkpoint seeds 0 and 3 and four fills,
    against 2e-5 to 1.9e-4 with flash attention off, where the same check passes)."""
    for backend, fails in (("cpu", False), ("flash-attn", True)):
        port = llama.make_port(PortOptions(seed=3, backend=backend))
        run = lambda: long_context(port, PROMPT, length=1000, k=3, tol=profile(port.tolerance), seed=0)  # noqa: E731
        if fails:
            with pytest.raises(SpecVerifyFailure, match="at long context, one-pass prefill and step-by-step decode disagree"):
                run()
        else:
            assert run().metrics["max_abs_logprob_diff"] < 5e-4


def test_state_arrays_are_in_position_order_after_a_rollback(llama):
    port = _port(llama)
    st = port.new_state()
    port.prefill(st, PROMPT)
    port.verify(st, [1, 2, 3, 4], path="keep")
    port.commit(st, 2, path="keep")  # seq_rm frees two cells ...
    port.verify(st, [5, 6, 7], path="keep")  # ... that the next rows may reuse
    port.commit(st, 3, path="keep")
    arrays = port.state_arrays(st)
    assert arrays["kv.positions"].tolist() == list(range(len(PROMPT) + 5))
    assert arrays["recurrent.position"].tolist() == [len(PROMPT) + 4]


def test_the_blob_parser_refuses_a_short_or_long_blob(llama):
    from pytest_specverify.adapters.llama_cpp.blob import parse_seq_state
    from pytest_specverify.helpers.state_blob import BlobFormatError

    port = _port(llama)
    st = port.new_state()
    port.prefill(st, PROMPT)
    blob = st.ctx.save()
    assert set(parse_seq_state(blob, port.model.layout)) >= {"layer.0.conv", "layer.0.recurrent", "layer.3.keys"}
    with pytest.raises(BlobFormatError, match="only .* are left"):
        parse_seq_state(blob[:-4], port.model.layout)
    with pytest.raises(BlobFormatError, match="4 bytes left unread"):
        parse_seq_state(blob + b"\0\0\0\0", port.model.layout)


def test_the_port_own_replay_check_sees_a_stale_state(llama):
    port = _port(llama)
    st = port.new_state()
    port.prefill(st, PROMPT)
    port.verify(st, [1, 2, 3], path="keep")
    port.commit(st, 3, path="keep", replay_check=True)  # agrees
    port.verify(st, [4, 5], path="keep")
    st.ctx.decode([9], st.length)  # a stray row the replay does not have
    with pytest.raises(RuntimeError, match="replay check after keeping 2 rows"):
        port.commit(st, 2, path="keep", replay_check=True)


def test_close_returns_the_context_to_the_pool(llama):
    port = _port(llama)
    st = port.new_state()
    ctx = st.ctx
    port.close(st)
    assert port.new_state().ctx is ctx


# -- the GGUF writer: llama.cpp computes the model transformers computes ------------------------------
def _llama_logits(path, tokens):
    from pytest_specverify.adapters.llama_cpp.native import Model

    model = Model(path)
    ctx = model.acquire()
    try:
        return ctx.decode(tokens, 0)[0]
    finally:
        ctx.free()
        model.close()


def _hf_logits(folder, tokens):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    model = tf.AutoModelForCausalLM.from_pretrained(str(folder), dtype="float32").eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokens])).logits[0].numpy()


@pytest.mark.parametrize("variant", [None, "qwen3_next", "v-heads-grouped", "mrope-2-0-0", "norms-as-stored"])
def test_llama_cpp_agrees_with_transformers_on_the_converted_checkpoint(tmp_path, monkeypatch, variant):
    """Both archs agree; each broken conversion step (qwen35) moves llama.cpp's logits 10x past the agreement bound."""
    from pytest_specverify.helpers import gguf_tensors, gguf_writer
    from pytest_specverify.helpers.tiny_models import tiny_hf_folder

    model_type = "qwen3_next" if variant == "qwen3_next" else "qwen3_5"
    if variant == "v-heads-grouped":
        monkeypatch.setattr(gguf_tensors, "tiled_v_heads", lambda a, *args: a)
    elif variant == "mrope-2-0-0":
        monkeypatch.setattr(gguf_writer, "mrope_sections", lambda d: [d // 2, 0, 0, 0])
    elif variant == "norms-as-stored":
        real = gguf_tensors.convert_tensor
        monkeypatch.setattr(gguf_tensors, "convert_tensor", lambda n, a, c, arch: real(n, a, c, arch) if ".linear_attn." in n
                            else [(n, np.asarray(a, np.float32))])
    folder = tiny_hf_folder(tmp_path, seed=1, model_type=model_type)
    path = gguf_writer.write_gguf(folder, tmp_path / "model.gguf")
    diff = float(np.abs(_llama_logits(path, PROMPT) - _hf_logits(folder, PROMPT)).max())
    if variant in (None, "qwen3_next"):
        assert diff <= REFERENCE_AGREEMENT, diff
    else:
        assert diff > 10 * REFERENCE_AGREEMENT, (variant, diff)
