"""AppWorld without its runtime: the code-cell protocol and its Qwen3.5 rendering, the H0
preset, the registry glue and the seal, real-bundle loading, metrics, and the clear errors when
the installation, the service or the data is missing. (Runtime tests: test_appworld_runtime.py.)"""
import json

import pytest

from harness_jax.envs import Task, ToolCall, registry
from harness_jax.envs import appworld
from harness_jax.envs.appworld import data as awdata
from harness_jax.envs.appworld import protocol as proto
from harness_jax.sampling import chat


# -- protocol -------------------------------------------------------------------------------------
def test_extract_code_takes_the_first_python_block():
    reply = ("Let me look.\n```python\nprint(apis.api_docs.show_app_descriptions())\n```\n"
             "then\n```python\nx = 2\n```")
    assert proto.extract_code(reply) == "print(apis.api_docs.show_app_descriptions())"
    assert proto.extract_code("```py\nx = {'a': 1}\n```") == "x = {'a': 1}"
    assert proto.extract_code("```\nprint(1)\n```") == "print(1)"
    assert proto.extract_code("```json\n{}\n```\n```python\ny = 1\n```") == "y = 1"
    assert proto.extract_code("no code at all") is None
    assert proto.extract_code("```python\nprint(1)\n") is None  # cut before the closing fence


def test_code_cell_tool_call_round_trips_through_qwen_rendering():
    """A multi-line cell with quotes, braces and a nested fence survives Qwen3.5's XML tool-call
    rendering and parsing unchanged (function protocol)."""
    code = ("passwords = {a['account_name']: a[\"password\"] for a in "
            "apis.supervisor.show_account_passwords()}\n"
            "for i in range(3):\n    print(f'{i}: <ok> & done')\n"
            "s = '''```python\\nnot a fence```'''")
    msgs = [{"role": "system", "content": proto.FUNCTION_INSTRUCTION},
            {"role": "user", "content": proto.task_prompt("Do it.", {"first_name": "A"})},
            {"role": "assistant", "content": "Step one.",
             "tool_calls": [{"name": proto.TOOL_NAME, "arguments": {"code": code}}]}]
    text = chat.render_messages(msgs, tools=list(proto.TOOL_SPECS), add_generation_prompt=False)
    assert f"<function={proto.TOOL_NAME}>\n<parameter=code>\n{code}\n</parameter>" in text
    reply = text.split("<|im_start|>assistant\n")[-1].split("<|im_end|>")[0]
    _, calls, errs = chat.parse_tool_calls(reply, tools=list(proto.TOOL_SPECS))
    assert errs == [] and calls == [ToolCall(proto.TOOL_NAME, {"code": code})]


def test_h0_preset_mirrors_the_react_prompt():
    from harness_jax.harness.presets import base_harness
    from harness_jax.harness.specs import HarnessSpec
    h = base_harness("appworld", "text")
    obs = proto.task_prompt("How many songs are in my playlist {x}?",
                            {"first_name": "Ann", "last_name": "Lee", "email": "a@b.c",
                             "phone_number": "123"})
    first = h.task_template.format(observation=obs, env="appworld")
    assert first.startswith(proto.REACT_INSTRUCTION) and first.endswith(obs)
    for must in ("apis.api_docs.show_app_descriptions()", "show_api_descriptions(",
                 "show_api_doc(", "page_index", "apis.supervisor.complete_task(",
                 "show_account_passwords()"):
        assert must in first
    assert HarnessSpec.from_json(h.to_json()) == h
    f = base_harness("appworld", "function")
    assert proto.TOOL_NAME in f.system_prompt and "```python code block per step" not in \
        f.system_prompt


# -- registry, seal, data loading -----------------------------------------------------------------
def test_registered_and_the_test_split_is_sealed():
    assert "appworld" in registry.names()
    env = registry.make("appworld", protocol="function", max_interactions=5)
    assert isinstance(env, appworld.AppWorldEnv) and env.tool_specs()[0]["function"]["name"] \
        == proto.TOOL_NAME
    with pytest.raises(registry.SealedSplitError, match="sealed"):
        registry.load_split("appworld", "test", n=3)
    with pytest.raises(registry.SealedSplitError):
        appworld.generate_tasks(n=3, split="test")
    with pytest.raises(registry.SealedSplitError):
        appworld.make_task({"task_id": "abcdef1_1", "data_dir": "/x"}, split="test")
    for bad in (dict(protocol="xml"), dict(max_interactions=0), dict(timeout_seconds=0)):
        with pytest.raises(ValueError):
            appworld.AppWorldEnv(**bad)


