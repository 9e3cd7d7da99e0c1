"""Episode workers: where the executor's episodes (and other per-worker jobs) run.

Backends (``create(backend, ...)`` / ``from_spec(spec.workers)``):

* ``"inprocess"`` -- on the caller's event loop (today's behaviour and the default; ``create``
  returns ``None`` and the executor runs episodes itself);
* ``"processes"`` -- ``workers`` spawned local processes (``WorkerPool``);
* ``"ray"`` -- ``workers`` Ray actors (a local ``ray.init`` when no address is given, else the
  cluster at ``ray_address``; ``pip install .[ray]``).

Both remote backends are the same mechanism: every worker (a process or an actor) connects back
to the driver's listener (``multiprocessing.connection`` over TCP, HMAC-authenticated with a
per-pool key) and serves jobs over that one connection. Ray only places and starts the worker
processes. A job is ``fn(ctx, *args)`` (a module-level function; async or not) run on the
worker's event loop; ``ctx`` (``WorkerContext``) gives it

* ``ctx.resident(ref)`` -- an object the driver shared once (``pool.share(obj)``): shipped to a
  worker with the first job that needs it and kept there (a tokenizer, an executor recipe);
* ``ctx.cached(key, build)`` -- a per-worker memo (a built executor with its hook sandbox, a
  frozen target); dropped (and ``close()``-d) with ``pool.drop(ref)``;
* ``ctx.engine()`` -- the driver's rollout engine of the job (below).

The policy engine stays with the driver: workers run environments, the executor, overlays and
hooks, and **the driver proxies generation**. A worker's ``GenerateRequest`` travels to the
driver, which calls the job's engine (a colocated ``JaxEngine``, an ``SGLangClient``, a frozen
target) on the event loop that submitted the job and sends the ``GenerateResult`` back. Token
ids and log-probs cross the boundary as pickled Python ints and floats, so they are bit-exact;
weight versions, pause/abort/resume during weight sync and episode-sticky server routing stay in
the one driver-side client. The cost is one local round trip per turn (tens of microseconds
next to a generation). Frozen targets served over HTTP may instead be built in the worker
(``ctx.cached``), as Harness-R1's ``EvaluationPool`` does.

Long-lived workers: a worker keeps its resident objects, caches and the process-level state of
the environment families (a DBBench engine's gold-hash cache, the AppWorld service client, the
SWE sandbox checks, ALFWorld's imported engine) for its whole life. Families that are not
thread-safe declare ``Env.process_concurrency = 1`` (ALFWorld); ``run(..., limit=(key, 1))``
keeps such jobs to one per worker process while other jobs share the worker's ``slots``.

A lost worker (killed, crashed, out of memory, disconnected, never started) fails its in-flight
jobs with ``WorkerLost`` -- an infrastructure failure: the executor retries the episode (on
another or a replacement worker) and never scores it -- and the pool starts a replacement (up
to ``max_restarts``; past that, or when no worker can start, pending jobs fail with
``WorkerLost`` instead of waiting forever). The driver ends the engine-side episode state of a
lost job (``engine.end_episode``) so a retry starts clean.
"""
from __future__ import annotations

from harness_jax.harness.workers.inprocess import BACKENDS, InProcessPool, create, from_spec
from harness_jax.harness.workers.pool import WorkerPool
from harness_jax.harness.workers.wire import Ref, RemoteError, WorkerLost
from harness_jax.harness.workers.worker import WorkerContext, main, serve

__all__ = ["BACKENDS", "InProcessPool", "Ref", "RemoteError", "WorkerContext", "WorkerLost", "WorkerPool",
           "create", "from_spec", "main", "serve"]
