"""The Harness-S CPU main job (``launch/main.py``'s default ``--job``): the learnable DBBench
family of ``experiments/configs/cpu_learnable.py``, its SFT warm start (``grpo_only`` with no
GRPO step), the sibling pool evolved with that policy (``dbbench_cpu``'s evolution settings), and
the arms, all from the same warm start with the same GRPO settings and rollout budget per step:

* ``grpo``: GRPO only (``harness_s/grpo_only.py``), the baseline of the paired table;
* ``resample``: GRPO with H0 resampling of all-fail groups, G more attempts under H0 where
  Harness-S spends G attempts under helpers (``harness_s/grpo_resample.py``);
* ``harness_s``: the method, rescue by router-picked siblings (``harness_s/dbbench_cpu.py``);
* ``hs_executed_credit`` / ``hs_no_rewrites`` (not run unless ``--arms`` names them): Harness-S
  crediting executed rewritten actions / without action-rewriting siblings.

Pre-registered comparison (written before any run of this job): an arm beats GRPO only when the
95% paired bootstrap interval of its final held-out H0 Avg@4 minus GRPO only's (the arms' own
evaluation: 64 ``selection`` tasks x 4 attempts at T=1 on the same random numbers, pairs of
(seed, task), ``<workdir>/report/paired.md``) lies above 0; below 0, it is worse; otherwise no
difference is shown. One seed is reported as a single-seed observation, not a result over seeds.
"""
from experiments.configs.harness_s import dbbench_cpu, grpo_only, grpo_resample, hs_executed_credit, hs_no_rewrites
from harness_jax.jobs.harness_s_main import Job

DEFAULT_ARMS = ("grpo", "resample", "harness_s")


def arms():
    return {"grpo": grpo_only.get_config, "resample": grpo_resample.get_config,
            "harness_s": dbbench_cpu.get_config, "hs_executed_credit": hs_executed_credit.get_config,
            "hs_no_rewrites": hs_no_rewrites.get_config}


JOB = Job(warm_start=grpo_only.get_config, evolve=dbbench_cpu.get_config, arms=arms,
          pool_arms=("harness_s", "hs_executed_credit", "hs_no_rewrites"), default_arms=DEFAULT_ARMS)
