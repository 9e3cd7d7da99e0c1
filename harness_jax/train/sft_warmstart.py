"""SFT warm start on gold demonstrations, recorded through the real harness and environment.

A randomly initialised policy solves nothing, so GRPO would see only zero-variance groups. The
warm start plays the environment's oracle replies (for DBBench: the gold SQL, then the gold
answer) as the policy's turns, through the same executor, harness and chat format the GRPO
rollouts use. The recorded token sequences are therefore exactly what the policy will see and
produce later; only demonstrations the environment scores as successful are kept.

Training is ``rl.sft.train_sft`` (the project's one SFT loop) with a learner in SFT mode that
starts from the policy, checkpointed under ``<workdir>/sft_checkpoints``: a warm start killed
half-way resumes from its last checkpoint (the demonstrations are recorded again, identically).
The result becomes the GRPO learner's parameters *and* its KL reference (the policy the RL phase
starts from), and is pushed to the rollout engine.
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable, Optional, Sequence

from absl import logging

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


def demo_replies(config, task) -> list[str]:
    """Oracle replies of the environment, rendered as assistant text in ``env.protocol``."""
    if config.env.name != "dbbench":
        raise ValueError(f"config.env.name={config.env.name!r}: SFT warm start has gold demonstrations "
                         "for 'dbbench' only; set --config.sft.enabled=False")
    from harness_jax.envs.base import ToolCall
    from harness_jax.envs.dbbench.env import oracle_reply
    from harness_jax.sampling.chat import render_tool_call

    return [render_tool_call(r.name, r.arguments) if isinstance(r, ToolCall) else r
            for r in oracle_reply(task.data, protocol=config.env.protocol)]


async def record_demonstrations(ctx, tasks) -> list:
    """One demonstration episode per task, at most ``sft.demo_concurrency`` at a time."""
    from harness_jax.sampling.tokenizer import special_token_ids

    end = special_token_ids(ctx.tokenizer)["<|im_end|>"]
    sem = asyncio.Semaphore(int(ctx.config.sft.demo_concurrency))

    async def one(i, task):
        async with sem:
            eng = DemoEngine(ctx.tokenizer, demo_replies(ctx.config, task), end)
            eps = await ctx.runner.run(task, ctx.harness, 1, f"demo-{i}", seed=i, engine=eng,
                                       temperature=0.0, store=False)
            return eps[0]

    return list(await asyncio.gather(*[one(i, t) for i, t in enumerate(tasks)]))


def warm_start(ctx, *, should_stop: Optional[Callable[[], bool]] = None) -> dict:
    """Records the demonstrations, runs (or resumes) ``sft.steps`` SFT steps and installs the
    result in ``ctx.learner`` (parameters and KL reference) and the engine. Returns a summary;
    ``summary["finished"]`` is False when ``should_stop()`` ended it early (after a checkpoint)."""
    c = ctx.config
    s = c.sft
    t0 = time.perf_counter()
    tasks = builders.load_tasks(c, c.env.train_split, n=s.num_demos, seed_offset=s.seed_offset)
    episodes = asyncio.run(record_demonstrations(ctx, tasks))
    good = [e for e in episodes if e.success and not e.infra_error]
    record_s = time.perf_counter() - t0
    logging.info("SFT demos: %d/%d gold demonstrations succeed (%.1fs)", len(good), len(episodes), record_s)
    if not good:
        raise RuntimeError("SFT warm start: no gold demonstration succeeded in the environment; the "
                           "oracle/environment pairing is broken (check config.env)")
    out = train_segments(ctx, [seg for e in good for seg in e.segments], should_stop=should_stop)
    out.update(demos=len(episodes), demos_succeeded=len(good), record_s=record_s)
    return out


def train_segments(ctx, segments, *, should_stop: Optional[Callable[[], bool]] = None,
                   agg: str = "token_mean", on_step: Optional[Callable[[int, dict], None]] = None) -> dict:
    """SFT of the run's policy on ``segments`` (``sft.steps`` steps of ``sft.batch_size``,
    checkpointed under ``<workdir>/sft_checkpoints`` and resumed from there), then the result
    becomes ``ctx.learner``'s parameters and KL reference and is pushed to the engine.

    ``agg``: the SFT loss normalisation (``rl.sft``): ``"token_mean"`` per batch, or
    ``"dataset_token_mean"`` (the data set's response-token mean; the denominator is computed
    here from ``segments``). Returns the summary (``finished`` False when stopped early)."""
    from harness_jax.rl import sft
    from harness_jax.rl.checkpoint import CheckpointConfig, Checkpointer
    from harness_jax.rl.learner import Learner

    c, s = ctx.config, ctx.config.sft
    norm = sft.dataset_token_norm(segments, int(s.batch_size)) if agg == "dataset_token_mean" else 1.0
    learner = Learner(ctx.learner.model(ctx.learner.params_copy()),
                      builders.learner_config(c, "sft", peak_flops=ctx.peak_flops, sft_agg=agg,
                                              sft_norm_constant=norm),
                      mesh=ctx.mesh, rules=ctx.rules)
    batches = sft.SFTBatches(segments, builders.sft_config(c, len(segments), learner.row_multiple),
                             row_multiple=learner.row_multiple)
    ckpt = Checkpointer(CheckpointConfig(ctx.paths.sft_checkpoints, max_to_keep=1,
                                         save_interval_steps=int(s.ckpt_every_steps), save_on_sigterm=False))
    resumed_from = ckpt.latest_step()
    t_train = time.perf_counter()
    try:
        history = sft.train_sft(learner, batches, checkpointer=ckpt, writer=ctx.writer, should_stop=should_stop,
                                on_step=on_step or _log_every(10, batches.total_steps))
    finally:
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


def _log_every(n: int, total: int):
    def log(step: int, m: dict) -> None:
        if step % n == 0 or step == total:
            logging.info("sft step %d/%d: nll %.4f", step, total, m["nll"])
    return log
