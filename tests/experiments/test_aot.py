"""The GPU and TPU presets' GRPO train step lowers (and, for the GPU preset, compiles) for the
target mesh on CPU fake devices with the real parameter shapes: parameters are never allocated
(``nnx.eval_shape``); XLA reports per-device memory. conftest gives 8 fake devices; the
16-chip TPU mesh runs in a subprocess with 16."""
import json
import os
import subprocess
import sys

import jax
import pytest

from experiments.configs import gpu8_qwen35_4b_dbbench
from harness_jax import config_validation as cv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

@pytest.mark.slow
def test_gpu_preset_train_step_compiles_on_4_fake_devices():
    from harness_jax.train import aot

    c = gpu8_qwen35_4b_dbbench.get_config()
    cv.validate(c, num_devices=4)
    rep = aot.lower_train_step(c, seq_len=256, devices=jax.devices()[:4], compile=True)
    assert rep.mesh_shape == {"data": 1, "fsdp": 4, "tensor": 1, "expert": 1}
    assert 3.5e9 < rep.num_params < 5.0e9
    # arguments = params + Adam moments, FSDP-sharded 4 ways (fp32: 12 bytes per parameter)
    arg = rep.per_device_bytes["argument"]
    assert 0.8 * 12 * rep.num_params / 4 < arg < 1.3 * 12 * rep.num_params / 4, rep
    print(json.dumps(rep.as_dict()))


def test_tpu_preset_train_step_lowers_on_16_fake_devices():
    code = (
        "import json, jax; from experiments.configs import tpu_qwen35_9b as t;"
        "from harness_jax import config_validation as cv; from harness_jax.train import aot;"
        "c = t.get_config(); cv.validate(c, num_devices=16);"
        "r = aot.lower_train_step(c, seq_len=256, devices=jax.devices()[:16], compile=False);"
        "print('REPORT', json.dumps(r.as_dict()))")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS="--xla_force_host_platform_device_count=16")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    rep = json.loads(out.stdout.split("REPORT", 1)[1])
    assert rep["mesh_shape"] == {"data": 1, "fsdp": 16, "tensor": 1, "expert": 1}
    assert 8.5e9 < rep["num_params"] < 9.5e9          # Qwen3.5-9B: 8.95e9
