"""Episode workers: episodes/s against worker count, and the cost of proxying generation.

    python benchmarks/bench_workers.py [--workers 1,2,4] [--rounds 3] [--ray]
                                       [--dbbench-episodes 48] [--alfworld-episodes 8]
                                       [--alfworld-turns 8] [--json out.json]

Families (text protocol, scripted policies on the driver; generation is proxied from the
workers to the driver as in training):

* DBBench on SQLite with the seeded scripted DBBench policy of ``tests/harness_r1/doubles.py``
  (a test double for a served model) -- light environments, the executor's own cost dominates;
* ALFWorld on the real engine (generated games, the PDDL engine runs in the episode's process),
  with a seeded random policy over the admissible actions for ``--alfworld-turns`` turns -- a
  heavy, not thread-safe family: in-process it runs one episode at a time.

For each family: in-process (the reference, measured in the same run) and local worker processes
with 1, 2, 4 workers (``--ray``: also Ray actors at half a CPU each), interleaved over
``--rounds``; medians of episodes/s. Pools are started and warmed first (start-up reported
separately). CPU per episode is measured too (the driver's process time; the worker processes'
from ``/proc``): unlike episodes/s it barely depends on how busy the machine is, so it is what
the pod arithmetic in docs/experiments.md uses. ``proxy``: the round trip of one generation request from a worker job to the driver
engine and back (an engine that answers at once), small and 8k-token contexts, against the same
call in-process. This machine's limit is its core count (printed with the load average): it is
shared by other engineers, so numbers are noisy; compare within one run.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness_jax.envs import registry  # noqa: E402
from harness_jax.harness import workers  # noqa: E402
from harness_jax.harness.executor import Executor, ExecutorConfig  # noqa: E402
from harness_jax.harness.presets import base_harness  # noqa: E402
from harness_jax.sampling.types import (FINISH_STOP, GenerateRequest, GenerateResult,  # noqa: E402
                                        RolloutEngine, SamplingParams)

_ACTIONS = re.compile(r"AVAILABLE ACTIONS: (.+)")


class AlfworldRandomPolicy(RolloutEngine):
    """Seeded random choice among the admissible actions of the latest observation (driver side)."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    @property
    def weight_version(self):
        return 0

    async def generate(self, request):
        text = self.tok.decode(list(request.input_ids), skip_special_tokens=False)
        found = _ACTIONS.findall(text)
        acts = [a.strip() for a in found[-1].split(",")] if found else ["look"]
        act = random.Random(request.params.seed).choice(acts)
        ids = self.tok.encode(f"THOUGHT: exploring.\nACTION: {act}", add_special_tokens=False)
        ids = ids[: request.params.max_new_tokens - 1] + [self.im_end]
        return GenerateResult(request.request_id, ids, [-0.1] * len(ids), FINISH_STOP, 0)


class InstantEngine(RolloutEngine):
    @property
    def weight_version(self):
        return 0

    async def generate(self, request):
        return GenerateResult(request.request_id, [1, 2, 3], [-0.1, -0.2, -0.3], FINISH_STOP, 0)


async def proxy_job(ctx, n: int, context_len: int):
    """Worker job: ``n`` sequential generations through the driver; seconds per round trip."""
    engine = ctx.engine()
    ids = list(range(1000, 1000 + context_len))
    t0 = time.perf_counter()
    for i in range(n):
        await engine.generate(GenerateRequest(ids, SamplingParams(), f"p{i}"))
    return (time.perf_counter() - t0) / n


@dataclasses.dataclass
class Family:
    name: str
    engine: RolloutEngine
    factory: registry.EnvFactory
    harness: object
    tasks: list
    n_per_task: int
    slots: int


