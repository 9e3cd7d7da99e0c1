"""Harness-R1 reward throughput: K-sample Delta_B evaluation in-process vs on the local pool.

    python benchmarks/bench_harness_r1.py [--k 8] [--tasks 3] [--latency-ms 20] [--rounds 2]
                                          [--json out.json]

One packet of generated DBBench (SQLite) from the scripted sampling target of
``tests/harness_r1/doubles.py`` (a stand-in for a served model, with ``--latency-ms`` per call),
K rule-based responses (distinct patches), each group evaluated with a fresh reward cache:
in-process (asyncio, all distinct patches concurrently) and on ``EvaluationPool`` with 1 and 2
worker processes, interleaved over ``--rounds``. Reports wall seconds per group, target
episodes/s and the pool's start-up time. The reference is in-process evaluation measured in the
same run; this machine's limit is its core count (printed). Measure on a quiet machine, or say
it was not.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from harness_jax import harness_r1
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.presets import base_harness
from harness_jax.harness_r1.reward import RewardCache
from harness_jax.sampling.tokenizer import load_tokenizer
from harness_jax.harness_r1.engineers import RuleBasedEngineer
from harness_jax.harness_r1.pool import EvaluationPool


def bench(k: int, n_tasks: int, latency_ms: float, rounds: int) -> dict:
    from tests.harness_r1.doubles import dbbench_batch

    tok = load_tokenizer()
    kwargs = {"seed": 9, "n": n_tasks, "latency_ms": latency_ms}
    spec = harness_r1.TargetSpec(kind="factory", factory="tests.harness_r1.doubles:make_policy",
                                 model="scripted", version="3", options={"kwargs": kwargs})
    target = spec.build(tok)
    tasks = dbbench_batch(9, n_tasks)
    env = harness_r1.EnvRef("dbbench", {"engine": "sqlite", "protocol": "text"})
    base = harness_r1.run_baseline(target, env, tasks, base_harness("dbbench", "text"),
                                   n_per_task=1, seed=0, tokenizer=tok,
                                   config=ExecutorConfig(concurrency=64, infra_retries=0))
    pk = harness_r1.packet_from_baseline(base, 8000)
    responses = RuleBasedEngineer().propose(pk, k=k)
    out: dict = {"k": k, "tasks": len(tasks), "latency_ms": latency_ms,
                 "cpu_count": os.cpu_count(), "load_avg": os.getloadavg()}
    pools = {}
    for w in (1, 2):
        t0 = time.perf_counter()
        pools[w] = EvaluationPool(spec, workers=w)
        pools[w].evaluate([responses[0]], "dbbench", tasks, base)    # warm the workers
        out[f"pool{w}_startup_s"] = round(time.perf_counter() - t0, 2)
    runs: dict = {"in_process": [], "pool1": [], "pool2": []}
    episodes = 0
    try:
        for _ in range(rounds):
            for name in runs:
                with tempfile.TemporaryDirectory() as d:
                    cache = RewardCache(d)
                    pool = {"pool1": pools[1], "pool2": pools[2]}.get(name)
                    t0 = time.perf_counter()
                    g = harness_r1.evaluate_group(responses, "dbbench", target, tasks, base,
                                                  cache=cache if pool is None else None,
                                                  pool=pool, tokenizer=tok)
                    runs[name].append(time.perf_counter() - t0)
                    episodes = g.metrics()["target_episodes"]
    finally:
        for p in pools.values():
            p.close()
    out["episodes_per_group"] = episodes
    for name, ts in runs.items():
        med = statistics.median(ts)
        out[name] = {"median_s": round(med, 3), "episodes_per_s": round(episodes / med, 1)}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--tasks", type=int, default=3, help="tasks per category (3 categories)")
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    res = bench(a.k, a.tasks, a.latency_ms, a.rounds)
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
