"""Harness-R1 end to end, stage by stage, resumable: what ``launch/engineer.py`` runs.

    from harness_jax.harness_r1 import pipeline
    summary = pipeline.run(config, workdir)       # config: experiments/configs/harness_r1/*

Stages (each skipped when its output is already in ``workdir`` for the same inputs):

1. ``packets``: the frozen target's cached baselines on ``r1.packets`` batches of the
   environment's own splits, and the failure packets (``build_packet_dataset``: train from
   ``env.train_split``, validation from ``search``, held-out from ``env.eval_split``);
2. ``teacher``: cold-start responses for the train packets from the rule-based engineer or an
   OpenAI-compatible endpoint (cached, costed), normalised, invalid ones dropped and counted;
3. ``tokenizer``: with ``model.tokenizer="task_bpe"``, the engineer's BPE trained on the system
   prompt, the train packets and the teacher's responses (never on held-out packets);
4. ``sft_examples``: prompt/response token ids, checked against ``rollout.max_len`` and
   ``rl.pack_len`` (nothing is truncated silently);
5. ``reference``: the rule-based engineer's Delta_B on the held-out packets (for comparison);
6. ``train``: ``training.EngineerTrainer`` (the loop): evaluation before SFT, cold-start SFT
   (resumed from ``sft_checkpoints/``), evaluation after SFT, GRPO (resumed from
   ``checkpoints/``), final evaluation, HF export of the engineer.

A stage's marker (``stages/<name>.json``) holds the hash of its inputs; a rerun with another
configuration for an existing stage is refused with the differing stage named (use a new
workdir), so a resumed run never mixes data of two configurations. Baselines and reward
evaluations are also content-addressed caches, so even a redone stage reruns nothing it already
ran. Everything runs inside ``training_scope``: the test split stays sealed.

Outputs: ``packets/``, ``sft/``, ``tokenizer/``, ``checkpoints/``, ``sft_checkpoints/``,
``metrics.jsonl`` + ``tb/``, ``hf_final/``, ``summary.json`` (the loop's), ``config.json``,
``engineer_summary.json`` (stage times, SFT/GRPO figures, held-out evaluations, the rule-based
reference) and ``engineer.png`` (the plot).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from typing import Any, Callable, Optional

from harness_jax.harness_r1 import dataset as dataset_lib
from harness_jax.harness_r1.packets import PacketDataset

PIPELINE_VERSION = "harness-r1-pipeline-v1"
STAGES = ("packets", "teacher", "tokenizer", "sft_examples", "reference", "train")


# ------------------------------------------------------------------------------------------
# the console (the launcher's; library calls default to a silent one)
# ------------------------------------------------------------------------------------------
class Console:
    """Progress bars and one-line reports on stderr (``enabled=False``: silent)."""

    def __init__(self, enabled: bool = True, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stderr

    def line(self, text: str) -> None:
        if self.enabled:
            from tqdm import tqdm

            tqdm.write(text, file=self.stream)

    def bar(self, total: int, desc: str, initial: int = 0):
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc=desc, file=self.stream, dynamic_ncols=True,
                    disable=not self.enabled, leave=False)


SILENT = Console(enabled=False)


# ------------------------------------------------------------------------------------------
# what the config says
# ------------------------------------------------------------------------------------------
def target_spec(config):
    """The frozen target's ``TargetSpec`` from ``r1.target``."""
    from harness_jax.harness_r1.targets import TargetSpec

    t = config.r1.target
    return TargetSpec(kind=t.kind, model=t.model, urls=tuple(t.urls), version=t.version,
                      factory=t.factory, options=json.loads(t.options or "{}"))


def target_tokenizer(config):
    from harness_jax.sampling.tokenizer import load_tokenizer

    return load_tokenizer(config.r1.target.tokenizer or None,
                          cache_dir=config.model.tokenizer_cache_dir or None)


def target_harness(config):
    """The target's base harness (``harness.spec`` or H0 of the env and protocol) with the
    target's limits and sampling (``r1.target``, ``env.max_turns``)."""
    from harness_jax.train import rollout

    h = rollout.base_harness(config)
    t = config.r1.target
    return dataclasses.replace(
        h, rules=dataclasses.replace(h.rules, max_tokens_per_turn=int(t.max_new_tokens)),
        memory=dataclasses.replace(h.memory, max_context_tokens=int(t.max_context)),
        temperature=float(t.temperature), top_p=1.0, top_k=-1)


