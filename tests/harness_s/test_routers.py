"""Every router, vote aggregation, the decision log, state round trips and re-anchoring. LLM voters
talk to a scripted OpenAI-compatible server over real HTTP (a test double)."""
import json

import pytest

from harness_jax import harness_s
from harness_jax.envs.base import Task
from harness_jax.harness.presets import base_harness
from harness_jax.harness.siblings import Sibling
from harness_jax.harness_s.pool import PoolEntry, SiblingPool
from harness_jax.harness_s.profiles import EpisodeSummary, PairedResult

from .builders import ANSWER, SQL, router_cfg, traj

A_FAIL = {"cause=answered_without_inspecting": 1.0, "turns": 0.1, "answered_first_turn": 1.0}
B_FAIL = {"cause=answered_after_error": 1.0, "error=unknown_column": 1.0, "turns": 0.2}


def _sib(name, prompt=""):
    h0 = base_harness("dbbench", "text")
    spec = h0 if not prompt else h0.child(name=name, system_prompt=prompt)
    return Sibling(spec, name=name)


def make_pool():
    tasks = {f"a{i}": "A" for i in range(4)} | {f"b{i}": "B" for i in range(4)} | \
        {f"d{i}": "D" for i in range(4)}

    def res(solves):
        return {t: [c in solves or t in solves, c in solves or t in solves]
                for t, c in tasks.items()}

    entries = [PoolEntry(_sib("H0"), validation=res({"D"}), policy_version="0", cost=1.0),
               PoolEntry(_sib("sA", "Inspect first."), 1, None, "answered_without_inspecting",
                         "deterministic:x", res({"A", "D"}), "0", 2.0),
               PoolEntry(_sib("sB", "Recover from errors."), 1, None, "answered_after_error",
                         "deterministic:y", res({"B", "D"}), "0", 2.0),
               PoolEntry(_sib("sW", "Weak."), 1, None, "x", "d", res({"a0", "b0", "D"}), "0", 1.5),
               PoolEntry(_sib("sN", "Useless."), 1, None, "x", "d", res(set()), "0", 1.0)]
    h0f = {t: [A_FAIL if c == "A" else B_FAIL] * 2 for t, c in tasks.items() if c != "D"}
    info = {t: {"category": c, "text": f"question {t}"} for t, c in tasks.items()}
    return SiblingPool(entries, env_name="dbbench", val_task_ids=list(tasks), task_info=info,
                       h0_failures=h0f, content_hash="f" * 64)


@pytest.fixture()
def pool():
    return make_pool()


def ids(pool):
    return {e.name: e.sibling_id for e in pool.entries}


def _task(cat, i=0):
    return Task("dbbench", {"description": f"new {cat} question {i}"}, category=cat)


def _router(pool, name, **over):
    return harness_s.make_router(router_cfg(name=name, **over), pool)


def test_validation_topk_uses_rescue_rate_then_cost(pool):
    n = ids(pool)
    r = _router(pool, "validation_topk", top_k=4)
    # rescue rates on H0's 8 failed tasks: sA 4/8, sB 4/8, sW 2/8, sN 0/8 (Laplace-smoothed)
    # sA and sB tie on rate and cost: the smaller id first
    assert r.rank(_task("A")) == sorted([n["sA"], n["sB"]]) + [n["sW"], n["sN"]]
    assert r.rank(_task("B"), [], k=2) == r.rank(_task("A"), [], k=2)   # the same for every task
    assert n["H0"] not in r.rank(_task("A"), k=10)
    assert r.rescue_rate(n["sA"]) == pytest.approx(5 / 10)


def test_features_router_conditions_on_the_failure(pool):
    n = ids(pool)
    r = _router(pool, "features", top_k=2)
    a_fail = [traj("x", [(ANSWER, "")]), traj("x", [(ANSWER, "")])]
    b_fail = [traj("y", [(SQL, "no such column: q"), (ANSWER, "")])]
    assert r.rank(_task("A"), a_fail)[0] == n["sA"]
    assert r.rank(_task("B"), b_fail)[0] == n["sB"]
    assert r.rank(_task("B"), [B_FAIL])[0] == n["sB"]                   # stored feature dicts
    d = r.decisions[-1]
    assert d["task_id"] == _task("B").task_id and d["top_k"][0] == n["sB"]
    assert d["scores"][n["sB"]] > 0.7 > d["scores"][n["sA"]]
    assert d["explain"][n["sB"]][0][0] in B_FAIL                      # interpretable
    # infrastructure failures in failed_episodes are ignored, not read as failures
    infra = [traj("z", [], infra=True)]
    assert r.rank(_task("B"), infra + b_fail) == r.rank(_task("B"), b_fail)


