"""Evolving a frozen sibling pool with the current policy: what ``launch/evolve.py`` runs.

    from harness_jax.harness_s import evolve_run
    summary = evolve_run.evolve_main(config, workdir, checkpoint=RUN_DIR)   # resolves the config

1. The policy of ``checkpoint`` (an HF directory, a training workdir or checkpoints dir; '' =
   the config's model) goes on the configured engine (``train.evaluation.policy_runner``: the
   embedded JAX engine, or SGLang servers that get the weights).
2. H0 is the run's base harness (``train.rollout.base_harness``: the same H0 the training loop
   rescues). Training tasks are fresh (``env.train_split`` with ``harness_s.evolve.seed_offset``,
   disjoint from the SFT demonstrations and the GRPO stream); validation tasks are
   ``harness_s.validation`` (split, number, ``k`` attempts per task, temperature).
3. ``harness_s.evolve`` runs with the configured editor (deterministic operators offline; the
   LLM editor and diagnoser through ``harness_s.llm``), every sibling through the runner (the
   run's sampling settings, one overlay worker pool per sibling).
4. The pool is frozen (``pool-<hash>.json`` + ``.md`` report) in ``harness_s.evolve.out_dir``
   (default ``<workdir>/pool``); ``<workdir>/evolve/summary.json`` names it.

Nothing finished is lost: every rollout (a sibling on a task list, with its attempts, policy and
temperature) is kept in ``<workdir>/evolve/rollouts/`` as it completes, and each generation's
log is appended to ``<workdir>/evolve/generations.jsonl``. Running the same command again replays
the finished rollouts from there (evolution is deterministic given them; the LLM roles answer
from the response cache, ``<workdir>/evolve/llm_cache`` unless ``harness_s.llm.cache_dir`` is
set) and continues where the first run stopped. All of it runs inside
``registry.training_scope``: the sealed test split is never opened.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from typing import Optional, Sequence


from harness_jax.harness.siblings import Sibling
from harness_jax.harness.trajectory import Trajectory
from harness_jax.config_problems import ConfigValidationError, Problem
from harness_jax.envs import registry
from harness_jax.harness_s.coverage import joint_coverage
from harness_jax.harness_s.editors import make_editor
from harness_jax.harness_s.evolve import EvolutionConfig, evolve
from harness_jax.harness_s.rootcause import LLMDiagnoser
from harness_jax.harness_s.training import llm_client
from harness_jax.train import builders, console as console_lib, evaluation, rollout as rollout_lib, spec


class RolloutCache:
    """Finished rollouts on disk, one JSON file per (sibling, tasks, attempts, policy, temperature)."""

    def __init__(self, directory: str):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.hits = self.misses = 0

    @staticmethod
    def key(sibling_id: str, task_ids: Sequence[str], n: int, policy: str, temperature: float) -> str:
        text = json.dumps([sibling_id, list(task_ids), int(n), policy, float(temperature)])
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def get(self, key: str) -> Optional[list[Trajectory]]:
        path = os.path.join(self.directory, key + ".json")
        if not os.path.exists(path):
            self.misses += 1
            return None
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        self.hits += 1
        return [Trajectory.from_dict(d) for d in data]

    def put(self, key: str, trajs: Sequence[Trajectory]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump([t.to_dict() for t in trajs], f, default=str)
        os.replace(tmp, os.path.join(self.directory, key + ".json"))


def policy_rollout(runner, *, val_ids: set, k: int, train_attempts: int, temperature: float,
                   policy: str, cache: Optional[RolloutCache] = None,
                   console: console_lib.Console = console_lib.QUIET):
    """Evolution's ``rollout(sibling, tasks)`` over an ``EpisodeRunner``: ``k`` attempts per
    validation task, ``train_attempts`` per training task, through ``cache`` when given."""
    def rollout(sib: Sibling, tasks) -> list[Trajectory]:
        ids = [t.task_id for t in tasks]
        n = k if ids and all(i in val_ids for i in ids) else train_attempts
        key = RolloutCache.key(sib.sibling_id, ids, n, policy, temperature)
        got = cache.get(key) if cache is not None else None
        if got is not None:
            return got
        tag = f"evolve-{'val' if n == k and set(ids) <= val_ids else 'train'}-{sib.sibling_id[:10]}"
        per = evaluation.run_attempts(runner, tasks, sib, k=n, temperature=temperature, tag=tag, console=console)
        trajs = [e.trajectory for eps in per for e in eps]
        if cache is not None:
            cache.put(key, trajs)
        return trajs
    return rollout


def evolution_config(run, policy_version: str) -> EvolutionConfig:
    """Evolution's settings from the run (``train.spec.RunSpec``) and its ``harness_s`` section."""
    e = run.method("harness_s").evolve
    return EvolutionConfig(
        env_name=run.env.name, protocol=run.env.protocol, max_generations=int(e.max_generations),
        max_child_evaluations=int(e.max_child_evaluations), parents_per_generation=int(e.parents_per_generation),
        max_directions=int(e.max_directions), children_per_direction=int(e.children_per_direction),
        min_failures=int(e.min_failures), min_val_solved=int(e.min_val_solved), policy_version=policy_version)


