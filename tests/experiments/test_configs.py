"""Experiment configs: every preset resolves, overrides work, bad values are reported with their
path and fix, all at once, before anything is built or compiled; allowed names come from the
registries; every field of the schema has a comment and is read by the code; the resolved specs
carry what the run's parts take."""
import ast
import dataclasses
import os
import subprocess
import sys

import pytest
from ml_collections import ConfigDict

from experiments.configs import (common, gpu8_qwen35_4b_appworld, gpu8_qwen35_4b_dbbench, tiny_cpu,
                                 tpu_qwen35_9b)
from harness_jax import sharding
from harness_jax.config_problems import ConfigValidationError
from harness_jax.envs import registry
from harness_jax.train import builders, schema, spec

PRESETS = {"tiny_cpu": tiny_cpu, "gpu8_qwen35_4b_dbbench": gpu8_qwen35_4b_dbbench,
           "gpu8_qwen35_4b_appworld": gpu8_qwen35_4b_appworld, "tpu_qwen35_9b": tpu_qwen35_9b}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_resolve(name):
    cfg = PRESETS[name].get_config()
    n = cfg.mesh.num_devices if cfg.mesh.num_devices > 0 else 1
    run = spec.resolve(cfg, num_devices=n, check_paths=False)
    assert run.learner.loss.eps_high == cfg.rl.eps_high and run.collector.group_size == cfg.rl.group_size


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_change_values_never_the_structure(name):
    """A preset has exactly the fields of the schema (an added field would be read by nothing)."""
    assert set(_leaves(PRESETS[name].get_config())) == set(_leaves(common.base_config()))


def test_presets_document_their_command():
    for name, mod in PRESETS.items():
        assert f"launch/train.py --config=experiments/configs/{name}.py" in " ".join(mod.__doc__.split()), name


def _assignments(path):
    """Every ``<x>.<field> = value`` statement of a config source with its line and comment."""
    src = open(path).read()
    lines = src.splitlines()
    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], (ast.Attribute, ast.Subscript)):
            seg = ast.get_source_segment(src, node.targets[0])
            if seg.startswith(("c.", "s.", "a.")) and not seg.startswith("c.env[") and not (
                    isinstance(node.value, ast.Call) and ast.get_source_segment(src, node.value).endswith(
                        "ConfigDict()")):
                out.append((seg, lines[node.end_lineno - 1]))
    return out


def _section_fields(path):
    """Every field of the typed section classes of a module (an annotated class attribute) with
    its last line."""
    src = open(path).read()
    lines = src.splitlines()
    out = []
    for cls in ast.walk(ast.parse(src)):
        if isinstance(cls, ast.ClassDef) and cls.name.endswith(("Section", "Options")):
            for node in cls.body:
                if isinstance(node, ast.AnnAssign):
                    out.append((f"{cls.name}.{ast.get_source_segment(src, node.target)}", lines[node.end_lineno - 1]))
    return out


def _section_files():
    """The modules that define the env families' typed sections (found through the registry)."""
    return sorted({sys.modules[s.section.__module__].__file__ for s in registry.config_sections().values()})


@pytest.mark.parametrize("path", [common.__file__, schema.__file__] + _section_files())
def test_every_field_of_the_schema_has_a_comment(path):
    fields = _assignments(path) + _section_fields(path)
    assert len(fields) >= 2
    for target, line in fields:
        assert "#" in line, f"field without a one-line comment: {target}"


def _leaves(cd, prefix=""):
    for k, v in cd.items():
        if isinstance(v, ConfigDict):
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}"


def test_every_env_family_has_its_typed_section_and_sections_drive_the_env():
    c = common.base_config()
    ours = {n for n in registry.names() if registry.spec(n).make.__module__.startswith("harness_jax.envs.")}
    assert {"dbbench", "alfworld", "textworld", "webshop", "appworld", "swe"} <= ours
    assert ours <= set(registry.config_sections())
    for name in ours:
        assert isinstance(c.env[name], ConfigDict)
        assert c.env[name].to_dict() == registry.config_section(name).section().to_dict()
    c.env.dbbench.engine = "mariadb"
    c.env.dbbench.mariadb_socket = "/tmp/x.sock"
    c.env.dbbench.categories = ("select",)
    kw = registry.config_section("dbbench").env_kwargs(c.env)
    assert kw["engine"] == "mariadb" and kw["socket"] == "/tmp/x.sock" and kw["protocol"] == "text"
    env = spec.resolve(c, num_devices=1).env
    assert env.env_kwargs["engine"] == "mariadb" and env.env_kwargs["socket"] == "/tmp/x.sock"
    assert builders.split_options(env, n=7, seed_offset=3) == {"n": 7, "seed": 3, "categories": ("select",),
                                                               "describe_table": True}


