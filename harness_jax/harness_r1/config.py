"""The ``r1`` section of a Harness-R1 engineer-training config, typed (``train.schema`` sections:
one line and one comment per field): the frozen target, the packet dataset, the cold-start
teacher, the SFT normalisation, the reward's options, the effect surface and the table's arms.

``r1_section()`` is the ConfigDict presets start from (``experiments/configs/harness_r1/common.py``);
``harness_r1.method`` reads it back into the frozen ``R1Section`` with every problem reported
(dotted path, value, fix), together with what Harness-R1 constrains in the rest of the config.
Every field is a plain typed value: the target's options are a typed sub-section
(``r1.target.options.<name>``, None = unset; ``targets.KNOWN_OPTIONS`` says which kind reads
which), the transfer targets a tuple of target dicts.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import ml_collections

from harness_jax.train.schema import option, section, to_config_dict
from harness_jax.harness.hooks import EFFECT_SURFACES
from harness_jax.harness_r1 import targets
from harness_jax.harness_r1.prompt import PromptSpec
from harness_jax.harness_r1.reward import ADV_BASELINES, RewardSpec
from harness_jax.rl import losses


@dataclasses.dataclass(frozen=True)
class TargetOptions:
    """``r1.target.options``: kind-specific ``TargetSpec`` options (None / empty = unset)."""

    dtype: Optional[str] = None                  # jax: "float32" | "bfloat16" weights and compute
    max_len: Optional[int] = None                # jax: tokens per engine slot
    tokenizer_path: Optional[str] = None         # jax, chat: the target's own tokenizer dir
    max_slots: Optional[int] = None              # jax: concurrent sequences of the engine
    decode_steps: Optional[int] = None           # jax: decode tokens per host round trip
    seed: Optional[int] = None                   # jax: the engine's sampling seed
    prefill_buckets: Optional[tuple] = None      # jax: prefill chunk lengths
    max_concurrency: Optional[int] = None        # sglang, chat: requests in flight
    timeout_s: Optional[float] = None            # sglang, chat: per-request HTTP timeout
    max_retries: Optional[int] = None            # sglang, chat: retries of a failed request
    tool_mode: Optional[str] = None              # chat: how tools reach the endpoint (targets.TOOL_MODES)
    extra_body: dict = dataclasses.field(default_factory=dict)  # chat: extra JSON fields of every request
    api_key_env: Optional[str] = None            # chat: NAME of the environment variable holding the key
    cache_dir: Optional[str] = None              # chat: response cache
    requests_per_minute: Optional[float] = None  # chat: client-side rate limit
    price_input_per_mtok: Optional[float] = None  # chat: USD per 1M prompt tokens (cost accounting)
    price_output_per_mtok: Optional[float] = None  # chat: USD per 1M completion tokens
    supports_seed: Optional[bool] = None         # chat: the endpoint honours the sampling seed
    kwargs: dict = dataclasses.field(default_factory=dict)  # factory: keyword arguments of the factory function

    def as_dict(self) -> dict:
        """The set options (what ``TargetSpec.options`` takes)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, {})}


@dataclasses.dataclass(frozen=True)
class TargetSection:
    """``r1.target``: the frozen target agent."""

    kind: str = option("factory", choices=targets.KINDS)  # harness_r1.TargetSpec kind: "jax" (HF dir, embedded JaxEngine) | "sglang" (SGLang or launch/serve.py servers) | "chat" (OpenAI-compatible endpoint) | "factory"
    model: str = ""                               # jax: HF weights dir; sglang/chat: the served model name; factory: a label
    urls: tuple = ()                              # sglang: server base URLs; chat: the endpoint's one base URL
    version: str = ""                             # pinned weights version ("" = derived: weights fingerprint, the server's weight_version, or "api")
    factory: str = ""                             # kind "factory": "module:function" returning a RolloutEngine
    options: TargetOptions = section(TargetOptions)  # kind-specific TargetSpec options (harness_r1.targets.KNOWN_OPTIONS of the kind)
    tokenizer: str = ""                           # tokenizer dir of the target's executor ("" = the Qwen3.5 tokenizer)
    temperature: float = option(0.0, at_least=0, fix="0 = greedy reruns (the public code)")  # target sampling temperature: 0 = greedy reruns (the public code); > 0 needs r1.packets.n_per_task >= 2 (paired seeded samples, a paired interval)
    max_new_tokens: int = option(512, at_least=1)  # target tokens per turn
    max_context: int = option(16384, at_least=16)  # target context limit in tokens (harness memory)
    concurrency: int = option(16, at_least=1)     # target episodes in flight per baseline or rerun

    def spec(self) -> targets.TargetSpec:
        """The ``TargetSpec`` (raises ``ValueError`` naming the field when it is inconsistent)."""
        return targets.TargetSpec(kind=self.kind, model=self.model, urls=tuple(self.urls), version=self.version,
                                  factory=self.factory, options=self.options.as_dict())

    def check(self, bad) -> None:
        try:
            self.spec()
        except ValueError as e:   # "TargetSpec.<field>: <problem>"
            field, _, msg = str(e).partition(": ")
            field = field.replace("TargetSpec.", "").split(".")[0]
            field = field if field in ("kind", "model", "urls", "version", "factory") else "options"
            bad(field, getattr(self, field), msg or str(e), "see harness_jax.harness_r1.TargetSpec (docs/harness_r1.md section 1)")