def test_random_and_fixed_mixture(pool):
    n = ids(pool)
    r1, r2 = _router(pool, "random", seed=3), _router(pool, "random", seed=3)
    seq1 = [r1.rank(_task("A", i)) for i in range(5)]
    assert seq1 == [r2.rank(_task("A", i)) for i in range(5)]
    assert len({tuple(s) for s in seq1}) > 1 and all(len(set(s)) == 4 for s in seq1)
    fm = _router(pool, "fixed_mixture", top_k=2, mixture_weights={"sA": 3.0, "sB": 1.0})
    draws = [fm.rank(_task("A", i)) for i in range(200)]
    firsts = [d[0] for d in draws]
    assert set(firsts) == {n["sA"], n["sB"]} and firsts.count(n["sA"]) > 120    # ~75%
    assert all(set(d) == {n["sA"], n["sB"]} for d in draws)                    # weight 0 last
    uni = _router(pool, "fixed_mixture", top_k=1)
    counts = {}
    for i in range(400):
        first = uni.rank(_task("A", i))[0]
        counts[first] = counts.get(first, 0) + 1
    assert len(counts) == 4 and min(counts.values()) > 60          # ~100 each


def test_aggregate_rankings_borda_and_rrf():
    cands = ["a", "b", "c", "d"]
    rankings = [["a", "b", "c"], ["b", "a", "zzz", "b"], ["b", "c"]]
    borda = harness_s.aggregate_rankings(rankings, cands, method="borda")
    assert borda == [("b", 11.0), ("a", 7.0), ("c", 5.0), ("d", 0.0)]
    rrf = harness_s.aggregate_rankings(rankings, cands, method="rrf", rrf_k=1.0)
    assert [c for c, _ in rrf] == ["b", "a", "c", "d"]
    assert rrf[0][1] == pytest.approx(1 / 3 + 1 / 2 + 1 / 2)
    tie = harness_s.aggregate_rankings([["a"], ["b"]], ["a", "b"], tiebreak={"a": (1,), "b": (0,)})
    assert [c for c, _ in tie] == ["b", "a"]
    with pytest.raises(ValueError, match="borda"):
        harness_s.aggregate_rankings([], cands, method="mean")


def _candidate_ids(body):
    user = [m for m in body["messages"] if m["role"] == "user"][0]["content"]
    return [json.loads(line)["id"] for line in user.split("Candidates (one JSON per line):\n")[1]
            .splitlines()]


def _voters(url, *models):
    return tuple({"name": f"v{i}", "base_url": url, "model": m, "api_key_env": "",
                  "temperature": 0.7, "seed": i} for i, m in enumerate(models))


def vote_handler(pool):
    n = ids(pool)

    def handler(body):
        cands = _candidate_ids(body)
        model = body["model"]
        if model == "broken":
            return (500, {"error": "down"})
        if model == "liar":
            return json.dumps({"ranking": ["not-a-sibling"]})
        pref = {"likes-B": ["sB", "sW", "sA", "sN"], "likes-W": ["sW", "sB", "sA", "sN"]}[model]
        order = [n[p] for p in pref if n[p] in cands]
        return "Here is my ranking:\n```json\n" + json.dumps({"ranking": order}) + "\n```"
    return handler


