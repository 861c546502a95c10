"""The specverify battery (shipped in the plugin), run on every port of conftest.py."""
from pytest_specverify.battery import *  # noqa: F401,F403
