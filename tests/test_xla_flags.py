"""Per-platform XLA flags: names the XLA binaries know (an unknown flag aborts XLA at start-up),
merging that keeps the user's own values, and the launch path that sets them."""
import mmap
import os

import pytest

from harness_jax import xla_flags


def _binary_has(path, names):
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return [n for n in names if m.find(n.encode() + b"\0") < 0]


def test_gpu_flag_names_are_xla_flags():
    import jaxlib
    lib = os.path.join(os.path.dirname(jaxlib.__file__), "libjax_common.so")
    names = [f[2:].split("=")[0] for f in xla_flags.GPU_FLAGS]
    assert _binary_has(lib, names) == []


def test_tpu_flag_names_are_libtpu_flags():
    libtpu = pytest.importorskip("libtpu", reason="libtpu not installed (pip install 'jax[tpu]')")
    lib = os.path.join(os.path.dirname(libtpu.__file__), "libtpu.so")
    names = [f[2:].split("=")[0] for f in xla_flags.TPU_FLAGS]
    assert _binary_has(lib, names) == []


def test_apply_adds_flags_once_and_keeps_the_users_values():
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8 --xla_gpu_enable_latency_hiding_scheduler=false"}
    got = xla_flags.apply("gpu", env)
    flags = env["XLA_FLAGS"].split()
    assert got == {"XLA_FLAGS": env["XLA_FLAGS"]}
    assert "--xla_force_host_platform_device_count=8" in flags
    assert "--xla_gpu_enable_latency_hiding_scheduler=false" in flags        # the user's value wins
    assert "--xla_gpu_enable_latency_hiding_scheduler=true" not in flags
    assert "--xla_gpu_enable_pipelined_all_gather=true" in flags
    xla_flags.apply("gpu", env)
    assert env["XLA_FLAGS"].split() == flags                                 # idempotent
    env = {}
    xla_flags.apply("tpu", env)
    assert set(env) == {"LIBTPU_INIT_ARGS"} and "--xla_tpu_enable_latency_hiding_scheduler=true" in env["LIBTPU_INIT_ARGS"]
    assert xla_flags.apply("cpu", env) == {}
    with pytest.raises(ValueError, match="platform"):
        xla_flags.apply("npu", env)


def test_launchers_pass_the_configs_platform():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("train.py", "engineer.py"):
        src = open(os.path.join(root, "launch", name)).read()
        assert "distributed.initialize(platform=_CONFIG.value.mesh.platform)" in src, name
