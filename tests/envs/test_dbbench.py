"""DBBench on both engines (SQLite in-process, MariaDB server): oracle replay, wrong answers,
malformed actions, output format and limits, containment, loader and answer checks.

Every test that takes the ``engine`` fixture runs on SQLite and on MariaDB (skipped only when
no MariaDB server answers outside CI)."""
import asyncio
import json

import pytest

from harness_jax.envs import InfraError, ToolCall, registry
from harness_jax.envs import dbbench
from harness_jax.envs.dbbench import data as dbdata
from harness_jax.envs.dbbench import generator, protocol
from harness_jax import scoring as metrics


def _play(env, task, replies):
    env.reset(task)
    res = None
    for r in replies:
        res = env.step(r)
        if res.done:
            break
    return res, env.evaluate()


# -- generator ---------------------------------------------------------------------------------
def test_generator_is_deterministic_and_covers_every_category(generated_items):
    again = generator.generate_items(44, seed=7, categories=dbbench.CATEGORIES)
    assert again == generated_items
    assert generator.generate_items(3, seed=8) != generator.generate_items(3, seed=7)
    cats = [dbdata.item_category(i) for i in generated_items]
    assert set(cats) == set(dbbench.CATEGORIES)
    for item in generated_items:
        dbdata.validate_item(item)
        assert item["label"], item
        if dbdata.is_mutation(item):
            assert item["answer_md5"].startswith("[('") and item["label"][0].split()[0] in (
                "INSERT", "UPDATE", "DELETE")
        else:
            assert "sql" in item and item["sql"]["query"].startswith("SELECT")
        assert item["add_description"].startswith(
            f"The name of this table is {item['table']['table_name']}, and the headers")


def test_generator_family_options_narrow_the_stream(engine):
    """``domain``/``table_name`` fix the table's domain and name (CPU demo family); the items
    stay solvable by their gold SQL on both engines, and bad values name the field."""
    cats = ("counting", "other", "ranking", "comparison", "UPDATE")
    items = generator.generate_items(10, seed=3, categories=cats, domain="player",
                                     table_name="players")
    assert items == generator.generate_items(10, seed=3, categories=cats, domain="player",
                                             table_name="players")
    assert items != generator.generate_items(10, seed=3, categories=cats)
    env = dbbench.DBBenchEnv(engine=engine, protocol="text")
    for item in items:
        assert item["table"]["table_name"] == "players"
        assert [c["name"] for c in item["table"]["table_info"]["columns"]] == [
            "Player", "Club", "Position", "Nationality", "Goals", "Appearances", "Age"]
        task = dbbench.tasks_from_items([item])[0]
        res, ev = _play(env, task, dbbench.oracle_reply(item, "text"))
        assert ev["success"], item
    env.close()
    tasks = registry.load_split("dbbench", "selection", n=4, seed=0, domain="film",
                                table_name="films", categories=["counting"])
    assert {t.data["table"]["table_name"] for t in tasks} == {"films"}
    with pytest.raises(ValueError, match="domain='dragon'"):
        generator.generate_items(1, domain="dragon")
    with pytest.raises(ValueError, match="table_name"):
        generator.generate_item(0, 0, table_name="  ")


# -- oracle replay and wrong answers ------------------------------------------------------------
@pytest.mark.parametrize("proto", ["text", "function"])
def test_oracle_replay_scores_100_percent(engine, proto, generated_items):
    env = dbbench.DBBenchEnv(engine=engine, protocol=proto)
    tasks = dbbench.tasks_from_items(generated_items)
    oks = []
    for task in tasks:
        res, ev = _play(env, task, dbbench.oracle_reply(task.data, proto))
        assert res.done and res.reward == 1.0, (task.data["description"], res, ev)
        if dbdata.is_mutation(task.data):
            assert ev["gold_source"] == "gold_sql"
        oks.append(ev["success"])
    env.close()
    acc = metrics.dbbench_accuracies([t.category for t in tasks], oks)
    assert acc["overall_cat_accuracy"] == 1.0