def executor_config(config):
    from harness_jax.harness.executor import ExecutorConfig

    h = config.harness
    return ExecutorConfig(concurrency=int(config.r1.target.concurrency), infra_retries=int(h.infra_retries),
                          hook_timeout_s=float(h.hook_timeout_s), overlay_workers=int(h.overlay_workers),
                          effect_surface=str(config.r1.effect_surface))


def prompt_spec(config):
    """What the engineer is told about the run (``prompt.PromptSpec``): the reward options of
    ``r1.reward`` and the effect surface ``r1.effect_surface``."""
    from harness_jax.harness_r1.prompt import PromptSpec
    from harness_jax.harness_r1.reward import RewardSpec

    rw = config.r1.reward
    return PromptSpec(reward=RewardSpec(invalid_reward=float(rw.invalid_reward),
                                        valid_bonus=float(rw.valid_bonus),
                                        adv_baseline=str(rw.adv_baseline)),
                      effect_surface=str(config.r1.effect_surface))


def env_ref(config):
    from harness_jax.envs import registry
    from harness_jax.harness_r1.baseline import EnvRef

    kw = registry.config_section(config.env.name).env_kwargs(config.env)
    return EnvRef(config.env.name, {k: v for k, v in kw.items() if v is not None})


def packet_batches(config) -> dict:
    p = config.r1.packets
    out = {"train": int(p.train_batches), "validation": int(p.validation_batches),
           "held_out": int(p.held_out_batches)}
    return {k: v for k, v in out.items() if v > 0}


def split_kwargs(config) -> dict:
    """The env's split-loader options other than the task count and seed (the packet builder
    sets those)."""
    from harness_jax.train import builders

    kw = builders.split_kwargs(config)
    return {k: v for k, v in kw.items() if k not in ("n", "seed")}


