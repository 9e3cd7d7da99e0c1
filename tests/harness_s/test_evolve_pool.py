"""Evolution with a deterministic evaluator (a pure function of the sibling's edits), budgets,
infrastructure errors, and the frozen pool file (content address, read-only, tamper check,
report, legacy lists)."""
import json
import os

import pytest

from harness_jax import harness_s
from harness_jax.envs.base import Task
from harness_jax.harness.presets import base_harness
from harness_jax.harness.siblings import Sibling, save_pool
from harness_jax.harness.siblings import load_pool as load_sibling_list
from harness_jax.harness_s.coverage import joint_coverage

from .builders import ANSWER, SQL, traj

FMT = "Your response does not match the required format"
FIX = {"A": {"inspect_before_answer", "schema_preview"},
       "B": {"error_recovery_hint", "block_answer_after_error"},
       "C": {"worked_example"}}


def _tasks(split, n=2):
    return [Task("dbbench", {"q": f"{split}-{c}-{i}"}, split=split, category=c)
            for c in "ABCD" for i in range(n)]


def _edits(sib):
    return set((sib.name or "").split("+")[1:])


def world_rollout(sib, tasks, infra_for=()):
    """A pure function: which categories a sibling solves follows from its edits."""
    ops = _edits(sib)
    out = []
    for t in tasks:
        c = t.category
        if t.task_id in infra_for:
            out.append(traj(t.task_id, [], infra=True, category=c))
            continue
        ok = bool(ops & FIX[c]) if c in FIX else "worked_example" not in ops
        turns = {"A": [(ANSWER, "")], "B": [(SQL, "no such column: x"), (ANSWER, "")],
                 "C": [("prose", FMT), ("prose", FMT)],
                 "D": [(SQL, "[(1,)]"), (ANSWER, "")]}[c]
        out.append(traj(t.task_id, turns, success=ok, category=c))
        out.append(traj(t.task_id, turns, success=ok, category=c))
    return out


def _evolve(**kw):
    cfg = dict(env_name="dbbench", max_generations=2, parents_per_generation=2,
               children_per_direction=2, min_failures=2, policy_version="step-0")
    cfg.update(kw.pop("cfg", {}))
    return harness_s.evolve(Sibling(base_harness("dbbench", "text"), name="H0"),
                            train_tasks=_tasks("train"), val_tasks=_tasks("search"),
                            rollout=kw.pop("rollout", world_rollout),
                            editor=harness_s.make_editor("deterministic"),
                            config=harness_s.EvolutionConfig(**cfg), **kw)


def test_joint_coverage_beats_every_single_sibling():
    res = _evolve()
    pool = res.pool()
    solved = pool.solved()
    joint = joint_coverage(solved, pool.ids)
    assert len(joint) == 8 > max(len(s) for s in solved.values()) > len(solved[pool.ids[0]]) == 2
    g1, g2 = res.generations
    assert g1["parents"] == [pool.ids[0]] and g1["joint_coverage"] == 8
    assert g1["labels"][pool.ids[0]] == {"answered_without_inspecting": 4,
                                         "answered_after_error": 4, "unparsable_action": 4}
    # generation-2 parents are the greedy joint-coverage choice among unexpanded siblings
    cands = {e.sibling_id: e.solved() for e in pool.entries if e.generation == 1}
    assert g2["parents"] == harness_s.coverage_select(
        cands, 2, {e.sibling_id: e.cost for e in pool.entries})
    assert len(set(g2["parents"])) == 2 and pool.ids[0] not in g2["parents"]
    # the same edits reached in another order are the same sibling: rejected, not re-evaluated
    assert [r["errors"] for r in res.rejected] == [["duplicate of an existing sibling"]] * 2
    assert res.child_evaluations == len(res.entries) - 1
    assert res.stop_reason.startswith("reached max_generations")


def test_budget_stops_evolution_and_records_what_was_not_evaluated():
    res = _evolve(cfg={"max_child_evaluations": 2})
    assert res.child_evaluations == 2 and len(res.entries) == 3
    assert res.stop_reason == "evaluation budget spent (2 child evaluations)"
    assert any(r["errors"] == ["not evaluated: budget spent"] for r in res.rejected)
    assert len(res.generations) == 1


def test_infrastructure_errors_are_never_scored():
    val = _tasks("search")
    broken = {val[0].task_id}
    calls = []

    def rollout(sib, tasks):
        calls.append(sib.name)
        infra = broken if sib.name == "H0+schema_preview" and tasks[0].split == "search" else ()
        return world_rollout(sib, tasks, infra)

    res = _evolve(rollout=rollout, cfg={"max_generations": 1})
    rej = [r for r in res.rejected if r["editor"] == "deterministic:schema_preview"]
    assert rej and rej[0]["errors"][0].startswith("incomplete evaluation")
    assert "H0+schema_preview" not in [e.name for e in res.entries]
    with pytest.raises(RuntimeError, match="H0's validation run is incomplete"):
        _evolve(rollout=lambda s, t: world_rollout(s, t, {x.task_id for x in t}))


def test_useless_children_are_dropped():
    res = _evolve(cfg={"max_generations": 1, "min_val_solved": 3})
    names = [e.name for e in res.entries]
    assert "H0+format_reminder" not in names      # solves only the 2 D tasks H0 solves too
    assert any(r["editor"] == "deterministic:format_reminder" and "min_val_solved" in
               r["errors"][0] for r in res.rejected)


