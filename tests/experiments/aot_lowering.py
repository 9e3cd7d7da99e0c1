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
    return _report(code, num_devices, 600)


def budgets_in_subprocess(presets, num_devices: int, timeout: int = 1800) -> dict:
    """``aot.budget`` of every ``(module, config_arg)`` in ``presets`` (each compiled once, at its
    real pack_len, full depth) in one fresh interpreter with ``num_devices`` fake devices:
    ``{module: BudgetReport.as_dict()}``."""
    code = (
        "import json, importlib, jax; from harness_jax.train import aot, spec; out = {}\n"
        f"for mod, arg in {list(presets)!r}:\n"
        "    m = importlib.import_module(mod); c = m.get_config(arg) if arg else m.get_config()\n"
        f"    run = spec.resolve(c, num_devices={num_devices})\n"
        f"    out[mod] = aot.budget(run, devices=jax.devices()[:{num_devices}]).as_dict()\n"
        "print('REPORT', json.dumps(out))")
    return _report(code, num_devices, timeout)


def _report(code: str, num_devices: int, timeout: int):
    """Runs ``code`` in a fresh interpreter with ``num_devices`` fake CPU devices and returns the
    JSON it prints after ``REPORT``."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS=f"--xla_force_host_platform_device_count={num_devices}")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.split("REPORT", 1)[1])
