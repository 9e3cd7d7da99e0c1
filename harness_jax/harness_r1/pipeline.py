"""Harness-R1 end to end, stage by stage, resumable: what ``launch/engineer.py`` runs.

    from harness_jax.harness_r1 import pipeline
    summary = pipeline.run(config, workdir)       # config: experiments/configs/harness_r1/*

Stages (each skipped when its output is already in ``workdir`` for the same inputs):

1. ``packets``: the frozen target's cached baselines on ``r1.packets`` batches of the
   environment's own splits, and the failure packets (``build_packet_dataset``: train from
   ``env.train_split``, validation from ``search``, held-out from ``env.eval_split``);
2. ``teacher``: cold-start responses for the train packets from the rule-based engineer or an
   OpenAI-compatible endpoint (cached, costed), normalised, invalid ones dropped and counted,
   and (``r1.teacher.filter_by_delta``) only those whose measured Delta_B on their own packet's
   batch exceeds ``r1.teacher.min_delta_b`` kept;
3. ``tokenizer``: with ``model.tokenizer="task_bpe"``, the engineer's BPE trained on the system
   prompt, the train packets and the teacher's responses (never on held-out packets);
4. ``sft_examples``: prompt/response token ids, checked against ``rollout.max_len`` and
   ``rl.pack_len`` (nothing is truncated silently);
5. ``reference``: the rule-based engineer's Delta_B on the held-out packets (for comparison);
6. ``train``: the project's loop (``train.run.fit``) with ``training.EngineerExtension``:
   evaluation before SFT, cold-start SFT (resumed from ``sft_checkpoints/``), evaluation after
   SFT, GRPO (resumed from ``checkpoints/``), final evaluation, HF export of the engineer.

The config is resolved once, at the top (``train.spec.resolve``; the ``r1`` section by
``harness_r1.method``); the stages read the resolved specs. They run on the training loop's
machinery: ``train.stages.Stages`` (a stage's marker ``stages/<name>.json`` holds the hash of its
inputs; a rerun with another configuration for an existing stage is refused with the differing
stage named, so a resumed run never mixes data of two configurations), the run directory
``EngineerPaths`` (the loop's ``RunPaths`` plus the pipeline's files), and the loop's
``train.console.Console``. Baselines and reward
evaluations are also content-addressed caches, so even a redone stage reruns nothing it already
ran. Everything runs inside ``training_scope``: the test split stays sealed.

Outputs: ``packets/``, ``sft/``, ``tokenizer/``, ``checkpoints/``, ``sft_checkpoints/``,
``metrics.jsonl`` + ``tb/``, ``hf_final/``, ``summary.json`` (the loop's), ``config.json``,
``engineer_summary.json`` (stage times, SFT/GRPO figures, held-out evaluations, the rule-based
reference) and ``engineer.png`` (the plot).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Optional

import numpy as np

from harness_jax.envs import registry
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness_r1 import dataset as dataset_lib
from harness_jax.harness_r1.baseline import BaselineCache, EnvRef
from harness_jax.harness_r1.engineers import PromptEngineer, RuleBasedEngineer
from harness_jax.harness_r1 import packets as packets_lib
from harness_jax.harness_r1.packets import PacketDataset
from harness_jax.harness_r1.pool import EvaluationPool
from harness_jax.harness_r1.baseline import run_sync
from harness_jax.harness_r1.prompt import engineer_prompt_ids, engineer_prompt_text, system_prompt
from harness_jax.harness_r1.reward import RewardCache
from harness_jax.harness_r1.tables import Arm, evaluate_arm
from harness_jax.harness_r1.training import EngineerData, EngineerExtension
from harness_jax.paths import is_local
from harness_jax.rl.metrics import read_jsonl
from harness_jax.sampling.openai_client import ChatClientConfig, OpenAIChatClient
from harness_jax.sampling.tokenizer import load_tokenizer
from harness_jax.train import builders, console as console_lib, rollout, run as run_lib, spec as spec_lib
from harness_jax.train import task_tokenizer
from harness_jax.train.stages import Stages
from harness_jax.train.workdir import RunPaths

PIPELINE_VERSION = "harness-r1-pipeline-v1"
STAGES = ("packets", "teacher", "tokenizer", "sft_examples", "reference", "train")


@dataclasses.dataclass(frozen=True)
class EngineerPaths(RunPaths):
    """The run directory of the pipeline: the loop's ``RunPaths`` (checkpoints, SFT checkpoints,
    tokenizer, HF export, summary) plus the pipeline's own files (local paths)."""

    packets = property(lambda self: str(self.root / "packets"))
    sft = property(lambda self: str(self.root / "sft"))
    reward_cache = property(lambda self: str(self.root / "cache" / "rewards"))
    teacher_cache = property(lambda self: str(self.root / "cache" / "teacher"))
    examples = property(lambda self: str(self.root / "sft" / "examples.jsonl"))
    responses = property(lambda self: str(self.root / "sft" / "teacher.jsonl"))
    engineer_summary = property(lambda self: str(self.root / "engineer_summary.json"))
    plot = property(lambda self: str(self.root / "engineer.png"))

    def baseline_cache(self, packets) -> str:
        """``r1.packets.cache_dir`` (``packets``: its section), else ``<workdir>/cache/baselines``."""
        return packets.cache_dir or str(self.root / "cache" / "baselines")


