"""Rescue inside the loop's collection: the real ``Collector`` and ``EpisodeRunner`` on generated
DBBench (SQLite), a frozen pool of deterministic-operator siblings, every registered router
(LLM voters through a scripted OpenAI-compatible server over real HTTP: a test double, like the
policy ``ReactivePolicy``, see ``loopkit``), ``HarnessSExtension`` attached to a minimal run
context (runner, H0, paths), its per-step metrics, decision log, state round trip (resume) and
re-anchoring; the calibration math through ``train.groups.compute_advantages``."""
import json

import pytest

from harness_jax import harness_s
from harness_jax.envs import dbbench
from harness_jax.harness_s import training
from harness_jax.train import groups
from harness_jax.train.data import TaskStream
from harness_jax.train.workdir import RunPaths

from . import loopkit


def _env():
    return dbbench.DBBenchEnv(engine="sqlite", protocol="text")


@pytest.fixture()
def world(loop_world):
    return loop_world


def _run(world, tmp_path, router="validation_topk", steps=1, ctx_paths=None, **over):
    """Collects ``steps`` steps with the extension's rescue; returns (ext, batches, runner)."""
    run = loopkit.resolve(loopkit.config(**{"harness_s.pool": world.pool.path, "harness_s.router.name": router,
                                            "harness_s.router.top_k": 2, **over}))
    runner = loopkit.runner(run, world.policy, _env, world.tok)
    ctx = loopkit.context(run, runner, ctx_paths or RunPaths.of(str(tmp_path)))
    ext = training.HarnessSExtension(run.method("harness_s"))
    ext.attach(ctx)
    col = loopkit.collector(run, ctx, TaskStream(world.train, seed=0), ext)
    batches = [col.collect(s) for s in range(steps)]
    return ext, batches, runner


def test_rescue_replaces_all_fail_groups_and_reports_metrics(world, tmp_path):
    ext, (batch,), runner = _run(world, tmp_path)
    try:
        by_cat = {g.task.category: g for g in batch.groups}
        assert by_cat["DELETE"].harness_id != "rescue" and by_cat["DELETE"].success_rate == 1.0
        pool = world.pool
        for cat in ("counting", "aggregation-SUM"):
            g = by_cat[cat]
            assert g.harness_id == "rescue" and g.baseline_rewards == [0.0, 0.0]
            helpers = g.info["rescue"]["helpers"]
            assert len(helpers) == 2 == len(set(helpers)) and pool.ids[0] not in helpers
            assert {e.sibling_id for e in g.episodes} == set(helpers)     # 1 attempt each (split)
            assert all(e.pool_version == training.pool_version(pool) for e in g.episodes)
        # the two helpers with the best validation rescue rate fix counting and aggregation: both rescued
        assert by_cat["counting"].success_rate == 0.5 and by_cat["aggregation-SUM"].success_rate == 0.5
        m = ext.step_metrics(None, batch, {"time/step_s": batch.rollout_s})
        assert m["rescue/trigger_rate"] == pytest.approx(2 / 3) and m["rescue/success_rate"] == 1.0
        assert m["rescue/zero_variance_before"] == 1.0                       # every group: equal rewards
        assert m["rescue/zero_variance_after"] == pytest.approx(1 / 3)       # only DELETE (all success)
        assert 0 < m["rescue/wall_fraction"] <= 1.0
        calls = {k: v for k, v in m.items() if k.startswith("rescue/helper/") and k.endswith("/calls")}
        assert sum(calls.values()) == 4 and sum(v for k, v in m.items() if k.endswith("/successes")) == 2
        assert sum(v for k, v in m.items() if k.startswith("rollout/episodes_by_sibling/")) == 6
        # every decision and its outcome are in the run dir's log
        recs = [json.loads(x) for x in open(ext.log_path)]
        assert [next(iter(r)) for r in recs].count("decision") == 2
        outs = [r["outcome"] for r in recs if "outcome" in r]
        assert len(outs) == 2 and all(len(o["results"]) == 2 for o in outs)
        # advantages through the one advantage path = the rescue math
        groups.compute_advantages(batch.groups, eps=1e-6)
        g = by_cat["counting"]
        want, _ = harness_s.rescue_advantages_G([0.0, 0.0], g.rewards, calibration="with_original")
        got = [e.segments[0].advantage for e in g.episodes]
        assert got == pytest.approx(list(want)) and max(got) > 0
    finally:
        runner.close()


