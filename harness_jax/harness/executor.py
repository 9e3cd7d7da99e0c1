"""The token-exact multi-turn executor: a policy inside a harness (+ overlay) on an environment.

``Executor`` is an episode's life: attempts with bounded infrastructure retries, the trajectory
and its provenance, where the episode runs (here, or in an episode worker: ``harness.workers``)
and concurrency over many episodes. One attempt's turns are ``turns.TurnLoop`` (one method per
turn phase; its docstring describes a turn, the hook contexts and token exactness); the text the
harness writes and the parsing of replies are ``prompting``.

Sampling seeds: with ``ExecutorConfig.seed`` set, turn ``t`` of an episode samples with a seed
derived from ``(seed, sampling_key, t)``. The sampling key defaults to the episode id;
``run_episodes`` uses ``"<task_id>#<j>"`` for the j-th episode of a task, so two runs of the same
tasks (a Harness-R1 baseline and a patched rerun) sample each episode with the same seeds, and an
infrastructure retry replays the same seeds on a fresh environment.

Failures: an environment exception, ``info["infra_error"]``, an engine exception or an aborted
generation is an *infrastructure* error: the whole episode is retried with a fresh environment up
to ``infra_retries`` times; if it still fails the trajectory is flagged ``infra_error`` and is
excluded from training and metrics (never a task failure). A failing hook only loses its effect.
An environment failure on an action a HOOK supplied (rewritten or forced) is the overlay's doing:
the episode ends as a task failure (status ``hook_action_error``), never as infrastructure, so an
overlay cannot take an episode out of its own grade (``turns``).
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from typing import Callable, Optional, Sequence, Union

from harness_jax.envs.base import Env, Task
from harness_jax.harness import workers
from harness_jax.harness.hooks import EFFECT_SURFACES
from harness_jax.harness.overlay import Overlay
from harness_jax.harness.patches import Patch
from harness_jax.harness.siblings import Sibling
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness.trajectory import Trajectory
from harness_jax.harness.turns import InfraFailure, TurnLoop
from harness_jax.sampling.tokenizer import load_tokenizer
from harness_jax.sampling.types import RolloutEngine

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ExecutorConfig:
    infra_retries: int = 2          # extra attempts after an infrastructure failure
    concurrency: int = 64           # episodes in flight in run_episodes
    hook_timeout_s: float = 1.0
    overlay_workers: Optional[int] = None  # sandbox processes of an overlay built from a Patch (None: Overlay's default)
    # keep every hook context in the trajectory (inputs of the runtime no-op dry run for
    # cached baselines; O(turns^2) text, so off by default)
    record_hook_contexts: bool = False
    ctx_history_turns: int = 8      # turns of history given to hooks
    ctx_text_chars: int = 1200      # observation/action text cap inside hook contexts
    seed: Optional[int] = None      # base sampling seed (per turn: hash of seed, key, turn)
    # which hook effect kinds are honoured (hooks.honoured_kinds): "public" = the public
    # Harness-R1 runtime's per-benchmark surface, "contract" = every kind of the return
    # contracts; None = the method's default (the executor: "contract"; Harness-R1: "public")
    effect_surface: Optional[str] = None

    def __post_init__(self):
        if self.effect_surface is not None and self.effect_surface not in EFFECT_SURFACES:
            raise ValueError(f"ExecutorConfig.effect_surface={self.effect_surface!r}: use one of "
                             f"{EFFECT_SURFACES} (or None for the method's default)")
        if self.infra_retries < 0:
            raise ValueError("ExecutorConfig.infra_retries must be >= 0")
        if self.concurrency < 1:
            raise ValueError("ExecutorConfig.concurrency must be >= 1")


class Executor:
    """Runs episodes of ``harness`` (+ ``overlay``) with ``engine`` on environments from
    ``env_factory``. One executor may run many episodes concurrently (asyncio).

    ``harness`` may be a ``Sibling`` (a spec plus its own patch: Harness-S). Every trajectory
    records ``meta["sibling_id"]`` (a plain spec's is its harness id) and ``episode_meta``. An
    ``Overlay`` passed in is shared (its worker pool serves every executor it is given to); one
    built here from a patch is stopped by ``close()``."""

    def __init__(self, engine: RolloutEngine, env_factory: Callable[[], Env],
                 harness: Union[HarnessSpec, Sibling], tokenizer=None,
                 overlay: Union[None, Patch, Overlay] = None,
                 config: ExecutorConfig = ExecutorConfig(), run_id: str = "", store=None,
                 env_name: Optional[str] = None, backend=None,
                 episode_meta: Optional[dict] = None):
        if isinstance(harness, Sibling):    # a sibling is a spec plus its own overlay
            if overlay is not None:
                raise TypeError("Executor: give a Sibling (spec + its patch) or a spec and an "
                                "overlay, not a Sibling and an overlay")
            harness, overlay = harness.spec, harness.patch
        if not isinstance(harness, HarnessSpec):
            raise TypeError(f"harness must be a HarnessSpec or a Sibling, got {type(harness).__name__}")
        if tokenizer is None:
            tokenizer = load_tokenizer()
        self.engine = engine
        self.env_factory = env_factory
        self.harness = harness
        self.tokenizer = tokenizer
        self.config = config
        self.run_id = run_id
        self.store = store
        self.env_name = env_name
        self._owns_overlay = isinstance(overlay, Patch)   # built here: close() stops its workers
        if isinstance(overlay, Patch):
            overlay = Overlay(overlay, env_name=env_name or overlay.benchmark or None,
                              timeout_s=config.hook_timeout_s, workers=config.overlay_workers)
        self.overlay: Optional[Overlay] = overlay
        # episode workers (``harness.workers``): None / in-process runs episodes here
        self.backend = backend if getattr(backend, "remote", False) else None
        self._recipe: Optional[workers.Ref] = None
        self._remote_stats: dict[int, dict] = {}
        # which sibling produced the episodes (H0 and plain specs: the spec's id), plus the
        # caller's provenance (e.g. the Harness-S pool version), recorded in every trajectory
        self.sibling_id = Sibling(harness, overlay.patch if overlay is not None else None).sibling_id
        self.episode_meta = dict(episode_meta or {})
        self.turns = TurnLoop(engine, harness, tokenizer, overlay, config)   # one attempt's turns

    def close(self) -> None:
        """Stops the hook workers of the overlay this executor built from a patch (an
        ``Overlay`` passed in belongs to the caller, who may share it across executors) and
        releases what episode workers built for it."""
        if self.overlay is not None and self._owns_overlay:
            self.overlay.close()
        self.release()

    def release(self) -> None:
        """Drops what episode workers built for this executor (its executor copies and their
        hook workers); the executor stays usable (workers rebuild on the next episode)."""
        if self._recipe is not None:
            self.backend.drop(self._recipe)
            self._recipe = None

    # -- public API ----------------------------------------------------------------------------------
    async def run_episode(self, task: Task, episode_id: Optional[str] = None,
                          group_id: str = "", sampling_key: Optional[str] = None) -> Trajectory:
        """One episode with bounded infrastructure retries; always returns a trajectory.

        ``sampling_key`` (default: the episode id) keys the per-turn sampling seeds (module
        docstring); it is recorded in ``traj.meta["sampling_key"]``. With a remote ``backend``
        the episode runs in an episode worker (``_run_remote``).
        """
        episode_id = episode_id or f"ep-{uuid.uuid4().hex[:12]}"
        sampling_key = sampling_key or episode_id
        if self.backend is not None:
            return await self._run_remote(task, episode_id, group_id, sampling_key)
        async with _process_slot(self.env_name or task.env_name,
                                 getattr(self.env_factory, "process_concurrency", None)):
            return await self._run_local(task, episode_id, group_id, sampling_key)

    async def _run_local(self, task: Task, episode_id: str, group_id: str,
                         sampling_key: str) -> Trajectory:
        t_start = time.perf_counter()
        errors: list[str] = []
        for attempt in range(self.config.infra_retries + 1):
            traj = self._new_trajectory(task, episode_id, group_id, sampling_key)
            try:
                await asyncio.wait_for(
                    self.turns.attempt(self.env_factory, task, traj, f"{episode_id}/a{attempt}", sampling_key),
                    timeout=self.harness.rules.episode_timeout_s)
            except InfraFailure as e:
                errors.append(str(e))
                log.warning("episode %s attempt %d: infrastructure failure: %s", episode_id,
                            attempt, e)
                continue
            except asyncio.TimeoutError:
                traj.status = "time_limit"
                traj.success = False
                traj.reward = 0.0
                versions = [v for seg in traj.segments for v in seg.policy_versions]
                traj.policy_version = min(versions) if versions else 0
                traj.errors.append(f"episode exceeded {self.harness.rules.episode_timeout_s}s")
            traj.infra_attempts = attempt
            traj.errors = errors + traj.errors
            break
        else:
            traj = self._infra_trajectory(traj, errors)
        traj.hook_stats = self.overlay.stats_dict() if self.overlay else {}
        return self._finish(traj, t_start)

    def _new_trajectory(self, task: Task, episode_id: str, group_id: str,
                        sampling_key: str) -> Trajectory:
        return Trajectory(episode_id=episode_id, task_id=task.task_id, env_name=task.env_name,
                          harness_id=self.harness.harness_id,
                          overlay_id=self.overlay.overlay_id if self.overlay else "",
                          group_id=group_id, run_id=self.run_id,
                          meta={"harness_name": self.harness.name, "split": task.split,
                                "category": task.category, "sampling_key": sampling_key,
                                "sampling_seed": self.config.seed,
                                "sibling_id": self.sibling_id, **self.episode_meta})

    def _infra_trajectory(self, traj: Trajectory, errors: list[str]) -> Trajectory:
        """Every attempt failed on infrastructure: flagged, never scored or trained on."""
        traj.infra_error = True
        traj.status = "infra_error"
        traj.success = None
        traj.reward = 0.0
        traj.infra_attempts = self.config.infra_retries + 1
        traj.errors = list(errors)
        traj.segments = []
        return traj

    def _finish(self, traj: Trajectory, t_start: float) -> Trajectory:
        traj.timings["episode_s"] = time.perf_counter() - t_start
        if self.store is not None:
            self.store.append(traj)
        return traj

    # -- episode workers ---------------------------------------------------------------------------
    def _recipe_ref(self) -> "workers.Ref":
        """What a worker needs to rebuild this executor, shared once per worker."""
        if self._recipe is None:
            ov = self.overlay
            recipe = _Recipe(
                env_factory=self.env_factory, harness=self.harness,
                patch=ov.patch if ov is not None else None,
                overlay_env=ov.env_name if ov is not None else None,
                overlay_timeout_s=ov.timeout_s if ov is not None else self.config.hook_timeout_s,
                overlay_workers=ov.workers if ov is not None else None,
                config=self.config, run_id=self.run_id, env_name=self.env_name,
                tokenizer=self.backend.share(self.tokenizer), episode_meta=self.episode_meta)
            self._recipe = self.backend.share(recipe, deps=(recipe.tokenizer,))
        return self._recipe

    async def _run_remote(self, task: Task, episode_id: str, group_id: str,
                          sampling_key: str) -> Trajectory:
        """The episode in a worker (which retries environment/engine failures itself). A lost
        worker is an infrastructure failure too: the episode is rerun, with the same sampling
        key, up to ``infra_retries`` times, then flagged ``infra_error``."""
        t_start = time.perf_counter()
        limit = getattr(self.env_factory, "process_concurrency", None)
        limit = (f"env:{self.env_name or task.env_name}", int(limit)) if limit else None
        lost: list[str] = []
        for _ in range(self.config.infra_retries + 1):
            try:
                traj, stats, wid = await self.backend.run(
                    _remote_episode, self._recipe_ref(), task, episode_id, group_id,
                    sampling_key, engine=self.engine, limit=limit)
            except workers.WorkerLost as e:
                lost.append(f"episode worker lost: {e}")
                log.warning("episode %s: %s", episode_id, e)
                continue
            self._merge_hook_stats(wid, stats)
            traj.meta["worker"] = wid
            traj.infra_attempts += len(lost)
            traj.errors = lost + traj.errors
            traj.meta["workers_lost"] = len(lost)
            break
        else:
            traj = self._infra_trajectory(
                self._new_trajectory(task, episode_id, group_id, sampling_key), lost)
            traj.meta["workers_lost"] = len(lost)
        return self._finish(traj, t_start)

    def _merge_hook_stats(self, worker_id: int, stats: dict) -> None:
        """The overlay's counters here = the sum of every worker's counters for this executor."""
        if self.overlay is None:
            return
        self._remote_stats[worker_id] = stats
        total: dict = collections.defaultdict(collections.Counter)
        for per in self._remote_stats.values():
            for hook, counts in per.items():
                total[hook].update(counts)
        self.overlay.stats = total

    async def run_episodes(self, tasks: Sequence[Task], n_per_task: int = 1,
                           group_prefix: str = "") -> list[Trajectory]:
        """``n_per_task`` episodes of every task, concurrently; one group id per task; the j-th
        episode of a task samples with key ``"<task_id>#<j>"``."""
        if n_per_task < 1:
            raise ValueError(f"n_per_task must be >= 1, got {n_per_task}")
        return await self.run_samples([(t, f"{t.task_id}#{j}") for t in tasks
                                       for j in range(n_per_task)], group_prefix)

    async def run_samples(self, samples: Sequence[tuple[Task, str]],
                          group_prefix: str = "") -> list[Trajectory]:
        """One episode per ``(task, sampling_key)``, concurrently (``config.concurrency``), in
        order; one group id per task. Rerunning the keys of earlier trajectories
        (``traj.meta["sampling_key"]``) pairs each new episode with the old one."""
        sem = asyncio.Semaphore(self.config.concurrency)

        async def one(task: Task, key: str) -> Trajectory:
            async with sem:
                gid = f"{group_prefix}{task.task_id}"
                return await self.run_episode(task, episode_id=f"{gid}-{uuid.uuid4().hex[:8]}",
                                              group_id=gid, sampling_key=key)

        return list(await asyncio.gather(*(one(t, k) for t, k in samples)))


_PROCESS_SLOTS: dict[str, threading.Semaphore] = {}
_PROCESS_SLOTS_LOCK = threading.Lock()


@contextlib.asynccontextmanager
async def _process_slot(family: Optional[str], limit: Optional[int]):
    """At most ``limit`` episodes of ``family`` at once in this process, across event loops and
    threads (``Env.process_concurrency``: engines that are not thread-safe, e.g. ALFWorld)."""
    if not limit:
        yield
        return
    with _PROCESS_SLOTS_LOCK:
        sem = _PROCESS_SLOTS.setdefault(f"{family}/{limit}", threading.Semaphore(int(limit)))
    while not sem.acquire(blocking=False):   # polling never ties up the to_thread executor
        await asyncio.sleep(0.005)
    try:
        yield
    finally:
        sem.release()


@dataclasses.dataclass(frozen=True)
class _Recipe:
    """An executor as shipped to episode workers (the engine stays with the driver)."""

    env_factory: Callable
    harness: HarnessSpec
    patch: Optional[Patch]
    overlay_env: Optional[str]
    overlay_timeout_s: float
    overlay_workers: Optional[int]
    config: ExecutorConfig
    run_id: str
    env_name: Optional[str]
    tokenizer: "workers.Ref"
    episode_meta: dict = dataclasses.field(default_factory=dict)


async def _remote_episode(ctx: "workers.WorkerContext", recipe: "workers.Ref", task: Task,
                          episode_id: str, group_id: str, sampling_key: str):
    """Worker job: one episode on the worker's executor for ``recipe`` (built once per worker,
    generation proxied to the driver). Returns the trajectory, the worker's overlay counters
    for this executor and the worker id."""
    def build() -> Executor:
        r: _Recipe = ctx.resident(recipe)
        overlay = None
        if r.patch is not None:
            overlay = Overlay(r.patch, env_name=r.overlay_env, timeout_s=r.overlay_timeout_s,
                              workers=r.overlay_workers)
        return Executor(ctx.engine(), r.env_factory, r.harness,
                        tokenizer=ctx.resident(r.tokenizer), overlay=overlay, config=r.config,
                        run_id=r.run_id, env_name=r.env_name, episode_meta=r.episode_meta)

    ex = ctx.cached(recipe.key, build)
    traj = await ex.run_episode(task, episode_id=episode_id, group_id=group_id,
                                sampling_key=sampling_key)
    return traj, (ex.overlay.stats_dict() if ex.overlay else {}), ctx.worker_id


async def run_episode(engine: RolloutEngine, env_factory: Callable[[], Env], task: Task,
                      harness: Union[HarnessSpec, Sibling],
                      overlay: Union[None, Patch, Overlay] = None, *,
                      tokenizer=None, config: ExecutorConfig = ExecutorConfig(),
                      episode_id: Optional[str] = None, group_id: str = "", run_id: str = "",
                      store=None, backend=None) -> Trajectory:
    """Runs one episode (see ``Executor``; ``backend``: episode workers, None = here)."""
    ex = Executor(engine, env_factory, harness, tokenizer=tokenizer, overlay=overlay,
                  config=config, run_id=run_id, store=store, env_name=task.env_name,
                  backend=backend)
    try:
        return await ex.run_episode(task, episode_id=episode_id, group_id=group_id)
    finally:
        ex.close()          # stops the workers of an overlay it built from a patch


async def run_episodes(engine: RolloutEngine, env_factory: Callable[[], Env],
                       tasks: Sequence[Task], harness: Union[HarnessSpec, Sibling],
                       overlay: Union[None, Patch, Overlay] = None, *, n_per_task: int = 1,
                       tokenizer=None, config: ExecutorConfig = ExecutorConfig(),
                       run_id: str = "", store=None, backend=None) -> list[Trajectory]:
    """Runs ``n_per_task`` episodes of each task concurrently on one engine (``backend``:
    episode workers, None = here)."""
    env_name = tasks[0].env_name if tasks else None
    ex = Executor(engine, env_factory, harness, tokenizer=tokenizer, overlay=overlay,
                  config=config, run_id=run_id, store=store, env_name=env_name, backend=backend)
    try:
        return await ex.run_episodes(tasks, n_per_task=n_per_task)
    finally:
        ex.close()
