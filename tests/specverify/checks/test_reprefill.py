"""decode_prefill_consistency on the engine's own port: the engine claims more than the profile asks
(forward(T) == T single steps bit for bit), so here the check's report must say bitwise."""
import pytest

from pytest_specverify import profile
from pytest_specverify.adapters.onebit import make_port
from pytest_specverify.protocol import PortOptions
from pytest_specverify.reprefill import decode_prefill_consistency


@pytest.mark.parametrize("backend", ["reference", "host-int"])
def test_onebit_prefill_equals_its_decode_bitwise(backend):
    port = make_port(PortOptions(backend=backend))
    for seed, temperature in ((0, 1.0), (1, 2.0)):
        r = decode_prefill_consistency(port, port.encode("Once upon a time"), max_new_tokens=20, tol=profile("exact"),
                                       seed=seed, temperature=temperature)
        assert r.metrics["bitwise"] and r.metrics["k3_kl"] == 0.0 and r.metrics["tokens"] == 20


def test_bad_arguments_are_refused():
    port = make_port(PortOptions())
    with pytest.raises(ValueError, match="max_new_tokens >= 1 and temperature > 0"):
        decode_prefill_consistency(port, port.encode("ab"), max_new_tokens=0, tol=profile("exact"))
    with pytest.raises(ValueError, match="temperature > 0"):
        decode_prefill_consistency(port, port.encode("ab"), max_new_tokens=4, tol=profile("exact"), temperature=0.0)
