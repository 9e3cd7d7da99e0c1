"""SWE environment throughput: instance generation, grading, reference-patch episodes.

    python benchmarks/bench_swe.py                   # 8 instances, JSON lines
    python benchmarks/bench_swe.py --instances 20

Measured in one process, interleaved where it matters:
- generation: instances per minute with an empty cache (every candidate really runs pytest),
  candidates tried per kept instance, then again from the cache;
- grading: mean seconds per ``swe.grade`` with the reference patch and with no patch, against
  the same tests run without the sandbox (``testing.run_local``) as the reference;
- episodes: reference-patch episodes per second (reset + ``git apply`` in the sandbox + submit,
  which diffs and grades), and the latency of one sandboxed ``true``.
The machine is shared (2 cores, several engineers): numbers vary with load; read them as a
range, and compare the rows of one run.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAGS = flags.FLAGS
flags.DEFINE_integer("instances", 8, "instances to generate (train split)")
flags.DEFINE_integer("seed", 1234, "generation seed")


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main(_):
    from harness_jax.envs import swe
    from harness_jax.envs.swe import generate, grading, sandbox, testing

    ok, why = swe.bwrap_status()
    if not ok:
        raise SystemExit(f"SWE sandbox unavailable: {why}")
    n = FLAGS.instances
    with tempfile.TemporaryDirectory() as cache:
        os.environ[generate.CACHE_ENV] = cache
        order = generate.candidate_order(FLAGS.seed, "train")
        t = time.perf_counter()
        insts = swe.generate_instances(n, seed=FLAGS.seed)
        cold = time.perf_counter() - t
        tried = 1 + max(i for i, (p, s) in enumerate(order)
                        if (p, s.key) in {(x["corpus"]["project"],
                                           swe.generate.mutate.Site(**x["mutation"]).key)
                                          for x in insts})
        t = time.perf_counter()
        swe.generate_instances(n, seed=FLAGS.seed)
        warm = time.perf_counter() - t
    emit(what="generation", instances=n, candidates_tried=tried, kept_fraction=n / tried,
         instances_per_minute_cold=60 * n / cold, seconds_per_instance_cold=cold / n,
         instances_per_minute_cached=60 * n / warm)

    ref_s, none_s, local_s = [], [], []
    for inst in insts:
        t = time.perf_counter()
        assert swe.grade(inst, inst["patch"])
        ref_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        assert not swe.grade(inst, "")
        none_s.append(time.perf_counter() - t)
        with tempfile.TemporaryDirectory() as d:            # same tests, no sandbox
            swe.repo.write_tree(d, grading.corpus_files(inst))
            t = time.perf_counter()
            run = testing.run_local(d, inst["FAIL_TO_PASS"] + inst["PASS_TO_PASS"])
            local_s.append(time.perf_counter() - t)
            assert not run.failing
    emit(what="grading", instances=n, mean_grade_s_reference=statistics.mean(ref_s),
         mean_grade_s_unpatched=statistics.mean(none_s),
         mean_pytest_s_unsandboxed=statistics.mean(local_s),
         tests_per_instance=statistics.mean(len(i["FAIL_TO_PASS"]) + len(i["PASS_TO_PASS"])
                                            for i in insts))

    env = swe.SWEEnv()
    reset_s, total_s, ok = [], [], 0
    for inst in insts:
        t = time.perf_counter()
        env.reset(swe.make_task(inst))
        reset_s.append(time.perf_counter() - t)
        for a in swe.reference_actions(inst):
            res = env.step(a)
        total_s.append(time.perf_counter() - t)
        ok += int(res.reward == 1.0)
    env.close()
    ws = sandbox.Workspace()
    ws.hand_over()
    lat = []
    for _ in range(10):
        t = time.perf_counter()
        ws.run("true")
        lat.append(time.perf_counter() - t)
    ws.close()
    emit(what="episodes", episodes=n, resolved=ok, episodes_per_s=n / sum(total_s),
         mean_reset_s=statistics.mean(reset_s), mean_episode_s=statistics.mean(total_s),
         sandbox_command_ms=1e3 * statistics.median(lat))


if __name__ == "__main__":
    app.run(main)
