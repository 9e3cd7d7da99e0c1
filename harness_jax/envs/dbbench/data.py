"""Loading and validating AgentBench DB items (``dev.jsonl``, ``standard.jsonl``, generated).

Two kinds of bad item, treated differently:

* an item that is not AgentBench-shaped (no description, no table dict, a label that is not a
  list) cannot be run at all: ``validate_item`` raises naming the field;
* an item whose table a SQL engine cannot materialise (an empty or duplicate column name, a row
  whose length differs from the header: AgentBench's own files have such items) is real
  benchmark data: it loads, ``load_tasks`` reports it by index and reason
  (``item_problems``), and its episodes run on the database AgentBench's set-up would leave
  (``engines.setup_problems``) and are scored as AgentBench scores them (``DBBenchEnv``).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Iterable, Optional, Sequence

from harness_jax.envs.base import Task
from harness_jax.envs.dbbench.engines import TableSpec, setup_problems

log = logging.getLogger(__name__)

ENV_NAME = "dbbench"
SELECT_CATEGORIES = ("other", "counting", "comparison", "ranking", "aggregation-SUM",
                     "aggregation-MIN", "aggregation-MAX", "aggregation-AVG")
MUTATION_CATEGORIES = ("INSERT", "UPDATE", "DELETE")
CATEGORIES = SELECT_CATEGORIES + MUTATION_CATEGORIES


def item_category(item: dict) -> str:
    t = item.get("type")
    if isinstance(t, list) and t:
        return str(t[0])
    if isinstance(t, str) and t:
        return t
    return "other"


def is_mutation(item: dict) -> bool:
    return item_category(item) in MUTATION_CATEGORIES


def item_tables(item: dict, where: str = "item") -> list[TableSpec]:
    """The item's table(s): ``table`` is one dict (v0.2) or a list of dicts (FC)."""
    t = item.get("table")
    if isinstance(t, list):
        if not t:
            raise ValueError(f"{where}.table: empty list; give at least one table")
        return [TableSpec.from_item(x, f"{where}.table[{i}]") for i, x in enumerate(t)]
    return [TableSpec.from_item(t, f"{where}.table")]


def validate_item(item: dict, where: str = "item") -> None:
    """Raises ValueError naming the field when an item cannot be run or scored."""
    if not isinstance(item, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(item).__name__}")
    if not isinstance(item.get("description"), str) or not item["description"].strip():
        raise ValueError(f"{where}.description: missing; it holds the question or instruction")
    item_tables(item, where)
    label = item.get("label")
    if not isinstance(label, list):
        raise ValueError(f"{where}.label: expected a list (gold answers, or [gold SQL] for "
                         "INSERT/UPDATE/DELETE items)")
    cat = item_category(item)
    if cat in MUTATION_CATEGORIES and not label and not item.get("answer_md5"):
        raise ValueError(f"{where}: a {cat} item needs label=[gold SQL] or answer_md5 to be "
                         "scored")


def item_problems(item: dict) -> list[str]:
    """Why a SQL engine cannot fully materialise the item's tables (empty when it can); the
    wording is MySQL's, prefixed by the statement of AgentBench's set-up that fails."""
    out = []
    for t in item_tables(item):
        create_err, insert_err = setup_problems(t)
        if create_err:
            out.append(f"CREATE TABLE `{t.name}` fails ({create_err}): the episode runs without "
                       "this table")
        if insert_err:
            out.append(f"INSERT INTO `{t.name}` fails ({insert_err}): the episode runs on an "
                       "empty table")
    return out


@dataclasses.dataclass(frozen=True)
class ItemProblem:
    """An item that loads but that no SQL engine can fully materialise."""

    source: str
    index: int
    reason: str

    def __str__(self) -> str:
        return f"{self.source}[{self.index}]: {self.reason}"


def make_task(item: dict, split: str = "train") -> Task:
    return Task(env_name=ENV_NAME, data=item, split=split, category=item_category(item))


def tasks_from_items(items: Iterable[dict], split: str = "train", source: str = "items",
                     problems: Optional[list] = None) -> list[Task]:
    """Every item as a ``Task``. Items that cannot be run raise (naming the field); items whose
    tables cannot be materialised are kept, logged as warnings and appended to ``problems``
    (``ItemProblem``s) when a list is given."""
    out = []
    for i, item in enumerate(items):
        validate_item(item, f"{source}[{i}]")
        for reason in item_problems(item):
            p = ItemProblem(source, i, reason)
            log.warning("DBBench item kept, scored as AgentBench scores it: %s", p)
            if problems is not None:
                problems.append(p)
        out.append(make_task(item, split))
    return out


def read_items(path: str) -> list[dict]:
    """Reads a ``.jsonl`` file (one item per line) or a ``.json`` list of items."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"DBBench data file {path!r} does not exist")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json") and text.lstrip().startswith("["):
        items = json.loads(text)
    else:
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not valid JSON ({e})") from e
    return items


def load_tasks(path: str, split: str = "train", limit: Optional[int] = None,
               problems: Optional[list] = None) -> list[Task]:
    """Loads AgentBench DB items as ``Task`` objects (category = ``type[0]``); every item of a
    real AgentBench file loads (see the module docstring and ``tasks_from_items``)."""
    items = read_items(path)
    if limit is not None:
        items = items[:limit]
    return tasks_from_items(items, split, source=os.path.basename(path), problems=problems)


def categories_of(tasks: Sequence[Task]) -> list[str]:
    return [t.category or item_category(t.data) for t in tasks]
