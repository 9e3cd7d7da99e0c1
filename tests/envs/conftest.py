"""Shared fixtures of the environment tests: SQL engines (SQLite always; MariaDB when a server
answers, and always under CI=true, where .ci/run starts it with scripts/mariadb.sh)."""
import os

import pytest

from harness_jax.envs import dbbench
from harness_jax.envs.dbbench import generator

ENGINES = ("sqlite", "mariadb")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def sql_engines():
    """Engine instances shared by the whole session (MariaDB: one admin connection)."""
    engines = {"sqlite": dbbench.SQLiteEngine(statement_timeout_s=2.0)}
    if dbbench.mariadb_available():
        engines["mariadb"] = dbbench.MariaDBEngine(statement_timeout_s=2.0)
    yield engines
    for e in engines.values():
        e.close()


@pytest.fixture(params=ENGINES)
def engine(request, sql_engines):
    name = request.param
    if name not in sql_engines:
        if _in_ci():
            pytest.fail("MariaDB is not reachable although CI=true: .ci/run must run "
                        "`bash scripts/mariadb.sh start` (socket: "
                        f"{dbbench.engines.default_socket()})")
        pytest.skip("MariaDB not reachable (start it with `bash scripts/mariadb.sh start`)")
    return sql_engines[name]


@pytest.fixture(scope="session")
def generated_items():
    """Four generated items of every DBBench category (44 items)."""
    return generator.generate_items(44, seed=7, categories=dbbench.CATEGORIES)


def _check_conformance(make_env, task, actions):
    """The Env protocol, checked the same way for every family: sync and async APIs, types of
    StepResult fields, tool specs per protocol, episode end, evaluate() keys."""
    import asyncio

    from harness_jax.envs import Env, StepResult

    env = make_env()
    assert isinstance(env, Env) and env.name == task.env_name
    specs = env.tool_specs()
    if env.protocol == "function":
        assert specs and all(s["type"] == "function" and s["function"]["name"]
                             and s["function"]["parameters"]["type"] == "object" for s in specs)
    else:
        assert specs == []
    obs = env.reset(task)
    assert isinstance(obs, str) and obs
    res = None
    for a in actions:
        res = env.step(a)
        assert isinstance(res, StepResult) and isinstance(res.observation, str)
        assert isinstance(res.reward, float) and isinstance(res.done, bool)
        assert isinstance(res.info, dict)
        if res.done:
            break
    assert res is not None and res.done and res.reward == 1.0
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(actions[-1])
    ev = env.evaluate()
    assert ev["success"] is True and ev["score"] == 1.0
    env.close()

    async def run_async():
        e = make_env()
        first = await e.areset(task)
        assert isinstance(first, str)
        for a in actions:
            r = await e.astep(a)
            if r.done:
                break
        out = await e.aevaluate()
        await e.aclose()
        return out

    assert asyncio.run(run_async())["success"] is True


@pytest.fixture(scope="session")
def check_conformance():
    return _check_conformance