# ------------------------------------------------------------------------------------------
# what the specs say (``run``: train.spec.RunSpec; ``r1``: harness_r1.config.R1Section)
# ------------------------------------------------------------------------------------------
def target_tokenizer(run, r1):
    return load_tokenizer(r1.target.tokenizer or None, cache_dir=run.model.tokenizer_cache_dir or None)


def target_harness(run, r1):
    """The target's base harness (``harness.spec`` or H0 of the env and protocol) with the
    target's limits and sampling (``r1.target``, ``env.max_turns``)."""
    h = rollout.base_harness(run)
    t = r1.target
    return dataclasses.replace(
        h, rules=dataclasses.replace(h.rules, max_tokens_per_turn=int(t.max_new_tokens)),
        memory=dataclasses.replace(h.memory, max_context_tokens=int(t.max_context)),
        temperature=float(t.temperature), top_p=1.0, top_k=-1)


def executor_config(run, r1) -> ExecutorConfig:
    """The executor of the baselines and reruns: the ``harness`` section's limits, the target's
    concurrency and the effect surface ``r1.effect_surface``."""
    return dataclasses.replace(spec_lib.executor_config(run.harness, concurrency=int(r1.target.concurrency)),
                               effect_surface=r1.effect_surface)


def env_ref(run) -> EnvRef:
    return EnvRef(run.env.name, dict(run.env.env_kwargs))


def packet_batches(r1) -> dict:
    p = r1.packets
    out = {"train": int(p.train_batches), "validation": int(p.validation_batches),
           "held_out": int(p.held_out_batches)}
    return {k: v for k, v in out.items() if v > 0}


def split_options(run) -> dict:
    """The env's split-loader options other than the task count and seed (the packet builder
    sets those)."""
    return {k: v for k, v in builders.split_options(run.env).items() if k not in ("n", "seed")}


# ------------------------------------------------------------------------------------------
# stages
# ------------------------------------------------------------------------------------------
def stage_packets(run, r1, paths: EngineerPaths, stages: Stages, target, tok,
                  console: console_lib.Console = console_lib.QUIET) -> tuple[PacketDataset, dict]:
    p = r1.packets
    harness = target_harness(run, r1)
    env = env_ref(run)
    splits = {"train": run.env.train_split, "held_out": run.env.eval_split}
    inputs = {"target": target.identity.to_dict(), "env": env.to_dict(), "harness": harness.harness_id,
              "batches": packet_batches(r1), "batch_size": p.batch_size, "budget": p.budget_tokens,
              "n_per_task": p.n_per_task, "seed": p.seed, "splits": splits,
              "split_kwargs": split_options(run), "executor": dataclasses.asdict(executor_config(run, r1))}
    ds = PacketDataset(paths.packets)
    bars: dict = {}

    def progress(split, i, n):
        if split not in bars:
            bars[split] = console.bar(n, f"baselines[{split}]")
        bars[split].update(1)

    def build():
        try:
            packets_lib.build_packet_dataset(target, env, harness, paths.packets, batches=packet_batches(r1),
                                 batch_size=int(p.batch_size), budget_tokens=int(p.budget_tokens),
                                 n_per_task=int(p.n_per_task), seed=int(p.seed),
                                 cache=BaselineCache(paths.baseline_cache(p)), tokenizer=tok,
                                 config=executor_config(run, r1), env_splits=splits,
                                 split_kwargs=split_options(run), progress=progress)
        finally:
            for b in bars.values():
                b.close()
        m = ds.manifest()
        return {"splits": m["splits"], "target": m["target"]}

    return ds, stages.run("packets", inputs, build)


