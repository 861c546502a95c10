"""The specverify battery (shipped in the plugin) on the llama.cpp adapter."""
from pytest_specverify.battery import *  # noqa: F401,F403
