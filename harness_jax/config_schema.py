"""Typed pieces of the experiment config that more than one layer reads.

* **Environment sections.** Each environment family owns one typed section of the experiment
  config, ``config.env.<family>`` (its constructor and task-split options, one comment per field),
  registered here by name with the functions that turn it into ``registry.make`` and
  ``registry.load_split`` arguments. ``experiments/configs/common.base_config()`` adds every
  registered section, so ``--config.env.dbbench.engine=mariadb`` works for any preset. A new family
  registers its own section when its package is imported::

      from harness_jax import config_schema
      config_schema.register_env_section(config_schema.EnvSection(
          name="webshop", section=_section, env_kwargs=_env_kwargs, split_kwargs=_split_kwargs))

  ``env_kwargs(env)`` / ``split_kwargs(env)`` receive the whole ``config.env`` (so they can read the
  shared fields ``protocol``, ``num_tasks``, ``task_seed`` and their own ``env.<family>``).
* **Model config.** ``model_config(config.model)``: the Qwen3.5 config of a run (HF config.json or a
  named preset, then the typed ``model.arch`` fields, then the runtime knobs), shared by config
  validation and the builders.

This module imports nothing from the rest of ``harness_jax`` at import time, so every layer (env
families included) can import it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import ml_collections
from ml_collections import config_dict


# ---------------------------------------------------------------------------------------------
# environment sections
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EnvSection:
    name: str                                         # the env registry name (config.env.name)
    section: Callable[[], ml_collections.ConfigDict]  # the typed section, defaults = the family's
    env_kwargs: Callable[[Any], dict]                 # config.env -> registry.make(name, **kw)
    split_kwargs: Callable[[Any], dict]               # config.env -> registry.load_split(name, split, **kw)


_ENV_SECTIONS: dict[str, EnvSection] = {}


def register_env_section(section: EnvSection) -> None:
    """Adds (or replaces) the typed config section of one environment family."""
    _ENV_SECTIONS[section.name] = section


def env_sections() -> dict[str, EnvSection]:
    return dict(_ENV_SECTIONS)


def env_section(name: str) -> EnvSection:
    if name not in _ENV_SECTIONS:
        raise KeyError(f"environment {name!r} has no config section; registered: {sorted(_ENV_SECTIONS)}")
    return _ENV_SECTIONS[name]


def _or_none(v):
    """'' / () / 0 in a typed field mean "the family's default" (None)."""
    return None if v in ("", (), 0, None) else v


def _dbbench_section() -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.engine = "sqlite"               # SQL engine: "sqlite" (in-process) | "mariadb" (faithful MySQL, scripts/mariadb.sh)
    s.max_rounds = 15                 # the environment's own round limit (AgentBench: 15)
    s.answer_check = "strict"         # "strict" AgentBench answer matching | "lenient"
    s.strict_format = False           # text protocol: an unparsable reply ends the episode (AgentBench) instead of a hint
    s.statement_timeout_s = 5.0       # per-SQL-statement time limit (seconds)
    s.mariadb_socket = ""             # engine=mariadb: server socket ("" = $HARNESS_JAX_MARIADB_SOCKET or scripts/mariadb.sh's)
    s.tasks_path = ""                 # AgentBench DBBench jsonl, split by content hash ("" = the task generator)
    s.categories = ()                 # generator question categories (() = all)
    return s


def _dbbench_env_kwargs(env) -> dict:
    s = env.dbbench
    kw = dict(protocol=env.protocol, engine=s.engine, max_rounds=int(s.max_rounds), answer_check=s.answer_check,
              strict_format=bool(s.strict_format), statement_timeout_s=float(s.statement_timeout_s))
    socket = s.mariadb_socket
    if s.engine in ("mariadb", "mysql") and socket:
        kw["socket"] = socket
    return kw


def _dbbench_split_kwargs(env) -> dict:
    s = env.dbbench
    return dict(n=int(env.num_tasks), seed=int(env.task_seed), path=_or_none(s.tasks_path),
                categories=_or_none(tuple(s.categories)))


def _alfworld_section() -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.max_steps = 0                   # the environment's own step limit (0 = the family default)
    s.data_dir = ""                   # real ALFWorld games (train / valid_seen / valid_unseen dirs; "" = generated games)
    s.task_types = ()                 # generated task types (() = all six)
    s.cache_dir = ""                  # cache of generated games as JSON ("" = no cache)
    return s


def _alfworld_env_kwargs(env) -> dict:
    s = env.alfworld
    return dict(protocol=env.protocol, max_steps=_or_none(int(s.max_steps)), data_dir=_or_none(s.data_dir))


def _alfworld_split_kwargs(env) -> dict:
    s = env.alfworld
    return dict(n=int(env.num_tasks), seed=int(env.task_seed), data_dir=_or_none(s.data_dir),
                task_types=_or_none(tuple(s.task_types)), cache_dir=_or_none(s.cache_dir))


def _textworld_section() -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.max_steps = 0                   # the environment's own step limit (0 = the family default)
    s.cache_dir = ""                  # compiled games ("" = $HARNESS_JAX_TEXTWORLD_CACHE or ~/.cache/harness_jax/textworld)
    return s


def _textworld_env_kwargs(env) -> dict:
    s = env.textworld
    return dict(protocol=env.protocol, max_steps=_or_none(int(s.max_steps)), cache_dir=_or_none(s.cache_dir))


def _textworld_split_kwargs(env) -> dict:
    return dict(n=int(env.num_tasks), seed=int(env.task_seed))


for _s in (EnvSection("dbbench", _dbbench_section, _dbbench_env_kwargs, _dbbench_split_kwargs),
           EnvSection("alfworld", _alfworld_section, _alfworld_env_kwargs, _alfworld_split_kwargs),
           EnvSection("textworld", _textworld_section, _textworld_env_kwargs, _textworld_split_kwargs)):
    register_env_section(_s)


# ---------------------------------------------------------------------------------------------
# episode workers
# ---------------------------------------------------------------------------------------------
WORKER_BACKENDS = ("inprocess", "processes", "ray")


def workers_section() -> ml_collections.ConfigDict:
    """``config.workers``: where episodes run (rollouts, evaluation, Harness-S validation,
    Harness-R1 reruns); ``harness_jax.harness.workers`` documents the backends."""
    w = ml_collections.ConfigDict()
    w.backend = "inprocess"           # "inprocess" (the driver's event loop) | "processes" (local worker processes) | "ray" (Ray actors)
    w.num_workers = 2                 # worker processes / Ray actors (ignored in-process)
    w.slots = 16                      # episodes in flight per worker (families that are not thread-safe, e.g. ALFWorld, run one per worker)
    w.ray_address = ""                # ray: cluster address for ray.init ("" = a private local Ray on this machine; "auto" = the running cluster)
    w.ray_cpus = 1.0                  # ray: CPUs each worker actor reserves
    return w


# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------
def arch_section() -> ml_collections.ConfigDict:
    """``config.model.arch``: Qwen3_5Config fields replacing the preset's (None = keep the
    preset's value; ignored with ``model.hf_path``, whose config.json is the truth)."""
    a = ml_collections.ConfigDict()
    a.vocab_size = config_dict.placeholder(int)              # vocabulary rows (>= the tokenizer's size)
    a.hidden_size = config_dict.placeholder(int)             # model width
    a.intermediate_size = config_dict.placeholder(int)       # dense SwiGLU width
    a.num_hidden_layers = config_dict.placeholder(int)       # decoder layers
    a.layer_types = config_dict.placeholder(tuple)           # per-layer "linear_attention" | "full_attention" (() = 3 linear : 1 full)
    a.num_attention_heads = config_dict.placeholder(int)     # gated attention query heads
    a.num_key_value_heads = config_dict.placeholder(int)     # gated attention kv heads (GQA)
    a.head_dim = config_dict.placeholder(int)                # attention head width
    a.linear_num_key_heads = config_dict.placeholder(int)    # Gated DeltaNet q/k heads
    a.linear_num_value_heads = config_dict.placeholder(int)  # Gated DeltaNet v heads
    a.linear_key_head_dim = config_dict.placeholder(int)     # Gated DeltaNet q/k head width
    a.linear_value_head_dim = config_dict.placeholder(int)   # Gated DeltaNet v head width
    a.num_experts = config_dict.placeholder(int)             # MoE experts (0 = dense MLP)
    a.num_experts_per_tok = config_dict.placeholder(int)     # MoE top-k
    a.moe_intermediate_size = config_dict.placeholder(int)   # per-expert SwiGLU width
    a.shared_expert_intermediate_size = config_dict.placeholder(int)  # shared expert width
    a.tie_word_embeddings = config_dict.placeholder(bool)    # LM head shares the embedding matrix
    a.max_position_embeddings = config_dict.placeholder(int)  # longest sequence the RoPE tables cover
    a.eos_token_id = config_dict.placeholder(int)            # end-of-turn token id of the tokenizer
    a.pad_token_id = config_dict.placeholder(int)            # padding token id of the tokenizer
    return a


def arch_overrides(model) -> dict:
    """The set (non-None) fields of ``config.model.arch`` as Qwen3_5Config keyword arguments."""
    return {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in model.arch.items()
            if v is not None}


def runtime_overrides(model) -> dict:
    """Runtime knobs of the model config that come from ``config.model`` (with or without
    hf_path): rematerialisation and layer scanning."""
    return dict(remat=model.remat, scan_layers=bool(model.scan_layers))


def model_config(model):
    """The run's Qwen3_5Config from ``config.model``: ``hf_path``'s config.json (its architecture
    is the truth) or the named preset with the ``arch`` fields, plus the runtime knobs."""
    from harness_jax.models import qwen3_5

    if model.hf_path:
        return qwen3_5.Qwen3_5Config.from_hf(model.hf_path, **runtime_overrides(model))
    over = arch_overrides(model)
    if "num_hidden_layers" in over and "layer_types" not in over:
        over["layer_types"] = ()      # a new depth gets the default 3 linear : 1 full pattern
    over.update(runtime_overrides(model))
    return qwen3_5.presets.get(model.preset).replace(**over)
