"""A scripted DBBench agent: a frozen target whose failures a harness can fix, for CPU runs.

Harness-R1 needs a frozen target whose success a patch can move. On CPU no tiny model has that:
the CPU main job's checkpoint (``launch/train.py --config=experiments/configs/tiny_cpu.py``)
solves 0 of 16 generated DBBench training tasks, and the rule-based engineer's patches, which
fire, leave it at exactly 0 (Delta_B = 0.000 for 3 patches, measured: docs/harness_r1.md), so
every GRPO group of the engineer would have zero variance. This module is the stand-in the CPU
presets and tests use instead. It is NOT a model: a rule policy with seeded mistakes, chosen to
look like a weak agent's failure modes on DBBench, that reacts to the harness like an agent
that reads its feedback.

``ScriptedDBBenchAgent`` (a ``RolloutEngine``) decodes the real token context with the real
tokenizer and draws its mistakes from the request's sampling seed (``random.Random(seed)``;
unseeded requests use fresh randomness), so reruns are paired only if the executor really
replays the seeds:

* on its first turn it answers at once with a wrong value (``p_hasty``), or runs a broken
  statement (``p_sloppy``), or runs the gold SQL;
* after an SQL error it answers "0" (probability 0.7) instead of retrying;
* any harness intervention in its feedback (a ``[Harness ...]`` note or hint after the task
  statement) makes it careful for the rest of the episode: it then runs the gold SQL and
  answers from the returned rows. Skills in the system prompt do not change it;
* mutations (INSERT/UPDATE/DELETE): runs the gold statement, then answers.

It knows the gold SQL and answer of every generated task of the ``train``/``search``/
``selection`` splits of its seed (``registry.load_split``; its index grows on demand, the
generator is prefix-stable), and of ``test`` only inside ``sealed_test_access`` (the table's
final evaluation). ``dbbench_agent`` is the ``TargetSpec(kind=
"factory", factory="harness_jax.harness_r1.scripted:dbbench_agent")`` entry point.
"""
from __future__ import annotations

import asyncio
import json
import random
from typing import Optional, Sequence

from harness_jax.sampling.types import FINISH_STOP, GenerateResult, RolloutEngine
from harness_jax.envs import registry
from harness_jax.envs.splits import current_test_access
from harness_jax.sampling.tokenizer import load_tokenizer

INDEX_SPLITS = ("train", "search", "selection")
MAX_INDEX = 20000


def item_index(tasks) -> dict:
    """question text -> DBBench item (with its category)."""
    return {t.data["description"] + "\n" + t.data["add_description"]:
            dict(t.data, _category=t.category) for t in tasks}


def decide(items: dict, text: str, seed, p_hasty: float = 0.4, p_sloppy: float = 0.3) -> str:
    """The scripted agent's next reply given its whole context text (module docstring)."""
    for q, item in items.items():
        pos = text.find(q)
        if pos >= 0:
            break
    else:
        raise KeyError("scripted agent: no known question in the context")
    rng = random.Random(seed) if seed is not None else random.Random()
    tail = text[pos:]
    mine = tail.count("<|im_start|>assistant") - 1
    if mine < 0:       # chat endpoint: the context is the message list, not ChatML
        mine = tail.count("\x00assistant\x00")
    last = tail.rsplit("user\n", 1)[-1] if "user\n" in tail else tail
    careful = "[Harness" in tail
    cat = item["_category"]
    gold = (item.get("sql") or {}).get("query") or (item.get("label") or [""])[0]
    op = f"Action: Operation\n```sql\n{gold};\n```"
    answer = "Action: Answer\nFinal Answer: " + json.dumps(item.get("label", []))
    rows_back = last.lstrip().startswith("[(")
    error = "no such" in last or "error" in last.lower()
    if cat in ("INSERT", "UPDATE", "DELETE"):
        return op if mine == 0 else 'Action: Answer\nFinal Answer: ["done"]'
    if rows_back:
        return answer
    if mine == 0:
        if careful:
            return op
        u = rng.random()
        if u < p_hasty:
            return 'Action: Answer\nFinal Answer: ["999"]'
        if u < p_hasty + p_sloppy:
            return "Action: Operation\n```sql\nSELECT SUM(no_such_col) FROM t;\n```"
        return op
    if error and not careful and rng.random() < 0.7:
        return 'Action: Answer\nFinal Answer: ["0"]'
    return op


