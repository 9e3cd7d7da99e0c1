"""The experiment config, resolved once into frozen typed specs: the one place that reads it.

    from harness_jax.train import spec
    run = spec.resolve(config)                  # RunSpec; ConfigValidationError lists every problem
    problems = spec.find_problems(config)       # the same checks, as a list

``resolve`` reads every section of the config into its typed section (``train.schema``: types,
allowed values, bounds, the section's own ``check``), the selected environment family's section
(``EnvSpec``: ready ``make`` / ``load_split`` keyword arguments), the sections of the methods
(each registered method resolves its own, ``train.extensions``), the files the config names and
the model it describes, then the checks that span sections (``config_validation``). All problems
are reported at once, each with its dotted path and the fix.

What it returns, ``RunSpec``, is what the parts of a run take: the model, mesh, engine
(``rollout``), environment and workers sections for the run's builders (``train.builders``,
``train.rollout``), the episode runner's ``RunnerSpec`` (with the executor's ``ExecutorConfig``),
the learner's ``LearnerConfig``, the packer's ``PackConfig``, the collector's ``CollectorSpec``,
the loop's ``LoopSpec`` and each method's section. Nothing below the entry points reads the
config.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Mapping, Optional

from harness_jax import config_validation
from harness_jax.config_problems import ConfigValidationError, Problem
from harness_jax.data import tasksets
from harness_jax.envs import registry, splits
from harness_jax.harness import presets
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.models.qwen3_5 import presets as model_presets
from harness_jax.rl import losses
from harness_jax.rl import policy
from harness_jax.rl.batch import PackConfig
from harness_jax.rl.learner import LearnerConfig, OptimizerConfig
from harness_jax.train import extensions, rollout
from harness_jax.train.schema import (SECTIONS, CkptSection, EnvironmentSection, EvalSection, HarnessSection,
                                      LogSection, MeshSection, ModelSection, OptSection, RLSection, RolloutSection,
                                      SFTSection, TasksetSection, WorkersSection, int_at_least, one_of,
                                      read)

TRAIN_SPLITS = tuple(s for s in splits.SPLITS if s != "test")   # the test split is sealed


# ============================================================================================
# the resolved specs
# ============================================================================================
@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """The selected environment: the ``env`` section and ready ``registry.make`` /
    ``registry.load_split`` keyword arguments of its family (``None`` values dropped)."""

    name: str
    protocol: str
    train_split: str
    eval_split: str
    num_tasks: int
    task_seed: int
    max_turns: int
    taskset: TasksetSection
    env_kwargs: Mapping[str, Any]
    split_kwargs: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class RunnerSpec:
    """What the episode runner (``train.rollout.EpisodeRunner``) reads: the run id, the
    environment, concurrency, the executor's limits, the sandbox, and the sampling settings and
    budgets a sibling harness is run with."""

    run_id: str
    env_name: str
    concurrency: int
    executor: ExecutorConfig
    hook_workers: int
    temperature: float
    top_p: float
    top_k: int
    thinking: bool
    max_new_tokens: int
    max_len: int


@dataclasses.dataclass(frozen=True)
class CollectorSpec:
    """What ``train.collect.Collector`` reads: groups per step, dynamic sampling, the seed."""

    seed: int
    group_size: int
    tasks_per_step: int
    dynamic_sampling: str
    max_oversample_rounds: int


@dataclasses.dataclass(frozen=True)
class LoopSpec:
    """What ``train.loop.Trainer`` reads: steps, weight sync, asynchrony, advantages, evaluation,
    checkpoints, logging."""

    name: str
    num_steps: int
    sync_every: int
    async_mode: bool
    max_staleness: int
    adv_eps: float
    adv_scale: str
    adv_baseline: str
    eval: EvalSection
    ckpt: CkptSection
    log: LogSection
    sft_enabled: bool


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run, resolved (module docstring). ``sections`` are the typed config sections; the
    other fields are what the run's parts take."""

    name: str
    seed: int
    num_steps: int
    model: ModelSection
    mesh: MeshSection
    rollout: RolloutSection
    env: EnvSpec
    harness: HarnessSection
    rl: RLSection
    opt: OptSection
    sft: SFTSection
    workers: WorkersSection
    runner: RunnerSpec
    learner: LearnerConfig
    pack: PackConfig                      # row_multiple=1: the learner sets its own (``pack_config``)
    collector: CollectorSpec
    loop: LoopSpec
    methods: Mapping[str, Any]            # each method's resolved section, by section name
    base_harness: Any = None              # the run's H0 (``harness.spec`` or the family's H0) with the run's limits: a HarnessSpec

    def method(self, name: str):
        return self.methods.get(name)


