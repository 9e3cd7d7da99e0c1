"""One place that checks an experiment ConfigDict before anything is built or compiled.

Every problem is reported with its dotted path, the bad value and the fix, all at once (one
``ConfigValidationError`` listing every problem), so a user fixes a config in one round instead
of discovering errors one compile at a time (cf. MaxText #3960). The schema is
``experiments/configs/common.py``; this module checks values and their consistency. Allowed names
of registered components (loss modes, environments, harnesses, env sections) come from their
registries, never from literals typed here.

    from harness_jax import config_validation
    config_validation.validate(config)                 # raises ConfigValidationError
    problems = config_validation.find_problems(config) # list[Problem], empty when fine
"""
from __future__ import annotations

import math
import os
import re
from typing import Any, Callable, Optional, Sequence

from harness_jax import config_schema, sharding
from harness_jax.config_problems import ConfigValidationError, Problem  # noqa: F401 (re-exported)
from harness_jax.rl import losses

MESH_AXES = sharding.MESH_AXES
DTYPES = ("float32", "bfloat16")
SCHEDULES = ("constant", "cosine", "linear")
TRAIN_SPLITS = ("train", "search", "selection")   # "test" is sealed: evaluation entry points only
ALL_SPLITS = ("train", "search", "selection", "test")


def validate(config, *, num_devices: Optional[int] = None, check_paths: bool = True,
             allow_test_split: bool = False) -> None:
    """Raises ``ConfigValidationError`` listing every problem; returns None when the config is fine.

    num_devices: devices the run will have (default: ``config.mesh.num_devices`` when > 0, else
    ``jax.device_count()``). check_paths: verify that referenced files/directories exist.
    allow_test_split: only evaluation entry points pass True (the test split is sealed).
    """
    problems = find_problems(config, num_devices=num_devices, check_paths=check_paths,
                             allow_test_split=allow_test_split)
    if problems:
        raise ConfigValidationError(problems)


def find_problems(config, *, num_devices: Optional[int] = None, check_paths: bool = True,
                  allow_test_split: bool = False) -> list[Problem]:
    out: list[Problem] = []

    def bad(path, value, problem, fix):
        out.append(Problem(path, value, problem, fix))

    def get(path, default=None):
        node = config
        for part in path.split("."):
            if node is None or part not in node:
                return default
            node = node[part]
        return node

    for section in ("model", "mesh", "rollout", "env", "harness", "rl", "opt", "sft", "ckpt", "eval", "log"):
        if section not in config:
            bad(section, None, "section is missing",
                "start the config from experiments.configs.common.base_config()")
    if out:
        return out

    _int_at_least(bad, "num_steps", get("num_steps"), 0)
    _check_model(config, bad, check_paths)
    _check_mesh(config, bad, num_devices)
    _check_rollout(config, bad)
    _check_env(config, bad, allow_test_split, check_paths)
    _check_harness(config, bad, check_paths)
    _check_rl(config, bad)
    _check_opt(config, bad)
    _check_sft(config, bad)
    _check_ckpt_eval_log(config, bad)
    if "workers" in config:
        _check_workers(config, bad)
    out += _check_method_sections(config, check_paths)
    return out


# --------------------------------------------------------------------------- method sections
# A method's package owns its config section (``harness_s``, ``r1``) and registers the check of
# it here on import; the validator runs every registered check whose section the config has, so
# all problems of a config still come from this one place and this module imports no method.
SectionCheck = Callable[[Any, bool], list]          # (config, check_paths) -> [Problem]
_SECTION_CHECKS: dict[str, SectionCheck] = {}
SECTION_OWNERS = {"harness_s": "harness_jax.harness_s",   # section -> the package that registers its check
                  "r1": "harness_jax.harness_r1"}


def register_section_check(section: str, check: SectionCheck) -> None:
    """``check(config, check_paths) -> [Problem]`` validates ``config.<section>`` (and whatever of
    the rest of the config the method constrains)."""
    _SECTION_CHECKS[section] = check


def _check_method_sections(config, check_paths: bool) -> list[Problem]:
    import importlib

    out: list[Problem] = []
    for section in sorted(set(SECTION_OWNERS) | set(_SECTION_CHECKS)):
        if section not in config:
            continue
        if section not in _SECTION_CHECKS:
            importlib.import_module(SECTION_OWNERS[section])   # its __init__ registers the check
        out += _SECTION_CHECKS[section](config, check_paths)
    return out


