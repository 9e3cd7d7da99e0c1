"""SWE-Gym-style environment: generation, grading, sandbox containment, tools, loader, CLI,
H0 preset and Qwen3.5 tool-call rendering. Sandbox tests need bubblewrap (installed by
``scripts/swe_sandbox.sh``, which .ci/run calls); under CI=true they fail instead of skipping."""
import difflib
import json
import os
import time

import pytest

from harness_jax.envs import registry, swe
from harness_jax.envs.base import ToolCall
from harness_jax.envs.swe import generate, grading, mutate, repo, sandbox, statement, tools


def _need_sandbox():
    ok, why = sandbox.bwrap_status()
    if not ok:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"SWE sandbox unavailable under CI: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def instances(tmp_path_factory):
    """Three generated train instances (fresh cache: generation really runs pytest)."""
    os.environ[generate.CACHE_ENV] = str(tmp_path_factory.mktemp("swe_cache"))
    try:
        return swe.generate_instances(3, seed=11)
    finally:
        os.environ.pop(generate.CACHE_ENV, None)


# ------------------------------------------------------------------------------------------
# mutation
# ------------------------------------------------------------------------------------------
SRC = '''def f(xs, n=2, flag=True):
    """doc"""
    if not xs:
        return 0
    total = 0
    for i in range(1, len(xs)):
        if xs[i] > xs[i - 1] and flag:
            total += xs[i] * n
        else:
            total -= 1
    return max(total, n)
'''


def test_every_mutation_kind_is_a_small_valid_edit():
    sites = mutate.enumerate_sites("m.py", SRC)
    assert {s.kind for s in sites} == set(mutate.KINDS)
    for s in sites:
        new = mutate.apply_site(SRC, s)
        compile(new, "m.py", "exec")
        diff = difflib.unified_diff(SRC.splitlines(), new.splitlines(), lineterm="")
        changed = [l for l in diff if l[:1] in "+-" and not l.startswith(("+++", "---"))]
        assert new != SRC and (len(changed) <= 4 or s.kind in ("revert_body", "remove_branch")), s
        assert s.function == "f"
    by_kind = {}
    for s in sites:
        by_kind.setdefault(s.kind, []).append(mutate.apply_site(SRC, s))
    assert any("xs[i] >= xs[i - 1]" in t for t in by_kind["flip_comparison"])
    assert any("raise NotImplementedError" in t and '"""doc"""' in t for t in by_kind["revert_body"])
    assert any("max(n, total)" in t for t in by_kind["swap_arguments"])
    assert any("if not xs:" not in t for t in by_kind["remove_early_return"])
    assert any("n=3" in t for t in by_kind["wrong_default"])
    with pytest.raises(mutate.MutationError):
        mutate.apply_site(SRC, mutate.Site("m.py", "g", "flip_comparison", 0, 1))


@pytest.mark.parametrize("stride", [pytest.param(13, id="sample"),
                                    pytest.param(1, id="all", marks=pytest.mark.slow)])
def test_corpus_sites_apply(stride):
    projects = repo.list_projects()
    assert len(projects) >= 10
    n = 0
    for p in projects:
        files = repo.project_files(p)
        assert sum(t.count("\n") for k, t in files.items() if k.endswith(".py")) >= 300, p
        sites = list(mutate.iter_project_sites(files))
        assert len(sites) > 100, p
        for site in sites[::13]:
            mutate.apply_site(files[site.path], site)
        if stride == 1:
            for path in {s.path for s in sites}:
                for site, new in mutate.all_mutants(path, files[path]):
                    assert new is not None, site
                    compile(new, path, "exec")
                    n += 1
    assert stride != 1 or n > 2000


