"""The specverify battery (shipped in the plugin) on the mlx-lm adapter."""
from pytest_specverify.battery import *  # noqa: F401,F403
