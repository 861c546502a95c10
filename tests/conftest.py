pytest_plugins = ["pytester"]

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("thorough", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_specverify_device_status(config):
    """The engine's full NPU probe (node, amdxdna driver, access, pyxrt) feeds the plugin's device marker."""
    from onebit_engine.npu import detect_npu
    from pytest_specverify.device import DeviceStatus

    status = detect_npu(open_device=False)
    return DeviceStatus(status.present, status.reason)