def test_gold_results_agree_across_engines(engine, generated_items):
    """Labels and answer_md5 were computed on SQLite; the same gold SQL on this engine must
    give the same answers and the same md5 fingerprint (the AgentBench hash is portable)."""
    for item in generated_items:
        tables = dbdata.item_tables(item)
        if dbdata.is_mutation(item):
            h, source = dbbench.gold_hash(engine, item, tables)
            assert (h, source) == (item["answer_md5"], "gold_sql"), item["description"]
        else:
            s = engine.open_session(tables)
            try:
                vals = [str(v) for row in s.fetch_all(item["sql"]["query"]) for v in row]
            finally:
                s.close()
            assert dbbench.strict_match(vals, item["label"]), (item["description"], vals)


def test_wrong_answers_and_wrong_mutations_score_zero(engine, generated_items):
    env = dbbench.DBBenchEnv(engine=engine, protocol="text")
    for task in dbbench.tasks_from_items(generated_items[:22]):
        item = task.data
        if dbdata.is_mutation(item):
            # answering without touching the table, or changing the wrong thing
            res, ev = _play(env, task, ['Action: Answer\nFinal Answer: ["done"]'])
            assert res.reward == 0.0 and ev["table_hash"] != ev["gold_hash"]
            name = item["table"]["table_name"].replace("`", "``")
            res, _ = _play(env, task, [
                f"Action: Operation\n```sql\nDELETE FROM `{name}`;\n```",
                'Action: Answer\nFinal Answer: ["done"]'])
            assert res.reward == 0.0
        else:
            wrong = ["not " + item["label"][0]] + item["label"][1:]
            res, _ = _play(env, task, ["Action: Answer\nFinal Answer: " + json.dumps(wrong)])
            assert res.done and res.reward == 0.0
            res, _ = _play(env, task, ["Action: Answer\nFinal Answer: []"])
            assert res.reward == 0.0
    env.close()


# -- protocol -----------------------------------------------------------------------------------
def test_malformed_actions_get_an_explanation_and_the_episode_continues(engine, generated_items):
    task = dbbench.tasks_from_items([generated_items[0]])[0]
    env = dbbench.DBBenchEnv(engine=engine, protocol="text", max_rounds=5)
    prompt = env.reset(task)
    assert task.data["description"] in prompt and task.data["add_description"] in prompt
    assert env.initial_messages()[1] == {"role": "assistant", "content": "Ok."}
    r = env.step("I would like to look at the table first.")
    assert not r.done and "Action: Operation" in r.observation and r.info["invalid_action"]
    r = env.step("Action: Operation\nSELECT * FROM t;")
    assert not r.done and "```sql" in r.observation
    r = env.step("Action: Operation\n```sql\nSELECT COUNT(*) FROM `"
                 + task.data["table"]["table_name"] + "`;\n```")
    n = len(task.data["table"]["table_info"]["rows"])
    assert not r.done and r.observation == f"[({n},)]"
    r = env.step("Action: Operation\n```sql\nSELEC nonsense;\n```")
    assert not r.done and r.info["sql_error"] and r.observation
    r = env.step("still no format")          # 5th round: the limit ends the episode
    assert r.done and r.reward == 0.0 and r.info["status"] == "limit_reached"
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("Action: Answer\nFinal Answer: []")

    strict = dbbench.DBBenchEnv(engine=engine, protocol="text", strict_format=True)
    strict.reset(task)
    r = strict.step("no pattern at all")
    assert r.done and r.reward == 0.0 and r.info["status"] == "invalid_format"

    fc = dbbench.DBBenchEnv(engine=engine, protocol="function")
    fc.reset(task)
    assert [s["function"]["name"] for s in fc.tool_specs()] == ["execute_sql",
                                                                "commit_final_answer"]
    for bad, needle in (("plain text", "No tool was called"),
                        (ToolCall("drop_everything", {}), "Unknown tool"),
                        (ToolCall("execute_sql", {"sql": "SELECT 1"}), "`query`"),
                        (ToolCall("commit_final_answer", {}), "`answers`")):
        r = fc.step(bad)
        assert not r.done and needle in r.observation
    r = fc.step(ToolCall("execute_sql", {"query": "SELECT 1 + 1"}))
    assert r.observation == "[(2,)]"
    with pytest.raises(TypeError, match="protocol='text'"):
        env2 = dbbench.DBBenchEnv(engine=engine, protocol="text")
        env2.reset(task)
        env2.step(ToolCall("execute_sql", {"query": "SELECT 1"}))
    for e in (env, strict, fc, env2):
        e.close()


