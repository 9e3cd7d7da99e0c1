"""harness_s/dbbench_cpu: the Harness-S method on generated DBBench, 2 CPU cores (the tiny_cpu
main job plus rescue by a frozen sibling pool, the features router, re-anchoring).

Commands (after ``pip install -e .``)::

    # 1) SFT warm start once (cached in sft.cache_dir; shared by every config of this directory)
    python launch/train.py --config=experiments/configs/harness_s/grpo_only.py \
        --workdir=/tmp/hs/sft --config.num_steps=0
    # 2) evolve the frozen pool with the warm-started policy
    python launch/evolve.py --config=experiments/configs/harness_s/dbbench_cpu.py \
        --workdir=/tmp/hs/evolve --checkpoint=/tmp/hs/sft
    POOL=$(ls /tmp/hs/evolve/pool/pool-*.json)
    # 3) the method (the pool is the config argument)
    python launch/train.py --config=experiments/configs/harness_s/dbbench_cpu.py:$POOL \
        --workdir=/tmp/hs/run
    # 4) Rank-1 routing against H0 on held-out tasks
    python launch/evaluate.py --config=experiments/configs/harness_s/dbbench_cpu.py:$POOL \
        --workdir=/tmp/hs/eval --checkpoint=/tmp/hs/run --routing=rank1 --num_tasks=64

Sweeps: ``python launch/sweep.py --config=experiments/configs/harness_s/dbbench_cpu.py:$POOL
--sweep=seeds --workdir=/tmp/hs/seeds`` (``seeds``; ``seeds_x_router`` crosses them with the
features, validation and random routers).

What it does per GRPO step: G=4 rollouts of 4 tasks under H0; a group whose 4 attempts all
failed (no infrastructure error) is rescued: the features router picks K=2 distinct siblings
from the pool, the 4 attempts are split over them, and their episodes replace the group, with
the 4 original failures in the advantage statistics (calibration "with_original"). Every 5
steps, validation of H0 and every sibling is re-run with the current policy and the router's
statistics and profiles are refreshed. Held-out H0 evaluation on 64 selection tasks at steps 0,
5 and 10. Writes ``progress.png``, ``metrics.jsonl`` (``rescue/*``), the routing log
``harness_s/routing.jsonl`` and ``summary.json`` (``harness_s`` section).

Expected result: not measured yet. The tiny_cpu policy solves no generated task after SFT
(docs/training.md), so every H0 group fails: rescue triggers on every group
(``rescue/trigger_rate`` 1.0), and rescue success stays 0 until some sibling lets the policy
solve a task; the learnable CPU task of issue 13 §7 is what makes this measurable. Wall time:
tiny_cpu's (~9 min) plus rescue rollouts (up to one extra rollout per group) and two
re-anchorings.
"""
from experiments.configs import tiny_cpu
from experiments.configs.harness_s import common

ROUTERS = ("features", "validation_topk", "random")


def get_config(pool: str = ""):
    c = common.with_harness_s(tiny_cpu.get_config(), pool)
    c.name = "hs_dbbench_cpu"
    c.sft.cache_dir = "~/.cache/harness_jax/sft"  # one warm start for the method and its baselines
    c.eval.every_steps = 5                # held-out H0 evaluation during RL
    c.eval.num_tasks = 64                 # held-out selection tasks
    hs = c.harness_s
    hs.rescue.enabled = True              # rescue all-failed H0 groups
    hs.rescue.split = "split"             # the G=4 attempts shared by the K helpers
    hs.rescue.calibration = "with_original"  # originals in the statistics: an all-success rescue teaches
    hs.router.name = "features"           # offline router: per-sibling success models on H0-failure features
    hs.router.top_k = 2                   # helpers per rescue (a tiny pool)
    hs.validation.split = "search"        # validation tasks of evolution and re-anchoring
    hs.validation.num_tasks = 16          # small: re-anchoring runs every sibling on each
    hs.validation.k = 2                   # attempts per validation task
    hs.reanchor.every_steps = 5           # re-anchored profiles and statistics
    hs.evolve.num_train_tasks = 32        # fresh training tasks for the repair directions
    hs.evolve.max_generations = 2         # generations of children
    hs.evolve.max_child_evaluations = 12  # children evaluated on validation
    return c


SWEEPS = {
    "seeds": common.seeds(),
    "seeds_x_router": common.seeds_x("harness_s.router.name", ROUTERS),
}