@pytest.mark.parametrize("name,field,value,attr", [
    ("dbbench", "max_rounds", 7, "max_rounds"),
    ("webshop", "max_rounds", 7, "max_rounds"),
    ("appworld", "max_interactions", 7, "max_interactions"),
    ("swe", "max_steps", 7, "max_steps"),
])
def test_family_sections_reach_the_environment(name, field, value, attr):
    """A field of each family's section arrives in the environment the builders make, with the
    shared env.protocol."""
    c = common.base_config()
    c.env.name = name
    c.env.protocol = "function"
    c.env[name][field] = value
    env = builders.env_factory(spec.resolve(c, num_devices=1, check_paths=False).env)()
    try:
        assert getattr(env, attr) == value and env.protocol == "function"
    finally:
        getattr(env, "close", lambda: None)()


def test_webshop_split_options_reach_the_loader():
    c = common.base_config()
    c.env.name = "webshop"
    c.env.webshop.n_products = 120
    c.env.webshop.catalog_seed = 3
    tasks = builders.load_tasks(spec.resolve(c, num_devices=1).env, "train", n=2)
    assert len(tasks) == 2 and all(t.split == "train" for t in tasks)
    assert tasks[0].data["world"] == {"kind": "generated", "n_products": 120, "seed": 3}


def test_env_section_values_are_validated_from_the_family_declaration():
    cfg = tiny_cpu.get_config()
    cfg.env.name = "webshop"
    cfg.env.webshop.partition = "alphabetical"
    cfg.env.webshop.max_rounds = -1
    with pytest.raises(ConfigValidationError) as ei:
        spec.resolve(cfg, num_devices=1)
    paths = {p.path for p in ei.value.problems}
    assert {"env.webshop.partition", "env.webshop.max_rounds"} <= paths
    assert "agentbench" in str(ei.value)


def _bad(mutate, num_devices=1):
    cfg = tiny_cpu.get_config()
    mutate(cfg)
    with pytest.raises(ConfigValidationError) as ei:
        spec.resolve(cfg, num_devices=num_devices)
    return ei.value