@dataclasses.dataclass(frozen=True)
class PacketsSection:
    """``r1.packets``: the failure-packet dataset."""

    train_batches: int = option(20, at_least=1, fix="GRPO needs train packets: set --config.r1.packets.train_batches >= 1")  # train packets: batches of batch_size tasks from env.train_split (batches without a failure give none)
    validation_batches: int = option(0, at_least=0)  # validation packets from the environment's "search" split
    held_out_batches: int = option(4, at_least=0)  # held-out packets from env.eval_split (evaluation during and after training)
    batch_size: int = option(10, at_least=1)      # tasks per batch B (the paper: 10)
    budget_tokens: int = option(18000, at_least=200, fix="a packet needs room for its header: set --config.r1.packets.budget_tokens >= 200")  # packet size limit (characters / 4)
    n_per_task: int = option(1, at_least=1)       # baseline (and rerun) episodes per task, each with its own paired sampling key; >= 2 when r1.target.temperature > 0
    seed: int = option(0, at_least=0)             # task draw and sampling seed of the baselines (reruns replay it)
    cache_dir: str = ""                           # baseline cache ("" = <workdir>/cache/baselines; share one per target across runs)


@dataclasses.dataclass(frozen=True)
class TeacherSection:
    """``r1.teacher``: the cold-start teacher."""

    kind: str = option("rule", choices=("rule", "endpoint"))  # cold-start teacher: "rule" (offline rule-based engineer) | "endpoint" (any OpenAI-compatible model)
    base_url: str = ""                            # endpoint teacher: base URL (e.g. https://api.example/v1)
    model: str = ""                               # endpoint teacher: model name
    api_key_env: str = ""                         # endpoint teacher: NAME of the environment variable holding the key
    price_in: float = 0.0                         # endpoint teacher: USD per 1M prompt tokens (cost accounting)
    price_out: float = 0.0                        # endpoint teacher: USD per 1M completion tokens
    temperature: float = 0.7                      # endpoint teacher: sampling temperature
    max_tokens: int = option(4096, at_least=1)    # endpoint teacher: completion tokens per reply
    k: int = option(1, at_least=1)                # teacher responses per train packet
    cache_dir: str = ""                           # endpoint teacher: response cache ("" = <workdir>/cache/teacher)
    filter_by_delta: bool = True                  # keep only teacher patches whose measured Delta_B on their own packet's batch is > min_delta_b
    min_delta_b: float = option(0.0, at_least=-1.0)  # the filter's threshold (a paired rerun of each teacher patch, cached like any reward)

    def check(self, bad) -> None:
        if not self.min_delta_b < 1.0:
            bad("min_delta_b", self.min_delta_b, "Delta_B never exceeds 1: nothing would be kept",
                "e.g. --config.r1.teacher.min_delta_b=0.0 (keep the patches that helped)")
        if self.kind == "endpoint":
            if not self.base_url.startswith(("http://", "https://")):
                bad("base_url", self.base_url, "the endpoint teacher needs an http(s) base URL",
                    "e.g. --config.r1.teacher.base_url=https://api.example/v1 (or --config.r1.teacher.kind=rule)")
            if not self.model:
                bad("model", self.model, "the endpoint teacher needs a model name", "set --config.r1.teacher.model=<served model>")
        if self.api_key_env and not self.api_key_env.replace("_", "a").isalnum():
            bad("api_key_env", "<hidden>", "must be the NAME of an environment variable, never the key",
                "e.g. --config.r1.teacher.api_key_env=OPENAI_API_KEY")


@dataclasses.dataclass(frozen=True)
class RewardSection:
    """``r1.reward``: the reward's options (``reward.RewardSpec``; the defaults are the paper's)."""

    invalid_reward: float = option(0.0, at_least=-10.0)  # reward of an invalid, unparsable or runtime no-op patch (the paper: 0)
    valid_bonus: float = option(0.0, at_least=-10.0)     # added to Delta_B of a valid patch that takes effect (the public code: 0)
    adv_baseline: str = option("group", choices=lambda: tuple(ADV_BASELINES))  # advantage baseline: "group" = mean/std of the K rewards (the paper) | "group_with_noop" = plus a virtual no-patch sample of reward 0

    def check(self, bad) -> None:
        for name in ("invalid_reward", "valid_bonus"):
            if getattr(self, name) > 10.0:
                bad(name, getattr(self, name), "must be in [-10, 10] (Delta_B itself lies in [-1, 1])",
                    f"e.g. --config.r1.reward.{name}=0.0 (the paper's default)")

    def spec(self) -> RewardSpec:
        return RewardSpec(invalid_reward=float(self.invalid_reward), valid_bonus=float(self.valid_bonus),
                          adv_baseline=self.adv_baseline)