class TextPolicy(RolloutEngine):
    """A scripted engine base: decodes the context, replies with text, re-encodes it."""

    def __init__(self, tokenizer, version: int):
        self.tok = tokenizer
        self.version = version
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    @property
    def weight_version(self):
        return self.version

    async def end_episode(self, episode_id):
        pass

    def result(self, request, out: str) -> GenerateResult:
        ids = self.tok.encode(out, add_special_tokens=False)[: request.params.max_new_tokens - 1]
        ids = ids + [self.im_end]
        return GenerateResult(request_id=request.request_id, token_ids=ids,
                              logprobs=[-0.05] * len(ids), finish_reason=FINISH_STOP,
                              weight_version=self.version)


class ScriptedDBBenchAgent(TextPolicy):
    """The scripted sampling agent (module docstring). ``items``: a fixed question index; or
    ``seed``/``categories`` to index the registry's generated splits on demand."""

    def __init__(self, tokenizer, items: Optional[dict] = None, *, seed: int = 0,
                 categories: Optional[Sequence[str]] = None, p_hasty: float = 0.4,
                 p_sloppy: float = 0.3, version: int = 3, crash_marker: str = "",
                 latency_ms: float = 0.0):
        super().__init__(tokenizer, version)
        self.latency_s = latency_ms / 1e3   # a served model's per-call latency (benchmarks)
        self.crash_marker = crash_marker     # seen in the context: the process dies (os._exit)
        self.items = dict(items or {})
        self._fixed = items is not None
        self.seed, self.categories = int(seed), (list(categories) if categories else None)
        self._indexed = 0
        self.p_hasty, self.p_sloppy = p_hasty, p_sloppy
        self.calls = 0
        self.seeds: list = []

    def _grow(self) -> bool:
        """Indexes twice as many generated tasks per split (False when at the limit)."""
        if self._fixed or self._indexed >= MAX_INDEX:
            return False

        n = min(max(2 * self._indexed, 256), MAX_INDEX)
        # the test split only inside an evaluation entry point's sealed_test_access
        for split in INDEX_SPLITS + (("test",) if current_test_access() else ()):
            self.items.update(item_index(registry.load_split(
                "dbbench", split, n=n, seed=self.seed, categories=self.categories)))
        self._indexed = n
        return True

    def reply(self, text: str, seed) -> str:
        while True:
            try:
                return decide(self.items, text, seed, self.p_hasty, self.p_sloppy)
            except KeyError:
                if not self._grow():
                    raise KeyError(f"scripted agent: the question is not among the first "
                                   f"{self._indexed} generated tasks of seed {self.seed} "
                                   f"({INDEX_SPLITS}); give the env's task seed as "
                                   "options.kwargs.seed") from None

    async def generate(self, request):
        self.calls += 1
        self.seeds.append(request.params.seed)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = self.tok.decode(list(request.input_ids), skip_special_tokens=False)
        if self.crash_marker and self.crash_marker in text:
            import os

            os._exit(3)
        return self.result(request, self.reply(text, request.params.seed))


def dbbench_agent(tokenizer=None, *, seed: int = 0, categories: Optional[Sequence[str]] = None,
                  p_hasty: float = 0.4, p_sloppy: float = 0.3) -> ScriptedDBBenchAgent:
    """``TargetSpec(kind="factory")`` entry point: the scripted agent over the generated DBBench
    splits of ``seed`` (the env's / packet builder's task seed)."""
    if tokenizer is None:
        tokenizer = load_tokenizer()
    return ScriptedDBBenchAgent(tokenizer, seed=seed, categories=categories, p_hasty=p_hasty,
                                p_sloppy=p_sloppy)