def executor_config(h: HarnessSection, concurrency: int = 64, seed: Optional[int] = None) -> ExecutorConfig:
    """The executor's config with the ``harness`` section's limits."""
    return ExecutorConfig(concurrency=int(concurrency), infra_retries=h.infra_retries, hook_timeout_s=h.hook_timeout_s,
                          overlay_workers=h.overlay_workers, seed=seed)


def optimizer_config(opt: OptSection, *, lr: float, schedule: str, warmup_steps: int, total_steps: int) -> OptimizerConfig:
    """AdamW with the ``opt`` section's settings and the given learning-rate schedule."""
    return OptimizerConfig(learning_rate=lr, schedule=schedule, warmup_steps=warmup_steps,
                           total_steps=max(total_steps, 1), end_lr_ratio=opt.end_lr_ratio, b1=opt.b1, b2=opt.b2,
                           eps=opt.eps, weight_decay=opt.weight_decay, clip_norm=opt.grad_clip or None)


def learner_config(rl: RLSection, opt: OptSection, *, num_steps: int, temperature: float, seed: int,
                   peak_flops: float = 0.0, router_aux_coef: float = 0.0) -> LearnerConfig:
    """The GRPO learner's config (``rl.*``, ``opt.*``); ``router_aux_coef``: MoE models' router
    load-balancing coefficient (``router_aux_coef``)."""
    loss = losses.PolicyLossConfig(
        eps_low=rl.eps_low, eps_high=rl.eps_high, dual_clip=rl.dual_clip or None, tis_mode=rl.tis_mode,
        tis_cap=rl.tis_cap, tis_low=rl.tis_low, tis_high=rl.tis_high, agg=rl.agg, norm_constant=rl.norm_constant,
        kl_coef=rl.kl_coef, kl_type=rl.kl_estimator, kl_clamp=rl.kl_clamp, entropy_coef=rl.entropy_coef,
        neg_adv_weight=rl.neg_adv_weight)
    optim = optimizer_config(opt, lr=opt.lr, schedule=opt.schedule, warmup_steps=opt.warmup_steps,
                             total_steps=num_steps * rl.epochs * rl.mini_batches)
    return LearnerConfig(mode="grpo", loss=loss, opt=optim, num_micro_batches=rl.micro_batches,
                         num_mini_batches=rl.mini_batches, num_epochs=rl.epochs,
                         recompute_old_logp=rl.recompute_old_logp, logit_chunk=rl.logit_chunk,
                         temperature=temperature, peak_flops_per_device=peak_flops,
                         compute_entropy=rl.log_entropy, reference_kl=rl.reference_kl, skip_no_signal=rl.skip_no_signal,
                         seed=seed,
                         router_aux_coef=router_aux_coef)


def router_aux_coef(model: ModelSection, rl: RLSection) -> float:
    """MoE: Qwen3.5's router load-balancing loss at the model config's coefficient when
    ``rl.router_aux_loss`` (0 for dense models, or when the model config does not build: that
    is reported as a problem of the model section)."""
    if not rl.router_aux_loss:
        return 0.0
    try:
        return float(policy.model_config(model).router_aux_loss_coef)
    except Exception:  # noqa: BLE001 - _model_problems names what is wrong
        return 0.0


