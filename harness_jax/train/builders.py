"""Builds the run's parts from a validated experiment config: each builder is a small function of
the config (model, mesh, learner and pack configs, tasks, environments, SFT), so that the loop,
``launch/evaluate.py``, the AOT checks and tests build exactly what training uses.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from absl import logging

from harness_jax import config_schema, sharding

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


# ------------------------------------------------------------------------------------ model
def model_config(config):
    """The run's Qwen3_5Config (``config_schema.model_config``)."""
    return config_schema.model_config(config.model)


def make_mesh(config, devices=None):
    """The learner mesh: ``mesh.shape`` over ``devices`` (default: the first ``mesh.num_devices``
    of ``jax.devices()``, all when -1)."""
    if devices is None:
        n = int(config.mesh.num_devices)
        devices = jax.devices() if n < 0 else jax.devices()[:n]
    return sharding.make_mesh(tuple(config.mesh.shape), tuple(config.mesh.axes), devices=list(devices))


def mesh_rules(config):
    if config.mesh.rules is None:
        return sharding.TRAIN_RULES
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in config.mesh.rules)


def _model_kwargs(config):
    return dict(dtype=DTYPES[config.model.dtype], param_dtype=DTYPES[config.model.param_dtype])


def abstract_model(config, mesh, cfg=None, rules=None):
    """The policy without weights (``nnx.eval_shape``): shapes and dtypes only, on ``mesh``
    (activations pinned to batch sharding, weights gathered per layer in the compute dtype)."""
    from flax import nnx
    from harness_jax.models import qwen3_5

    cfg = model_config(config) if cfg is None else cfg
    kw = _model_kwargs(config)
    model = nnx.eval_shape(lambda: qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0), **kw))
    return model.set_mesh(mesh, mesh_rules(config) if rules is None else rules)


def build_model(config, mesh, rules, cfg=None, *, seed: Optional[int] = None):
    """The policy as an nnx module whose parameters are already on ``mesh`` with the rules'
    shardings (the learner's): Hugging Face weights when ``model.hf_path`` is set (with the
    config's dtypes and runtime knobs), else a random init under ``jit`` (no full copy of the
    weights on one device)."""
    from flax import nnx
    from harness_jax.models import qwen3_5

    if config.model.hf_path:
        return load_hf_model(config, config.model.hf_path, mesh, rules)
    cfg = model_config(config) if cfg is None else cfg
    kw = _model_kwargs(config)
    seed = config.seed if seed is None else seed
    model = sharding.init_sharded(lambda: qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(seed), **kw), mesh, rules)
    return model.set_mesh(mesh, rules)   # as load_hf does: block-boundary batch sharding, MoE expert parallelism


def load_hf_model(config, path, mesh, rules):
    """A Hugging Face checkpoint with the config's dtypes and runtime knobs (remat, scan_layers),
    loaded shard by shard straight onto ``mesh`` with the rules' shardings."""
    from harness_jax.models import qwen3_5

    logging.info("loading policy weights from %s", path)
    return qwen3_5.load_hf(str(path), dtype=config.model.dtype, param_dtype=config.model.param_dtype, mesh=mesh,
                           rules=rules, config_overrides=config_schema.runtime_overrides(config.model))


def peak_flops(config) -> float:
    """Per-device peak FLOP/s for MFU: ``log.peak_flops``, else the bf16 dense peak of
    ``mesh.chip``, else measured on CPU (0 = unknown)."""
    from harness_jax.train import telemetry

    if config.log.peak_flops:
        return float(config.log.peak_flops)
    if config.mesh.chip:
        return config_schema.CHIP_BF16_PEAK[config.mesh.chip]
    return telemetry.measure_matmul_peak_flops() if config.mesh.platform == "cpu" else 0.0


# ---------------------------------------------------------------------------------- learner
def _optimizer(config, *, lr: float, schedule: str, warmup_steps: int, total_steps: int):
    from harness_jax.rl.learner import OptimizerConfig

    o = config.opt
    return OptimizerConfig(learning_rate=lr, schedule=schedule, warmup_steps=warmup_steps,
                           total_steps=max(total_steps, 1), end_lr_ratio=o.end_lr_ratio, b1=o.b1, b2=o.b2,
                           eps=o.eps, weight_decay=o.weight_decay, clip_norm=o.grad_clip or None)


