"""Episode workers (``harness_jax.harness.workers``): real worker processes (and, in the slow
test, a real local Ray) running real DBBench (SQLite) episodes with generation proxied to the
driver. The policy is the seeded scripted DBBench target of ``tests/harness_r1/doubles.py`` (a
test double: no trained model runs on CI); its choices come from the per-turn sampling seeds, so
an episode rerun after a lost worker must reproduce the in-process result exactly."""
import asyncio
import os
import signal

import pytest

from harness_jax.envs import registry
from harness_jax.harness import workers
from harness_jax.harness.executor import Executor, ExecutorConfig
from harness_jax.harness.presets import base_harness
from harness_jax.harness.store import TrajectoryStore
from harness_jax.harness.validation import validate_patch

from tests.harness import worker_jobs as jobs
from tests.harness.doubles import ScriptedEngine
from tests.harness_r1.doubles import dbbench_batch, make_policy

DBBENCH = registry.EnvFactory("dbbench", {"engine": "sqlite", "protocol": "text"})
HINT_PATCH = {"schema_version": "harness-r1-patch-v1", "benchmark": "dbbench", "actions": [
    {"type": "add_code_hook", "hook": "make_pre_hint", "code":
        "def hook(ctx, nb):\n    if ctx.turn == 0 and ctx.task.category == 'counting':\n"
        "        return {'message': 'Query the table before you answer.'}\n    return None\n"}]}


@pytest.fixture(scope="module")
def pool():
    with workers.WorkerPool("processes", workers=2, slots=4) as p:
        p.wait_ready(timeout_s=300)
        yield p


@pytest.fixture(scope="module")
def batch():
    return dbbench_batch(7, 3)


def _run(engine, tokenizer, tasks, backend, n=2, overlay=None, store=None, retries=2):
    async def go():
        ex = Executor(engine, DBBENCH, base_harness("dbbench", "text"), tokenizer=tokenizer,
                      overlay=overlay, config=ExecutorConfig(seed=11, infra_retries=retries),
                      store=store, backend=backend, env_name="dbbench")
        try:
            return await ex.run_episodes(tasks, n_per_task=n), ex
        finally:
            ex.close()
    return asyncio.run(go())


def _by_key(trajs):
    return {t.meta["sampling_key"]: t for t in trajs}


def _same_episode(a, b):
    assert (a.reward, a.success, a.status) == (b.reward, b.success, b.status)
    assert [s.token_ids for s in a.segments] == [s.token_ids for s in b.segments]
    assert [s.loss_mask for s in a.segments] == [s.loss_mask for s in b.segments]
    assert [s.logprobs for s in a.segments] == [s.logprobs for s in b.segments]   # bit-exact
    assert [t.interventions for t in a.turns] == [t.interventions for t in b.turns]


def test_jobs_errors_shared_objects_limits_and_cancel(pool, tmp_path):
    async def go():
        out = await asyncio.gather(*[pool.run(jobs.add, i, 10, 0.2) for i in range(8)])
        assert [o[0] for o in out] == [i + 10 for i in range(8)]
        assert {o[1] for o in out} == set(pool.worker_pids())      # both workers took jobs
        with pytest.raises(workers.RemoteError, match=r"ValueError: no good(.|\n)*worker traceback"):
            await pool.run(jobs.fail, "no good")
        with pytest.raises(TypeError, match="functools.partial"):
            pool.share(lambda: 0)
        # a shared object is shipped once per worker and stays resident
        ref = pool.share(list(range(1000)))
        seen = await asyncio.gather(*[pool.run(jobs.resident_identity, ref) for _ in range(8)])
        per_worker = {}
        for ident, size, wid in seen:
            assert size == 1000
            per_worker.setdefault(wid, set()).add(ident)
        assert all(len(ids) == 1 for ids in per_worker.values())
        pool.drop(ref)
        with pytest.raises(KeyError, match="dropped or unknown"):
            await pool.run(jobs.resident_identity, ref)
        # limit=(key, 1): one such job per worker process at a time, though each has 4 slots
        lim = await asyncio.gather(*[pool.run(jobs.exclusive, 0.1, limit=("ex", 1))
                                     for _ in range(6)])
        assert max(m for m, _ in lim) == 1
        # cancelling the driver's await cancels the job in its worker
        mark = tmp_path / "cancelled"
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(pool.run(jobs.sleep_then_mark, str(mark), 30.0), 0.5)
        await jobs.wait_until(mark.exists, 30)
    asyncio.run(go())