def one_of(bad, path, value, choices) -> bool:
    """Public form of the membership check for the methods' section checks."""
    return _one_of(bad, path, value, choices)


def int_at_least(bad, path, value, lo, fix=None) -> bool:
    """Public form of the integer lower-bound check for the methods' section checks."""
    return _int_at_least(bad, path, value, lo, fix)


# ---------------------------------------------------------------------------------------------
def _int_at_least(bad, path, value, lo, fix=None):
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        bad(path, value, f"must be an integer >= {lo}", fix or f"set --config.{path} to a value >= {lo}")
        return False
    return True


def _one_of(bad, path, value, choices):
    if value not in choices:
        bad(path, value, f"unknown value; allowed: {', '.join(map(repr, choices))}",
            f"set --config.{path} to one of {', '.join(map(str, choices))}")
        return False
    return True


def _check_model(config, bad, check_paths):
    m = config.model
    _one_of(bad, "model.dtype", m.dtype, DTYPES)
    _one_of(bad, "model.param_dtype", m.param_dtype, DTYPES)
    _one_of(bad, "model.tokenizer", m.tokenizer, ("qwen", "task_bpe"))
    if m.tokenizer == "task_bpe":
        _one_of(bad, "model.tokenizer_pretokenizer", m.tokenizer_pretokenizer,
                config_schema.TOKENIZER_PRETOKENIZERS)
        if _int_at_least(bad, "model.tokenizer_vocab", m.tokenizer_vocab, 512):
            v = m.arch.vocab_size
            if not m.hf_path and v is not None and v < m.tokenizer_vocab:
                bad("model.arch.vocab_size", v, f"smaller than model.tokenizer_vocab={m.tokenizer_vocab}",
                    f"set --config.model.arch.vocab_size={m.tokenizer_vocab}")
        if m.hf_path:
            bad("model.tokenizer", m.tokenizer, "a pretrained checkpoint (hf_path) comes with its own vocabulary",
                "use --config.model.tokenizer=qwen with hf_path")
    if m.hf_path and check_paths:
        if not os.path.exists(os.path.join(m.hf_path, "config.json")):
            bad("model.hf_path", m.hf_path, "no config.json in this directory",
                "point --config.model.hf_path at a Hugging Face checkpoint directory, or set it to '' "
                "to use model.preset")
            return
    if m.init_from and check_paths and "://" not in m.init_from and not os.path.isdir(m.init_from):
        bad("model.init_from", m.init_from, "missing checkpoint directory",
            "point --config.model.init_from at an existing training workdir or its checkpoints/ dir, "
            "or set it to ''")
    try:
        from harness_jax.models import qwen3_5
    except Exception as e:  # the model package itself is broken: say so, do not guess
        bad("model.preset", m.preset, f"harness_jax.models.qwen3_5 cannot be imported ({e})",
            "fix the model package installation")
        return
    _one_of(bad, "model.remat", m.remat, qwen3_5.REMAT_POLICIES)
    _one_of(bad, "model.attention", m.attention, qwen3_5.attention.names())
    _one_of(bad, "model.reduce_scatter_dtype", m.reduce_scatter_dtype, DTYPES)
    for f in ("attention_block_q", "attention_block_kv"):
        _int_at_least(bad, f"model.{f}", m[f], 0)
    if not m.hf_path and m.preset.lower().replace("-", "_").replace(".", "_") not in qwen3_5.presets.names():
        bad("model.preset", m.preset, "unknown model preset",
            f"use one of {', '.join(qwen3_5.presets.names())} or set --config.model.hf_path")
        return
    if m.arch.moe_dispatch == "ragged" and config.mesh.platform == "cpu":
        bad("model.arch.moe_dispatch", m.arch.moe_dispatch, "ragged_all_to_all is not implemented by XLA:CPU",
            "use --config.model.arch.moe_dispatch=all_to_all on CPU (ragged needs mesh.platform tpu or gpu)")
    if m.hf_path and not check_paths:
        return
    try:
        config_schema.model_config(m)
    except Exception as e:
        where = "model.hf_path" if m.hf_path else "model.arch"
        fix = ("use a Qwen3.5 (dense or MoE) checkpoint" if m.hf_path
               else "make the model.arch fields consistent (see the message)")
        bad(where, m.hf_path if m.hf_path else config_schema.arch_overrides(m),
            f"the resulting model config is invalid ({e})", fix)


