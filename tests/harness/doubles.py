"""Test doubles for executor behaviour tests (the real engine/environments are tested elsewhere).

``ScriptedEngine`` stands in for a RolloutEngine: it replies with scripted texts, tokenised by the
real tokenizer, with made-up log-probabilities, so tests can check exactly which tokens were
recorded as sampled. ``ScriptedEnv`` stands in for a benchmark environment with a fixed reaction
per action; both can be told to fail to exercise infrastructure-error handling.
"""
from __future__ import annotations

from harness_jax.envs.base import Env, StepResult, ToolCall
from harness_jax.sampling.types import FINISH_LENGTH, FINISH_STOP, GenerateResult, RolloutEngine


class ScriptedEngine(RolloutEngine):
    def __init__(self, tokenizer, replies, fail_times=0, close_turns=True, version=3):
        self.tok = tokenizer
        self.replies = list(replies)
        self.fail_times = fail_times
        self.close_turns = close_turns
        self.version = version
        self.requests = []
        self.results = []
        self.ended = []
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    @property
    def weight_version(self):
        return self.version

    async def generate(self, request):
        self.requests.append(request)
        if self.fail_times > 0:
            self.fail_times -= 1
            raise ConnectionError("engine unreachable (scripted)")
        text = self.replies.pop(0) if self.replies else "ANSWER: nothing"
        ids = self.tok.encode(text, add_special_tokens=False)
        ids = ids[:request.params.max_new_tokens]
        finish = FINISH_LENGTH
        if self.close_turns and len(ids) < request.params.max_new_tokens:
            ids = ids + [self.im_end]
            finish = FINISH_STOP
        lps = [-0.01 * (i + 1) - 0.001 * len(self.requests) for i in range(len(ids))]
        res = GenerateResult(request_id=request.request_id, token_ids=ids, logprobs=lps,
                             finish_reason=finish, weight_version=self.version)
        self.results.append(res)
        return res

    async def end_episode(self, episode_id):
        self.ended.append(episode_id)


class ScriptedEnv(Env):
    """A toy benchmark: the task is solved by the action ``answer`` (text) or the tool call
    ``submit(answer=...)``; ``lookup`` returns a fact. Fails on demand (``crash_on``: the text
    action on which ``astep`` raises, as an environment whose parser chokes on one input)."""

    name = "toy"

    def __init__(self, protocol="text", answer="42", max_steps=10, fail_reset=0, fail_step=False,
                 infra_info=False, log=None, admissible=None, crash_on=None):
        self.protocol = protocol
        self.answer = answer
        self.max_steps = max_steps
        self.fail_reset = fail_reset
        self.fail_step = fail_step
        self.infra_info = infra_info
        self.log = log if log is not None else []
        self.solved = False
        self.steps = 0
        self.admissible = admissible
        self.crash_on = crash_on

    def tool_specs(self):
        return [{"type": "function", "function": {
                    "name": "lookup", "description": "Look up a fact",
                    "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                                   "required": ["key"]}}},
                {"type": "function", "function": {
                    "name": "submit", "description": "Submit the final answer",
                    "parameters": {"type": "object", "properties": {"answer": {"type": "string"}},
                                   "required": ["answer"]}}}]

    async def areset(self, task):
        self.log.append(("reset", task.task_id))
        if self.fail_reset > 0:
            self.fail_reset -= 1
            raise RuntimeError("database container did not start (scripted)")
        return f"Question: {task.data['q']}"

    async def astep(self, action):
        self.steps += 1
        self.log.append(("step", action))
        if self.fail_step or (self.crash_on is not None and action == self.crash_on):
            raise RuntimeError("environment crashed (scripted)")
        if self.infra_info:
            return StepResult("engine timeout", 0.0, True, {"infra_error": True})
        if isinstance(action, ToolCall):
            if action.name == "submit":
                self.solved = action.arguments.get("answer") == self.answer
                return StepResult("submitted", float(self.solved), True, {})
            if action.name == "lookup":
                return StepResult(f"fact[{action.arguments.get('key')}] = {self.answer}", 0.0,
                                  self.steps >= self.max_steps, {})
            return StepResult(f"unknown tool {action.name}", 0.0, self.steps >= self.max_steps, {})
        text = str(action).strip()
        if text.startswith("ANSWER:"):
            self.solved = text[len("ANSWER:"):].strip() == self.answer
            return StepResult("", float(self.solved), True, {})
        info = {} if self.admissible is None else {"admissible_actions": list(self.admissible)}
        return StepResult(f"echo: {text}", 0.0, self.steps >= self.max_steps, info)

    async def aevaluate(self):
        return {"success": self.solved, "score": 1.0 if self.solved else 0.0}
