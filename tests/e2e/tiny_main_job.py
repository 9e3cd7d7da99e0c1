"""The main job at CI size (``launch/main.py --job=tests/e2e/tiny_main_job.py``): the tiny
random policy of ``tiny_hs_config`` (it solves nothing, so every group is all-fail and both
rescue arms fire on every group), a 2-step SFT warm start, one generation of evolution on two
training tasks, and the three arms for one GRPO step each, without re-anchoring."""
from harness_jax.jobs.harness_s_main import Job
from tests.e2e import tiny_hs_config


def _base(pool=""):
    c = tiny_hs_config.get_config(pool)
    c.num_steps = 1
    c.eval.num_tasks = 2
    c.eval.k = 1
    c.harness_s.reanchor.every_steps = 0
    c.harness_s.evolve.num_train_tasks = 2
    c.harness_s.evolve.max_child_evaluations = 2
    return c


def grpo(pool=""):
    c = _base("")
    c.name = "tiny_main_grpo"
    c.harness_s.rescue.enabled = False
    return c


def resample(pool=""):
    c = grpo()
    c.name = "tiny_main_resample"
    c.harness_s.rescue.enabled = True
    c.harness_s.rescue.helpers = "h0"
    return c


def harness_s(pool=""):
    c = _base(pool)
    c.name = "tiny_main_harness_s"
    return c


JOB = Job(warm_start=grpo, evolve=_base, arms=lambda: {"grpo": grpo, "resample": resample, "harness_s": harness_s},
          pool_arms=("harness_s",))