def make_teacher(r1, paths: EngineerPaths):
    """The cold-start teacher of ``r1.teacher`` (the rule-based engineer writes only fixes the
    effect surface honours; an endpoint teacher gets the run's prompt)."""
    t = r1.teacher
    if t.kind == "rule":
        return RuleBasedEngineer(surface=r1.effect_surface)
    client = OpenAIChatClient(ChatClientConfig(
        base_url=t.base_url, model=t.model, api_key_env=t.api_key_env or None,
        cache_dir=t.cache_dir or paths.teacher_cache, price_input_per_mtok=float(t.price_in),
        price_output_per_mtok=float(t.price_out)))
    return PromptEngineer(client, temperature=float(t.temperature), max_tokens=int(t.max_tokens),
                          role="teacher", prompt=r1.prompt_spec())


def stage_teacher(run, r1, paths: EngineerPaths, stages: Stages, ds: PacketDataset,
                  console: console_lib.Console = console_lib.QUIET, data: Optional[EngineerData] = None) -> dict:
    """Teacher responses for the train packets; with ``r1.teacher.filter_by_delta`` only those
    whose measured Delta_B on their own packet's batch is > ``r1.teacher.min_delta_b`` are kept
    (``data``: the run's ``EngineerData``, whose paired reruns measure them)."""
    t = r1.teacher
    inputs = {"packets": stages.marker("packets")["key"], "kind": t.kind, "base_url": t.base_url, "model": t.model,
              "temperature": t.temperature, "max_tokens": t.max_tokens, "k": t.k, "seed": run.seed,
              "surface": r1.effect_surface, "filter": t.filter_by_delta, "min_delta_b": t.min_delta_b,
              "prompt": dataclasses.asdict(r1.prompt_spec()) if t.kind == "endpoint" else None}

    def build():
        packets = ds.load("train")
        teacher = make_teacher(r1, paths)
        bar = console.bar(len(packets), f"teacher[{teacher.name}]")
        try:
            rows, stats = dataset_lib.teacher_responses(packets, teacher, k=int(t.k), seed=int(run.seed),
                                                        progress=bar)
        finally:
            bar.close()
        if not rows:
            raise RuntimeError(f"the teacher {teacher.name} gave no valid patch for any of the {len(packets)} "
                               f"train packets ({stats['rejected_reasons']}); nothing to fine-tune on")
        if t.filter_by_delta:
            rows, fstats = run_sync(dataset_lib.afilter_by_delta(rows, packets, data.aevaluate,
                                                                 float(t.min_delta_b)), "filter_by_delta")
            stats = dict(stats, delta_filter=fstats)
            console.line(f"[teacher] Δ_B filter: kept {fstats['kept']} of {fstats['kept'] + fstats['dropped']} "
                         f"patches (kept mean Δ_B {fstats['kept_delta_b_mean']:+.3f}, dropped "
                         f"{fstats['dropped_delta_b_mean']:+.3f}, {fstats['dropped_infra']} incomplete)")
            if not rows:
                raise RuntimeError(f"no patch of the teacher {teacher.name} measurably helps its own packet "
                                   f"(Delta_B > {t.min_delta_b}) on any of the {len(packets)} train packets; "
                                   "nothing to fine-tune on. Use a stronger teacher, lower "
                                   "--config.r1.teacher.min_delta_b, or --config.r1.teacher.filter_by_delta=False")
        dataset_lib.write_jsonl(paths.responses, rows)
        return dict(stats, teacher=teacher.name, responses=len(rows))

    return stages.run("teacher", inputs, build)


