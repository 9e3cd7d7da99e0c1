"""``WebShopEnv``: WebShop's text mode over a shared world, AgentBench's text or FC protocol.

One env runs one episode at a time; all envs of a process share the world (catalog + index)
named by their tasks (``world.get_world``), so concurrent episodes cost one session each.

    env = WebShopEnv(protocol="text")
    first = env.reset(task)          # "Observation:\\n...\\n\\nAvailable Actions:\\n{...}"
    res = env.step("Thought:\\n...\\n\\nAction:\\nsearch[red running shoes]")
    env.evaluate()                   # {"success", "score" (= reward), "reward_info", ...}

Rewards arrive when ``Buy Now`` is clicked (the episode ends); running out of rounds ends it
with reward 0. A WebShop action that is not valid is a no-op (same page, reward 0); a reply
with no action at all gets an explanatory observation and costs a round, or, with
``strict_format=True``, ends the episode with reward 0 as AgentBench v0.2 does.
"""
from __future__ import annotations

from typing import Optional

from harness_jax.envs.base import Action, BlockingEnv, StepResult, Task, ToolCall
from harness_jax.envs.webshop import protocol as proto
from harness_jax.envs.webshop.pages import DONE, Session, Site
from harness_jax.envs.webshop.world import World, get_world

ENV_NAME = "webshop"
SUCCESS_EPS = 1e-9