def _check_mesh(config, bad, num_devices):
    mesh = config.mesh
    shape = tuple(mesh.shape) if mesh.shape is not None else ()
    if tuple(mesh.axes) != MESH_AXES:
        bad("mesh.axes", tuple(mesh.axes), f"must be {MESH_AXES}", f"set --config.mesh.axes='{MESH_AXES}'")
    if len(shape) != len(MESH_AXES) or not all(isinstance(s, int) for s in shape):
        bad("mesh.shape", shape, f"needs {len(MESH_AXES)} integers (one per axis {MESH_AXES})",
            "e.g. --config.mesh.shape='(1,-1,1,1)'")
        return
    _one_of(bad, "mesh.platform", mesh.platform, ("cpu", "gpu", "tpu"))
    _one_of(bad, "mesh.chip", mesh.chip, ("",) + tuple(config_schema.CHIP_HBM))
    if not (isinstance(mesh.num_devices, int) and (mesh.num_devices == -1 or mesh.num_devices >= 1)):
        bad("mesh.num_devices", mesh.num_devices, "must be -1 (all devices) or >= 1", "e.g. -1")
        return
    if num_devices is None:
        import jax
        num_devices = jax.device_count()
        if mesh.num_devices > num_devices:
            bad("mesh.num_devices", mesh.num_devices, f"only {num_devices} devices are visible",
                f"run on {mesh.num_devices} devices or lower --config.mesh.num_devices")
            return
        if mesh.num_devices > 0:
            num_devices = int(mesh.num_devices)
    elif mesh.num_devices > 0 and mesh.num_devices != num_devices:
        bad("mesh.num_devices", mesh.num_devices,
            f"the preset is sized for {mesh.num_devices} devices but this run has {num_devices}",
            f"run on {mesh.num_devices} devices or set --config.mesh.num_devices=-1 and a mesh.shape "
            f"for {num_devices}")
    try:
        resolved = sharding.resolve_mesh_shape(shape, num_devices)
    except ValueError as e:
        bad("mesh.shape", shape, str(e), "e.g. --config.mesh.shape='(1,-1,1,1)'")
        return
    if math.prod(resolved) != num_devices:
        bad("mesh.shape", shape, f"uses {math.prod(resolved)} devices but the run has {num_devices}",
            f"make the product of mesh.shape equal {num_devices}, or use -1 on one axis")
    if mesh.rules is not None:
        names = {r[0] for r in sharding.TRAIN_RULES}
        for i, rule in enumerate(mesh.rules):
            ok = (isinstance(rule, (tuple, list)) and len(rule) == 2 and isinstance(rule[0], str)
                  and (rule[1] is None or rule[1] in MESH_AXES
                       or (isinstance(rule[1], (tuple, list)) and all(a in MESH_AXES for a in rule[1]))))
            if not ok:
                bad(f"mesh.rules[{i}]", rule, "a rule is (logical_name, mesh_axis | None | tuple of mesh axes)",
                    f"use mesh axes from {MESH_AXES}")
            elif rule[0] not in names:
                bad(f"mesh.rules[{i}]", rule, f"unknown logical axis {rule[0]!r}",
                    f"use the logical names of harness_jax.sharding.TRAIN_RULES: {sorted(names)}")


