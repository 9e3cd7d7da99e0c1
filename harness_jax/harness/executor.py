"""The token-exact multi-turn executor: a policy inside a harness (+ overlay) on an environment.

Per episode: reset the environment, ``on_init`` (skills and tool hints go into the system prompt),
render the opening prompt once and tokenise it. Per turn (``Executor._turn``, one method per
phase): ``make_pre_hint`` (its message joins the pending user/tool turn) -> append the pending
turn as a *token delta* after the assistant's end token, within the context budget ->
``engine.generate`` (token ids in, token ids + log-probs out) -> parse the action ->
``on_before_action`` (block / rewrite / force) and repeated-action accounting -> environment
step(s) -> ``on_post_step`` (inject a hint / force an extra action) -> the observation becomes
the next pending turn. An episode's status is set once, by the phase that ends it.

Hook contexts (``hooks`` documents each field): every hook sees the task, the turn budget, the
recent history, the runtime state and the latest feedback (``observation``, ``last_action``,
``last_error``); ``on_before_action`` adds the proposed ``action``; ``on_post_step`` the actions
sent this turn, their reward and ``done``.

Token exactness: the running conversation is never re-tokenised. Sampled tokens enter the
segment exactly as the engine returned them with loss mask 1 and their log-probs; everything the
harness writes (prompt, observations, hints, a closing ``<|im_end|>`` after a length cut) has mask
0. When the memory policy rewrites earlier context (``sliding_window``), the new context starts a
new segment, so each segment is a prefix-consistent training sequence.

Sampling seeds: with ``ExecutorConfig.seed`` set, turn ``t`` of an episode samples with a seed
derived from ``(seed, sampling_key, t)``. The sampling key defaults to the episode id;
``run_episodes`` uses ``"<task_id>#<j>"`` for the j-th episode of a task, so two runs of the same
tasks (a Harness-R1 baseline and a patched rerun) sample each episode with the same seeds, and an
infrastructure retry replays the same seeds on a fresh environment.

Failures: an environment exception, ``info["infra_error"]``, an engine exception or an aborted
generation is an *infrastructure* error: the whole episode is retried with a fresh environment up
to ``infra_retries`` times; if it still fails the trajectory is flagged ``infra_error`` and is
excluded from training and metrics (never a task failure). A failing hook only loses its effect.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import inspect
import json
import logging
import re
import threading
import time
import uuid
import zlib
from typing import Any, Callable, Optional, Sequence, Union

from harness_jax.envs.base import Env, Task, ToolCall
from harness_jax.harness import workers
from harness_jax.harness.overlay import HookEffect, Overlay
from harness_jax.harness.patches import Patch
from harness_jax.harness.siblings import Sibling
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness.trajectory import Segment, Trajectory, TurnEvent
from harness_jax.sampling import chat
from harness_jax.sampling.types import (FINISH_ABORT, GenerateRequest, GenerateResult,
                                        RolloutEngine, SamplingParams)

log = logging.getLogger(__name__)

HINT_PREFIX = "[Harness hint] "
NOTE_PREFIX = "[Harness] "


class InfraFailure(Exception):
    """An infrastructure failure inside one attempt (retried; never a task failure)."""


@dataclasses.dataclass(frozen=True)
class ExecutorConfig:
    infra_retries: int = 2          # extra attempts after an infrastructure failure
    concurrency: int = 64           # episodes in flight in run_episodes
    hook_timeout_s: float = 1.0
    overlay_workers: Optional[int] = None  # sandbox processes of an overlay built from a Patch (None: Overlay's default)
    # keep every hook context in the trajectory (inputs of the runtime no-op dry run for
    # cached baselines; O(turns^2) text, so off by default)
    record_hook_contexts: bool = False
    ctx_history_turns: int = 8      # turns of history given to hooks
    ctx_text_chars: int = 1200      # observation/action text cap inside hook contexts
    seed: Optional[int] = None      # base sampling seed (per turn: hash of seed, key, turn)

    def __post_init__(self):
        if self.infra_retries < 0:
            raise ValueError("ExecutorConfig.infra_retries must be >= 0")
        if self.concurrency < 1:
            raise ValueError("ExecutorConfig.concurrency must be >= 1")


def _action_json(action: Any) -> Any:
    if isinstance(action, ToolCall):
        return {"name": action.name, "arguments": action.arguments}
    return action


def _action_key(action: Any) -> str:
    return json.dumps(_action_json(action), sort_keys=True, default=str)


def _to_action(action: Any) -> Any:
    """A hook/rule action (str or {"name","arguments"}) as an environment action."""
    if isinstance(action, dict):
        return ToolCall(str(action["name"]), dict(action.get("arguments") or {}))
    return action


_REACT_ACTION = re.compile(r"^\s*Action\s*:\s*(.+?)\s*$", re.M)
_REACT_INPUT = re.compile(r"^\s*Action Input\s*:\s*(.+)$", re.M | re.S)


def parse_react(text: str, function_protocol: bool) -> tuple[Any, list[str]]:
    """ReAct-style text action: the last ``Action:`` line (plus ``Action Input:`` JSON for tools)."""
    _, body = chat.split_thinking(text)
    acts = _REACT_ACTION.findall(body)
    if not acts:
        return None, ["no 'Action:' line found; end your reply with 'Action: <action>'"]
    act = acts[-1]
    if not function_protocol:
        return act, []
    m = _REACT_INPUT.search(body[body.rfind("Action:"):])
    args: dict = {}
    if m:
        try:
            args = json.loads(m.group(1).strip())
        except json.JSONDecodeError as e:
            return None, [f"'Action Input' is not valid JSON ({e.msg})"]
        if not isinstance(args, dict):
            return None, ["'Action Input' must be a JSON object"]
    return ToolCall(act.strip(), args), []


@dataclasses.dataclass(frozen=True)
class _Limits:
    """Per-episode knobs a patch's ``set_config`` may override."""

    max_obs: int
    hint_cap: int
    repeat_limit: int
    stall_turns: int


