"""Evaluation under a harness (the base harness H0 by default): success, Pass@k, Avg@k.

Used periodically by the training loop (``selection`` split) and by ``launch/evaluate.py``
(any checkpoint or HF directory, any harness, any split; the entry point itself loads the sealed
test split, this module never does). Evaluation needs a model, never a learner or optimizer
state: ``rl.policy.policy_model`` loads one from an HF directory, a training run's Orbax checkpoint (its
parameters only) or the config. Results are plain JSON-able dicts.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, Sequence

from absl import logging

from harness_jax import scoring
from harness_jax.envs import registry
from harness_jax.harness import workers
from harness_jax.paths import resolve
from harness_jax.rl import policy
from harness_jax.sampling.tokenizer import load_tokenizer
from harness_jax.train import builders, console as console_lib, extensions, rollout, spec as spec_lib, task_tokenizer
from harness_jax.train import workdir as workdir_lib


def run_attempts(runner, tasks: Sequence, harness, *, k: int, temperature: float, tag: str,
                 console: console_lib.Console = console_lib.QUIET) -> list:
    """``k`` episodes per task (a list per task, in order) under ``harness`` (a spec or a Sibling,
    or a callable ``task -> harness`` choosing one per task), with a progress bar over tasks."""
    bar = console.bar(len(tasks), tag)

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
                   tag: str = "eval", console: console_lib.Console = console_lib.QUIET) -> dict:
    """Runs ``k`` attempts per task; returns success rate, pass@k / avg@k for k in {1, k}."""
    if k > 1 and temperature == 0:
        raise ValueError("evaluate_tasks: k > 1 attempts need temperature > 0 (greedy attempts are identical)")
    t0 = time.perf_counter()
    per_task = run_attempts(runner, tasks, harness, k=k, temperature=temperature, tag=tag, console=console)
    out = summarize_attempts(tasks, per_task, k)
    out["time_s"] = time.perf_counter() - t0
    return out


def summarize_attempts(tasks: Sequence, per_task: Sequence, k: int) -> dict:
    """Success rate, score, pass@k / avg@k for k in {1, k}, per category, turns and
    infrastructure errors of ``k`` attempts per task (infrastructure errors are not scored)."""
    records = []
    for task, eps in zip(tasks, per_task):
        for e in eps:
            if e.infra_error:
                continue
            records.append({"task_id": task.task_id, "success": bool(e.success), "score": float(e.reward),
                            "category": task.category, "turns": e.num_turns})
    ks = sorted({1, int(k)})
    summ = scoring.summarize(records, ks=ks)
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


@dataclasses.dataclass
class PolicyRunner:
    """A policy on a rollout engine with an episode runner, no learner (evaluation, evolution)."""

    runner: Any                         # rollout.EpisodeRunner
    engine: Any
    tokenizer: Any
    policy: str                         # where the weights came from (``policy_model``'s source)
    paths: Any                          # workdir.RunPaths of the output workdir
    workers: Any = None                 # episode workers (harness.workers.from_spec), or None

    def close(self) -> None:
        self.runner.close()
        if self.workers is not None:
            self.workers.close()
        if hasattr(self.engine, "close"):
            self.engine.close()


def policy_runner(run, workdir, *, checkpoint: str = "", pool_version: str = "") -> PolicyRunner:
    """Loads the policy of ``checkpoint`` (``rl.policy.policy_model``) onto the run's engine (servers get
    the weights through the configured sync) and an ``EpisodeRunner`` writing traces under
    ``workdir``. ``run``: ``train.spec.RunSpec``; the caller closes the result."""
    paths = workdir_lib.RunPaths.of(workdir)
    paths.root.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(run, checkpoint, paths)
    mesh, rules = policy.make_mesh(run.mesh), policy.mesh_rules(run.mesh)
    model, source = policy.policy_model(run.model, checkpoint, mesh, rules, seed=run.seed)
    r, log = run.rollout, run.loop.log
    engine, sync = rollout.build_engine(r, model, tokenizer, seed=run.seed, version=0,
                                        sync_dir="" if r.colocated else paths.local("weight_sync", r.sync_dir))
    if not r.colocated:
        sync(model, 0)                      # the servers evaluate this policy
    store = rollout.open_store(paths.local("traces", log.traces_dir) if log.store_traces else None)
    episode_workers = workers.from_spec(run.workers)
    runner = rollout.EpisodeRunner(run.runner, engine, builders.env_factory(run.env), tokenizer, store,
                                   backend=episode_workers, pool_version=pool_version)
    return PolicyRunner(runner, engine, tokenizer, source, paths, episode_workers)


def eval_temperature(ev, k: int) -> float:
    """``eval.temperature`` (``ev``: the ``eval`` section), or 0.7 when k > 1 attempts would
    otherwise be greedy copies."""
    t = float(ev.temperature)
    return 0.7 if k > 1 and t == 0 else t


def evaluate_main(run, workdir, *, tasks: Sequence, checkpoint: str = "", harness: str = "",
                  k: int = 0, split: str = "selection", out: str = "") -> dict:
    """Loads a policy (``rl.policy.policy_model``), evaluates it on ``tasks`` under ``harness`` (a spec file
    or registered name; '' = ``harness.spec``) and writes a results JSON. Returns the results.
    ``run``: the resolved ``train.spec.RunSpec`` (the entry point resolves the config, with the
    test split allowed)."""
    ev = run.loop.eval
    k = int(k or ev.k)
    temperature = eval_temperature(ev, k)
    pr = policy_runner(run, workdir, checkpoint=checkpoint)
    h = rollout.base_harness(run, spec=harness or None)
    try:
        res = evaluate_tasks(pr.runner, tasks, h, k=k, temperature=temperature, tag=f"eval-{split}",
                             console=console_lib.Console(run.loop.log.progress_bar))
    finally:
        pr.close()
    res.update(split=split, k=k, temperature=temperature, policy=pr.policy, harness=harness or run.harness.spec or "H0",
               env=run.env.name, config_name=run.name)
    path = resolve(out) if out else pr.paths.root / f"eval_{split}.json"
    workdir_lib.write_json(path, res)
    logging.info("wrote %s", path)
    return res


def evaluate_command(config, workdir, *, split: str = "selection", num_tasks: int = 0, routing: str = "h0",
                     checkpoint: str = "", harness: str = "", k: int = 0, pool: str = "", out: str = "") -> dict:
    """What ``launch/evaluate.py`` runs: resolves the config (the test split allowed), draws the
    tasks (the sealed test split is opened here, by this entry point, only), and evaluates them
    under H0 (``evaluate_main``) or a method's routing (``train.extensions.routing``, e.g.
    Harness-S's ``rank1``)."""
    run = spec_lib.resolve(config, allow_test_split=True)
    n = num_tasks or run.loop.eval.num_tasks
    if split == "test":
        with registry.sealed_test_access(f"launch/evaluate.py checkpoint={checkpoint or 'config'}"):
            tasks = builders.load_tasks(run.env, "test", n)   # a list: made inside the seal
    else:
        tasks = builders.load_tasks(run.env, split, n)
    if routing == "h0":
        return evaluate_main(run, workdir, tasks=tasks, checkpoint=checkpoint, split=split, harness=harness,
                             k=k, out=out)
    return extensions.routing(routing)(run, workdir, tasks=tasks, checkpoint=checkpoint, k=k, split=split,
                                       out=out, pool=pool)


def _tokenizer(run, checkpoint: str, paths):
    """The checkpoint's own tokenizer (an exported HF dir, or a training workdir's task BPE), else
    the run's."""
    if checkpoint:
        c = resolve(checkpoint)
        if (c / "tokenizer.json").exists():
            return load_tokenizer(str(c))
        if (c / "tokenizer" / "tokenizer.json").exists():
            return task_tokenizer.load(c / "tokenizer")
    return rollout.load_tokenizer(run, paths.tokenizer)