def _fake_bundle(root):
    """A minimal tree in AppWorld's release layout (files only: loader tests, no runtime)."""
    d = root / "data"
    for sub in ("base_dbs", "api_docs", "datasets"):
        (d / sub).mkdir(parents=True)
    sets = {"train": [f"{s:07x}_{k}" for s in range(1, 11) for k in (1, 2, 3)],
            "dev": ["aaaaaaa_1", "aaaaaaa_2"], "test_normal": ["bbbbbbb_1"]}
    for name, ids in sets.items():
        (d / "datasets" / f"{name}.txt").write_text("\n".join(ids) + "\n")
        for i, tid in enumerate(ids):
            (d / "tasks" / tid / "ground_truth").mkdir(parents=True)
            (d / "tasks" / tid / "specs.json").write_text(json.dumps(
                {"instruction": f"task {tid}", "supervisor": {}, "datetime": "2023-05-18T12:00:00",
                 "db_version": "0.1.0"}))
            (d / "tasks" / tid / "ground_truth" / "metadata.json").write_text(
                json.dumps({"difficulty": 1 + i % 3}))
    return d


def test_real_bundle_splits_keep_scenarios_together(tmp_path):
    d = _fake_bundle(tmp_path)
    train = registry.load_split("appworld", "train", data_dir=str(d))
    search = registry.load_split("appworld", "search", data_dir=str(d))
    sel = registry.load_split("appworld", "selection", data_dir=str(d))
    assert len(train) + len(search) == 30 and len(sel) == 2
    scen = lambda ts: {t.data["scenario_id"] for t in ts}  # noqa: E731
    assert not scen(train) & scen(search)
    assert all(t.split == "train" for t in train) and all(t.split == "search" for t in search)
    assert {t.data["difficulty"] for t in train + search} == {1, 2, 3}
    with pytest.raises(registry.SealedSplitError):
        registry.load_split("appworld", "test", data_dir=str(d))
    with pytest.raises(registry.SealedSplitError):
        appworld.load_tasks(str(d), dataset="test_normal")
    with registry.sealed_test_access("unit test of the bundle loader"):
        test = registry.load_split("appworld", "test", data_dir=str(d))
    assert [t.data["task_id"] for t in test] == ["bbbbbbb_1"] and test[0].split == "test"
    assert len(appworld.load_tasks(str(d), dataset="train", difficulty=2)) == 10
    with pytest.raises(ValueError, match="no scripted solution"):
        appworld.oracle_cells(train[0])


def test_missing_data_tree_and_dataset_errors_name_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="base_dbs.*appworld download data"):
        appworld.load_tasks(str(tmp_path), dataset="train")
    d = _fake_bundle(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"datasets here: \['dev', 'test_normal', 'train'\]"):
        appworld.load_tasks(str(d), dataset="validation")
    with pytest.raises(ValueError, match="task_id"):
        appworld.make_task({"data_dir": str(d)})


def test_missing_installation_or_service_gives_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_JAX_APPWORLD_HOME", str(tmp_path / "nowhere"))
    monkeypatch.delenv("HARNESS_JAX_APPWORLD_SOCKET", raising=False)
    monkeypatch.delenv("HARNESS_JAX_APPWORLD_DATA", raising=False)
    with pytest.raises(appworld.AppWorldUnavailable, match="bash scripts/appworld.sh install"):
        appworld.generate_tasks(n=3)
    d = _fake_bundle(tmp_path)
    task = appworld.load_tasks(str(d), dataset="dev")[0]
    env = appworld.AppWorldEnv()
    with pytest.raises(appworld.AppWorldUnavailable,
                       match="not running.*not installed.*bash scripts/appworld.sh start"):
        env.reset(task)
    monkeypatch.setenv("HARNESS_JAX_APPWORLD_SOCKET", str(tmp_path / "no.sock"))
    with pytest.raises(appworld.AppWorldUnavailable, match="no.sock.*scripts/appworld.sh start"):
        appworld.AppWorldEnv().reset(task)
    assert appworld.service_available() is False


def test_tgc_sgc_and_pass_at_k_over_scenarios():
    tasks = [Task("appworld", {"task_id": f"{s}_{k}", "data_dir": "/d", "scenario_id": s})
             for s in ("aaaaaaa", "bbbbbbb") for k in (1, 2, 3)]
    ok = [True, True, True, True, False, True]
    m = appworld.tgc_sgc(zip(tasks, ok))
    assert (m["tgc"], m["sgc"], m["tasks"], m["scenarios"], m["runs"]) == \
        (pytest.approx(500 / 6), 50.0, 6, 2, 1)
    # three samples per task: TGC/SGC averaged over runs, Pass@k / Avg@k over samples
    runs = [ok, [True] * 6, [False] * 6]
    m3 = appworld.tgc_sgc([(t, r[i]) for r in runs for i, t in enumerate(tasks)])
    assert m3["runs"] == 3 and m3["tgc"] == pytest.approx((500 / 6 + 100 + 0) / 3)
    assert m3["sgc"] == pytest.approx((50 + 100 + 0) / 3)
    assert m3["pass_at"][3] == 1.0 and m3["avg_at"][3] == pytest.approx((5 + 6) / 18)
    assert m3["pass_at"][1] == pytest.approx(11 / 18)   # unbiased: c/n per task
    assert awdata.scenario_map(tasks)[tasks[0].task_id] == "aaaaaaa"
    with pytest.raises(ValueError, match="no results"):
        appworld.tgc_sgc([])


