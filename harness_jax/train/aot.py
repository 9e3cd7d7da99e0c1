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
import glob
import os
import re
import shutil
import tempfile
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from harness_jax import compile_cache
from harness_jax import sharding as shd
from harness_jax.rl import policy
from harness_jax.rl.learner import Learner
from harness_jax.train import spec as spec_lib
from harness_jax.train.builders import CHIP_HBM   # HBM per chip (bytes), by mesh.chip


# Pallas kernels compile on XLA:CPU only interpreted (a loop nest with nothing of the kernel's
# memory behaviour); CPU compiles use the memory-efficient XLA kernel in their place, which like
# them holds nothing T x S.
CPU_STAND_IN = {"splash": "xla", "pallas_gpu": "xla"}


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
    ``(learner, model_config)``. On CPU devices a Pallas attention kernel is replaced by its
    memory-class stand-in (``CPU_STAND_IN``: XLA:CPU compiles Pallas only interpreted, a loop
    nest with nothing of the kernel's memory behaviour or cost)."""
    cfg = policy.model_config(run.model)
    mesh = policy.make_mesh(run.mesh, devices)
    if mesh.devices.flat[0].platform == "cpu":
        cfg = cfg.replace(attention_impl=CPU_STAND_IN.get(cfg.attention_impl, cfg.attention_impl))
    rules = policy.mesh_rules(run.mesh)
    ln = Learner.abstract(policy.abstract_model(run.model, mesh, cfg, rules), run.learner, mesh=mesh,
                          rules=rules, flops_per_token=cfg.flops_per_token)
    return ln, cfg


def train_step_key(run) -> tuple:
    """What decides a run's compiled train step, and so its AOT budget: the model section, the mesh,
    the learner config and the pack length (rollout, method and environment settings do not enter
    it). Two presets with equal keys share one budget compile. ``run``: ``train.spec.RunSpec``."""
    return (dataclasses.asdict(run.model), dataclasses.asdict(run.mesh), dataclasses.asdict(run.learner),
            int(run.rl.pack_len))


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


# ---------------------------------------------------------------------------------------------
# memory budgets at a preset's real shapes
# ---------------------------------------------------------------------------------------------
HEADROOM = 0.10          # kept free for the runtime, fragmentation and collectives' buffers

@dataclasses.dataclass
class BudgetReport:
    chip: str
    hbm_bytes: float
    mesh_shape: dict
    seq_len: int
    rows: int
    num_params: int
    layers: int
    attention: str                  # the implementation compiled (CPU stand-in where needed)
    remat: str
    compile_s: float
    per_device_bytes: dict          # argument / output / alias / temp / peak (bytes)
    txs_buffers: list               # HLO shapes holding T x S elements (must be empty at T >= 8k)
    gather_dtypes: dict             # weight-sized all-gathers after SPMD partitioning: {dtype: count} (the FSDP
                                    # weight gathers; without FSDP axes, tensor-parallel activations and gradients)
    whole_weight_gathers: dict      # all-gathers whose result has a sharded weight's whole shape: {dtype: count}
    weight_reduce_dtypes: dict      # all-reduces / reduce-scatters of weight-shaped gradients: {dtype: count}
    fsdp_devices: int = 1           # devices the weights' FSDP shards span (1: weights are never FSDP-gathered)

    @property
    def peak(self) -> float:
        return float(self.per_device_bytes["peak"])

    @property
    def budget(self) -> float:
        return self.hbm_bytes * (1.0 - HEADROOM)

    def fits(self) -> bool:
        return self.peak <= self.budget

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(peak_gb=self.peak / 1e9, budget_gb=self.budget / 1e9, fits=self.fits())
        return d


def _hlo_shapes(text: str):
    for m in re.finditer(r"\b(pred|s8|s32|u32|bf16|f16|f32)\[([\d,]+)\]", text):
        yield m.group(1), tuple(int(x) for x in m.group(2).split(","))


def txs_buffers(hlo_text: str, T: int, widths=()) -> list:
    """Shapes in ``hlo_text`` with two dimensions >= T (a ``T x S`` buffer at S = T). A rank <= 3
    shape ``[rows, T, w]`` whose ``w`` is one of the model's ``widths`` (e.g. the Gated DeltaNet
    conv channels, 8192 for Qwen3.5-9B, equal to T at 8k) is an activation, not T x S."""
    found = set()
    for dt, shape in _hlo_shapes(hlo_text):
        big = [d for d in shape if d >= T]
        if len(big) < 2:
            continue
        if len(shape) <= 3 and len(big) == 2 and shape[-1] in widths and shape[-2] >= T:
            continue
        found.add(f"{dt}[{','.join(map(str, shape))}]")
    return sorted(found)


_FLOATS = ("f32", "bf16", "f16")     # weight collectives (token-id gathers are s32)


def _collectives(text: str, op: str, min_elems: int, shapes=None) -> dict:
    """``{dtype: count}`` of the ``op`` results in ``text`` with >= ``min_elems`` elements (and,
    with ``shapes``, whose shape less leading 1s is one of them)."""
    out: dict = {}
    for dt, dims in re.findall(r"= (\w+)\[([\d,]*)\][^ ]* " + op + r"\(", text):
        shape = tuple(int(x) for x in dims.split(",")) if dims else ()
        n = int(np.prod(shape)) if shape else 1
        while shape and shape[0] == 1:
            shape = shape[1:]
        if n >= min_elems and (shapes is None or shape in shapes):
            out[dt] = out.get(dt, 0) + 1
    return out


def _weight_shapes(params, shardings) -> set:
    """Whole shapes of the sharded matmul weights (rank >= 2) of a params tree, stacked and per
    layer (a replicated weight is whole already; its gradient's gathers are not assembly)."""
    out = set()
    for x, sh in zip(jax.tree.leaves(params), jax.tree.leaves(shardings)):
        if len(x.shape) >= 2 and any(a is not None for a in sh.spec):
            out.add(tuple(x.shape))
            if len(x.shape) >= 3:
                out.add(tuple(x.shape[1:]))          # one layer of a scanned stack
    return out


def budget(run, *, devices=None, chip: Optional[str] = None, seq_len: Optional[int] = None,
           dump_dir: Optional[str] = None) -> BudgetReport:
    """Compile the learner's train step for the run's mesh at its real ``pack_len`` (full depth:
    the scanned layers compile once whatever the depth) on the given (fake CPU) devices, and
    report XLA's per-device memory against the preset's chip (``mesh.chip``). ``run``:
    ``train.spec.RunSpec``.

    Also returned, from the HLO after SPMD partitioning (``dump_dir`` keeps it): the dtypes of
    the weight-sized all-gathers (the FSDP weight gathers where the weights have FSDP shards,
    ``fsdp_devices > 1``; on a tensor-parallel mesh without them, activations and gradients), of
    the all-gathers that assemble a weight's whole shape, and of the weight-gradient reductions,
    and any ``T x S`` buffer. On
    XLA:CPU bf16 dot operands and elementwise math are held in fp32 (its float normalisation),
    so the figure over-states a bf16 run's activations: an upper bound for GPU/TPU.
    """
    chip = chip or run.mesh.chip
    if chip not in CHIP_HBM:
        raise ValueError(f"aot.budget: chip {chip!r}; set config.mesh.chip to one of {', '.join(CHIP_HBM)}")
    ln, mcfg = abstract_learner(run, devices)
    T = int(seq_len or run.rl.pack_len)
    R = ln.row_multiple // ln.cfg.num_mini_batches
    lowered = ln.lower_train_step(R, T)
    tmp = dump_dir or tempfile.mkdtemp(prefix="aot_budget_")
    t0 = time.perf_counter()
    with compile_cache.bypassed():      # a cached executable would skip the passes this reads
        compiled = lowered.compile(compiler_options={"xla_dump_to": tmp, "xla_dump_hlo_pass_re": "spmd-partitioning"})
    compile_s = time.perf_counter() - t0
    ma = compiled.memory_analysis()
    per = {k: int(getattr(ma, f"{k}_size_in_bytes")) for k in ("argument", "output", "alias", "temp")}
    per["peak"] = per["argument"] + per["output"] + per["temp"] - per["alias"]
    spmd = sorted(glob.glob(os.path.join(tmp, "*after_spmd-partitioning*")))
    text = open(spmd[-1]).read() if spmd else ""
    if dump_dir is None:
        shutil.rmtree(tmp, ignore_errors=True)
    widths = {mcfg.hidden_size, mcfg.intermediate_size, mcfg.linear_conv_dim, mcfg.linear_value_dim,
              mcfg.vocab_size}
    min_w = mcfg.hidden_size * 64          # weight-sized collectives (not scalars, not norms)
    reduces = _collectives(text, "all-reduce", min_w)
    for dt, n in _collectives(text, "reduce-scatter", min_w).items():
        reduces[dt] = reduces.get(dt, 0) + n
    fsdp = int(np.prod([ln.mesh.shape[a] for a in shd.FSDP_AXES if any(
        a in jax.tree.leaves(tuple(s.spec)) for s in jax.tree.leaves(ln.param_sharding))]))
    whole = _collectives(text, "all-gather", min_w, _weight_shapes(ln.state["params"], ln.param_sharding))
    return BudgetReport(
        chip=chip, hbm_bytes=CHIP_HBM[chip], mesh_shape=dict(ln.mesh.shape), seq_len=T, rows=R,
        num_params=ln.num_params, layers=mcfg.num_hidden_layers, attention=mcfg.attention_impl,
        remat=mcfg.remat, compile_s=compile_s, per_device_bytes=per,
        txs_buffers=txs_buffers(compiled.as_text() + text, T, widths),
        gather_dtypes={d: n for d, n in _collectives(text, "all-gather", min_w).items() if d in _FLOATS},
        whole_weight_gathers={d: n for d, n in whole.items() if d in _FLOATS},
        weight_reduce_dtypes=reduces, fsdp_devices=fsdp)


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