def test_output_is_truncated_and_runaway_queries_stop(engine, generated_items):
    item = max(generated_items, key=lambda i: len(i["table"]["table_info"]["rows"]))
    task = dbbench.tasks_from_items([item])[0]
    name = item["table"]["table_name"].replace("`", "``")
    env = dbbench.DBBenchEnv(engine=engine, protocol="function", max_rounds=10)
    env.reset(task)
    # a cross join of ~20^4 rows: rendering stops at 800 characters
    r = env.step(ToolCall("execute_sql", {
        "query": f"SELECT * FROM `{name}` a, `{name}` b, `{name}` c, `{name}` d"}))
    assert r.info["truncated"] and r.observation.endswith("[TRUNCATED]")
    assert len(r.observation) == 800 + len("[TRUNCATED]")
    # counting a ~20^7-row join would take minutes: the statement timeout (2 s here) stops it
    join = ", ".join(f"`{name}` t{i}" for i in range(7))
    r = env.step(ToolCall("execute_sql", {"query": f"SELECT COUNT(*) FROM {join}"}))
    assert r.info["timed_out"] and r.info["sql_error"] and not r.done
    r = env.step(ToolCall("execute_sql", {"query": f"SELECT COUNT(*) FROM `{name}`"}))
    assert r.observation == f"[({len(item['table']['table_info']['rows'])},)]"
    env.close()


def test_agent_sql_cannot_reach_the_host_or_other_episodes(engine, generated_items):
    a_task, b_task = dbbench.tasks_from_items(generated_items[:2])
    a = dbbench.DBBenchEnv(engine=engine, protocol="function")
    b = dbbench.DBBenchEnv(engine=engine, protocol="function")
    a.reset(a_task)
    b.reset(b_task)

    def run(env, q):
        return env.step(ToolCall("execute_sql", {"query": q}))

    if engine.name == "sqlite":
        for q in ("ATTACH DATABASE '/tmp/hj_escape.db' AS x",
                  "ATTACH DATABASE ':memory:' AS x",
                  "SELECT load_extension('/lib/x86_64-linux-gnu/libc.so.6')",
                  "PRAGMA writable_schema = 1",
                  "CREATE VIRTUAL TABLE v USING fts5(x)"):
            r = run(a, q)
            assert r.info["sql_error"], (q, r.observation)
        # each episode has its own in-memory database: B sees only its own table
        names = run(b, "SELECT name FROM sqlite_master WHERE type = 'table'").observation
        assert names == repr([(b_task.data["table"]["table_name"],)])
    else:
        other = f"`{a.session.db}`.`{a_task.data['table']['table_name'].replace('`', '``')}`"
        for q in (f"SELECT * FROM {other}", "SELECT * FROM mysql.user",
                  "SELECT 1 INTO OUTFILE '/tmp/hj_escape.txt'", "CREATE DATABASE hj_escape",
                  f"DROP DATABASE `{a.session.db}`", "SET GLOBAL max_connections = 1"):
            r = run(b, q)
            assert r.info["sql_error"], (q, r.observation)
        assert run(b, "SELECT LOAD_FILE('/etc/passwd')").observation == "[(None,)]"
        dbs = run(b, "SHOW DATABASES").observation
        assert b.session.db in dbs and a.session.db not in dbs and "mysql" not in dbs
    # A is untouched by B's attempts
    r = run(a, f"SELECT COUNT(*) FROM `{a_task.data['table']['table_name'].replace('`', '``')}`")
    assert r.observation == f"[({len(a_task.data['table']['table_info']['rows'])},)]"
    a.close()
    b.close()


def test_async_api_runs_concurrent_episodes(engine, generated_items):
    tasks = dbbench.tasks_from_items(generated_items[:4])

    async def episode(task):
        env = dbbench.DBBenchEnv(engine=engine, protocol="function")
        await env.areset(task)
        for r in dbbench.oracle_reply(task.data, "function"):
            res = await env.astep(r)
            if res.done:
                break
        ev = await env.aevaluate()
        await env.aclose()
        return ev["success"]

    async def main():
        return await asyncio.gather(*(episode(t) for t in tasks))

    assert asyncio.run(main()) == [True] * 4


def test_unreachable_mariadb_is_an_infra_error(generated_items):
    env = dbbench.DBBenchEnv(engine="mariadb", socket="/nonexistent/mysqld.sock")
    with pytest.raises(InfraError, match="scripts/mariadb.sh"):
        env.reset(dbbench.tasks_from_items(generated_items[:1])[0])


