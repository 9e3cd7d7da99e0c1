"""Δ_B evaluations on episode workers (``harness_jax.harness.workers``).

Each GRPO step reruns the frozen target K x n times per packet; the evaluations are independent,
so they spread over workers: local processes (the default) or Ray actors, the same worker
mechanism the executor's episodes use. ``EvaluationPool`` sends each patch to a worker, which
builds the target ONCE from its ``TargetSpec`` (HTTP targets get their own client; a ``jax``
target loads its weights in every worker, so serve big targets over HTTP instead:
``EngineServer`` or SGLang) and runs ``reward.aevaluate_patch`` there, sharing the on-disk
``RewardCache`` (file-locked) with the other workers. The baseline travels without its
trajectories (only the rewards and the rerun recipe).

A worker that dies takes its in-flight evaluations with it: they come back as infrastructure
failures (``complete=False, infra_error=True``, never scored) and the pool starts a new worker.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any, Optional, Sequence

from harness_jax.envs.base import Task
from harness_jax.harness import workers
from harness_jax.harness_r1.baseline import Baseline
from harness_jax.harness_r1.reward import PatchEvaluation
from harness_jax.harness_r1.targets import TargetSpec
from harness_jax.harness_r1.reward import RewardCache, aevaluate_patch
from harness_jax.sampling.tokenizer import load_tokenizer

log = logging.getLogger(__name__)


def _worker_state(setup: tuple) -> dict:
    spec, tokenizer_path, cache_dir = setup
    tok = load_tokenizer(tokenizer_path) if tokenizer_path else load_tokenizer()
    return {"tokenizer": tok, "target": TargetSpec.from_dict(spec).build(tok),
            "cache": RewardCache(cache_dir) if cache_dir else None}


async def _evaluate_job(ctx: workers.WorkerContext, setup: workers.Ref, patch: Any,
                        env_name: str, tasks: list, baseline: dict, options: dict) -> dict:
    """Worker job: one patch's Δ_B on the worker's own copy of the target."""
    st = ctx.cached(setup.key, lambda: _worker_state(ctx.resident(setup)))
    ev = await aevaluate_patch(patch, env_name, st["target"], tasks,
                               Baseline.from_summary(baseline), cache=st["cache"],
                               tokenizer=st["tokenizer"], **options)
    return ev.to_dict()


class EvaluationPool:
    """Patches evaluated against one frozen target on episode workers (module docstring).

    ``workers``/``backend``/``slots`` start a private ``WorkerPool`` (``slots``: evaluations in
    flight per worker; each runs its episodes concurrently); or pass ``pool=`` to share an
    existing ``WorkerPool`` (it is then left running on ``close``).
    """

    def __init__(self, target: TargetSpec, workers: int = 2, *,
                 tokenizer_path: Optional[str] = None, cache_dir: Optional[str] = None,
                 backend: str = "processes", slots: int = 1, pool=None, **pool_kw):
        if isinstance(target, dict):
            target = TargetSpec.from_dict(target)
        if not isinstance(target, TargetSpec):
            raise TypeError("EvaluationPool: give the target as a TargetSpec (each worker "
                            f"process rebuilds it), got {type(target).__name__}")
        if workers < 1:
            raise ValueError(f"EvaluationPool.workers must be >= 1, got {workers}")
        self.spec = target
        self._own = pool is None
        self.pool = pool if pool is not None else _make_pool(backend, workers, slots, pool_kw)
        self.workers = int(getattr(self.pool, "workers", workers))
        self._setup = self.pool.share((target.to_dict(), tokenizer_path, cache_dir))
        self._loop = asyncio.new_event_loop()   # resolves futures for sync callers
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="evaluation-pool")
        self._thread.start()
        self.submitted = 0
        self.lost = 0

    def submit(self, patch: Any, env_name: str, tasks: Sequence[Task], baseline: Baseline,
               **options) -> concurrent.futures.Future:
        """Evaluates one patch in a worker; the future resolves to a ``PatchEvaluation``."""
        self.submitted += 1
        return asyncio.run_coroutine_threadsafe(
            self._evaluate(patch, env_name, list(tasks), baseline.summary(), options), self._loop)

    async def _evaluate(self, patch, env_name, tasks, baseline: dict, options) -> PatchEvaluation:
        try:
            out = await self.pool.run(_evaluate_job, self._setup, patch, env_name, tasks,
                                      baseline, options)
        except workers.WorkerLost as e:
            self.lost += 1
            return PatchEvaluation(0.0, True, False, [f"evaluation worker died: {e} "
                                                      "(infrastructure; not scored)"],
                                   infra_error=True)
        return PatchEvaluation(**out)

    def evaluate(self, patches: Sequence[Any], env_name: str, tasks: Sequence[Task],
                 baseline: Baseline, **options) -> list[PatchEvaluation]:
        futs = [self.submit(p, env_name, tasks, baseline, **options) for p in patches]
        return [f.result() for f in futs]

    def close(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if self._own:
            self.pool.close()
        else:
            self.pool.drop(self._setup)

    def __enter__(self) -> "EvaluationPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _make_pool(backend: str, n: int, slots: int, kw: dict):
    if backend == "inprocess":
        raise ValueError("EvaluationPool runs on worker processes or Ray actors; for in-process "
                         "evaluation call evaluate_group without a pool")
    return workers.create(backend, n, slots, **kw)