def _check_rollout(config, bad):
    r = config.rollout
    _one_of(bad, "rollout.mode", r.mode, ("colocated", "disaggregated"))
    if r.mode == "disaggregated":
        urls = tuple(r.server_urls or ())
        if not urls:
            bad("rollout.server_urls", urls, "disaggregated mode needs at least one server",
                "start launch/serve.py or SGLang and pass --config.rollout.server_urls='(\"http://host:port\",)'")
        for i, u in enumerate(urls):
            if not (isinstance(u, str) and u.startswith(("http://", "https://"))):
                bad(f"rollout.server_urls[{i}]", u, "not an http(s) URL", "use 'http://host:port'")
    _int_at_least(bad, "rollout.sync_every", r.sync_every, 1)
    _int_at_least(bad, "rollout.max_slots", r.max_slots, 1)
    _int_at_least(bad, "rollout.max_new_tokens", r.max_new_tokens, 1)
    _int_at_least(bad, "rollout.concurrency", r.concurrency, 1)
    if _int_at_least(bad, "rollout.max_len", r.max_len, 2) and isinstance(r.max_new_tokens, int):
        if r.max_len <= r.max_new_tokens:
            bad("rollout.max_len", r.max_len, f"must exceed max_new_tokens={r.max_new_tokens} (the prompt needs room)",
                "raise --config.rollout.max_len")
    if not (isinstance(r.temperature, (int, float)) and r.temperature > 0):
        bad("rollout.temperature", r.temperature,
            "training rollouts must sample (temperature 0 makes every group identical, so every advantage is 0)",
            "set --config.rollout.temperature=1.0")
    if not (0 < r.top_p <= 1):
        bad("rollout.top_p", r.top_p, "must be in (0, 1]", "set --config.rollout.top_p=1.0")
    if r.top_k == 0 or r.top_k < -1:
        bad("rollout.top_k", r.top_k, "must be -1 (off) or >= 1", "set --config.rollout.top_k=-1")
    if r.request_timeout_s <= 0:
        bad("rollout.request_timeout_s", r.request_timeout_s, "must be > 0", "e.g. 120.0")
    buckets = tuple(r.prefill_buckets or ())
    if not buckets or not all(isinstance(b, int) and b >= 1 for b in buckets):
        bad("rollout.prefill_buckets", buckets, "needs positive integer chunk lengths", "e.g. '(32, 128, 512)'")
    _int_at_least(bad, "rollout.decode_steps", r.decode_steps, 1)
    _check_engine_and_sync(r, bad)


def _check_engine_and_sync(r, bad):
    """The embedded engine's cache / serving fields and the disaggregated weight sync's."""
    from harness_jax.models.qwen3_5.paged_attention import IMPLS
    from harness_jax.sampling.runner import CACHE_KINDS
    from harness_jax.sampling.weight_sync import SYNC_METHODS
    _one_of(bad, "rollout.cache_dtype", r.cache_dtype, ("auto",) + DTYPES)
    _one_of(bad, "rollout.cache_kind", r.cache_kind, CACHE_KINDS)
    _one_of(bad, "rollout.attention_impl", r.attention_impl, ("auto",) + IMPLS)
    _int_at_least(bad, "rollout.page_size", r.page_size, 1)
    _int_at_least(bad, "rollout.kv_pages", r.kv_pages, 0)
    _int_at_least(bad, "rollout.token_budget", r.token_budget, 0)
    _int_at_least(bad, "rollout.prefill_rows", r.prefill_rows, 1)
    _int_at_least(bad, "rollout.serve_tensor_parallel", r.serve_tensor_parallel, 1)
    if (r.cache_kind == "paged" and isinstance(r.kv_pages, int) and isinstance(r.page_size, int) and r.page_size > 0
            and 0 < r.kv_pages * r.page_size < r.max_len):
        bad("rollout.kv_pages", r.kv_pages, f"{r.kv_pages} pages of {r.page_size} tokens cannot hold one request of "
            f"max_len={r.max_len}", f"set --config.rollout.kv_pages >= {-(-r.max_len // r.page_size)} (0 = no limit)")
    if not isinstance(r.overlap, bool):
        bad("rollout.overlap", r.overlap, "must be True or False", "set --config.rollout.overlap=True")
    _one_of(bad, "rollout.sync_method", r.sync_method, SYNC_METHODS)
    _one_of(bad, "rollout.sync_dtype", r.sync_dtype, DTYPES)
    _one_of(bad, "rollout.sync_group_backend", r.sync_group_backend, ("nccl", "gloo"))
    _int_at_least(bad, "rollout.sync_bucket_mb", r.sync_bucket_mb, 1)


