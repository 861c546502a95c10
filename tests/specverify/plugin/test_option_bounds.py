"""Every count the plugin takes is bounded: an option that would make a check vacuous (0 prompts, 0
samples) or unbounded (k = 1000) is a usage error naming the option and its range, before any test runs."""
import pytest


@pytest.mark.parametrize("argv, words", [
    (["--specverify-k=1000"], ["--specverify-k", "0..63"]),
    (["--specverify-k=1,-2"], ["--specverify-k"]),
    (["--specverify-k=a,b"], ["--specverify-k", "comma-separated"]),
    (["--specverify-k=1,,2"], ["--specverify-k", "empty entry"]),  # was read as 1,2
    (["--specverify-seed=-1"], ["--specverify-seed=-1", "0..", "non-negative"]),  # was numpy's error inside a check
    (["--specverify-num-prompts=0"], ["--specverify-num-prompts=0", "1..1000"]),
    (["--specverify-samples=0"], ["--specverify-samples=0", "100..1000000"]),
    (["--specverify-samples=ten"], ["--specverify-samples", "integer"]),
    (["--specverify-row-set=100000"], ["--specverify-row-set", "1..64"]),
    (["--specverify-context=0"], ["--specverify-context"]),
    (["--specverify-profile=bogus"], ["--specverify-profile", "'bogus'", "fp32"]),
    (["--specverify-port=nosuch"], ["--specverify-port", "'nosuch'", "onebit"]),
])
def test_out_of_range_option_is_a_usage_error(sv_pytester, argv, words):
    sv_pytester.makepyfile("def test_never():\n    raise AssertionError('ran despite a bad option')\n")
    result = sv_pytester.runpytest_subprocess(*argv, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    err = result.stderr.str()
    for w in words:
        assert w in err, err
    assert "Traceback" not in err and "ran despite" not in result.stdout.str()