# -- SQLite's MySQL dialect helpers --------------------------------------------------------------
def test_sqlite_answers_mysql_introspection_and_functions(generated_items):
    item = generated_items[0]
    env = dbbench.DBBenchEnv(engine="sqlite", protocol="function")
    env.reset(dbbench.tasks_from_items([item])[0])
    name = item["table"]["table_name"]
    cols = [c["name"] for c in item["table"]["table_info"]["columns"]]

    def q(sql):
        return env.step(ToolCall("execute_sql", {"query": sql})).observation

    assert q("SHOW TABLES;") == repr([(name,)])
    assert q(f"DESCRIBE `{name}`") == repr([(c, "text", "YES", "", None, "") for c in cols])
    assert q("SELECT md5('abc'), concat_ws('-', 'a', NULL, 'b'), concat('x', 1)") == repr(
        [("900150983cd24fb0d6963f7d28e17f72", "a-b", "x1")])
    # text comparison is case-insensitive, as with MySQL's default collation
    first = item["table"]["table_info"]["rows"][0][0]
    assert q(f"SELECT COUNT(*) FROM `{name}` WHERE `{cols[0]}` = '{first.upper().replace(chr(39), chr(39) * 2)}'") == "[(1,)]"
    env.close()


# -- loader, answer checks, parser ---------------------------------------------------------------
def test_load_tasks_reads_agentbench_format(tmp_path, generated_items):
    select_item = {
        "description": "What is the total number of medals won by Norway?",
        "add_description": "The name of this table is Medals, and the headers of this table "
                           "are Nation,Total.",
        "table": {"table_name": "Medals", "table_info": {
            "columns": [{"name": "Nation", "type": "TEXT"}, {"name": "Total", "type": "INT"}],
            "rows": [["Norway", 39], ["Germany", 31]]}},
        "type": ["aggregation-SUM"], "label": ["39.0"],
        "sql": {"query": "SELECT SUM(Total) FROM Medals WHERE Nation = 'Norway'"},
    }
    insert_item = next(i for i in generated_items if dbdata.item_category(i) == "INSERT")
    path = tmp_path / "standard.jsonl"
    path.write_text("\n".join(json.dumps(i) for i in (select_item, insert_item)) + "\n")
    tasks = dbbench.load_tasks(str(path))
    assert [t.category for t in tasks] == ["aggregation-SUM", "INSERT"]
    assert tasks[0].task_id == dbbench.load_tasks(str(path))[0].task_id
    env = dbbench.DBBenchEnv()
    res, ev = _play(env, tasks[0], ["Action: Answer\nFinal Answer: [\"39\"]"])
    assert ev["success"]
    env.close()
    with pytest.raises(registry.SealedSplitError):
        dbbench.load_tasks(str(path), split="test")
    bad = dict(select_item)
    del bad["label"]          # not AgentBench-shaped: cannot be run at all
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=r"standard.jsonl\[0\]\.label"):
        dbbench.load_tasks(str(path))


def _unmaterialisable_items(generated_items):
    """Hand-made items of the shapes AgentBench's own files contain: a column with an empty
    name (SELECT and INSERT items) and a row shorter than the header."""
    empty_col = {
        "description": "How many nations are listed?",
        "add_description": "The name of this table is Medals, and the headers of this table "
                           "are Nation,,Total.",
        "table": {"table_name": "Medals", "table_info": {
            "columns": [{"name": "Nation", "type": "TEXT"}, {"name": "", "type": "TEXT"},
                        {"name": "Total", "type": "INT"}],
            "rows": [["Norway", "", 39], ["Germany", "", 31]]}},
        "type": ["counting"], "label": ["2"]}
    insert = json.loads(json.dumps(next(
        i for i in generated_items if dbdata.item_category(i) == "INSERT")))
    insert["table"]["table_info"]["columns"][0]["name"] = ""
    ragged = json.loads(json.dumps(empty_col))
    ragged["table"]["table_info"]["columns"].pop(1)
    ragged["table"]["table_info"]["rows"] = [["Norway", 39], ["Germany"]]
    return empty_col, insert, ragged