def test_gpu_preset_validates_and_builds_its_env():
    from experiments.configs import gpu8_qwen35_4b_appworld as preset
    from harness_jax.harness.presets import base_harness
    from harness_jax.train import spec
    c = preset.get_config()
    run = spec.resolve(c, num_devices=4)
    doc = preset.__doc__
    assert "launch/train.py" in doc and "experiments/configs/gpu8_qwen35_4b_appworld.py" in doc
    assert "Expected result" in doc and "Memory arithmetic" in doc
    from harness_jax.train import builders
    env = builders.env_factory(run.env)()
    assert env.protocol == "function" and env.max_interactions == c.env.max_turns
    assert base_harness(c.env.name, env.protocol).system_prompt == proto.FUNCTION_INSTRUCTION


# -- the service's file handling (venv_side/pool.py: standard library only, loadable here) -------
def _pool():
    import importlib.util
    import os
    import sys
    path = os.path.join(os.path.dirname(appworld.__file__), "venv_side", "pool.py")
    if "hj_appworld_pool" not in sys.modules:
        spec = importlib.util.spec_from_file_location("hj_appworld_pool", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["hj_appworld_pool"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["hj_appworld_pool"]


def test_end_state_copy_never_follows_what_the_agent_planted(tmp_path):
    """The end state is written by the agent's process: links (in the path or as files),
    FIFOs and oversized states are not copied into the evaluator's root."""
    import os
    pool = _pool()
    secret = tmp_path / "secret"
    secret.write_text("TOPSECRET")
    out = tmp_path / "outputs"
    dbs = out / "exp" / "tasks" / "t_1" / "dbs"
    dbs.mkdir(parents=True)
    (dbs / "venmo.jsonl").write_text('["INSERT", [], false]\n')
    (dbs / "admin.jsonl").symlink_to(secret)
    os.mkfifo(dbs / "spotify.jsonl")
    dst = tmp_path / "dst"
    dst.mkdir()
    n = pool.copy_untrusted(str(out), ["exp", "tasks", "t_1", "dbs"], str(dst), 1 << 20)
    assert sorted(os.listdir(dst)) == ["venmo.jsonl"] and n == len('["INSERT", [], false]\n')
    with pytest.raises(ValueError, match="larger than 10 bytes"):
        pool.copy_untrusted(str(out), ["exp", "tasks", "t_1", "dbs"], str(tmp_path), 10)
    (out / "exp" / "tasks" / "t_2").symlink_to(dbs.parent)      # a linked path component
    with pytest.raises(OSError):
        pool.copy_untrusted(str(out), ["exp", "tasks", "t_2", "dbs"], str(dst), 1 << 20)
    assert pool.tail_nofollow(str(dbs / "admin.jsonl")) == "(no log)"


def test_a_task_is_installed_alone_and_read_only(tmp_path):
    import os
    pool = _pool()
    data = tmp_path / "data"
    for tid in ("a_1", "a_2"):
        (data / "tasks" / tid / "dbs").mkdir(parents=True)
        (data / "tasks" / tid / "specs.json").write_text("{}")
        (data / "tasks" / tid / "dbs" / "venmo.jsonl").write_text("")
        (data / "tasks" / tid / "ground_truth").mkdir()
        (data / "tasks" / tid / "ground_truth" / "answer.json").write_text("42")
    private = data / "tasks" / "a_1" / "dbs" / "venmo.jsonl"
    private.chmod(0o600)                                   # not world-readable: copied 0444
    root = tmp_path / "root"
    pool.install_task(str(data), "a_1", str(root / "a_1"), ground_truth=False)
    assert sorted(os.listdir(root)) == ["a_1"]
    assert sorted(os.listdir(root / "a_1")) == ["dbs", "specs.json"]
    copied = root / "a_1" / "dbs" / "venmo.jsonl"
    assert oct(copied.stat().st_mode & 0o777) == "0o444" and copied.stat().st_ino != \
        private.stat().st_ino
    assert (root / "a_1" / "specs.json").stat().st_ino == \
        (data / "tasks" / "a_1" / "specs.json").stat().st_ino     # world-readable: linked
    pool.install_task(str(data), "a_2", str(root / "gt"), ground_truth=True)
    assert (root / "gt" / "ground_truth" / "answer.json").read_text() == "42"
    sig = pool.tree_signature(str(data))
    assert sig == pool.tree_signature(str(data))
    (data / "base_dbs").mkdir()
    (data / "base_dbs" / "venmo.db").write_text("x")
    assert pool.tree_signature(str(data)) != sig