@pytest.mark.parametrize("mutate,path,fix_word", [
    (lambda c: setattr(c.env, "name", "no_such_env"), "env.name", "one of"),
    (lambda c: setattr(c.rl, "group_size", 1), "rl.group_size", "group_size=4"),
    (lambda c: setattr(c.mesh, "shape", (1, 3, 1, 1)), "mesh.shape", "equal 1"),
    (lambda c: setattr(c.mesh, "shape", (1, -1, -1, 1)), "mesh.shape", "-1"),
    (lambda c: setattr(c.mesh, "rules", (("no_such_axis", "fsdp"),)), "mesh.rules[0]", "TRAIN_RULES"),
    (lambda c: setattr(c.model, "init_from", "/no/such/ckpt"), "model.init_from", "existing"),
    (lambda c: setattr(c.model, "hf_path", "/no/such/hf"), "model.hf_path", "checkpoint directory"),
    (lambda c: setattr(c.model, "preset", "no_such_preset"), "model.preset", "one of"),
    (lambda c: setattr(c.env, "train_split", "test"), "env.train_split", "selection"),
    (lambda c: setattr(c.env, "eval_split", "test"), "env.eval_split", "evaluate.py"),
    (lambda c: setattr(c.env, "protocol", "xml"), "env.protocol", "function"),
    (lambda c: setattr(c.env.dbbench, "engine", "oracle"), "env.dbbench.engine", "mariadb"),
    (lambda c: setattr(c.rollout, "temperature", 0.0), "rollout.temperature", "1.0"),
    (lambda c: setattr(c.rollout, "mode", "disaggregated"), "rollout.server_urls", "serve.py"),
    (lambda c: setattr(c.rollout, "mode", "sideways"), "rollout.mode", "colocated"),
    (lambda c: setattr(c.rollout, "cache_dtype", "int4"), "rollout.cache_dtype", "bfloat16"),
    (lambda c: setattr(c.rollout, "cache_kind", "ring"), "rollout.cache_kind", "contiguous"),
    (lambda c: setattr(c.rollout, "kv_pages", 3), "rollout.kv_pages", "kv_pages >="),
    (lambda c: setattr(c.rollout, "attention_impl", "flash"), "rollout.attention_impl", "pallas_gpu"),
    (lambda c: setattr(c.rollout, "sync_method", "rsync"), "rollout.sync_method", "distributed"),
    (lambda c: setattr(c.rl, "agg", "mean_of_means"), "rl.agg", "token_mean"),
    (lambda c: setattr(c.rl, "tis_mode", "clip"), "rl.tis_mode", "literal"),
    (lambda c: setattr(c.rl, "kl_estimator", "k4"), "rl.kl_estimator", "k3"),
    (lambda c: setattr(c.rl, "adv_baseline", "median"), "rl.adv_baseline", "loo"),
    (lambda c: setattr(c.rl, "eps_low", 1.5), "rl.eps_low", "0.2"),
    (lambda c: setattr(c.rl, "dynamic_sampling", "maybe"), "rl.dynamic_sampling", "oversample"),
    (lambda c: (setattr(c.rl, "async_mode", True), setattr(c.rl, "max_staleness", 0)),
     "rl.max_staleness", ">= 1"),
    (lambda c: setattr(c.rl, "pack_len", 64), "rl.pack_len", "max_new_tokens"),
    (lambda c: setattr(c.opt, "lr", 0.0), "opt.lr", "1e-6"),
    (lambda c: setattr(c.opt, "end_lr_ratio", 2.0), "opt.end_lr_ratio", "[0, 1]"),
    (lambda c: setattr(c.eval, "k", 3), "eval.k", "temperature"),
    (lambda c: setattr(c.sft, "num_demos", 2), "sft.num_demos", "batch_size"),
    (lambda c: setattr(c.sft, "schedule", "step"), "sft.schedule", "cosine"),
    (lambda c: setattr(c.model, "dtype", "float8"), "model.dtype", "bfloat16"),
    (lambda c: setattr(c.model.arch, "num_key_value_heads", 3), "model.arch", "consistent"),
    (lambda c: setattr(c.model.arch, "vocab_size", 1000), "model.arch.vocab_size", "tokenizer_vocab"),
    (lambda c: setattr(c.harness, "spec", "/no/such/harness.json"), "harness.spec", "JSON/YAML"),
    (lambda c: setattr(c.harness, "spec", "H9"), "harness.spec", "H0"),
    (lambda c: setattr(c.harness, "hook_workers", 0), "harness.hook_workers", ">= 1"),
])
def test_bad_config_reports_path_and_fix(mutate, path, fix_word):
    err = _bad(mutate)
    hits = [p for p in err.problems if p.path == path]
    assert hits, f"expected a problem at {path}, got {[str(p) for p in err.problems]}"
    assert fix_word in hits[0].fix + hits[0].problem, str(hits[0])
    assert f"config.{path}" in str(err)


def test_all_problems_reported_at_once():
    def mutate(c):
        c.rl.group_size = 1
        c.opt.lr = -1.0
        c.env.name = "nope"
    err = _bad(mutate)
    assert {"rl.group_size", "opt.lr", "env.name"} <= {p.path for p in err.problems}


def test_allowed_names_come_from_the_registries(monkeypatch):
    """A mode registered in rl.losses (or a harness in harness.presets) is valid config at once."""
    from harness_jax.harness import presets
    from harness_jax.rl import losses

    c = tiny_cpu.get_config()
    c.rl.tis_mode = "always_one"
    c.harness.spec = "my_h0"
    with pytest.raises(ConfigValidationError) as ei:
        spec.resolve(c, num_devices=1)
    assert {p.path for p in ei.value.problems} == {"rl.tis_mode", "harness.spec"}
    monkeypatch.setattr(losses, "TIS_WEIGHTS", dict(losses.TIS_WEIGHTS))   # restored after the test
    monkeypatch.setattr(presets, "_NAMED", dict(presets._NAMED))
    losses.register(losses.TIS_WEIGHTS, "always_one")(losses.TIS_WEIGHTS["none"])
    presets.register("my_h0", presets.base_harness)
    assert spec.resolve(c, num_devices=1).learner.loss.tis_mode == "always_one"


def test_mesh_device_count_mismatch_for_preset():
    cfg = gpu8_qwen35_4b_dbbench.get_config()
    with pytest.raises(ConfigValidationError) as ei:
        spec.resolve(cfg, num_devices=8, check_paths=False)
    assert any(p.path == "mesh.num_devices" for p in ei.value.problems)


def test_resolve_mesh_shape_in_one_place():
    assert sharding.resolve_mesh_shape((1, -1, 2, 1), 8) == (1, 4, 2, 1)
    assert sharding.resolve_mesh_shape((2, 2, 2, 1), 8) == (2, 2, 2, 1)
    with pytest.raises(ValueError, match="do not divide"):
        sharding.resolve_mesh_shape((3, -1, 1, 1), 8)
    assert dict(sharding.make_mesh((1, -1, 2, 1)).shape) == {"data": 1, "fsdp": 4, "tensor": 2, "expert": 1}