def test_items_no_engine_can_materialise_load_and_score_like_agentbench(
        engine, tmp_path, generated_items, caplog):
    empty_col, insert, ragged = _unmaterialisable_items(generated_items)
    good = generated_items[0]
    path = tmp_path / "dev.jsonl"
    path.write_text("\n".join(json.dumps(i) for i in (good, empty_col, insert, ragged)))
    problems = []
    with caplog.at_level("WARNING"):
        tasks = dbbench.load_tasks(str(path), problems=problems)
    assert len(tasks) == 4                                   # nothing aborted, nothing dropped
    assert [(p.index, p.reason.split(" fails")[0]) for p in problems] == [
        (1, "CREATE TABLE `Medals`"), (2, f"CREATE TABLE `{insert['table']['table_name']}`"),
        (3, "INSERT INTO `Medals`")]
    assert "Incorrect column name ''" in problems[0].reason
    assert "Column count doesn't match value count at row 2" in problems[2].reason
    assert "dev.jsonl[1]: CREATE TABLE `Medals` fails" in caplog.text

    env = dbbench.DBBenchEnv(engine=engine, protocol="text")
    # the good item is unaffected by its neighbours
    assert _play(env, tasks[0], dbbench.oracle_reply(good, "text"))[1]["success"]
    # v0.2: the episode runs without the table and is judged like any other
    env.reset(tasks[1])
    r = env.step("Action: Operation\n```sql\nSELECT COUNT(*) FROM `Medals`;\n```")
    assert r.info["sql_error"] and not r.done and not r.info.get("infra_error")
    res, ev = _play(env, tasks[1], ['Action: Answer\nFinal Answer: ["2"]'])
    assert ev["success"] and "Incorrect column name" in ev["setup_errors"][0]
    # a mutation item on a table that was never created fails its fingerprint
    res, ev = _play(env, tasks[2], dbbench.oracle_reply(insert, "text"))
    assert res.done and res.reward == 0.0 and not ev["success"]
    # a failed INSERT leaves the table empty
    env.reset(tasks[3])
    assert env.step("Action: Operation\n```sql\nSELECT COUNT(*) FROM `Medals`;\n```"
                    ).observation == "[(0,)]"
    env.close()
    # AgentBench FC ends a sample whose set-up failed as a task error: score 0 whatever is said
    fc = dbbench.DBBenchEnv(engine=engine, protocol="function")
    res, ev = _play(fc, tasks[1], [ToolCall("commit_final_answer", {"answers": ["2"]})])
    assert res.reward == 0.0 and ev["status"] == "task_error" and ev["setup_errors"]
    fc.close()


def test_answer_checks_follow_agentbench():
    s = protocol.strict_match
    assert s(' ["167"]', ["167.0"]) and s("167", ["167.0"])
    assert s('["b", "a"]', ["a", "b"]) and not s('["a"]', ["a", "b"])
    assert not s('["Paris"]', ["paris"])                   # exact, case-sensitive strings
    assert not s('"ab"', ["ab"])                           # v0.2 quirk: list("ab") == ['a','b']
    assert s("not a list", ["not a list"])
    le = protocol.lenient_match
    assert le('["1,234"]', ["1234.0"]) and le('["45%"]', ["45"]) and le("3.004", ["3"])
    assert le('["None"]', ["0"]) and le('["2", "1"]', ["1.0", "2.0"])
    assert not le('["3.1"]', ["3"]) and not le('["x"]', ["y"])


def test_text_parser_uses_the_published_patterns():
    p = protocol.parse_text_action("Thinking.\nAction: Operation\n```sql\nSELECT *\nFROM t;\n```")
    assert p.kind == "operation" and p.sql == "SELECT * FROM t;"
    p = protocol.parse_text_action("Action: Answer\nFinal Answer: [\"x\"]")
    assert p.kind == "answer" and p.answer_text.strip() == '["x"]'
    assert protocol.parse_text_action("Action: Answer Final Answer: [1]").kind == "invalid"
    assert protocol.parse_text_action("Action: Answer\nno answer line").kind == "invalid"


@pytest.mark.parametrize("proto", ["text", "function"])
def test_protocol_conformance(engine, proto, check_conformance, generated_items):
    task = dbbench.tasks_from_items([generated_items[-1]])[0]     # a mutation item
    check_conformance(lambda: dbbench.DBBenchEnv(engine=engine, protocol=proto), task,
                      dbbench.oracle_reply(task.data, proto))
