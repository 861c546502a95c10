"""pytester needs ``pytest_plugins = ["pytester"]`` in the top-level tests/conftest.py (pytest refuses it
here). Until that line is there, the plugin tests that need pytester skip and say so.

``sv_pytester`` is a project that opts in to specverify (``-o specverify=true`` through PYTEST_ADDOPTS, so a
test's own ini file still counts): the plugin acts in every test, as in this repository. ``guest_pytester``
is a project that does not: the plugin acts only where a test uses it (test_good_guest.py)."""
import pytest


def _pytester(request):
    if not request.config.pluginmanager.hasplugin("pytester"):
        pytest.skip("pytester is not enabled: add pytest_plugins = ['pytester'] to tests/conftest.py (or run with -p pytester)")
    return request.getfixturevalue("pytester")


@pytest.fixture
def sv_pytester(request, monkeypatch):
    pytester = _pytester(request)  # pytester clears PYTEST_ADDOPTS; the opt-in is set after it
    monkeypatch.setenv("PYTEST_ADDOPTS", "-o specverify=true")
    return pytester


@pytest.fixture
def guest_pytester(request):
    return _pytester(request)
