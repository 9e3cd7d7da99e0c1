"""AppWorld on its real runtime: service start, oracle episodes/s, per-cell latency, and what the
per-episode sandbox costs.

    bash scripts/appworld.sh start
    python benchmarks/bench_appworld.py                        # 30 generated tasks, 1 and 4 at once
    python benchmarks/bench_appworld.py --measure_start        # also stop + cold-start the service

Everything goes through the service boundary exactly as training does (AppWorldEnv -> HTTP on a
Unix socket -> a sandboxed worker running AppWorld's own environment server; evaluation in the
evaluator's sandbox). References measured in the same run, interleaved with the episodes: the
service's HTTP round trip (``/health``: the floor of any call) and a no-op cell (``x = 1``: the
floor of a cell through AppWorld's ``execute``, which also saves the episode's database changes
after every cell). The sandbox's own costs come from the service's timings of every reset
(``prepare_s``: the task's files into the episode's root; ``spawn_s``: a fresh child of the slot's
zygote answering; ``initialize_s``: AppWorld's ``initialize``, also paid without a sandbox) and of
every evaluation (``prepare_s``: ground truth + end state into the evaluator's root; ``eval_s``:
AppWorld's evaluator), and from a cold slot start (``--measure_slot_start``: a sandbox importing
appworld, paid once per worker). Prints one JSON object per line. The numbers depend on load: say
whether the machine was quiet.
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
flags.DEFINE_bool("measure_slot_start", False, "time cold worker-sandbox starts: opens as many "
                  "episodes at once as the service has workers (run right after a start)")


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
    phases: dict = {}

    async def one(task):
        async with sem:
            env = appworld.AppWorldEnv(timeout_seconds=60)
            t = time.perf_counter()
            await env.areset(task)
            reset_ms.append(1e3 * (time.perf_counter() - t))
            for k, v in env.timings.items():
                phases.setdefault(f"reset_{k}", []).append(1e3 * v)
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
            for k, v in env.eval_timings.items():     # the final step's evaluation
                if v is not None:
                    phases.setdefault(f"eval_{k}", []).append(1e3 * v)
            t = time.perf_counter()
            await env.aclose()
            phases.setdefault("close_ms", []).append(1e3 * (time.perf_counter() - t))

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
               cells=len(cells_ms) + len(eval_ms),
               phases_ms_p50={(k[:-2] if k.endswith("_s") else k):
                              round(statistics.median(v), 2) for k, v in sorted(phases.items())})
    if probes:
        out.update(noop_cell_ms_p50=round(statistics.median(noop_ms), 1),
                   service_rtt_ms_p50=round(statistics.median(rtt_ms), 2))
    return out


def measure_slot_start(tasks) -> dict:
    """Opens one episode per worker at once on a freshly started service: the slots that were
    not prewarmed start their sandbox (bwrap + a zygote importing appworld) inside ``acquire``."""
    from harness_jax.envs import appworld
    client = appworld.ServiceClient()
    n = client.health()["max_workers"]
    conns = [client.connect() for _ in range(n)]

    async def one(conn, task):
        t = time.perf_counter()
        out = await asyncio.to_thread(conn.open_episode, task.data["data_dir"],
                                      task.data["task_id"])
        return time.perf_counter() - t, out["timings"]

    async def run():
        return await asyncio.gather(*[one(c, t) for c, t in zip(conns, tasks)])

    results = asyncio.run(run())
    for c in conns:
        c.close()
    h = client.health()
    return dict(what="slot_start", workers=n, open_s=[round(r[0], 2) for r in results],
                acquire_s=[round(r[1]["acquire_s"], 2) for r in results],
                sandbox_import_s=h.get("zygote_import_s"),
                note="acquire_s includes a cold sandbox start for every slot not prewarmed")


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
    if FLAGS.measure_slot_start:
        emit(**measure_slot_start(tasks))
    # warm the workers, then measure: sequential (with references) and parallel
    asyncio.run(run_oracles(tasks[:min(len(tasks), FLAGS.parallel)], FLAGS.parallel, False))
    emit(**asyncio.run(run_oracles(tasks, 1, True)))
    emit(**asyncio.run(run_oracles(tasks, FLAGS.parallel, False)))
    h = appworld.ServiceClient().health()
    emit(what="service", workers=len(h["workers"]), max_workers=h["max_workers"],
         counters=h["counters"], sandbox=h.get("sandbox"))


if __name__ == "__main__":
    app.run(main)