# ------------------------------------------------------------------------------------------
# instances
# ------------------------------------------------------------------------------------------
def test_instances_follow_the_schema_and_hide_their_tests(instances):
    assert len(instances) == 3
    for inst in instances:
        for field in ("instance_id", "repo", "base_commit", "patch", "test_patch",
                      "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS", "version",
                      "environment_setup_commit", "hints_text", "created_at"):
            assert field in inst, field
        assert inst["FAIL_TO_PASS"] and inst["PASS_TO_PASS"]
        assert not set(inst["FAIL_TO_PASS"]) & set(inst["PASS_TO_PASS"])
        assert inst["split"] == "train" and len(inst["base_commit"]) == 40
        assert not statement.leaks_patch(inst["problem_statement"], inst["patch"])
        assert "```python" in inst["problem_statement"]
        files = grading.corpus_files(inst)
        # the hidden FAIL_TO_PASS tests come back with test_patch, never with the fix
        for nodeid in inst["FAIL_TO_PASS"]:
            name = statement.split_nodeid(nodeid)["function"]
            assert f"+def {name}(" in inst["test_patch"]
        assert all(not mutate.is_test_path(p) for p in repo.patch_paths(inst["patch"]))
        assert set(repo.patch_paths(inst["test_patch"])) <= {p for p in files
                                                             if mutate.is_test_path(p)}


def test_generation_is_deterministic_and_cached(instances, tmp_path, monkeypatch):
    monkeypatch.setenv(generate.CACHE_ENV, str(tmp_path))
    assert swe.generate_instances(1, seed=11, use_cache=False) == instances[:1]
    assert swe.generate_instances(1, seed=11) == instances[:1]       # fills the cache
    assert any(tmp_path.rglob("*.json"))
    assert swe.generate_instances(1, seed=11) == instances[:1]       # read from the cache
    other = generate.candidate_order(12, "train")[:5]
    assert other != generate.candidate_order(11, "train")[:5]


def test_splits_are_disjoint_by_function_and_test_is_sealed():
    owners = {}
    for split in ("train", "search", "selection", "test"):
        order = generate.candidate_order(0, split)
        assert order
        for project, site in order:
            key = (project, site.path, site.function)
            assert owners.setdefault(key, split) == split
    with pytest.raises(registry.SealedSplitError):
        swe.generate_instances(1, seed=0, split="test")
    with pytest.raises(registry.SealedSplitError):
        registry.load_split("swe", "test", n=1)
    with pytest.raises(ValueError, match="split"):
        swe.generate_instances(1, split="validation")


# ------------------------------------------------------------------------------------------
# grading
# ------------------------------------------------------------------------------------------
def _breaking_patch(inst):
    """The reference fix plus a second bug in another function that some PASS_TO_PASS test
    catches (found by trying sites until grading shows it)."""
    files = grading.corpus_files(inst)
    m = inst["mutation"]
    for site in mutate.iter_project_sites(files):
        if site.kind != "revert_body" or site.function == m["function"]:
            continue
        broken = dict(files)
        broken[site.path] = mutate.apply_site(files[site.path], site)
        buggy = dict(files)
        buggy[m["path"]] = mutate.apply_site(files[m["path"]], mutate.Site(**m))
        yield repo.unified_patch({k: buggy[k] for k in (m["path"], site.path)},
                                 {k: broken[k] for k in (m["path"], site.path)})