def stage_tokenizer(run, r1, paths: EngineerPaths, stages: Stages, ds: PacketDataset) -> dict:
    """``model.tokenizer="task_bpe"``: the engineer's BPE on its training text (section doc)."""
    m = run.model
    if m.tokenizer != "task_bpe":
        return {"tokenizer": m.tokenizer}
    inputs = {"teacher": stages.marker("teacher")["key"], "vocab": m.tokenizer_vocab,
              "max_token_bytes": r1.tokenizer_max_token_bytes}

    def build():
        spec = r1.prompt_spec()
        texts = [system_prompt(spec, run.env.name)] + [engineer_prompt_text(pk, spec) for pk in ds.load("train")]
        texts += [r["response"] for r in dataset_lib.load_sft_examples(paths.responses)]
        tok = task_tokenizer.train_bpe(texts, paths.tokenizer, int(m.tokenizer_vocab),
                                       max_token_bytes=int(r1.tokenizer_max_token_bytes))
        return {"tokenizer": "task_bpe", "vocab": len(tok), "texts": len(texts)}

    return stages.run("tokenizer", inputs, build)


def check_lengths(run, ds: PacketDataset, tokenizer, examples, prompt=None) -> dict:
    """Prompt and response lengths against the engine and the packer (raises, naming the
    field, when something would be truncated); ``prompt``: the run's ``PromptSpec``."""
    r = run.rollout
    prompts = [len(engineer_prompt_ids(pk, tokenizer, prompt)) for s in ds.splits() for pk in ds.load(s)]
    longest_prompt = max(prompts) if prompts else 0
    if longest_prompt + int(r.max_new_tokens) > int(r.max_len):
        raise ValueError(
            f"config.rollout.max_len = {r.max_len}: the longest packet prompt has {longest_prompt} "
            f"engineer tokens, + rollout.max_new_tokens = {r.max_new_tokens} does not fit. Fix: raise "
            f"--config.rollout.max_len to >= {longest_prompt + r.max_new_tokens} or lower "
            "--config.r1.packets.budget_tokens")
    seqs = [len(e["prompt_ids"]) + len(e["response_ids"]) for e in examples]
    longest = max(longest_prompt + int(r.max_new_tokens), max(seqs) if seqs else 0)
    if longest - 1 > int(run.rl.pack_len):
        raise ValueError(
            f"config.rl.pack_len = {run.rl.pack_len}: an engineer sequence (prompt + response) has up to "
            f"{longest} tokens and would be split away from its packet. Fix: set --config.rl.pack_len >= "
            f"{longest} (or lower r1.packets.budget_tokens / rollout.max_new_tokens)")
    responses = [len(e["response_ids"]) for e in examples]
    return {"prompt_tokens_max": longest_prompt,
            "prompt_tokens_mean": sum(prompts) / max(len(prompts), 1),
            "response_tokens_max": max(responses) if responses else 0,
            "response_tokens_mean": sum(responses) / max(len(responses), 1),
            "responses_over_max_new_tokens": sum(n > int(r.max_new_tokens) for n in responses)}


def stage_sft_examples(run, paths: EngineerPaths, stages: Stages, ds: PacketDataset, tokenizer,
                       prompt=None) -> dict:
    upstream = [stages.marker("teacher")["key"], (stages.marker("tokenizer") or {}).get("key")]
    inputs = {"upstream": stages.key(upstream), "tokenizer": run.model.tokenizer,
              "prompt": dataclasses.asdict(prompt) if prompt is not None else None}

    def build():
        rows = dataset_lib.load_sft_examples(paths.responses)
        examples = dataset_lib.examples_from_responses(rows, ds.load("train"), tokenizer, prompt)
        out = check_lengths(run, ds, tokenizer, examples, prompt)
        dataset_lib.write_jsonl(paths.examples, examples)
        return dict(out, examples=len(examples), response_tokens=sum(len(e["response_ids"]) for e in examples))

    return stages.run("sft_examples", inputs, build)