def _check_env(config, bad, allow_test_split, check_paths=True):
    e = config.env
    try:
        from harness_jax.envs import registry
        names = set(registry.names())
    except Exception as exc:
        bad("env.name", e.name, f"the environment registry cannot be imported ({exc})",
            "fix the harness_jax.envs installation")
        names = None
    section = None
    if names is not None and e.name not in names:
        bad("env.name", e.name, "unknown environment", f"use one of {', '.join(sorted(names))}")
    elif names is not None and registry.spec(e.name).config is None:
        bad("env.name", e.name, "this environment family registers no config section",
            "pass config=harness_jax.config_schema.EnvSection(...) to its registry.EnvSpec")
    elif e.name not in e:
        bad(f"env.{e.name}", None, "the section of the selected environment is missing",
            "start the config from experiments.configs.common.base_config()")
    elif names is not None:
        section = registry.spec(e.name).config
    if e.train_split == "test" or (e.eval_split == "test" and not allow_test_split):
        path = "env.train_split" if e.train_split == "test" else "env.eval_split"
        bad(path, "test", "the test split is sealed: training and evolution never read it",
            "use 'selection' here; evaluate the test split with launch/evaluate.py --split=test")
    else:
        _one_of(bad, "env.train_split", e.train_split, TRAIN_SPLITS)
        _one_of(bad, "env.eval_split", e.eval_split, ALL_SPLITS if allow_test_split else TRAIN_SPLITS)
    _one_of(bad, "env.protocol", e.protocol, ("text", "function"))
    _int_at_least(bad, "env.num_tasks", e.num_tasks, 1)
    _int_at_least(bad, "env.task_seed", e.task_seed, 0)
    _int_at_least(bad, "env.max_turns", e.max_turns, 0, "set --config.env.max_turns >= 1 (0 = the harness's own limit)")
    if section is not None:
        _check_env_section(e.name, e[e.name], section, bad)
    if "taskset" in e:
        _check_taskset(e, bad, check_paths)


def _check_taskset(e, bad, check_paths):
    """``env.taskset``: a built TFDS task set of the selected family (launch/build_tasksets.py)."""
    ts = e.taskset
    if ts.version and not re.fullmatch(r"\d+\.\d+\.\d+", ts.version):
        bad("env.taskset.version", ts.version, "not a dataset version", "use 'X.Y.Z' (e.g. '1.0.0') or '' for the newest")
        return
    if not ts.data_dir:
        return
    if not ts.config:
        bad("env.taskset.config", ts.config, "empty", "name the builder config, e.g. 'n20000-seed0-test.n500'")
    elif check_paths:
        from harness_jax.data import tasksets
        try:
            directory = tasksets.dataset_dir(ts.data_dir, e.name, ts.config, ts.version or None)
        except FileNotFoundError as exc:
            bad("env.taskset.data_dir", ts.data_dir, str(exc).split(";")[0],
                f"build it: python launch/build_tasksets.py --family={e.name} --data_dir={ts.data_dir} "
                "(or set --config.env.taskset.data_dir='' to generate tasks)")
            return
        if not os.path.exists(os.path.join(directory, "dataset_info.json")):
            bad("env.taskset.version", ts.version, f"no built task set at {directory}",
                "give a built version, or '' for the newest")


def _check_env_section(name, values, section, bad):
    """The selected family's section: the fields of its typed default, the allowed values and
    lower bounds its ``EnvSection`` declares (``choices``, ``at_least``)."""
    known = set(section.section().keys())
    for k in sorted(set(values.keys()) - known):
        bad(f"env.{name}.{k}", values[k], "not a field of this family's section",
            f"use one of {', '.join(sorted(known))}")
    for k, allowed in section.choices.items():
        _one_of(bad, f"env.{name}.{k}", values[k], tuple(allowed))
    for k, low in section.at_least.items():
        v = values[k]
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= low):
            bad(f"env.{name}.{k}", v, f"must be a number >= {low}",
                f"set --config.env.{name}.{k} to a value >= {low}")


def _check_harness(config, bad, check_paths):
    h = config.harness
    spec = h.spec
    if spec and (spec.endswith((".json", ".yaml", ".yml")) or os.sep in spec):
        if check_paths and not os.path.exists(spec):
            bad("harness.spec", spec, "harness spec file not found",
                "point --config.harness.spec at a JSON/YAML harness spec, or '' for the base harness")
    elif spec:
        from harness_jax.harness import presets
        if spec not in presets.names():
            bad("harness.spec", spec, "neither a spec file (.json/.yaml) nor a registered harness name",
                f"use one of {', '.join(presets.names())}, a JSON/YAML path, or '' for H0")
    _int_at_least(bad, "harness.infra_retries", h.infra_retries, 0)
    if not h.hook_timeout_s > 0:
        bad("harness.hook_timeout_s", h.hook_timeout_s, "must be > 0", "e.g. 1.0")
    _int_at_least(bad, "harness.hook_workers", h.hook_workers, 1)
    _int_at_least(bad, "harness.overlay_workers", h.overlay_workers, 1)


