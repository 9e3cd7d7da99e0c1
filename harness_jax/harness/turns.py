"""The turn loop of one episode attempt: the executor's ``TurnLoop`` (one method per turn phase).

Per attempt: reset the environment, ``on_init`` (skills and tool hints go into the system
prompt), render the opening prompt once and tokenise it. Per turn (``TurnLoop._turn``):
``make_pre_hint`` (its message joins the pending user/tool turn) -> append the pending turn as a
*token delta* after the assistant's end token, within the context budget -> ``engine.generate``
(token ids in, token ids + log-probs out) -> parse the action -> ``on_before_action`` (block /
rewrite / force) and repeated-action accounting -> environment step(s) -> ``on_post_step``
(inject a hint / force an extra action) -> the observation becomes the next pending turn. An
episode's status is set once, by the phase that ends it.

Hook contexts (``hooks`` documents each field): every hook sees the task, the turn budget, the
recent history, the runtime state and the latest feedback (``observation``, ``last_action``,
``last_error``); ``on_before_action`` adds the proposed ``action``; ``on_post_step`` the actions
sent this turn, their reward and ``done``.

Token exactness: the running conversation is never re-tokenised. Sampled tokens enter the
segment exactly as the engine returned them with loss mask 1 and their log-probs; everything the
harness writes (prompt, observations, hints, a closing ``<|im_end|>`` after a length cut) has mask
0. When the memory policy rewrites earlier context (``sliding_window``), the new context starts a
new segment, so each segment is a prefix-consistent training sequence.

An environment, engine or evaluation failure raises ``InfraFailure`` (the executor retries the
attempt); a failing hook only loses its effect. An environment failure on an action a hook
supplied (rewritten or forced) ends the episode as a task failure with status
``hook_action_error`` (scored 0 without asking the broken environment), so an overlay can never
turn an episode it is graded on into an infrastructure failure.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import time
import uuid
import zlib
from typing import Any, Optional

from harness_jax.envs.base import Env, Task, ToolCall
from harness_jax.harness import prompting
from harness_jax.harness.hookcalls import HookCalls, Limits
from harness_jax.harness.overlay import Overlay
from harness_jax.harness.prompting import HINT_PREFIX, NOTE_PREFIX, action_json, action_key, inserted
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness.trajectory import Segment, Trajectory, TurnEvent
from harness_jax.sampling import chat
from harness_jax.sampling.types import FINISH_ABORT, GenerateRequest, GenerateResult, RolloutEngine, SamplingParams

log = logging.getLogger(__name__)


class InfraFailure(Exception):
    """An infrastructure failure inside one attempt (retried; never a task failure)."""


class EpisodeState:
    """Mutable state of one attempt."""

    def __init__(self, episode_id: str, sampling_key: str, task: Task, env: Env,
                 traj: Trajectory, limits: Limits):
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
class TurnState:
    """One turn in progress."""

    event: TurnEvent
    text: str = ""
    actions: list = dataclasses.field(default_factory=list)
    parse_errors: list = dataclasses.field(default_factory=list)
    observations: list = dataclasses.field(default_factory=list)
    sent: list = dataclasses.field(default_factory=list)
    errors: list = dataclasses.field(default_factory=list)   # feedback that reports an error
    done: bool = False


class TurnLoop:
    """Runs attempts of episodes of ``harness`` (+ ``overlay``) with ``engine``: the turn phases
    (module docstring). Holds nothing of an episode: each attempt's state is an
    ``EpisodeState``."""

    def __init__(self, engine: RolloutEngine, harness: HarnessSpec, tokenizer, overlay: Optional[Overlay],
                 config):
        self.engine = engine
        self.harness = harness
        self.tokenizer = tokenizer
        self.overlay = overlay
        self.config = config                   # the executor's ExecutorConfig
        self.hooks = HookCalls(harness, overlay, config)
        ids = {}
        for tok in ("<|im_end|>", "<|endoftext|>"):
            tid = tokenizer.convert_tokens_to_ids(tok)
            if tid is None or (tokenizer.unk_token_id is not None and tid == tokenizer.unk_token_id):
                raise ValueError(f"the tokenizer has no id for {tok!r}; the executor needs a "
                                 "Qwen chat-format tokenizer")
            ids[tok] = int(tid)
        self.im_end = ids["<|im_end|>"]
        self.stop_ids = (ids["<|im_end|>"], ids["<|endoftext|>"])

    async def attempt(self, env_factory, task: Task, traj: Trajectory, episode_id: str,
                      sampling_key: str) -> None:
        """One attempt on a fresh environment; fills ``traj`` (raises ``InfraFailure``)."""
        env = env_factory()
        if inspect.isawaitable(env):
            env = await env
        ep = EpisodeState(episode_id, sampling_key, task, env, traj, self.hooks.limits())
        try:
            await self._start(ep)
            while ep.status is None:
                await self._turn(ep)
            await self._score(ep)
        finally:
            await self._release(ep)

    async def _turn(self, ep: EpisodeState) -> None:
        """One turn; ends the episode (``ep.status``) when a phase says so."""
        if ep.turn >= self.harness.rules.max_turns:
            return ep.end("max_turns")
        turn = TurnState(TurnEvent(index=ep.turn, segment=len(ep.segments) - 1))
        await self._pre_hint(ep, turn)
        if not self._extend_context(ep, turn):
            return ep.end("context_full")
        await self._sample(ep, turn)
        if self._parse_reply(ep, turn):
            await self._act(ep, turn)
            await self._post_step(ep, turn)
        self._close_turn(ep, turn)

    # -- phases -------------------------------------------------------------------------------------
    async def _start(self, ep: EpisodeState) -> None:
        """Reset, ``on_init``, the opening prompt (rendered once, as the first pending turn)."""
        h, task = self.harness, ep.task
        try:
            first_obs = await ep.env.areset(task)
        except Exception as e:  # noqa: BLE001 - any reset failure is infrastructure
            raise InfraFailure(f"env reset failed: {type(e).__name__}: {e}") from e
        ep.function_protocol = getattr(ep.env, "protocol", "text") == "function"
        # what hooks read of the task: no task or episode identifier (hooks.py)
        ep.task_info = {"env": task.env_name, "category": task.category,
                        "instruction": self._cap(first_obs)}
        ep.observation = str(first_obs)
        init = await self.hooks.call(ep, "on_init", self.hooks.ctx(ep, "on_init"), None)
        if init is not None:
            ep.traj.meta["on_init"] = init.result
        ep.tools = prompting.tool_list(h, ep.env, init) if ep.function_protocol else []
        json_block = prompting.json_tools_block(ep.tools) if ep.tools and h.calling_convention == "json" else ""
        ep.render_tools = ep.tools if (ep.tools and h.calling_convention == "qwen_xml") else None
        system = prompting.system_prompt(h, init, json_block)
        if system:
            ep.head_msgs.append({"role": "system", "content": system})
        ep.head_msgs.extend(dict(m) for m in h.preamble)
        ep.pending = [h.task_template.format(observation=inserted(first_obs), env=task.env_name)]
        ep.pending_kind = "first"

    async def _pre_hint(self, ep: EpisodeState, turn: TurnState) -> None:
        """``make_pre_hint``: its message joins the pending turn."""
        hint = await self.hooks.call(ep, "make_pre_hint", self.hooks.ctx(ep, "make_pre_hint"), turn.event)
        if hint is not None:
            ep.pending[-1] = (ep.pending[-1].rstrip() + "\n\n" + HINT_PREFIX
                              + inserted(hint.result["message"], ep.limits.hint_cap))

    @staticmethod
    def _pending_messages(ep: EpisodeState) -> list[dict]:
        if ep.pending_kind == "tool":
            return [{"role": "tool", "content": p} for p in ep.pending]
        if ep.pending_kind == "user":
            return [{"role": "user", "content": "\n\n".join(ep.pending)}]
        return []

    def _extend_context(self, ep: EpisodeState, turn: TurnState) -> bool:
        """Appends the pending turn as a token delta; past the context budget the memory policy
        re-renders head + recent turns into a new segment. False: it does not fit."""
        h = self.harness
        think = h.enable_thinking
        if ep.pending_kind == "first":
            ep.head_msgs = ep.head_msgs + [{"role": "user", "content": ep.pending[0]}]
            delta_text = chat.render_messages(ep.head_msgs, tools=ep.render_tools, enable_thinking=think)
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

    def _rewritten_context(self, ep: EpisodeState, pend_msgs: list[dict], budget: int) -> Optional[list[int]]:
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

    def _turn_seed(self, ep: EpisodeState) -> Optional[int]:
        if self.config.seed is None:
            return None
        key = f"{ep.sampling_key}/{ep.turn}".encode()
        return (self.config.seed * 1000003 + zlib.crc32(key)) % (2 ** 31)

    async def _sample(self, ep: EpisodeState, turn: TurnState) -> None:
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

    def _parse_reply(self, ep: EpisodeState, turn: TurnState) -> bool:
        """The action(s) of the reply. False: the reply ends the episode (a stop string, or an
        unparsable reply under ``on_unparsable="end"``)."""
        rules, ev = self.harness.rules, turn.event
        turn.actions, turn.parse_errors = prompting.parse_reply(self.harness, turn.text, ep.function_protocol,
                                                                ep.tools)
        ev.parse_errors = turn.parse_errors
        ev.policy_action = [action_json(a) for a in turn.actions] if turn.actions else None
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

    async def _act(self, ep: EpisodeState, turn: TurnState) -> None:
        """Each action: ``on_before_action``, repeated-action accounting, the environment step."""
        for act in turn.actions:
            act, source = await self._before_action(ep, turn, act)
            if act is None:
                continue
            if self._repeated(ep, turn, act):
                return ep.end("repeated_action")
            await self._step(ep, turn, act, source=source)
            if turn.done:
                return

    async def _before_action(self, ep: EpisodeState, turn: TurnState, act: Any) -> tuple[Any, Optional[str]]:
        """``on_before_action``: ``(action to send, the hook that supplied it or None)``; the
        action is None when blocked. Effects the runtime does not honour never get here
        (``HookCalls.unfit``)."""
        act_ctx = {"name": act.name if isinstance(act, ToolCall) else None,
                   "arguments": act.arguments if isinstance(act, ToolCall) else {},
                   "text": self._cap(act if isinstance(act, str) else json.dumps(action_json(act))),
                   "parse_errors": turn.parse_errors}
        state = self.hooks.state(ep, repeat_count=self._repeat_count(ep, act))
        eff = await self.hooks.call(ep, "on_before_action", self.hooks.ctx(
            ep, "on_before_action", action=act_ctx, state=state), turn.event)
        if eff is None:
            return act, None
        message = eff.result.get("message")
        if eff.result["kind"] == "block_and_prompt":
            turn.observations.append(NOTE_PREFIX + inserted(message, ep.limits.hint_cap))
            turn.errors.append(f"blocked: {message}")
            return None, None
        if message:
            turn.observations.append(NOTE_PREFIX + inserted(message, ep.limits.hint_cap))
        return prompting.to_action(eff.result["action"]), "on_before_action"

    @staticmethod
    def _repeat_count(ep: EpisodeState, act: Any) -> int:
        return ep.repeat_count + 1 if action_key(act) == ep.last_action_key else 0

    def _repeated(self, ep: EpisodeState, turn: TurnState, act: Any) -> bool:
        """Counts identical consecutive actions; True when the limit ends the episode."""
        rules, limit = self.harness.rules, ep.limits.repeat_limit
        ep.repeat_count = self._repeat_count(ep, act)
        ep.last_action_key = action_key(act)
        if not limit or ep.repeat_count + 1 < limit:
            return False
        if rules.on_repeated == "end":
            turn.done = True
            return True
        turn.observations.append(rules.repeated_message.format(count=ep.repeat_count + 1))
        return False

    async def _step(self, ep: EpisodeState, turn: TurnState, act: Any, forced: bool = False,
                    source: Optional[str] = None) -> None:
        """One environment step; its observation joins the turn's feedback. ``source``: the hook
        that supplied ``act`` (None: the policy). An environment failure on a hook's action ends
        the episode as a task failure (``hook_action_error``), never as infrastructure."""
        h = self.harness
        try:
            step = await self._env_step(ep, act, turn.event)
        except InfraFailure as e:
            if source is None:
                raise
            self.hooks.action_failed(ep, source, e, turn.event)
            turn.errors.append(f"hook action failed: {str(e)[:200]}")
            turn.done = True
            return ep.end("hook_action_error")
        turn.event.reward += float(step.reward)
        err = (step.info or {}).get("error")
        if err:
            turn.errors.append(str(err))
        if forced:
            turn.event.action = (turn.event.action or []) + [action_json(act)]
            obs = (NOTE_PREFIX + "executed " + json.dumps(action_json(act)) + "\n"
                   + h.observation.apply(inserted(step.observation), max_chars=ep.limits.max_obs))
        else:
            turn.sent.append(action_json(act))
            obs = h.observation.apply(inserted(step.observation), turn=ep.turn,
                                      turns_left=h.rules.max_turns - ep.turn - 1, max_chars=ep.limits.max_obs)
        turn.observations.append(obs)
        if step.done and h.rules.stop_on_done:
            turn.done = True

    async def _post_step(self, ep: EpisodeState, turn: TurnState) -> None:
        """``on_post_step`` (not after the episode ended: there is nothing to recover)."""
        turn.event.action = turn.sent or None
        if turn.done:
            return
        ctx = self.hooks.ctx(ep, "on_post_step", action={"sent": turn.sent},
                        observation=self._cap("\n".join(turn.observations)), last_action=turn.sent or None,
                        last_error="; ".join(turn.errors) or None, reward=turn.event.reward, done=turn.done)
        post = await self.hooks.call(ep, "on_post_step", ctx, turn.event)
        if post is None:
            return
        if post.result["kind"] == "inject_hint":
            turn.observations.append(HINT_PREFIX + inserted(post.result["message"], ep.limits.hint_cap))
        else:
            await self._step(ep, turn, prompting.to_action(post.result["action"]), forced=True,
                             source="on_post_step")

    def _close_turn(self, ep: EpisodeState, turn: TurnState) -> None:
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

    async def _score(self, ep: EpisodeState) -> None:
        traj = ep.traj
        if ep.status == "hook_action_error":   # the overlay broke the episode: a task failure
            evaluation = {"success": False, "score": 0.0, "status": ep.status}
        else:
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

    async def _release(self, ep: EpisodeState) -> None:
        for k in ep.engine_keys + [ep.engine_key()]:
            try:
                await self.engine.end_episode(k)
            except Exception:  # noqa: BLE001 - releasing cache is best effort
                log.debug("end_episode(%s) failed", k)
        try:
            await ep.env.aclose()
        except Exception:  # noqa: BLE001
            log.debug("env close failed", exc_info=True)

    async def _env_step(self, ep: EpisodeState, action: Any, event: TurnEvent):
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

    # -- text ---------------------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def _cap(self, text: Any) -> str:
        return prompting.capped(text, self.config.ctx_text_chars)