def test_frozen_pool_file(tmp_path):
    res = _evolve(cfg={"max_generations": 1})
    pool = res.freeze(str(tmp_path))
    name = os.path.basename(pool.path)
    assert name == f"pool-{pool.content_hash[:16]}.json"
    assert oct(os.stat(pool.path).st_mode & 0o777) == "0o444"
    again = res.freeze(str(tmp_path))             # same content: same file, untouched
    assert again.path == pool.path and sorted(os.listdir(tmp_path)) == [
        name, name[:-5] + ".md"]
    loaded = harness_s.load_pool(pool.path)
    assert loaded.ids == pool.ids and loaded.ids[0] == res.entries[0].sibling_id
    assert loaded[0].name == "H0" and len(loaded) == len(res.entries)
    e = loaded.entry(loaded.ids[1])
    assert e.generation == 1 and e.parent_id == loaded.ids[0] and e.direction
    assert e.editor.startswith("deterministic:") and e.policy_version == "step-0"
    assert set(e.validation) == set(loaded.val_task_ids)
    assert loaded.h0_failures and loaded.meta["generations"][0]["generation"] == 1
    assert loaded.resolve(e.name) == e.sibling_id
    assert loaded.profiles[e.sibling_id]["policy_version"] == "step-0"
    # a hand edit is detected
    data = json.load(open(pool.path))
    data["body"]["siblings"][1]["validation"][loaded.val_task_ids[0]] = [True, True]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="content hash mismatch"):
        harness_s.load_pool(str(edited))
    report = open(pool.path[:-5] + ".md").read()
    for part in ("## Siblings", "## Greedy joint coverage", "## Complementarity over H0 failures",
                 "## Changes relative to the parent", "rescues H0 failures", "only it solves"):
        assert part in report
    we = next(x for x in loaded.entries if x.name == "H0+worked_example")
    c_tasks = sorted(t for t in loaded.val_task_ids if loaded.task_info[t]["category"] == "C")
    assert len(c_tasks) == 2 and we.solved() == set(c_tasks)
    row = next(line for line in report.splitlines() if line.startswith("| ") and
               "| H0+worked_example |" in line)
    assert row.endswith(f"| {', '.join(c_tasks)} |")            # only it solves the C tasks


def test_load_pool_reads_plain_sibling_lists_with_h0_first(tmp_path):
    h0 = base_harness("dbbench", "text")
    a = Sibling(h0.child(name="a", system_prompt="A."), name="a")
    base = Sibling(h0, name="base")
    path = str(tmp_path / "list.json")
    save_pool([a, base], path)
    pool = harness_s.load_pool(path)
    assert pool.ids == [base.sibling_id, a.sibling_id] and pool.base.name == "base"
    assert [s.sibling_id for s in load_sibling_list(path)] == [a.sibling_id, base.sibling_id]
    (tmp_path / "bad.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a sibling pool"):
        harness_s.load_pool(str(tmp_path / "bad.json"))
    with pytest.raises(FileNotFoundError):
        harness_s.load_pool(str(tmp_path / "missing.json"))


def test_llm_diagnoser_and_auto_editor_open_a_novel_direction(chat_server, tmp_path):
    """Semantic failures the extractor cannot label: the diagnoser names them, no operator
    covers that label, so the auto editor asks the LLM (scripted server, a test double)."""
    from harness_jax.harness_s.llm import make_client

    def handler(body):
        system = body["messages"][0]["content"]
        if system.startswith("You diagnose"):
            return json.dumps({"root_cause": "misread_question", "explanation": "x"})
        return json.dumps({"rationale": "re-read", "overlay": {
            "schema_version": "harness-r1-patch-v1", "benchmark": "dbbench",
            "description": "re-read the question",
            "actions": [{"type": "add_or_edit_skill", "id": "reread",
                         "text": "Re-read the question before answering."}]}})
    chat_server.handler = handler
    client = make_client(chat_server.url, "m", cache_dir=str(tmp_path / "c"))

    def rollout(sib, tasks):
        ok = sib.patch is not None and any(a.get("id") == "reread" for a in sib.patch.actions)
        return [traj(t.task_id, [(SQL, "[(1,)]"), (ANSWER, "")], success=ok or t.category == "D",
                     category=t.category) for t in tasks]

    res = harness_s.evolve(Sibling(base_harness("dbbench", "text"), name="H0"),
                           train_tasks=_tasks("train"), val_tasks=_tasks("search"),
                           rollout=rollout, editor=harness_s.make_editor("auto", client=client),
                           config=harness_s.EvolutionConfig(env_name="dbbench", max_generations=1,
                                                            children_per_direction=1),
                           diagnoser=harness_s.LLMDiagnoser(client))
    assert res.generations[0]["directions"] == ["misread_question"]
    assert [e.editor for e in res.entries] == ["base", "llm:m"]
    assert res.entries[1].direction == "misread_question" and len(res.entries[1].solved()) == 8


def test_evolution_runs_sealed_from_the_test_split():
    """Evolution refuses test-split inputs, and runs inside ``training_scope``: a rollout (or
    any callback) that tries to open the test split, even through ``sealed_test_access``, fails."""
    from harness_jax.envs import registry

    with registry.sealed_test_access("building a wrong evolution input"):
        test_tasks = _tasks("test", n=1)
    with pytest.raises(registry.SealedSplitError, match="harness_s.evolve"):
        harness_s.evolve(Sibling(base_harness("dbbench", "text"), name="H0"), train_tasks=_tasks("train"),
                         val_tasks=test_tasks, rollout=world_rollout,
                         editor=harness_s.make_editor("deterministic"),
                         config=harness_s.EvolutionConfig(env_name="dbbench", max_generations=1))

    def peeking_rollout(sib, tasks):
        with registry.sealed_test_access("a rollout peeking at test data"):
            registry.load_split("dbbench", "test", n=1)
        return world_rollout(sib, tasks)

    with pytest.raises(registry.SealedSplitError, match="training_scope"):
        _evolve(rollout=peeking_rollout, cfg={"max_generations": 1})
