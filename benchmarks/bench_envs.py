"""Environment throughput with scripted policies, compared with one decode step of the tiny model.

    python benchmarks/bench_envs.py                       # DBBench (SQLite, MariaDB), ALFWorld
    python benchmarks/bench_envs.py --skip_alfworld --dbbench_episodes 500

DBBench: the gold policy (run the gold SQL, then answer) on generated tasks, text protocol.
ALFWorld: the expert walkthroughs of generated games (generation time reported separately).
The decode step: ``model.extend`` with T=1 on the ``tiny`` preset, batch 1, jitted, CPU.
Prints one JSON object per line.
"""
from __future__ import annotations

import json
import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAGS = flags.FLAGS
flags.DEFINE_integer("dbbench_episodes", 200, "DBBench episodes per engine")
flags.DEFINE_integer("alfworld_games", 6, "ALFWorld games (one per task type, cycling)")
flags.DEFINE_bool("skip_alfworld", False, "skip the ALFWorld part")
flags.DEFINE_bool("skip_mariadb", False, "skip MariaDB even if a server answers")
flags.DEFINE_bool("skip_decode", False, "skip the tiny-model decode step")


def emit(**kw):
    print(json.dumps(kw), flush=True)


def bench_dbbench(engine_name: str, n: int) -> dict:
    from harness_jax.envs import dbbench
    items = dbbench.generate_items(n, seed=123)
    tasks = dbbench.tasks_from_items(items)
    env = dbbench.DBBenchEnv(engine=engine_name, protocol="text")
    reset_s = step_s = 0.0
    steps = ok = 0
    for task in tasks:
        t = time.perf_counter()
        env.reset(task)
        reset_s += time.perf_counter() - t
        t = time.perf_counter()
        for reply in dbbench.oracle_reply(task.data, "text"):
            res = env.step(reply)   # the final step also scores (mutations: md5 of the table)
            steps += 1
            if res.done:
                break
        step_s += time.perf_counter() - t
        ok += int(res.reward)
    t = time.perf_counter()
    env.close()
    reset_s += time.perf_counter() - t
    dt = reset_s + step_s
    return dict(env="dbbench", engine=engine_name, episodes=n, steps=steps, success=ok / n,
                episodes_per_s=n / dt, steps_per_s=steps / step_s,
                reset_ms=1e3 * reset_s / n, ms_per_step=1e3 * step_s / steps)


def bench_generator(n: int = 2000) -> dict:
    from harness_jax.envs.dbbench import generator
    t0 = time.perf_counter()
    generator.generate_items(n, seed=5)
    dt = time.perf_counter() - t0
    return dict(env="dbbench_generator", tasks=n, tasks_per_minute=60 * n / dt)


def bench_alfworld(n: int) -> dict:
    from harness_jax.envs import alfworld
    t0 = time.perf_counter()
    games = alfworld.generate_games(n, seed=321, task_types=alfworld.TASK_TYPES)
    gen_s = time.perf_counter() - t0
    env = alfworld.ALFWorldEnv(protocol="text")
    reset_s = step_s = 0.0
    steps = ok = 0
    for g in games:
        t = time.perf_counter()
        env.reset(alfworld.make_task(g))
        reset_s += time.perf_counter() - t
        t = time.perf_counter()
        for cmd in g["walkthrough"]:
            res = env.step("ACTION: " + cmd)
            steps += 1
            if res.done:
                break
        step_s += time.perf_counter() - t
        ok += int(res.reward)
    env.close()
    total = reset_s + step_s
    return dict(env="alfworld", episodes=n, steps=steps, success=ok / n,
                generate_s_per_game=gen_s / n, reset_s=reset_s / n,
                ms_per_step=1e3 * step_s / steps, episodes_per_s=n / total,
                steps_per_s=steps / step_s)


def bench_decode() -> dict:
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from harness_jax.models import qwen3_5
    cfg = qwen3_5.presets.get("tiny")
    model = qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0))
    cache = qwen3_5.init_cache(cfg, 1, 256)
    graphdef, state = nnx.split(model)

    @jax.jit
    def step(state, ids, cache, n):
        m = nnx.merge(graphdef, state)
        return m.extend(ids, cache, n)

    ids = jnp.ones((1, 1), jnp.int32)
    n = jnp.ones((1,), jnp.int32)
    logits, c = step(state, ids, cache, n)
    jax.block_until_ready(logits)
    reps = 50
    t0 = time.perf_counter()
    for _ in range(reps):
        logits, c = step(state, ids, cache, n)
    jax.block_until_ready(logits)
    return dict(model="tiny", decode_ms_per_step=1e3 * (time.perf_counter() - t0) / reps,
                backend=jax.default_backend())


def main(argv):
    del argv
    from harness_jax.envs import dbbench
    emit(**bench_generator())
    rows = [bench_dbbench("sqlite", FLAGS.dbbench_episodes)]
    if not FLAGS.skip_mariadb:
        if dbbench.mariadb_available():
            rows.append(bench_dbbench("mariadb", FLAGS.dbbench_episodes))
        else:
            emit(env="dbbench", engine="mariadb",
                 skipped="no server (bash scripts/mariadb.sh start)")
    if not FLAGS.skip_alfworld:
        rows.append(bench_alfworld(FLAGS.alfworld_games))
    for r in rows:
        emit(**r)
    if not FLAGS.skip_decode:
        try:
            d = bench_decode()
        except Exception as e:  # noqa: BLE001 - the model package may not be built here
            emit(model="tiny", skipped=f"decode step unavailable: {type(e).__name__}: {e}")
        else:
            emit(**d)
            for r in rows:
                emit(compare=f"{r['env']}/{r.get('engine', '')}",
                     env_step_over_decode_step=r["ms_per_step"] / d["decode_ms_per_step"])


if __name__ == "__main__":
    app.run(main)
