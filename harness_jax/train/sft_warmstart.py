"""SFT warm start on gold demonstrations, recorded through the real harness and environment.

A randomly initialised policy solves nothing, so GRPO would see only zero-variance groups. The
warm start plays the environment's oracle replies (for DBBench: the gold SQL, then the gold
answer) as the policy's turns, through the same executor, harness and chat format the GRPO
rollouts use. The recorded token sequences are therefore exactly what the policy will see and
produce later; only demonstrations the environment scores as successful are kept. Training is
token cross-entropy on the policy tokens (loss mask 1) with the learner in SFT mode.
"""
from __future__ import annotations

import asyncio
import time
from typing import Sequence

import numpy as np
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
    """Oracle replies of the environment, rendered as assistant text for the env's protocol."""
    if config.env.name != "dbbench":
        raise ValueError(f"config.env.name={config.env.name!r}: SFT warm start has gold demonstrations "
                         "for 'dbbench' only; set --config.sft.enabled=False")
    from harness_jax.envs.base import ToolCall
    from harness_jax.envs.dbbench.env import oracle_reply
    from harness_jax.sampling.chat import render_tool_call

    protocol = dict(config.env.kwargs).get("protocol", "text")
    out = []
    for r in oracle_reply(task.data, protocol=protocol):
        out.append(render_tool_call(r.name, r.arguments) if isinstance(r, ToolCall) else r)
    return out


async def record_demonstrations(config, runner, tasks, harness, tokenizer) -> list:
    from harness_jax.sampling.tokenizer import special_token_ids

    end = special_token_ids(tokenizer)["<|im_end|>"]

    async def one(i, task):
        eng = DemoEngine(tokenizer, demo_replies(config, task), end)
        eps = await runner.run(task, harness, 1, f"demo-{i}", seed=i, engine=eng, temperature=0.0,
                               store=False)
        return eps[0]

    sem = asyncio.Semaphore(32)

    async def guarded(i, t):
        async with sem:
            return await one(i, t)

    return list(await asyncio.gather(*[guarded(i, t) for i, t in enumerate(tasks)]))


def run_sft(config, trainer, workdir: str) -> dict:
    """Records demos, runs ``sft.steps`` SFT steps, installs the result in the GRPO learner and
    the engine. Returns a summary (demo success, loss curve ends, timings)."""
    from harness_jax.rl.batch import PackConfig, pack_segments
    from harness_jax.rl.learner import Learner

    s = config.sft
    t0 = time.perf_counter()
    tasks = builders.load_tasks(config, config.env.train_split, n=s.num_demos, seed_offset=s.seed_offset)
    episodes = asyncio.run(record_demonstrations(config, trainer.runner, tasks, trainer.base_harness,
                                                 trainer.tokenizer))
    good = [e for e in episodes if e.success and not e.infra_error]
    record_s = time.perf_counter() - t0
    logging.info("SFT demos: %d/%d gold demonstrations succeed (%.1fs)", len(good), len(episodes), record_s)
    if not good:
        raise RuntimeError("SFT warm start: no gold demonstration succeeded in the environment; the "
                           "oracle/environment pairing is broken (check config.env.kwargs)")
    segs = [seg for e in good for seg in e.segments]
    sft_learner = Learner(trainer.learner.model(builders.copy_params(trainer.learner.state["params"])),
                          builders.learner_config(config, "sft", peak_flops=trainer.peak_flops),
                          mesh=trainer.mesh, rules=trainer.rules)
    pack = PackConfig(buckets=trainer.pack_cfg.buckets, overlong="split", row_multiple=trainer.pack_cfg.row_multiple)
    rng = np.random.default_rng(config.seed + s.seed_offset)
    losses, t_train = [], time.perf_counter()
    tokens = 0
    for step in range(s.steps):
        idx = rng.choice(len(segs), size=min(s.batch_size, len(segs)), replace=False)
        tb = pack_segments([segs[i] for i in idx], pack)
        m = sft_learner.update(tb)[-1]
        losses.append(float(m["nll"] if "nll" in m else m["loss"]))
        tokens += int(m["tokens"])
        if step % 10 == 0 or step == s.steps - 1:
            logging.info("sft step %d/%d: nll %.4f", step + 1, s.steps, losses[-1])
            trainer.writer.write(step, {"sft/nll": losses[-1], "sft/grad_norm": m["grad_norm"],
                                        "sft/tokens_per_s": m["tokens_per_s"]})
    train_s = time.perf_counter() - t_train
    trainer.learner.state["params"] = builders.copy_params(sft_learner.state["params"])
    trainer.weight_sync(trainer.learner, trainer.learner.policy_version)
    del sft_learner
    return {"demos": len(episodes), "demos_succeeded": len(good), "steps": s.steps,
            "nll_first": losses[0], "nll_last": losses[-1], "record_s": record_s, "train_s": train_s,
            "tokens_per_s": tokens / max(train_s, 1e-9)}
