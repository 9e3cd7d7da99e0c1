"""The token-exact multi-turn executor: a policy inside a harness (+ overlay) on an environment.

Per episode: reset the environment, ``on_init`` (skills and tool hints go into the system prompt),
render the opening prompt once and tokenise it. Per turn: ``make_pre_hint`` (its message joins the
pending user/tool turn) -> append the pending turn as a *token delta* after the assistant's end
token -> ``engine.generate`` (token ids in, token ids + log-probs out) -> parse the action ->
``on_before_action`` (block / rewrite / force) -> environment step(s) -> ``on_post_step``
(inject a hint / force an extra action) -> the observation becomes the next pending turn.

Token exactness: the running conversation is never re-tokenised. Sampled tokens enter the
segment exactly as the engine returned them with loss mask 1 and their log-probs; everything the
harness writes (prompt, observations, hints, a closing ``<|im_end|>`` after a length cut) has mask
0. When the memory policy rewrites earlier context (``sliding_window``), the new context starts a
new segment, so each segment is a prefix-consistent training sequence.

Failures: an environment exception, ``info["infra_error"]``, an engine exception or an aborted
generation is an *infrastructure* error: the whole episode is retried with a fresh environment up
to ``infra_retries`` times; if it still fails the trajectory is flagged ``infra_error`` and is
excluded from training and metrics (never a task failure). A failing hook only loses its effect.
"""
from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import re
import time
import uuid
import zlib
from typing import Any, Callable, Optional, Sequence, Union

from harness_jax.envs.base import Env, Task, ToolCall
from harness_jax.harness import chat
from harness_jax.harness.overlay import Overlay
from harness_jax.harness.patches import Patch
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness.trajectory import Segment, Trajectory, TurnEvent
from harness_jax.sampling.types import (FINISH_ABORT, GenerateRequest, RolloutEngine,
                                        SamplingParams)

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
    seed: Optional[int] = None      # base sampling seed (per request: seed + hash)

    def __post_init__(self):
        if self.infra_retries < 0:
            raise ValueError("ExecutorConfig.infra_retries must be >= 0")
        if self.concurrency < 1:
            raise ValueError("ExecutorConfig.concurrency must be >= 1")


def _action_json(action: Any) -> Any:
    if isinstance(action, ToolCall):
        return {"name": action.name, "arguments": action.arguments}
    return action


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


class _Episode:
    """Mutable state of one attempt."""

    def __init__(self, episode_id: str):
        self.episode_id = episode_id
        self.segments: list[Segment] = [Segment()]
        self.head_msgs: list[dict] = []      # system + first user (for re-rendering)
        self.turn_msgs: list[list[dict]] = []  # messages of each completed turn
        self.nb: dict = {}
        self.history: list[dict] = []
        self.last_action_key: Optional[str] = None
        self.repeat_count = 0
        self.no_progress = 0
        self.n_errors = 0
        self.hook_contexts: list[dict] = []
        self.admissible: Optional[list[str]] = None  # from step info, when the env lists them

    @property
    def seg(self) -> Segment:
        return self.segments[-1]

    def engine_key(self) -> str:
        return f"{self.episode_id}/s{len(self.segments) - 1}"


