"""A port's optional max_k bounds the k of the checks that run its own draft, and only those; its optional
max_context bounds the long-context check (one shared rule for both)."""
import types

import pytest

from pytest_specverify.protocol import PortOptions, context_length, own_draft_k
from pytest_specverify.session import Settings


@pytest.mark.parametrize("limit,attr,lowest", [(own_draft_k, "max_k", 1), (context_length, "max_context", 2)])
def test_declared_limits_clamp_and_refuse_nonsense(limit, attr, lowest):
    assert limit(types.SimpleNamespace(), 320) == 320  # not declared: no limit
    assert limit(types.SimpleNamespace(**{attr: 200}), 320) == 200
    assert limit(types.SimpleNamespace(**{attr: 4096}), 320) == 320
    with pytest.raises(ValueError, match=f"{attr} = {lowest - 1}"):
        limit(types.SimpleNamespace(name="p", **{attr: lowest - 1}), 320)


def test_onebit_port_declares_its_draft_block_and_the_default_k_reaches_it():
    from pytest_specverify.adapters.onebit import make_port

    port = make_port(PortOptions())
    assert port.max_k == 7  # its synthetic DFlash draft has block size 8
    assert max(Settings.k_values) == 15 and own_draft_k(port, max(Settings.k_values)) == 7


def test_greedy_identity_fixture_uses_max_k_for_the_own_draft(pytester):
    pytester.makeconftest('''
import pytest
from pytest_specverify.adapters.onebit import OnebitPort, make_port
from pytest_specverify.protocol import PortOptions

class Capped(OnebitPort):
    max_k = 2  # pretend the draft proposes at most 2

@pytest.fixture(scope="session")
def specverify_port():
    port = make_port(PortOptions())
    port.__class__ = Capped
    return port
''')
    pytester.makepyfile('''
def test_k(specverify, specverify_port):
    ids = specverify_port.encode("The capital of France is")
    seen = []
    inner = specverify_port.speculative_generate
    def spy(*a, **kw):
        seen.append(kw["k"])
        return inner(*a, **kw)
    specverify_port.speculative_generate = spy
    specverify.greedy_identity(ids)
    specverify.draft_consistency(ids)
    assert set(seen) == {2}, seen
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "--specverify-k", "0,1,5")
    result.assert_outcomes(passed=1)