def test_calibration_through_the_advantage_path():
    t = loopkit.tasks(["counting"])[0]

    def ep(r):
        from harness_jax.types import TokenSegment
        return groups.Episode("e", t, "h", float(r), r > 0, [TokenSegment([1, 2, 3], [0, 1, 1], [0.0] * 3)], 0)
    for orig, resc in (([0, 0, 0, 0], [1, 1, 1, 1]), ([0, 0], [1, 0, 0]), ([0, 0, 0], [0.5, 1.0])):
        for cal in ("with_original", "replaced"):
            g = groups.Group("g", t, [ep(r) for r in resc],
                             baseline_rewards=[float(x) for x in orig] if cal == "with_original" else [])
            groups.compute_advantages([g], eps=1e-6)
            want, _ = harness_s.rescue_advantages_G(orig, resc, calibration=cal)
            assert [e.segments[0].advantage for e in g.episodes] == pytest.approx(list(want), abs=1e-6)
    # an all-success rescue teaches with the originals in the statistics, and only then
    g = groups.Group("g", t, [ep(1), ep(1)], baseline_rewards=[0.0, 0.0])
    assert not g.zero_variance and groups.compute_advantages([g], eps=1e-6)["zero_variance_groups"] == 0
    assert [e.segments[0].advantage for e in g.episodes] == pytest.approx([1.0, 1.0])
    g2 = groups.Group("g", t, [ep(1), ep(1)])
    assert g2.zero_variance


class _FlakyFirst:
    """Wraps the policy: the first generation for ``question`` raises (an engine failure, i.e.
    an infrastructure error with ``harness.infra_retries=0``)."""

    def __init__(self, policy, question):
        self.p, self.q, self.failed = policy, question, False

    @property
    def weight_version(self):
        return self.p.weight_version

    async def end_episode(self, k):
        pass

    async def generate(self, request):
        text = self.p.tok.decode(list(request.input_ids))
        if not self.failed and self.q in text:
            self.failed = True
            raise ConnectionError("engine went away")
        return await self.p.generate(request)


def test_rescue_never_fires_on_infrastructure_errors(world, tmp_path):
    counting = next(t for t in world.train if t.category == "counting")
    run = loopkit.resolve(loopkit.config(**{"harness_s.pool": world.pool.path, "harness_s.router.top_k": 2,
                                            "rl.tasks_per_step": 1}))
    engine = _FlakyFirst(world.policy, counting.data["description"])
    runner = loopkit.runner(run, engine, _env, world.tok)
    ext = training.HarnessSExtension(run.method("harness_s"))
    ctx = loopkit.context(run, runner, RunPaths.of(str(tmp_path)))
    ext.attach(ctx)
    try:
        col = loopkit.collector(run, ctx, TaskStream([counting], seed=0), ext)
        batch = col.collect(0)
        g = batch.groups[0]
        assert g.info["infra_errors"] == 1 and len(g.episodes) == 1 and not g.episodes[0].success
        assert g.harness_id != "rescue" and "rescue" not in g.info          # incomplete: not rescued
        m = ext.step_metrics(None, batch, {"time/step_s": 1.0})
        assert m["rescue/trigger_rate"] == 0.0 and m["rescue/infra_groups"] == 1.0
        assert ext.access.router.n_decisions == 0
    finally:
        runner.close()


def _vote_server(world, chat_server, favourite_op):
    fav = next(e.sibling_id for e in world.pool.entries if e.direction == favourite_op)

    def handler(body):
        user = [m for m in body["messages"] if m["role"] == "user"][0]["content"]
        cands = [json.loads(x)["id"] for x in user.split("Candidates (one JSON per line):\n")[1].splitlines()]
        return json.dumps({"ranking": [fav] + [x for x in cands if x != fav], "reason": "scripted"})
    chat_server.handler = handler
    return fav