def _families(args, tok) -> list[Family]:
    from tests.harness_r1.doubles import dbbench_batch, make_policy

    out = []
    if args.dbbench_episodes:
        per_cat = max(1, args.dbbench_episodes // 6)
        tasks = dbbench_batch(3, per_cat)
        out.append(Family("dbbench_sqlite", make_policy(tok, seed=3, n=per_cat),
                          registry.EnvFactory("dbbench", {"engine": "sqlite", "protocol": "text"}),
                          base_harness("dbbench", "text"), tasks, 2, 16))
    if args.alfworld_episodes:
        cache = os.path.join(os.path.expanduser("~"), ".cache", "harness_jax", "bench_workers")
        t0 = time.perf_counter()
        tasks = registry.load_split("alfworld", "train", n=args.alfworld_episodes, seed=0,
                                    cache_dir=cache)
        print(json.dumps({"alfworld_games_s": round(time.perf_counter() - t0, 1)}), flush=True)
        h = base_harness("alfworld", "text")
        h = dataclasses.replace(h, rules=dataclasses.replace(h.rules, max_turns=args.alfworld_turns))
        out.append(Family("alfworld", AlfworldRandomPolicy(tok),
                          registry.EnvFactory("alfworld", {"protocol": "text"}), h, tasks, 1, 4))
    return out


def _cpu_s(pids) -> float:
    """User + system CPU seconds of processes (``/proc/<pid>/stat``; Linux)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def _measure(fam: Family, tok, backend) -> dict:
    pids = list(backend.worker_pids().values()) if backend is not None and \
        backend.backend == "processes" else []
    cpu0, wcpu0 = time.process_time(), _cpu_s(pids)

    async def go():
        ex = Executor(fam.engine, fam.factory, fam.harness, tokenizer=tok, backend=backend,
                      config=ExecutorConfig(seed=5, concurrency=64), env_name=fam.factory.name)
        t0 = time.perf_counter()
        try:
            trajs = await ex.run_episodes(fam.tasks, n_per_task=fam.n_per_task)
        finally:
            ex.close()
        return trajs, time.perf_counter() - t0
    trajs, wall = asyncio.run(go())
    ok = [t for t in trajs if not t.infra_error]
    return {"wall_s": wall, "episodes": len(ok), "infra": len(trajs) - len(ok),
            "driver_cpu_s": time.process_time() - cpu0, "worker_cpu_s": _cpu_s(pids) - wcpu0,
            "turns": sum(len(t.turns) for t in ok), "success": sum(bool(t.success) for t in ok)}


def bench(args) -> dict:
    from harness_jax.sampling.tokenizer import load_tokenizer

    tok = load_tokenizer()
    counts = [int(x) for x in args.workers.split(",")]
    out: dict = {"cpu_count": os.cpu_count(), "load_avg_start": os.getloadavg(),
                 "workers": counts, "rounds": args.rounds}
    if args.ray:
        import ray
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, _node_ip_address="127.0.0.1",
                 log_to_driver=False, configure_logging=False)
    for fam in _families(args, tok):
        setups = {"in_process": None}
        for w in counts:
            setups[f"processes_{w}"] = workers.WorkerPool("processes", w, fam.slots)
        if args.ray:
            setups["ray_2"] = workers.WorkerPool("ray", 2, fam.slots, ray_cpus=0.5)
        res: dict = {"episodes_per_run": len(fam.tasks) * fam.n_per_task}
        try:
            for name, pool in setups.items():          # start and warm (tokenizer shipped)
                t0 = time.perf_counter()
                if pool is not None:
                    pool.wait_ready()
                _measure(fam, tok, pool)
                res[f"{name}_startup_s"] = round(time.perf_counter() - t0, 2)
            runs: dict = {name: [] for name in setups}
            for _ in range(args.rounds):
                for name, pool in setups.items():
                    runs[name].append(_measure(fam, tok, pool))
            ref = statistics.median(r["episodes"] / r["wall_s"] for r in runs["in_process"])
            for name, rs in runs.items():
                eps = statistics.median(r["episodes"] / r["wall_s"] for r in rs)
                n_ep = max(sum(r["episodes"] for r in rs), 1)
                res[name] = {"episodes_per_s": round(eps, 2), "vs_in_process": round(eps / ref, 2),
                             "driver_cpu_ms_per_episode": round(
                                 1e3 * sum(r["driver_cpu_s"] for r in rs) / n_ep, 1),
                             "worker_cpu_ms_per_episode": round(
                                 1e3 * sum(r["worker_cpu_s"] for r in rs) / n_ep, 1),
                             "median_wall_s": round(statistics.median(r["wall_s"] for r in rs), 2),
                             "infra": sum(r["infra"] for r in rs),
                             "turns_per_episode": round(rs[0]["turns"] / max(rs[0]["episodes"], 1), 1),
                             "success": [r["success"] for r in rs]}
        finally:
            for pool in setups.values():
                if pool is not None:
                    pool.close()
        out[fam.name] = res
        print(json.dumps({fam.name: res}), flush=True)
    out["proxy"] = _proxy(args)
    if args.ray:
        import ray
        ray.shutdown()
    out["load_avg_end"] = os.getloadavg()
    return out


def _proxy(args) -> dict:
    from benchmarks.bench_workers import proxy_job   # by module name (workers import it)

    eng, n = InstantEngine(), args.proxy_calls
    res = {}
    with workers.WorkerPool("processes", 1, 1) as pool:
        pool.wait_ready()
        for ctx_len in (16, 8192):
            async def go():
                local = await workers.InProcessPool().run(proxy_job, n, ctx_len, engine=eng)
                remote = await pool.run(proxy_job, n, ctx_len, engine=eng)
                return local, remote
            local, remote = asyncio.run(go())
            res[f"context_{ctx_len}"] = {"in_process_us": round(local * 1e6, 1),
                                         "worker_round_trip_us": round(remote * 1e6, 1)}
    print(json.dumps({"proxy": res}), flush=True)
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dbbench-episodes", type=int, default=48)
    ap.add_argument("--alfworld-episodes", type=int, default=8)
    ap.add_argument("--alfworld-turns", type=int, default=8)
    ap.add_argument("--proxy-calls", type=int, default=500)
    ap.add_argument("--ray", action="store_true", help="also 2 Ray actors (a local ray.init)")
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    res = bench(a)
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