@dataclasses.dataclass(frozen=True)
class TableSection:
    """``r1.table``: the arms of ``launch/evaluate_engineer.py`` (``harness_r1.evaluate.ARMS``)."""

    arms: tuple = ("default", "react", "self_refine", "rule", "sft", "grpo")  # arms of launch/evaluate_engineer.py ("prompt" needs r1.table.prompt_*)
    prompt_base_url: str = ""                     # "prompt" arm: a prompt-based engineer on this OpenAI-compatible endpoint
    prompt_model: str = ""                        # "prompt" arm: its model name (e.g. a frontier model)
    prompt_api_key_env: str = ""                  # "prompt" arm: NAME of the environment variable holding the key
    ablate: str = "grpo"                          # arm whose patches the hook ablation evaluates ("" = no ablation)
    transfer_targets: tuple = ()                  # TargetSpec dicts ({"kind", "model", "urls", ...}): the ablate arm's engineer transferred to these targets

    def check(self, bad) -> None:
        if "prompt" in self.arms and not (self.prompt_base_url and self.prompt_model):
            bad("prompt_base_url", self.prompt_base_url, "the 'prompt' arm needs an endpoint",
                "set --config.r1.table.prompt_base_url and --config.r1.table.prompt_model, or drop 'prompt'")
        for i, d in enumerate(self.transfer_targets):
            try:
                targets.TargetSpec.from_dict(dict(d))
            except (ValueError, TypeError) as e:
                bad(f"transfer_targets[{i}]", d, f"not a TargetSpec ({e})",
                    "give {'kind': 'chat', 'model': 'm', 'urls': ('https://api.example/v1',)} dicts")

    def transfer_specs(self) -> list:
        return [targets.TargetSpec.from_dict(dict(d)) for d in self.transfer_targets]


@dataclasses.dataclass(frozen=True)
class R1Section:
    """``r1``: what only Harness-R1 has (module docstring)."""

    target: TargetSection = section(TargetSection)      # the frozen target
    packets: PacketsSection = section(PacketsSection)   # the packet dataset
    teacher: TeacherSection = section(TeacherSection)   # the cold-start teacher
    sft_agg: str = option("dataset_token_mean", choices=lambda: tuple(losses.AGGREGATIONS))  # cold-start SFT normalisation (rl.losses.AGGREGATIONS): "dataset_token_mean" = METHODS' mean over all response tokens of the data set | "token_mean" (per batch)
    tokenizer_max_token_bytes: int = option(16, at_least=0)  # model.tokenizer="task_bpe": the engineer's BPE merges across words up to N bytes (0 = word-level, as the agent loop's)
    eval_attempts: int = option(3, at_least=1)    # reward: rerun rounds for infrastructure failures before a sample is left unscored
    pool_workers: int = option(0, at_least=0)     # reward: evaluate patches on N worker processes (EvaluationPool; 0 = in this process)
    require_code_hook_only: bool = False          # reward: only add_code_hook actions make a valid patch
    effect_surface: str = option("public", choices=EFFECT_SURFACES)  # hook effects the runtime honours: "public" = the public Harness-R1 runtime's per-benchmark surface (DBBench: no rewritten or forced actions) | "contract" = every kind of the hook contracts (wider than the paper)
    cross_batch: bool = True                      # held-out evaluation: also apply each packet's patches to the NEXT held-out packet's batch (cross-batch Delta_B beside the same-batch one)
    reward: RewardSection = section(RewardSection)  # the reward's options
    reference_rule: bool = True                   # evaluate the rule-based engineer on the held-out packets (the demonstration's reference)
    table: TableSection = section(TableSection)   # launch/evaluate_engineer.py's arms

    def prompt_spec(self) -> PromptSpec:
        """What the engineer is told about the run: the reward and the effect surface."""
        return PromptSpec(reward=self.reward.spec(), effect_surface=self.effect_surface)

    def check(self, bad) -> None:
        if self.target.temperature > 0 and self.packets.n_per_task < 2:
            bad("packets.n_per_task", self.packets.n_per_task,
                f"a sampling target (r1.target.temperature={self.target.temperature}) with one episode per "
                "task gives Delta_B without any estimate of its noise",
                "set --config.r1.packets.n_per_task=2 (or more; paired seeded samples per task), or "
                "--config.r1.target.temperature=0 (greedy reruns, as the public code)")
        t, seed = self.target, self.packets.seed
        kw_seed = int((t.options.kwargs or {}).get("seed", 0))
        if t.kind == "factory" and t.factory.endswith("scripted:dbbench_agent") and kw_seed != seed:
            bad("target.options.kwargs", dict(t.options.kwargs),
                f"the scripted agent indexes the tasks of seed {kw_seed} but the packets are drawn with "
                f"r1.packets.seed={seed}", f"set --config.r1.target.options.kwargs.seed={seed}")


def r1_section() -> ml_collections.ConfigDict:
    """The ``r1`` section with its defaults (mount it as ``config.r1``)."""
    return to_config_dict(R1Section)
