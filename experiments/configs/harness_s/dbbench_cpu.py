"""harness_s/dbbench_cpu: the Harness-S method on the learnable CPU DBBench family -- README's main
job (issue 13 §7): ``cpu_learnable``'s task, model and SFT warm start, plus rescue by a frozen
sibling pool, the features router and re-anchoring.

Commands (after ``pip install -e .``; the whole demonstration, docs/harness_s.md "CPU
demonstration")::

    # 1) SFT warm start once (also published in sft.cache_dir for the method and its baselines)
    python launch/train.py --config=experiments/configs/harness_s/grpo_only.py \
        --workdir=/tmp/hs/sft --config.num_steps=0 --config.eval.at_start=False
    # 2) evolve the frozen pool with the warm-started policy (deterministic edit operators)
    python launch/evolve.py --config=experiments/configs/harness_s/dbbench_cpu.py \
        --workdir=/tmp/hs/evolve --checkpoint=/tmp/hs/sft
    POOL=$(ls /tmp/hs/evolve/pool/pool-*.json)
    # 3) the method, one seed (seeds share the warm start through init_from; the task tokenizer
    #    is the warm start's)
    python launch/train.py --config=experiments/configs/harness_s/dbbench_cpu.py:$POOL \
        --workdir=/tmp/hs/hs-s0 --config.seed=0 --config.model.init_from=/tmp/hs/sft \
        --config.sft.enabled=False
    # 4) the GRPO-only control: the same with --config=experiments/configs/harness_s/grpo_only.py
    #    and --workdir=/tmp/hs/grpo-s0; seeds 1 and 2 likewise
    # 5) the plot and table over seeds
    python experiments/probes/hs_demo_report.py --root=/tmp/hs --out=/tmp/hs/demo.png
    # Rank-1 routing against H0 on held-out tasks
    python launch/evaluate.py --config=experiments/configs/harness_s/dbbench_cpu.py:$POOL \
        --workdir=/tmp/hs/eval --checkpoint=/tmp/hs/hs-s0 --routing=rank1 --num_tasks=64

(``c.seed`` is part of the SFT cache key, so ``--sweep=seeds`` of this config would train one
warm start per seed; ``init_from`` shares one.) Sweeps: ``python launch/sweep.py
--config=experiments/configs/harness_s/dbbench_cpu.py:$POOL --sweep=seeds --workdir=/tmp/hs/seeds``
(``seeds``; ``seeds_x_router`` crosses them with the features, validation and random routers).

What it does per GRPO step: G=8 rollouts of 8 tasks under H0; a group whose 8 attempts all
failed (no infrastructure error) is rescued: the features router picks K=2 distinct siblings
from the pool, the 8 attempts are split over them, and their episodes replace the group, with
the 8 original failures in the advantage statistics (calibration "with_original"); the turns an
overlay's guard rewrote, forced or blocked are masked out of the loss (``train.rollout.to_episode``).
After step 6 (``reanchor.every_steps=6``; never after the last step, so once in 12 steps),
validation of H0 and every sibling is re-run with the current policy and the router's statistics,
offline profiles and success models are refreshed. Held-out H0 evaluation (Avg@4 at T=1, plus
one greedy attempt, 64 selection tasks) at steps 0, 6 and 12. Writes ``progress.png``, ``metrics.jsonl`` (``rescue/*``), the routing log
``harness_s/routing.jsonl`` and ``summary.json`` (``harness_s`` section).

Expected result (measured 2026-11-30, 3 seeds per arm, 2 shared and loaded CPU cores; every
number in docs/harness_s.md "CPU demonstration"): SFT 17 min, evolution 70 s (pool of 8; joint
validation coverage 12/16, best single sibling 7/16, H0 1/16), 8.5-12 min per run. Rescue
triggers on 0.59 ± 0.05 of the groups and succeeds on 0.63 ± 0.03 of them, so the zero-variance
fraction of the trained groups is 0.25 ± 0.03 against 0.64 ± 0.06 for ``grpo_only`` (counted over
the advantage statistics, the original failures included: today's
``groups/zero_variance_fraction_with_baseline``; the trained-episodes reading, now
``groups/zero_variance_fraction``, was not measured). Held-out
H0 Avg@4: 0.102 at step 0, 0.121 ± 0.004 at step 6, 0.077 ± 0.004 at step 12 (the control:
0.102, 0.125, 0.078 ± 0.004); against the warm start on the same sampling stream, 12 steps
changed it by -0.001 ± 0.004: no held-out gain over GRPO only in this budget. These figures
predate the GRPO defaults and evaluation of 2026-12-02 (``rl.skip_no_signal`` and
``rl.reference_kl`` on; evaluation sampling keyed by (task, attempt), so every evaluation draws
the same random numbers; ``eval.greedy``). Re-measured once since, with 1 seed, through
``launch/main.py`` (2026-12-02, 2 heavily loaded cores, docs/harness_s.md §10): 447 s for 12
steps; rescue triggered on 0.562 of the groups and succeeded on 0.628. The zero-variance fraction
after rescue was 0.438 counting the trained episodes and 0.250 with the original failures.
Held-out H0 Avg@4 was 0.145 at start and at the end, +0.000 [+0.000, +0.000] against GRPO only;
greedy 0.344, +0.047 [+0.000, +0.109]. No gain is shown.
"""
from experiments.configs import cpu_learnable
from experiments.configs.harness_s import common

ROUTERS = ("features", "validation_topk", "random")


def get_config(pool: str = ""):
    c = common.with_harness_s(cpu_learnable.get_config(), pool)
    c.name = "hs_dbbench_cpu"
    c.num_steps = 12                      # GRPO steps after the warm start (3 seeds x 2 arms fit ~1 h on 2 loaded cores)
    c.sft.cache_dir = "~/.cache/harness_jax/sft"  # one warm start for the method and its baselines
    c.eval.every_steps = 6                # held-out H0 evaluation at steps 0, 6 and 12
    c.eval.num_tasks = 64                 # held-out selection tasks (Avg@4 at T=1)
    hs = c.harness_s
    hs.rescue.enabled = True              # rescue all-failed H0 groups
    hs.rescue.split = "split"             # the G=8 attempts shared by the K helpers
    hs.rescue.calibration = "with_original"  # originals in the statistics: an all-success rescue teaches
    hs.router.name = "features"           # offline router: per-sibling success models on H0-failure features
    hs.router.top_k = 2                   # helpers per rescue (4 attempts each)
    hs.validation.split = "search"        # validation tasks of evolution and re-anchoring
    hs.validation.num_tasks = 16          # small: re-anchoring runs every sibling on each
    hs.validation.k = 2                   # attempts per validation task
    hs.reanchor.every_steps = 6           # re-anchored profiles and statistics (once: after step 6 of 12)
    hs.evolve.num_train_tasks = 32        # fresh training tasks for the repair directions
    hs.evolve.max_generations = 2         # generations of children
    hs.evolve.children_per_direction = 4  # every deterministic operator of a direction (at most 4 per direction)
    hs.evolve.max_child_evaluations = 16  # children evaluated on validation
    return c


SWEEPS = {
    "seeds": common.seeds(),
    "seeds_x_router": common.seeds_x("harness_s.router.name", ROUTERS),
    "routed_vs_random": common.seeds_x("harness_s.router.name", ("features", "random")),  # 3 seeds x 2 routers
}
