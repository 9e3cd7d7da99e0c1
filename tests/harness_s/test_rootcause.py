"""Root causes: the deterministic extractor, the LLM diagnoser (scripted OpenAI-compatible server
over real HTTP, a test double) and the grouping into repair directions."""
import json

import pytest

from harness_jax import harness_s
from harness_jax.harness_s.llm import make_client
from harness_jax.harness_s.rootcause import error_class, is_answer_action

from .builders import ANSWER, SQL, traj

FMT = "Your response does not match the required format: write `Action: Operation` ..."


@pytest.mark.parametrize("turns,kw,label", [
    ([("hello", FMT), ("still prose", FMT), (ANSWER, "")], {}, "unparsable_action"),
    ([(None, "could not be parsed", ["no tool call"])] * 2, {"status": "max_turns"},
     "unparsable_action"),
    ([(SQL, "[(1,)]"), (SQL, "[(1,)]"), (SQL, "[(1,)]")], {"status": "max_turns"},
     "repeated_action"),
    ([(SQL, "[(1,)]")], {"status": "context_full"}, "context_full"),
    ([(SQL, "[(1,)]"), (SQL.replace("*", "a"), "[(2,)]")], {"status": "max_turns"},
     "turn_limit"),
    ([(SQL, "[(1,)]"), (SQL.replace("*", "b"), "[(2,)]")],
     {"status": "completed", "evaluation": {"status": "limit_reached"}}, "turn_limit"),
    ([(SQL, "no such column: x"), (ANSWER, "")], {}, "answered_after_error"),
    ([(SQL, "near \"SELEC\": syntax error")], {"status": "stopped"}, "tool_error:syntax_error"),
    ([(SQL, "no such table: t"), (SQL.replace("*", "c"), "no such table: t")],
     {"status": "stopped"}, "tool_error:unknown_table"),
    ([(ANSWER, "")], {}, "answered_without_inspecting"),
    ([(SQL, "[]"), (ANSWER, "")], {}, "empty_result"),
    ([(SQL, "[(1,)]")], {"status": "stopped"}, "no_answer"),
    ([(SQL, "[(1,)]"), (ANSWER, "")], {}, "wrong_answer"),
    ([({"name": "execute_sql", "arguments": {"query": "x"}}, "[(5,)]"),
      ({"name": "commit_final_answer", "arguments": {"answers": ["4"]}}, "")], {},
     "wrong_answer"),
    ([({"name": "execute_sql", "arguments": {}}, "execute_sql needs the argument `query`"),
      ({"name": "commit_final_answer", "arguments": {"answers": []}}, "")], {},
     "answered_after_error"),
])
def test_extractor_labels(turns, kw, label):
    c = harness_s.extract_root_cause(traj("t1", turns, category="counting", **kw))
    assert c is not None and c.label == label
    assert c.certain == (label != "wrong_answer") and c.source == "extractor"
    assert c.category == "counting" and c.signals["turns"] == len(turns)


def test_successes_and_infra_failures_get_no_label():
    assert harness_s.extract_root_cause(traj("t", [(ANSWER, "")], success=True)) is None
    assert harness_s.extract_root_cause(traj("t", [(SQL, "boom")], infra=True)) is None
    causes, report = harness_s.label_failures([
        traj("a", [(ANSWER, "")]), traj("b", [(ANSWER, "")], success=True),
        traj("c", [], infra=True)])
    assert [c.task_id for c in causes] == ["a"]
    assert report["infra_excluded"] == 1 and report["successes"] == 1
    assert report["labels"] == {"answered_without_inspecting": 1}


def test_error_classes_and_answer_actions():
    assert error_class("Unknown column 'x' in 'field list'") == "unknown_column"
    assert error_class("Table 'main.t' doesn't exist") == "unknown_table"
    assert error_class("Query execution was interrupted (max_statement_time exceeded)") == "timeout"
    assert error_class("[(1, 'error budget')]") is None      # rows may contain the word
    assert error_class("[(1,)]") is None and error_class(FMT) is None
    assert is_answer_action({"name": "submit", "arguments": {}})
    assert is_answer_action("ANSWER: 42") and not is_answer_action(SQL)


def test_repair_directions_need_min_failures():
    causes = [harness_s.extract_root_cause(t) for t in (
        traj("a", [(ANSWER, "")]), traj("b", [(ANSWER, "")]), traj("b", [(ANSWER, "")]),
        traj("c", [(SQL, "no such column: q"), (ANSWER, "")]))]
    dirs = harness_s.repair_directions(causes, min_failures=2)
    assert [(d.name, d.count, d.task_ids) for d in dirs] == [
        ("answered_without_inspecting", 3, ["a", "b"])]
    assert len(harness_s.repair_directions(causes, min_failures=1)) == 2
    assert harness_s.repair_directions(causes, 1, max_directions=1)[0].count == 3
    with pytest.raises(ValueError, match="min_failures"):
        harness_s.repair_directions(causes, 0)


def _diag_client(chat_server, tmp_path):
    return make_client(chat_server.url, "judge", cache_dir=str(tmp_path / "cache"))


def test_llm_diagnoser_relabels_uncertain_failures_and_is_cached(chat_server, tmp_path):
    chat_server.handler = lambda body: json.dumps({
        "root_cause": "misread_question", "explanation": "answered a different question",
        "evidence": "asked for the count, gave a name"})
    d = harness_s.LLMDiagnoser(_diag_client(chat_server, tmp_path))
    trajs = [traj("a", [(SQL, "[(1,)]"), (ANSWER, "")]), traj("b", [(ANSWER, "")])]
    causes, report = harness_s.label_failures(trajs, d)
    assert [c.label for c in causes] == ["misread_question", "answered_without_inspecting"]
    assert causes[0].source == "llm:judge" and causes[0].certain
    assert report["diagnosed"] == 1 and len(chat_server.requests) == 1   # certain ones: no call
    prompt = chat_server.requests[0]["messages"][1]["content"]
    assert "tentative label: wrong_answer" in prompt and "ASSISTANT" in prompt
    d2 = harness_s.LLMDiagnoser(_diag_client(chat_server, tmp_path))
    harness_s.label_failures(trajs, d2)
    assert len(chat_server.requests) == 1 and d2.log[0]["cached"]    # a rerun costs nothing


def test_llm_diagnoser_repairs_once_then_keeps_the_extractor_label(chat_server, tmp_path):
    replies = iter(["not json at all", json.dumps({"root_cause": "Bad Label!",
                                                   "explanation": "x"}),
                    json.dumps({"root_cause": "Bad Label!", "explanation": "x"}),
                    json.dumps({"root_cause": "wrong_filter_value", "explanation": "x"})])
    chat_server.handler = lambda body: next(replies)
    d = harness_s.LLMDiagnoser(_diag_client(chat_server, tmp_path))
    t = traj("a", [(SQL, "[(1,)]"), (ANSWER, "")])
    c = harness_s.extract_root_cause(t)
    kept = d.diagnose(t, c)                       # "not json" -> repair -> bad label: rejected
    assert kept.label == "wrong_answer" and kept.source == "extractor"
    assert d.log[-1]["attempts"] == 2 and not d.log[-1]["ok"]
    assert "snake_case" in d.log[-1]["errors"][0]
    d.seed = 1                                     # a fresh request: bad label -> repaired
    fixed = d.diagnose(t, c)
    assert fixed.label == "wrong_filter_value" and d.log[-1]["repaired"]
    repair_msg = chat_server.requests[-1]["messages"][-1]["content"]
    assert repair_msg.startswith("Your reply was not accepted") and "snake_case" in repair_msg