def test_command_line_overrides_and_lock(tmp_path):
    """The launcher's flag parsing: overrides apply to typed fields, unknown fields are refused."""
    code = (
        "import sys; from absl import flags; from ml_collections import config_flags;"
        "cfg = config_flags.DEFINE_config_file('config', lock_config=True);"
        "flags.FLAGS(sys.argv); c = flags.FLAGS.config;"
        "print(c.rl.group_size, c.rollout.max_len, c.model.arch.hidden_size, c.env.dbbench.engine)")
    base = [sys.executable, "-c", code, "--config=experiments/configs/tiny_cpu.py"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run(base + ["--config.rl.group_size=8", "--config.rollout.max_len=1024",
                                 "--config.model.arch.hidden_size=96", "--config.env.dbbench.engine=mariadb"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["8", "1024", "96", "mariadb"]
    for bad in ("--config.rl.group_sizes=8", "--config.model.arch.hidden_size=wide"):
        p = subprocess.run(base + [bad], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode != 0 and bad.split("=")[0].split(".")[-1] in p.stderr, p.stderr[-2000:]


# --------------------------------------------------------------------- every field is read
class _Recorder:
    """Wraps a ConfigDict and records the dotted path of every field the code reads (iteration
    over a section reads all of its fields). Test double: the real config, observed."""

    def __init__(self, cd, log, prefix=""):
        object.__setattr__(self, "_cd", cd)
        object.__setattr__(self, "_log", log)
        object.__setattr__(self, "_prefix", prefix)

    def _get(self, k):
        v = self._cd[k]
        path = self._prefix + k
        if isinstance(v, ConfigDict):
            return _Recorder(v, self._log, path + ".")
        self._log.add(path)
        return v

    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        try:
            return self._get(k)
        except KeyError:
            raise AttributeError(k) from None

    __getitem__ = _get

    def __contains__(self, k):
        return k in self._cd

    def keys(self):
        return self._cd.keys()

    def items(self):
        return [(k, self._get(k)) for k in self._cd.keys()]

    def values(self):
        return [v for _, v in self.items()]

    def __iter__(self):
        return iter(self._cd.keys())

    def __len__(self):
        return len(self._cd)

    def get(self, k, default=None):
        return self._get(k) if k in self._cd else default

    def to_dict(self):
        return self._cd.to_dict()


def _code_attribute_reads(exclude=()) -> set:
    """Every attribute name the package's code reads (``x.name`` loads), outside ``exclude``."""
    root = os.path.join(ROOT, "harness_jax")
    names = set()
    for d, _, fs in os.walk(root):
        for f in fs:
            path = os.path.join(d, f)
            if not f.endswith(".py") or path in exclude:
                continue
            for node in ast.walk(ast.parse(open(path).read())):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    names.add(node.attr)
    return names


def test_every_field_is_read_by_the_code():
    """Resolution reads every leaf of the schema (a field it skipped would be silently ignored),
    and every field of the typed sections is read by the code outside their declarations (what
    the run's parts use; a field nothing reads is dead). Static for the second half: an
    attribute of that name is loaded somewhere in the package."""
    log = set()
    c = common.base_config()
    spec.resolve(_Recorder(c, log), num_devices=1)
    other_families = tuple(f"env.{n}." for n in registry.config_sections() if n != c.env.name)
    unread = sorted(p for p in set(_leaves(c)) - log if not p.startswith(other_families))
    assert not unread, f"fields the resolution does not read: {unread}"
    used = _code_attribute_reads(exclude=(schema.__file__,))
    sections = [v for v in vars(schema).values()
                if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__name__.endswith("Section")]
    assert len(sections) >= len(schema.SECTIONS)
    unused = sorted(f"{cls.__name__}.{f.name}" for cls in sections for f in dataclasses.fields(cls)
                    if f.name not in used)
    assert not unused, f"section fields no code reads: {unused}"


def test_sweep_preset_expands_through_the_launchers_flag_parser(tmp_path):
    """tiny_cpu_sweep's named sweeps resolve to valid runs of the schema (nothing is run)."""
    from harness_jax.sweeps import runner

    sw = runner.prepare(os.path.join(ROOT, "experiments", "configs", "tiny_cpu_sweep.py"), "seeds_x_lr",
                        str(tmp_path / "sweep"), repo_root=ROOT)
    assert [r.name for r in sw.runs] == [f"seed={s},lr={lr}" for s in (0, 1, 2) for lr in (0.0002, 0.001)]