class Executor:
    """Runs episodes of ``harness`` (+ ``overlay``) with ``engine`` on environments from
    ``env_factory``. One executor may run many episodes concurrently (asyncio)."""

    def __init__(self, engine: RolloutEngine, env_factory: Callable[[], Env], harness: HarnessSpec,
                 tokenizer=None, overlay: Union[None, Patch, Overlay] = None,
                 config: ExecutorConfig = ExecutorConfig(), run_id: str = "", store=None,
                 env_name: Optional[str] = None):
        if not isinstance(harness, HarnessSpec):
            raise TypeError(f"harness must be a HarnessSpec, got {type(harness).__name__}")
        if tokenizer is None:
            from harness_jax.harness.tokenizer import load_tokenizer

            tokenizer = load_tokenizer()
        self.engine = engine
        self.env_factory = env_factory
        self.harness = harness
        self.tokenizer = tokenizer
        self.config = config
        self.run_id = run_id
        self.store = store
        self.env_name = env_name
        if isinstance(overlay, Patch):
            overlay = Overlay(overlay, env_name=env_name or overlay.benchmark or None,
                              timeout_s=config.hook_timeout_s, workers=config.overlay_workers)
        self.overlay: Optional[Overlay] = overlay
        ids = {}
        for tok in ("<|im_end|>", "<|endoftext|>"):
            tid = tokenizer.convert_tokens_to_ids(tok)
            if tid is None or (tokenizer.unk_token_id is not None and tid == tokenizer.unk_token_id):
                raise ValueError(f"the tokenizer has no id for {tok!r}; the executor needs a "
                                 "Qwen chat-format tokenizer")
            ids[tok] = int(tid)
        self.im_end = ids["<|im_end|>"]
        self.stop_ids = (ids["<|im_end|>"], ids["<|endoftext|>"])

    # -- helpers -----------------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def _cap(self, text: Any) -> str:
        s = str(text if text is not None else "")
        n = self.config.ctx_text_chars
        return s if len(s) <= n else s[:n // 2] + " [...] " + s[-(n // 2):]

    def _ctx(self, ep: _Episode, task_info: dict, turn: int, **extra) -> dict:
        rules = self.harness.rules
        ctx = {"env": task_info["env"], "task": task_info, "turn": turn,
               "max_turns": rules.max_turns, "turns_left": rules.max_turns - turn,
               "history": ep.history[-self.config.ctx_history_turns:],
               "state": self._state(ep, turn)}
        if ep.admissible is not None:
            ctx["admissible_actions"] = ep.admissible[:200]
        ctx.update(extra)
        return ctx

    def _state(self, ep: _Episode, turn: int, repeat_count: Optional[int] = None) -> dict:
        stall = int((self.overlay.config if self.overlay else {}).get("stall_turns", 3))
        return {"turn": turn, "repeat_count": ep.repeat_count if repeat_count is None
                else repeat_count, "no_progress_turns": ep.no_progress,
                "stalled": ep.no_progress >= stall, "errors": ep.n_errors, "notes": len(ep.nb)}

    def _inserted(self, text: str, cap: Optional[int] = None) -> str:
        """Harness-inserted text: control tokens neutralised, optionally capped."""
        text = chat.neutralize_control_tokens(str(text))
        return text[:cap] if cap else text

    async def _hook(self, ep: _Episode, hook: str, ctx: dict, event: Optional[TurnEvent]):
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

    # -- one attempt --------------------------------------------------------------------------------
    async def _attempt(self, task: Task, traj: Trajectory, episode_id: str) -> None:
        h = self.harness
        rules = h.rules
        env = self.env_factory()
        if inspect.isawaitable(env):
            env = await env
        ep = _Episode(episode_id)
        traj.segments = ep.segments          # shared: partial episodes (time limit) keep tokens
        traj.hook_contexts = ep.hook_contexts
        engine_keys: list[str] = []
        try:
            try:
                first_obs = await env.areset(task)
            except Exception as e:  # noqa: BLE001 - any reset failure is infrastructure
                raise InfraFailure(f"env reset failed: {type(e).__name__}: {e}") from e
            function_protocol = getattr(env, "protocol", "text") == "function"
            task_info = {"id": task.task_id, "env": task.env_name, "category": task.category,
                         "instruction": self._cap(first_obs)}
            init_eff = await self._hook(ep, "on_init", self._ctx(ep, task_info, 0), None)
            if init_eff is not None:
                traj.meta["on_init"] = init_eff.result
            tools = self._tools(env, init_eff) if function_protocol else []
            json_block = ""
            if tools and h.calling_convention == "json":
                json_block = (
                    "# Tools\n\nCall a tool by replying with <tool_call>{\"name\": <function-name>,"
                    " \"arguments\": <args-json-object>}</tool_call>. Available functions:\n"
                    + "\n".join(chat.tool_json(t) for t in tools))
            system = self._system_prompt(init_eff, json_block)
            render_tools = tools if (tools and h.calling_convention == "qwen_xml") else None
            if system:
                ep.head_msgs.append({"role": "system", "content": system})
            ep.head_msgs.extend(dict(m) for m in h.preamble)
            user0 = h.task_template.format(observation=self._inserted(first_obs),
                                           env=task.env_name)
            pending: list[str] = [user0]
            pending_kind = "first"
            turn = 0
            max_obs = int((self.overlay.config if self.overlay else {}).get(
                "max_observation_chars", h.observation.max_chars))
            hint_cap = int((self.overlay.config if self.overlay else {}).get(
                "max_hint_chars", 900))
            rep_limit = int((self.overlay.config if self.overlay else {}).get(
                "repeated_action_limit", rules.repeated_action_limit))
            status = "max_turns"
            while turn < rules.max_turns:
                event = TurnEvent(index=turn, segment=len(ep.segments) - 1)
                # make_pre_hint: its message joins the pending turn
                hint = await self._hook(ep, "make_pre_hint", self._ctx(
                    ep, task_info, turn, observation=self._cap(pending[-1])), event)
                if hint is not None:
                    pending[-1] = (pending[-1].rstrip() + "\n\n" + HINT_PREFIX
                                   + self._inserted(hint.result["message"], hint_cap))
                # the context delta for this turn
                if pending_kind == "first":
                    msgs = ep.head_msgs + [{"role": "user", "content": pending[0]}]
                    ep.head_msgs = list(msgs)
                    delta_text = chat.render_messages(msgs, tools=render_tools,
                                                      enable_thinking=h.enable_thinking)
                elif pending_kind == "tool":
                    delta_text = chat.tool_turn_delta(pending, enable_thinking=h.enable_thinking)
                else:
                    delta_text = chat.user_turn_delta("\n\n".join(pending),
                                                      enable_thinking=h.enable_thinking)
                pend_msgs = ([{"role": "tool", "content": p} for p in pending]
                             if pending_kind == "tool" else
                             [{"role": "user", "content": "\n\n".join(pending)}]
                             if pending_kind == "user" else [])
                delta = self._encode(delta_text)
                budget = h.memory.max_context_tokens
                if len(ep.seg) + len(delta) + 1 > budget:
                    if h.memory.kind != "sliding_window" or pending_kind == "first":
                        status = "context_full"
                        break
                    # rewrite the context: head + last turns + the pending turn -> a new segment
                    keep = [m for t in ep.turn_msgs[-h.memory.window_turns:] for m in t]
                    msgs = ep.head_msgs + keep + pend_msgs
                    while True:
                        text = chat.render_messages(msgs, tools=render_tools,
                                                    enable_thinking=h.enable_thinking)
                        delta = self._encode(text)
                        if len(delta) + 1 <= budget or not keep:
                            break
                        keep = keep[1:]
                        msgs = ep.head_msgs + keep + pend_msgs
                    if len(delta) + 1 > budget:
                        status = "context_full"
                        break
                    engine_keys.append(ep.engine_key())
                    ep.segments.append(Segment())
                    event.segment = len(ep.segments) - 1
                ep.seg.append_context(delta)
                if pend_msgs:
                    if ep.turn_msgs:
                        ep.turn_msgs[-1].extend(pend_msgs)
                # generate
                max_new = min(rules.max_tokens_per_turn, budget - len(ep.seg))
                params = SamplingParams(
                    temperature=h.temperature, top_p=h.top_p, top_k=h.top_k,
                    max_new_tokens=max(1, max_new), stop_token_ids=self.stop_ids,
                    seed=None if self.config.seed is None else
                    (self.config.seed * 1000003 + zlib.crc32(f"{episode_id}/{turn}".encode()))
                    % (2 ** 31))
                req = GenerateRequest(input_ids=list(ep.seg.token_ids), params=params,
                                      request_id=f"{episode_id}-t{turn}-{uuid.uuid4().hex[:6]}",
                                      episode_id=ep.engine_key())
                t0 = time.perf_counter()
                try:
                    res = await self.engine.generate(req)
                except Exception as e:  # noqa: BLE001
                    raise InfraFailure(f"engine failed: {type(e).__name__}: {e}") from e
                event.timings["generate_s"] = time.perf_counter() - t0
                if res.finish_reason == FINISH_ABORT:
                    raise InfraFailure(f"generation aborted: {getattr(res, 'message', '')}")
                if not res.token_ids:
                    raise InfraFailure("engine returned no tokens")
                event.start = len(ep.seg)
                ep.seg.append_sampled(res.token_ids, res.logprobs)
                tv = getattr(res, "token_versions", None)
                # weights may change mid-request: the oldest version bounds the staleness
                ep.seg.policy_versions.append(int(min(tv)) if tv else int(res.weight_version))
                event.n_sampled = len(res.token_ids)
                event.finish_reason = res.finish_reason
                event.weight_version = int(res.weight_version)
                sampled = list(res.token_ids)
                if sampled[-1] in self.stop_ids:
                    body_ids = sampled[:-1]
                else:
                    body_ids = sampled
                if sampled[-1] != self.im_end:
                    ep.seg.append_context([self.im_end])  # close the turn (never trained on)
                text = self._decode(body_ids)
                event.raw_text = text
                ep.turn_msgs.append([{"role": "assistant", "content": text}])
                # parse the action(s)
                actions, perrs = self._parse(text, function_protocol, tools)
                event.parse_errors = perrs
                event.policy_action = [_action_json(a) for a in actions] if actions else None
                if any(s in text for s in rules.stop_strings):
                    traj.turns.append(event)
                    status = "stopped"
                    turn += 1
                    break
                observations: list[str] = []
                done = False
                if not actions:
                    ep.n_errors += 1
                    if rules.on_unparsable == "end":
                        event.errors.append("unparsable action: " + "; ".join(perrs))
                        traj.turns.append(event)
                        status = "unparsable"
                        turn += 1
                        break
                    if rules.on_unparsable == "pass_raw":
                        actions = [chat.split_thinking(text)[1]]
                    else:
                        observations.append(rules.unparsable_message.format(
                            errors="; ".join(perrs) or "no action found"))
                        event.observation = observations[-1]
                sent = []
                for act in actions:
                    act_ctx = {"name": act.name if isinstance(act, ToolCall) else None,
                               "arguments": act.arguments if isinstance(act, ToolCall) else {},
                               "text": self._cap(act if isinstance(act, str) else
                                                 json.dumps(_action_json(act))),
                               "parse_errors": perrs}
                    key = json.dumps(_action_json(act), sort_keys=True, default=str)
                    rc = ep.repeat_count + 1 if key == ep.last_action_key else 0
                    eff = await self._hook(ep, "on_before_action", self._ctx(
                        ep, task_info, turn, action=act_ctx,
                        state=self._state(ep, turn, repeat_count=rc)), event)
                    if eff is not None and eff.result["kind"] == "block_and_prompt":
                        observations.append(NOTE_PREFIX + self._inserted(eff.result["message"],
                                                                         hint_cap))
                        continue
                    if eff is not None and not self._admissible(ep, eff.result["action"], event):
                        eff = None
                    if eff is not None:
                        act = _to_action(eff.result["action"])
                        if eff.result.get("message"):
                            observations.append(NOTE_PREFIX + self._inserted(
                                eff.result["message"], hint_cap))
                        key = json.dumps(_action_json(act), sort_keys=True, default=str)
                        rc = ep.repeat_count + 1 if key == ep.last_action_key else 0
                    ep.repeat_count = rc
                    ep.last_action_key = key
                    if rep_limit and rc + 1 >= rep_limit:
                        if rules.on_repeated == "end":
                            status = "repeated_action"
                            done = True
                            break
                        observations.append(rules.repeated_message.format(count=rc + 1))
                    step = await self._env_step(env, act, event, ep)
                    sent.append(_action_json(act))
                    observations.append(h.observation.apply(self._inserted(step.observation),
                                                            turn=turn,
                                                            turns_left=rules.max_turns - turn - 1,
                                                            max_chars=max_obs))
                    event.reward += float(step.reward)
                    if step.done and rules.stop_on_done:
                        done = True
                        break
                event.action = sent or None
                obs_join = "\n".join(observations)
                # on_post_step (not after the episode ended: there is nothing to recover)
                post = None if done else await self._hook(ep, "on_post_step", self._ctx(
                    ep, task_info, turn, action={"sent": sent}, observation=self._cap(obs_join),
                    reward=event.reward, done=done), event)
                if post is not None and not done:
                    if post.result["kind"] == "inject_hint":
                        observations.append(HINT_PREFIX + self._inserted(post.result["message"],
                                                                         hint_cap))
                    elif self._admissible(ep, post.result["action"], event):
                        forced = _to_action(post.result["action"])
                        step = await self._env_step(env, forced, event, ep)
                        event.action = (event.action or []) + [_action_json(forced)]
                        observations.append(NOTE_PREFIX + "executed "
                                            + json.dumps(_action_json(forced)) + "\n"
                                            + h.observation.apply(self._inserted(step.observation),
                                                                  max_chars=max_obs))
                        event.reward += float(step.reward)
                        done = done or (step.done and rules.stop_on_done)
                event.observation = "\n".join(observations)
                event.done = done
                prev_obs = ep.history[-1]["observation"] if ep.history else None
                stuck = not sent or self._cap(event.observation) == prev_obs
                ep.no_progress = ep.no_progress + 1 if stuck else 0
                ep.history.append({"turn": turn, "action": sent,
                                   "observation": self._cap(event.observation)})
                traj.turns.append(event)
                turn += 1
                if done:
                    status = status if status == "repeated_action" else "completed"
                    break
                if not observations:
                    observations = ["(no observation)"]
                pending = observations
                pending_kind = "tool" if function_protocol else "user"
            try:
                evaluation = await env.aevaluate()
            except Exception as e:  # noqa: BLE001
                raise InfraFailure(f"env evaluate failed: {type(e).__name__}: {e}") from e
            traj.evaluation = dict(evaluation)
            traj.success = bool(evaluation.get("success", False))
            traj.reward = float(evaluation.get("score", 1.0 if traj.success else 0.0))
            traj.status = status
            traj.segments = ep.segments
            traj.hook_contexts = ep.hook_contexts
            versions = [v for s in ep.segments for v in s.policy_versions]
            traj.policy_version = min(versions) if versions else int(self.engine.weight_version)
        finally:
            engine_keys.append(ep.engine_key())
            for k in engine_keys:
                try:
                    await self.engine.end_episode(k)
                except Exception:  # noqa: BLE001 - releasing cache is best effort
                    log.debug("end_episode(%s) failed", k)
            try:
                await env.aclose()
            except Exception:  # noqa: BLE001
                log.debug("env close failed", exc_info=True)

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

    async def _env_step(self, env: Env, action: Any, event: TurnEvent, ep: _Episode):
        t0 = time.perf_counter()
        try:
            step = await env.astep(action)
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
        """Stops the hook workers this executor's overlay started (if it owns any)."""
        if self.overlay is not None:
            self.overlay.close()

    # -- public API ----------------------------------------------------------------------------------
    async def run_episode(self, task: Task, episode_id: Optional[str] = None,
                          group_id: str = "") -> Trajectory:
        """One episode with bounded infrastructure retries; always returns a trajectory."""
        episode_id = episode_id or f"ep-{uuid.uuid4().hex[:12]}"
        t_start = time.perf_counter()
        errors: list[str] = []
        for attempt in range(self.config.infra_retries + 1):
            traj = Trajectory(episode_id=episode_id, task_id=task.task_id, env_name=task.env_name,
                              harness_id=self.harness.harness_id,
                              overlay_id=self.overlay.overlay_id if self.overlay else "",
                              group_id=group_id, run_id=self.run_id,
                              meta={"harness_name": self.harness.name, "split": task.split,
                                    "category": task.category})
            try:
                await asyncio.wait_for(self._attempt(task, traj, f"{episode_id}/a{attempt}"),
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
            traj.infra_error = True
            traj.status = "infra_error"
            traj.success = None
            traj.reward = 0.0
            traj.infra_attempts = self.config.infra_retries + 1
            traj.errors = errors
            traj.segments = []
        traj.hook_stats = self.overlay.stats_dict() if self.overlay else {}
        traj.timings["episode_s"] = time.perf_counter() - t_start
        if self.store is not None:
            self.store.append(traj)
        return traj

    async def run_episodes(self, tasks: Sequence[Task], n_per_task: int = 1,
                           group_prefix: str = "") -> list[Trajectory]:
        """``n_per_task`` episodes of every task, concurrently; one group id per task."""
        if n_per_task < 1:
            raise ValueError(f"n_per_task must be >= 1, got {n_per_task}")
        sem = asyncio.Semaphore(self.config.concurrency)

        async def one(task: Task, j: int) -> Trajectory:
            async with sem:
                gid = f"{group_prefix}{task.task_id}"
                return await self.run_episode(task, episode_id=f"{gid}-{j}-{uuid.uuid4().hex[:6]}",
                                              group_id=gid)

        return list(await asyncio.gather(*(one(t, j) for t in tasks for j in range(n_per_task))))


async def run_episode(engine: RolloutEngine, env_factory: Callable[[], Env], task: Task,
                      harness: HarnessSpec, overlay: Union[None, Patch, Overlay] = None, *,
                      tokenizer=None, config: ExecutorConfig = ExecutorConfig(),
                      episode_id: Optional[str] = None, group_id: str = "", run_id: str = "",
                      store=None) -> Trajectory:
    """Runs one episode (see ``Executor``)."""
    ex = Executor(engine, env_factory, harness, tokenizer=tokenizer, overlay=overlay,
                  config=config, run_id=run_id, store=store, env_name=task.env_name)
    try:
        return await ex.run_episode(task, episode_id=episode_id, group_id=group_id)
    finally:
        if isinstance(overlay, Patch):  # the executor installed it: stop its workers
            ex.close()


async def run_episodes(engine: RolloutEngine, env_factory: Callable[[], Env],
                       tasks: Sequence[Task], harness: HarnessSpec,
                       overlay: Union[None, Patch, Overlay] = None, *, n_per_task: int = 1,
                       tokenizer=None, config: ExecutorConfig = ExecutorConfig(),
                       run_id: str = "", store=None) -> list[Trajectory]:
    """Runs ``n_per_task`` episodes of each task concurrently on one engine."""
    env_name = tasks[0].env_name if tasks else None
    ex = Executor(engine, env_factory, harness, tokenizer=tokenizer, overlay=overlay,
                  config=config, run_id=run_id, store=store, env_name=env_name)
    try:
        return await ex.run_episodes(tasks, n_per_task=n_per_task)
    finally:
        if isinstance(overlay, Patch):
            ex.close()
