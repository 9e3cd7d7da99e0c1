"""Builders of recorded trajectories for extractor/feature/profile tests (plain data, no engine).

Each turn is ``(action, observation)`` or ``(action, observation, parse_errors)``; an action is a
text reply (text protocol) or ``{"name", "arguments"}`` (a tool call); ``None`` = no action.
"""
from harness_jax.harness.trajectory import Segment, Trajectory, TurnEvent

_n = [0]


def traj(task_id, turns, success=False, status="completed", infra=False, category=None,
         logprob=-0.1, evaluation=None):
    _n[0] += 1
    evs = []
    for i, t in enumerate(turns):
        action, obs = t[0], t[1]
        perrs = list(t[2]) if len(t) > 2 else []
        evs.append(TurnEvent(index=i, segment=0, raw_text=str(action or ""),
                             action=None if action is None else [action],
                             policy_action=None if action is None else [action],
                             parse_errors=perrs, observation=obs))
    seg = Segment(token_ids=[1, 2, 3, 4], loss_mask=[0, 1, 1, 1], logprobs=[0.0] + [logprob] * 3)
    return Trajectory(episode_id=f"ep{_n[0]}", task_id=task_id, env_name="dbbench",
                      harness_id="h", segments=[seg], turns=evs, reward=float(success),
                      success=None if infra else success, status="infra_error" if infra else status,
                      infra_error=infra, evaluation=evaluation or {},
                      meta={"category": category})


ANSWER = 'Action: Answer\nFinal Answer: ["3"]'
SQL = "Action: Operation\n```sql\nSELECT * FROM `t`;\n```"


def router_cfg(**over):
    """``harness_s.router_config()`` with dotted overrides (``**{"votes.voters": ...}``)."""
    from harness_jax import harness_s

    c = harness_s.router_config()
    for k, v in over.items():
        node, *rest = k.split(".")
        if rest:
            c[node][rest[0]] = v
        else:
            c[k] = v
    return c
