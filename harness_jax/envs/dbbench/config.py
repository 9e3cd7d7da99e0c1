"""The typed ``config.env.dbbench`` section (registered with the family in ``__init__``)."""
from __future__ import annotations

import ml_collections

from harness_jax.config_schema import EnvSection, or_none
from harness_jax.envs.dbbench.generator import DOMAIN_NAMES


def _section() -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.engine = "sqlite"               # SQL engine: "sqlite" (in-process) | "mariadb" (faithful MySQL, scripts/mariadb.sh)
    s.max_rounds = 15                 # the environment's own round limit (AgentBench: 15)
    s.answer_check = "strict"         # "strict" AgentBench answer matching | "lenient"
    s.strict_format = False           # text protocol: an unparsable reply ends the episode (AgentBench) instead of a hint
    s.statement_timeout_s = 5.0       # per-SQL-statement time limit (seconds)
    s.mariadb_socket = ""             # engine=mariadb: server socket ("" = $HARNESS_JAX_MARIADB_SOCKET or scripts/mariadb.sh's)
    s.tasks_path = ""                 # AgentBench DBBench jsonl, split by content hash ("" = the task generator)
    s.categories = ()                 # generator question categories (() = all)
    s.domain = ""                     # generator: one fixed domain by its singular noun, e.g. "player" ("" = all domains)
    s.table_name = ""                 # generator: one fixed table name, e.g. "players" ("" = the domain's generated names)
    s.describe_table = True           # generator: AgentBench's "The name of this table is ..., headers ..." sentence in the prompt
    return s


def _env_kwargs(env) -> dict:
    s = env.dbbench
    kw = dict(protocol=env.protocol, engine=s.engine, max_rounds=int(s.max_rounds), answer_check=s.answer_check,
              strict_format=bool(s.strict_format), statement_timeout_s=float(s.statement_timeout_s))
    socket = s.mariadb_socket
    if s.engine in ("mariadb", "mysql") and socket:
        kw["socket"] = socket
    return kw


def _split_kwargs(env) -> dict:
    s = env.dbbench
    return dict(n=int(env.num_tasks), seed=int(env.task_seed), path=or_none(s.tasks_path),
                categories=or_none(tuple(s.categories)), domain=or_none(s.domain),
                table_name=or_none(s.table_name), describe_table=bool(s.describe_table))


SECTION = EnvSection(section=_section, env_kwargs=_env_kwargs, split_kwargs=_split_kwargs,
                     choices={"engine": ("sqlite", "mariadb", "mysql"),
                              "answer_check": ("strict", "lenient"),
                              "domain": ("",) + DOMAIN_NAMES},
                     at_least={"max_rounds": 1, "statement_timeout_s": 1e-3})
