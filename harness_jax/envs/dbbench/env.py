"""``DBBenchEnv``: AgentBench's DB task on SQLite or MariaDB, text or function-calling protocol.

One ``DBBenchEnv`` runs one episode at a time (``reset`` opens a fresh isolated database,
``close`` or the next ``reset`` drops it). Rewards are 0/1 and arrive on the final step.

Scoring follows AgentBench v0.2: SELECT-family items compare the final answer with ``label``
(``answer_check="strict"``, or the FC-style ``"lenient"``); INSERT/UPDATE/DELETE items compare
the md5 fingerprint of the final table with the gold fingerprint, which is computed by running
the gold statement (``label[0]``) on a fresh copy in the *same* engine (falling back to
``answer_md5`` when the gold statement fails). Mutation items are judged by the table state
whatever the agent answered, also when the round limit ends the episode, as in v0.2.

Items whose tables cannot be materialised (``data.item_problems``) run on the database
AgentBench's set-up leaves (no table after a failed ``CREATE``, an empty one after a failed
``INSERT``; ``evaluate()["setup_errors"]`` says which) and are scored as AgentBench scores
them: the text protocol as v0.2 (the episode runs and is judged like any other, so a mutation
item fails its fingerprint), the function protocol as AgentBench FC (a failed set-up ends the
sample as a task error, score 0). They are never infrastructure errors: the same item fails
the same way on every attempt, and AgentBench counts it.
"""
from __future__ import annotations

import collections
import json
import threading
from typing import Any, Optional, Union

from harness_jax.envs.base import Action, BlockingEnv, InfraError, StepResult, Task, ToolCall
from harness_jax.envs.dbbench import data as dbdata
from harness_jax.envs.dbbench import protocol as proto
from harness_jax.envs.dbbench.engines import (Engine, EngineUnavailable, Session, TableSpec,
                                              make_engine)
from harness_jax.envs.base import content_hash

_GOLD_CACHE: "collections.OrderedDict" = collections.OrderedDict()
_GOLD_CACHE_MAX = 200_000      # entries are ~100 bytes; oldest are evicted first
_GOLD_LOCK = threading.Lock()