def _check_rl(config, bad):
    rl = config.rl
    _int_at_least(bad, "rl.group_size", rl.group_size, 2,
                  "GRPO compares rollouts within a group; set --config.rl.group_size=4 (or more)")
    _int_at_least(bad, "rl.tasks_per_step", rl.tasks_per_step, 1)
    if not (0 <= rl.eps_low < 1):
        bad("rl.eps_low", rl.eps_low, "must be in [0, 1) (the lower clip is 1 - eps_low)", "e.g. 0.2")
    if not rl.eps_high >= 0:
        bad("rl.eps_high", rl.eps_high, "must be >= 0", "e.g. 0.28")
    if rl.dual_clip and rl.dual_clip <= 1:
        bad("rl.dual_clip", rl.dual_clip, "dual-clip constant must be > 1 (or 0 = off)", "e.g. 3.0 or 0")
    if not rl.tis_cap > 0:
        bad("rl.tis_cap", rl.tis_cap, "the importance-weight cap must be > 0", "e.g. 2.0 (or --config.rl.tis_mode=none)")
    if not 0 <= rl.tis_low <= rl.tis_high:
        bad("rl.tis_low", (rl.tis_low, rl.tis_high), "the 'mask' interval needs 0 <= tis_low <= tis_high",
            "e.g. --config.rl.tis_low=0.5 --config.rl.tis_high=2.0")
    _one_of(bad, "rl.tis_mode", rl.tis_mode, tuple(losses.TIS_WEIGHTS))
    _one_of(bad, "rl.adv_scale", rl.adv_scale, tuple(losses.ADV_SCALES))
    _one_of(bad, "rl.adv_baseline", rl.adv_baseline, tuple(losses.ADV_BASELINES))
    _one_of(bad, "rl.agg", rl.agg, tuple(losses.AGGREGATIONS))
    if not rl.norm_constant > 0:
        bad("rl.norm_constant", rl.norm_constant, "must be > 0", "e.g. the expected response length")
    _one_of(bad, "rl.kl_estimator", rl.kl_estimator, tuple(losses.KL_ESTIMATORS))
    if rl.kl_coef < 0:
        bad("rl.kl_coef", rl.kl_coef, "must be >= 0", "0 turns the KL term off")
    if not rl.kl_clamp > 0:
        bad("rl.kl_clamp", rl.kl_clamp, "must be > 0", "e.g. 10.0")
    if not 0 <= rl.neg_adv_weight <= 1:
        bad("rl.neg_adv_weight", rl.neg_adv_weight, "must be in [0, 1]", "1 = plain GRPO, e.g. 0.5 damps failures")
    if rl.adv_eps <= 0:
        bad("rl.adv_eps", rl.adv_eps, "must be > 0 (it guards the division by the group std)", "e.g. 1e-6")
    _int_at_least(bad, "rl.epochs", rl.epochs, 1)
    _int_at_least(bad, "rl.mini_batches", rl.mini_batches, 1)
    _int_at_least(bad, "rl.micro_batches", rl.micro_batches, 1)
    _int_at_least(bad, "rl.pack_len", rl.pack_len, 16)
    buckets = tuple(rl.pack_buckets or ())
    if not all(isinstance(b, int) and b >= 1 for b in buckets):
        bad("rl.pack_buckets", buckets, "needs positive integer row lengths", "e.g. '(512, 1024, 2048)' or '()'")
    _int_at_least(bad, "rl.pad_token_id", rl.pad_token_id, 0)
    _int_at_least(bad, "rl.logit_chunk", rl.logit_chunk, 0, "set --config.rl.logit_chunk=0 (whole rows) or e.g. 1024")
    mnt = config.rollout.max_new_tokens
    if isinstance(rl.pack_len, int) and isinstance(mnt, int) and rl.pack_len <= mnt:
        bad("rl.pack_len", rl.pack_len, f"a packed row must hold at least one whole assistant turn "
            f"(rollout.max_new_tokens={mnt}) plus its context; longer episodes are split at turn boundaries",
            f"set --config.rl.pack_len well above {mnt} (e.g. rollout.max_len)")
    _one_of(bad, "rl.dynamic_sampling", rl.dynamic_sampling, ("off", "skip", "oversample"))
    _int_at_least(bad, "rl.max_oversample_rounds", rl.max_oversample_rounds, 0)
    if rl.async_mode:
        _int_at_least(bad, "rl.max_staleness", rl.max_staleness, 1,
                      "async mode needs --config.rl.max_staleness >= 1 (batches in flight ahead of the learner)")
    elif rl.max_staleness < 0:
        bad("rl.max_staleness", rl.max_staleness, "must be >= 0", "e.g. 1")


