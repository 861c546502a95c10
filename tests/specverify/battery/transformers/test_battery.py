"""The specverify battery (shipped in the plugin) on the transformers adapter."""
from pytest_specverify.battery import *  # noqa: F401,F403
