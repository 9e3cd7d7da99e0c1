"""Builds the loop's parts from a validated experiment config (model, learner, engine, tasks).

Each builder is a small function of the config so that tests, ``launch/evaluate.py`` and the
AOT-lowering checks reuse exactly what training uses.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from absl import logging

from harness_jax import config_validation

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def model_config(config):
    """The Qwen3_5Config of the run: HF config.json (if hf_path) or a preset, then overrides."""
    from harness_jax.models import qwen3_5

    m = config.model
    base = qwen3_5.Qwen3_5Config.from_hf(m.hf_path) if m.hf_path else qwen3_5.presets.get(m.preset)
    over = ({} if m.hf_path else
            {k: (tuple(v) if isinstance(v, list) else v) for k, v in dict(m.overrides).items()})
    over.update(remat=m.remat, scan_layers=bool(m.scan_layers))
    return apply_overrides(base, over)


def apply_overrides(base, over: dict):
    """``base.replace(**over)``; a new layer count without explicit layer_types gets the default
    3 linear : 1 full pattern instead of the preset's (now wrong-length) list."""
    over = dict(over)
    if "num_hidden_layers" in over and "layer_types" not in over:
        over["layer_types"] = ()
    return base.replace(**over)


def make_mesh(config, devices=None):
    from harness_jax.rl.learner import make_mesh as _make_mesh
    devices = list(jax.devices() if devices is None else devices)
    shape = config_validation.resolve_mesh_shape(config.mesh.shape, len(devices))
    return _make_mesh(shape, tuple(config.mesh.axes), devices=devices)


def mesh_rules(config):
    if config.mesh.rules is None:
        from harness_jax import sharding
        return sharding.TRAIN_RULES
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in config.mesh.rules)


def build_model(config, cfg=None, *, seed: Optional[int] = None):
    """The policy as an nnx module: HF weights when ``model.hf_path`` is set, else random init."""
    from flax import nnx
    from harness_jax.models import qwen3_5

    cfg = cfg if cfg is not None else model_config(config)
    dtype, pdtype = DTYPES[config.model.dtype], DTYPES[config.model.param_dtype]
    if config.model.hf_path:
        logging.info("loading policy weights from %s", config.model.hf_path)
        model = qwen3_5.load_hf(config.model.hf_path, dtype=config.model.dtype)
        return model
    seed = config.seed if seed is None else seed
    return qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(seed), dtype=dtype, param_dtype=pdtype)


def learner_config(config, mode: str = "grpo", *, total_steps: Optional[int] = None,
                   peak_flops: float = 0.0):
    from harness_jax.rl import losses
    from harness_jax.rl.learner import LearnerConfig, OptimizerConfig

    rl, o = config.rl, config.opt
    if mode == "sft":
        s = config.sft
        opt = OptimizerConfig(learning_rate=s.lr, schedule="cosine", warmup_steps=min(10, s.steps // 10),
                              total_steps=max(s.steps, 1), b1=o.b1, b2=o.b2,
                              weight_decay=o.weight_decay, clip_norm=o.grad_clip or None)
        return LearnerConfig(mode="sft", opt=opt, num_micro_batches=1, num_mini_batches=1,
                             num_epochs=1, shuffle=False, logit_chunk=config.rl.logit_chunk, peak_flops_per_device=peak_flops,
                             seed=config.seed)
    loss = losses.PolicyLossConfig(
        eps_low=rl.eps_low, eps_high=rl.eps_high, dual_clip=rl.dual_clip or None,
        tis_mode=rl.tis_mode, tis_cap=rl.tis_cap, agg=rl.agg, kl_coef=rl.kl_coef,
        kl_type=rl.kl_estimator, entropy_coef=rl.entropy_coef)
    steps = total_steps or max(config.num_steps * rl.epochs * rl.mini_batches, 1)
    opt = OptimizerConfig(learning_rate=o.lr, schedule=o.schedule, warmup_steps=o.warmup_steps,
                          total_steps=steps, b1=o.b1, b2=o.b2, weight_decay=o.weight_decay,
                          clip_norm=o.grad_clip or None)
    return LearnerConfig(mode="grpo", loss=loss, opt=opt, num_micro_batches=rl.micro_batches,
                         num_mini_batches=rl.mini_batches, num_epochs=rl.epochs,
                         recompute_old_logp=rl.recompute_old_logp, logit_chunk=rl.logit_chunk,
                         temperature=config.rollout.temperature, peak_flops_per_device=peak_flops,
                         seed=config.seed)


def pack_config(config, learner, mode: str = "grpo"):
    """Row length buckets up to ``rl.pack_len``; rows a multiple of what the learner needs."""
    from harness_jax.rl.batch import PackConfig
    import math

    top = int(config.rl.pack_len)
    buckets = sorted({b for b in (256, 512, 1024, 2048, 4096, 8192, 16384) if b < top} | {top})
    n_batch_dev = math.prod(learner.mesh.shape[a] for a in ("data", "fsdp") if a in learner.mesh.shape)
    mult = learner.cfg.num_mini_batches * learner.cfg.num_micro_batches * n_batch_dev
    return PackConfig(buckets=tuple(buckets), overlong="split", row_multiple=mult, pad_id=0)


def load_tasks(config, split: str, n: Optional[int] = None, seed_offset: int = 0):
    """Tasks of one (non-test) split through the environment registry."""
    from harness_jax.envs import registry

    kw = dict(config.env.split_kwargs)
    if n is not None and "path" not in kw:
        kw["n"] = int(n)
    if seed_offset and "seed" in kw:
        kw["seed"] = int(kw["seed"]) + seed_offset
    tasks = registry.load_split(config.env.name, split, **kw)
    return tasks[:n] if n is not None else tasks


def env_factory(config):
    from harness_jax.envs import registry

    name, kw = config.env.name, dict(config.env.kwargs)
    return lambda: registry.make(name, **kw)


def sampling_params(config, *, temperature: Optional[float] = None, stop_token_ids=()):
    from harness_jax.sampling.types import SamplingParams

    r = config.rollout
    t = r.temperature if temperature is None else temperature
    return SamplingParams(temperature=t, top_p=r.top_p if t > 0 else 1.0, top_k=r.top_k if t > 0 else -1,
                          max_new_tokens=r.max_new_tokens, stop_token_ids=tuple(stop_token_ids))


def copy_params(params):
    """A fresh on-device copy (the learner donates its state; the engine must not alias it)."""
    return jax.jit(lambda p: jax.tree.map(jnp.copy, p))(params)