def test_remote_episodes_are_token_exact_with_overlays_and_driver_store(pool, batch, qwen_tok,
                                                                        tmp_path):
    patch = validate_patch(HINT_PATCH, env_name="dbbench").patch
    policy = make_policy(qwen_tok, seed=7, n=3)
    local, lex = _run(policy, qwen_tok, batch, None, overlay=patch)
    calls = policy.calls
    store = TrajectoryStore(str(tmp_path / "traces"))
    remote, rex = _run(policy, qwen_tok, batch, pool, overlay=patch, store=store)
    # generation happened on the driver's engine, one request per turn
    assert policy.calls - calls == sum(len(t.turns) for t in remote)
    a, b = _by_key(local), _by_key(remote)
    assert a.keys() == b.keys() and len(a) == 2 * len(batch)
    for k in a:
        _same_episode(a[k], b[k])
        assert b[k].infra_attempts == 0
    assert any(t.turns[0].interventions for t in remote)   # the hook ran in the workers
    assert {t.meta["worker"] for t in remote} == set(pool.worker_pids())
    # the overlay counters of all workers add up to the in-process ones
    assert rex.overlay.stats_dict() == lex.overlay.stats_dict()
    assert sorted(t.episode_id for t in store.trajectories()) == sorted(t.episode_id for t in remote)


def test_lost_worker_episodes_are_retried_as_infrastructure(pool, batch, qwen_tok):
    policy = make_policy(qwen_tok, seed=7, n=3)
    reference, _ = _run(policy, qwen_tok, batch, None)

    def killed_run(retries):
        gated = jobs.GatedEngine(policy)
        lost0 = pool.stats["workers_lost"]

        async def go():
            gated.close_gate()
            ex = Executor(gated, DBBENCH, base_harness("dbbench", "text"), tokenizer=qwen_tok,
                          config=ExecutorConfig(seed=11, infra_retries=retries), backend=pool)
            run = asyncio.ensure_future(ex.run_episodes(batch, n_per_task=2))
            await jobs.wait_until(lambda: gated.waiting == 8)   # 2 workers x 4 slots in flight
            victim = sorted(pool.worker_pids().items())[0][1]
            os.kill(victim, signal.SIGKILL)
            await jobs.wait_until(lambda: pool.stats["workers_lost"] == lost0 + 1)
            gated.open()
            try:
                return await run
            finally:
                ex.close()
        return asyncio.run(go())

    ref = _by_key(reference)
    retried = _by_key(killed_run(retries=2))
    hit = [k for k, t in retried.items() if t.meta["workers_lost"]]
    assert len(hit) == 4                                 # the victim's four slots
    for k, t in retried.items():
        _same_episode(ref[k], t)                         # same seeds, same episode, no score change
        if k in hit:
            assert t.infra_attempts == 1 and "episode worker lost" in t.errors[0]
    pool.wait_ready(timeout_s=300)                       # the replacement worker is up
    flagged = [t for t in killed_run(retries=0) if t.infra_error]
    assert len(flagged) == 4
    for t in flagged:
        assert t.success is None and t.status == "infra_error" and t.to_token_segments() == []
        assert t.meta["workers_lost"] == 1 and "episode worker lost" in t.errors[0]
    pool.wait_ready(timeout_s=300)


def test_not_thread_safe_families_run_one_episode_per_process(pool, qwen_tok):
    from harness_jax.envs.base import Task

    assert registry.EnvFactory("alfworld").process_concurrency == 1
    assert DBBENCH.process_concurrency is None
    tasks = [Task("toy", {"q": f"question {i}"}) for i in range(6)]

    async def go(backend):
        ex = Executor(ScriptedEngine(qwen_tok, []), jobs.ExclusiveFactory(), base_harness("dbbench", "text"),
                      tokenizer=qwen_tok, config=ExecutorConfig(infra_retries=0), backend=backend)
        try:
            return await ex.run_episodes(tasks)
        finally:
            ex.close()
    for backend in (pool, None):                         # in-process too: one at a time
        trajs = asyncio.run(go(backend))
        assert all(not t.infra_error and t.infra_attempts == 0 for t in trajs), [t.errors for t in trajs]
    assert len({t.meta["worker"] for t in asyncio.run(go(pool))}) == 2


