"""The specverify battery (shipped in the plugin) on the MoE ports of conftest.py."""
from pytest_specverify.battery import *  # noqa: F401,F403
