"""Evaluation under a harness (the base harness H0 by default): success, Pass@k, Avg@k.

Used periodically by the training loop (``selection`` split) and by ``launch/evaluate.py``
(any checkpoint or HF directory, any harness, any split; the entry point itself loads the sealed
test split, this module never does). Evaluation needs a model, never a learner or optimizer
state: ``policy_model`` loads one from an HF directory, a training run's Orbax checkpoint (its
parameters only) or the config. Results are plain JSON-able dicts.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, Sequence

from absl import logging


def run_attempts(runner, tasks: Sequence, harness, *, k: int, temperature: float, tag: str,
                 progress: str = "off") -> list:
    """``k`` episodes per task (a list per task, in order) under ``harness`` (a spec or a Sibling,
    or a callable ``task -> harness`` choosing one per task), with a progress bar over tasks."""
    from harness_jax.train import telemetry

    bar = telemetry.Progress(len(tasks), 0, progress, desc=tag)

    async def one(i, task):
        h = harness(task) if callable(harness) else harness
        eps = await runner.run(task, h, k, f"{tag}-{i}", seed=10_000 + i, temperature=temperature)
        bar.update(1)
        return eps

    async def all_tasks():
        return await asyncio.gather(*[one(i, t) for i, t in enumerate(tasks)])

    try:
        return asyncio.run(all_tasks())
    finally:
        bar.close()


def evaluate_tasks(runner, tasks: Sequence, harness, *, k: int = 1, temperature: float = 0.0,
                   tag: str = "eval", progress: str = "off") -> dict:
    """Runs ``k`` attempts per task; returns success rate, pass@k / avg@k for k in {1, k}."""
    if k > 1 and temperature == 0:
        raise ValueError("evaluate_tasks: k > 1 attempts need temperature > 0 (greedy attempts are identical)")
    t0 = time.perf_counter()
    per_task = run_attempts(runner, tasks, harness, k=k, temperature=temperature, tag=tag, progress=progress)
    out = summarize_attempts(tasks, per_task, k)
    out["time_s"] = time.perf_counter() - t0
    return out


def summarize_attempts(tasks: Sequence, per_task: Sequence, k: int) -> dict:
    """Success rate, score, pass@k / avg@k for k in {1, k}, per category, turns and
    infrastructure errors of ``k`` attempts per task (infrastructure errors are not scored)."""
    from harness_jax import scoring as metrics

    records = []
    for task, eps in zip(tasks, per_task):
        for e in eps:
            if e.infra_error:
                continue
            records.append({"task_id": task.task_id, "success": bool(e.success), "score": float(e.reward),
                            "category": task.category, "turns": e.num_turns})
    ks = sorted({1, int(k)})
    summ = metrics.summarize(records, ks=ks)
    out = {"num_tasks": summ.num_tasks, "num_episodes": summ.num_episodes,
           "success_rate": summ.success_rate, "score": summ.score,
           "per_category": summ.per_category,
           "turns_mean": (sum(r["turns"] for r in records) / len(records)) if records else 0.0,
           "infra_errors": sum(e.infra_error for eps in per_task for e in eps)}
    for kk, v in summ.pass_at.items():
        out[f"pass@{kk}"] = v
    for kk, v in summ.avg_at.items():
        out[f"avg@{kk}"] = v
    return out


def policy_model(config, checkpoint: str, mesh, rules):
    """``(model, source)``: the policy of ``checkpoint`` on ``mesh`` (an HF directory with
    config.json; a training workdir or checkpoints dir: its latest parameters on the config's
    model; '' = the config's own model: ``model.hf_path``, ``model.init_from`` or the init)."""
    import jax
    from flax import nnx

    from harness_jax.paths import resolve
    from harness_jax.rl.checkpoint import restore_params
    from harness_jax.rl.learner import param_shardings
    from harness_jax.train import builders, context

    if checkpoint and (resolve(checkpoint) / "config.json").exists():
        return builders.load_hf_model(config, checkpoint, mesh, rules), f"hf:{checkpoint}"
    path = checkpoint or config.model.init_from
    if not path:
        return builders.build_model(config, mesh, rules), "config"
    graphdef, state, rest = nnx.split(builders.abstract_model(config, mesh), nnx.Param, ...)
    abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                            nnx.to_pure_dict(state), param_shardings(state, mesh, rules))
    directory = context.checkpoint_dir(path)
    params, step = restore_params(directory, abstract)
    nnx.replace_by_pure_dict(state, params)
    concrete_rest = builders.build_model(config, mesh, rules) if jax.tree.leaves(nnx.to_pure_dict(rest)) else None
    if concrete_rest is not None:
        rest = nnx.state(concrete_rest, nnx.Not(nnx.Param))
    return nnx.merge(graphdef, state, rest), f"orbax:{directory}@{step}"