def learner_config(config, mode: str = "grpo", *, peak_flops: float = 0.0, sft_agg: str = "token_mean",
                   sft_norm_constant: float = 1.0):
    """The GRPO learner's config (``rl.*``, ``opt.*``) or, with ``mode="sft"``, the SFT warm
    start's (``sft.*`` with the ``opt.*`` AdamW settings; ``sft_agg``/``sft_norm_constant`` the
    SFT loss normalisation, ``rl.sft``)."""
    from harness_jax.rl import losses
    from harness_jax.rl.learner import LearnerConfig

    rl = config.rl
    # MoE: Qwen3.5's router load-balancing loss at the model config's coefficient (0 for dense models)
    router_aux = float(model_config(config).router_aux_loss_coef) if rl.router_aux_loss else 0.0
    if mode == "sft":
        s = config.sft
        opt = _optimizer(config, lr=s.lr, schedule=s.schedule, warmup_steps=s.warmup_steps, total_steps=s.steps)
        return LearnerConfig(mode="sft", opt=opt, num_micro_batches=rl.micro_batches, num_mini_batches=1,
                             num_epochs=1, shuffle=False, logit_chunk=rl.logit_chunk,
                             loss=losses.PolicyLossConfig(agg=sft_agg, norm_constant=float(sft_norm_constant)),
                             peak_flops_per_device=peak_flops, seed=config.seed, router_aux_coef=router_aux)
    loss = losses.PolicyLossConfig(
        eps_low=rl.eps_low, eps_high=rl.eps_high, dual_clip=rl.dual_clip or None,
        tis_mode=rl.tis_mode, tis_cap=rl.tis_cap, tis_low=rl.tis_low, tis_high=rl.tis_high, agg=rl.agg,
        norm_constant=rl.norm_constant, kl_coef=rl.kl_coef, kl_type=rl.kl_estimator, kl_clamp=rl.kl_clamp,
        entropy_coef=rl.entropy_coef)
    opt = _optimizer(config, lr=config.opt.lr, schedule=config.opt.schedule, warmup_steps=config.opt.warmup_steps,
                     total_steps=config.num_steps * rl.epochs * rl.mini_batches)
    return LearnerConfig(mode="grpo", loss=loss, opt=opt, num_micro_batches=rl.micro_batches,
                         num_mini_batches=rl.mini_batches, num_epochs=rl.epochs,
                         recompute_old_logp=rl.recompute_old_logp, logit_chunk=rl.logit_chunk,
                         temperature=config.rollout.temperature, peak_flops_per_device=peak_flops,
                         seed=config.seed, router_aux_coef=router_aux)


def pack_config(config, row_multiple: int):
    """Row lengths: ``rl.pack_buckets`` below ``rl.pack_len``, and ``pack_len``; the row count a
    multiple of ``row_multiple`` (the learner's ``row_multiple``: mini x micro batches x the
    devices of its batch sharding)."""
    from harness_jax.rl.batch import PackConfig

    top = int(config.rl.pack_len)
    buckets = sorted({int(b) for b in config.rl.pack_buckets if b < top} | {top})
    return PackConfig(buckets=tuple(buckets), overlong="split", row_multiple=int(row_multiple),
                      pad_id=int(config.rl.pad_token_id))


def sft_config(config, num_examples: int, row_multiple: int):
    """``sft.steps`` optimizer steps of ``sft.batch_size`` demonstrations, reshuffled per epoch."""
    from harness_jax.rl.sft import SFTConfig

    return SFTConfig.for_steps(int(config.sft.steps), num_examples, int(config.sft.batch_size),
                               seed=int(config.seed) + int(config.sft.seed_offset),
                               pack=pack_config(config, row_multiple))


# ------------------------------------------------------------------------------ environment
def split_kwargs(config, n: Optional[int] = None, seed_offset: int = 0) -> dict:
    """``registry.load_split`` arguments from ``config.env`` and the selected family's section
    (``n`` replaces ``env.num_tasks``; ``seed_offset`` shifts the generator seed)."""
    from harness_jax.envs import registry

    e = config.env
    kw = registry.config_section(e.name).split_kwargs(e)
    if n is not None and "n" in kw:
        kw["n"] = int(n)
    if seed_offset and "seed" in kw:
        kw["seed"] = int(kw["seed"]) + int(seed_offset)
    return {k: v for k, v in kw.items() if v is not None}


def task_source(config, split: str, n: Optional[int] = None):
    """The tasks of ``split``: the built task set ``config.env.taskset`` read lazily (a random-access
    ``tasksets.TaskSetSource`` of the whole split, what ``TaskStream`` takes) when
    ``env.taskset.data_dir`` is set, else ``registry.load_split`` with the family's section (``n``
    replaces ``env.num_tasks`` there). The test split is sealed either way
    (open it inside ``registry.sealed_test_access``; a test source makes its tasks on access, so
    materialise them there, as ``load_tasks`` does)."""
    ts = config.env.taskset
    data_dir, name, version = ts.data_dir, ts.config, ts.version
    if data_dir:
        from harness_jax.data import tasksets

        return tasksets.open_split(data_dir, config.env.name, split, config=name, version=version or None)
    from harness_jax.envs import registry

    return registry.load_split(config.env.name, split, **split_kwargs(config, n))


def load_tasks(config, split: str, n: Optional[int] = None, seed_offset: int = 0) -> list:
    """The first ``n`` tasks (all when None) of ``split`` as a list: from ``task_source``, or, with
    ``seed_offset`` (auxiliary draws such as SFT demonstrations, disjoint from the task stream),
    from the registry's generator with the seed shifted (also when a task set is configured)."""
    if seed_offset:
        from harness_jax.envs import registry

        tasks = registry.load_split(config.env.name, split, **split_kwargs(config, n, seed_offset))
        return tasks[:n] if n is not None else tasks
    src = task_source(config, split, n)
    m = len(src) if n is None else min(int(n), len(src))
    return list(src[:m]) if isinstance(src, list) else [src[i] for i in range(m)]


def env_factory(config):
    """A no-argument (picklable) factory of fresh environments of ``config.env.name``."""
    from harness_jax.envs import registry

    name = config.env.name
    kw = {k: v for k, v in registry.config_section(name).env_kwargs(config.env).items() if v is not None}
    return registry.EnvFactory(name, kw)
