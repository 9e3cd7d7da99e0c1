"""Lowers a preset's train step on N fake CPU devices in a fresh interpreter (the device count
is fixed at JAX start-up, and the test session runs with 8) and returns ``aot``'s report."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def lower_in_subprocess(module: str, config_args: str, num_devices: int) -> dict:
    """``module.get_config(config_args)`` resolved for and lowered on ``num_devices`` devices."""
    code = (
        f"import json, jax; import {module} as t;"
        "from harness_jax.train import aot, spec;"
        f"c = spec.resolve(t.get_config({config_args}), num_devices={num_devices}, check_paths=False);"
        f"r = aot.lower_train_step(c, seq_len=256, devices=jax.devices()[:{num_devices}], compile=False);"
        "print('REPORT', json.dumps(r.as_dict()))")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS=f"--xla_force_host_platform_device_count={num_devices}")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.split("REPORT", 1)[1])
