"""Ahead-of-time lowering of the GRPO train step for a preset's target mesh, without weights.

The GPU/TPU presets cannot run here, but their train step can be traced, lowered and compiled
for the target mesh shape on CPU fake devices (``--xla_force_host_platform_device_count``) with
the real parameter shapes: the model is built with ``nnx.eval_shape`` (no memory) and
``Learner.abstract`` builds the learner's own shardings and jitted step from it; the step is
lowered on ``ShapeDtypeStruct`` inputs (``Learner.lower_train_step``). ``compile()`` then reports XLA's per-device memory (arguments,
outputs, temporaries), which is how an OOM shows up before accelerator time is spent. CPU
compilation uses CPU layouts and fusion, so the figures are indicative for GPU/TPU.

    python -m harness_jax.train.aot --config=experiments/configs/tpu_qwen35_9b.py --seq_len=2048
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from harness_jax.rl import policy
from harness_jax.rl.learner import Learner
from harness_jax.train import spec as spec_lib


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


def abstract_learner(run, devices=None):
    """The run's learner without weights (``Learner.abstract``): the real shardings and jitted
    step, ``state`` as sharded ShapeDtypeStructs. ``run``: ``train.spec.RunSpec``. Returns
    ``(learner, model_config)``."""
    cfg = policy.model_config(run.model)
    mesh = policy.make_mesh(run.mesh, devices)
    ln = Learner.abstract(policy.abstract_model(run.model, mesh, cfg), run.learner, mesh=mesh,
                          rules=policy.mesh_rules(run.mesh))
    return ln, cfg


def lower_train_step(run, *, seq_len: Optional[int] = None, rows: Optional[int] = None,
                     devices=None, compile: bool = True) -> AotReport:
    """Lowers (and compiles) the learner's train step for the run's mesh; returns the report."""
    ln, _ = abstract_learner(run, devices)
    T = int(seq_len or run.rl.pack_len)
    R = int(rows or ln.row_multiple // ln.cfg.num_mini_batches)     # one mini-batch
    t0 = time.perf_counter()
    lowered = ln.lower_train_step(R, T)
    lower_s = time.perf_counter() - t0
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
    # params + fp32 grads (accumulator) + two fp32 Adam moments, sharded over the mesh
    pbytes = np.dtype(jnp.dtype(run.model.param_dtype)).itemsize
    analytic = ln.num_params * (pbytes + 4 + 8) / ln.mesh.size
    return AotReport(mesh_shape=dict(ln.mesh.shape), num_params=ln.num_params, rows=R, seq_len=T,
                     lower_s=lower_s, compile_s=compile_s, per_device_bytes=per_dev,
                     analytic_state_bytes_per_device=float(analytic))


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
        rep = lower_train_step(spec_lib.resolve(c, num_devices=n), seq_len=seq.value or None,
                               devices=jax.devices()[:n], compile=not no_compile.value)
        print(json.dumps(rep.as_dict(), indent=1))

    app.run(run, argv)


if __name__ == "__main__":  # pragma: no cover
    main()
