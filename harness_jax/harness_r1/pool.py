"""Δ_B evaluations on a local pool of worker processes.

Each GRPO step reruns the frozen target K x n times per packet; the evaluations are independent,
so they spread over processes. ``EvaluationPool`` starts ``workers`` spawned processes (spawn:
no forked JAX/tokenizer state); each builds the target ONCE from its ``TargetSpec`` (HTTP
targets get their own client; a ``jax`` target loads its weights in every worker, so serve big
targets over HTTP instead: ``EngineServer`` or SGLang) and then evaluates patches sent to it
(``reward.aevaluate_patch``), sharing the on-disk ``RewardCache`` (file-locked) with the others.
The baseline travels without its trajectories (only the rewards and the rerun recipe).

A worker that dies takes its in-flight evaluations with it: they come back as infrastructure
failures (``complete=False, infra_error=True``, never scored) and the pool starts a new worker.
Issue "Experiments at scale" replaces this local pool by the executor's distributed backend.
"""
from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
from typing import Any, Optional, Sequence

from harness_jax.envs.base import Task
from harness_jax.harness_r1.baseline import Baseline
from harness_jax.harness_r1.reward import PatchEvaluation
from harness_jax.harness_r1.targets import TargetSpec

log = logging.getLogger(__name__)

_WORKER: dict = {}


def _init_worker(spec: dict, tokenizer_path: Optional[str], cache_dir: Optional[str]) -> None:
    from harness_jax.harness_r1.reward import RewardCache
    from harness_jax.sampling.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer_path) if tokenizer_path else load_tokenizer()
    _WORKER["tokenizer"] = tok
    _WORKER["target"] = TargetSpec.from_dict(spec).build(tok)
    _WORKER["cache"] = RewardCache(cache_dir) if cache_dir else None


def _evaluate_in_worker(patch: Any, env_name: str, tasks: list, baseline: dict,
                        options: dict) -> dict:
    import asyncio

    from harness_jax.harness_r1.reward import aevaluate_patch

    ts = [Task(t["env_name"], t["data"], t.get("split", "train"), t.get("category"))
          for t in tasks]
    ev = asyncio.run(aevaluate_patch(patch, env_name, _WORKER["target"], ts,
                                     Baseline.from_summary(baseline), cache=_WORKER["cache"],
                                     tokenizer=_WORKER["tokenizer"], **options))
    return ev.to_dict()


def _task_dict(t: Task) -> dict:
    return {"env_name": t.env_name, "data": t.data, "split": t.split, "category": t.category}


class EvaluationPool:
    """``workers`` processes evaluating patches against one frozen target (module docstring)."""

    def __init__(self, target: TargetSpec, workers: int = 2, *,
                 tokenizer_path: Optional[str] = None, cache_dir: Optional[str] = None):
        if isinstance(target, dict):
            target = TargetSpec.from_dict(target)
        if not isinstance(target, TargetSpec):
            raise TypeError("EvaluationPool: give the target as a TargetSpec (each worker "
                            f"process rebuilds it), got {type(target).__name__}")
        if workers < 1:
            raise ValueError(f"EvaluationPool.workers must be >= 1, got {workers}")
        self.spec = target
        self.workers = int(workers)
        self._args = (target.to_dict(), tokenizer_path, cache_dir)
        self._ex = self._start()
        self.submitted = 0
        self.lost = 0

    def _start(self) -> concurrent.futures.ProcessPoolExecutor:
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker, initargs=self._args)

    def submit(self, patch: Any, env_name: str, tasks: Sequence[Task], baseline: Baseline,
               **options) -> concurrent.futures.Future:
        """Evaluates one patch in a worker; the future resolves to a ``PatchEvaluation``."""
        self.submitted += 1
        out: concurrent.futures.Future = concurrent.futures.Future()
        try:
            inner = self._ex.submit(_evaluate_in_worker, patch, env_name,
                                    [_task_dict(t) for t in tasks], baseline.summary(), options)
        except concurrent.futures.process.BrokenProcessPool:
            self._restart()
            inner = self._ex.submit(_evaluate_in_worker, patch, env_name,
                                    [_task_dict(t) for t in tasks], baseline.summary(), options)

        def done(f: concurrent.futures.Future) -> None:
            try:
                out.set_result(PatchEvaluation(**f.result()))
            except concurrent.futures.process.BrokenProcessPool as e:
                self.lost += 1
                out.set_result(PatchEvaluation(
                    0.0, True, False, [f"evaluation worker died: {e} (infrastructure; not "
                                       "scored)"], infra_error=True))
            except Exception as e:  # noqa: BLE001 - reported to the caller
                out.set_exception(e)

        inner.add_done_callback(done)
        return out

    def evaluate(self, patches: Sequence[Any], env_name: str, tasks: Sequence[Task],
                 baseline: Baseline, **options) -> list[PatchEvaluation]:
        futs = [self.submit(p, env_name, tasks, baseline, **options) for p in patches]
        return [f.result() for f in futs]

    def _restart(self) -> None:
        log.warning("evaluation pool: a worker died; starting a new pool")
        try:
            self._ex.shutdown(wait=False, cancel_futures=True)
        finally:
            self._ex = self._start()

    def close(self) -> None:
        self._ex.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "EvaluationPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