def resolve_for_evolution(config):
    """The run's specs, with every problem except that the pool this command is about to write
    need not exist yet."""
    if "harness_s" not in config:
        raise ConfigValidationError([Problem("harness_s", None, "launch/evolve.py needs a Harness-S config",
                                             "use a config from experiments/configs/harness_s/")])
    run, problems = spec.resolve_with_problems(config)
    problems = [p for p in problems if not (p.path == "harness_s.pool" and not config.harness_s.pool)]
    if problems:
        raise ConfigValidationError(problems)
    return run


def evolve_main(config, workdir, *, checkpoint: str = "", out_dir: str = "") -> dict:
    """Evolves and freezes a pool (module docstring); returns the summary it writes."""
    run = resolve_for_evolution(config)
    console_lib.setup_logging(run.loop.log.library_level)
    console = console_lib.Console(run.loop.log.progress_bar)
    hs = run.method("harness_s")
    t0 = time.perf_counter()
    with registry.training_scope(f"{run.name}:evolve"):
        pr = evaluation.policy_runner(run, workdir, checkpoint=checkpoint)
        root = str(pr.paths.root)
        state_dir = os.path.join(root, "evolve")
        try:
            v, e = hs.validation, hs.evolve
            train_tasks = builders.load_tasks(run.env, run.env.train_split, n=int(e.num_train_tasks),
                                              seed_offset=int(e.seed_offset))
            val_tasks = builders.load_tasks(run.env, v.split, n=int(v.num_tasks))
            temperature = float(v.temperature) or float(run.rollout.temperature)
            cache = RolloutCache(os.path.join(state_dir, "rollouts"))
            rollout = policy_rollout(pr.runner, val_ids={t.task_id for t in val_tasks}, k=int(v.k),
                                     train_attempts=int(e.train_attempts), temperature=temperature,
                                     policy=pr.policy, cache=cache, console=console)
            client = None
            if e.editor != "deterministic" or e.diagnoser:
                client = llm_client(hs.llm, os.path.join(state_dir, "llm_cache"))
            llm_kw = {"temperature": float(hs.llm.temperature), "seed": int(hs.llm.seed)}  # the LLM editor's
            editor = make_editor(e.editor, client=client, **(llm_kw if client else {}))
            diagnoser = LLMDiagnoser(client, seed=int(hs.llm.seed)) if e.diagnoser else None
            cfg = evolution_config(run, pr.policy)
            bar = console.bar(cfg.max_generations, "evolve generations")
            gen_log = os.path.join(state_dir, "generations.jsonl")
            open(gen_log, "w").close()       # rewritten on a rerun (finished rollouts replay from the cache)

            def on_generation(glog):
                with open(gen_log, "a", encoding="utf-8") as f:
                    f.write(json.dumps(glog, default=str) + "\n")
                bar.update(1, accepted=glog["accepted"], coverage=glog["joint_coverage"])

            h0 = Sibling(rollout_lib.base_harness(run), name="H0")
            try:
                result = evolve(h0, train_tasks=train_tasks, val_tasks=val_tasks, rollout=rollout, editor=editor,
                                config=cfg, diagnoser=diagnoser, on_generation=on_generation)
            finally:
                bar.close()
            pool = result.freeze(out_dir or hs.evolve.out_dir or os.path.join(root, "pool"))
        finally:
            pr.close()
    solved = pool.solved()
    summary = {"pool": pool.path, "report": pool.path[:-5] + ".md", "content_hash": pool.content_hash,
               "siblings": len(pool), "policy": pr.policy, "stop_reason": result.stop_reason,
               "child_evaluations": result.child_evaluations, "rejected": len(result.rejected),
               "val_tasks": len(val_tasks), "train_tasks": len(train_tasks),
               "h0_solved": len(solved[pool.ids[0]]),
               "best_single_solved": max(len(x) for x in solved.values()),
               "joint_coverage": len(joint_coverage(solved, pool.ids)),
               "rollouts_replayed": cache.hits, "rollouts_run": cache.misses,
               "wall_s": time.perf_counter() - t0}
    with open(os.path.join(state_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    console.line(f"harness_s: pool {pool.path}: {len(pool)} siblings, H0 solves {summary['h0_solved']}/"
                 f"{len(val_tasks)} validation tasks, the pool jointly {summary['joint_coverage']} (best single "
                 f"{summary['best_single_solved']}); {result.stop_reason}")
    return summary
