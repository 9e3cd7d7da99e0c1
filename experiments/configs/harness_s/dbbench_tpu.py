"""harness_s/dbbench_tpu: Harness-S on DBBench with Qwen3.5-9B on a TPU v5p-32 slice (16 chips;
``tpu_qwen35_9b``'s colocated layout: the embedded engine shares the learner's parameters) plus
rescue with Top-8 helpers from a frozen pool, re-anchored every 25 steps.

Commands (on every host of the slice)::

    python launch/evolve.py --config=experiments/configs/harness_s/dbbench_tpu.py \
        --workdir=gs://$BUCKET/evolve --config.model.hf_path=$QWEN35_9B --checkpoint=$QWEN35_9B \
        --config.harness_s.evolve.out_dir=/mnt/disks/persist/pool
    python launch/train.py --config=experiments/configs/harness_s/dbbench_tpu.py:$POOL \
        --workdir=gs://$BUCKET/run --config.model.hf_path=$QWEN35_9B

Expected result: not run by this project (no TPU here); the config validates and its train step
lowers for a 16-device fsdp mesh on CPU fake devices (tests/harness_s/test_configs.py). The
pool file and the routing log are local files (a ``gs://`` workdir needs
``harness_s.router.log.path`` on a local disk; the run says so). Memory: as ``tpu_qwen35_9b``
(the train step and AOT budget in its docstring); rescue rollouts use the same engine slots.
"""
from experiments.configs import tpu_qwen35_9b
from experiments.configs.harness_s import common


def get_config(pool: str = ""):
    c = common.with_harness_s(tpu_qwen35_9b.get_config(), pool)
    c.name = "hs_dbbench_tpu"
    hs = c.harness_s
    hs.router.name = "features"           # offline router, no LLM (the schema's default is validation_topk)
    hs.router.top_k = 8                   # the papers' best K
    hs.validation.num_tasks = 128         # validation tasks
    hs.validation.k = 3                   # attempts per validation task
    hs.reanchor.every_steps = 25          # re-anchored profiles
    hs.evolve.num_train_tasks = 256       # fresh training tasks
    hs.evolve.max_generations = 3         # generations
    hs.evolve.max_child_evaluations = 48  # children evaluated
    hs.evolve.min_val_solved = 2          # minimum validation solves of a child
    return c


SWEEPS = {
    "seeds": common.seeds(),
    "seeds_x_rescue": common.seeds_x("harness_s.rescue.enabled", (True, False)),
}