def sft_learner_config(run: RunSpec, *, peak_flops: float = 0.0, agg: str = "token_mean",
                       norm_constant: float = 1.0) -> LearnerConfig:
    """The SFT warm start's learner config (``sft.*`` with the ``opt.*`` AdamW settings; ``agg`` /
    ``norm_constant``: the SFT loss normalisation)."""
    s = run.sft
    optim = optimizer_config(run.opt, lr=s.lr, schedule=s.schedule, warmup_steps=s.warmup_steps, total_steps=s.steps)
    return LearnerConfig(mode="sft", opt=optim, num_micro_batches=run.rl.micro_batches, num_mini_batches=1,
                         num_epochs=1, shuffle=False, logit_chunk=run.rl.logit_chunk,
                         loss=losses.PolicyLossConfig(agg=agg, norm_constant=float(norm_constant)),
                         peak_flops_per_device=peak_flops, seed=run.seed,
                         router_aux_coef=run.learner.router_aux_coef)


def pack_config(rl: RLSection, row_multiple: int = 1) -> PackConfig:
    """Row lengths: ``rl.pack_buckets`` below ``rl.pack_len``, and ``pack_len``; the row count a
    multiple of ``row_multiple`` (the learner's: mini x micro batches x its batch devices),
    rounded up to a row bucket (``rl.batch.row_bucket``: few compiled shapes)."""
    top = int(rl.pack_len)
    buckets = sorted({int(b) for b in rl.pack_buckets if b < top} | {top})
    return PackConfig(buckets=tuple(buckets), overlong="split", row_multiple=int(row_multiple),
                      pad_id=int(rl.pad_token_id), round_rows=True)


# ============================================================================================
# resolution
# ============================================================================================
def find_problems(config, *, num_devices: Optional[int] = None, check_paths: bool = True,
                  allow_test_split: bool = False) -> list:
    """Every problem of ``config`` (empty when it is fine); see ``resolve``."""
    return resolve_with_problems(config, num_devices=num_devices, check_paths=check_paths,
                                 allow_test_split=allow_test_split)[1]


def resolve(config, *, num_devices: Optional[int] = None, check_paths: bool = True,
            allow_test_split: bool = False) -> RunSpec:
    """The run's specs; raises ``ConfigValidationError`` listing every problem.

    num_devices: devices the run will have (default: ``mesh.num_devices`` when > 0, else
    ``jax.device_count()``). check_paths: verify that referenced files and directories exist.
    allow_test_split: only evaluation entry points pass True (the test split is sealed)."""
    run, problems = resolve_with_problems(config, num_devices=num_devices, check_paths=check_paths,
                                          allow_test_split=allow_test_split)
    if problems:
        raise ConfigValidationError(problems)
    return run


