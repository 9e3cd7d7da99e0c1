"""Evaluation under a harness (the base harness H0 by default): success, Pass@k, Avg@k, greedy
success and per-task outcomes, every evaluation on the same random numbers (``EVAL_SAMPLING_SEED``),
and the paired comparison of two results (``compare_results``).

Used periodically by the training loop (``selection`` split) and by ``launch/evaluate.py``
(any checkpoint or HF directory, any harness, any split; the entry point itself loads the sealed
test split, this module never does). Evaluation needs a model, never a learner or optimizer
state: ``rl.policy.policy_model`` loads one from an HF directory, a training run's Orbax checkpoint (its
parameters only) or the config. Results are plain JSON-able dicts.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any, Sequence

from absl import logging

from harness_jax import scoring
from harness_jax.envs import registry
from harness_jax.harness import workers
from harness_jax.paths import resolve, weights_source
from harness_jax.rl import policy
from harness_jax.sampling.tokenizer import load_tokenizer
from harness_jax.train import builders, console as console_lib, extensions, rollout, spec as spec_lib, task_tokenizer
from harness_jax.train import workdir as workdir_lib

# Every evaluation samples attempt j of a task with seeds keyed by (EVAL_SAMPLING_SEED, task id, j,
# turn): never by the run, its seed, the evaluation's tag or the task's place in the list. Two
# evaluations of the same policy therefore give the same per-task outcomes, and two policies are
# compared on the same random numbers (a paired comparison, ``compare_results``).
EVAL_SAMPLING_SEED = 10_007
SAMPLING_KEYS = "task_id#attempt"      # recorded in every results dict; pairing checks it

def run_attempts(runner, tasks: Sequence, harness, *, k: int, temperature: float, tag: str,
                 console: console_lib.Console = console_lib.QUIET) -> list:
    """``k`` episodes per task (a list per task, in order) under ``harness`` (a spec or a Sibling,
    or a callable ``task -> harness`` choosing one per task), with a progress bar over tasks.
    Attempt ``j`` of a task samples with the seeds of ``(task id, j)`` (module constants), so
    the outcome of an attempt depends on the policy and the harness only."""
    bar = console.bar(len(tasks), tag)

    async def one(i, task):
        h = harness(task) if callable(harness) else harness
        eps = await runner.run(task, h, k, f"{tag}-{i}", seed=EVAL_SAMPLING_SEED, temperature=temperature,
                               sampling_key=task.task_id)
        bar.update(1)
        return eps

    async def all_tasks():
        return await asyncio.gather(*[one(i, t) for i, t in enumerate(tasks)])

    try:
        return asyncio.run(all_tasks())
    finally:
        bar.close()


def evaluate_tasks(runner, tasks: Sequence, harness, *, k: int = 1, temperature: float = 0.0,
                   tag: str = "eval", console: console_lib.Console = console_lib.QUIET, greedy: bool = False) -> dict:
    """Runs ``k`` attempts per task; returns success rate, pass@k / avg@k for k in {1, k} and the
    per-task outcomes. ``greedy``: also one greedy attempt per task (``greedy_success``; when
    the attempts are greedy already, the first attempt is it)."""
    if k > 1 and temperature == 0:
        raise ValueError("evaluate_tasks: k > 1 attempts need temperature > 0 (greedy attempts are identical)")
    t0 = time.perf_counter()
    per_task = run_attempts(runner, tasks, harness, k=k, temperature=temperature, tag=tag, console=console)
    greedy_per_task = None
    if greedy:
        greedy_per_task = (per_task if temperature == 0 else
                           run_attempts(runner, tasks, harness, k=1, temperature=0.0, tag=f"{tag}-greedy",
                                        console=console))
    out = summarize_attempts(tasks, per_task, k, greedy_per_task)
    out.update(temperature=float(temperature), time_s=time.perf_counter() - t0)
    return out


def _outcome(e):
    """1/0 for a scored attempt, None for an infrastructure error (never scored)."""
    return None if e.infra_error else int(bool(e.success))


def summarize_attempts(tasks: Sequence, per_task: Sequence, k: int, greedy_per_task: Sequence = None) -> dict:
    """Success rate, score, pass@k / avg@k for k in {1, k}, per category, turns and
    infrastructure errors of ``k`` attempts per task (infrastructure errors are not scored);
    ``greedy_success`` from ``greedy_per_task`` (one greedy attempt per task) when given;
    ``per_task``: each task's id, category and outcomes (``attempts``: 1/0, None = infrastructure
    error; ``greedy``), what paired comparisons and tables bootstrap over."""
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
           "infra_errors": sum(e.infra_error for eps in per_task for e in eps),
           "k": int(k), "sampling_seed": EVAL_SAMPLING_SEED, "sampling_keys": SAMPLING_KEYS}
    for kk, v in summ.pass_at.items():
        out[f"pass@{kk}"] = v
    for kk, v in summ.avg_at.items():
        out[f"avg@{kk}"] = v
    rows = [{"task_id": t.task_id, "category": t.category, "attempts": [_outcome(e) for e in eps]}
            for t, eps in zip(tasks, per_task)]
    if greedy_per_task is not None:
        scored = []
        for row, eps in zip(rows, greedy_per_task):
            row["greedy"] = _outcome(eps[0]) if eps else None
            if row["greedy"] is not None:
                scored.append(row["greedy"])
        out["greedy_success"] = scoring.success_rate(scored)
    out["per_task"] = rows
    return out


def per_task_values(res: dict, metric: str) -> dict:
    """``{task_id: value}`` of one results dict: ``metric`` ``"avg@k"`` (the mean of the task's
    scored attempts) or ``"greedy_success"`` (its greedy outcome); tasks without a scored
    outcome are left out."""
    if "per_task" not in res:
        raise ValueError("results without per-task outcomes (written before they were recorded); "
                         "evaluate the policy again")
    out = {}
    for row in res["per_task"]:
        if metric == "greedy_success":
            v = row.get("greedy")
            if v is not None:
                out[row["task_id"]] = float(v)
        else:
            att = [a for a in row.get("attempts", []) if a is not None]
            if att:
                out[row["task_id"]] = sum(att) / len(att)
    return out


def compare_results(res: dict, baseline: dict, *, samples: int = 10_000, level: float = 0.95) -> dict:
    """Paired comparison of two results dicts over the tasks both scored: for Avg@k and, when
    both have it, greedy success, the mean per-task difference ``res - baseline`` with its
    bootstrap interval over tasks (``scoring.paired_bootstrap``). Both must come from the
    same sampling (keys, seed, k, temperature), else the pairing would be meaningless."""
    for f in ("sampling_keys", "sampling_seed", "k", "temperature"):
        if res.get(f) != baseline.get(f):
            raise ValueError(f"compare_results: the results differ in {f!r} ({res.get(f)!r} vs "
                             f"{baseline.get(f)!r}); evaluate both with the same settings")
    k = int(res["k"])
    out = {"level": level, "samples": samples}
    for metric, name in ((f"avg@{k}", f"avg@{k}"), ("greedy_success", "greedy_success")):
        if metric == "greedy_success" and not ("greedy_success" in res and "greedy_success" in baseline):
            continue
        a, b = per_task_values(res, metric), per_task_values(baseline, metric)
        ids = [t for t in a if t in b]
        if not ids:
            raise ValueError("compare_results: the two results share no scored task")
        r = scoring.paired_bootstrap([a[t] for t in ids], [b[t] for t in ids], samples=samples, level=level)
        r["unpaired_tasks"] = len(set(a) ^ set(b))
        out[name] = r
    return out


def load_results(path: str) -> dict:
    """A results dict from ``path``: an evaluation JSON (``launch/evaluate.py``), or a training
    ``summary.json`` with ``#<tag>`` (e.g. ``summary.json#start``; without a tag, its last
    evaluation)."""
    file, _, tag = str(path).partition("#")
    d = json.loads(resolve(file).read_text())
    if "per_task" in d and not tag:
        return d
    evals = d.get("eval") if isinstance(d, dict) else None
    if not evals:
        raise ValueError(f"{path}: neither an evaluation JSON nor a training summary with evaluations")
    picked = [e for e in evals if not tag or e.get("tag") == tag]
    if not picked:
        raise ValueError(f"{path}: no evaluation tagged {tag!r}; tags: {[e.get('tag') for e in evals]}")
    return picked[-1]


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
    weights = weights_source(checkpoint) if checkpoint else weights_source(run.model.init_from, hf=False)
    model, source = policy.policy_model(run.model, weights, mesh, rules, seed=run.seed)
    r, log = run.rollout, run.loop.log
    engine, sync = rollout.build_engine(r, model, tokenizer, seed=run.seed, version=0, platform=run.mesh.platform,
                                        name=run.name)
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
                  k: int = 0, split: str = "selection", out: str = "", baseline: str = "") -> dict:
    """Loads a policy (``rl.policy.policy_model``), evaluates it on ``tasks`` under ``harness`` (a
    spec file or registered name; '' = ``harness.spec``) and writes a results JSON. Returns the
    results. ``run``: the resolved ``train.spec.RunSpec`` (the entry point resolves the config,
    with the test split allowed).

    ``baseline``: a second policy (a checkpoint, evaluated the same way on the same tasks and
    random numbers) or a results file (``load_results``); the results then carry the baseline's
    summary and ``paired``, the per-task differences of Avg@k and greedy success with their
    bootstrap intervals (``compare_results``). ``checkpoint`` may be a results file too (then
    nothing is evaluated for it)."""
    k = int(k or run.loop.eval.k)
    res = _results(run, workdir, checkpoint, tasks=tasks, harness=harness, k=k, split=split, tag=f"eval-{split}")
    if baseline:
        base = _results(run, workdir, baseline, tasks=tasks, harness=harness, k=k, split=split,
                        tag=f"eval-{split}-baseline")
        res["paired"] = compare_results(res, base)
        res["baseline"] = {f: v for f, v in base.items() if f != "per_task"}
        for metric, p in res["paired"].items():
            if isinstance(p, dict):
                logging.info("paired %s over %d tasks: %.4f - %.4f = %+.4f [%.4f, %+.4f] (%d%% interval)%s",
                             metric, p["n_tasks"], p["a"], p["b"], p["diff"], p["ci_low"], p["ci_high"],
                             round(100 * p["level"]), " excludes 0" if p["significant"] else "")
    path = resolve(out) if out else resolve(workdir) / f"eval_{split}.json"
    workdir_lib.write_json(path, res)
    logging.info("wrote %s", path)
    return res


def is_results_file(path: str) -> bool:
    """A results JSON (``name.json`` or ``summary.json#tag``), not a checkpoint."""
    return str(path).partition("#")[0].endswith(".json")


def _results(run, workdir, checkpoint: str, *, tasks, harness: str, k: int, split: str, tag: str) -> dict:
    """The results of ``checkpoint``: read from a results file, or evaluated."""
    if checkpoint and is_results_file(checkpoint):
        res = load_results(checkpoint)
        res.setdefault("policy", f"results:{checkpoint}")
        return res
    ev = run.loop.eval
    temperature = eval_temperature(ev, k)
    pr = policy_runner(run, workdir, checkpoint=checkpoint)
    h = rollout.base_harness(run, spec=harness or None)
    try:
        res = evaluate_tasks(pr.runner, tasks, h, k=k, temperature=temperature, tag=tag,
                             console=console_lib.Console(run.loop.log.progress_bar), greedy=bool(ev.greedy))
    finally:
        pr.close()
    res.update(split=split, policy=pr.policy, harness=harness or run.harness.spec or "H0",
               env=run.env.name, config_name=run.name)
    return res


def evaluate_command(config, workdir, *, split: str = "selection", num_tasks: int = 0, routing: str = "h0",
                     checkpoint: str = "", harness: str = "", k: int = 0, pool: str = "", out: str = "",
                     baseline: str = "") -> dict:
    """What ``launch/evaluate.py`` runs: resolves the config (the test split allowed), draws the
    tasks (the sealed test split is opened here, by this entry point, only), and evaluates them
    under H0 (``evaluate_main``; ``baseline``: the paired comparison) or a method's routing
    (``train.extensions.routing``, e.g. Harness-S's ``rank1``)."""
    run = spec_lib.resolve(config, allow_test_split=True)
    n = num_tasks or run.loop.eval.num_tasks
    if split == "test":
        with registry.sealed_test_access(f"launch/evaluate.py checkpoint={checkpoint or 'config'}"):
            tasks = builders.load_tasks(run.env, "test", n)   # a list: made inside the seal
    else:
        tasks = builders.load_tasks(run.env, split, n)
    if routing == "h0":
        return evaluate_main(run, workdir, tasks=tasks, checkpoint=checkpoint, split=split, harness=harness,
                             k=k, out=out, baseline=baseline)
    if baseline:
        raise ValueError("--baseline compares two policies under H0; use --routing=h0")
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