def test_llm_vote_router_fuses_votes_and_logs_them(pool, chat_server, tmp_path):
    n = ids(pool)
    chat_server.handler = vote_handler(pool)
    log_path = tmp_path / "decisions.jsonl"
    r = _router(pool, "llm_vote", top_k=2, **{
        "votes.voters": _voters(chat_server.url, "likes-B", "likes-B", "likes-W", "liar"),
        "votes.cache_dir": str(tmp_path / "cache"), "log.path": str(log_path)})
    task = _task("A")
    top = r.rank(task, [traj("x", [(ANSWER, "")])])
    assert top == [n["sB"], n["sW"]]                                # Borda: 2 x B + 1 x W
    d = r.decisions[-1]
    assert [v["ok"] for v in d["votes"]] == [True, True, True, False]
    assert d["votes"][3]["attempts"] == 2 and "not candidates" in d["votes"][3]["errors"][0]
    assert d["fallback"] is None and d["vote_scores"][n["sB"]] == 11.0
    prompt = [m for m in chat_server.requests[0]["messages"] if m["role"] == "user"][0]["content"]
    assert "new A question 0" in prompt and "answered_without_inspecting" in prompt
    assert "rescue_rate_on_H0_failures" in prompt and n["H0"] not in _candidate_ids(
        chat_server.requests[0])
    n_req = len(chat_server.requests)
    assert r.rank(task, [traj("x", [(ANSWER, "")])]) == top          # rerun: all from the cache
    assert len(chat_server.requests) == n_req and all(
        v["cached"] for v in r.decisions[-1]["votes"][:3])
    use = r.usage()
    assert use["v0"]["voter:v0"]["calls"] == 2 and use["v0"]["voter:v0"]["cache_hits"] == 1
    assert use["v3"]["voter:v3"]["calls"] == 4                      # 2 ranks x (vote + repair)
    r.record_outcome(d["id"], {n["sB"]: [True, False], n["sW"]: [None, False]})
    assert r.helper_stats[n["sB"]] == {"calls": 1, "attempts": 2, "successes": 1}
    assert r.helper_stats[n["sW"]]["attempts"] == 1
    lines = [json.loads(x) for x in log_path.read_text().splitlines()]
    assert [next(iter(x)) for x in lines] == ["decision", "decision", "outcome"]
    assert lines[2]["outcome"]["results"][n["sW"]] == [None, False]
    assert r.decisions[0]["outcome"] == {n["sB"]: [True, False], n["sW"]: [None, False]}


def test_llm_vote_falls_back_to_features_when_every_voter_fails(pool, chat_server):
    n = ids(pool)
    chat_server.handler = vote_handler(pool)
    r = _router(pool, "llm_vote", top_k=1,
                **{"votes.voters": _voters(chat_server.url, "broken", "liar")})
    for v in r.clients:
        v.config = type(v.config)(**{**v.config.__dict__, "backoff_s": 0.01})
    top = r.rank(_task("B"), [B_FAIL])
    assert top == [n["sB"]] and r.decisions[-1]["fallback"].startswith("features")
    assert "down" in r.decisions[-1]["votes"][0]["errors"][0]


def test_hybrid_votes_only_on_what_features_cannot_separate(pool, chat_server):
    n = ids(pool)
    chat_server.handler = vote_handler(pool)
    voters = {"votes.voters": _voters(chat_server.url, "likes-W")}
    clear = _router(pool, "hybrid", top_k=1, **{"hybrid.margin": 0.05}, **voters)
    assert clear.rank(_task("A"), [A_FAIL]) == [n["sA"]]
    assert clear.decisions[-1]["votes_used"] is False and not chat_server.requests
    fuzzy = _router(pool, "hybrid", top_k=2, **{"hybrid.margin": 1.0}, **voters)
    top = fuzzy.rank(_task("A"), [A_FAIL])
    d = fuzzy.decisions[-1]
    assert d["votes_used"] and set(d["ambiguous"]) == set(fuzzy.candidates)
    assert top == [n["sW"], n["sB"]] and len(chat_server.requests) == 1


def test_rank1_routing_includes_h0(pool):
    n = ids(pool)
    r = _router(pool, "features", top_k=1, include_base=True)
    assert n["H0"] in r.candidates
    assert r.rank(_task("A"))[0] == n["sA"]
    assert r.rank(_task("D"))[0] in {n["H0"], n["sA"], n["sB"], n["sW"]}
    assert r.rank(_task("D"))[0] != n["sN"]
    vt = _router(pool, "validation_topk", top_k=5, include_base=True)
    assert vt.rank(_task("A"))[-1] == n["sN"] and vt.metric(n["H0"]) == pytest.approx(1 / 3)


