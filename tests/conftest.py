"""Test-wide set-up: 8 fake CPU devices so every sharding test runs here.

XLA_FLAGS must be set before jax is imported anywhere, which is why this happens at the top of
the root conftest (pytest imports it before any test module).
"""
import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", False)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a few minutes on 2 cores; still part of CI")
