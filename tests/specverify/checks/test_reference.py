"""The reference-agreement check: a port that computes the model it claims passes (the transformers adapter
on its own checkpoint, the onebit adapter on the reference and host-int backends); a port whose rotary, norm
or gate is 1e-4 off (relative) fails, though every check that compares the port with itself passes it."""
import pytest

from pytest_specverify import NotSupported, SpecVerifyFailure, profile
from pytest_specverify.checks import commit_equivalence
from pytest_specverify.protocol import PortOptions
from pytest_specverify.reprefill import decode_prefill_consistency
from pytest_specverify.session import Settings
from pytest_specverify.verifier import Verifier
from tests.specverify.ports import reference_mutants

pytest.importorskip("transformers")


def _verifier(port):
    return Verifier(port, profile(port.tolerance), Settings(num_prompts=4))


@pytest.mark.parametrize("model", ["tiny-qwen3_5", "tiny-qwen3_next"])
def test_the_transformers_adapter_agrees_with_the_engine_on_its_own_checkpoint(model):
    from pytest_specverify.adapters.transformers import make_port

    report = _verifier(make_port(PortOptions(model=model))).reference()
    assert report.counts["prompts"] == 4 and report.counts["rows"] > 40, report.counts
    assert 0 < report.metrics["max_abs_logit_diff"] < 1.5e-4, report.metrics


@pytest.mark.parametrize("backend", ["reference", "host-int"])
def test_the_onebit_adapter_agrees_with_its_checkpoint(backend):
    from pytest_specverify.adapters.onebit import make_port

    port = make_port(PortOptions(backend=backend))
    report = _verifier(port).reference()
    if backend == "reference":  # the same engine on the same backend: bitwise
        assert report.metrics["max_abs_logit_diff"] == 0.0, report.metrics
    else:
        assert report.metrics["max_abs_logit_diff"] > 0.0, report.metrics


@pytest.mark.parametrize("model", ["tiny-qwen3_5", "tiny-qwen3_next"])
@pytest.mark.parametrize("mutant", sorted(reference_mutants.MUTANTS))
def test_a_port_one_part_off_fails_the_reference_check(mutant, model):
    port = reference_mutants.build(mutant, model)
    with pytest.raises(SpecVerifyFailure) as info:
        _verifier(port).reference()
    text = str(info.value)
    assert "the port's logits differ from the float32 reference model" in text, text
    assert "exceeds the declared bound" in text and "declare a profile if your engine rounds this way" in text, text


@pytest.mark.parametrize("mutant", sorted(reference_mutants.MUTANTS))
def test_the_checks_that_compare_the_port_with_itself_pass_it(mutant):
    port = reference_mutants.build(mutant)
    ids = port.encode("The capital of France is")
    commit_equivalence(port, ids, (0, 3), profile(port.tolerance))
    decode_prefill_consistency(port, ids, max_new_tokens=8, tol=profile(port.tolerance))


def test_no_reference_is_a_skip_that_says_how_to_give_one():
    from tests.specverify.ports.qwen3_numpy import make_port

    with pytest.raises(NotSupported, match="pass --specverify-reference PATH"):
        _verifier(make_port(PortOptions())).reference()


def test_a_reference_of_another_vocabulary_fails():
    from pytest_specverify.adapters.onebit import make_port
    from pytest_specverify.adapters.transformers import make_port as hf_port

    port = make_port(PortOptions())
    with pytest.raises(SpecVerifyFailure, match="vocabulary"):
        _verifier(port).reference(path=hf_port(PortOptions()).reference_path)


def test_the_option_names_the_reference_for_the_battery(sv_pytester, tmp_path):
    """--specverify-reference reaches the battery's test; a checkpoint of another model fails it."""
    from onebit_engine.hybrid.synthetic import random_weights, tiny_config, write_checkpoint
    from pytest_specverify.adapters.onebit import TINY

    cfg = tiny_config(**TINY)
    other = write_checkpoint(tmp_path / "other", cfg, random_weights(cfg, 7))  # same shapes, other weights
    sv_pytester.makepyfile("from pytest_specverify.battery import test_reference_agreement  # noqa: F401\n")
    result = sv_pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specverify-reference", str(other),
                                              "--specverify-num-prompts", "2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*the port's logits differ from the float32 reference model ({other})*"])
