"""AppWorld on its real runtime: service start, oracle episodes/s, per-cell latency.

    bash scripts/appworld.sh start
    python benchmarks/bench_appworld.py                        # 30 generated tasks, 1 and 4 at once
    python benchmarks/bench_appworld.py --measure_start        # also stop + cold-start the service

Everything goes through the service boundary exactly as training does (AppWorldEnv -> HTTP on a
Unix socket -> a worker running AppWorld's own environment server). References measured in the
same run, interleaved with the episodes: the service's HTTP round trip (``/health``: the floor of
any call) and a no-op cell (``x = 1``: the floor of a cell through AppWorld's ``execute``, which
also saves the episode's database changes after every cell). Prints one JSON object per line.
The numbers depend on load: say whether the machine was quiet.
"""
from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAGS = flags.FLAGS
flags.DEFINE_integer("tasks", 30, "generated tasks (10 scenarios x 3 variants)")
flags.DEFINE_integer("seed", 0, "generator seed")
flags.DEFINE_integer("parallel", 4, "episodes at once in the parallel pass (<= service workers)")
flags.DEFINE_bool("measure_start", False, "stop the service and time a cold start (it restarts "
                  "the shared service)")


def emit(**kw):
    print(json.dumps(kw), flush=True)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def measure_start() -> dict:
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                          "appworld.sh")
    subprocess.run(["bash", script, "stop"], check=True, capture_output=True)
    t0 = time.perf_counter()
    subprocess.run(["bash", script, "start"], check=True, capture_output=True)
    start_s = time.perf_counter() - t0
    from harness_jax.envs import appworld
    h = appworld.ServiceClient().health()
    return dict(what="service_start", start_s=round(start_s, 2),
                zygote_import_s=h.get("zygote_import_s"))


async def run_oracles(tasks, parallel: int, probes: bool) -> dict:
    from harness_jax.envs import appworld
    client = appworld.ServiceClient()
    sem = asyncio.Semaphore(parallel)
    cells_ms, reset_ms, eval_ms, noop_ms, rtt_ms, ok = [], [], [], [], [], []

    async def one(task):
        async with sem:
            env = appworld.AppWorldEnv(timeout_seconds=60)
            t = time.perf_counter()
            await env.areset(task)
            reset_ms.append(1e3 * (time.perf_counter() - t))
            if probes:  # interleaved references, same episode, same worker
                t = time.perf_counter()
                await asyncio.to_thread(client.health)
                rtt_ms.append(1e3 * (time.perf_counter() - t))
                t = time.perf_counter()
                await env.astep("```python\nx = 1\n```")
                noop_ms.append(1e3 * (time.perf_counter() - t))
            res = None
            for cell in appworld.oracle_cells(task):
                t = time.perf_counter()
                res = await env.astep(f"```python\n{cell}\n```")
                dt = 1e3 * (time.perf_counter() - t)
                if res.done:      # the last step also runs AppWorld's evaluator
                    eval_ms.append(dt)
                    break
                cells_ms.append(dt)
            ok.append(bool(res is not None and res.reward == 1.0))
            await env.aclose()

    t0 = time.perf_counter()
    await asyncio.gather(*[one(t) for t in tasks])
    wall = time.perf_counter() - t0
    out = dict(what="oracle_episodes", parallel=parallel, episodes=len(tasks),
               success=sum(ok) / len(ok), episodes_per_s=round(len(tasks) / wall, 3),
               wall_s=round(wall, 2),
               reset_ms_p50=round(statistics.median(reset_ms), 1),
               cell_ms_p50=round(statistics.median(cells_ms), 1),
               cell_ms_p90=round(pct(cells_ms, 0.9), 1),
               final_cell_with_eval_ms_p50=round(statistics.median(eval_ms), 1),
               cells=len(cells_ms) + len(eval_ms))
    if probes:
        out.update(noop_cell_ms_p50=round(statistics.median(noop_ms), 1),
                   service_rtt_ms_p50=round(statistics.median(rtt_ms), 2))
    return out


def main(_):
    from harness_jax.envs import appworld
    emit(what="machine", cpus=os.cpu_count(), load_avg=os.getloadavg(),
         note="shared machine: other jobs were running unless load_avg is ~0")
    if FLAGS.measure_start:
        emit(**measure_start())
    if not appworld.service_available():
        raise SystemExit("the AppWorld service is not running: bash scripts/appworld.sh start")
    t = time.perf_counter()
    tasks = appworld.generate_tasks(n=FLAGS.tasks, seed=FLAGS.seed)
    emit(what="generate_tasks", tasks=len(tasks), seconds=round(time.perf_counter() - t, 2),
         note="cached after the first build of this seed")
    # warm the workers, then measure: sequential (with references) and parallel
    asyncio.run(run_oracles(tasks[:min(len(tasks), FLAGS.parallel)], FLAGS.parallel, False))
    emit(**asyncio.run(run_oracles(tasks, 1, True)))
    emit(**asyncio.run(run_oracles(tasks, FLAGS.parallel, False)))
    h = appworld.ServiceClient().health()
    emit(what="service", workers=len(h["workers"]), max_workers=h["max_workers"],
         counters=h["counters"])


if __name__ == "__main__":
    app.run(main)
