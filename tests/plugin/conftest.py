"""pytester needs ``pytest_plugins = ["pytester"]`` in the top-level tests/conftest.py (pytest refuses it
here). Until that line is there, the plugin tests that need pytester skip and say so."""
import pytest


@pytest.fixture
def sv_pytester(request):
    if not request.config.pluginmanager.hasplugin("pytester"):
        pytest.skip("pytester is not enabled: add pytest_plugins = ['pytester'] to tests/conftest.py (or run with -p pytester)")
    return request.getfixturevalue("pytester")