@dataclasses.dataclass
class PolicyRunner:
    """A policy on a rollout engine with an episode runner, no learner (evaluation, evolution)."""

    runner: Any                         # rollout.EpisodeRunner
    engine: Any
    tokenizer: Any
    policy: str                         # where the weights came from (``policy_model``'s source)
    paths: Any                          # workdir.RunPaths of the output workdir
    workers: Any = None                 # episode workers (harness.workers.from_config), or None

    def close(self) -> None:
        self.runner.close()
        if self.workers is not None:
            self.workers.close()
        if hasattr(self.engine, "close"):
            self.engine.close()


def policy_runner(config, workdir, *, checkpoint: str = "", pool_version: str = "") -> PolicyRunner:
    """Loads the policy of ``checkpoint`` (``policy_model``) onto the configured engine (servers
    get the weights through the configured sync) and an ``EpisodeRunner`` writing traces under
    ``workdir``. The caller validates the config and closes the result."""
    from harness_jax.train import builders, rollout, workdir as workdir_lib

    paths = workdir_lib.RunPaths.of(workdir)
    paths.root.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(config, checkpoint, paths)
    mesh, rules = builders.make_mesh(config), builders.mesh_rules(config)
    model, source = policy_model(config, checkpoint, mesh, rules)
    engine, sync = rollout.build_engine(config, model, tokenizer, version=0,
                                        sync_dir=paths.local("weight_sync", config.rollout.sync_dir)
                                        if config.rollout.mode != "colocated" else "")
    if config.rollout.mode != "colocated":
        sync(model, 0)                      # the servers evaluate this policy
    store = rollout.open_store(config, paths.local("traces", config.log.traces_dir)
                               if config.log.store_traces else None)
    from harness_jax.harness import workers

    episode_workers = workers.from_config(config)
    runner = rollout.EpisodeRunner(config, engine, builders.env_factory(config), tokenizer, store,
                                   backend=episode_workers, pool_version=pool_version)
    return PolicyRunner(runner, engine, tokenizer, source, paths, episode_workers)


def eval_temperature(config, k: int) -> float:
    """``eval.temperature``, or 0.7 when k > 1 attempts would otherwise be greedy copies."""
    t = float(config.eval.temperature)
    return 0.7 if k > 1 and t == 0 else t


def evaluate_main(config, workdir, *, tasks: Sequence, checkpoint: str = "", harness: str = "",
                  k: int = 0, split: str = "selection", out: str = "") -> dict:
    """Loads a policy (``policy_model``), evaluates it on ``tasks`` under ``harness`` (a spec file
    or registered name; '' = ``harness.spec``) and writes a results JSON. Returns the results."""
    from harness_jax import config_validation
    from harness_jax.paths import resolve
    from harness_jax.train import rollout, workdir as workdir_lib

    config_validation.validate(config, allow_test_split=True)
    k = int(k or config.eval.k)
    temperature = eval_temperature(config, k)
    pr = policy_runner(config, workdir, checkpoint=checkpoint)
    h = rollout.base_harness(config, spec=harness or None)
    try:
        res = evaluate_tasks(pr.runner, tasks, h, k=k, temperature=temperature, tag=f"eval-{split}",
                             progress=config.log.progress_bar)
    finally:
        pr.close()
    res.update(split=split, k=k, temperature=temperature, policy=pr.policy, harness=harness or config.harness.spec or "H0",
               env=config.env.name, config_name=config.name)
    path = resolve(out) if out else pr.paths.root / f"eval_{split}.json"
    workdir_lib.write_json(path, res)
    logging.info("wrote %s", path)
    return res


def _tokenizer(config, checkpoint: str, paths):
    """The checkpoint's own tokenizer (an exported HF dir, or a training workdir's task BPE), else
    the config's."""
    from harness_jax.paths import resolve
    from harness_jax.train import rollout, task_tokenizer

    if checkpoint:
        c = resolve(checkpoint)
        if (c / "tokenizer.json").exists():
            from harness_jax.sampling.tokenizer import load_tokenizer
            return load_tokenizer(str(c))
        if (c / "tokenizer" / "tokenizer.json").exists():
            return task_tokenizer.load(c / "tokenizer")
    return rollout.load_tokenizer(config, paths.tokenizer)
