"""The loop's side of rollouts: the tokenizer, the engine and its weight sync, the base harness,
the episode runner over the harness executor and the trajectory store.

Weight sync (``build_engine`` returns the engine and a ``sync(model, version)``):
* colocated (``JaxEngine``): the given model (the caller passes a copy of the learner's
  parameters: the learner donates its state buffers every step) becomes the engine's serving
  copy (compute dtype, ``rollout.serve_tensor_parallel`` layout; ``sampling.serving``);
* disaggregated (``SGLangClient``): by ``rollout.sync_method``: a bf16 export to
  ``<sync_dir>/v<version>`` (memory-backed by default) then pause -> flush ->
  ``update_weights_from_disk`` -> continue on every server, or the distributed / tensor
  transports (``sampling.sglang_sync``); the previous export is deleted once the servers have
  moved on.
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import threading
import time
from typing import Callable, Optional

from harness_jax.harness import presets, sandbox, store as store_lib
from harness_jax.harness.executor import Executor
from harness_jax.harness.overlay import Overlay
from harness_jax.harness.siblings import Sibling
from harness_jax.sampling import JaxEngine, SGLangClient, tokenizer as tokenizer_lib, weight_sync
from harness_jax.rl import policy
from harness_jax.train import task_tokenizer
from harness_jax.train.groups import Episode


# -------------------------------------------------------------------------------- tokenizers
def _qwen_tokenizer(run, tokenizer_dir):
    return tokenizer_lib.load_tokenizer(run.model.hf_path or None, cache_dir=run.model.tokenizer_cache_dir or None)


TOKENIZERS = {                            # model.tokenizer -> loader(run, tokenizer_dir)
    "qwen": _qwen_tokenizer,              # the Qwen3.5 vocabulary (or hf_path's own)
    "task_bpe": task_tokenizer.load_or_train,  # a small BPE trained on the environment's train text
}


def load_tokenizer(run, tokenizer_dir=None):
    """The policy's tokenizer (``model.tokenizer``, ``TOKENIZERS``); ``task_bpe`` keeps the one
    it trains in ``tokenizer_dir`` (see ``task_tokenizer``). ``run``: ``train.spec.RunSpec``."""
    return TOKENIZERS[run.model.tokenizer](run, tokenizer_dir)


# ---------------------------------------------------------------------------------- engines
class ColocatedSync:
    """Installs a model in the embedded engine (a device copy of the learner's parameters)."""

    def __init__(self, engine):
        self.engine = engine
        self.last_s = 0.0

    def __call__(self, model, version: int) -> None:
        t0 = time.perf_counter()
        self.engine.update_weights(model, version=int(version))
        self.last_s = time.perf_counter() - t0


class ServerSync:
    """Sends the policy to every server (``SGLangClient.sync_model``: the configured transport, a
    bf16 export to ``sync_dir`` when it is disk or the servers lack the others)."""

    def __init__(self, client, sync_dir: str):
        self.client = client
        self.sync_dir = sync_dir
        self._prev: Optional[str] = None
        self.last_report = None

    def __call__(self, model, version: int) -> None:
        os.makedirs(self.sync_dir, exist_ok=True)
        out = os.path.join(self.sync_dir, f"v{int(version)}")
        rep = _run_coro(self.client.sync_model(model, out, weight_version=int(version)))
        self.last_report = rep
        if rep.method == "disk" and self._prev and self._prev != out:
            shutil.rmtree(self._prev, ignore_errors=True)
        self._prev = out if rep.method == "disk" else self._prev


def _run_coro(coro):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    raise RuntimeError("weight sync is called from the learner thread, never inside an event loop")


def _colocated(r, model, tokenizer, *, seed: int, version: int, platform: str, name: str):
    engine = JaxEngine(model, max_slots=r.max_slots, max_len=r.max_len, tokenizer=tokenizer,
                       eos_token_ids=_eos_ids(tokenizer), seed=seed, weight_version=version,
                       prefill_buckets=prefill_buckets(r.prefill_buckets, r.max_len),
                       decode_steps=r.decode_steps, cache_dtype=cache_dtype(r.cache_dtype, platform),
                       cache_kind=r.cache_kind, page_size=r.page_size, num_pages=r.kv_pages,
                       token_budget=r.token_budget, prefill_rows=r.prefill_rows, overlap=r.overlap,
                       attention_impl=r.attention_impl, tensor_parallel=r.serve_tensor_parallel)
    return engine, ColocatedSync(engine)


def _disaggregated(r, model, tokenizer, *, seed: int, version: int, platform: str, name: str):
    client = SGLangClient(list(r.server_urls), max_concurrency=r.concurrency, timeout_s=r.request_timeout_s,
                          weight_version=version, sync_method=r.sync_method, sync_dtype=r.sync_dtype,
                          sync_bucket_bytes=int(r.sync_bucket_mb) << 20, group_backend=r.sync_group_backend,
                          group_address=r.sync_group_address)
    # rollout.sync_dir unset: a memory-backed dir named after the run
    return client, ServerSync(client, r.sync_dir or weight_sync.default_sync_dir(name or "policy"))


def cache_dtype(name: str, platform: str):
    """``rollout.cache_dtype`` as a jnp dtype; "auto" is bf16 on accelerators (``mesh.platform``
    tpu/gpu), fp32 on CPU."""
    if name == "auto":
        name = "bfloat16" if platform in ("tpu", "gpu") else "float32"
    return policy.DTYPES[name]


ENGINES = {                               # rollout.mode -> builder(rollout, model, tokenizer, ...)
    "colocated": _colocated,              # the embedded JaxEngine on the learner's devices
    "disaggregated": _disaggregated,      # SGLang-API servers, weights by rollout.sync_method
}


def build_engine(rollout, model, tokenizer, *, seed: int, version: int = 0, platform: str = "cpu",
                 name: str = "policy"):
    """``(engine, sync)`` for the ``rollout`` section's mode (``ENGINES``). Colocated: an
    embedded engine serving ``model`` (which it keeps: pass a copy of parameters that will be
    donated), its caches in ``cache_dtype`` for ``platform`` (``mesh.platform``). Disaggregated: a
    client of ``rollout.server_urls``; the servers get weights at the first ``sync(model, v)``,
    exported (disk transport) to ``rollout.sync_dir`` or a memory-backed dir named ``name``."""
    return ENGINES[rollout.mode](rollout, model, tokenizer, seed=seed, version=version, platform=platform, name=name)


def prefill_buckets(buckets, max_len: int) -> tuple:
    """The configured prefill chunk lengths below ``max_len`` (``max_len // 2`` if none is)."""
    return tuple(int(b) for b in buckets if b < max_len) or (max_len // 2,)


def _eos_ids(tokenizer):
    ids = tokenizer_lib.special_token_ids(tokenizer)
    return (ids["<|im_end|>"], ids["<|endoftext|>"])


# ---------------------------------------------------------------------------------- harness
def base_harness(run, spec: Optional[str] = None):
    """H0 (or ``spec``, default ``harness.spec``: a JSON/YAML file or a registered name) for the
    run's env and protocol, with the run's limits (turns, tokens, context, sampling)."""
    spec = run.harness.spec if spec is None else spec
    h = presets.resolve(spec, run.env.name, run.env.protocol)
    r = run.runner
    rules = dataclasses.replace(h.rules, max_tokens_per_turn=int(r.max_new_tokens),
                                **({"max_turns": int(run.env.max_turns)} if run.env.max_turns > 0 else {}))
    memory = dataclasses.replace(h.memory, max_context_tokens=int(r.max_len))
    return dataclasses.replace(h, rules=rules, memory=memory, **sampling_settings(r))


def sampling_settings(r) -> dict:
    """The run's sampling settings (what the learner's log-probabilities assume); ``r``:
    ``train.spec.RunnerSpec``."""
    return dict(temperature=float(r.temperature), top_p=float(r.top_p), top_k=int(r.top_k),
                enable_thinking=bool(r.thinking))


def sibling_spec(spec, r):
    """A sibling's spec as this run executes it (``r``: ``train.spec.RunnerSpec``): the run's
    sampling settings replace the sibling's own (the learner recomputes log-probabilities at
    ``rollout.temperature``, so a helper's tokens must be sampled at it), and the engine's budgets
    cap its turn and context lengths. Everything else (prompts, rules, turn limit, memory policy)
    stays the sibling's."""
    rules = dataclasses.replace(spec.rules, max_tokens_per_turn=min(int(spec.rules.max_tokens_per_turn),
                                                                    int(r.max_new_tokens)))
    memory = dataclasses.replace(spec.memory, max_context_tokens=min(int(spec.memory.max_context_tokens),
                                                                     int(r.max_len)))
    out = dataclasses.replace(spec, rules=rules, memory=memory, **sampling_settings(r))
    return spec if out == spec else out


def with_temperature(harness, temperature: float):
    if temperature == harness.temperature:
        return harness
    if temperature == 0:
        return dataclasses.replace(harness, temperature=0.0, top_p=1.0, top_k=-1)
    return dataclasses.replace(harness, temperature=float(temperature))


def open_store(traces_dir: Optional[str]):
    """The append-only trajectory store in ``traces_dir`` (None: ``log.store_traces`` is off)."""
    return store_lib.TrajectoryStore(traces_dir) if traces_dir else None


def to_episode(traj, task) -> Episode:
    """The loop's view of a trajectory. Overlay credit rule: the sampled tokens of a turn whose
    action an overlay rewrote, forced or blocked (``on_before_action``) are masked out of the
    loss (they stay in the context): the policy is never credited, or blamed, for an action it
    did not take. Its other turns train as usual."""
    segs = traj.to_token_segments(mask_overridden=True)
    pv = min((s.policy_version for s in segs), default=int(traj.policy_version))
    return Episode(episode_id=traj.episode_id, task=task, harness_id=traj.harness_id,
                   reward=float(traj.reward or 0.0), success=bool(traj.success), segments=segs,
                   policy_version=int(pv), num_turns=len(traj.turns), infra_error=bool(traj.infra_error),
                   trajectory=traj, sibling_id=str(traj.meta.get("sibling_id", traj.harness_id)),
                   pool_version=str(traj.meta.get("pool_version", "")),
                   masked_turns=len(traj.overridden_turns()) if not traj.infra_error else 0)


class EpisodeRunner:
    """Runs ``n`` episodes of one task under one harness through the harness executor.

    The harness is a ``HarnessSpec`` (H0, a named or file harness) or a Harness-S ``Sibling``
    (spec + optional overlay patch). A sibling runs with the run's sampling settings
    (``sibling_spec``), and its overlay gets one worker pool for the whole run, reused across
    episodes and steps (``close()`` stops them). Every episode records its sibling id and
    ``pool_version`` (the Harness-S pool's content hash, set by whoever loads the pool).

    Concurrency over all calls on one event loop is capped by ``rollout.concurrency``; the
    engine batches whatever is in flight. Episodes with infrastructure errors are returned
    flagged (the loop excludes them from groups and metrics). ``spec``:
    ``train.spec.RunnerSpec``. ``backend``: the episode workers (``harness.workers.create``; None
    runs episodes on the caller's event loop).
    """

    def __init__(self, spec, engine, env_factory, tokenizer, store=None, backend=None, *,
                 pool_version: str = ""):
        self.spec = spec
        self.engine = engine
        self.env_factory = env_factory
        self.tokenizer = tokenizer
        self.store = store
        self.backend = backend
        self.run_id = spec.run_id
        self.env_name = spec.env_name
        self.concurrency = int(spec.concurrency)
        self.pool_version = pool_version
        sandbox.configure_default_sandbox(int(spec.hook_workers))
        self._sems: dict = {}
        self._overlays: dict = {}          # sibling id -> Overlay (one worker pool each)
        self._specs: dict = {}             # sibling id -> its spec under the run's settings
        self._lock = threading.Lock()      # the async producer and the learner thread share this

    def resolve(self, harness):
        """``(spec, overlay or None)`` the executor runs for ``harness`` (a spec or a Sibling)."""
        if not isinstance(harness, Sibling):
            return harness, None
        sid = harness.sibling_id
        with self._lock:
            if sid not in self._specs:
                self._specs[sid] = sibling_spec(harness.spec, self.spec)
                if harness.patch is not None:
                    ex = self.spec.executor
                    self._overlays[sid] = Overlay(harness.patch, env_name=self.env_name,
                                                  timeout_s=ex.hook_timeout_s, workers=ex.overlay_workers)
            return self._specs[sid], self._overlays.get(sid)

    def close(self) -> None:
        """Stops the siblings' overlay workers."""
        with self._lock:
            overlays, self._overlays, self._specs = list(self._overlays.values()), {}, {}
        for ov in overlays:
            ov.close()

    def _sem(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._sems.get(id(loop))
        if sem is None or self._sems.get(("loop", id(loop))) is not loop:
            sem = asyncio.Semaphore(self.concurrency)
            self._sems = {id(loop): sem, ("loop", id(loop)): loop}
        return sem

    async def run(self, task, harness, n: int, group_id: str, *, seed: int = 0, engine=None,
                  temperature: Optional[float] = None, store: bool = True,
                  sampling_key: Optional[str] = None) -> list[Episode]:
        """``n`` episodes ``<group_id>-<j>``. Their sampling seeds are keyed by the episode id, or,
        with ``sampling_key``, by ``"<sampling_key>#<j>"`` (evaluation keys them by task and
        attempt, so every evaluation of any policy draws the same random numbers)."""
        spec, overlay = self.resolve(harness)
        h = spec if temperature is None else with_temperature(spec, temperature)
        meta = {"pool_version": self.pool_version} if self.pool_version else {}
        if spec is not harness:            # a sibling: its pool id, not that of the run's copy
            meta["sibling_id"] = harness.sibling_id
        ex = Executor(engine or self.engine, self.env_factory, h, tokenizer=self.tokenizer, overlay=overlay,
                      config=dataclasses.replace(self.spec.executor, concurrency=max(n, 1), seed=int(seed)),
                      run_id=self.run_id, store=self.store if store else None, env_name=self.env_name,
                      backend=self.backend, episode_meta=meta)
        sem = self._sem()

        async def one(j):
            async with sem:
                return await ex.run_episode(task, episode_id=f"{group_id}-{j}", group_id=group_id,
                                            sampling_key=f"{sampling_key}#{j}" if sampling_key else None)

        try:
            trajs = await asyncio.gather(*[one(j) for j in range(n)])
        finally:
            ex.release()
        return [to_episode(t, task) for t in trajs]

    @property
    def rollout_fn(self) -> Callable:
        """For group post-processors: ``await rollout_fn(task, harness, n, group_id)``."""
        async def fn(task, harness, n, group_id, **kw):
            return await self.run(task, harness, n, group_id, **kw)
        return fn
