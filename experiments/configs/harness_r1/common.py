"""The Harness-R1 engineer-training schema: the project's experiment schema plus an ``r1`` section.

The engineer is a policy trained by the project's loop, so every section of
``experiments.configs.common.base_config()`` keeps its meaning, applied to the ENGINEER:
``model`` (the engineer's Qwen3.5), ``mesh``, ``rollout`` (the engineer's engine and sampling:
``temperature``, ``max_new_tokens`` = the response budget, ``max_len`` = packet prompt +
response), ``rl`` (``group_size`` = K samples per packet, ``tasks_per_step`` = packets per step,
the loss: ``agg``, ``eps_low/high``, ``tis_mode/tis_cap``, async and staleness), ``opt``, ``sft``
(the cold-start SFT's steps, batch size, lr, schedule, checkpoint period; the gold-demonstration
fields ``num_demos``, ``seed_offset``, ``demo_concurrency`` belong to the agent loop and are not
used here), ``ckpt``, ``eval`` (held-out packets: ``num_tasks`` packets, ``k`` samples each at
``temperature``, ``every_steps``, ``at_start``), ``log``. The environment sections describe the
TARGET's benchmark (``env.train_split`` feeds the train packets, ``env.eval_split`` the held-out
packets); ``harness`` is the target's base harness and sandbox.

``r1`` holds what only Harness-R1 has: the frozen target, the packet dataset, the cold-start
teacher, the SFT normalisation, the reward's options and the table's arms; it is typed, with one
comment per field, in ``harness_jax.harness_r1.config`` and checked by the method that owns it
(``harness_jax.harness_r1.method``) whenever the config is resolved.
"""
from __future__ import annotations

import ml_collections

from experiments.configs import common
from harness_jax.harness_r1.config import r1_section


def engineer_config() -> ml_collections.ConfigDict:
    """``base_config()`` with the ``r1`` section and the engineer's loss defaults (METHODS)."""
    c = common.base_config()
    c.r1 = r1_section()                   # Harness-R1: target, packets, teacher, reward, table
    c.sft.enabled = True                  # cold-start SFT before GRPO
    c.rl.group_size = 8                   # K samples per packet
    c.rl.tasks_per_step = 4               # packets per GRPO step
    c.rl.agg = "seq_mean_token_mean"      # (1/K) sum_k (1/T_k) sum_t
    c.rl.eps_low = 0.2                    # asymmetric clip
    c.rl.eps_high = 0.28                  # clip-higher
    c.rl.tis_mode = "cap"                 # w = min(exp(l_tr - l_ro), tis_cap); "literal" = the paper's printed clip(l_tr - l_ro, 0, 2)
    c.rl.tis_cap = 2.0                    # the truncation C
    c.rl.max_staleness = 4                # async: the method's bound on policy lag
    c.harness.thinking = False            # the target's chat template (the engineer always thinks: its prompt prefills <think>)
    return c