def test_state_round_trip_resumes_the_same_decisions(pool, tmp_path):
    r1 = _router(pool, "random", seed=7)
    for i in range(3):
        r1.rank(_task("A", i))
    state = json.loads(json.dumps(r1.state_dict()))               # checkpointed as JSON
    r2 = _router(pool, "random", seed=999)
    r2.load_state_dict(state)
    assert [r1.rank(_task("B", i)) for i in range(4)] == [r2.rank(_task("B", i)) for i in range(4)]
    assert r2.n_decisions == r1.n_decisions == 7 and r2.decisions[:3] == r1.decisions[:3]
    with pytest.raises(ValueError, match="is for 'random'"):
        _router(pool, "features").load_state_dict(state)
    other = make_pool()
    other.entries = other.entries[:4]
    other = SiblingPool(other.entries, task_info=other.task_info, h0_failures=other.h0_failures)
    with pytest.raises(ValueError, match="another sibling pool"):
        _router(other, "random", top_k=3).load_state_dict(state)


def test_reanchor_refreshes_statistics_profiles_and_models(pool):
    n = ids(pool)
    r = _router(pool, "features", top_k=1)
    assert r.rank(_task("A"), [A_FAIL]) == [n["sA"]]
    # the policy learned: sN now solves the A tasks, sA regressed on them
    new = {n["sN"]: {f"a{i}": [True, True] for i in range(4)},
           n["sA"]: {f"a{i}": [False, False] for i in range(4)}}
    es = EpisodeSummary
    pairs = {n["sN"]: [PairedResult(f"a{i}", "A", [es(False, cause="answered_without_inspecting",
                                                       signals={"inspections": 0.0})],
                                    [es(True, signals={"inspections": 2.0})]) for i in range(4)]}
    rep = harness_s.reanchor(r, new, policy_version="step-50", pairs=pairs)
    assert rep["rescue_rate_after"][n["sN"]] > rep["rescue_rate_before"][n["sN"]]
    assert r.rank(_task("A"), [A_FAIL]) == [n["sN"]]
    prof = r.profiles[n["sN"]]
    assert prof.policy_version == "step-50" and sorted(prof.helps_when) == [
        "H0 failure=answered_without_inspecting: better on 4 of 4 paired tasks (worse on 0)",
        "category=A: better on 4 of 4 paired tasks (worse on 0)"]
    assert any("more successful inspections" in s for s in prof.behaviour_difference)
    r2 = _router(pool, "features", top_k=1)
    r2.load_state_dict(json.loads(json.dumps(r.state_dict())))
    assert r2.rank(_task("A"), [A_FAIL]) == [n["sN"]] and r2.policy_version == "step-50"
    assert r2.profiles[n["sN"]].helps_when == prof.helps_when
    with pytest.raises(KeyError, match="not in the pool"):
        r.reanchor({"s-unknown": {}}, policy_version="x")


def test_reanchor_from_trajectories(pool):
    n = ids(pool)
    r = _router(pool, "validation_topk", top_k=1)
    h0 = [traj(f"a{i}", [(ANSWER, "")], category="A") for i in range(4)]
    sn = [traj(f"a{i}", [(SQL, "[(1,)]"), (ANSWER, "")], success=True, category="A")
          for i in range(4)]
    rep = harness_s.reanchor_from_trajectories(r, {n["H0"]: h0, n["sN"]: sn},
                                               policy_version="step-9")
    assert rep["profiles"] == 1 and r.h0_failures["a0"][0]["cause=answered_without_inspecting"]
    assert r.profiles[n["sN"]].stats["helped"] == 4
    with pytest.raises(KeyError, match="H0"):
        harness_s.reanchor_from_trajectories(r, {n["sN"]: sn}, policy_version="x")


def test_make_router_from_a_pool_file(tmp_path):
    from harness_jax.harness_s.pool import freeze_pool

    frozen = freeze_pool(make_pool(), str(tmp_path))
    cfg = harness_s.router_config()
    cfg.top_k = 2
    r = harness_s.make_router(cfg, frozen.path)
    assert r.name == "validation_topk" and len(r.rank(_task("A"))) == 2
    assert r.state_dict()["pool_hash"] == frozen.content_hash
    with pytest.raises(TypeError, match="SiblingPool"):
        harness_s.make_router(cfg, [1, 2])
