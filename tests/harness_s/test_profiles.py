"""Behaviour profiles: the deterministic summariser over paired episode diffs and the LLM
profiler (scripted OpenAI-compatible server over real HTTP, a test double)."""
import json

from harness_jax import harness_s
from harness_jax.harness_s.llm import make_client
from harness_jax.harness_s.profiles import EpisodeSummary, PairedResult

from .builders import ANSWER, SQL, traj


def _pairs():
    """The sibling inspects before answering: it wins the 'count' tasks H0 answered blindly and
    loses the 'edit' tasks (it runs out of turns)."""
    out = []
    for i in range(4):
        h0 = [traj(f"c{i}", [(ANSWER, "")], category="count")] * 2
        sib = [traj(f"c{i}", [(SQL, "[(1,)]"), (SQL.replace("*", "x"), "[(2,)]"), (ANSWER, "")],
                    success=True, category="count")] * 2
        out.append((h0, sib))
    for i in range(3):
        h0 = [traj(f"e{i}", [(SQL, "[]"), (ANSWER, "")], success=True, category="edit")]
        sib = [traj(f"e{i}", [(SQL, "[(1,)]"), (SQL.replace("*", "y"), "[(1,)]"),
                               (SQL.replace("*", "z"), "[(1,)]")], status="max_turns",
                    category="edit")]
        out.append((h0, sib))
    out.append(([traj("n0", [(SQL, "[(1,)]"), (ANSWER, "")], success=True, category="edit")],
                [traj("n0", [], infra=True, category="edit")]))       # no usable sibling attempt
    base = [t for h, _ in out for t in h]
    sib = [t for _, s in out for t in s]
    return harness_s.pair_trajectories(base, sib, excerpt_chars=400)


def test_offline_profile_from_paired_diffs():
    pairs = _pairs()
    assert len(pairs) == 8 and pairs[-1].sibling_rate is None
    prof = harness_s.summarise_offline("s1", pairs, "step-3")
    assert prof.helps_when == [
        "H0 failure=answered_without_inspecting: better on 4 of 4 paired tasks (worse on 0)",
        "category=count: better on 4 of 4 paired tasks (worse on 0)"]
    assert prof.hurts_when == ["category=edit: worse on 3 of 3 paired tasks (better on 0)"]
    diffs = " | ".join(prof.behaviour_difference)
    assert "more turns per episode" in diffs and "fewer answers on the first turn" in diffs
    assert "more successful inspections" in diffs
    assert prof.evidence[0] == ("7 paired validation tasks at policy step-3: better on 4, worse "
                                "on 3, same on 0")
    assert prof.stats["pairs"] == 7 and prof.source == "offline"
    # serialisable, and a round trip of the pairs gives the same profile
    again = [PairedResult.from_dict(json.loads(json.dumps(p.to_dict()))) for p in pairs]
    assert harness_s.summarise_offline("s1", again, "step-3").to_dict() == prof.to_dict()


def test_profiles_need_support():
    es = EpisodeSummary
    one = [PairedResult("t", "count", [es(False, cause="x")], [es(True)])]
    prof = harness_s.summarise_offline("s", one)
    assert prof.helps_when == [] and prof.hurts_when == []          # 1 task is not a pattern


def test_llm_profiler_writes_the_four_fields_or_falls_back(chat_server, tmp_path):
    good = {"helps_when": ["tasks where H0 answers without looking at the table"],
            "hurts_when": ["edit tasks: it keeps inspecting and never commits"],
            "behaviour_difference": ["runs 2-3 queries before answering"],
            "evidence": ["better on 4/7 paired tasks, worse on 3/7"]}
    script = iter([json.dumps(good),
                   json.dumps(dict(good, evidence=[])), json.dumps(dict(good, evidence=[]))])
    chat_server.handler = lambda body: next(script)
    p = harness_s.LLMProfiler(make_client(chat_server.url, "profiler-m",
                                          cache_dir=str(tmp_path / "c")))
    prof = p.summarise("s1", _pairs(), "step-3", description="H0+inspect")
    assert prof.source == "llm:profiler-m" and prof.helps_when == good["helps_when"]
    assert prof.policy_version == "step-3" and prof.stats["pairs"] == 7
    prompt = [m for m in chat_server.requests[0]["messages"] if m["role"] == "user"][0]["content"]
    assert "H0+inspect" in prompt and "### H0" in prompt and "ASSISTANT" in prompt
    p.seed = 1
    fallback = p.summarise("s1", _pairs(), "step-3")
    assert fallback.source == "offline" and p.log[-1]["attempts"] == 2
    assert "evidence" in p.log[-1]["errors"][0]
