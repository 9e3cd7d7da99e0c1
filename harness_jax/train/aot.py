"""Ahead-of-time lowering of the GRPO train step for a preset's target mesh, without weights.

The GPU/TPU presets cannot run here, but their train step can be traced, lowered and compiled
for the target mesh shape on CPU fake devices (``--xla_force_host_platform_device_count``) with
the real parameter shapes: the model is built with ``nnx.eval_shape`` (no memory), the
learner's own step function is jitted with the learner's shardings and lowered on
``ShapeDtypeStruct`` inputs. ``compile()`` then reports XLA's per-device memory (arguments,
outputs, temporaries), which is how an OOM shows up before accelerator time is spent. CPU
compilation uses CPU layouts and fusion, so the figures are indicative for GPU/TPU.

    python -m harness_jax.train.aot --config=experiments/configs/tpu_qwen35_9b.py --seq_len=2048
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass
class AotReport:
    mesh_shape: dict
    num_params: int
    rows: int
    seq_len: int
    lower_s: float
    compile_s: float
    per_device_bytes: dict          # argument / output / temp / generated_code / total (bytes)
    analytic_state_bytes_per_device: float

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def abstract_learner(config, devices=None):
    """A ``Learner`` whose parameters are ShapeDtypeStructs with the target shardings (no memory)."""
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec as P

    from harness_jax.models import qwen3_5
    from harness_jax.rl import learner as L
    from harness_jax.train import builders

    cfg = builders.model_config(config)
    dtype, pdtype = builders.DTYPES[config.model.dtype], builders.DTYPES[config.model.param_dtype]
    model = nnx.eval_shape(lambda: qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0), dtype=dtype,
                                                               param_dtype=pdtype))
    mesh = builders.make_mesh(config, devices)
    rules = builders.mesh_rules(config)
    lcfg = builders.learner_config(config, "grpo")

    ln = L.Learner.__new__(L.Learner)
    ln.cfg, ln.mesh, ln.rules = lcfg, mesh, rules
    ln.graphdef, params_state, ln.rest_state = nnx.split(model, nnx.Param, ...)
    ln._abstract_params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params_state)
    ln.param_sharding = L.param_shardings(params_state, mesh, rules)
    ln.tx, ln.schedule = L.make_optimizer(lcfg.opt)
    ln.replicated = NamedSharding(mesh, P())
    ln.batch_axes = (L.batch_axes(mesh, rules) if hasattr(L, "batch_axes")
                     else tuple(a for a in ("data", "fsdp") if a in mesh.shape))
    ln.batch_sharding = NamedSharding(mesh, P(ln.batch_axes or None, None))
    ln._rest_sharding = jax.tree.map(lambda _: ln.replicated, nnx.to_pure_dict(ln.rest_state))
    # non-parameter variables are small buffers: concrete zeros are enough to trace
    ln.rest = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), nnx.to_pure_dict(ln.rest_state))
    ln.flops_per_token = getattr(cfg, "flops_per_token", None)
    ln.ref_params = None
    ln.policy_version = 0
    params_abs = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                              nnx.to_pure_dict(params_state), ln.param_sharding)
    ln.state_sharding = ln._state_shardings(params_abs)
    rng_abs = jax.ShapeDtypeStruct((2,), jnp.uint32)
    state_shapes = jax.eval_shape(ln._init_state, params_abs, rng_abs)
    ln.state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                            state_shapes, ln.state_sharding)
    return ln, cfg


def lower_train_step(config, *, seq_len: Optional[int] = None, rows: Optional[int] = None,
                     devices=None, compile: bool = True) -> AotReport:
    """Lowers (and compiles) the learner's train step for ``config``'s mesh; returns the report."""
    ln, cfg = abstract_learner(config, devices)
    T = int(seq_len or config.rl.pack_len)
    axes = ln.batch_axes if isinstance(ln.batch_axes, (tuple, list)) else (ln.batch_axes,)
    n_batch = math.prod(ln.mesh.shape[a] for a in axes if a)
    R = int(rows or n_batch * ln.cfg.num_micro_batches)
    bs = ln.batch_sharding
    batch = {k: jax.ShapeDtypeStruct((R, T), jnp.int32 if k in ("input_ids", "target_ids", "segment_ids", "positions")
                                     else jnp.float32, sharding=bs)
             for k in ("input_ids", "target_ids", "loss_mask", "rollout_logp", "old_logp", "advantages",
                       "segment_ids", "positions")}
    step = jax.jit(ln._step, in_shardings=(ln.state_sharding, ln.batch_sharding),
                   out_shardings=(ln.state_sharding, ln.replicated), donate_argnums=(0,))
    t0 = time.perf_counter()
    lowered = step.lower(ln.state, batch)
    lower_s = time.perf_counter() - t0
    n_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(ln.state["params"])))
    per_dev = {}
    compile_s = 0.0
    if compile:
        t0 = time.perf_counter()
        compiled = lowered.compile()
        compile_s = time.perf_counter() - t0
        ma = compiled.memory_analysis()
        if ma is not None:
            for name in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes",
                         "generated_code_size_in_bytes", "alias_size_in_bytes"):
                per_dev[name.replace("_size_in_bytes", "")] = int(getattr(ma, name, 0) or 0)
            per_dev["total"] = (per_dev.get("argument", 0) + per_dev.get("output", 0)
                                + per_dev.get("temp", 0) - per_dev.get("alias", 0))
    # fp32 params + fp32 grads (accumulator) + two Adam moments, sharded over the mesh
    pbytes = np.dtype(builders_dtype(config.model.param_dtype)).itemsize
    analytic = n_params * (pbytes + 4 + 8) / ln.mesh.size
    return AotReport(mesh_shape=dict(ln.mesh.shape), num_params=n_params, rows=R, seq_len=T,
                     lower_s=lower_s, compile_s=compile_s, per_device_bytes=per_dev,
                     analytic_state_bytes_per_device=float(analytic))


def builders_dtype(name: str):
    return {"float32": np.float32, "bfloat16": jnp.bfloat16}[name]


def main(argv=None):  # pragma: no cover - thin CLI
    import json
    import sys

    from absl import app, flags
    from ml_collections import config_flags

    cfg_flag = config_flags.DEFINE_config_file("config", None, "experiment config", lock_config=True)
    seq = flags.DEFINE_integer("seq_len", 0, "packed row length (0 = config.rl.pack_len)")
    no_compile = flags.DEFINE_bool("lower_only", False, "skip compile (no memory figures)")

    def run(_):
        c = cfg_flag.value
        n = c.mesh.num_devices if c.mesh.num_devices > 0 else jax.device_count()
        if jax.device_count() < n:
            sys.exit(f"need {n} devices; run with XLA_FLAGS=--xla_force_host_platform_device_count={n} "
                     "JAX_PLATFORMS=cpu")
        rep = lower_train_step(c, seq_len=seq.value or None, devices=jax.devices()[:n],
                               compile=not no_compile.value)
        print(json.dumps(rep.as_dict(), indent=1))

    app.run(run, argv)


if __name__ == "__main__":  # pragma: no cover
    main()
