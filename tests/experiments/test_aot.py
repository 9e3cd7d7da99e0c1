"""Ahead-of-time checks of the presets and of ``model.hf_path`` loading, on CPU fake devices.

* The GPU and TPU presets' GRPO train step lowers (and, for the GPU preset, compiles) for the
  target mesh with the real parameter shapes: the learner is ``Learner.abstract`` (no weights);
  XLA reports per-device memory. conftest gives 8 fake devices; the 16-chip TPU mesh runs in a
  subprocess with 16.
* A preset's documented ``--config.model.hf_path=...`` command loads the checkpoint with the
  config's dtypes and runtime knobs straight into the learner's shardings, and the abstract
  learner built from the same config has exactly the real one's layout (a tiny HF dir on 4
  fake devices stands in for the 4B checkpoint).
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from experiments.configs import gpu8_qwen35_4b_dbbench
from harness_jax.train import spec


@pytest.mark.slow
def test_gpu_preset_train_step_compiles_on_4_fake_devices():
    from harness_jax.train import aot

    c = spec.resolve(gpu8_qwen35_4b_dbbench.get_config(), num_devices=4, check_paths=False)
    rep = aot.lower_train_step(c, seq_len=256, devices=jax.devices()[:4], compile=True)
    assert rep.mesh_shape == {"data": 1, "fsdp": 4, "tensor": 1, "expert": 1}
    assert 3.5e9 < rep.num_params < 5.0e9
    assert rep.rows == 32                    # one mini-batch: 8 micro-batches x 4 batch devices
    # arguments = params + Adam moments, FSDP-sharded 4 ways (fp32: 12 bytes per parameter)
    arg = rep.per_device_bytes["argument"]
    assert 0.8 * 12 * rep.num_params / 4 < arg < 1.3 * 12 * rep.num_params / 4, rep
    print(json.dumps(rep.as_dict()))


@pytest.mark.slow
def test_tpu_preset_train_step_lowers_on_16_fake_devices():
    from tests.experiments.aot_lowering import lower_in_subprocess

    rep = lower_in_subprocess("experiments.configs.tpu_qwen35_9b", "", 16)
    assert rep["mesh_shape"] == {"data": 1, "fsdp": 16, "tensor": 1, "expert": 1}
    assert 8.5e9 < rep["num_params"] < 9.5e9          # Qwen3.5-9B: 8.95e9


def test_hf_path_loads_with_the_config_dtypes_into_the_learner_shardings(tiny_hf_dense_dir):
    """Defect: ``model.hf_path`` loading dropped remat, scan_layers, param_dtype and the mesh (bf16
    master weights, no remat, everything on one device)."""
    from flax import nnx

    from harness_jax.rl import policy
    from harness_jax.rl.learner import Learner
    from harness_jax.train import aot

    c = gpu8_qwen35_4b_dbbench.get_config()          # bf16 compute, fp32 master, remat, scan, fsdp=4
    c.model.hf_path = tiny_hf_dense_dir
    c.rl.micro_batches, c.rl.mini_batches, c.rl.logit_chunk = 1, 1, 0
    run = spec.resolve(c, num_devices=4)
    devices = jax.devices()[:4]
    mesh, rules = policy.make_mesh(run.mesh, devices), policy.mesh_rules(run.mesh)
    model = policy.build_model(run.model, mesh, rules)
    assert model.config.remat == "block" and model.config.scan_layers
    assert model.model.cycles[0].linear_attn.in_proj_qkv.weight.shape[0] == 2     # 2 scanned cycles
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}   # fp32 master weights
    assert model.dtype == jnp.bfloat16                                              # bf16 compute
    learner = Learner(model, run.learner, mesh=mesh, rules=rules)
    for x, s in zip(jax.tree.leaves(params), jax.tree.leaves(learner.param_sharding)):
        assert x.sharding == s                     # loaded straight into the learner's layout
    emb = params["model"]["embed_tokens"]["weight"]
    assert emb.sharding.spec == P(None, "fsdp") and emb.addressable_shards[0].data.shape == (512, 16)
    # the weights are the checkpoint's
    from harness_jax.models import qwen3_5
    ref = qwen3_5.load_hf(tiny_hf_dense_dir)
    np.testing.assert_array_equal(np.asarray(emb), np.asarray(ref.model.embed_tokens.weight[...]))
    # the AOT path builds the same learner without weights from the same config
    ab, _ = aot.abstract_learner(run, devices)
    for x, y in zip(jax.tree.leaves(ab.state), jax.tree.leaves(learner.state)):
        assert (x.shape, x.dtype, x.sharding) == (y.shape, y.dtype, y.sharding)
    rep = aot.lower_train_step(run, seq_len=64, devices=devices, compile=False)
    assert rep.num_params == learner.num_params and rep.rows == 4