@pytest.mark.parametrize("router", sorted(harness_s.ROUTERS))
def test_every_router_inside_the_loop(world, tmp_path, chat_server, router):
    over = {}
    fav = None
    if router in ("llm_vote", "hybrid"):
        fav = _vote_server(world, chat_server, "worked_example")
        over = {"harness_s.router.votes.voters": ({"name": "v0", "base_url": chat_server.url, "model": "m",
                                                   "api_key_env": "", "temperature": 0.0, "seed": 0},),
                "harness_s.router.hybrid.margin": 1.0}         # hybrid: every candidate is ambiguous
    ext, (batch,), runner = _run(world, tmp_path, router=router, **over)
    try:
        rescued = [g for g in batch.groups if g.harness_id == "rescue"]
        assert len(rescued) == 2
        router_obj = ext.access.router
        assert router_obj.name == router and router_obj.n_decisions == 2
        for g in rescued:
            helpers = g.info["rescue"]["helpers"]
            assert len(set(helpers)) == 2 and set(helpers) <= set(world.pool.ids[1:])
            d = next(d for d in router_obj.decisions if d["id"] == g.info["rescue"]["decision_id"])
            assert d["top_k"] == helpers and d["outcome"] is not None and d["task_id"] == g.task.task_id
            if fav is not None:
                assert helpers[0] == fav and d["votes"] and d["votes"][0]["ok"]
        if fav is not None:
            assert sum(u.get("calls", 0) for v in router_obj.usage().values() for u in v.values()) >= 2
    finally:
        runner.close()


def test_router_state_and_log_survive_resume_and_reanchoring_refreshes(world, tmp_path):
    paths = RunPaths.of(str(tmp_path))
    ext, batches, runner = _run(world, tmp_path, router="random", steps=2, ctx_paths=paths,
                                **{"harness_s.reanchor.every_steps": 1, "harness_s.validation.num_tasks": 6,
                                   "harness_s.validation.k": 1})
    learned = loopkit.policy_for(world.tok, world.train + world.val)   # H0 now solves counting too
    learned.items = {q: dict(it, _category="learned" if it["_category"] == "counting" else it["_category"])
                     for q, it in learned.items.items()}
    runner2 = loopkit.runner(loopkit.resolve(loopkit.config(**{"harness_s.pool": world.pool.path})), learned, _env,
                             world.tok)
    try:
        router = ext.access.router
        state = json.loads(json.dumps(ext.state_dict()))     # what the checkpoint holds
        n_lines = state["log_lines"]
        assert router.n_decisions == 4 and n_lines == 4 + 4   # decisions + outcomes
        assert len(ext.val_tasks) == 6 and {t.split for t in ext.val_tasks} == {"search"}
        ext.val_tasks = list(world.val)             # the pool's validation tasks (made by loopkit)
        before_fail = router.h0_failed_tasks()
        rep = ext.reanchor(runner2, "9")
        assert rep["policy_version"] == "9" and router.policy_version == "9"
        assert set(rep["refreshed"]) == set(world.pool.ids) and rep["profiles"] == len(world.pool) - 1
        assert len(before_fail) == 4 and len(router.h0_failed_tasks()) == 2   # only aggregation left
        assert router.profiles[world.pool.ids[1]].policy_version == "9"
        assert router.reanchors[-1]["rescue_rate_after"] != router.reanchors[-1]["rescue_rate_before"]
        draws_after = [router.rank(world.train[0], [], step=9) for _ in range(3)]   # after the "checkpoint"
        # resume: a fresh extension restores the state; the log is cut back to the checkpoint
        run = loopkit.resolve(loopkit.config(**{"harness_s.pool": world.pool.path, "harness_s.router.name": "random",
                                                "harness_s.router.top_k": 2}))
        for _ in range(2):
            ext2 = training.HarnessSExtension(run.method("harness_s"))
            ext2.attach(loopkit.context(run, runner, paths))
            ext2.load_state_dict(state)
            r2 = ext2.access.router
            assert r2.n_decisions == 4 and len(open(ext2.log_path).readlines()) == n_lines
            assert r2.reanchors == [] and r2.policy_version == "v7"    # state of the checkpoint
            # the resumed random router continues the original's sequence from the checkpoint
            assert [r2.rank(world.train[0], [], step=9) for _ in range(3)] == draws_after
        with pytest.raises(ValueError, match="another sibling pool"):
            ext2.load_state_dict(dict(state, pool_hash="0" * 64))
    finally:
        runner.close()
        runner2.close()
