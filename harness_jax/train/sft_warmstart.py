"""SFT warm start on gold demonstrations, recorded through the real harness and environment.

A randomly initialised policy solves nothing, so GRPO would see only zero-variance groups. The
warm start plays the family's demonstration replies (``registry.EnvSpec.demos``; for DBBench the
gold SQL, then the gold answer) as the policy's turns, through the same executor, harness and
chat format the GRPO rollouts use. The recorded token sequences are therefore exactly what the
policy will see and produce later; only demonstrations the environment scores as successful are
kept, unless ``sft.keep_failed_demos`` (a weak teacher's demonstrations, e.g. ``kv_lookup``'s,
which are right only by chance: SFT then imitates the teacher, failures included).

Training is ``rl.sft.train_sft`` (the project's one SFT loop) with a learner in SFT mode that
starts from the policy, checkpointed under ``<workdir>/sft_checkpoints``: a warm start killed
half-way resumes from its last checkpoint (the demonstrations are recorded again, identically).
The result becomes the GRPO learner's parameters *and* its KL reference (the policy the RL phase
starts from), and is pushed to the rollout engine.

SFT cache (``sft.cache_dir``): a finished warm start is also published, read-only in spirit, as
``<cache_dir>/sft-<key>/`` (its Orbax checkpoint plus ``key.json``); a later run whose key is
the same copies it into its own ``sft_checkpoints/`` and skips recording and training. The key
(``sft_cache_key``) hashes the resolved spec except what cannot change the warm start (run name,
GRPO-only settings, evaluation, checkpointing, logging, the methods' sections) plus the
tokenizer's vocabulary, so a GRPO-only control and a Harness-S run of the same preset share one
warm start. It covers the config, not the code: clear the cache after changing SFT code.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from typing import Callable, Optional, Sequence

from absl import logging

from harness_jax.envs import registry
from harness_jax.envs.base import ToolCall
from harness_jax.rl import sft
from harness_jax.rl.checkpoint import CheckpointConfig, Checkpointer
from harness_jax.rl.learner import Learner
from harness_jax.sampling.chat import render_tool_call
from harness_jax.sampling.tokenizer import special_token_ids
from harness_jax.sampling.types import FINISH_STOP, GenerateRequest, GenerateResult, RolloutEngine
from harness_jax.train import builders


class DemoEngine(RolloutEngine):
    """Replays fixed assistant replies (one per turn) as token ids, ending each with <|im_end|>.

    One instance per demonstration episode. Log-probabilities are 0 (unused by SFT).
    """

    def __init__(self, tokenizer, replies: Sequence[str], end_token_id: int):
        self._tok = tokenizer
        self._replies = list(replies)
        self._end = int(end_token_id)
        self._i = 0

    @property
    def weight_version(self) -> int:
        return 0

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        if self._i < len(self._replies):
            text = self._replies[self._i]
        else:   # the environment asked for more turns than the demonstration has
            text = self._replies[-1]
        self._i += 1
        ids = list(self._tok.encode(text, add_special_tokens=False)) + [self._end]
        ids = ids[:request.params.max_new_tokens]
        return GenerateResult(request_id=request.request_id, token_ids=ids, logprobs=[0.0] * len(ids),
                              finish_reason=FINISH_STOP, weight_version=0, stop_reason=self._end,
                              prompt_tokens=len(request.input_ids))


def demo_actions(env, task) -> list:
    """The family's demonstration replies to ``task`` (``registry.EnvSpec.demos``: ``str`` or
    ``ToolCall``, one per turn) in ``env.protocol`` (``env``: ``train.spec.EnvSpec``)."""
    demos = registry.spec(env.name).demos
    if demos is None:
        raise ValueError(f"config.env.name={env.name!r}: this family registers no demonstrations "
                         "(registry.EnvSpec.demos), so it has no SFT warm start; set --config.sft.enabled=False")
    return list(demos(task, env.protocol))


def render_replies(actions) -> list[str]:
    """Demonstration actions (``str`` or ``ToolCall``) as the assistant text the policy writes."""
    return [render_tool_call(r.name, r.arguments) if isinstance(r, ToolCall) else r for r in actions]


def demo_replies(env, task) -> list[str]:
    """``demo_actions`` rendered as assistant text in ``env.protocol``."""
    return render_replies(demo_actions(env, task))


async def record_demonstrations(ctx, tasks) -> list:
    """One demonstration episode per task, at most ``sft.demo_concurrency`` at a time."""
    end = special_token_ids(ctx.tokenizer)["<|im_end|>"]
    sem = asyncio.Semaphore(int(ctx.spec.sft.demo_concurrency))
    bar = ctx.console.bar(len(tasks), "sft demos")

    async def one(i, task):
        async with sem:
            eng = DemoEngine(ctx.tokenizer, demo_replies(ctx.spec.env, task), end)
            eps = await ctx.runner.run(task, ctx.harness, 1, f"demo-{i}", seed=i, engine=eng,
                                       temperature=0.0, store=False)
            bar.update(1)
            return eps[0]

    try:
        return list(await asyncio.gather(*[one(i, t) for i, t in enumerate(tasks)]))
    finally:
        bar.close()


def warm_start(ctx, *, should_stop: Optional[Callable[[], bool]] = None) -> dict:
    """Records the demonstrations, runs (or resumes) ``sft.steps`` SFT steps and installs the
    result in ``ctx.learner`` (parameters and KL reference) and the engine. Returns a summary;
    ``summary["finished"]`` is False when ``should_stop()`` ended it early (after a checkpoint)."""
    s, env = ctx.spec.sft, ctx.spec.env
    cached = load_cached(ctx)
    if cached is not None:
        return cached
    t0 = time.perf_counter()
    tasks = builders.load_tasks(env, env.train_split, n=s.num_demos, seed_offset=s.seed_offset)
    episodes = asyncio.run(record_demonstrations(ctx, tasks))
    succeeded = [e for e in episodes if e.success and not e.infra_error]
    good = [e for e in episodes if not e.infra_error] if s.keep_failed_demos else succeeded
    record_s = time.perf_counter() - t0
    ctx.console.line(f"SFT demos: {len(succeeded)}/{len(episodes)} demonstrations succeed, {len(good)} "
                     f"trained on ({record_s:.1f}s)")
    if not good:
        raise RuntimeError("SFT warm start: no gold demonstration succeeded in the environment; the "
                           "oracle/environment pairing is broken (check config.env)")
    out = train_segments(ctx, [seg for e in good for seg in e.segments], should_stop=should_stop)
    out.update(demos=len(episodes), demos_succeeded=len(succeeded), demos_trained=len(good), record_s=record_s)
    if out["finished"]:
        publish(ctx)          # the SFT cache (sft.cache_dir): a later run with the same key reuses it
    return out


def train_segments(ctx, segments, *, should_stop: Optional[Callable[[], bool]] = None,
                   agg: str = "token_mean", on_step: Optional[Callable[[int, dict], None]] = None) -> dict:
    """SFT of the run's policy on ``segments`` (``sft.steps`` steps of ``sft.batch_size``,
    checkpointed under ``<workdir>/sft_checkpoints`` and resumed from there), then the result
    becomes ``ctx.learner``'s parameters and KL reference and is pushed to the engine.

    ``agg``: the SFT loss normalisation (``rl.sft``): ``"token_mean"`` per batch, or
    ``"dataset_token_mean"`` (the data set's response-token mean; the denominator is computed
    here from ``segments``). ``on_step(step, metrics)`` after every SFT step. Returns the
    summary (``finished`` False when stopped early)."""
    s = ctx.spec.sft
    norm = sft.dataset_token_norm(segments, int(s.batch_size)) if agg == "dataset_token_mean" else 1.0
    learner = Learner(ctx.learner.model(ctx.learner.params_copy()),
                      ctx.sft_learner_config(agg=agg, norm_constant=norm), mesh=ctx.mesh, rules=ctx.rules,
                      flops_per_token=ctx.learner.flops_per_token)
    batches = sft.SFTBatches(segments, sft.SFTConfig.for_steps(
        int(s.steps), len(segments), int(s.batch_size), seed=int(ctx.spec.seed) + int(s.seed_offset),
        pack=ctx.pack_config(learner.row_multiple)), row_multiple=learner.row_multiple)
    ckpt = Checkpointer(CheckpointConfig(ctx.paths.sft_checkpoints, max_to_keep=1,
                                         save_interval_steps=int(s.ckpt_every_steps), save_on_sigterm=False))
    resumed_from = ckpt.latest_step()
    t_train = time.perf_counter()
    bar = ctx.console.bar(batches.total_steps, "sft", initial=int(resumed_from or 0))
    log_step = _log_every(ctx.console, 10, batches.total_steps)

    def step_done(step, m):
        log_step(step, m)
        if on_step is not None:
            on_step(step, m)
        bar.update(1, nll=float(m["nll"]))
    try:
        history = sft.train_sft(learner, batches, checkpointer=ckpt, writer=ctx.writer, should_stop=should_stop,
                                on_step=step_done)
    finally:
        bar.close()
        ckpt.close()
    out = {"examples": len(segments), "steps": batches.steps, "total_steps": batches.total_steps,
           "resumed_from": resumed_from, "finished": batches.finished, "agg": agg, "norm_constant": norm,
           "train_s": time.perf_counter() - t_train}
    if history:
        tokens = sum(m["tokens"] for m in history)
        out.update(nll_first=history[0]["nll"], nll_last=history[-1]["nll"],
                   tokens_per_s=tokens / max(sum(m["step_time_s"] for m in history), 1e-9))
    if batches.finished:
        ctx.learner.set_params(learner.state["params"], reset_reference=True)
        ctx.sync_weights()
    return out


# ------------------------------------------------------------------------------------ SFT cache
def sft_cache_key(run, tokenizer) -> tuple[str, dict]:
    """``(key, keyed fields)`` of the warm start ``run`` (``train.spec.RunSpec``) describes with
    ``tokenizer``: what can change the recorded demonstrations and the SFT steps."""
    d = sft_key_fields(run)
    vocab = sorted(tokenizer.get_vocab().items())
    d["tokenizer_vocab_sha256"] = hashlib.sha256(json.dumps(vocab).encode()).hexdigest()
    text = json.dumps(d, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16], d


def sft_key_fields(run) -> dict:
    """The fields of the resolved run that can change its warm start (``sft_cache_key`` adds the
    tokenizer's vocabulary, which these fields determine for a given code version)."""
    e, rl, opt, r = run.env, run.rl, run.opt, run.rollout
    d = {"seed": run.seed, "model": dataclasses.asdict(run.model), "mesh": dataclasses.asdict(run.mesh),
         "env": {"name": e.name, "protocol": e.protocol, "train_split": e.train_split, "num_tasks": e.num_tasks,
                 "task_seed": e.task_seed, "max_turns": e.max_turns, "taskset": dataclasses.asdict(e.taskset),
                 "env_kwargs": dict(e.env_kwargs), "split_kwargs": dict(e.split_kwargs)},
         "harness": {"spec": run.harness.spec, "thinking": run.harness.thinking},
         "rollout": {"max_len": r.max_len, "max_new_tokens": r.max_new_tokens},
         "rl": {k: getattr(rl, k) for k in ("micro_batches", "pack_len", "pack_buckets", "pad_token_id",
                                            "logit_chunk")},
         "opt": {k: getattr(opt, k) for k in ("end_lr_ratio", "b1", "b2", "eps", "weight_decay", "grad_clip")},
         "sft": {k: v for k, v in dataclasses.asdict(run.sft).items()
                 if k not in ("cache_dir", "ckpt_every_steps", "demo_concurrency")}}
    if not run.sft.keep_failed_demos:     # the default: keys of warm starts made before the field existed stay valid
        del d["sft"]["keep_failed_demos"]
    return d


def cache_entry(ctx) -> Optional[str]:
    """``<sft.cache_dir>/sft-<key>`` of this run (None when the cache is off)."""
    if not ctx.spec.sft.cache_dir:
        return None
    key, _ = sft_cache_key(ctx.spec, ctx.tokenizer)
    return os.path.join(os.path.abspath(os.path.expanduser(ctx.spec.sft.cache_dir)), f"sft-{key}")


def load_cached(ctx) -> Optional[dict]:
    """A cached warm start copied into this run and installed (learner, KL reference, engine), or
    None when the cache is off or has no entry for this run's key."""
    entry = cache_entry(ctx)
    if entry is None or not os.path.exists(os.path.join(entry, "DONE")):
        return None
    dest = str(ctx.paths.sft_checkpoints)
    if os.path.exists(dest):
        shutil.rmtree(dest)                 # an unfinished local warm start: the cache replaces it
    shutil.copytree(os.path.join(entry, "checkpoints"), dest)
    step = ctx.load_params(dest)
    ctx.sync_weights()
    logging.info("SFT warm start from the cache %s (step %d)", entry, step)
    return {"finished": True, "cached": entry, "steps": int(step)}


def publish(ctx) -> Optional[str]:
    """Copies this run's finished warm start into the cache (atomically: a temporary directory
    renamed into place; an entry that already exists is kept)."""
    entry = cache_entry(ctx)
    if entry is None or os.path.exists(entry):
        return entry
    os.makedirs(os.path.dirname(entry), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(entry) + ".tmp-", dir=os.path.dirname(entry))
    try:
        shutil.copytree(str(ctx.paths.sft_checkpoints), os.path.join(tmp, "checkpoints"))
        with open(os.path.join(tmp, "key.json"), "w") as f:
            json.dump(sft_cache_key(ctx.spec, ctx.tokenizer)[1], f, indent=1, sort_keys=True, default=str)
        open(os.path.join(tmp, "DONE"), "w").close()
        os.rename(tmp, entry)
        logging.info("SFT warm start cached at %s", entry)
    except OSError as e:                    # another run published it first, or the disk is full
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.exists(entry):
            logging.warning("could not cache the SFT warm start at %s: %s", entry, e)
    return entry


def _log_every(console, n: int, total: int):
    def log(step: int, m: dict) -> None:
        if step % n == 0 or step == total:
            console.line(f"sft step {step}/{total}: nll {m['nll']:.4f}  {m.get('tokens_per_s', 0.0):.0f} tok/s")
    return log
