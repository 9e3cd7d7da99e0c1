"""The cpu_learnable preset: it validates, its minimal H0 loads, and its task tokenizer (the
"isolate" pre-tokenizer) gives a value the same tokens in the question, in SQL and in a result
row, and decodes every text back exactly."""
import os

import pytest

from harness_jax.config_problems import ConfigValidationError
from harness_jax.harness.specs import HarnessSpec
from harness_jax.train import builders, spec, task_tokenizer
from experiments.configs import cpu_learnable


def _run(cfg):
    return spec.resolve(cfg, num_devices=1)


def test_preset_validates_and_documents_itself():
    cfg = cpu_learnable.get_config()
    run = _run(cfg)
    doc = cpu_learnable.__doc__
    assert "launch/train.py" in doc and "experiments/configs/cpu_learnable.py" in doc
    assert "Expected result" in doc
    h0 = HarnessSpec.load(cfg.harness.spec)   # the minimal H0: the question is the whole prompt
    assert h0.preamble == () and h0.system_prompt == "" and h0.task_template == "{observation}"
    tasks = builders.load_tasks(run.env, "selection", n=8)
    assert {t.data["table"]["table_name"] for t in tasks} == {"players"}
    assert {t.data["add_description"] for t in tasks} == {""}
    assert {t.category for t in tasks} <= set(cpu_learnable.CATEGORIES)


def test_bad_family_options_are_reported_with_their_path():
    cfg = cpu_learnable.get_config()
    cfg.env.dbbench.domain = "dragon"
    with pytest.raises(ConfigValidationError) as ei:
        _run(cfg)
    assert "env.dbbench.domain" in str(ei.value) and "player" in str(ei.value)


def test_bad_pretokenizer_is_reported_with_its_path():
    cfg = cpu_learnable.get_config()
    cfg.model.tokenizer_pretokenizer = "words"
    with pytest.raises(ConfigValidationError) as ei:
        _run(cfg)
    assert "model.tokenizer_pretokenizer" in str(ei.value) and "isolate" in str(ei.value)


def test_isolate_tokenizer_copies_values_token_for_token(tmp_path):
    cfg = cpu_learnable.get_config()
    tok = task_tokenizer.load_or_train(_run(cfg), str(tmp_path / "tokenizer"))
    assert os.path.exists(tmp_path / "tokenizer" / "tokenizer.json")
    assert len(tok) <= cfg.model.arch.vocab_size
    task = builders.load_tasks(_run(cfg).env, "selection", n=1)[0]
    row = task.data["table"]["table_info"]["rows"][0]
    name, goals = row[0], row[4]

    def ids(s):
        return tok.encode(s, add_special_tokens=False)

    question = ids(f"What is the goals of the player {name}?")
    sql = ids(f"SELECT `Goals` FROM `players` WHERE `Player` = '{name}';")
    value = ids(name)
    assert any(question[i:i + len(value)] == value for i in range(len(question)))
    assert any(sql[i:i + len(value)] == value for i in range(len(sql)))
    result, answer = ids(f"[('{goals}',)]"), ids(f'Final Answer: ["{goals}"]')
    g = ids(goals)
    assert any(result[i:i + len(g)] == g for i in range(len(result)))
    assert any(answer[i:i + len(g)] == g for i in range(len(answer)))
    for text in ("Action: Operation\n```sql\nSELECT 1;\n```", "  two  spaces\tand ünïcode ✓",
                 task.data["description"]):
        assert tok.decode(ids(text)) == text
    # the default byte-level pre-tokenizer does not have this property (why "isolate" exists)
    cfg.model.tokenizer_pretokenizer = "bytelevel"
    bl = task_tokenizer.train(_run(cfg), str(tmp_path / "bl"), cfg.model.tokenizer_vocab)
    q = bl.encode(f"the player {name}?", add_special_tokens=False)
    v = bl.encode(f"'{name}'", add_special_tokens=False)[1:-1]
    assert not any(q[i:i + len(v)] == v for i in range(len(q)))


def test_a_run_from_init_from_uses_that_runs_tokenizer(tmp_path):
    """A run started from another run's weights (``model.init_from``) takes that run's task
    tokenizer (the weights index its vocabulary) instead of training a new one."""
    cfg = cpu_learnable.get_config()
    src = tmp_path / "sft" / "tokenizer"
    cfg.model.tokenizer_vocab = 600          # another vocabulary than this config would train
    first = task_tokenizer.load_or_train(_run(cfg), str(src))
    cfg.model.tokenizer_vocab = cpu_learnable.get_config().model.tokenizer_vocab
    cfg.model.init_from = str(tmp_path / "sft")
    got = task_tokenizer.load_or_train(spec.resolve(cfg, num_devices=1, check_paths=False),
                                       str(tmp_path / "run" / "tokenizer"))
    assert got.get_vocab() == first.get_vocab() and len(got) <= 600
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