class _Episode:
    """Mutable state of one attempt."""

    def __init__(self, episode_id: str, sampling_key: str, task: Task, env: Env,
                 traj: Trajectory, limits: _Limits):
        self.episode_id = episode_id
        self.sampling_key = sampling_key
        self.task, self.env, self.traj, self.limits = task, env, traj, limits
        self.segments: list[Segment] = [Segment()]
        self.head_msgs: list[dict] = []      # system + first user (for re-rendering)
        self.turn_msgs: list[list[dict]] = []  # messages of each completed turn
        self.engine_keys: list[str] = []     # engine caches of finished segments
        self.nb: dict = {}
        self.history: list[dict] = []
        self.hook_contexts: list[dict] = []
        self.admissible: Optional[list[str]] = None  # from step info, when the env lists them
        self.task_info: dict = {}
        self.function_protocol = False
        self.tools: list = []
        self.render_tools: Optional[list] = None
        self.pending: list[str] = []         # feedback for the next turn (user or tool turns)
        self.pending_kind = "first"          # first | user | tool
        self.turn = 0
        self.status: Optional[str] = None    # set once, by the phase that ends the episode
        # runtime state shown to hooks
        self.last_action_key: Optional[str] = None
        self.repeat_count = 0
        self.no_progress = 0
        self.n_errors = 0
        self.last_action: Optional[list] = None
        self.last_error: Optional[str] = None
        self.observation = ""                # the latest feedback, as relayed to the policy
        traj.segments = self.segments         # shared: partial episodes (time limit) keep tokens
        traj.hook_contexts = self.hook_contexts

    @property
    def seg(self) -> Segment:
        return self.segments[-1]

    def engine_key(self) -> str:
        return f"{self.episode_id}/s{len(self.segments) - 1}"

    def end(self, status: str) -> None:
        if self.status is None:
            self.status = status


@dataclasses.dataclass
class _Turn:
    """One turn in progress."""

    event: TurnEvent
    text: str = ""
    actions: list = dataclasses.field(default_factory=list)
    parse_errors: list = dataclasses.field(default_factory=list)
    observations: list = dataclasses.field(default_factory=list)
    sent: list = dataclasses.field(default_factory=list)
    errors: list = dataclasses.field(default_factory=list)   # feedback that reports an error
    done: bool = False


