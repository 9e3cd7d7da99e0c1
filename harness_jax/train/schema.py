"""The schema of the experiment config: each section a frozen dataclass (one line and one comment
per field), and the machinery that makes such a dataclass a config section.

A field's type, default and comment are written once, in its section class, with its allowed
values or bounds as ``option(...)`` metadata; the allowed values come from the registry next to
the code that uses them (a callable is read when the config is checked, so a registration made
later still counts). ``to_config_dict(cls)`` gives the ``ml_collections`` section (what presets
and ``--config.a.b=...`` change; ``None`` defaults become typed placeholders); ``read(cls, node,
path, bad)`` turns it back into the frozen dataclass, reporting every bad value as a
``config_problems.Problem`` (dotted path, value, fix)::

    @dataclasses.dataclass(frozen=True)
    class RolloutSection:
        mode: str = option("colocated", choices=lambda: tuple(rollout.ENGINES))   # which engine serves rollouts
        max_len: int = option(2048, at_least=2)                                  # tokens per slot

``train.spec`` resolves a whole config with these sections; the methods type their own sections
the same way (``harness_r1.config``). Adding a field is one line with its comment here.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import re
import typing
from typing import Callable, Optional, Union

import ml_collections
from ml_collections import config_dict

from harness_jax import sharding
from harness_jax.config_problems import Bad, Problem
from harness_jax.envs import base as envs_base, registry
from harness_jax.harness.workers import BACKENDS as WORKER_BACKENDS
from harness_jax.models.qwen3_5 import attention as model_attention, moe as model_moe, paged_attention, presets as model_presets
from harness_jax.models.qwen3_5.config import GDN_IMPLS, REMAT_POLICIES
from harness_jax.rl import losses
from harness_jax.rl import policy
from harness_jax.rl.learner import SCHEDULES
from harness_jax.sampling import runner as engine_runner, weight_sync
from harness_jax.train import builders, console, groups, rollout, task_tokenizer, telemetry


# ============================================================================================
# the machinery
# ============================================================================================
Choices = Union[tuple, Callable[[], tuple]]


def option(default, *, choices: Optional[Choices] = None, at_least: Optional[float] = None,
           above: Optional[float] = None, fix: str = ""):
    """A field of a typed section: ``default`` (a mutable default is not allowed: use a tuple),
    the allowed values (a tuple, or a callable returning them, e.g. a registry's names), an
    inclusive lower bound ``at_least`` or a strict one ``above``, and the fix named when the value
    is out of bounds (default: "set --config.<path> to ...")."""
    meta = {"choices": choices, "at_least": at_least, "above": above, "fix": fix}
    return dataclasses.field(default=default, metadata={"schema": meta})


def section(cls):
    """A section dataclass as a (frozen) dataclass field of another section (its defaults)."""
    return dataclasses.field(default_factory=cls)


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _base_type(tp):
    """``Optional[int]`` -> int, ``tuple[int, ...]`` -> tuple."""
    origin = typing.get_origin(tp)
    if origin is Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _base_type(args[0]) if len(args) == 1 else object
    return origin or tp


def to_config_dict(cls) -> ml_collections.ConfigDict:
    """The ``ml_collections`` section of the typed section ``cls`` (its defaults)."""
    out = ml_collections.ConfigDict()
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        tp = _base_type(hints[f.name])
        if dataclasses.is_dataclass(tp):
            out[f.name] = to_config_dict(tp)
        elif f.default is None:
            out[f.name] = config_dict.placeholder(tp)
        elif tp is dict:
            out[f.name] = config_dict.ConfigDict(dict(f.default_factory() if f.default is dataclasses.MISSING
                                                      else f.default), type_safe=False)
        else:
            out[f.name] = f.default
    return out


def _mapping(v) -> bool:
    """A dict, a ConfigDict, or a read-only view of one (anything with ``keys`` and ``[]``)."""
    return hasattr(v, "keys") and hasattr(v, "__getitem__")


def _to_plain(v):
    if _mapping(v):
        return {k: _to_plain(v[k]) for k in v.keys()}
    if isinstance(v, (list, tuple)):
        return tuple(_to_plain(x) for x in v)
    return v


def _typed(tp, v):
    """``v`` as ``tp`` when it is one (ints are floats too), else a ``TypeError``."""
    if v is None:
        return None
    if tp is bool:
        if isinstance(v, bool):
            return v
    elif tp is int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    elif tp is float:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    elif tp is str:
        if isinstance(v, str):
            return v
    elif tp is tuple:
        if isinstance(v, (list, tuple)):
            return tuple(_to_plain(v))
    elif tp is dict:
        if _mapping(v):
            return _to_plain(v)
    else:
        return v
    raise TypeError(tp.__name__)


def read(cls, node, path: str, bad: Bad):
    """The typed section ``cls`` from the config section ``node`` at dotted ``path``; every bad
    value is reported through ``bad`` (a field that is wrong keeps its default, so reading goes
    on and all problems of a config come out at once). A section class may define
    ``check(self, bad)`` for rules among its own fields, and ``other_sections()`` (a static
    method) naming sub-sections that others read (the environment families' in ``env``)."""
    if node is None or not hasattr(node, "keys"):
        bad(path, node, "section is missing", "start the config from experiments.configs.common.base_config()")
        return cls()
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    extra = set(cls.other_sections()) if hasattr(cls, "other_sections") else set()
    for k in sorted(set(node.keys()) - names - extra):
        bad(f"{path}.{k}", node[k], "not a field of this section", f"use one of {', '.join(sorted(names))}")
    values = {}
    for f in dataclasses.fields(cls):
        where = f"{path}.{f.name}"
        tp = _base_type(hints[f.name])
        if f.name not in node:
            bad(where, None, "field is missing", "start the config from experiments.configs.common.base_config()")
            continue
        v = node[f.name]
        if dataclasses.is_dataclass(tp):
            values[f.name] = read(tp, v, where, bad)
            continue
        try:
            v = _typed(tp, v)
        except TypeError:
            bad(where, v, f"must be a {tp.__name__}", f"set --config.{where} to a {tp.__name__}")
            continue
        if v is None and f.default is not None:
            bad(where, v, "must be set", f"set --config.{where}")
            continue
        if _in_bounds(f.metadata.get("schema"), where, v, bad, integer=tp is int):
            values[f.name] = v
    out = cls(**values)
    check = getattr(out, "check", None)
    if check is not None:
        check(lambda sub, value, problem, fix: bad(f"{path}.{sub}", value, problem, fix))
    return out


def _in_bounds(meta, where: str, v, bad: Bad, integer: bool = False) -> bool:
    if not meta or v is None:
        return True
    choices = meta["choices"]
    if choices is not None:
        allowed = tuple(choices() if callable(choices) else choices)
        if v not in allowed:
            bad(where, v, f"unknown value; allowed: {', '.join(map(repr, allowed))}",
                meta["fix"] or f"set --config.{where} to one of {', '.join(map(str, allowed))}")
            return False
    for bound, ok, words in ((meta["at_least"], lambda b: v >= b, ">="), (meta["above"], lambda b: v > b, ">")):
        if bound is not None and not ok(bound):
            bad(where, v, f"must be {'an integer ' if integer else ''}{words} {bound}",
                meta["fix"] or f"set --config.{where} to a value {words} {bound}")
            return False
    return True


def one_of(bad: Bad, path: str, value, choices) -> bool:
    """The membership check of a value outside a typed section."""
    if value not in choices:
        bad(path, value, f"unknown value; allowed: {', '.join(map(repr, choices))}",
            f"set --config.{path} to one of {', '.join(map(str, choices))}")
        return False
    return True


def int_at_least(bad: Bad, path: str, value, lo, fix: Optional[str] = None) -> bool:
    """The integer lower-bound check of a value outside a typed section."""
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        bad(path, value, f"must be an integer >= {lo}", fix or f"set --config.{path} to a value >= {lo}")
        return False
    return True


def problems_collector() -> tuple[list, Bad]:
    """``(problems, bad)``: ``bad(path, value, problem, fix)`` appends a ``Problem``."""
    out: list = []

    def bad(path, value, problem, fix):
        out.append(Problem(path, value, problem, fix))
    return out, bad


# ============================================================================================
# sections (the schema: one line and one comment per field)
# ============================================================================================
KERNEL_FIELDS = ("gdn_impl", "moe_impl", "moe_capacity_factor", "moe_dispatch", "moe_gmm")   # model.arch fields that are runtime knobs


@dataclasses.dataclass(frozen=True)
class ArchSection:
    """``model.arch``: Qwen3_5Config fields replacing the preset's (None = keep the preset's
    value; ignored with ``model.hf_path``, whose config.json is the truth, except the kernel
    choices at the end, which are not architecture)."""

    vocab_size: Optional[int] = None             # vocabulary rows (>= the tokenizer's size)
    hidden_size: Optional[int] = None            # model width
    intermediate_size: Optional[int] = None      # dense SwiGLU width
    num_hidden_layers: Optional[int] = None      # decoder layers
    layer_types: Optional[tuple] = None          # per-layer "linear_attention" | "full_attention" (() = 3 linear : 1 full)
    num_attention_heads: Optional[int] = None    # gated attention query heads
    num_key_value_heads: Optional[int] = None    # gated attention kv heads (GQA)
    head_dim: Optional[int] = None               # attention head width
    linear_num_key_heads: Optional[int] = None   # Gated DeltaNet q/k heads
    linear_num_value_heads: Optional[int] = None  # Gated DeltaNet v heads
    linear_key_head_dim: Optional[int] = None    # Gated DeltaNet q/k head width
    linear_value_head_dim: Optional[int] = None  # Gated DeltaNet v head width
    num_experts: Optional[int] = None            # MoE experts (0 = dense MLP)
    num_experts_per_tok: Optional[int] = None    # MoE top-k
    moe_intermediate_size: Optional[int] = None  # per-expert SwiGLU width
    shared_expert_intermediate_size: Optional[int] = None  # shared expert width
    tie_word_embeddings: Optional[bool] = None   # LM head shares the embedding matrix
    max_position_embeddings: Optional[int] = None  # longest sequence the RoPE tables cover
    eos_token_id: Optional[int] = None           # end-of-turn token id of the tokenizer
    pad_token_id: Optional[int] = None           # padding token id of the tokenizer
    # kernel choices (runtime knobs: they also apply with model.hf_path; docs/model.md)
    gdn_impl: Optional[str] = option(None, choices=GDN_IMPLS)  # Gated DeltaNet: "jnp" (lax.scan reference) | "pallas" (TPU Mosaic / GPU Triton kernels)
    moe_impl: Optional[str] = option(None, choices=model_moe.IMPLS)  # MoE: "auto" (expert parallel on a multi-device mesh) | "ep" | "sorted" | "dense"
    moe_capacity_factor: Optional[float] = option(None, at_least=0, fix="0 = dropless")  # expert parallel: 0 = dropless, else rows per device pair = factor * rows / ep (drops counted)
    moe_dispatch: Optional[str] = option(None, choices=model_moe.DISPATCHES)  # expert parallel: "all_to_all" (padded; any backend) | "ragged" (ragged_all_to_all; TPU/GPU)
    moe_gmm: Optional[str] = option(None, choices=model_moe.GMMS)  # grouped matmul: "auto" | "ragged_dot" | "blocked"

    def overrides(self) -> dict:
        """The set (non-None) fields as Qwen3_5Config keyword arguments."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def kernels(self) -> dict:
        """The set kernel choices (``KERNEL_FIELDS``): runtime knobs, applied with ``hf_path`` too."""
        return {k: v for k, v in self.overrides().items() if k in KERNEL_FIELDS}


@dataclasses.dataclass(frozen=True)
class ModelSection:
    """``model``: the policy (a named preset or a Hugging Face checkpoint) and its tokenizer."""

    preset: str = "tiny"                          # harness_jax.models.qwen3_5.presets name (tiny, tiny_moe, small_10m, medium_80m, 9b, 35b_a3b)
    hf_path: str = ""                             # Hugging Face checkpoint dir: its config.json and weights replace preset + arch
    init_from: str = ""                           # initial weights from another run's Orbax checkpoint (its workdir or checkpoints/ dir; "" = none); ignored on resume
    arch: ArchSection = section(ArchSection)      # typed Qwen3_5Config fields replacing the preset's (None = keep)
    tokenizer: str = option("qwen", choices=lambda: tuple(rollout.TOKENIZERS))  # "qwen": Qwen3.5 vocabulary (or hf_path's own) | "task_bpe": small BPE trained on the env's train text
    tokenizer_vocab: int = option(2048, at_least=512)  # task_bpe vocabulary size (incl. byte alphabet and Qwen chat specials)
    tokenizer_pretokenizer: str = option("bytelevel", choices=lambda: tuple(task_tokenizer.PRETOKENIZERS))  # task_bpe word splitting: "bytelevel" (GPT-2 regex) | "isolate" (each space/punctuation char alone: a value has the same tokens in a question, in quotes and in backticks)
    tokenizer_cache_dir: str = ""                 # where the packaged Qwen3.5 tokenizer is built once ("" = $HARNESS_JAX_CACHE or ~/.cache/harness_jax)
    dtype: str = option("float32", choices=lambda: tuple(policy.DTYPES))  # compute dtype ("float32" | "bfloat16")
    param_dtype: str = option("float32", choices=lambda: tuple(policy.DTYPES))  # master parameter dtype (also of weights loaded from hf_path)
    remat: str = option("none", choices=REMAT_POLICIES)  # decoder-layer remat policy: "none" | "full" | "dots" | "offload" (docs/model.md, "Memory plan")
    scan_layers: bool = False                     # scan over repeated layer cycles (compile time O(1) in depth)
    attention: str = option("reference", choices=lambda: tuple(model_attention.names()))  # attention implementation: "reference" | "xla" | "splash" (TPU) | "pallas_gpu" (GPU)
    attention_block_q: int = option(0, at_least=0)  # attention query tile (0 = the implementation's default)
    attention_block_kv: int = option(0, at_least=0)  # attention key/value tile (0 = the implementation's default)
    reduce_scatter_dtype: str = option("float32", choices=lambda: tuple(policy.DTYPES))  # dtype FSDP weight gradients are reduce-scattered in ("float32" | "bfloat16")

    def check(self, bad) -> None:
        if not self.hf_path and self.preset.lower().replace("-", "_").replace(".", "_") not in model_presets.names():
            bad("preset", self.preset, "unknown model preset",
                f"use one of {', '.join(model_presets.names())} or set --config.model.hf_path")
        if self.tokenizer == "task_bpe":
            v = self.arch.vocab_size
            if not self.hf_path and v is not None and v < self.tokenizer_vocab:
                bad("arch.vocab_size", v, f"smaller than model.tokenizer_vocab={self.tokenizer_vocab}",
                    f"set --config.model.arch.vocab_size={self.tokenizer_vocab}")
            if self.hf_path:
                bad("tokenizer", self.tokenizer, "a pretrained checkpoint (hf_path) comes with its own vocabulary",
                    "use --config.model.tokenizer=qwen with hf_path")


@dataclasses.dataclass(frozen=True)
class MeshSection:
    """``mesh``: the learner's device mesh."""

    shape: tuple = (1, -1, 1, 1)                  # learner mesh over (data, fsdp, tensor, expert); one -1 takes the rest
    axes: tuple = sharding.MESH_AXES              # mesh axis names (fixed by harness_jax.sharding)
    rules: Optional[tuple] = None                 # logical-axis rules ((logical, mesh_axis|None), ...); None = harness_jax.sharding.TRAIN_RULES
    num_devices: int = -1                         # devices the run uses: the first N of jax.devices() (-1 = all); validated against the mesh
    platform: str = option("cpu", choices=lambda: tuple(builders.PLATFORMS))  # target platform ("cpu" | "gpu" | "tpu"); "cpu" with log.peak_flops=0 measures the MFU peak
    chip: str = option("", choices=lambda: ("",) + tuple(builders.CHIP_HBM))  # accelerator the preset is sized for ("h100" | "h200" | "v5p" | "v6e"; "" = none): its AOT memory budget (train/aot.py) and, without log.peak_flops, the MFU peak

    def check(self, bad) -> None:
        axes = sharding.MESH_AXES
        if tuple(self.axes) != axes:
            bad("axes", tuple(self.axes), f"must be {axes}", f"set --config.mesh.axes='{axes}'")
        if len(self.shape) != len(axes) or not all(isinstance(s, int) for s in self.shape):
            bad("shape", self.shape, f"needs {len(axes)} integers (one per axis {axes})", "e.g. --config.mesh.shape='(1,-1,1,1)'")
        if not (self.num_devices == -1 or self.num_devices >= 1):
            bad("num_devices", self.num_devices, "must be -1 (all devices) or >= 1", "e.g. -1")
        names = {r[0] for r in sharding.TRAIN_RULES}
        for i, rule in enumerate(self.rules or ()):
            ok = (isinstance(rule, (tuple, list)) and len(rule) == 2 and isinstance(rule[0], str)
                  and (rule[1] is None or rule[1] in axes
                       or (isinstance(rule[1], (tuple, list)) and all(a in axes for a in rule[1]))))
            if not ok:
                bad(f"rules[{i}]", rule, "a rule is (logical_name, mesh_axis | None | tuple of mesh axes)",
                    f"use mesh axes from {axes}")
            elif rule[0] not in names:
                bad(f"rules[{i}]", rule, f"unknown logical axis {rule[0]!r}",
                    f"use the logical names of harness_jax.sharding.TRAIN_RULES: {sorted(names)}")


@dataclasses.dataclass(frozen=True)
class RolloutSection:
    """``rollout``: the rollout engine (``train.rollout.ENGINES``), its weight sync and sampling."""

    mode: str = option("colocated", choices=lambda: tuple(rollout.ENGINES))  # "colocated": embedded JaxEngine on the learner's devices | "disaggregated": SGLang-API servers (SGLang or launch/serve.py)
    server_urls: tuple = ()                       # disaggregated: base URLs of the servers ("http://host:port", ...)
    sync_dir: str = ""                            # disaggregated: dir for the bf16 weight exports, readable by every server ("" = memory-backed /dev/shm/harness_jax/<name>; servers on other hosts need a shared mount)
    sync_method: str = option("disk", choices=weight_sync.SYNC_METHODS)  # disaggregated weight sync: "disk" (bf16 export + update_weights_from_disk) | "distributed" (update_weights_from_distributed: torch.distributed broadcasts) | "tensor" (update_weights_from_tensor, same host); servers without it fall back to disk
    sync_dtype: str = option("bfloat16", choices=lambda: tuple(policy.DTYPES))  # disaggregated weight sync: dtype of the weight matrices sent (1-D parameters keep theirs)
    sync_bucket_mb: int = option(512, at_least=1)  # distributed / tensor weight sync: megabytes of tensors per update call
    sync_group_backend: str = option("nccl", choices=("nccl", "gloo"))  # distributed weight sync: torch backend of the weights update group ("nccl": GPU servers | "gloo": CPU)
    sync_group_address: str = "127.0.0.1"         # distributed weight sync: this host's address, where the servers join the group
    sync_every: int = option(1, at_least=1)       # weight sync every N learner steps (1 = on-policy)
    request_timeout_s: float = option(120.0, above=0)  # disaggregated: per-request HTTP timeout
    max_slots: int = option(16, at_least=1)       # embedded engine: concurrent sequences (continuous-batching slots)
    max_len: int = option(2048, at_least=2)       # embedded engine: tokens per slot (prompt + all turns)
    prefill_buckets: tuple = (32, 128, 512)       # embedded engine: prefill chunk lengths (those < max_len are used)
    decode_steps: int = option(8, at_least=1)     # embedded engine: decode tokens per host round trip
    cache_dtype: str = option("auto", choices=lambda: ("auto",) + tuple(policy.DTYPES))  # embedded engine: KV and conv cache dtype ("auto": bfloat16 when mesh.platform is tpu/gpu, else float32 | "float32" | "bfloat16"); the GDN recurrent state is always float32
    cache_kind: str = option("paged", choices=engine_runner.CACHE_KINDS)  # embedded engine KV cache: "paged" (a page pool shared by the slots; memory follows live tokens) | "contiguous" (max_len per slot)
    page_size: int = option(16, at_least=1)       # paged KV cache: tokens per page
    kv_pages: int = option(0, at_least=0, fix="0 = no limit")  # paged KV cache: pages in the pool (0 = max_slots * max_len tokens, never preempts; fewer: the youngest request is preempted and recomputed when it runs out)
    token_budget: int = option(0, at_least=0)     # embedded engine: tokens per mixed step, decoding rows' plus prompt chunks (0 = the largest prefill bucket + max_slots)
    prefill_rows: int = option(8, at_least=1)     # embedded engine: most requests prefilling in one mixed step
    overlap: bool = True                          # embedded engine: dispatch the next decode step before the previous one is read back
    attention_impl: str = option("auto", choices=("auto",) + paged_attention.IMPLS)  # embedded engine paged attention: "auto" (Pallas on tpu/gpu, XLA on cpu) | "xla" | "pallas_tpu" | "pallas_gpu" | "reference"
    serve_tensor_parallel: int = option(1, at_least=1)  # embedded engine serving copy (compute dtype, rebuilt each sync): tensor-parallel degree over the learner's devices (1 = replicated weights, data-parallel rows)
    temperature: float = option(1.0, above=0, fix="set --config.rollout.temperature=1.0 (training rollouts must sample: at 0 every group is identical)")  # sampling temperature for training rollouts (log-probs use the same)
    top_p: float = 1.0                            # keep 1.0 for unbiased importance ratios
    top_k: int = -1                               # -1 = off (keep off for training)
    max_new_tokens: int = option(96, at_least=1)  # tokens per assistant turn
    concurrency: int = option(16, at_least=1)     # episodes run concurrently through the executor

    def check(self, bad) -> None:
        if self.mode == "disaggregated":
            if not self.server_urls:
                bad("server_urls", self.server_urls, "disaggregated mode needs at least one server",
                    "start launch/serve.py or SGLang and pass --config.rollout.server_urls='(\"http://host:port\",)'")
            for i, u in enumerate(self.server_urls):
                if not (isinstance(u, str) and u.startswith(("http://", "https://"))):
                    bad(f"server_urls[{i}]", u, "not an http(s) URL", "use 'http://host:port'")
        if self.max_len <= self.max_new_tokens:
            bad("max_len", self.max_len, f"must exceed max_new_tokens={self.max_new_tokens} (the prompt needs room)",
                "raise --config.rollout.max_len")
        if not 0 < self.top_p <= 1:
            bad("top_p", self.top_p, "must be in (0, 1]", "set --config.rollout.top_p=1.0")
        if self.top_k == 0 or self.top_k < -1:
            bad("top_k", self.top_k, "must be -1 (off) or >= 1", "set --config.rollout.top_k=-1")
        if not self.prefill_buckets or not all(isinstance(b, int) and b >= 1 for b in self.prefill_buckets):
            bad("prefill_buckets", self.prefill_buckets, "needs positive integer chunk lengths", "e.g. '(32, 128, 512)'")
        if self.cache_kind == "paged" and 0 < self.kv_pages * self.page_size < self.max_len:
            bad("kv_pages", self.kv_pages, f"{self.kv_pages} pages of {self.page_size} tokens cannot hold one request of "
                f"max_len={self.max_len}", f"set --config.rollout.kv_pages >= {-(-self.max_len // self.page_size)} (0 = no limit)")

    @property
    def colocated(self) -> bool:
        return self.mode == "colocated"


@dataclasses.dataclass(frozen=True)
class TasksetSection:
    """``env.taskset``: a built TFDS task set of the selected family (launch/build_tasksets.py)."""

    data_dir: str = ""                            # built TFDS task sets (launch/build_tasksets.py --data_dir); "" = tasks from the env registry
    config: str = "default"                       # builder config of the task set (its directory under <data_dir>/<env.name>_tasks/, e.g. n20000-seed0-test.n500)
    version: str = ""                             # dataset version "X.Y.Z" ("" = the newest built)

    def check(self, bad) -> None:
        if self.version and not re.fullmatch(r"\d+\.\d+\.\d+", self.version):
            bad("version", self.version, "not a dataset version", "use 'X.Y.Z' (e.g. '1.0.0') or '' for the newest")
        if self.data_dir and not self.config:
            bad("config", self.config, "empty", "name the builder config, e.g. 'n20000-seed0-test.n500'")


@dataclasses.dataclass(frozen=True)
class EnvironmentSection:
    """``env``: the environment (registry name; its family's section ``env.<name>`` is read too)
    and the task splits."""

    name: str = option("dbbench", choices=lambda: tuple(registry.names()))  # harness_jax.envs.registry name; its section env.<name> below is used
    protocol: str = option("text", choices=envs_base.PROTOCOLS)  # "text" | "function": the env's action protocol, the base harness H0's and the SFT demonstrations'
    train_split: str = "train"                    # split the task stream reads ("train" | "search" | "selection"; never "test")
    eval_split: str = "selection"                 # split periodic evaluation reads
    num_tasks: int = option(256, at_least=1)      # generated tasks per split (file-backed data: at most this many evaluation tasks)
    task_seed: int = option(0, at_least=0)        # seed of the task generator (each split draws its own stream from it)
    max_turns: int = option(6, at_least=0, fix="set --config.env.max_turns >= 1 (0 = the harness's own limit)")  # per-episode turn limit (overrides the harness's when > 0)
    taskset: TasksetSection = section(TasksetSection)  # a built task set instead of the registry's loader

    @staticmethod
    def other_sections() -> tuple:
        """``env.<family>``: each registered family's own section (read by ``_env_spec``)."""
        return tuple(registry.names())


@dataclasses.dataclass(frozen=True)
class HarnessSection:
    """``harness``: the base harness and the executor's limits (``spec.executor_config``)."""

    spec: str = ""                                # harness spec file (JSON/YAML) or registered name (harness_jax.harness.presets.names()); "" = H0
    thinking: bool = False                        # Qwen3.5 thinking mode in the chat template
    infra_retries: int = option(2, at_least=0)    # executor: extra attempts of an episode after an infrastructure failure
    hook_timeout_s: float = option(1.0, above=0)  # executor: time limit of one sandboxed overlay hook call
    hook_workers: int = option(4, at_least=1)     # sandbox processes of the shared hook pool (run_hook)
    overlay_workers: int = option(2, at_least=1)  # sandbox processes of each overlay's own pool


@dataclasses.dataclass(frozen=True)
class RLSection:
    """``rl``: GRPO (groups, loss, packing, dynamic sampling, asynchrony)."""

    group_size: int = option(4, at_least=2, fix="GRPO compares rollouts within a group; set --config.rl.group_size=4 (or more)")  # G rollouts per task (group-relative advantages need G >= 2)
    tasks_per_step: int = option(4, at_least=1)   # tasks per rollout batch (episodes per step = G * tasks_per_step)
    eps_low: float = 0.2                          # clip 1 - eps_low
    eps_high: float = option(0.28, at_least=0)    # clip 1 + eps_high (clip-higher)
    dual_clip: float = 0.0                        # dual-clip constant c (> 1) for negative advantages; 0 = off
    tis_mode: str = option("cap", choices=lambda: tuple(losses.TIS_WEIGHTS))  # truncated importance weight (rl.losses.TIS_WEIGHTS): "cap" | "mask" | "literal" | "none"
    tis_cap: float = option(2.0, above=0, fix="e.g. 2.0 (or --config.rl.tis_mode=none)")  # "cap"/"literal": cap C of the importance weight
    tis_low: float = 0.0                          # "mask": lower bound of the kept importance weights
    tis_high: float = 2.0                         # "mask": upper bound of the kept importance weights
    agg: str = option("token_mean", choices=lambda: tuple(losses.AGGREGATIONS))  # loss aggregation (rl.losses.AGGREGATIONS): "token_mean" | "seq_mean_token_mean" | "constant"
    norm_constant: float = option(1.0, above=0)   # "constant" aggregation: loss sum / (sequences * norm_constant)
    adv_eps: float = option(1e-6, above=0, fix="e.g. 1e-6 (it guards the division by the group std)")  # eps in (R - mean) / max(std, eps)
    adv_scale: str = option("std", choices=lambda: tuple(losses.ADV_SCALES))  # advantage scale (rl.losses.ADV_SCALES): "std" | "none" (Dr.GRPO)
    adv_baseline: str = option("mean", choices=lambda: tuple(losses.ADV_BASELINES))  # advantage baseline (rl.losses.ADV_BASELINES): "mean" | "loo" (RLOO)
    kl_coef: float = option(0.0, at_least=0)      # KL-to-reference coefficient (0 = no reference; else the policy RL starts from)
    kl_estimator: str = option("k3", choices=lambda: tuple(losses.KL_ESTIMATORS))  # KL estimator (rl.losses.KL_ESTIMATORS): "k1" | "k2" | "k3"
    kl_clamp: float = option(10.0, above=0)       # per-token KL estimate clamped to [-kl_clamp, kl_clamp]
    entropy_coef: float = 0.0                     # entropy bonus
    router_aux_loss: bool = True                  # MoE models: add router_aux_loss_coef (from the model config; Qwen3.5: 0.001) x the router load-balancing loss
    neg_adv_weight: float = option(1.0, at_least=0, fix="1 = plain GRPO, e.g. 0.5 damps failures")  # multiplies negative advantages (1 = plain GRPO; < 1 damps the failure side of the gradient)
    reference_kl: bool = True                     # keep the policy RL starts from to log learner/kl_to_ref (one parameter copy, one forward per update)
    skip_no_signal: bool = True                   # no optimizer step on a batch whose advantages are all 0 (AdamW's momentum would still move the weights)
    log_entropy: bool = True                      # log the policy's token entropy (learner/entropy; one more pass over the vocabulary)
    epochs: int = option(1, at_least=1)           # passes over each rollout batch
    mini_batches: int = option(1, at_least=1)     # optimizer steps per epoch
    micro_batches: int = option(1, at_least=1)    # gradient accumulation inside a mini-batch
    recompute_old_logp: bool = True               # old_logp from the trainer at step start (False = use rollout logprobs)
    pack_len: int = option(2048, at_least=16)     # longest packed row (tokens) of a TrainBatch
    pack_buckets: tuple = (256, 512, 1024, 2048, 4096, 8192, 16384)  # shorter row lengths a batch may use (those < pack_len)
    pad_token_id: int = option(0, at_least=0)     # token id in the padding positions of packed rows (masked out)
    logit_chunk: int = option(0, at_least=0, fix="set --config.rl.logit_chunk=0 (whole rows) or e.g. 1024")  # positions per LM-head chunk in the learner (0 = all at once; large vocab x long rows need chunks)
    dynamic_sampling: str = option("off", choices=groups.DYNAMIC_SAMPLING)  # "off" | "skip" (drop zero-variance groups) | "oversample" (refill batch)
    max_oversample_rounds: int = option(2, at_least=0)  # "oversample": extra rollout rounds to replace zero-variance groups
    async_mode: bool = False                      # False = synchronous on-policy; True = rollouts overlap training
    max_staleness: int = option(1, at_least=0)    # async: at most this many batches in flight ahead of the learner

    def check(self, bad) -> None:
        if self.neg_adv_weight > 1:
            bad("neg_adv_weight", self.neg_adv_weight, "must be in [0, 1]", "1 = plain GRPO, e.g. 0.5 damps failures")
        if not 0 <= self.eps_low < 1:
            bad("eps_low", self.eps_low, "must be in [0, 1) (the lower clip is 1 - eps_low)", "e.g. 0.2")
        if self.dual_clip and self.dual_clip <= 1:
            bad("dual_clip", self.dual_clip, "dual-clip constant must be > 1 (or 0 = off)", "e.g. 3.0 or 0")
        if not 0 <= self.tis_low <= self.tis_high:
            bad("tis_low", (self.tis_low, self.tis_high), "the 'mask' interval needs 0 <= tis_low <= tis_high",
                "e.g. --config.rl.tis_low=0.5 --config.rl.tis_high=2.0")
        if not all(isinstance(b, int) and b >= 1 for b in self.pack_buckets):
            bad("pack_buckets", self.pack_buckets, "needs positive integer row lengths", "e.g. '(512, 1024, 2048)' or '()'")
        if self.async_mode and self.max_staleness < 1:
            bad("max_staleness", self.max_staleness, "must be an integer >= 1",
                "async mode needs --config.rl.max_staleness >= 1 (batches in flight ahead of the learner)")


@dataclasses.dataclass(frozen=True)
class OptSection:
    """``opt``: AdamW and the learning-rate schedule (GRPO; the AdamW settings also for SFT)."""

    lr: float = option(1e-5, above=0, fix="e.g. 1e-6 for billion-parameter models")  # peak learning rate
    schedule: str = option("constant", choices=SCHEDULES)  # "constant" | "cosine" | "linear" (after the warm-up)
    warmup_steps: int = option(0, at_least=0)     # linear warm-up steps
    end_lr_ratio: float = 0.0                     # cosine/linear: final lr / peak lr (also for SFT)
    b1: float = 0.9                               # AdamW beta1 (also for SFT)
    b2: float = 0.999                             # AdamW beta2 (also for SFT)
    eps: float = option(1e-8, above=0)            # AdamW epsilon (also for SFT)
    weight_decay: float = option(0.0, at_least=0)  # AdamW weight decay (also for SFT)
    grad_clip: float = option(1.0, at_least=0, fix="e.g. 1.0 (0 = off)")  # global-norm clip (0 = off; also for SFT)

    def check(self, bad) -> None:
        if not 0 <= self.end_lr_ratio <= 1:
            bad("end_lr_ratio", self.end_lr_ratio, "must be in [0, 1]", "e.g. 0.0 (decay to zero) or 0.1")
        for k in ("b1", "b2"):
            if not 0 <= getattr(self, k) < 1:
                bad(k, getattr(self, k), "Adam beta must be in [0, 1)", "e.g. 0.9 / 0.999")


@dataclasses.dataclass(frozen=True)
class SFTSection:
    """``sft``: the SFT warm start on the family's demonstrations (``train.sft_warmstart``)."""

    enabled: bool = False                         # run SFT on gold demonstrations before GRPO
    num_demos: int = option(256, at_least=1)      # demonstrations recorded (generator tasks played by the family's demonstration policy)
    keep_failed_demos: bool = False               # also train on demonstrations the environment scores as failures (a weak teacher's, e.g. kv_lookup); False: successful ones only
    steps: int = option(100, at_least=1)          # SFT optimizer steps
    batch_size: int = option(8, at_least=1)       # demonstrations per SFT step
    lr: float = option(1e-3, above=0, fix="e.g. 1e-3 for the tiny model")  # SFT peak learning rate
    schedule: str = option("cosine", choices=SCHEDULES)  # SFT schedule after the warm-up: "constant" | "cosine" | "linear"
    warmup_steps: int = option(10, at_least=0)    # SFT linear warm-up steps
    seed_offset: int = option(1000, at_least=0)   # demo tasks use env.task_seed + this (disjoint from the GRPO stream)
    demo_concurrency: int = option(32, at_least=1)  # demonstrations recorded concurrently through the executor
    ckpt_every_steps: int = option(50, at_least=1)  # SFT checkpoint period (a killed warm start resumes from the last one)
    cache_dir: str = ""                           # local cache of finished warm starts keyed by their config ("" = off); runs with equal keys share one

    def check(self, bad) -> None:
        if self.enabled and self.num_demos < self.batch_size:
            bad("num_demos", self.num_demos, f"fewer demonstrations than one batch ({self.batch_size})",
                "raise --config.sft.num_demos or lower --config.sft.batch_size")


@dataclasses.dataclass(frozen=True)
class WorkersSection:
    """``workers``: where episodes run (rollouts, evaluation, Harness-S validation, Harness-R1
    reruns); ``harness_jax.harness.workers`` documents the backends."""

    backend: str = option("inprocess", choices=WORKER_BACKENDS)  # "inprocess" (the driver's event loop) | "processes" (local worker processes) | "ray" (Ray actors)
    num_workers: int = option(2, at_least=1)      # worker processes / Ray actors (ignored in-process)
    slots: int = option(16, at_least=1)           # episodes in flight per worker (families that are not thread-safe, e.g. ALFWorld, run one per worker)
    ray_address: str = ""                         # ray: cluster address for ray.init ("" = a private local Ray on this machine; "auto" = the running cluster)
    ray_cpus: float = option(1.0, at_least=0, fix="e.g. 1.0 (0.5 packs two workers per CPU)")  # ray: CPUs each worker actor reserves

    def check(self, bad) -> None:
        if self.backend == "ray" and importlib.util.find_spec("ray") is None:
            bad("backend", self.backend, "Ray is not installed",
                "pip install -e '.[ray]', or use --config.workers.backend=processes")


@dataclasses.dataclass(frozen=True)
class CkptSection:
    """``ckpt``: GRPO checkpoints."""

    every_steps: int = option(4, at_least=0)      # save every N GRPO steps (and at the end, and on SIGTERM)
    keep: int = option(2, at_least=1)             # checkpoints kept
    resume: bool = True                           # resume from <workdir>/checkpoints when present
    export_hf: bool = True                        # also export the final policy as a Hugging Face dir (<workdir>/hf_final)


@dataclasses.dataclass(frozen=True)
class EvalSection:
    """``eval``: held-out evaluation during training."""

    every_steps: int = option(0, at_least=0)      # evaluate every N steps (0 = only before and after training)
    num_tasks: int = option(16, at_least=1)       # tasks from eval_split
    k: int = option(1, at_least=1)                # attempts per task (Pass@k / Avg@k)
    temperature: float = option(0.0, at_least=0, fix="0 = greedy")  # 0 = greedy (k must be 1 then); > 0 for Pass@k with k > 1
    at_start: bool = True                         # evaluate before training starts (before the SFT warm start when enabled)
    greedy: bool = True                           # also one greedy attempt per task (greedy_success beside Avg@k)

    def check(self, bad) -> None:
        if self.k > 1 and self.temperature == 0:
            bad("k", self.k, "k > 1 attempts at temperature 0 are identical copies (Pass@k would equal Pass@1)",
                "set --config.eval.temperature=0.7 or --config.eval.k=1")


@dataclasses.dataclass(frozen=True)
class LogSection:
    """``log``: what a run writes and shows."""

    tensorboard: bool = True                      # TensorBoard event files under <workdir>/tb (metrics.jsonl always)
    progress_bar: str = option("auto", choices=telemetry.PROGRESS_MODES)  # "auto" (only on a TTY) | "on" | "off"; one bar per phase (SFT, GRPO, eval, ...)
    library_level: str = option("WARNING", choices=console.LEVELS)  # log records of other libraries (Orbax, JAX, absl) below this level are dropped ("INFO" shows all)
    plot: bool = True                             # <workdir>/progress.png: success and rescue statistics over steps (local workdirs)
    peak_flops: float = option(0.0, at_least=0, fix="0 = measure on CPU; else the chip's peak FLOP/s")  # per-device peak FLOP/s for MFU (0 = measure a matmul at start-up on CPU)
    store_traces: bool = True                     # full traces in the trajectory store
    traces_dir: str = ""                          # local dir of the trajectory store ("" = <workdir>/traces; needed for gs:// workdirs)


SECTIONS = {"model": ModelSection, "mesh": MeshSection, "rollout": RolloutSection, "env": EnvironmentSection,
            "harness": HarnessSection, "rl": RLSection, "opt": OptSection, "sft": SFTSection,
            "workers": WorkersSection, "ckpt": CkptSection, "eval": EvalSection, "log": LogSection}


def defaults() -> ml_collections.ConfigDict:
    """The schema as an ``ml_collections`` config with its defaults (``common.base_config()``
    adds the environment families' sections)."""
    c = ml_collections.ConfigDict()
    c.name = "experiment"                 # run name (appears in metrics, traces and summary.json)
    c.seed = 0                            # master seed: data order, init, sampling
    c.num_steps = 8                       # GRPO steps (one step = one rollout batch -> learner update(s))
    for name, cls in SECTIONS.items():
        c[name] = to_config_dict(cls)
    return c
