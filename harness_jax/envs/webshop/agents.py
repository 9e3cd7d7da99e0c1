"""Scripted WebShop policies for tests and benchmarks: the oracle and the random agent.

Both read what an agent sees (the page's available actions) and return WebShop actions
(``search[...]``/``click[...]``); ``as_reply`` wraps one for a protocol.

* ``OracleAgent``: searches the goal's instruction (falling back to the target's exact title
  when the instruction does not bring the target into the 50 results: the oracle knows the
  target), pages to the target, opens it, clicks the goal's option values, buys.
* ``RandomAgent``: uniform over the page's actions; on a page with a search bar it searches a
  random subset of the instruction's words.
"""
from __future__ import annotations

import random
from typing import Optional

from harness_jax.envs.base import ToolCall
from harness_jax.envs.webshop.reward import token_set_ratio
from harness_jax.envs.webshop.env import WebShopEnv


def as_reply(action: str, protocol: str, thought: str = "I think this is the next step."):
    """A WebShop action as a text-protocol reply or an FC tool call."""
    if protocol == "text":
        return f"Thought:\n{thought}\n\nAction:\n{action}"
    name, _, arg = action.partition("[")
    arg = arg[:-1] if arg.endswith("]") else arg
    if name == "search":
        return ToolCall("search_action", {"keywords": arg})
    return ToolCall("click_action", {"value": arg})


def _goal_option_values(goal: dict) -> list:
    opts = goal.get("goal_options") or {}
    return list(opts.values()) if isinstance(opts, dict) else list(opts)


class OracleAgent:
    """Knows the goal's target product (``goal["asin"]``); see module docstring."""

    def __init__(self, world, goal: dict):
        self.world = world
        self.goal = goal
        self.target = str(goal["asin"]).lower()
        self.pending: Optional[list] = None
        self.used_title_search = False

    def keywords(self) -> str:
        """The instruction, unless the target is not among its 50 results: then the title."""
        instr = self.goal["instruction_text"]
        idx = self.world.index_of(self.goal["asin"])
        if idx is not None and idx in self.world.search(instr.lower()):
            return instr
        self.used_title_search = True
        return self.world.product(idx)["Title"] if idx is not None else instr

    def act(self, available: dict) -> str:
        clk = available["clickables"]
        if available["has_search_bar"]:
            return f"search[{self.keywords()}]"
        if self.target in clk:
            self.pending = None
            return f"click[{self.target}]"
        if "buy now" in clk:       # on the target's item page
            if self.pending is None:
                self.pending = self._option_clicks(clk)
            if self.pending:
                return f"click[{self.pending.pop(0)}]"
            return "click[buy now]"
        if "next >" in clk:
            return "click[next >]"
        return "click[back to search]"

    def _option_clicks(self, clickables: list) -> list:
        out = []
        for want in _goal_option_values(self.goal):
            w = str(want).lower()
            if w in clickables:
                out.append(w)
                continue
            # human goals name options loosely: the closest option value on the page
            best = max(clickables, key=lambda c: token_set_ratio(c, w), default=None)
            if best is not None and token_set_ratio(best, w) > 85 and best not in (
                    "back to search", "< prev", "buy now"):
                out.append(best)
        return out


class RandomAgent:
    """Uniformly random valid actions (see module docstring)."""

    def __init__(self, goal: dict, rng: random.Random):
        self.words = goal["instruction_text"].lower().split()
        self.rng = rng

    def act(self, available: dict) -> str:
        choices = [f"click[{c}]" for c in available["clickables"] if c != "search"]
        if available["has_search_bar"]:
            k = self.rng.randint(1, min(6, len(self.words)))
            choices.append("search[" + " ".join(self.rng.sample(self.words, k)) + "]")
        return self.rng.choice(choices)


def run_policy(env, task, policy, protocol: Optional[str] = None) -> dict:
    """Plays ``policy`` in ``env`` on ``task`` until the episode ends; returns evaluate()."""
    protocol = protocol or env.protocol
    env.reset(task)
    res = None
    while res is None or not res.done:
        res = env.step(as_reply(policy.act(env.available_actions), protocol))
    return env.evaluate()


def oracle_replies(task, protocol: str = "text", world=None) -> list:
    """The oracle's replies for ``task`` in ``protocol`` (text replies or ``ToolCall``s), as
    demonstrations (cf. ``dbbench.oracle_reply``); played once on a private env to follow the
    pages."""
    env = WebShopEnv(protocol=protocol, world=world)
    env.reset(task)
    policy = OracleAgent(env.world, task.data["goal"])
    replies = []
    while True:
        replies.append(as_reply(policy.act(env.available_actions), protocol))
        if env.step(replies[-1]).done:
            return replies