class Executor:
    """Runs episodes of ``harness`` (+ ``overlay``) with ``engine`` on environments from
    ``env_factory``. One executor may run many episodes concurrently (asyncio).

    ``harness`` may be a ``Sibling`` (a spec plus its own patch: Harness-S). Every trajectory
    records ``meta["sibling_id"]`` (a plain spec's is its harness id) and ``episode_meta``. An
    ``Overlay`` passed in is shared (its worker pool serves every executor it is given to); one
    built here from a patch is stopped by ``close()``."""

    def __init__(self, engine: RolloutEngine, env_factory: Callable[[], Env],
                 harness: Union[HarnessSpec, Sibling], tokenizer=None,
                 overlay: Union[None, Patch, Overlay] = None,
                 config: ExecutorConfig = ExecutorConfig(), run_id: str = "", store=None,
                 env_name: Optional[str] = None, backend=None,
                 episode_meta: Optional[dict] = None):
        if isinstance(harness, Sibling):    # a sibling is a spec plus its own overlay
            if overlay is not None:
                raise TypeError("Executor: give a Sibling (spec + its patch) or a spec and an "
                                "overlay, not a Sibling and an overlay")
            harness, overlay = harness.spec, harness.patch
        if not isinstance(harness, HarnessSpec):
            raise TypeError(f"harness must be a HarnessSpec or a Sibling, got {type(harness).__name__}")
        if tokenizer is None:
            from harness_jax.sampling.tokenizer import load_tokenizer

            tokenizer = load_tokenizer()
        self.engine = engine
        self.env_factory = env_factory
        self.harness = harness
        self.tokenizer = tokenizer
        self.config = config
        self.run_id = run_id
        self.store = store
        self.env_name = env_name
        self._owns_overlay = isinstance(overlay, Patch)   # built here: close() stops its workers
        if isinstance(overlay, Patch):
            overlay = Overlay(overlay, env_name=env_name or overlay.benchmark or None,
                              timeout_s=config.hook_timeout_s, workers=config.overlay_workers)
        self.overlay: Optional[Overlay] = overlay
        # episode workers (``harness.workers``): None / in-process runs episodes here
        self.backend = backend if getattr(backend, "remote", False) else None
        self._recipe: Optional[workers.Ref] = None
        self._remote_stats: dict[int, dict] = {}
        # which sibling produced the episodes (H0 and plain specs: the spec's id), plus the
        # caller's provenance (e.g. the Harness-S pool version), recorded in every trajectory
        self.sibling_id = Sibling(harness, overlay.patch if overlay is not None else None).sibling_id
        self.episode_meta = dict(episode_meta or {})
        ids = {}
        for tok in ("<|im_end|>", "<|endoftext|>"):
            tid = tokenizer.convert_tokens_to_ids(tok)
            if tid is None or (tokenizer.unk_token_id is not None and tid == tokenizer.unk_token_id):
                raise ValueError(f"the tokenizer has no id for {tok!r}; the executor needs a "
                                 "Qwen chat-format tokenizer")
            ids[tok] = int(tid)
        self.im_end = ids["<|im_end|>"]
        self.stop_ids = (ids["<|im_end|>"], ids["<|endoftext|>"])

    # -- one attempt --------------------------------------------------------------------------------
    async def _attempt(self, task: Task, traj: Trajectory, episode_id: str,
                       sampling_key: str) -> None:
        env = self.env_factory()
        if inspect.isawaitable(env):
            env = await env
        ep = _Episode(episode_id, sampling_key, task, env, traj, self._limits())
        try:
            await self._start(ep)
            while ep.status is None:
                await self._turn(ep)
            await self._score(ep)
        finally:
            await self._release(ep)

    async def _turn(self, ep: _Episode) -> None:
        """One turn; ends the episode (``ep.status``) when a phase says so."""
        if ep.turn >= self.harness.rules.max_turns:
            return ep.end("max_turns")
        turn = _Turn(TurnEvent(index=ep.turn, segment=len(ep.segments) - 1))
        await self._pre_hint(ep, turn)
        if not self._extend_context(ep, turn):
            return ep.end("context_full")
        await self._sample(ep, turn)
        if self._parse_reply(ep, turn):
            await self._act(ep, turn)
            await self._post_step(ep, turn)
        self._close_turn(ep, turn)

    # -- phases -------------------------------------------------------------------------------------
    async def _start(self, ep: _Episode) -> None:
        """Reset, ``on_init``, the opening prompt (rendered once, as the first pending turn)."""
        h, task = self.harness, ep.task
        try:
            first_obs = await ep.env.areset(task)
        except Exception as e:  # noqa: BLE001 - any reset failure is infrastructure
            raise InfraFailure(f"env reset failed: {type(e).__name__}: {e}") from e
        ep.function_protocol = getattr(ep.env, "protocol", "text") == "function"
        ep.task_info = {"id": task.task_id, "env": task.env_name, "category": task.category,
                        "instruction": self._cap(first_obs)}
        ep.observation = str(first_obs)
        init = await self._hook(ep, "on_init", self._ctx(ep, "on_init"), None)
        if init is not None:
            ep.traj.meta["on_init"] = init.result
        ep.tools = self._tools(ep.env, init) if ep.function_protocol else []
        json_block = ""
        if ep.tools and h.calling_convention == "json":
            json_block = (
                "# Tools\n\nCall a tool by replying with <tool_call>{\"name\": <function-name>,"
                " \"arguments\": <args-json-object>}</tool_call>. Available functions:\n"
                + "\n".join(chat.tool_json(t) for t in ep.tools))
        ep.render_tools = ep.tools if (ep.tools and h.calling_convention == "qwen_xml") else None
        system = self._system_prompt(init, json_block)
        if system:
            ep.head_msgs.append({"role": "system", "content": system})
        ep.head_msgs.extend(dict(m) for m in h.preamble)
        ep.pending = [h.task_template.format(observation=self._inserted(first_obs),
                                             env=task.env_name)]
        ep.pending_kind = "first"

    async def _pre_hint(self, ep: _Episode, turn: _Turn) -> None:
        """``make_pre_hint``: its message joins the pending turn."""
        hint = await self._hook(ep, "make_pre_hint", self._ctx(ep, "make_pre_hint"), turn.event)
        if hint is not None:
            ep.pending[-1] = (ep.pending[-1].rstrip() + "\n\n" + HINT_PREFIX
                              + self._inserted(hint.result["message"], ep.limits.hint_cap))

    def _pending_messages(self, ep: _Episode) -> list[dict]:
        if ep.pending_kind == "tool":
            return [{"role": "tool", "content": p} for p in ep.pending]
        if ep.pending_kind == "user":
            return [{"role": "user", "content": "\n\n".join(ep.pending)}]
        return []

    def _extend_context(self, ep: _Episode, turn: _Turn) -> bool:
        """Appends the pending turn as a token delta; past the context budget the memory policy
        re-renders head + recent turns into a new segment. False: it does not fit."""
        h = self.harness
        think = h.enable_thinking
        if ep.pending_kind == "first":
            ep.head_msgs = ep.head_msgs + [{"role": "user", "content": ep.pending[0]}]
            delta_text = chat.render_messages(ep.head_msgs, tools=ep.render_tools,
                                              enable_thinking=think)
        elif ep.pending_kind == "tool":
            delta_text = chat.tool_turn_delta(ep.pending, enable_thinking=think)
        else:
            delta_text = chat.user_turn_delta("\n\n".join(ep.pending), enable_thinking=think)
        pend_msgs = self._pending_messages(ep)
        delta = self._encode(delta_text)
        budget = h.memory.max_context_tokens
        if len(ep.seg) + len(delta) + 1 > budget:
            if h.memory.kind != "sliding_window" or ep.pending_kind == "first":
                return False
            delta = self._rewritten_context(ep, pend_msgs, budget)
            if delta is None:
                return False
            ep.engine_keys.append(ep.engine_key())
            ep.segments.append(Segment())
            turn.event.segment = len(ep.segments) - 1
        ep.seg.append_context(delta)
        if pend_msgs and ep.turn_msgs:
            ep.turn_msgs[-1].extend(pend_msgs)
        return True

    def _rewritten_context(self, ep: _Episode, pend_msgs: list[dict], budget: int
                           ) -> Optional[list[int]]:
        """Head + as many recent turns as fit + the pending turn, tokenised (None: not even the
        head and the pending turn fit)."""
        keep = [m for t in ep.turn_msgs[-self.harness.memory.window_turns:] for m in t]
        while True:
            text = chat.render_messages(ep.head_msgs + keep + pend_msgs, tools=ep.render_tools,
                                        enable_thinking=self.harness.enable_thinking)
            delta = self._encode(text)
            if len(delta) + 1 <= budget:
                return delta
            if not keep:
                return None
            keep = keep[1:]

    def _turn_seed(self, ep: _Episode) -> Optional[int]:
        if self.config.seed is None:
            return None
        key = f"{ep.sampling_key}/{ep.turn}".encode()
        return (self.config.seed * 1000003 + zlib.crc32(key)) % (2 ** 31)

    async def _sample(self, ep: _Episode, turn: _Turn) -> None:
        """One generation; the sampled tokens enter the segment as they are (loss mask 1)."""
        h, ev = self.harness, turn.event
        budget = h.memory.max_context_tokens
        params = SamplingParams(
            temperature=h.temperature, top_p=h.top_p, top_k=h.top_k,
            max_new_tokens=max(1, min(h.rules.max_tokens_per_turn, budget - len(ep.seg))),
            stop_token_ids=self.stop_ids, seed=self._turn_seed(ep))
        req = GenerateRequest(input_ids=list(ep.seg.token_ids), params=params,
                              request_id=f"{ep.episode_id}-t{ep.turn}-{uuid.uuid4().hex[:6]}",
                              episode_id=ep.engine_key())
        t0 = time.perf_counter()
        try:
            res: GenerateResult = await self.engine.generate(req)
        except Exception as e:  # noqa: BLE001
            raise InfraFailure(f"engine failed: {type(e).__name__}: {e}") from e
        ev.timings["generate_s"] = time.perf_counter() - t0
        if res.finish_reason == FINISH_ABORT:
            raise InfraFailure(f"generation aborted: {getattr(res, 'message', '')}")
        if not res.token_ids:
            raise InfraFailure("engine returned no tokens")
        ev.start = len(ep.seg)
        ep.seg.append_sampled(res.token_ids, res.logprobs)
        tv = getattr(res, "token_versions", None)
        # weights may change mid-request: the oldest version bounds the staleness
        ep.seg.policy_versions.append(int(min(tv)) if tv else int(res.weight_version))
        ev.n_sampled = len(res.token_ids)
        ev.finish_reason = res.finish_reason
        ev.weight_version = int(res.weight_version)
        sampled = list(res.token_ids)
        if sampled[-1] != self.im_end:
            ep.seg.append_context([self.im_end])  # close the turn (never trained on)
        body = sampled[:-1] if sampled[-1] in self.stop_ids else sampled
        turn.text = ev.raw_text = self._decode(body)
        ep.turn_msgs.append([{"role": "assistant", "content": turn.text}])

    def _parse_reply(self, ep: _Episode, turn: _Turn) -> bool:
        """The action(s) of the reply. False: the reply ends the episode (a stop string, or an
        unparsable reply under ``on_unparsable="end"``)."""
        rules, ev = self.harness.rules, turn.event
        turn.actions, turn.parse_errors = self._parse(turn.text, ep.function_protocol, ep.tools)
        ev.parse_errors = turn.parse_errors
        ev.policy_action = [_action_json(a) for a in turn.actions] if turn.actions else None
        if any(s in turn.text for s in rules.stop_strings):
            ep.end("stopped")
            return False
        if turn.actions:
            return True
        errors = "; ".join(turn.parse_errors) or "no action found"
        turn.errors.append(errors)
        if rules.on_unparsable == "end":
            ev.errors.append("unparsable action: " + "; ".join(turn.parse_errors))
            ep.end("unparsable")
            return False
        if rules.on_unparsable == "pass_raw":
            turn.actions = [chat.split_thinking(turn.text)[1]]
        else:
            turn.observations.append(rules.unparsable_message.format(errors=errors))
        return True

    async def _act(self, ep: _Episode, turn: _Turn) -> None:
        """Each action: ``on_before_action``, repeated-action accounting, the environment step."""
        for act in turn.actions:
            act = await self._before_action(ep, turn, act)
            if act is None:
                continue
            if self._repeated(ep, turn, act):
                return ep.end("repeated_action")
            await self._step(ep, turn, act)
            if turn.done:
                return

    async def _before_action(self, ep: _Episode, turn: _Turn, act: Any) -> Any:
        """``on_before_action``: the action to send (rewritten or forced), or None if blocked."""
        act_ctx = {"name": act.name if isinstance(act, ToolCall) else None,
                   "arguments": act.arguments if isinstance(act, ToolCall) else {},
                   "text": self._cap(act if isinstance(act, str) else
                                     json.dumps(_action_json(act))),
                   "parse_errors": turn.parse_errors}
        state = self._state(ep, repeat_count=self._repeat_count(ep, act))
        eff = await self._hook(ep, "on_before_action", self._ctx(
            ep, "on_before_action", action=act_ctx, state=state), turn.event)
        if eff is None:
            return act
        message = eff.result.get("message")
        if eff.result["kind"] == "block_and_prompt":
            turn.observations.append(NOTE_PREFIX + self._inserted(message, ep.limits.hint_cap))
            turn.errors.append(f"blocked: {message}")
            return None
        if not self._admissible(ep, eff.result["action"], turn.event):
            return act
        if message:
            turn.observations.append(NOTE_PREFIX + self._inserted(message, ep.limits.hint_cap))
        return _to_action(eff.result["action"])

    def _repeat_count(self, ep: _Episode, act: Any) -> int:
        return ep.repeat_count + 1 if _action_key(act) == ep.last_action_key else 0

    def _repeated(self, ep: _Episode, turn: _Turn, act: Any) -> bool:
        """Counts identical consecutive actions; True when the limit ends the episode."""
        rules, limit = self.harness.rules, ep.limits.repeat_limit
        ep.repeat_count = self._repeat_count(ep, act)
        ep.last_action_key = _action_key(act)
        if not limit or ep.repeat_count + 1 < limit:
            return False
        if rules.on_repeated == "end":
            turn.done = True
            return True
        turn.observations.append(rules.repeated_message.format(count=ep.repeat_count + 1))
        return False

    async def _step(self, ep: _Episode, turn: _Turn, act: Any, forced: bool = False) -> None:
        """One environment step; its observation joins the turn's feedback."""
        h = self.harness
        step = await self._env_step(ep, act, turn.event)
        turn.event.reward += float(step.reward)
        err = (step.info or {}).get("error")
        if err:
            turn.errors.append(str(err))
        if forced:
            turn.event.action = (turn.event.action or []) + [_action_json(act)]
            obs = (NOTE_PREFIX + "executed " + json.dumps(_action_json(act)) + "\n"
                   + h.observation.apply(self._inserted(step.observation),
                                         max_chars=ep.limits.max_obs))
        else:
            turn.sent.append(_action_json(act))
            obs = h.observation.apply(self._inserted(step.observation), turn=ep.turn,
                                      turns_left=h.rules.max_turns - ep.turn - 1,
                                      max_chars=ep.limits.max_obs)
        turn.observations.append(obs)
        if step.done and h.rules.stop_on_done:
            turn.done = True

    async def _post_step(self, ep: _Episode, turn: _Turn) -> None:
        """``on_post_step`` (not after the episode ended: there is nothing to recover)."""
        turn.event.action = turn.sent or None
        if turn.done:
            return
        ctx = self._ctx(ep, "on_post_step", action={"sent": turn.sent},
                        observation=self._cap("\n".join(turn.observations)),
                        last_action=turn.sent or None,
                        last_error="; ".join(turn.errors) or None,
                        reward=turn.event.reward, done=turn.done)
        post = await self._hook(ep, "on_post_step", ctx, turn.event)
        if post is None:
            return
        if post.result["kind"] == "inject_hint":
            turn.observations.append(HINT_PREFIX + self._inserted(post.result["message"],
                                                                  ep.limits.hint_cap))
        elif self._admissible(ep, post.result["action"], turn.event):
            await self._step(ep, turn, _to_action(post.result["action"]), forced=True)

    def _close_turn(self, ep: _Episode, turn: _Turn) -> None:
        """Records the turn and makes its feedback the next pending turn."""
        ev = turn.event
        ev.observation = "\n".join(turn.observations)
        ev.done = turn.done
        prev_obs = ep.history[-1]["observation"] if ep.history else None
        stuck = not turn.sent or self._cap(ev.observation) == prev_obs
        ep.no_progress = ep.no_progress + 1 if stuck else 0
        ep.n_errors += bool(turn.errors)
        ep.last_action = turn.sent or None
        ep.last_error = "; ".join(turn.errors) or None
        ep.observation = ev.observation
        ep.history.append({"turn": ep.turn, "action": turn.sent,
                           "observation": self._cap(ev.observation), "error": ep.last_error})
        ep.traj.turns.append(ev)
        ep.turn += 1
        if turn.done:
            ep.end("completed")
        ep.pending = turn.observations or ["(no observation)"]
        ep.pending_kind = "tool" if ep.function_protocol else "user"

    async def _score(self, ep: _Episode) -> None:
        traj = ep.traj
        try:
            evaluation = await ep.env.aevaluate()
        except Exception as e:  # noqa: BLE001
            raise InfraFailure(f"env evaluate failed: {type(e).__name__}: {e}") from e
        traj.evaluation = dict(evaluation)
        traj.success = bool(evaluation.get("success", False))
        traj.reward = float(evaluation.get("score", 1.0 if traj.success else 0.0))
        traj.status = ep.status
        versions = [v for s in ep.segments for v in s.policy_versions]
        traj.policy_version = min(versions) if versions else int(self.engine.weight_version)

    async def _release(self, ep: _Episode) -> None:
        for k in ep.engine_keys + [ep.engine_key()]:
            try:
                await self.engine.end_episode(k)
            except Exception:  # noqa: BLE001 - releasing cache is best effort
                log.debug("end_episode(%s) failed", k)
        try:
            await ep.env.aclose()
        except Exception:  # noqa: BLE001
            log.debug("env close failed", exc_info=True)

    # -- helpers -----------------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def _cap(self, text: Any) -> str:
        s = str(text if text is not None else "")
        n = self.config.ctx_text_chars
        return s if len(s) <= n else s[:n // 2] + " [...] " + s[-(n // 2):]

    def _limits(self) -> _Limits:
        cfg = self.overlay.config if self.overlay else {}
        h = self.harness
        return _Limits(max_obs=int(cfg.get("max_observation_chars", h.observation.max_chars)),
                       hint_cap=int(cfg.get("max_hint_chars", 900)),
                       repeat_limit=int(cfg.get("repeated_action_limit",
                                                h.rules.repeated_action_limit)),
                       stall_turns=int(cfg.get("stall_turns", 3)))

    def _ctx(self, ep: _Episode, hook: str, **extra) -> dict:
        """What hook ``hook`` reads (documented per hook in ``harness.hooks``)."""
        rules = self.harness.rules
        ctx = {"hook": hook, "env": ep.task_info["env"], "task": ep.task_info, "turn": ep.turn,
               "max_turns": rules.max_turns, "turns_left": rules.max_turns - ep.turn,
               "history": ep.history[-self.config.ctx_history_turns:],
               "state": self._state(ep),
               "observation": self._cap("\n".join(ep.pending) if ep.pending else ep.observation),
               "last_action": ep.last_action, "last_error": ep.last_error}
        if ep.admissible is not None:
            ctx["admissible_actions"] = ep.admissible[:200]
        ctx.update(extra)
        return ctx

    def _state(self, ep: _Episode, repeat_count: Optional[int] = None) -> dict:
        return {"turn": ep.turn,
                "repeat_count": ep.repeat_count if repeat_count is None else repeat_count,
                "no_progress_turns": ep.no_progress,
                "stalled": ep.no_progress >= ep.limits.stall_turns, "errors": ep.n_errors,
                "notes": len(ep.nb)}

    def _inserted(self, text: str, cap: Optional[int] = None) -> str:
        """Harness-inserted text: control tokens neutralised, optionally capped."""
        text = chat.neutralize_control_tokens(str(text))
        return text[:cap] if cap else text

    async def _hook(self, ep: _Episode, hook: str, ctx: dict, event: Optional[TurnEvent]
                    ) -> Optional[HookEffect]:
        if self.config.record_hook_contexts:
            ep.hook_contexts.append({"hook": hook, "ctx": ctx, "episode": ep.episode_id})
        ov = self.overlay
        if ov is None or ov.patch is None:
            return None
        t0 = time.perf_counter()
        try:
            if ov.code.get(hook):
                eff = await asyncio.to_thread(ov.call, hook, ctx, ep.nb)
            else:
                eff = ov.call(hook, ctx, ep.nb)
        except Exception as e:  # noqa: BLE001 - a broken overlay only loses its effect
            log.warning("overlay %s: %s raised %s: %s", ov.overlay_id, hook, type(e).__name__, e)
            ov.stats[hook]["failures"] += 1
            eff = None
        if event is not None:
            event.timings["hooks_s"] = event.timings.get("hooks_s", 0.0) + time.perf_counter() - t0
            if eff is not None:
                event.interventions.append({"hook": hook, "source": eff.source,
                                            "result": eff.result})
        return eff

    def _tools(self, env: Env, init_effect) -> Optional[list[dict]]:
        tools = self.harness.tools
        tools = [json.loads(json.dumps(t)) for t in (tools if tools is not None else
                                                     env.tool_specs())]
        if init_effect is None:
            return tools
        for h in init_effect.result.get("tool_hints", []):
            for t in tools:
                fn = t.get("function", t)
                if h["tool"] not in ("*", fn.get("name")) or h["tool"] == "*":
                    continue
                desc = fn.get("description", "")
                fn["description"] = {"append": f"{desc} {h['text']}".strip(),
                                     "prepend": f"{h['text']} {desc}".strip(),
                                     "replace": h["text"]}[h["mode"]]
        return tools

    def _system_prompt(self, init_effect, json_tools_block: str) -> str:
        parts = [self.harness.system_prompt.strip()]
        conv = self.harness.calling_convention
        if init_effect is not None:
            skills = init_effect.result.get("skills") or []
            if skills:
                parts.append("# Skills\n" + "\n".join(f"- {s}" for s in skills))
            general = [h["text"] for h in init_effect.result.get("tool_hints", [])
                       if h["tool"] == "*"]
            if general:
                parts.append("# Tool usage notes\n" + "\n".join(f"- {g}" for g in general))
        if json_tools_block and conv == "json":
            parts.append(json_tools_block)
        return "\n\n".join(p for p in parts if p)

    def _parse(self, text: str, function_protocol: bool, tools) -> tuple[list, list[str]]:
        conv = self.harness.calling_convention
        if self.harness.enable_thinking and chat.THINK_CLOSE not in text:
            # the prompt opened <think>: without </think> everything is still reasoning
            return [], ["the reply never closed its <think> block (no action after </think>)"]
        if conv == "react":
            act, errs = parse_react(text, function_protocol)
            return ([act] if act is not None else []), errs
        if not function_protocol:
            content = chat.split_thinking(text)[1].strip()
            return ([content] if content else []), ([] if content else ["empty reply"])
        content, calls, errs = chat.parse_tool_calls(text, tools=tools or None)
        if calls:
            return list(calls), errs
        if errs:
            return [], errs
        # no tool call at all: the environment decides what a plain reply means
        return ([content] if content else []), ([] if content else ["empty reply"])

    @staticmethod
    def _admissible(ep: _Episode, action: Any, event: TurnEvent) -> bool:
        """A hook's text action must be one the environment lists as admissible (if it does)."""
        if isinstance(action, str) and ep.admissible is not None and action not in ep.admissible:
            event.errors.append(f"hook action {action[:80]!r} is not admissible; ignored")
            return False
        return True

    async def _env_step(self, ep: _Episode, action: Any, event: TurnEvent):
        t0 = time.perf_counter()
        try:
            step = await ep.env.astep(action)
        except Exception as e:  # noqa: BLE001 - environment machinery failed
            raise InfraFailure(f"env step failed: {type(e).__name__}: {e}") from e
        event.timings["env_s"] = event.timings.get("env_s", 0.0) + time.perf_counter() - t0
        info = step.info or {}
        if info.get("infra_error"):
            raise InfraFailure(f"env reported an infrastructure error: {step.observation[:200]}")
        adm = info.get("admissible_actions", info.get("admissible_commands"))
        if isinstance(adm, (list, tuple)):
            ep.admissible = [str(a) for a in adm]
        return step

    def close(self) -> None:
        """Stops the hook workers of the overlay this executor built from a patch (an
        ``Overlay`` passed in belongs to the caller, who may share it across executors) and
        releases what episode workers built for it."""
        if self.overlay is not None and self._owns_overlay:
            self.overlay.close()
        self.release()

    def release(self) -> None:
        """Drops what episode workers built for this executor (its executor copies and their
        hook workers); the executor stays usable (workers rebuild on the next episode)."""
        if self._recipe is not None:
            self.backend.drop(self._recipe)
            self._recipe = None

    # -- public API ----------------------------------------------------------------------------------
    async def run_episode(self, task: Task, episode_id: Optional[str] = None,
                          group_id: str = "", sampling_key: Optional[str] = None) -> Trajectory:
        """One episode with bounded infrastructure retries; always returns a trajectory.

        ``sampling_key`` (default: the episode id) keys the per-turn sampling seeds (module
        docstring); it is recorded in ``traj.meta["sampling_key"]``. With a remote ``backend``
        the episode runs in an episode worker (``_run_remote``).
        """
        episode_id = episode_id or f"ep-{uuid.uuid4().hex[:12]}"
        sampling_key = sampling_key or episode_id
        if self.backend is not None:
            return await self._run_remote(task, episode_id, group_id, sampling_key)
        async with _process_slot(self.env_name or task.env_name,
                                 getattr(self.env_factory, "process_concurrency", None)):
            return await self._run_local(task, episode_id, group_id, sampling_key)

    async def _run_local(self, task: Task, episode_id: str, group_id: str,
                         sampling_key: str) -> Trajectory:
        t_start = time.perf_counter()
        errors: list[str] = []
        for attempt in range(self.config.infra_retries + 1):
            traj = self._new_trajectory(task, episode_id, group_id, sampling_key)
            try:
                await asyncio.wait_for(
                    self._attempt(task, traj, f"{episode_id}/a{attempt}", sampling_key),
                    timeout=self.harness.rules.episode_timeout_s)
            except InfraFailure as e:
                errors.append(str(e))
                log.warning("episode %s attempt %d: infrastructure failure: %s", episode_id,
                            attempt, e)
                continue
            except asyncio.TimeoutError:
                traj.status = "time_limit"
                traj.success = False
                traj.reward = 0.0
                versions = [v for seg in traj.segments for v in seg.policy_versions]
                traj.policy_version = min(versions) if versions else 0
                traj.errors.append(f"episode exceeded {self.harness.rules.episode_timeout_s}s")
            traj.infra_attempts = attempt
            traj.errors = errors + traj.errors
            break
        else:
            traj = self._infra_trajectory(traj, errors)
        traj.hook_stats = self.overlay.stats_dict() if self.overlay else {}
        return self._finish(traj, t_start)

    def _new_trajectory(self, task: Task, episode_id: str, group_id: str,
                        sampling_key: str) -> Trajectory:
        return Trajectory(episode_id=episode_id, task_id=task.task_id, env_name=task.env_name,
                          harness_id=self.harness.harness_id,
                          overlay_id=self.overlay.overlay_id if self.overlay else "",
                          group_id=group_id, run_id=self.run_id,
                          meta={"harness_name": self.harness.name, "split": task.split,
                                "category": task.category, "sampling_key": sampling_key,
                                "sampling_seed": self.config.seed,
                                "sibling_id": self.sibling_id, **self.episode_meta})

    def _infra_trajectory(self, traj: Trajectory, errors: list[str]) -> Trajectory:
        """Every attempt failed on infrastructure: flagged, never scored or trained on."""
        traj.infra_error = True
        traj.status = "infra_error"
        traj.success = None
        traj.reward = 0.0
        traj.infra_attempts = self.config.infra_retries + 1
        traj.errors = list(errors)
        traj.segments = []
        return traj

    def _finish(self, traj: Trajectory, t_start: float) -> Trajectory:
        traj.timings["episode_s"] = time.perf_counter() - t_start
        if self.store is not None:
            self.store.append(traj)
        return traj

    # -- episode workers ---------------------------------------------------------------------------
    def _recipe_ref(self) -> "workers.Ref":
        """What a worker needs to rebuild this executor, shared once per worker."""
        if self._recipe is None:
            ov = self.overlay
            recipe = _Recipe(
                env_factory=self.env_factory, harness=self.harness,
                patch=ov.patch if ov is not None else None,
                overlay_env=ov.env_name if ov is not None else None,
                overlay_timeout_s=ov.timeout_s if ov is not None else self.config.hook_timeout_s,
                overlay_workers=ov.workers if ov is not None else None,
                config=self.config, run_id=self.run_id, env_name=self.env_name,
                tokenizer=self.backend.share(self.tokenizer), episode_meta=self.episode_meta)
            self._recipe = self.backend.share(recipe, deps=(recipe.tokenizer,))
        return self._recipe

    async def _run_remote(self, task: Task, episode_id: str, group_id: str,
                          sampling_key: str) -> Trajectory:
        """The episode in a worker (which retries environment/engine failures itself). A lost
        worker is an infrastructure failure too: the episode is rerun, with the same sampling
        key, up to ``infra_retries`` times, then flagged ``infra_error``."""
        t_start = time.perf_counter()
        limit = getattr(self.env_factory, "process_concurrency", None)
        limit = (f"env:{self.env_name or task.env_name}", int(limit)) if limit else None
        lost: list[str] = []
        for _ in range(self.config.infra_retries + 1):
            try:
                traj, stats, wid = await self.backend.run(
                    _remote_episode, self._recipe_ref(), task, episode_id, group_id,
                    sampling_key, engine=self.engine, limit=limit)
            except workers.WorkerLost as e:
                lost.append(f"episode worker lost: {e}")
                log.warning("episode %s: %s", episode_id, e)
                continue
            self._merge_hook_stats(wid, stats)
            traj.meta["worker"] = wid
            traj.infra_attempts += len(lost)
            traj.errors = lost + traj.errors
            traj.meta["workers_lost"] = len(lost)
            break
        else:
            traj = self._infra_trajectory(
                self._new_trajectory(task, episode_id, group_id, sampling_key), lost)
            traj.meta["workers_lost"] = len(lost)
        return self._finish(traj, t_start)

    def _merge_hook_stats(self, worker_id: int, stats: dict) -> None:
        """The overlay's counters here = the sum of every worker's counters for this executor."""
        if self.overlay is None:
            return
        self._remote_stats[worker_id] = stats
        total: dict = collections.defaultdict(collections.Counter)
        for per in self._remote_stats.values():
            for hook, counts in per.items():
                total[hook].update(counts)
        self.overlay.stats = total

    async def run_episodes(self, tasks: Sequence[Task], n_per_task: int = 1,
                           group_prefix: str = "") -> list[Trajectory]:
        """``n_per_task`` episodes of every task, concurrently; one group id per task; the j-th
        episode of a task samples with key ``"<task_id>#<j>"``."""
        if n_per_task < 1:
            raise ValueError(f"n_per_task must be >= 1, got {n_per_task}")
        return await self.run_samples([(t, f"{t.task_id}#{j}") for t in tasks
                                       for j in range(n_per_task)], group_prefix)

    async def run_samples(self, samples: Sequence[tuple[Task, str]],
                          group_prefix: str = "") -> list[Trajectory]:
        """One episode per ``(task, sampling_key)``, concurrently (``config.concurrency``), in
        order; one group id per task. Rerunning the keys of earlier trajectories
        (``traj.meta["sampling_key"]``) pairs each new episode with the old one."""
        sem = asyncio.Semaphore(self.config.concurrency)

        async def one(task: Task, key: str) -> Trajectory:
            async with sem:
                gid = f"{group_prefix}{task.task_id}"
                return await self.run_episode(task, episode_id=f"{gid}-{uuid.uuid4().hex[:8]}",
                                              group_id=gid, sampling_key=key)

        return list(await asyncio.gather(*(one(t, k) for t, k in samples)))


_PROCESS_SLOTS: dict[str, threading.Semaphore] = {}
_PROCESS_SLOTS_LOCK = threading.Lock()


@contextlib.asynccontextmanager
async def _process_slot(family: Optional[str], limit: Optional[int]):
    """At most ``limit`` episodes of ``family`` at once in this process, across event loops and
    threads (``Env.process_concurrency``: engines that are not thread-safe, e.g. ALFWorld)."""
    if not limit:
        yield
        return
    with _PROCESS_SLOTS_LOCK:
        sem = _PROCESS_SLOTS.setdefault(f"{family}/{limit}", threading.Semaphore(int(limit)))
    while not sem.acquire(blocking=False):   # polling never ties up the to_thread executor
        await asyncio.sleep(0.005)
    try:
        yield
    finally:
        sem.release()


@dataclasses.dataclass(frozen=True)
class _Recipe:
    """An executor as shipped to episode workers (the engine stays with the driver)."""

    env_factory: Callable
    harness: HarnessSpec
    patch: Optional[Patch]
    overlay_env: Optional[str]
    overlay_timeout_s: float
    overlay_workers: Optional[int]
    config: ExecutorConfig
    run_id: str
    env_name: Optional[str]
    tokenizer: "workers.Ref"
    episode_meta: dict = dataclasses.field(default_factory=dict)


async def _remote_episode(ctx: "workers.WorkerContext", recipe: "workers.Ref", task: Task,
                          episode_id: str, group_id: str, sampling_key: str):
    """Worker job: one episode on the worker's executor for ``recipe`` (built once per worker,
    generation proxied to the driver). Returns the trajectory, the worker's overlay counters
    for this executor and the worker id."""
    def build() -> Executor:
        r: _Recipe = ctx.resident(recipe)
        overlay = None
        if r.patch is not None:
            overlay = Overlay(r.patch, env_name=r.overlay_env, timeout_s=r.overlay_timeout_s,
                              workers=r.overlay_workers)
        return Executor(ctx.engine(), r.env_factory, r.harness,
                        tokenizer=ctx.resident(r.tokenizer), overlay=overlay, config=r.config,
                        run_id=r.run_id, env_name=r.env_name, episode_meta=r.episode_meta)

    ex = ctx.cached(recipe.key, build)
    traj = await ex.run_episode(task, episode_id=episode_id, group_id=group_id,
                                sampling_key=sampling_key)
    return traj, (ex.overlay.stats_dict() if ex.overlay else {}), ctx.worker_id


async def run_episode(engine: RolloutEngine, env_factory: Callable[[], Env], task: Task,
                      harness: Union[HarnessSpec, Sibling],
                      overlay: Union[None, Patch, Overlay] = None, *,
                      tokenizer=None, config: ExecutorConfig = ExecutorConfig(),
                      episode_id: Optional[str] = None, group_id: str = "", run_id: str = "",
                      store=None, backend=None) -> Trajectory:
    """Runs one episode (see ``Executor``; ``backend``: episode workers, None = here)."""
    ex = Executor(engine, env_factory, harness, tokenizer=tokenizer, overlay=overlay,
                  config=config, run_id=run_id, store=store, env_name=task.env_name,
                  backend=backend)
    try:
        return await ex.run_episode(task, episode_id=episode_id, group_id=group_id)
    finally:
        ex.close()          # stops the workers of an overlay it built from a patch


async def run_episodes(engine: RolloutEngine, env_factory: Callable[[], Env],
                       tasks: Sequence[Task], harness: Union[HarnessSpec, Sibling],
                       overlay: Union[None, Patch, Overlay] = None, *, n_per_task: int = 1,
                       tokenizer=None, config: ExecutorConfig = ExecutorConfig(),
                       run_id: str = "", store=None, backend=None) -> list[Trajectory]:
    """Runs ``n_per_task`` episodes of each task concurrently on one engine (``backend``:
    episode workers, None = here)."""
    env_name = tasks[0].env_name if tasks else None
    ex = Executor(engine, env_factory, harness, tokenizer=tokenizer, overlay=overlay,
                  config=config, run_id=run_id, store=store, env_name=env_name, backend=backend)
    try:
        return await ex.run_episodes(tasks, n_per_task=n_per_task)
    finally:
        ex.close()
