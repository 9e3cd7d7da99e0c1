"""harness_s/hs_executed_credit: the Harness-S method (``dbbench_cpu``) with the credit
alternative ``harness_s.rescue.credit="executed_action"`` (issue 25 item 6): a helper turn whose
answer an overlay rewrote (mostly ``answer_from_result``, through which most rescues succeed) is
also trained on the action the environment executed, rendered as the policy's reply, with the
episode's advantage (``harness_jax/harness_s/credit.py``); under the paper's rule
(``policy_tokens``, ``dbbench_cpu``) that turn is masked and only the SQL turn is credited.

Commands::

    python launch/main.py --arms=grpo,harness_s,hs_executed_credit
    python launch/train.py --config=experiments/configs/harness_s/hs_executed_credit.py:$POOL \
        --workdir=/tmp/hs/credit-s0 --config.model.init_from=/tmp/hs/sft --config.sft.enabled=False

Expected result: not measured yet (pending; compare its held-out H0 Avg@4 with ``dbbench_cpu``'s
and ``grpo_only``'s, paired by (seed, task), as ``launch/main.py`` reports it).
"""
from experiments.configs.harness_s import common, dbbench_cpu


def get_config(pool: str = ""):
    c = dbbench_cpu.get_config(pool)
    c.name = "hs_executed_credit_cpu"
    c.harness_s.rescue.credit = "executed_action"  # rewritten actions are trained too
    return c


SWEEPS = {"seeds": common.seeds()}
