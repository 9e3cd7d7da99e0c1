"""Validation of the ``r1`` section (Harness-R1 engineer training, ``experiments/configs/harness_r1``).

Registered with the central validator on import (``config_validation.register_section_check``),
so ``config_validation.validate`` reports these problems with every other problem of a config.
"""
from __future__ import annotations

import os
import json

from harness_jax import config_validation
from harness_jax.config_validation import int_at_least, one_of
from harness_jax.rl import losses
from harness_jax.harness.hooks import EFFECT_SURFACES
from harness_jax.harness_r1 import targets
from harness_jax.harness_r1.reward import ADV_BASELINES


def find_r1_problems(config, check_paths: bool = True) -> list:
    """Every problem of ``config.r1`` (and of the fields Harness-R1 constrains elsewhere)."""
    out: list = []

    def bad(path, value, problem, fix):
        out.append(config_validation.Problem(path, value, problem, fix))

    _check_r1(config, bad)
    return out


def _check_r1(config, bad):
    """Harness-R1 engineer training (``experiments/configs/harness_r1``): the frozen target, the
    packet dataset, the cold-start teacher, the reward and the table."""
    r = config.r1
    t = r.target

    if one_of(bad, "r1.target.kind", t.kind, targets.KINDS):
        try:
            opts = json.loads(t.options or "{}")
            if not isinstance(opts, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            bad("r1.target.options", t.options, f"not a JSON object ({e})",
                'give --config.r1.target.options=\'{"max_len": 4096}\' (or "{}")')
            opts = None
        if opts is not None:
            try:
                targets.TargetSpec(kind=t.kind, model=t.model, urls=tuple(t.urls), version=t.version,
                                   factory=t.factory, options=opts)
            except ValueError as e:   # "TargetSpec.<field>: <problem>"
                field, _, msg = str(e).partition(": ")
                field = field.replace("TargetSpec.", "").split(".")[0]
                field = field if field in t else "options"
                bad(f"r1.target.{field}", t[field], msg or str(e),
                    "see harness_jax.harness_r1.TargetSpec (docs/harness_r1.md section 1)")
            if (t.kind == "factory" and t.factory.endswith("scripted:dbbench_agent")
                    and int((opts.get("kwargs") or {}).get("seed", 0)) != r.packets.seed):
                bad("r1.target.options", t.options,
                    f"the scripted agent indexes the tasks of seed {(opts.get('kwargs') or {}).get('seed', 0)} "
                    f"but the packets are drawn with r1.packets.seed={r.packets.seed}",
                    f'set --config.r1.target.options=\'{{"kwargs": {{"seed": {r.packets.seed}}}}}\'')
        if t.kind == "jax" and t.model and "://" not in t.model:
            _check_jax_target_dir(t, bad)
    if t.tokenizer and not os.path.isdir(os.path.expanduser(t.tokenizer)):
        bad("r1.target.tokenizer", t.tokenizer, "no tokenizer directory here",
            "point --config.r1.target.tokenizer at a directory with tokenizer.json (e.g. the target's "
            "HF export), or give '' for the packaged Qwen3.5 vocabulary")
    if not t.temperature >= 0:
        bad("r1.target.temperature", t.temperature, "must be >= 0", "0 = greedy reruns (the public code)")
    elif t.temperature > 0 and isinstance(r.packets.n_per_task, int) and r.packets.n_per_task < 2:
        bad("r1.packets.n_per_task", r.packets.n_per_task,
            f"a sampling target (r1.target.temperature={t.temperature}) with one episode per task gives "
            "Delta_B without any estimate of its noise",
            "set --config.r1.packets.n_per_task=2 (or more; paired seeded samples per task), or "
            "--config.r1.target.temperature=0 (greedy reruns, as the public code)")
    int_at_least(bad, "r1.target.max_new_tokens", t.max_new_tokens, 1)
    int_at_least(bad, "r1.target.max_context", t.max_context, 16)
    int_at_least(bad, "r1.target.concurrency", t.concurrency, 1)
    if config.env.name == "alfworld" and t.concurrency > 1:
        bad("r1.target.concurrency", t.concurrency,
            "ALFWorld's engine is not thread-safe: concurrent episodes in one process fail",
            "set --config.r1.target.concurrency=1 (and spread reruns with r1.pool_workers)")
    p = r.packets
    int_at_least(bad, "r1.packets.train_batches", p.train_batches, 1,
                  "GRPO needs train packets: set --config.r1.packets.train_batches >= 1")
    int_at_least(bad, "r1.packets.validation_batches", p.validation_batches, 0)
    int_at_least(bad, "r1.packets.held_out_batches", p.held_out_batches, 0)
    int_at_least(bad, "r1.packets.batch_size", p.batch_size, 1)
    int_at_least(bad, "r1.packets.budget_tokens", p.budget_tokens, 200,
                  "a packet needs room for its header: set --config.r1.packets.budget_tokens >= 200")
    int_at_least(bad, "r1.packets.n_per_task", p.n_per_task, 1)
    int_at_least(bad, "r1.packets.seed", p.seed, 0)
    te = r.teacher
    if one_of(bad, "r1.teacher.kind", te.kind, ("rule", "endpoint")) and te.kind == "endpoint":
        if not str(te.base_url).startswith(("http://", "https://")):
            bad("r1.teacher.base_url", te.base_url, "the endpoint teacher needs an http(s) base URL",
                "e.g. --config.r1.teacher.base_url=https://api.example/v1 (or --config.r1.teacher.kind=rule)")
        if not te.model:
            bad("r1.teacher.model", te.model, "the endpoint teacher needs a model name",
                "set --config.r1.teacher.model=<served model>")
    int_at_least(bad, "r1.teacher.k", te.k, 1)
    int_at_least(bad, "r1.teacher.max_tokens", te.max_tokens, 1)
    if te.api_key_env and not str(te.api_key_env).replace("_", "a").isalnum():
        bad("r1.teacher.api_key_env", "<hidden>", "must be the NAME of an environment variable, never the key",
            "e.g. --config.r1.teacher.api_key_env=OPENAI_API_KEY")
    one_of(bad, "r1.sft_agg", r.sft_agg, tuple(losses.AGGREGATIONS))
    int_at_least(bad, "r1.tokenizer_max_token_bytes", r.tokenizer_max_token_bytes, 0)
    int_at_least(bad, "r1.eval_attempts", r.eval_attempts, 1)
    int_at_least(bad, "r1.pool_workers", r.pool_workers, 0)
    one_of(bad, "r1.effect_surface", r.effect_surface, EFFECT_SURFACES)
    if not isinstance(r.cross_batch, bool):
        bad("r1.cross_batch", r.cross_batch, "must be True or False", "--config.r1.cross_batch=True")
    rw = r.reward
    for name in ("invalid_reward", "valid_bonus"):
        v = rw[name]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not -10 <= v <= 10:
            bad(f"r1.reward.{name}", v, "must be a number in [-10, 10] (Delta_B lies in [-1, 1])",
                f"e.g. --config.r1.reward.{name}=0.0 (the paper's default)")
    one_of(bad, "r1.reward.adv_baseline", rw.adv_baseline, ADV_BASELINES)
    if not isinstance(te.filter_by_delta, bool):
        bad("r1.teacher.filter_by_delta", te.filter_by_delta, "must be True or False",
            "--config.r1.teacher.filter_by_delta=True")
    if not isinstance(te.min_delta_b, (int, float)) or not -1 <= te.min_delta_b < 1:
        bad("r1.teacher.min_delta_b", te.min_delta_b, "must be a number in [-1, 1)",
            "e.g. --config.r1.teacher.min_delta_b=0.0 (keep patches that helped)")
    rl = config.rl
    if rl.async_mode and isinstance(rl.max_staleness, int) and rl.max_staleness > 4:
        bad("rl.max_staleness", rl.max_staleness, "Harness-R1 trains with staleness <= 4",
            "set --config.rl.max_staleness to 1..4")
    if not config.sft.enabled:
        pass                              # GRPO from the config's weights (e.g. model.hf_path)
    arms = tuple(r.table.arms)
    allowed = ("default", "react", "self_refine", "review_hint", "rule", "prompt", "sft", "grpo")
    for i, a in enumerate(arms):
        if a not in allowed:
            bad(f"r1.table.arms[{i}]", a, "unknown arm", f"use some of {', '.join(allowed)}")
    if "prompt" in arms and not (r.table.prompt_base_url and r.table.prompt_model):
        bad("r1.table.prompt_base_url", r.table.prompt_base_url, "the 'prompt' arm needs an endpoint",
            "set --config.r1.table.prompt_base_url and --config.r1.table.prompt_model, or drop 'prompt'")
    if r.table.ablate and r.table.ablate not in allowed:
        bad("r1.table.ablate", r.table.ablate, "unknown arm", f"use one of {', '.join(allowed)} or ''")
    try:
        tt = json.loads(r.table.transfer_targets or "[]")
        if not isinstance(tt, list):
            raise ValueError("not a JSON list")
        for d in tt:
            targets.TargetSpec.from_dict(d)
    except (ValueError, TypeError) as e:
        bad("r1.table.transfer_targets", r.table.transfer_targets, f"not a JSON list of TargetSpecs ({e})",
            'e.g. \'[{"kind": "chat", "model": "m", "urls": ["https://api.example/v1"]}]\'')


def _check_jax_target_dir(t, bad):
    """A ``jax`` target's HF directory: it exists, holds a config and weights, and the executor
    tokenises with the tokenizer it ships (never silently with the packaged Qwen3.5 one)."""
    fix = ("export the target with qwen3_5.save_hf(model, dir) (or launch/train.py's hf_final) and "
           "point --config.r1.target.model at it")
    if not os.path.isdir(t.model):
        bad("r1.target.model", t.model, "no HF weights directory here", fix)
        return
    names = set(os.listdir(t.model))
    if "config.json" not in names or not any(n.endswith(".safetensors") for n in names):
        bad("r1.target.model", t.model, "not an HF export (needs config.json and *.safetensors)", fix)
    if "tokenizer.json" in names and not t.tokenizer:
        bad("r1.target.tokenizer", t.tokenizer,
            f"the target ships its own tokenizer ({t.model}/tokenizer.json) but the executor would "
            "use the packaged Qwen3.5 vocabulary", f"set --config.r1.target.tokenizer={t.model}")


config_validation.register_section_check("r1", find_r1_problems)
