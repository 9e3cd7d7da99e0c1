"""The run context: every built part of one training run, passed explicitly to the phases that
use it (the GRPO loop, the SFT warm start, evaluation) instead of reaching into a trainer.

    ctx = context.build(config, workdir)        # validated config -> parts
    ...
    ctx.close()
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import jax
from absl import logging

from harness_jax import config_validation
from harness_jax.harness import workers
from harness_jax.train import builders, rollout
from harness_jax.train.workdir import RunPaths


@dataclasses.dataclass
class RunContext:
    config: Any
    paths: RunPaths
    tokenizer: Any
    model_cfg: Any                     # Qwen3_5Config of the policy
    mesh: Any
    rules: Any
    peak_flops: float                  # per-device peak FLOP/s for MFU (0 = unknown)
    learner: Any                       # rl.learner.Learner (GRPO mode)
    engine: Any                        # RolloutEngine (JaxEngine or SGLangClient)
    weight_sync: Callable              # weight_sync(model, version)
    env_factory: Callable
    harness: Any                       # the base harness H0 (or config.harness.spec)
    runner: rollout.EpisodeRunner
    writer: Any                        # rl.metrics.MetricsWriter
    store: Any = None                  # TrajectoryStore or None
    workers: Any = None                # episode workers (harness.workers.WorkerPool) or None (in-process)

    @property
    def colocated(self) -> bool:
        return self.config.rollout.mode == "colocated"

    def sync_weights(self) -> None:
        """Pushes the learner's current parameters (as ``policy_version``) to the rollout engine:
        a device copy for the embedded engine (the learner donates its state every step), an HF
        export for servers."""
        model = self.learner.model(self.learner.params_copy() if self.colocated else None)
        self.weight_sync(model, self.learner.policy_version)

    def load_params(self, path) -> int:
        """Installs the latest parameters of the checkpoints under ``path`` in the learner (and
        as its KL reference); returns their step."""
        return init_from(self.learner, path)

    def pack_config(self):
        return builders.pack_config(self.config, self.learner.row_multiple)

    def close(self) -> None:
        for closer in (self.runner.close, getattr(self.workers, "close", None),
                       getattr(self.engine, "close", None),
                       getattr(self.writer, "close", None), getattr(self.store, "close", None)):
            if closer is not None:
                try:
                    closer()
                except Exception as e:  # closing must not hide the run's own result
                    logging.warning("close failed: %s", e)


def build(config, workdir, *, devices: Optional[Sequence[Any]] = None) -> RunContext:
    """Validates ``config`` and builds every part of the run under ``workdir`` (a path or URI)."""
    from harness_jax.rl.learner import Learner
    from harness_jax.rl.metrics import MetricsWriter

    devices = list(devices) if devices is not None else None
    config_validation.validate(config, num_devices=len(devices) if devices else None)
    paths = RunPaths.of(workdir)
    paths.root.mkdir(parents=True, exist_ok=True)
    tokenizer = rollout.load_tokenizer(config, paths.tokenizer)
    model_cfg = builders.model_config(config)
    if model_cfg.vocab_size < len(tokenizer):
        raise config_validation.ConfigValidationError([config_validation.Problem(
            "model.arch.vocab_size", model_cfg.vocab_size, f"smaller than the tokenizer's {len(tokenizer)} tokens",
            f"set --config.model.arch.vocab_size >= {len(tokenizer)}")])
    mesh = builders.make_mesh(config, devices)
    rules = builders.mesh_rules(config)
    peak = builders.peak_flops(config)
    logging.info("per-device peak for MFU: %.3g FLOP/s (%s)", peak,
                 "config" if config.log.peak_flops else "measured fp32 matmul")
    learner = Learner(builders.build_model(config, mesh, rules, model_cfg),
                      builders.learner_config(config, "grpo", peak_flops=peak), mesh=mesh, rules=rules)
    if config.model.init_from:
        init_from(learner, config.model.init_from)
    colocated = config.rollout.mode == "colocated"
    engine, sync = rollout.build_engine(
        config, learner.model(learner.params_copy()) if colocated else None, tokenizer,
        version=learner.policy_version,
        sync_dir="" if colocated else paths.local("weight_sync", config.rollout.sync_dir))
    env_factory = builders.env_factory(config)
    store = rollout.open_store(config, paths.local("traces", config.log.traces_dir)
                               if config.log.store_traces else None)
    episode_workers = workers.from_config(config)
    runner = rollout.EpisodeRunner(config, engine, env_factory, tokenizer, store, backend=episode_workers)
    writer = MetricsWriter(paths.root, tensorboard=bool(config.log.tensorboard))
    return RunContext(config=config, paths=paths, tokenizer=tokenizer, model_cfg=model_cfg, mesh=mesh,
                      rules=rules, peak_flops=peak, learner=learner, engine=engine, weight_sync=sync,
                      env_factory=env_factory, harness=rollout.base_harness(config), runner=runner,
                      writer=writer, store=store, workers=episode_workers)


def checkpoint_dir(path) -> str:
    """A training workdir's ``checkpoints/`` dir, or ``path`` itself (a checkpoints dir)."""
    from harness_jax.paths import resolve

    p = resolve(path)
    return str(p / "checkpoints") if (p / "checkpoints").exists() else str(p)


def load_params(learner, path):
    """``(params, step)`` of the latest Orbax checkpoint under ``path`` (a workdir or a
    checkpoints dir), on ``learner``'s parameter shardings."""
    from harness_jax.rl.checkpoint import restore_params

    abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                            learner.state["params"], learner.param_sharding)
    return restore_params(checkpoint_dir(path), abstract)


def init_from(learner, path) -> int:
    """Loads another run's latest parameters into ``learner`` (and as its KL reference)."""
    params, step = load_params(learner, path)
    learner.set_params(params, reset_reference=True)
    logging.info("initial weights from %s (step %d)", path, step)
    return step


def init_reference(learner, path) -> int:
    """Makes the latest parameters of the checkpoints under ``path`` the KL reference (a resumed
    run whose RL phase started from an SFT warm start)."""
    params, step = load_params(learner, path)
    learner.set_reference(params)
    return step
