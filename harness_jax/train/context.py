"""The run context: every built part of one training run, passed explicitly to the phases that
use it (the GRPO loop, the SFT warm start, evaluation, the methods' extensions) instead of
reaching into a trainer.

    run = spec.resolve(config)                  # the run's specs (train.spec)
    ctx = context.build(run, workdir)           # specs -> parts
    ...
    ctx.close()
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import jax
from absl import logging

from harness_jax import paths as paths_lib
from harness_jax.config_problems import ConfigValidationError, Problem
from harness_jax.harness import workers
from harness_jax.rl.checkpoint import restore_params
from harness_jax.rl import policy
from harness_jax.rl.metrics import MetricsWriter
from harness_jax.train import builders, console as console_lib, rollout, spec as spec_lib
from harness_jax.train.workdir import RunPaths


@dataclasses.dataclass
class RunContext:
    spec: Any                          # train.spec.RunSpec
    paths: RunPaths
    console: console_lib.Console
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
        return self.spec.rollout.colocated

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

    def pack_config(self, row_multiple: Optional[int] = None):
        """The packer's config with the learner's row multiple (or ``row_multiple``)."""
        rm = self.learner.row_multiple if row_multiple is None else row_multiple
        return dataclasses.replace(self.spec.pack, row_multiple=int(rm))

    def sft_learner_config(self, *, agg: str = "token_mean", norm_constant: float = 1.0):
        return spec_lib.sft_learner_config(self.spec, peak_flops=self.peak_flops, agg=agg,
                                           norm_constant=norm_constant)

    def close(self) -> None:
        for closer in (self.runner.close, getattr(self.workers, "close", None),
                       getattr(self.engine, "close", None),
                       getattr(self.writer, "close", None), getattr(self.store, "close", None)):
            if closer is not None:
                try:
                    closer()
                except Exception as e:  # closing must not hide the run's own result
                    logging.warning("close failed: %s", e)


def build(run, workdir, *, devices: Optional[Sequence[Any]] = None,
          console: Optional[console_lib.Console] = None) -> RunContext:
    """Builds every part of the run ``run`` (a resolved ``train.spec.RunSpec``) under ``workdir``
    (a path or URI)."""
    console = console or console_lib.Console(run.loop.log.progress_bar)
    paths = RunPaths.of(workdir)
    paths.root.mkdir(parents=True, exist_ok=True)
    r, log = run.rollout, run.loop.log
    store = rollout.open_store(paths.local("traces", log.traces_dir) if log.store_traces else None)
    tokenizer = rollout.load_tokenizer(run, paths.tokenizer)
    env_factory = builders.env_factory(run.env)
    peak = builders.peak_flops(log.peak_flops, run.mesh.platform, run.mesh.chip)
    console.line(f"per-device peak for MFU: {peak:.3g} FLOP/s ({'config' if log.peak_flops else 'measured fp32 matmul'})")
    episode_workers = workers.from_spec(run.workers)
    mesh, rules = policy.make_mesh(run.mesh, devices), policy.mesh_rules(run.mesh)
    learner, model_cfg = policy.build_learner(
        run.model, mesh, rules, dataclasses.replace(run.learner, peak_flops_per_device=peak),
        source=paths_lib.weights_source(run.model.init_from, hf=False), seed=run.seed)
    if model_cfg.vocab_size < len(tokenizer):
        raise ConfigValidationError([Problem(
            "model.arch.vocab_size", model_cfg.vocab_size, f"smaller than the tokenizer's {len(tokenizer)} tokens",
            f"set --config.model.arch.vocab_size >= {len(tokenizer)}")])
    engine, sync = rollout.build_engine(r, learner.model(learner.params_copy()) if r.colocated else None, tokenizer,
                                        seed=run.seed, version=learner.policy_version, platform=run.mesh.platform,
                                        name=run.name)
    runner = rollout.EpisodeRunner(run.runner, engine, env_factory, tokenizer, store, backend=episode_workers)
    writer = MetricsWriter(paths.root, tensorboard=bool(log.tensorboard))
    return RunContext(spec=run, paths=paths, console=console, tokenizer=tokenizer, model_cfg=model_cfg,
                      mesh=mesh, rules=rules, peak_flops=peak, learner=learner, engine=engine, weight_sync=sync,
                      env_factory=env_factory, harness=run.base_harness, runner=runner,
                      writer=writer, store=store, workers=episode_workers)


def load_params(learner, path):
    """``(params, step)`` of the latest Orbax checkpoint under ``path`` (a workdir or a
    checkpoints dir), on ``learner``'s parameter shardings."""
    abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                            learner.state["params"], learner.param_sharding)
    return restore_params(paths_lib.checkpoint_dir(path), abstract)


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