def resolve_with_problems(config, *, num_devices: Optional[int] = None, check_paths: bool = True,
                          allow_test_split: bool = False):
    """``(run, problems)``: the specs as far as they resolve and every problem (``run`` is None
    when whole sections are missing). For entry points that forgive a problem they fix
    themselves (``launch/evolve.py`` writes the pool the config names)."""
    problems: list = []

    def bad(path, value, problem, fix):
        problems.append(Problem(path, value, problem, fix))

    for top in ("name", "seed", "num_steps", *SECTIONS):
        if top not in config:
            bad(top, None, "is missing", "start the config from experiments.configs.common.base_config()")
    if problems:
        return None, problems
    int_at_least(bad, "num_steps", config.num_steps, 0)
    sec = {name: read(cls, config[name], name, bad) for name, cls in SECTIONS.items()}
    env = _env_spec(sec["env"], config.env, bad, allow_test_split)
    h, rollout_sec = sec["harness"], sec["rollout"]
    sections_ok = not problems          # the parts' specs are made of valid sections only
    _path_problems(sec["harness"], env, sec["model"], bad, check_paths)
    _model_problems(sec["model"], bad, check_paths)
    methods = extensions.resolve_methods(config, bad, check_paths=check_paths)
    if not sections_ok:
        return None, problems
    rl = sec["rl"]
    run = RunSpec(
        name=str(config.name), seed=int(config.seed), num_steps=int(config.num_steps), model=sec["model"],
        mesh=sec["mesh"], rollout=rollout_sec, env=env, harness=sec["harness"], rl=rl, opt=sec["opt"],
        sft=sec["sft"], workers=sec["workers"],
        runner=RunnerSpec(str(config.name), env.name, rollout_sec.concurrency, executor_config(h), h.hook_workers,
                          rollout_sec.temperature, rollout_sec.top_p, rollout_sec.top_k, h.thinking,
                          rollout_sec.max_new_tokens, rollout_sec.max_len),
        learner=learner_config(rl, sec["opt"], num_steps=int(config.num_steps),
                               temperature=rollout_sec.temperature, seed=int(config.seed),
                               router_aux_coef=router_aux_coef(sec["model"], rl)),
        pack=pack_config(rl),
        collector=CollectorSpec(int(config.seed), rl.group_size, rl.tasks_per_step, rl.dynamic_sampling,
                                rl.max_oversample_rounds),
        loop=LoopSpec(str(config.name), int(config.num_steps), rollout_sec.sync_every, rl.async_mode,
                      rl.max_staleness, rl.adv_eps, rl.adv_scale, rl.adv_baseline, sec["eval"], sec["ckpt"],
                      sec["log"], sec["sft"].enabled),
        methods=methods)
    config_validation.check_run(run, bad, num_devices=num_devices)
    return dataclasses.replace(run, base_harness=_base_harness(run, bad) if not problems else None), problems


def _env_spec(e: EnvironmentSection, node, bad, allow_test_split: bool) -> EnvSpec:
    """The selected family's section (its fields, ``choices``, ``at_least``) and its keyword
    arguments; the splits (the test split is sealed outside evaluation entry points)."""
    if e.train_split == "test" or (e.eval_split == "test" and not allow_test_split):
        path = "env.train_split" if e.train_split == "test" else "env.eval_split"
        bad(path, "test", "the test split is sealed: training and evolution never read it",
            "use 'selection' here; evaluate the test split with launch/evaluate.py --split=test")
    else:
        one_of(bad, "env.train_split", e.train_split, TRAIN_SPLITS)
        one_of(bad, "env.eval_split", e.eval_split,
                                 splits.SPLITS if allow_test_split else TRAIN_SPLITS)
    with_kwargs = lambda env_kw, split_kw: EnvSpec(e.name, e.protocol, e.train_split, e.eval_split, e.num_tasks,  # noqa: E731
                                                   e.task_seed, e.max_turns, e.taskset, env_kw, split_kw)
    families = registry.config_sections()
    if e.name not in families:
        if e.name in registry.names():
            bad("env.name", e.name, "this environment family registers no config section",
                "pass config=harness_jax.config_schema.EnvSection(...) to its registry.EnvSpec")
        return with_kwargs({}, {})
    family = families[e.name]
    if e.name not in node:
        bad(f"env.{e.name}", None, "the section of the selected environment is missing",
            "start the config from experiments.configs.common.base_config()")
        return with_kwargs({}, {})
    values = node[e.name]
    known = set(family.section().keys())
    for k in sorted(set(values.keys()) - known):
        bad(f"env.{e.name}.{k}", values[k], "not a field of this family's section", f"use one of {', '.join(sorted(known))}")
    for k, allowed in family.choices.items():
        one_of(bad, f"env.{e.name}.{k}", values[k], tuple(allowed))
    for k, low in family.at_least.items():
        v = values[k]
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= low):
            bad(f"env.{e.name}.{k}", v, f"must be a number >= {low}", f"set --config.env.{e.name}.{k} to a value >= {low}")
    drop_none = lambda kw: {k: v for k, v in kw.items() if v is not None}   # noqa: E731
    return with_kwargs(drop_none(family.env_kwargs(node)), drop_none(family.split_kwargs(node)))