class WebShopEnv(BlockingEnv):
    """AgentBench-style WebShop episodes.

    Args:
      protocol: ``"text"`` (v0.2) or ``"function"`` (FC tools).
      max_rounds: agent turns per episode (default 10 text / 20 function).
      world: a ``World`` to use for every task (default: the shared world of each task's spec).
      show_attrs: show the ``Attributes`` button on item pages (WebShop's ``show_attrs``).
      strict_format: a text reply without an action ends the episode (v0.2).
      index_dir: where a world's search index is loaded from / saved to.
    """

    name = ENV_NAME

    def __init__(self, protocol: str = "text", max_rounds: Optional[int] = None,
                 world: Optional[World] = None, show_attrs: bool = False,
                 strict_format: bool = False, index_dir: Optional[str] = None):
        if protocol not in ("text", "function"):
            raise ValueError(f"protocol={protocol!r}: expected 'text' or 'function'")
        default = proto.TEXT_ROUNDS if protocol == "text" else proto.FUNCTION_ROUNDS
        self.max_rounds = int(max_rounds) if max_rounds is not None else default
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds={max_rounds} must be >= 1")
        self.protocol = protocol
        self.fixed_world = world
        self.show_attrs = bool(show_attrs)
        self.strict_format = bool(strict_format)
        self.index_dir = index_dir
        self.world: Optional[World] = None
        self.site: Optional[Site] = None
        self.session: Optional[Session] = None
        self.task: Optional[Task] = None
        self._reset_counters()

    # -- prompts -------------------------------------------------------------------------------
    @property
    def instruction(self) -> str:
        return proto.TEXT_INSTRUCTION if self.protocol == "text" else proto.FUNCTION_INSTRUCTION

    def initial_messages(self) -> list:
        """AgentBench's opening turns for the current task, first observation included."""
        if self.session is None:
            raise RuntimeError("initial_messages() needs a task: call reset(task) first")
        first = self._message(first=True)
        if self.protocol == "text":
            return proto.text_opening() + [{"role": "user", "content": first}]
        return [{"role": "system", "content": proto.FUNCTION_INSTRUCTION},
                {"role": "user", "content": first}]

    def tool_specs(self) -> list:
        return [dict(s) for s in proto.TOOL_SPECS] if self.protocol == "function" else []

    # -- state ---------------------------------------------------------------------------------
    def _reset_counters(self) -> None:
        self.rounds = 0
        self.done = False
        self.status = "running"
        self.invalid_actions = 0
        self.actions: list = []

    @property
    def available_actions(self) -> dict:
        """WebShop's ``get_available_actions()`` of the current page."""
        if self.session is None:
            raise RuntimeError("no page yet: call reset(task) first")
        return self.session.available_actions()

    @property
    def observation(self) -> str:
        """The current page text (WebShop's ``env.observation``)."""
        if self.session is None:
            raise RuntimeError("no page yet: call reset(task) first")
        return self.session.observation

    def _message(self, first: bool = False, action: Optional[str] = None,
                 note: Optional[str] = None) -> str:
        msg = proto.observation_message(self.session.observation, self.available_actions,
                                        self.protocol, action=action, first=first)
        return f"{note}\n\n{msg}" if note else msg

    def _world_for(self, task: Task) -> World:
        spec = task.data.get("world")
        if self.fixed_world is not None:
            if spec is not None and dict(spec) != dict(self.fixed_world.spec):
                raise ValueError(f"task {task.task_id} belongs to world {spec}, but this env "
                                 f"was given world {self.fixed_world.spec}")
            return self.fixed_world
        if spec is None:
            raise ValueError(f"task {task.task_id}: task.data['world'] is missing; make tasks "
                             "with harness_jax.envs.webshop.make_task(goal, world_spec)")
        return get_world(spec, index_dir=self.index_dir)

    # -- episode -------------------------------------------------------------------------------
    def _reset_sync(self, task: Task) -> str:
        if not isinstance(task, Task):
            raise TypeError(f"reset(task): expected a Task, got {type(task).__name__}")
        goal = task.data.get("goal") if isinstance(task.data, dict) else None
        if not isinstance(goal, dict) or "instruction_text" not in goal:
            raise ValueError(f"task {task.task_id}: task.data['goal'] must be a WebShop goal "
                             "dict (with instruction_text, attributes, goal_options, "
                             "price_upper, ...)")
        self.world = self._world_for(task)
        if self.site is None or self.site.world is not self.world:
            self.site = Site(self.world, show_attrs=self.show_attrs)
        self.task = task
        self._reset_counters()
        self.session = Session(goal=goal)
        self.site.start(self.session)
        return self._message(first=True)

    def _webshop_action(self, action: Action, info: dict) -> Optional[str]:
        """The WebShop action string in an agent action (None: no action found)."""
        if self.protocol == "text":
            if not isinstance(action, str):
                raise TypeError(f"protocol='text' takes str actions, got {type(action).__name__}"
                                "; use protocol='function' for ToolCall actions")
            a = proto.parse_text_action(action)
            if a is None:
                info["invalid_action"] = proto.NO_ACTION_TEXT
            return a
        if isinstance(action, str):
            info["invalid_action"] = proto.NO_TOOL_CALL
            return None
        if not isinstance(action, ToolCall):
            raise TypeError(f"protocol='function' takes ToolCall actions, got "
                            f"{type(action).__name__}")
        a = proto.action_from_tool_call(action.name, action.arguments)
        if a is None:
            info["invalid_action"] = (f"Tool call {action.name!r} could not be used: call "
                                      "search_action with keywords or click_action with a value.")
        return a

    def _finish(self, status: str, message: str, reward: float, info: dict) -> StepResult:
        self.done = True
        self.status = status
        info.update(status=status, success=reward >= 1.0 - SUCCESS_EPS)
        return StepResult(observation=message, reward=float(reward), done=True, info=info)

    def _step_sync(self, action: Action) -> StepResult:
        if self.session is None:
            raise RuntimeError("step() before reset(task): start an episode first")
        if self.done:
            raise RuntimeError("the episode is over; call reset(task) for a new one")
        self.rounds += 1
        info: dict = {"round": self.rounds}
        a = self._webshop_action(action, info)
        if a is None:
            self.invalid_actions += 1
            if self.strict_format and self.protocol == "text":
                return self._finish("invalid_format", info["invalid_action"], 0.0, info)
            if self.protocol == "function":   # AgentBench FC: the message replaces the page
                msg = proto.observation_message(info["invalid_action"], self.available_actions,
                                                "text")
            else:
                msg = self._message(note=info["invalid_action"])
            if self.rounds >= self.max_rounds:
                return self._finish("limit_reached", msg, 0.0, info)
            return StepResult(observation=msg, reward=0.0, done=False, info=info)
        self.actions.append(a)
        reward, done, valid = self.site.step(self.session, a)
        self.invalid_actions += int(not valid)
        info.update(action=a, valid=valid, page=self.session.page,
                    available_actions=self.available_actions)
        msg = self._message(action=a)
        if done:
            info["reward_info"] = dict(self.session.reward_info or {})
            return self._finish("completed", msg, reward, info)
        if self.rounds >= self.max_rounds:
            return self._finish("limit_reached", msg, 0.0, info)
        return StepResult(observation=msg, reward=0.0, done=False, info=info)

    def _evaluate_sync(self) -> dict:
        if self.session is None or self.task is None:
            raise RuntimeError("evaluate() before reset(task): nothing to score")
        s = self.session
        bought = s.page == DONE
        reward = float(s.reward) if bought else 0.0
        purchased = self.world.product(s.product)["asin"] if bought else None
        return {"success": bought and reward >= 1.0 - SUCCESS_EPS, "score": reward,
                "reward": reward, "category": self.task.category, "status": self.status,
                "rounds": self.rounds, "invalid_actions": self.invalid_actions,
                "purchased_asin": purchased, "goal_asin": s.goal.get("asin"),
                "options": dict(s.options), "reward_info": dict(s.reward_info or {})}

    def _close_sync(self) -> None:
        self.session = None


def summarize(evaluations) -> dict:
    """WebShop's metrics over ``evaluate()`` dicts: score = mean reward x 100, success rate =
    share of reward-1 episodes."""
    evs = list(evaluations)
    if not evs:
        return {"n": 0, "score": 0.0, "success_rate": 0.0}
    rewards = [float(e["reward"] if "reward" in e else e["score"]) for e in evs]
    return {"n": len(evs), "score": 100.0 * sum(rewards) / len(rewards),
            "success_rate": sum(r >= 1.0 - SUCCESS_EPS for r in rewards) / len(rewards)}