def stage_reference(run, stages: Stages, data: EngineerData) -> dict:
    """The rule-based engineer on the held-out packets (one patch per packet, paired reruns)."""
    n = int(run.loop.eval.num_tasks)
    inputs = {"packets": stages.marker("packets")["key"], "reference": "rule", "eval_split": data.eval_split,
              "num": n}

    def build():
        packets = data.dataset.load(data.eval_split)[:n]
        if not packets:
            return {"delta_b": float("nan"), "packets": 0}
        row = evaluate_arm(Arm("rule", RuleBasedEngineer(surface=data.prompt.effect_surface)), packets,
                           data.target, data.baselines,
                           data.dataset.tasks(data.eval_split), tokenizer=data.target_tokenizer,
                           cache=data.reward_cache, eval_attempts=data.eval_attempts, seed=int(run.seed))
        return {"delta_b": row.delta, "valid_frac": row.valid_frac, "noop_frac": row.noop_frac,
                "improved_frac": row.improved_frac,
                "success_before": row.success_before, "success_after": row.success_after,
                "packets": row.batches, "infra_batches": row.infra_batches,
                "per_packet": [d.get("delta") for d in row.details]}

    return stages.run("reference", inputs, build)


# ------------------------------------------------------------------------------------------
# the whole run
# ------------------------------------------------------------------------------------------
def run(config, workdir, *, console: console_lib.Console = console_lib.QUIET, devices=None) -> dict:
    """Every stage (module docstring); returns and writes ``engineer_summary.json``."""
    spec = spec_lib.resolve(config, num_devices=len(devices) if devices else None)
    r1 = spec.method("r1")
    if r1 is None:
        raise ValueError("launch/engineer.py needs a Harness-R1 config (an r1 section): use "
                         "experiments/configs/harness_r1/")
    if not is_local(workdir):
        raise ValueError(f"--workdir {workdir}: Harness-R1's packet dataset and caches need a local "
                         "(or mounted) directory")
    paths = EngineerPaths.of(os.path.abspath(str(workdir)))
    os.makedirs(str(paths.root), exist_ok=True)
    _write_config(config, paths)
    stages = Stages(str(paths.root), PIPELINE_VERSION)
    t_start = time.perf_counter()
    info: dict = {}
    with registry.training_scope(spec.name):
        tok = target_tokenizer(spec, r1)
        target = r1.target.spec().build(tok)
        console.line(f"[target] {target.identity}")
        ds, info["packets"] = stage_packets(spec, r1, paths, stages, target, tok, console)
        console.line(f"[packets] {_packets_line(info['packets'])}")
        data = EngineerData(target=target, target_tokenizer=tok, dataset=ds,
                            baselines=BaselineCache(paths.baseline_cache(r1.packets)),
                            reward_cache=RewardCache(paths.reward_cache), sft_examples=paths.examples,
                            eval_split="held_out", eval_attempts=int(r1.eval_attempts),
                            require_code_hook_only=bool(r1.require_code_hook_only),
                            prompt=r1.prompt_spec(), cross_batch=bool(r1.cross_batch))
        info["teacher"] = stage_teacher(spec, r1, paths, stages, ds, console, data=data)
        console.line(f"[teacher] {info['teacher']['responses']} responses, "
                     f"{info['teacher']['rejected']} rejected ({info['teacher']['teacher']})")
        info["tokenizer"] = stage_tokenizer(spec, r1, paths, stages, ds)
        eng_tok = rollout.load_tokenizer(spec, paths.tokenizer)
        info["sft_examples"] = stage_sft_examples(spec, paths, stages, ds, eng_tok, r1.prompt_spec())
        s = info["sft_examples"]
        console.line(f"[sft data] {s['examples']} examples; engineer tokens: prompts <= {s['prompt_tokens_max']}, "
                     f"responses mean {s['response_tokens_mean']:.0f} / max {s['response_tokens_max']}")
        data.pool = _pool(r1, paths)
        try:
            if r1.reference_rule:
                info["reference"] = stage_reference(spec, stages, data)
                r = info["reference"]
                console.line(f"[reference] rule-based engineer on {r['packets']} held-out packets: "
                             f"mean Δ_B {r['delta_b']:+.3f}, valid {r.get('valid_frac', 0):.2f}")
            info["train"] = _train(spec, r1, paths, data, console, devices)
        finally:
            if data.pool is not None:
                data.pool.close()
            target.close()
    summary = summarize(paths, info, time.perf_counter() - t_start)
    with open(paths.engineer_summary + ".tmp", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, default=float)
    os.replace(paths.engineer_summary + ".tmp", paths.engineer_summary)
    try:
        plot(str(paths.root), paths.plot)
    except Exception as e:  # a plot must never lose a finished run
        console.line(f"[plot] failed: {e}")
    return summary


