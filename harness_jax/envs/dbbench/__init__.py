"""AgentBench DBBench: loader, engines (SQLite, MariaDB), both protocols, scoring, generator.

    from harness_jax.envs import dbbench
    tasks = dbbench.load_tasks("standard.jsonl")
    env = dbbench.DBBenchEnv(engine="sqlite", protocol="text")
    question = env.reset(tasks[0])
    res = env.step("Action: Operation\\n```sql\\nSELECT 1;\\n```")
"""
from typing import Optional, Sequence

from harness_jax.envs import registry, splits
from harness_jax.envs.dbbench.config import SECTION
from harness_jax.envs.dbbench.data import (CATEGORIES, ENV_NAME, MUTATION_CATEGORIES,
                                           SELECT_CATEGORIES, ItemProblem, item_category,
                                           item_problems, load_tasks, make_task, read_items,
                                           tasks_from_items, validate_item)
from harness_jax.envs.dbbench.engines import (Engine, EngineUnavailable, MariaDBEngine,
                                              SQLiteEngine, TableSpec, mariadb_available,
                                              make_engine, setup_problems)
from harness_jax.envs.dbbench.env import DBBenchEnv, gold_hash, oracle_reply
from harness_jax.envs.dbbench.generator import generate_item, generate_items
from harness_jax.envs.dbbench.protocol import (TOOL_SPECS, h0, lenient_match, parse_text_action,
                                               strict_match)


def generate_tasks(n: int, seed: int = 0, split: str = "train", categories=None) -> list:
    """``n`` generated items of stream ``seed`` as ``Task`` objects (see ``generator``)."""
    return tasks_from_items(generate_items(n, seed=seed, categories=categories), split=split,
                            source="generated")


def load_split(split: str, n: int = 100, seed: int = 0, path: Optional[str] = None,
               fractions: Optional[dict] = None, categories: Optional[Sequence] = None,
               domain: Optional[str] = None, table_name: Optional[str] = None,
               describe_table: bool = True) -> list:
    """Registry loader: from ``path`` (AgentBench jsonl, partitioned by content hash) or the
    generator (``n`` tasks from the split's own seed stream; ``categories`` / ``domain`` /
    ``table_name`` / ``describe_table`` narrow the generated family, see ``generator``)."""
    if path is not None:
        return splits.partition_tasks(load_tasks(path), split, fractions)
    return tasks_from_items(
        generate_items(n, seed=splits.split_seed(split, seed), categories=categories,
                       domain=domain, table_name=table_name, describe_table=describe_table),
        split=split, source=f"generated[{split}]")


def demonstration(task, protocol: str = "text") -> list:
    """The gold policy's replies to ``task`` (the SFT warm start's demonstrations)."""
    return oracle_reply(task.data, protocol=protocol)


registry.register(registry.EnvSpec(
    name=ENV_NAME, make=DBBenchEnv, load_split=load_split,
    description="AgentBench DB on SQLite or MariaDB; generated or file-backed tasks",
    config=SECTION, h0=h0, demos=demonstration))


__all__ = [
    "CATEGORIES", "ENV_NAME", "MUTATION_CATEGORIES", "SELECT_CATEGORIES", "DBBenchEnv",
    "ItemProblem", "item_problems", "load_split", "setup_problems",
    "Engine", "EngineUnavailable", "MariaDBEngine", "SQLiteEngine", "TableSpec", "TOOL_SPECS",
    "generate_item", "generate_items", "generate_tasks", "gold_hash", "item_category",
    "lenient_match", "load_tasks", "make_engine", "make_task", "mariadb_available",
    "oracle_reply", "parse_text_action", "read_items", "strict_match", "tasks_from_items",
    "validate_item",
]