def test_reference_resolves_unpatched_fails_and_pass_to_pass_guards(instances):
    _need_sandbox()
    for inst in instances:
        assert swe.grade(inst, inst["patch"]) is True
        rep = swe.grade_report(inst, "")
        assert rep["resolved"] is False and rep["empty_patch"]
        assert all(s != "PASSED" for s in rep["FAIL_TO_PASS"].values())
        assert all(s == "PASSED" for s in rep["PASS_TO_PASS"].values())
    inst = instances[0]
    for patch in _breaking_patch(inst):
        rep = swe.grade_report(inst, patch)
        if any(s != "PASSED" for s in rep["PASS_TO_PASS"].values()):
            assert rep["patch_applied"] and rep["resolved"] is False
            assert all(s == "PASSED" for s in rep["FAIL_TO_PASS"].values())
            break
    else:
        pytest.fail("no breaking patch found")
    # editing the tests cannot make a patch pass: test files are dropped before applying
    hidden = repo.patch_paths(inst["test_patch"])[0]
    cheat = repo.unified_patch({hidden: repo.project_files(inst["corpus"]["project"])[hidden]},
                               {hidden: "def test_nothing():\n    pass\n"})
    rep = swe.grade_report(inst, cheat)
    assert rep["dropped_paths"] == [hidden] and rep["resolved"] is False
    bad = swe.grade_report(inst, "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert bad["patch_applied"] is False and bad["resolved"] is False


# ------------------------------------------------------------------------------------------
# environment
# ------------------------------------------------------------------------------------------
def test_reference_episodes_both_protocols(instances, check_conformance):
    _need_sandbox()
    task = swe.make_task(instances[1])
    check_conformance(lambda: registry.make("swe", protocol="function"), task,
                      swe.reference_actions(instances[1], "function"))
    env = swe.SWEEnv(protocol="text")
    prompt = env.reset(task)
    assert instances[1]["problem_statement"].strip() in prompt and "/testbed" in prompt
    assert env.tool_specs() == []
    for a in swe.reference_actions(instances[1], "text"):
        res = env.step(a)
    assert res.done and res.reward == 1.0
    ev = env.evaluate()
    assert ev["resolved"] and "diff --git" in ev["patch"]
    env.close()


def test_malformed_calls_are_tool_errors_and_editor_commands(instances):
    _need_sandbox()
    env = swe.SWEEnv(max_steps=40)
    env.reset(swe.make_task(instances[2]))
    bad = ["plain text", ToolCall("nope", {}), ToolCall("bash", {}), ToolCall("bash", {"command": 3}),
           ToolCall("bash", {"command": "ls", "timeout": -1}),
           ToolCall("bash", {"command": "ls", "extra": 1}),
           ToolCall("str_replace_editor", {"command": "view", "path": "rel.py"}),
           ToolCall("str_replace_editor", {"command": "view", "path": "/etc/passwd"}),
           ToolCall("str_replace_editor", {"command": "view", "path": "/testbed/../etc/passwd"}),
           ToolCall("str_replace_editor", {"command": "explode", "path": "/testbed"}),
           ToolCall("str_replace_editor", {"command": "create", "path": "/testbed/x.py"}),
           ToolCall("str_replace_editor", {"command": "view", "path": "/testbed/missing.py"}),
           ToolCall("str_replace_editor", {"command": "view", "path": "/testbed/pyproject.toml",
                                           "view_range": [5, 1]})]
    for a in bad:
        r = env.step(a)
        assert r.info.get("tool_error") and r.observation.startswith("ERROR:") and not r.done, a
    ed = lambda **kw: env.step(ToolCall("str_replace_editor", kw))  # noqa: E731
    assert "created" in ed(command="create", path="/testbed/note.txt", file_text="a\nb\nb\n").observation
    assert "2 times" in ed(command="str_replace", path="/testbed/note.txt", old_str="b",
                           new_str="c").observation
    assert "edited" in ed(command="str_replace", path="/testbed/note.txt", old_str="a\n",
                          new_str="A\n").observation
    assert "edited" in ed(command="insert", path="/testbed/note.txt", insert_line=0,
                          new_str="top").observation
    view = ed(command="view", path="/testbed/note.txt", view_range=[1, 2]).observation
    assert "     1\ttop" in view and "     2\tA" in view and "b" not in view.split("\n", 1)[1]
    assert "undone" in ed(command="undo_edit", path="/testbed/note.txt").observation
    assert "undone" in ed(command="undo_edit", path="/testbed/note.txt").observation
    out = env.step(ToolCall("bash", {"command": "cat note.txt; stat -c %u note.txt; id -u"}))
    lines = out.observation.splitlines()
    assert lines[:3] == ["a", "b", "b"] and lines[3] == lines[4]   # written as the episode's uid
    # a symlink planted with bash is never followed by the editor
    env.step(ToolCall("bash", {"command": "ln -s /etc/hostname /testbed/evil"}))
    assert "symbolic" in ed(command="view", path="/testbed/evil").observation
    assert env.evaluate()["success"] is False
    env.close()


def test_sandbox_contains_network_writes_forks_and_loops(tmp_path):
    _need_sandbox()
    secret = tmp_path / "host_secret.txt"
    secret.write_text("TOPSECRET")
    ws = sandbox.Workspace(sandbox.SandboxLimits(timeout_s=4, nproc=32, disk_mb=8,
                                                 max_output_bytes=4000))
    ws.hand_over()
    try:
        r = ws.run("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), "
                   "timeout=2)\" 2>&1 | tail -1")
        assert "unreachable" in r.output.lower() or "errno" in r.output.lower()
        r = ws.run(f"cat {secret}; ls /work /home; ls /root/.ssh; echo x > /etc/hj_x; "
                   "echo x > /usr/hj_x; id -u")
        assert "TOPSECRET" not in r.output and "Read-only" in r.output
        assert int(r.output.strip().splitlines()[-1]) == ws.uid != 0
        assert not os.path.exists("/etc/hj_x") and not os.path.exists("/usr/hj_x")
        t = time.perf_counter()
        r = ws.run(":(){ :|:& };:")                            # fork bomb
        assert r.timed_out or r.exit_code is not None
        assert time.perf_counter() - t < 30
        r = ws.run("while true; do :; done")                   # infinite loop
        assert r.timed_out and r.exit_code is None
        r = ws.run("sleep 300 & echo started")                 # leftovers die with the command
        assert "started" in r.output and not r.timed_out
        r = ws.run("ps -e -o comm= | grep -c sleep || true; echo alive")
        assert r.output.split()[0] == "0" and "alive" in r.output
        r = ws.run("yes | head -c 100000")                    # output cap
        assert r.truncated and len(r.output) < 5000
        r = ws.run("head -c 20000000 /dev/zero > /testbed/big.bin; ls -la /testbed/big.bin")
        assert r.disk_exceeded
    finally:
        ws.close()
    assert secret.read_text() == "TOPSECRET" and not os.path.exists(ws.root)


def test_episode_survives_hostile_commands(instances):
    _need_sandbox()
    env = swe.SWEEnv(limits=sandbox.SandboxLimits(timeout_s=3, nproc=32))
    env.reset(swe.make_task(instances[0]))
    r = env.step(ToolCall("bash", {"command": "while true; do :; done"}))
    assert not r.done and "killed" in r.observation
    r = env.step(ToolCall("bash", {"command": ":(){ :|:& };:", "timeout": 2}))
    assert not r.done
    r = env.step(ToolCall("bash", {"command": "cd tests && export HJ=1 && echo ok"}))
    r = env.step(ToolCall("bash", {"command": "pwd; echo $HJ"}))
    assert r.observation.splitlines()[:2] == ["/testbed/tests", "1"]
    for a in swe.reference_actions(instances[0]):
        res = env.step(a)
    assert res.done and res.reward == 1.0
    env.close()


# ------------------------------------------------------------------------------------------
# files, CLI, registry, presets
# ------------------------------------------------------------------------------------------
def test_loader_reads_real_instance_files_and_names_bad_fields(tmp_path):
    real = {"instance_id": "getmoto__moto-5752", "repo": "getmoto/moto", "base_commit": "a" * 40,
            "patch": "diff --git a/m.py b/m.py\n", "test_patch": "", "problem_statement": "x",
            "hints_text": "", "created_at": "2022-12-01", "version": "4.0",
            "FAIL_TO_PASS": json.dumps(["tests/test_a.py::test_b"]), "PASS_TO_PASS": "[]",
            "environment_setup_commit": "b" * 40}
    p = tmp_path / "gym.jsonl"
    p.write_text(json.dumps(real) + "\n")
    [inst] = swe.load_instances(str(p))
    assert inst["FAIL_TO_PASS"] == ["tests/test_a.py::test_b"] and inst["PASS_TO_PASS"] == []
    with pytest.raises(swe.InstanceError, match="getmoto__moto-5752.*corpus"):
        swe.grade(inst, "")
    broken = dict(real, FAIL_TO_PASS="not json")
    p.write_text(json.dumps(real) + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(swe.InstanceError, match=r"gym.jsonl:2 \(instance 'getmoto__moto-5752'\)"
                                                r"\.FAIL_TO_PASS"):
        swe.load_instances(str(p))
    p.write_text(json.dumps({k: v for k, v in real.items() if k != "base_commit"}) + "\n")
    with pytest.raises(swe.InstanceError, match="missing field 'base_commit'"):
        swe.load_instances(str(p))
    from harness_jax.envs.swe.docker_runtime import DockerRuntime, image_name
    assert image_name("getmoto__moto-5752").endswith("sweb.eval.x86_64.getmoto_s_moto-5752:latest")
    assert "none" in DockerRuntime(inst).start_command()


def test_cli_grades_a_predictions_file(instances, tmp_path, capsys):
    _need_sandbox()
    from harness_jax.envs.swe import cli
    inst_path = tmp_path / "inst.jsonl"
    swe.save_instances(instances[:2], str(inst_path))
    preds = [{"instance_id": instances[0]["instance_id"], "model_name_or_path": "ref",
              "model_patch": instances[0]["patch"]},
             {"instance_id": instances[1]["instance_id"], "model_name_or_path": "ref",
              "model_patch": ""}]
    pred_path = tmp_path / "preds.jsonl"
    pred_path.write_text("".join(json.dumps(p) + "\n" for p in preds))
    assert cli.main(["grade", "--instances", str(inst_path), "--predictions", str(pred_path),
                     "--report", str(tmp_path / "r.json")]) == 0
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["resolved_ids"] == [instances[0]["instance_id"]]
    assert rep["empty_patch_ids"] == [instances[1]["instance_id"]] and rep["resolve_rate"] == 0.5
    assert "resolved 1/2" in capsys.readouterr().out


def test_registry_h0_preset_and_qwen_tool_call_rendering():
    from harness_jax.sampling import chat
    from harness_jax.harness.presets import base_harness
    assert "swe" in registry.names()
    h0 = base_harness("swe", "function")
    assert "str_replace_editor" in h0.system_prompt and h0.rules.max_turns == 50
    assert "```bash" in base_harness("swe", "text").system_prompt
    specs = swe.SWEEnv().tool_specs()
    call = ToolCall("str_replace_editor", {"command": "view", "path": "/testbed/a.py",
                                           "view_range": [3, 9]})
    text = chat.render_messages(
        [{"role": "system", "content": h0.system_prompt}, {"role": "user", "content": "fix it"},
         {"role": "assistant", "content": "", "tool_calls": [call]},
         {"role": "tool", "content": "ok"}], tools=specs)
    assert "<function=str_replace_editor>" in text and "<parameter=view_range>\n[3, 9]" in text
    assert '"name": "submit"' in text
    reply = ("Let me look.\n" + chat.render_tool_call("str_replace_editor", call.arguments) +
             "\n" + chat.render_tool_call("bash", {"command": "python3 -m pytest -q",
                                                   "timeout": 30}))
    _, calls, errs = chat.parse_tool_calls(reply, tools=specs)
    assert not errs and calls == [call, ToolCall("bash", {"command": "python3 -m pytest -q",
                                                           "timeout": 30})]
    _, calls, errs = chat.parse_tool_calls(chat.render_tool_call("bash", {}), tools=specs)
    assert not calls and "command" in errs[0]