def _path_problems(harness: HarnessSection, env: EnvSpec, m: ModelSection, bad, check_paths: bool) -> None:
    """``harness.spec`` names a registered harness or a spec file; with ``check_paths``, the files
    and directories the config names exist (the harness spec file, the built task set, the
    checkpoint to start from)."""
    h = harness.spec
    if h and (h.endswith((".json", ".yaml", ".yml")) or os.sep in h):
        if check_paths and not os.path.exists(h):
            bad("harness.spec", h, "harness spec file not found",
                "point --config.harness.spec at a JSON/YAML harness spec, or '' for the base harness")
    elif h and h not in presets.names():
        bad("harness.spec", h, "neither a spec file (.json/.yaml) nor a registered harness name",
            f"use one of {', '.join(presets.names())}, a JSON/YAML path, or '' for H0")
    if not check_paths:
        return
    ts = env.taskset
    if ts.data_dir and ts.config and (not ts.version or re.fullmatch(r"\d+\.\d+\.\d+", ts.version)):
        try:
            directory = tasksets.dataset_dir(ts.data_dir, env.name, ts.config, ts.version or None)
        except FileNotFoundError as exc:
            bad("env.taskset.data_dir", ts.data_dir, str(exc).split(";")[0],
                f"build it: python launch/build_tasksets.py --family={env.name} --data_dir={ts.data_dir} "
                "(or set --config.env.taskset.data_dir='' to generate tasks)")
        else:
            if not os.path.exists(os.path.join(directory, "dataset_info.json")):
                bad("env.taskset.version", ts.version, f"no built task set at {directory}",
                    "give a built version, or '' for the newest")
    if m.init_from and "://" not in m.init_from and not os.path.isdir(m.init_from):
        bad("model.init_from", m.init_from, "missing checkpoint directory",
            "point --config.model.init_from at an existing training workdir or its checkpoints/ dir, or set it to ''")


def _base_harness(run: RunSpec, bad):
    """The run's base harness, resolved once (a spec file that does not load is a problem of
    ``harness.spec``)."""
    try:
        return rollout.base_harness(run)
    except Exception as e:  # noqa: BLE001 - the message names what is wrong with the file
        bad("harness.spec", run.harness.spec, f"the harness spec does not load ({type(e).__name__}: {e})",
            "fix the file, or point --config.harness.spec at a valid JSON/YAML harness spec ('' = H0)")
        return None


def _model_problems(m: ModelSection, bad, check_paths: bool) -> None:
    """The model the section describes can be built (an HF directory with a config.json, or a
    preset with consistent ``arch`` fields)."""
    if m.hf_path:
        if not check_paths:
            return
        if not os.path.exists(os.path.join(m.hf_path, "config.json")):
            bad("model.hf_path", m.hf_path, "no config.json in this directory",
                "point --config.model.hf_path at a Hugging Face checkpoint directory, or set it to '' "
                "to use model.preset")
            return
    if not m.hf_path and m.preset.lower().replace("-", "_").replace(".", "_") not in model_presets.names():
        return
    try:
        policy.model_config(m)
    except Exception as e:  # noqa: BLE001 - the message names the inconsistency
        where = "model.hf_path" if m.hf_path else "model.arch"
        fix = ("use a Qwen3.5 (dense or MoE) checkpoint" if m.hf_path
               else "make the model.arch fields consistent (see the message)")
        bad(where, m.hf_path or m.arch.overrides(), f"the resulting model config is invalid ({e})", fix)
