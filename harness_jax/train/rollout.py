"""The loop's side of rollouts: engine + weight sync, the episode runner over the harness
executor, the base harness, the trajectory store and the metrics writer.

Weight sync strategies (``build_engine`` returns the engine and a ``sync(learner, version)``):
* colocated (``JaxEngine``): a device-side copy of the learner's parameters is installed in place
  (the learner donates its state buffers each step, so the engine must not alias them);
* disaggregated (``SGLangClient``): ``qwen3_5.save_hf`` export to ``rollout.sync_dir/v<version>``
  then pause -> flush -> ``update_weights_from_disk`` -> continue on every server; the previous
  export is deleted once the servers have moved on.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import time
from typing import Callable, Optional

import numpy as np

from harness_jax.train import builders
from harness_jax.train.groups import Episode


def load_tokenizer(config, workdir: Optional[str] = None):
    """The Qwen3.5 tokenizer (or the HF checkpoint's own), or with ``model.tokenizer="task_bpe"``
    a small byte-level BPE trained on the environment's training text (see task_tokenizer)."""
    if config.model.tokenizer == "task_bpe":
        from harness_jax.train import task_tokenizer
        return task_tokenizer.load_or_train(config, workdir)
    from harness_jax.sampling.tokenizer import load_tokenizer as _load
    return _load(config.model.hf_path or None)


# ---------------------------------------------------------------------------------- engines
class ColocatedSync:
    """Installs the learner's current parameters into the embedded engine (device copy)."""

    def __init__(self, engine):
        self.engine = engine
        self.last_s = 0.0

    def __call__(self, learner, version: int) -> None:
        t0 = time.perf_counter()
        params = builders.copy_params(learner.state["params"])
        self.engine.update_weights(learner.model(params), version=int(version))
        self.last_s = time.perf_counter() - t0


class DiskSync:
    """Exports the policy as an HF directory and has every server load it."""

    def __init__(self, client, sync_dir: str):
        self.client = client
        self.sync_dir = sync_dir
        os.makedirs(sync_dir, exist_ok=True)
        self._prev: Optional[str] = None
        self.last_report = None

    def __call__(self, learner, version: int) -> None:
        out = os.path.join(self.sync_dir, f"v{int(version)}")
        rep = _run_coro(self.client.sync_model(learner.model(), out, weight_version=int(version)))
        self.last_report = rep
        if self._prev and self._prev != out:
            shutil.rmtree(self._prev, ignore_errors=True)
        self._prev = out


def _run_coro(coro):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    raise RuntimeError("weight sync is called from the learner thread, never inside an event loop")


def build_engine(config, learner, tokenizer, workdir: str):
    """(engine, sync) for the configured rollout mode; the engine starts at the learner's version."""
    r = config.rollout
    if r.mode == "colocated":
        from harness_jax.sampling import JaxEngine
        model = learner.model(builders.copy_params(learner.state["params"]))
        eos = _eos_ids(tokenizer)
        engine = JaxEngine(model, max_slots=r.max_slots, max_len=r.max_len, tokenizer=tokenizer,
                           eos_token_ids=eos, seed=config.seed, weight_version=learner.policy_version,
                           prefill_buckets=_prefill_buckets(r.max_len))
        return engine, ColocatedSync(engine)
    from harness_jax.sampling.sglang_client import SGLangClient
    client = SGLangClient(list(r.server_urls), max_concurrency=r.concurrency, timeout_s=r.request_timeout_s,
                          weight_version=learner.policy_version)
    sync = DiskSync(client, r.sync_dir or os.path.join(workdir, "weight_sync"))
    # servers may hold other weights: start every run from the learner's parameters
    sync(learner, learner.policy_version)
    return client, sync


def _prefill_buckets(max_len: int):
    return tuple(b for b in (32, 128, 512) if b < max_len) or (max_len // 2,)


def _eos_ids(tokenizer):
    from harness_jax.sampling.tokenizer import special_token_ids
    ids = special_token_ids(tokenizer)
    return (ids["<|im_end|>"], ids["<|endoftext|>"])


# ---------------------------------------------------------------------------------- metrics
class MetricsWriter:
    """Scalars to ``<workdir>/metrics.jsonl`` (one JSON object per step) and TensorBoard."""

    def __init__(self, workdir: str, tensorboard: bool = True):
        self.path = os.path.join(workdir, "metrics.jsonl")
        self._f = open(self.path, "a")
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter
            self._tb = SummaryWriter(os.path.join(workdir, "tb"))

    def write(self, step: int, scalars: dict) -> None:
        clean = {k: float(v) for k, v in scalars.items()
                 if isinstance(v, (int, float, np.floating, np.integer)) and np.isfinite(v)}
        self._f.write(json.dumps({"step": int(step), "time": time.time(), **clean}) + "\n")
        self._f.flush()
        if self._tb is not None:
            for k, v in clean.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def close(self) -> None:
        self._f.close()
        if self._tb is not None:
            self._tb.close()


def metrics_writer(config, workdir: str) -> MetricsWriter:
    return MetricsWriter(workdir, tensorboard=bool(config.log.tensorboard))


# ---------------------------------------------------------------------------------- harness
def base_harness(config, env_factory=None):
    """H0: the configured harness spec (file) or the default spec, with the run's limits."""
    from harness_jax.harness.specs import HarnessSpec

    spec = config.harness.spec
    if spec:
        if not os.path.exists(spec):
            raise FileNotFoundError(f"config.harness.spec={spec!r}: file not found; give a JSON/YAML "
                                    "harness spec or '' for the base harness")
        h = HarnessSpec.load(spec)
    else:
        from harness_jax.harness.presets import base_harness as preset_h0
        protocol = dict(config.env.kwargs).get("protocol", "function")
        h = preset_h0(config.env.name, protocol)      # the published protocol of the benchmark
    r = config.rollout
    rules = dataclasses.replace(h.rules, max_tokens_per_turn=int(r.max_new_tokens),
                                **({"max_turns": int(config.env.max_turns)} if config.env.max_turns > 0 else {}))
    memory = dataclasses.replace(h.memory, max_context_tokens=int(r.max_len))
    return dataclasses.replace(h, rules=rules, memory=memory, temperature=float(r.temperature),
                               top_p=float(r.top_p), top_k=int(r.top_k),
                               enable_thinking=bool(config.harness.thinking))


def with_temperature(harness, temperature: float):
    if temperature == harness.temperature:
        return harness
    if temperature == 0:
        return dataclasses.replace(harness, temperature=0.0, top_p=1.0, top_k=-1)
    return dataclasses.replace(harness, temperature=float(temperature))


def open_store(config, workdir: str):
    """The append-only trajectory store under ``<workdir>/traces`` (None if disabled)."""
    if not config.log.store_traces:
        return None
    from harness_jax.harness import store as store_lib
    return store_lib.TrajectoryStore(os.path.join(workdir, "traces"))


def to_episode(traj, task) -> Episode:
    segs = traj.to_token_segments()
    pv = min((s.policy_version for s in segs), default=int(traj.policy_version))
    return Episode(episode_id=traj.episode_id, task=task, harness_id=traj.harness_id,
                   reward=float(traj.reward or 0.0), success=bool(traj.success), segments=segs,
                   policy_version=int(pv), num_turns=len(traj.turns), infra_error=bool(traj.infra_error),
                   trajectory=traj)


class EpisodeRunner:
    """Runs ``n`` episodes of one task under one harness through the harness executor.

    Concurrency over all calls on one event loop is capped by ``rollout.concurrency``; the
    engine batches whatever is in flight. Episodes with infrastructure errors are returned
    flagged (the loop excludes them from groups and metrics).
    """

    def __init__(self, config, engine, env_factory, tokenizer, store=None):
        self.config = config
        self.engine = engine
        self.env_factory = env_factory
        self.tokenizer = tokenizer
        self.store = store
        self._sems: dict = {}

    def _sem(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._sems.get(id(loop))
        if sem is None or self._sems.get(("loop", id(loop))) is not loop:
            sem = asyncio.Semaphore(int(self.config.rollout.concurrency))
            self._sems = {id(loop): sem, ("loop", id(loop)): loop}
        return sem

    async def run(self, task, harness, n: int, group_id: str, *, seed: int = 0, engine=None,
                  temperature: Optional[float] = None, store: bool = True) -> list[Episode]:
        from harness_jax.harness.executor import Executor, ExecutorConfig

        h = harness if temperature is None else with_temperature(harness, temperature)
        ex = Executor(engine or self.engine, self.env_factory, h, tokenizer=self.tokenizer,
                      config=ExecutorConfig(concurrency=max(n, 1), seed=int(seed)),
                      run_id=self.config.name, store=self.store if store else None,
                      env_name=self.config.env.name)
        sem = self._sem()

        async def one(j):
            async with sem:
                return await ex.run_episode(task, episode_id=f"{group_id}-{j}", group_id=group_id)

        trajs = await asyncio.gather(*[one(j) for j in range(n)])
        return [to_episode(t, task) for t in trajs]

    @property
    def rollout_fn(self) -> Callable:
        """For group post-processors: ``await rollout_fn(task, harness, n, group_id)``."""
        async def fn(task, harness, n, group_id, **kw):
            return await self.run(task, harness, n, group_id, **kw)
        return fn
