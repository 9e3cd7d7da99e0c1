"""The main job in one command (thin main; the pipeline is harness_jax.jobs.harness_s_main):

    python3 launch/main.py [--workdir=/tmp/hs] [--seeds=3] [--arms=grpo,resample,harness_s] \
        [--steps=N] [--set=rl.group_size=8 ...] [--warm_start=DIR] [--job=experiments/jobs/harness_s_cpu.py]

SFT warm start (cached by its config), sibling-pool evolution (cached), the arms -- GRPO only,
GRPO with H0 resampling of all-fail groups (the equal-budget control), Harness-S -- for each seed
from that warm start, then the report: tables, curves and report.html over the runs (one row per
arm, seeds pooled) and paired.md, each arm's held-out H0 success minus GRPO only's with a 95%
bootstrap interval over (seed, task). Every phase prints a line when it starts and when it ends
(with its wall time); re-running the command skips finished phases and runs and resumes an
interrupted one from its checkpoint; SIGTERM checkpoints the current run and stops the job.

Seeds: 3 by default (0, 1, 2), the number the comparison's intervals are meant over; --seeds=1 is
the quick look (one seed per arm).

Measured (2026-12-02, once, on 2 CPU cores shared with other jobs, load average 8-10):
``--seeds=1`` from a warm start built beforehand (``--warm_start=/tmp/hs/sft``, key matched)
took 23.7 min: evolution 89 s, GRPO only 433 s, H0 resampling 444 s, Harness-S 447 s, report
10 s. Held-out H0 Avg@4 minus GRPO only's (64 tasks x 4, paired, 95% interval): resampling
-0.004 [-0.016, +0.008], Harness-S +0.000 [+0.000, +0.000] (greedy +0.047 [+0.000, +0.109]);
no arm beats GRPO only (docs/harness_s.md §10). Not measured: the 3-seed default, or a run that
includes SFT (11-17 min on 2026-11-30).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

from harness_jax import distributed  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/hs", "everything goes here: sft/, evolve/, runs/<arm>-s<seed>/, report/")
_SEEDS = flags.DEFINE_integer("seeds", 3, "seeds per arm (0..N-1); 3 for intervals over seeds, 1 for a quick look")
_ARMS = flags.DEFINE_list("arms", [], "arms to run, the first is the paired table's baseline ('' = the job's default: "
                          "grpo,resample,harness_s)")
_STEPS = flags.DEFINE_integer("steps", None, "GRPO steps of every arm (default: each arm config's num_steps)")
_SET = flags.DEFINE_multi_string("set", [], "PATH=VALUE config override of every arm (VALUE a Python literal or a string)")
_WARM = flags.DEFINE_string("warm_start", "", "an existing finished SFT workdir to reuse (its config must give this "
                            "job's warm-start key); '' = <workdir>/sft, trained when missing")
distributed.define_flags()
_JOB = flags.DEFINE_string("job", os.path.join(ROOT, "experiments", "jobs", "harness_s_cpu.py"),
                           "the job module (its JOB: warm start, evolution and arm configs)")


def _overrides(items):
    import ast

    out = []
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise app.UsageError(f"--set={it!r}: expected PATH=VALUE, e.g. --set=rl.group_size=8")
        try:
            out.append((k, ast.literal_eval(v)))
        except (ValueError, SyntaxError):
            out.append((k, v))
    return tuple(out)


def main(argv):
    del argv
    distributed.initialize()
    from harness_jax.jobs import harness_s_main as main_job
    opts = main_job.Options(workdir=os.path.abspath(os.path.expanduser(_WORKDIR.value)),
                            seeds=tuple(range(_SEEDS.value)), arms=tuple(_ARMS.value), steps=_STEPS.value,
                            overrides=_overrides(_SET.value), warm_start=_WARM.value)
    try:
        main_job.run(main_job.load_job(_JOB.value), opts)
    except main_job.Stopped as e:
        print(f"[main] stopped: {e}", file=sys.stderr)
        return 143
    return 0


if __name__ == "__main__":
    import jax
    jax.config.config_with_absl()
    app.run(lambda argv: sys.exit(main(argv)))