def test_config_selects_the_backend():
    from experiments.configs import common, tiny_cpu
    from harness_jax.train import spec

    c = common.base_config()
    assert c.workers.backend == "inprocess" and workers.from_spec(spec.resolve(c, num_devices=1).workers) is None
    c.workers.backend, c.workers.num_workers, c.workers.slots = "processes", 3, 5
    p = workers.from_spec(spec.resolve(c, num_devices=1).workers)
    assert isinstance(p, workers.WorkerPool) and (p.workers, p.slots) == (3, 5)
    p.close()                                            # never started: nothing to stop
    cfg = tiny_cpu.get_config()
    cfg.workers.backend, cfg.workers.slots = "threads", 0
    problems = {p.path: p for p in spec.find_problems(cfg, num_devices=1)}
    assert "inprocess" in problems["workers.backend"].fix
    cfg.workers.backend = "processes"
    problems = {p.path: p for p in spec.find_problems(cfg, num_devices=1)}
    assert "workers.slots" in problems and "workers.backend" not in problems


@pytest.mark.slow
def test_ray_backend_runs_and_retries_lost_actors(batch, qwen_tok):
    """A private single-node Ray on this machine (loopback only), two actors of half a CPU."""
    pytest.importorskip("ray")
    import ray

    policy = make_policy(qwen_tok, seed=7, n=3)
    ref = _by_key(_run(policy, qwen_tok, batch, None)[0])
    with workers.WorkerPool("ray", workers=2, slots=4, ray_cpus=0.5) as rp:
        rp.wait_ready(timeout_s=300)
        assert ray.is_initialized()
        got = _by_key(_run(policy, qwen_tok, batch, rp)[0])
        for k in ref:
            _same_episode(ref[k], got[k])
        os.kill(sorted(rp.worker_pids().values())[0], signal.SIGKILL)
        again = _by_key(_run(policy, qwen_tok, batch, rp)[0])
        for k in ref:
            _same_episode(ref[k], again[k])
        assert rp.stats["workers_lost"] == 1
    assert not ray.is_initialized()                     # the pool stops the Ray it started


@pytest.mark.slow
def test_training_loop_collects_and_evaluates_on_process_workers(tmp_path, monkeypatch):
    """The GRPO loop (colocated JaxEngine on the driver) with ``workers.backend=processes``:
    every rollout and evaluation episode runs in a worker process with generation proxied to the
    driver's engine, and the run trains on what they return."""
    import jax

    from harness_jax.harness.store import TrajectoryStore
    from harness_jax.train import context, run
    from tests.e2e import tiny_e2e_config

    c = tiny_e2e_config.get_config()
    c.num_steps, c.sft.enabled, c.ckpt.every_steps, c.ckpt.export_hf = 1, False, 0, False
    c.eval.at_start, c.eval.num_tasks = False, 2
    c.workers.backend, c.workers.num_workers, c.workers.slots = "processes", 2, 2
    built = []
    real_build = context.build
    monkeypatch.setattr(context, "build", lambda *a, **k: built.append(real_build(*a, **k)) or built[-1])
    summary = run.train(c, str(tmp_path), devices=jax.devices()[:1])
    pool = built[0].workers
    stats = dict(pool.stats)
    assert summary["step"] == 1 and summary["policy_version"] == 1
    trajs = list(TrajectoryStore(str(tmp_path / "traces")).trajectories())
    n_train = c.num_steps * c.rl.tasks_per_step * c.rl.group_size
    assert stats["jobs"] == stats["done"] == len(trajs) >= n_train + c.eval.num_tasks
    assert {t.policy_version for t in trajs} == {0, 1}   # rollouts at v0, the final eval at v1
    assert all("worker" in t.meta and not t.infra_error for t in trajs)
    for t in trajs:
        for seg in t.segments:
            assert len(seg.token_ids) == len(seg.loss_mask) == len(seg.logprobs)
            assert all(lp == 0.0 for lp, m in zip(seg.logprobs, seg.loss_mask) if not m)
    assert pool._closing                                 # closing the run context stopped its workers