def split_statements(sql: str) -> list[str]:
    """Splits a gold script on ``;`` outside quotes (gold labels may hold several statements)."""
    out, buf, quote = [], [], None
    i = 0
    while i < len(sql):
        ch = sql[i]
        if quote:
            buf.append(ch)
            if ch == "\\" and i + 1 < len(sql):
                buf.append(sql[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
            buf.append(ch)
        elif ch == ";":
            if "".join(buf).strip():
                out.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
        i += 1
    if "".join(buf).strip():
        out.append("".join(buf).strip())
    return out


def gold_hash(engine: Engine, item: dict, tables: list[TableSpec]) -> tuple[Optional[str], str]:
    """Gold fingerprint of a mutation item in ``engine``: runs ``label[0]`` on a fresh copy.

    Returns ``(hash, source)`` with source ``"gold_sql"``, ``"answer_md5"`` or ``"none"``.
    Cached per engine kind and item.
    """
    key = (engine.name, content_hash(item))
    with _GOLD_LOCK:
        if key in _GOLD_CACHE:
            return _GOLD_CACHE[key]
    result: tuple[Optional[str], str] = (None, "none")
    label = item.get("label") or []
    if label and isinstance(label[0], str) and label[0].strip():
        session = engine.open_session(tables)
        try:
            ok = True
            for stmt in split_statements(label[0]):
                r = session.execute(stmt)
                if r.infra_error:
                    raise EngineUnavailable(f"gold statement failed on {engine.name}: {r.error}")
                if r.error is not None:
                    ok = False
                    break
            if ok:
                result = (session.table_hash([t.name for t in tables]), "gold_sql")
        finally:
            session.close()
    if result[0] is None and item.get("answer_md5"):
        result = (str(item["answer_md5"]), "answer_md5")
    with _GOLD_LOCK:
        _GOLD_CACHE[key] = result
        while len(_GOLD_CACHE) > _GOLD_CACHE_MAX:
            _GOLD_CACHE.popitem(last=False)
    return result


class DBBenchEnv(BlockingEnv):
    """AgentBench DB environment.

    Args:
      engine: ``"sqlite"`` (in-process, default), ``"mariadb"`` (a server started by
        ``scripts/mariadb.sh``), or an ``Engine`` instance (shared between envs).
      protocol: ``"text"`` (v0.2 ``Action:`` format) or ``"function"`` (tools).
      max_rounds: agent turns per episode (AgentBench config: 15).
      answer_check: ``"strict"`` (v0.2) or ``"lenient"`` (FC, tolerant numbers).
      strict_format: if True, a reply matching no pattern ends the episode as a failure
        (v0.2); by default it gets an explanatory observation and costs one round.
      statement_timeout_s: per-statement limit (engine created by name only).
    """

    name = dbdata.ENV_NAME

    def __init__(self, engine: Union[str, Engine] = "sqlite", protocol: str = "text",
                 max_rounds: int = 15, answer_check: str = "strict",
                 strict_format: bool = False, statement_timeout_s: float = 5.0,
                 **engine_kw: Any):
        if protocol not in ("text", "function"):
            raise ValueError(f"protocol={protocol!r}: expected 'text' or 'function'")
        if answer_check not in ("strict", "lenient"):
            raise ValueError(f"answer_check={answer_check!r}: expected 'strict' or 'lenient'")
        if max_rounds < 1:
            raise ValueError(f"max_rounds={max_rounds} must be >= 1")
        self.protocol = protocol
        self.max_rounds = max_rounds
        self.answer_check = answer_check
        self.strict_format = strict_format
        if isinstance(engine, Engine):
            self.engine = engine
            self._owns_engine = False
        else:
            self.engine = make_engine(engine, statement_timeout_s=statement_timeout_s,
                                      **engine_kw)
            self._owns_engine = True
        self.session: Optional[Session] = None
        self.task: Optional[Task] = None
        self._reset_state()

    # -- prompts ---------------------------------------------------------------------------
    @property
    def instruction(self) -> str:
        """The protocol instructions (the first user turn in v0.2, the system prompt in FC)."""
        return proto.TEXT_INSTRUCTION if self.protocol == "text" else proto.FUNCTION_INSTRUCTION

    def initial_messages(self) -> list[dict]:
        """AgentBench's opening turns for the current task (text: user/agent "Ok."/user)."""
        if self.task is None:
            raise RuntimeError("initial_messages() needs a task: call reset(task) first")
        q = proto.question_text(self.task.data, self.protocol)
        if self.protocol == "text":
            return [{"role": "user", "content": proto.TEXT_INSTRUCTION},
                    {"role": "assistant", "content": "Ok."},
                    {"role": "user", "content": q}]
        return [{"role": "system", "content": proto.FUNCTION_INSTRUCTION},
                {"role": "user", "content": q}]

    def tool_specs(self) -> list[dict]:
        return [dict(s) for s in proto.TOOL_SPECS] if self.protocol == "function" else []

    # -- episode ---------------------------------------------------------------------------
    def _reset_state(self):
        self.rounds = 0
        self.done = False
        self.answer: Any = None
        self.status = "running"
        self.history: list[dict] = []
        self.setup_errors: list[str] = []
        self._result: Optional[dict] = None

    def _close_session(self):
        if self.session is not None:
            self.session.close()
            self.session = None

    def _reset_sync(self, task: Union[Task, dict]) -> str:
        if isinstance(task, dict):
            task = dbdata.make_task(task)
        if not isinstance(task, Task):
            raise TypeError(f"reset(task): expected a Task (or an AgentBench item dict), got "
                            f"{type(task).__name__}")
        dbdata.validate_item(task.data, f"task {task.task_id}")
        self._close_session()
        self._reset_state()
        self.task = task
        self.tables = dbdata.item_tables(task.data)
        try:
            self.session = self.engine.open_session(self.tables)
        except EngineUnavailable as e:
            raise InfraError(str(e)) from e
        self.setup_errors = list(self.session.setup_errors)
        return proto.question_text(task.data, self.protocol)


    def _finish(self, status: str) -> dict:
        self.done = True
        self.status = status
        self._result = self._score()
        return self._result

    def _terminal(self, observation: str, status: str, info: dict) -> StepResult:
        res = self._finish(status)
        info.update(success=res["success"], status=status)
        return StepResult(observation=observation, reward=res["score"], done=True, info=info)

    def _run_sql(self, sql: str, info: dict) -> StepResult:
        r = self.session.execute(sql)
        info.update(sql=sql, sql_error=r.error is not None, truncated=r.truncated,
                    timed_out=r.timed_out)
        if r.error is not None:
            info["error"] = r.error
        if r.infra_error:
            info["infra_error"] = True
            self.done = True
            self.status = "infra_error"
            return StepResult(observation=r.text, reward=0.0, done=True, info=info)
        if self.rounds >= self.max_rounds:
            return self._terminal(r.text, "limit_reached", info)
        return StepResult(observation=r.text, reward=0.0, done=False, info=info)

    def _invalid(self, message: str, info: dict) -> StepResult:
        info["invalid_action"] = info["error"] = message
        if self.strict_format:
            return self._terminal(message, "invalid_format", info)
        if self.rounds >= self.max_rounds:
            return self._terminal(message, "limit_reached", info)
        return StepResult(observation=message, reward=0.0, done=False, info=info)

    def _step_sync(self, action: Action) -> StepResult:
        if self.task is None:
            raise RuntimeError("step() before reset(task): start an episode first")
        if self.done:
            raise RuntimeError("the episode is over; call reset(task) for a new one")
        if self.session is None:
            raise RuntimeError("step(): the episode's database is closed; call reset(task)")
        self.rounds += 1
        info: dict = {"round": self.rounds}
        self.history.append({"action": action})
        if self.protocol == "text":
            if not isinstance(action, str):
                raise TypeError(f"protocol='text' takes str actions, got {type(action).__name__}"
                                "; use protocol='function' for ToolCall actions")
            p = proto.parse_text_action(action)
            if p.kind == "invalid":
                return self._invalid(p.error, info)
            if p.kind == "operation":
                return self._run_sql(p.sql, info)
            self.answer = p.answer_text
            return self._terminal("", "completed", info)
        # function-calling protocol
        if isinstance(action, str):
            return self._invalid(
                "No tool was called. Call `execute_sql` with {\"query\": \"<one SQL statement>\"}"
                " to run SQL, or `commit_final_answer` with {\"answers\": [...]} to finish.",
                info)
        if not isinstance(action, ToolCall):
            raise TypeError(f"protocol='function' takes ToolCall (or str) actions, got "
                            f"{type(action).__name__}")
        args = action.arguments if isinstance(action.arguments, dict) else {}
        if action.name == "execute_sql":
            q = args.get("query")
            if not isinstance(q, str) or not q.strip():
                return self._invalid("execute_sql needs the argument `query`: one SQL statement "
                                     "as a string.", info)
            return self._run_sql(q.strip(), info)
        if action.name == "commit_final_answer":
            a = args.get("answers")
            if a is None:
                return self._invalid("commit_final_answer needs the argument `answers`: a list "
                                     "of strings.", info)
            self.answer = list(a) if isinstance(a, (list, tuple)) else [a]
            return self._terminal("", "completed", info)
        return self._invalid(f"Unknown tool {action.name!r}. The tools are `execute_sql` and "
                             "`commit_final_answer`.", info)


    # -- scoring ---------------------------------------------------------------------------
    def _score(self) -> dict:
        item = self.task.data
        cat = dbdata.item_category(item)
        out = {"category": cat, "answer": self.answer, "rounds": self.rounds,
               "status": self.status, "engine": self.engine.name}
        if dbdata.is_mutation(item):
            final = self.session.table_hash([t.name for t in self.tables])
            gold, source = gold_hash(self.engine, item, self.tables)
            ok = gold is not None and final == gold
            out.update(table_hash=final, gold_hash=gold, gold_source=source)
        else:
            if self.answer is None:
                ok = False
            elif self.answer_check == "strict":
                ok = proto.strict_match(self.answer, item.get("label", []))
            else:
                ok = proto.lenient_match(self.answer, item.get("label", []))
        if self.setup_errors:
            out["setup_errors"] = list(self.setup_errors)
            if self.protocol == "function":   # AgentBench FC: a failed set-up is a task error
                ok = False
                out["status"] = "task_error"
        out.update(success=bool(ok), score=1.0 if ok else 0.0)
        return out

    def _evaluate_sync(self) -> dict:
        if self.task is None:
            raise RuntimeError("evaluate() before reset(task): nothing to score")
        if self._result is None:
            if self.session is None:
                raise RuntimeError("evaluate(): the episode's database is closed")
            return self._score()
        return dict(self._result)



    def _close_sync(self) -> None:
        self._close_session()
        if self._owns_engine:
            self.engine.close()


def oracle_reply(item: dict, protocol: str = "text") -> list:
    """The scripted gold policy's replies: run the gold SQL (if any), then answer with the
    label. Used by tests and benchmarks."""
    replies: list = []
    cat = dbdata.item_category(item)
    sql = None
    if cat in dbdata.MUTATION_CATEGORIES:
        sql = (item.get("label") or [None])[0]
    elif isinstance(item.get("sql"), dict):
        sql = item["sql"].get("query")
    answer = [] if cat in dbdata.MUTATION_CATEGORIES else list(item.get("label", []))
    if sql:
        for stmt in split_statements(sql):
            if protocol == "text":
                replies.append(f"Action: Operation\n```sql\n{stmt};\n```")
            else:
                replies.append(ToolCall("execute_sql", {"query": stmt}))
    if protocol == "text":
        replies.append("Action: Answer\nFinal Answer: " + json.dumps(answer, ensure_ascii=False))
    else:
        replies.append(ToolCall("commit_final_answer", {"answers": answer}))
    return replies