class Paths:
    """Where the pipeline's files live under the (local) workdir."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)

    def _p(self, *parts) -> str:
        return os.path.join(self.root, *parts)

    packets = property(lambda self: self._p("packets"))
    sft = property(lambda self: self._p("sft"))
    tokenizer = property(lambda self: self._p("tokenizer"))
    stages = property(lambda self: self._p("stages"))
    reward_cache = property(lambda self: self._p("cache", "rewards"))
    teacher_cache = property(lambda self: self._p("cache", "teacher"))
    examples = property(lambda self: self._p("sft", "examples.jsonl"))
    responses = property(lambda self: self._p("sft", "teacher.jsonl"))
    summary = property(lambda self: self._p("engineer_summary.json"))
    plot = property(lambda self: self._p("engineer.png"))

    def baseline_cache(self, config) -> str:
        return config.r1.packets.cache_dir or os.path.join(self.root, "cache", "baselines")


# ------------------------------------------------------------------------------------------
# stage markers
# ------------------------------------------------------------------------------------------
def _key(obj) -> str:
    blob = json.dumps([PIPELINE_VERSION, obj], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _marker(paths: Paths, stage: str) -> Optional[dict]:
    p = os.path.join(paths.stages, stage + ".json")
    if not os.path.exists(p):
        return None
    with open(p, encoding="utf-8") as f:
        return json.load(f)


def _done(paths: Paths, stage: str, key: str) -> Optional[dict]:
    """The stage's recorded info when it finished for ``key``; None when it has not run; an
    error when it ran for other inputs."""
    m = _marker(paths, stage)
    if m is None:
        return None
    if m["key"] != key:
        raise ValueError(
            f"workdir {paths.root}: stage {stage!r} already ran with a different configuration "
            f"(its inputs hash to {m['key']}, this config's to {key}). Resume with the config it "
            "was started with, or use a new --workdir.")
    return m["info"]


def _mark(paths: Paths, stage: str, key: str, info: dict) -> dict:
    os.makedirs(paths.stages, exist_ok=True)
    p = os.path.join(paths.stages, stage + ".json")
    with open(p + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"key": key, "info": info}, f, indent=1, default=float)
    os.replace(p + ".tmp", p)
    return info


def _timed(fn: Callable[[], dict]) -> dict:
    t0 = time.perf_counter()
    info = fn()
    info["wall_s"] = round(time.perf_counter() - t0, 2)
    return info


# ------------------------------------------------------------------------------------------
# stages
# ------------------------------------------------------------------------------------------
def stage_packets(config, paths: Paths, target, tok, console: Console = SILENT) -> tuple[PacketDataset, dict]:
    from harness_jax.harness_r1.baseline import BaselineCache
    from harness_jax.harness_r1.packets import build_packet_dataset

    p = config.r1.packets
    harness = target_harness(config)
    env = env_ref(config)
    splits = {"train": config.env.train_split, "held_out": config.env.eval_split}
    key = _key({"target": target.identity.to_dict(), "env": env.to_dict(), "harness": harness.harness_id,
                "batches": packet_batches(config), "batch_size": p.batch_size, "budget": p.budget_tokens,
                "n_per_task": p.n_per_task, "seed": p.seed, "splits": splits,
                "split_kwargs": split_kwargs(config), "executor": dataclasses.asdict(executor_config(config))})
    ds = PacketDataset(paths.packets)
    info = _done(paths, "packets", key)
    if info is not None:
        return ds, info
    bars: dict = {}

    def progress(split, i, n):
        if split not in bars:
            bars[split] = console.bar(n, f"baselines[{split}]")
        bars[split].update(1)

    def build():
        try:
            build_packet_dataset(target, env, harness, paths.packets, batches=packet_batches(config),
                                 batch_size=int(p.batch_size), budget_tokens=int(p.budget_tokens),
                                 n_per_task=int(p.n_per_task), seed=int(p.seed),
                                 cache=BaselineCache(paths.baseline_cache(config)), tokenizer=tok,
                                 config=executor_config(config), env_splits=splits,
                                 split_kwargs=split_kwargs(config), progress=progress)
        finally:
            for b in bars.values():
                b.close()
        m = ds.manifest()
        return {"splits": m["splits"], "target": m["target"]}

    return ds, _mark(paths, "packets", key, _timed(build))


def make_teacher(config, paths: Paths):
    """The cold-start teacher of ``r1.teacher`` (an endpoint teacher gets the run's prompt)."""
    from harness_jax.harness_r1.engineers import PromptEngineer, RuleBasedEngineer

    t = config.r1.teacher
    if t.kind == "rule":
        return RuleBasedEngineer()
    from harness_jax.sampling.openai_client import ChatClientConfig, OpenAIChatClient

    client = OpenAIChatClient(ChatClientConfig(
        base_url=t.base_url, model=t.model, api_key_env=t.api_key_env or None,
        cache_dir=t.cache_dir or paths.teacher_cache, price_input_per_mtok=float(t.price_in),
        price_output_per_mtok=float(t.price_out)))
    return PromptEngineer(client, temperature=float(t.temperature), max_tokens=int(t.max_tokens),
                          role="teacher", prompt=prompt_spec(config))


def stage_teacher(config, paths: Paths, ds: PacketDataset, packets_key: str,
                  console: Console = SILENT, data=None) -> dict:
    """Teacher responses for the train packets; with ``r1.teacher.filter_by_delta`` only those
    whose measured Delta_B on their own packet's batch is > ``r1.teacher.min_delta_b`` are kept
    (``data``: the run's ``EngineerData``, whose reruns measure them)."""
    t = config.r1.teacher
    key = _key({"packets": packets_key, "kind": t.kind, "base_url": t.base_url, "model": t.model,
                "temperature": t.temperature, "max_tokens": t.max_tokens, "k": t.k, "seed": config.seed,
                "filter": bool(t.filter_by_delta), "min_delta_b": float(t.min_delta_b),
                "prompt": dataclasses.asdict(prompt_spec(config)) if t.kind == "endpoint" else None})
    info = _done(paths, "teacher", key)
    if info is not None:
        return info

    def build():
        packets = ds.load("train")
        teacher = make_teacher(config, paths)
        bar = console.bar(len(packets), f"teacher[{teacher.name}]")
        try:
            rows, stats = dataset_lib.teacher_responses(packets, teacher, k=int(t.k), seed=int(config.seed),
                                                        progress=bar)
        finally:
            bar.close()
        if not rows:
            raise RuntimeError(f"the teacher {teacher.name} gave no valid patch for any of the {len(packets)} "
                               f"train packets ({stats['rejected_reasons']}); nothing to fine-tune on")
        if t.filter_by_delta:
            from harness_jax.harness_r1.baseline import run_sync

            rows, fstats = run_sync(dataset_lib.afilter_by_delta(rows, packets, data.aevaluate,
                                                                 float(t.min_delta_b)), "filter_by_delta")
            stats = dict(stats, delta_filter=fstats)
            console.line(f"[teacher] Delta_B filter: kept {fstats['kept']} of "
                         f"{fstats['kept'] + fstats['dropped']} patches (kept mean Δ_B "
                         f"{fstats['kept_delta_b_mean']:+.3f}, dropped {fstats['dropped_delta_b_mean']:+.3f})")
            if not rows:
                raise RuntimeError(f"no teacher patch of {teacher.name} measurably helps its packet "
                                   f"(Delta_B > {t.min_delta_b}) on any of the {len(packets)} train packets; "
                                   "nothing to fine-tune on. Use a stronger teacher, lower "
                                   "--config.r1.teacher.min_delta_b, or --config.r1.teacher.filter_by_delta=False")
        dataset_lib.write_jsonl(paths.responses, rows)
        return dict(stats, teacher=teacher.name, responses=len(rows))

    return _mark(paths, "teacher", key, _timed(build))


def stage_tokenizer(config, paths: Paths, ds: PacketDataset, teacher_key: str) -> dict:
    """``model.tokenizer="task_bpe"``: the engineer's BPE on its training text (section doc)."""
    from harness_jax.harness_r1.prompt import engineer_prompt_text, system_prompt
    from harness_jax.train import task_tokenizer

    if config.model.tokenizer != "task_bpe":
        return {"tokenizer": config.model.tokenizer}
    key = _key({"teacher": teacher_key, "vocab": config.model.tokenizer_vocab,
                "max_token_bytes": config.r1.tokenizer_max_token_bytes})
    info = _done(paths, "tokenizer", key)
    if info is not None:
        return info

    def build():
        spec = prompt_spec(config)
        texts = [system_prompt(spec, config.env.name)] + [engineer_prompt_text(pk, spec)
                                                          for pk in ds.load("train")]
        texts += [r["response"] for r in dataset_lib.load_sft_examples(paths.responses)]
        tok = task_tokenizer.train_bpe(texts, paths.tokenizer, int(config.model.tokenizer_vocab),
                                       max_token_bytes=int(config.r1.tokenizer_max_token_bytes))
        return {"tokenizer": "task_bpe", "vocab": len(tok), "texts": len(texts)}

    return _mark(paths, "tokenizer", key, _timed(build))


def check_lengths(config, ds: PacketDataset, tokenizer, examples) -> dict:
    """Prompt and response lengths against the engine and the packer (raises, naming the
    field, when something would be truncated)."""
    from harness_jax.harness_r1.prompt import engineer_prompt_ids

    r = config.rollout
    spec = prompt_spec(config)
    prompts = [len(engineer_prompt_ids(pk, tokenizer, spec)) for s in ds.splits() for pk in ds.load(s)]
    longest_prompt = max(prompts) if prompts else 0
    if longest_prompt + int(r.max_new_tokens) > int(r.max_len):
        raise ValueError(
            f"config.rollout.max_len = {r.max_len}: the longest packet prompt has {longest_prompt} "
            f"engineer tokens, + rollout.max_new_tokens = {r.max_new_tokens} does not fit. Fix: raise "
            f"--config.rollout.max_len to >= {longest_prompt + r.max_new_tokens} or lower "
            "--config.r1.packets.budget_tokens")
    seqs = [len(e["prompt_ids"]) + len(e["response_ids"]) for e in examples]
    longest = max(longest_prompt + int(r.max_new_tokens), max(seqs) if seqs else 0)
    if longest - 1 > int(config.rl.pack_len):
        raise ValueError(
            f"config.rl.pack_len = {config.rl.pack_len}: an engineer sequence (prompt + response) has up to "
            f"{longest} tokens and would be split away from its packet. Fix: set --config.rl.pack_len >= "
            f"{longest} (or lower r1.packets.budget_tokens / rollout.max_new_tokens)")
    responses = [len(e["response_ids"]) for e in examples]
    return {"prompt_tokens_max": longest_prompt,
            "prompt_tokens_mean": sum(prompts) / max(len(prompts), 1),
            "response_tokens_max": max(responses) if responses else 0,
            "response_tokens_mean": sum(responses) / max(len(responses), 1),
            "responses_over_max_new_tokens": sum(n > int(r.max_new_tokens) for n in responses)}


def stage_sft_examples(config, paths: Paths, ds: PacketDataset, tokenizer, upstream_key: str) -> dict:
    key = _key({"upstream": upstream_key, "tokenizer": config.model.tokenizer,
                "prompt": dataclasses.asdict(prompt_spec(config))})
    info = _done(paths, "sft_examples", key)
    if info is not None:
        return info

    def build():
        rows = dataset_lib.load_sft_examples(paths.responses)
        examples = dataset_lib.examples_from_responses(rows, ds.load("train"), tokenizer,
                                                       prompt_spec(config))
        out = check_lengths(config, ds, tokenizer, examples)
        dataset_lib.write_jsonl(paths.examples, examples)
        return dict(out, examples=len(examples),
                    response_tokens=sum(len(e["response_ids"]) for e in examples))

    return _mark(paths, "sft_examples", key, _timed(build))


def stage_reference(config, paths: Paths, data, packets_key: str) -> dict:
    """The rule-based engineer on the held-out packets (one patch per packet, paired reruns)."""
    from harness_jax.harness_r1.engineers import RuleBasedEngineer
    from harness_jax.harness_r1.tables import Arm, evaluate_arm

    key = _key({"packets": packets_key, "reference": "rule", "eval_split": data.eval_split,
                "num": config.eval.num_tasks})
    info = _done(paths, "reference", key)
    if info is not None:
        return info

    def build():
        packets = data.dataset.load(data.eval_split)[:int(config.eval.num_tasks)]
        if not packets:
            return {"delta_b": float("nan"), "packets": 0}
        row = evaluate_arm(Arm("rule", RuleBasedEngineer()), packets, data.target, data.baselines,
                           data.dataset.tasks(data.eval_split), tokenizer=data.target_tokenizer,
                           cache=data.reward_cache, eval_attempts=data.eval_attempts, seed=int(config.seed))
        return {"delta_b": row.delta, "valid_frac": row.valid_frac, "noop_frac": row.noop_frac,
                "improved_frac": row.improved_frac,
                "success_before": row.success_before, "success_after": row.success_after,
                "packets": row.batches, "infra_batches": row.infra_batches,
                "per_packet": [d.get("delta") for d in row.details]}

    return _mark(paths, "reference", key, _timed(build))


# ------------------------------------------------------------------------------------------
# the whole run
# ------------------------------------------------------------------------------------------
def _step_line(c, step: int, m: dict) -> str:
    return (f"step {step}/{c.num_steps}  mean Δ_B {m.get('r1/delta_b_mean', 0.0):+.3f}  "
            f"valid {m.get('r1/valid_frac', 0.0):.2f}  zero-var packets "
            f"{int(m.get('r1/zero_variance_packets', 0))}/{int(m.get('r1/packets', 0))}  "
            f"no-op {m.get('r1/noop_frac', 0.0):.2f}  infra {m.get('r1/infra_frac', 0.0):.2f}  "
            f"reward {m.get('r1/reward_mean', 0.0):+.3f}  loss {m.get('learner/loss', 0.0):+.4f}  "
            f"{m.get('time/step_s', 0.0):.1f}s")


def _eval_line(tag: str, res: dict) -> str:
    if not res.get("packets"):
        return f"eval[{tag}]: no held-out packets"
    g = res.get("greedy")
    greedy = (f"  | greedy: Δ_B {g['delta_b']:+.3f} valid {g['valid_frac']:.2f}" if g else "")
    return (f"eval[{tag}] held-out (T={res['temperature']:g}, {res['k']}/packet): mean Δ_B "
            f"{res['delta_b']:+.3f}  valid {res['valid_frac']:.2f}  no-op {res['noop_frac']:.2f}  "
            f"best-of-{res['k']} Δ_B {res['best_of_k_delta_b']:+.3f}  improved {res.get('improved_frac', 0):.2f}  success {res['baseline_success']:.3f} -> "
            f"{res['success_rate']:.3f}  infra {res.get('infra_samples', 0)}{greedy}  ({res['time_s']:.1f}s)")


def _write_config(config, paths: Paths) -> None:
    to_json = getattr(config, "to_json_best_effort", None)
    if to_json is not None:
        with open(os.path.join(paths.root, "config.json"), "w", encoding="utf-8") as f:
            f.write(to_json(indent=1))


def run(config, workdir, *, console: Console = SILENT, devices=None) -> dict:
    """Every stage (module docstring); returns and writes ``engineer_summary.json``."""
    from harness_jax import config_validation
    from harness_jax.envs import registry
    from harness_jax.harness_r1.reward import RewardCache
    from harness_jax.harness_r1.baseline import BaselineCache
    from harness_jax.harness_r1.training import EngineerData
    from harness_jax.paths import is_local

    config_validation.validate(config, num_devices=len(devices) if devices else None)
    if not is_local(workdir):
        raise ValueError(f"--workdir {workdir}: Harness-R1's packet dataset and caches need a local "
                         "(or mounted) directory")
    paths = Paths(str(workdir))
    os.makedirs(paths.root, exist_ok=True)
    _write_config(config, paths)
    t_start = time.perf_counter()
    stages: dict = {}
    with registry.training_scope(config.name):
        tok = target_tokenizer(config)
        target = target_spec(config).build(tok)
        console.line(f"[target] {target.identity}")
        ds, stages["packets"] = stage_packets(config, paths, target, tok, console)
        console.line(f"[packets] {_packets_line(stages['packets'])}")
        pk_key = _marker(paths, "packets")["key"]
        data = EngineerData(target=target, target_tokenizer=tok, dataset=ds,
                            baselines=BaselineCache(paths.baseline_cache(config)),
                            reward_cache=RewardCache(paths.reward_cache), sft_examples=paths.examples,
                            eval_split="held_out", eval_attempts=int(config.r1.eval_attempts),
                            require_code_hook_only=bool(config.r1.require_code_hook_only),
                            prompt=prompt_spec(config), cross_batch=bool(config.r1.cross_batch))
        stages["teacher"] = stage_teacher(config, paths, ds, pk_key, console, data=data)
        console.line(f"[teacher] {stages['teacher']['responses']} responses, "
                     f"{stages['teacher']['rejected']} rejected ({stages['teacher']['teacher']})")
        t_key = _marker(paths, "teacher")["key"]
        stages["tokenizer"] = stage_tokenizer(config, paths, ds, t_key)
        from harness_jax.train import rollout
        from harness_jax.train.workdir import RunPaths

        eng_tok = rollout.load_tokenizer(config, RunPaths.of(paths.root).tokenizer)
        up = _key([t_key, (_marker(paths, "tokenizer") or {}).get("key")])
        stages["sft_examples"] = stage_sft_examples(config, paths, ds, eng_tok, up)
        s = stages["sft_examples"]
        console.line(f"[sft data] {s['examples']} examples; engineer tokens: prompts <= {s['prompt_tokens_max']}, "
                     f"responses mean {s['response_tokens_mean']:.0f} / max {s['response_tokens_max']}")
        data.pool = _pool(config, paths)
        try:
            if config.r1.reference_rule:
                stages["reference"] = stage_reference(config, paths, data, pk_key)
                r = stages["reference"]
                console.line(f"[reference] rule-based engineer on {r['packets']} held-out packets: "
                             f"mean Δ_B {r['delta_b']:+.3f}, valid {r.get('valid_frac', 0):.2f}")
            stages["train"] = _train(config, paths, data, console, devices)
        finally:
            if data.pool is not None:
                data.pool.close()
            target.close()
    summary = summarize(paths, stages, time.perf_counter() - t_start)
    with open(paths.summary + ".tmp", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, default=float)
    os.replace(paths.summary + ".tmp", paths.summary)
    try:
        plot(paths.root, paths.plot)
    except Exception as e:  # a plot must never lose a finished run
        console.line(f"[plot] failed: {e}")
    return summary


def _packets_line(info: dict) -> str:
    parts = [f"{s}: {v['packets']} packets of {v['batches']} batches ({v['cached_baselines']} cached, "
             f"{v['target_episodes']} target episodes)" for s, v in info["splits"].items()]
    return "; ".join(parts)


def _pool(config, paths: Paths):
    if int(config.r1.pool_workers) <= 0:
        return None
    from harness_jax.harness_r1.pool import EvaluationPool

    return EvaluationPool(target_spec(config), workers=int(config.r1.pool_workers),
                          tokenizer_path=config.r1.target.tokenizer or None, cache_dir=paths.reward_cache)


def _train(config, paths: Paths, data, console: Console, devices) -> dict:
    from harness_jax.harness_r1.training import EngineerTrainer

    sft_bar = {}

    def on_sft_step(step, m):
        if "bar" not in sft_bar:
            sft_bar["bar"] = console.bar(int(config.sft.steps), "sft", initial=step - 1)
        sft_bar["bar"].set_postfix(nll=f"{m['nll']:.3f}", refresh=False)
        sft_bar["bar"].update(1)
        if step == int(config.sft.steps) or step % 50 == 0:
            console.line(f"sft step {step}/{config.sft.steps}  nll {m['nll']:.4f}  "
                         f"{m['tokens_per_s']:.0f} tok/s")
        if step == int(config.sft.steps):
            sft_bar.pop("bar").close()

    t0 = time.perf_counter()
    trainer = EngineerTrainer(config, paths.root, data=data, devices=devices,
                              on_step=lambda step, m: console.line(_step_line(config, step, m)),
                              on_sft_step=on_sft_step,
                              on_eval=lambda tag, res: console.line(_eval_line(tag, res)))
    build_s = time.perf_counter() - t0
    if trainer.resumed_from is not None:
        console.line(f"[train] resumed from GRPO step {trainer.resumed_from}")
    try:
        summary = trainer.run()
    finally:
        if "bar" in sft_bar:
            sft_bar["bar"].close()
        trainer.close()
    return {"build_s": build_s, "wall_s": time.perf_counter() - t0, "summary": summary}


# ------------------------------------------------------------------------------------------
# summary and plot
# ------------------------------------------------------------------------------------------
def read_metrics(root: str) -> list[dict]:
    from harness_jax.rl.metrics import read_jsonl

    return read_jsonl(os.path.join(root, "metrics.jsonl"))


def summarize(paths: Paths, stages: dict, wall_s: float) -> dict:
    """The run's figures: stage times, SFT and GRPO phases, held-out evaluations, reference."""
    rows = read_metrics(paths.root)
    sft = [r for r in rows if "sft/nll" in r]
    grpo = [r for r in rows if "r1/delta_b_mean" in r]
    train = stages.get("train", {}).get("summary", {})
    evals = {e["tag"]: {k: e.get(k) for k in ("delta_b", "reward", "valid_frac", "noop_frac", "best_of_k_delta_b",
                                                "improved_frac", "infra_samples", "details",
                                                "baseline_success", "success_rate", "packets", "k",
                                                "temperature", "time_s", "step", "greedy")}
             for e in train.get("eval", [])}
    phase = {name: info.get("wall_s") for name, info in stages.items() if isinstance(info, dict)}
    out = {"wall_s": wall_s, "stage_wall_s": phase, "stages": {k: v for k, v in stages.items() if k != "train"},
           "eval": evals, "reference_rule": stages.get("reference"),
           "sft": {"steps": len(sft), "nll_first": sft[0]["sft/nll"] if sft else None,
                   "nll_last": sft[-1]["sft/nll"] if sft else None,
                   "train_s": sum(r.get("sft/step_time_s", 0.0) for r in sft),
                   "summary": train.get("sft")},
           "grpo": {"steps": len(grpo),
                    "delta_b_mean": [r["r1/delta_b_mean"] for r in grpo],
                    "valid_frac": [r["r1/valid_frac"] for r in grpo],
                    "reward_mean": [r.get("r1/reward_mean") for r in grpo],
                    "infra_frac": [r.get("r1/infra_frac", 0.0) for r in grpo],
                    "zero_variance_packets": [r["r1/zero_variance_packets"] for r in grpo],
                    "step_s": [r.get("time/step_s") for r in grpo],
                    "cache_hit_frac": [r.get("r1/cache_hit_frac") for r in grpo],
                    "reward_cache": _cache_totals(grpo),
                    "rollout_s": sum(r.get("time/rollout_s", 0.0) + r.get("time/queue_wait_s", 0.0) for r in grpo),
                    "train_s": sum(r.get("time/train_s", 0.0) + r.get("time/logprob_recompute_s", 0.0)
                                   for r in grpo)},
           "resumed_from": train.get("resumed_from"), "preempted": train.get("preempted")}
    return out


def _cache_totals(grpo: list[dict]) -> dict:
    """The reward cache over the GRPO steps: distinct valid patches, those served from the cache
    (evaluated at an earlier step), reruns, the hit rate and the target episodes."""
    tot = lambda k: sum(r.get(k, 0.0) for r in grpo)       # noqa: E731
    unique, hits, evaluated = tot("r1/unique_patches"), tot("r1/cache_hits"), tot("r1/evaluated_patches")
    return {"unique_patches": unique, "cache_hits": hits, "reruns": evaluated,
            "cache_hit_frac": hits / unique if unique else 0.0,
            "target_episodes": tot("r1/target_episodes")}


def plot(root: str, out_png: str) -> str:
    """``engineer.png``: SFT NLL, per-step training Delta_B and valid fraction, and the held-out
    evaluations against the rule-based reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(root)
    summ = {}
    sp = os.path.join(root, "engineer_summary.json")
    if os.path.exists(sp):
        with open(sp, encoding="utf-8") as f:
            summ = json.load(f)
    sft = [(r["step"], r["sft/nll"]) for r in rows if "sft/nll" in r]
    grpo = [(r["step"], r["r1/delta_b_mean"], r["r1/valid_frac"]) for r in rows if "r1/delta_b_mean" in r]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    if sft:
        ax[0].plot(*zip(*sft))
    ax[0].set(title="cold-start SFT", xlabel="SFT step", ylabel="response NLL / token", yscale="log")
    if grpo:
        s, d, v = zip(*grpo)
        ax[1].plot(s, d, marker="o", label="mean Δ_B (K samples)")
        ax[1].plot(s, v, marker="s", label="valid fraction")
        ax[1].legend()
    ax[1].set(title="GRPO on train packets", xlabel="GRPO step")
    tags = [(k, v) for k, v in (summ.get("eval") or {}).items() if v.get("delta_b") is not None]
    if tags:
        import numpy as np

        x = np.arange(len(tags))
        ax[2].bar(x - 0.2, [v["delta_b"] for _, v in tags], 0.4, color="C0",
                  label=f"mean Δ_B, {tags[0][1].get('k')} samples at T={tags[0][1].get('temperature')}")
        ax[2].plot(x - 0.2, [v["valid_frac"] for _, v in tags], "ks", label="valid fraction (sampled)")
        if all(v.get("greedy") for _, v in tags):
            ax[2].bar(x + 0.2, [v["greedy"]["delta_b"] for _, v in tags], 0.4, color="C2",
                      label="Δ_B of the greedy patch")
        ax[2].set_xticks(x, [k for k, _ in tags])
    ref = summ.get("reference_rule") or {}
    if ref.get("delta_b") is not None:
        ax[2].axhline(ref["delta_b"], color="C3", ls="--", label=f"rule-based Δ_B {ref['delta_b']:+.3f}")
    ax[2].set(title="held-out packets", ylabel="Δ_B / fraction")
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
