"""Loading and validating AgentBench DB items (``dev.jsonl``, ``standard.jsonl``, generated)."""
from __future__ import annotations

import json
import os
from typing import Iterable, Optional, Sequence

from harness_jax.envs.base import SPLITS, Task
from harness_jax.envs.dbbench.engines import TableSpec

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


def make_task(item: dict, split: str = "train") -> Task:
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: expected one of {SPLITS}")
    if split == "test":  # every way of marking data as test goes through the seal
        from harness_jax.envs import registry
        registry.check_test_access("dbbench task with split='test'")
    return Task(env_name=ENV_NAME, data=item, split=split, category=item_category(item))


def tasks_from_items(items: Iterable[dict], split: str = "train",
                     source: str = "items") -> list[Task]:
    out = []
    for i, item in enumerate(items):
        validate_item(item, f"{source}[{i}]")
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


def load_tasks(path: str, split: str = "train", limit: Optional[int] = None) -> list[Task]:
    """Loads AgentBench DB items as ``Task`` objects (category = ``type[0]``).

    Loading with ``split="test"`` is allowed only inside ``registry.sealed_test_access(...)``
    (the evaluation entry points), like ``registry.load_split``.
    """
    if split == "test":
        from harness_jax.envs import registry
        registry.check_test_access(f"dbbench.load_tasks({path!r}, split='test')")
    items = read_items(path)
    if limit is not None:
        items = items[:limit]
    return tasks_from_items(items, split, source=os.path.basename(path))


def categories_of(tasks: Sequence[Task]) -> list[str]:
    return [t.category or item_category(t.data) for t in tasks]
