"""Test doubles for Harness-S tests.

``ChatServer`` (``tests/sampling/doubles.py``, re-exported) is a scripted OpenAI-compatible
chat-completions server over real HTTP: a real provider cannot be reached from CI, and voters/
editors/diagnosers must be made to answer well, badly or not at all on demand. A
``handler(body)`` decides each reply from the request (so a reply can depend on the prompt, the
seed or the temperature). The client under test is the real ``OpenAIChatClient``.

``ReactivePolicy`` stands in for the policy's rollout engine on DBBench (text protocol): it
decodes the real token context with the real tokenizer and replies like a policy with specific,
harness-dependent weaknesses (see its docstring), so evolution and profiles can be tested on real
executor episodes without a trained model.
"""
from __future__ import annotations

import json
import re

from harness_jax.sampling.types import FINISH_STOP, GenerateResult, RolloutEngine
from tests.sampling.doubles import ChatServer, reply  # noqa: F401  (re-exported)


def last_user(body: dict) -> str:
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


def first_user(body: dict) -> str:
    return [m for m in body["messages"] if m["role"] == "user"][0]["content"]


class ReactivePolicy(RolloutEngine):
    """A scripted DBBench policy (text protocol) whose failures depend on the harness.

    It finds the task by its question in the context and then acts by category:

    * ``counting``: answers a wrong count immediately, unless the context contains a harness
      note or hint telling it to look at the table first (then it runs the gold SQL and answers
      the label);
    * ``aggregation-*``: runs a broken query (an unknown column: an SQL error) and answers "0"
      right after the error, unless a hint about the failed statement is present, or its answer
      was blocked (then it runs the gold SQL and answers the label);
    * ``other``: replies without the ``Action:`` format (unparsable) unless a worked example
      is in the context;
    * mutations (INSERT/UPDATE/DELETE): run the gold statement and answer — except that a
      worked example makes it imitate the example (a SELECT COUNT and an answer, no mutation):
      a local fix that regresses elsewhere.
    """

    def __init__(self, tokenizer, items_by_question: dict, version: int = 7):
        self.tok = tokenizer
        self.items = items_by_question
        self.version = version
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls = 0

    @property
    def weight_version(self):
        return self.version

    async def end_episode(self, episode_id):
        pass

    def _item(self, text: str):
        for q, item in self.items.items():
            pos = text.find(q)
            if pos >= 0:
                return item, pos
        raise AssertionError("ReactivePolicy: no known question in the context")

    def decide(self, text: str) -> str:
        item, q_pos = self._item(text)
        cat = item["_category"]
        tail = text[q_pos:]
        mine = tail.count("<|im_start|>assistant\n") - 1      # this episode's earlier replies
        last = text.rsplit("<|im_start|>user\n", 1)[-1]        # the newest feedback
        gold = (item.get("sql") or {}).get("query") or (item.get("label") or [""])[0]
        answer = "Action: Answer\nFinal Answer: " + json.dumps(item.get("label", []))
        op = f"Action: Operation\n```sql\n{gold};\n```"
        rows_back = last.lstrip().startswith("[(")
        example = "Example question: How many rows" in text
        if cat in ("INSERT", "UPDATE", "DELETE"):
            if example:
                return ("Action: Operation\n```sql\nSELECT COUNT(*) FROM t;\n```" if mine == 0
                        else 'Action: Answer\nFinal Answer: ["done"]')
            return op if mine == 0 else 'Action: Answer\nFinal Answer: ["done"]'
        if cat == "other":
            if not example:
                return f"The answer is probably {(item.get('label') or [''])[0]}."
            return answer if rows_back else op
        if cat == "counting":
            if not re.search(r"previewing the table|Do not answer yet", tail):
                return 'Action: Answer\nFinal Answer: ["999"]'
            return answer if rows_back else op
        if cat.startswith("aggregation"):
            if mine == 0:
                return "Action: Operation\n```sql\nSELECT SUM(no_such_col) FROM t;\n```"
            if re.search(r"The last SQL statement failed|Do not answer yet: the previous action",
                         last):
                return op
            return answer if rows_back else 'Action: Answer\nFinal Answer: ["0"]'
        return answer if rows_back else op

    async def generate(self, request):
        self.calls += 1
        text = self.tok.decode(list(request.input_ids), skip_special_tokens=False)
        out = self.decide(text)
        ids = self.tok.encode(out, add_special_tokens=False)[: request.params.max_new_tokens - 1]
        ids = ids + [self.im_end]
        return GenerateResult(request_id=request.request_id, token_ids=ids,
                              logprobs=[-0.05] * len(ids), finish_reason=FINISH_STOP,
                              weight_version=self.version)