def _check_opt(config, bad):
    o = config.opt
    if not o.lr > 0:
        bad("opt.lr", o.lr, "learning rate must be > 0", "e.g. 1e-6 for billion-parameter models")
    _one_of(bad, "opt.schedule", o.schedule, SCHEDULES)
    _int_at_least(bad, "opt.warmup_steps", o.warmup_steps, 0)
    if not 0 <= o.end_lr_ratio <= 1:
        bad("opt.end_lr_ratio", o.end_lr_ratio, "must be in [0, 1]", "e.g. 0.0 (decay to zero) or 0.1")
    if not o.eps > 0:
        bad("opt.eps", o.eps, "Adam epsilon must be > 0", "e.g. 1e-8")
    for k in ("b1", "b2"):
        v = o[k]
        if not 0 <= v < 1:
            bad(f"opt.{k}", v, "Adam beta must be in [0, 1)", "e.g. 0.9 / 0.999")
    if o.weight_decay < 0:
        bad("opt.weight_decay", o.weight_decay, "must be >= 0", "e.g. 0.0")
    if o.grad_clip < 0:
        bad("opt.grad_clip", o.grad_clip, "must be >= 0 (0 = off)", "e.g. 1.0")


def _check_sft(config, bad):
    s = config.sft
    if not s.enabled:
        return
    _int_at_least(bad, "sft.steps", s.steps, 1)
    _int_at_least(bad, "sft.batch_size", s.batch_size, 1)
    if _int_at_least(bad, "sft.num_demos", s.num_demos, 1) and isinstance(s.batch_size, int):
        if s.num_demos < s.batch_size:
            bad("sft.num_demos", s.num_demos, f"fewer demonstrations than one batch ({s.batch_size})",
                "raise --config.sft.num_demos or lower --config.sft.batch_size")
    if not s.lr > 0:
        bad("sft.lr", s.lr, "learning rate must be > 0", "e.g. 1e-3 for the tiny model")
    _one_of(bad, "sft.schedule", s.schedule, SCHEDULES)
    _int_at_least(bad, "sft.warmup_steps", s.warmup_steps, 0)
    _int_at_least(bad, "sft.seed_offset", s.seed_offset, 0)
    _int_at_least(bad, "sft.demo_concurrency", s.demo_concurrency, 1)
    _int_at_least(bad, "sft.ckpt_every_steps", s.ckpt_every_steps, 1)


def _check_workers(config, bad):
    w = config.workers
    if not _one_of(bad, "workers.backend", w.backend, config_schema.WORKER_BACKENDS):
        return
    _int_at_least(bad, "workers.num_workers", w.num_workers, 1)
    _int_at_least(bad, "workers.slots", w.slots, 1)
    if not (isinstance(w.ray_cpus, (int, float)) and w.ray_cpus >= 0):
        bad("workers.ray_cpus", w.ray_cpus, "must be a number >= 0", "e.g. 1.0 (0.5 packs two workers per CPU)")
    if w.backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            bad("workers.backend", w.backend, "Ray is not installed",
                "pip install -e '.[ray]', or use --config.workers.backend=processes")


def _check_ckpt_eval_log(config, bad):
    _int_at_least(bad, "ckpt.every_steps", config.ckpt.every_steps, 0)
    _int_at_least(bad, "ckpt.keep", config.ckpt.keep, 1)
    ev = config.eval
    _int_at_least(bad, "eval.every_steps", ev.every_steps, 0)
    _int_at_least(bad, "eval.num_tasks", ev.num_tasks, 1)
    if _int_at_least(bad, "eval.k", ev.k, 1) and ev.k > 1 and ev.temperature == 0:
        bad("eval.k", ev.k, "k > 1 attempts at temperature 0 are identical copies (Pass@k would equal Pass@1)",
            "set --config.eval.temperature=0.7 or --config.eval.k=1")
    if ev.temperature < 0:
        bad("eval.temperature", ev.temperature, "must be >= 0", "0 = greedy")
    _one_of(bad, "log.progress_bar", config.log.progress_bar, ("auto", "on", "off"))
    _one_of(bad, "log.library_level", str(config.log.library_level).upper(), ("DEBUG", "INFO", "WARNING", "ERROR"))
    if config.log.peak_flops < 0:
        bad("log.peak_flops", config.log.peak_flops, "must be >= 0", "0 = measure on CPU; else the chip's peak FLOP/s")