def _write_config(config, paths: EngineerPaths) -> None:
    to_json = getattr(config, "to_json_best_effort", None)
    if to_json is not None:
        with open(os.path.join(str(paths.root), "config.json"), "w", encoding="utf-8") as f:
            f.write(to_json(indent=1))


def _packets_line(info: dict) -> str:
    parts = [f"{s}: {v['packets']} packets of {v['batches']} batches ({v['cached_baselines']} cached, "
             f"{v['target_episodes']} target episodes)" for s, v in info["splits"].items()]
    return "; ".join(parts)


def _pool(r1, paths: EngineerPaths) -> Optional[EvaluationPool]:
    if int(r1.pool_workers) <= 0:
        return None
    return EvaluationPool(r1.target.spec(), workers=int(r1.pool_workers),
                          tokenizer_path=r1.target.tokenizer or None, cache_dir=paths.reward_cache)


def _train(spec, r1, paths: EngineerPaths, data, console: console_lib.Console, devices) -> dict:
    """The engineer's training on the loop (``train.run.fit`` with ``EngineerExtension``)."""
    t0 = time.perf_counter()
    summary = run_lib.fit(spec, str(paths.root), [EngineerExtension(data, sft_agg=r1.sft_agg)], devices=devices,
                          console=console)
    if summary.get("resumed_from") is not None:
        console.line(f"[train] resumed from GRPO step {summary['resumed_from']}")
    return {"wall_s": time.perf_counter() - t0, "summary": summary}


# ------------------------------------------------------------------------------------------
# summary and plot
# ------------------------------------------------------------------------------------------
def read_metrics(root: str) -> list[dict]:
    return read_jsonl(os.path.join(root, "metrics.jsonl"))


def summarize(paths: EngineerPaths, stages: dict, wall_s: float) -> dict:
    """The run's figures: stage times, SFT and GRPO phases, held-out evaluations, reference."""
    rows = read_metrics(str(paths.root))
    sft = [r for r in rows if "sft/nll" in r]
    grpo = [r for r in rows if "r1/delta_b_mean" in r]
    train = stages.get("train", {}).get("summary", {})
    evals = {e["tag"]: {k: e.get(k) for k in ("delta_b", "reward", "valid_frac", "noop_frac", "best_of_k_delta_b",
                                                "improved_frac", "infra_samples", "cross_delta_b", "task_deltas",
                                                "cross_task_deltas", "details",
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

    rows = [r for r in read_metrics(root) if "step" in r]
    summ = {}
    sp = os.path.join(root, "engineer_summary.json")
    if os.path.exists(sp):
        with open(sp, encoding="utf-8") as f:
            summ = json.load(f)
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    sft = console_lib.series(rows, "sft/nll")
    if sft[0]:
        ax[0].plot(*sft)
    ax[0].set(title="cold-start SFT", xlabel="SFT step", ylabel="response NLL / token", yscale="log")
    delta, valid = console_lib.series(rows, "r1/delta_b_mean"), console_lib.series(rows, "r1/valid_frac")
    if delta[0]:
        ax[1].plot(*delta, marker="o", label="mean Δ_B (K samples)")
        ax[1].plot(*valid, marker="s", label="valid fraction")
        ax[1].legend()
    ax[1].set(title="GRPO on train packets", xlabel="GRPO step")
    tags = [(k, v) for k, v in (summ.get("eval") or {}).items() if v.get("delta_b") is not None]
    if tags:
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
    return console_lib.save_figure(fig, out_png, dpi=100)
