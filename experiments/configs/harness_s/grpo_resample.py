"""harness_s/grpo_resample: the equal-budget control of Harness-S (issue 25 item 6): GRPO with H0
resampling of all-fail groups. ``grpo_only``'s run (same task family, model, warm start, GRPO
settings and evaluation), except that a group whose G=8 attempts under H0 all failed gets 8
fresh attempts under H0 itself (``harness_s.rescue.helpers="h0"``), which replace it with the 8
original failures in the advantage statistics (calibration ``"with_original"``), exactly as
``dbbench_cpu`` rescues such a group with 8 attempts under router-picked siblings. Both arms thus
spend the same extra rollouts on the same groups; only the harness of those rollouts differs
(re-anchoring's validation rollouts, which only Harness-S spends, are not training rollouts).
No pool is needed; the pool argument is accepted and unused. Metrics: ``rescue/*`` as for
Harness-S (``rescue/success_rate``: groups the re-roll rescued), ``rollout/success_rate_h0``.

Commands::

    python launch/main.py --arms=grpo,resample,harness_s          # all arms, from the cached warm start
    python launch/train.py --config=experiments/configs/harness_s/grpo_resample.py \
        --workdir=/tmp/hs/resample-s0 --config.seed=0 --config.model.init_from=/tmp/hs/sft \
        --config.sft.enabled=False

Expected result (pre-registered comparison: its final held-out H0 Avg@4 minus ``grpo_only``'s,
paired by (seed, task), 95% bootstrap interval, as ``launch/main.py`` reports it). Measured once,
1 seed, 2026-12-02, on 2 heavily loaded cores: 444 s for 12 steps. Rescue triggered on 0.573 of
the groups, and the H0 re-roll rescued 0.128 of those (Harness-S's siblings: 0.628). Held-out H0
Avg@4 0.141 against GRPO only's 0.145: -0.004 [-0.016, +0.008], i.e. no difference shown
(docs/harness_s.md §10). The 3-seed measurement is pending.
"""
from experiments.configs.harness_s import common, grpo_only


def get_config(pool: str = ""):
    c = grpo_only.get_config(pool)
    c.name = "hs_grpo_resample_cpu"
    c.harness_s.rescue.enabled = True     # all-fail H0 groups get G more attempts ...
    c.harness_s.rescue.helpers = "h0"     # ... under H0 itself: the equal-budget control
    c.harness_s.rescue.split = "split"    # the G attempts of one helper (H0): G more rollouts, as Harness-S spends
    c.harness_s.rescue.calibration = "with_original"  # the same statistics as dbbench_cpu's rescue
    c.harness_s.reanchor.every_steps = 0  # nothing to re-anchor
    return c


SWEEPS = {"seeds": common.seeds()}
