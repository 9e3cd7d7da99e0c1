"""Evaluation under a harness (the base harness H0 by default): success, Pass@k, Avg@k.

Used periodically by the training loop (``selection`` split) and by ``launch/evaluate.py``
(any checkpoint or HF directory, any harness, any split; the entry point itself loads the sealed
test split, this module never does). Results are plain JSON-able dicts.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Sequence

from absl import logging


def evaluate_tasks(config, runner, tasks: Sequence, harness, *, k: int = 1, temperature: float = 0.0,
                   tag: str = "eval") -> dict:
    """Runs ``k`` attempts per task; returns success rate, pass@k / avg@k for k in {1, k}."""
    from harness_jax.eval import metrics

    if k > 1 and temperature == 0:
        raise ValueError("evaluate_tasks: k > 1 attempts need temperature > 0 (greedy attempts are identical)")

    async def one(i, task):
        return await runner.run(task, harness, k, f"{tag}-{i}", seed=10_000 + i,
                                temperature=temperature)

    async def all_tasks():
        return await asyncio.gather(*[one(i, t) for i, t in enumerate(tasks)])

    t0 = time.perf_counter()
    per_task = asyncio.run(all_tasks())
    records = []
    for task, eps in zip(tasks, per_task):
        for e in eps:
            if e.infra_error:
                continue
            records.append({"task_id": task.task_id, "success": bool(e.success), "score": float(e.reward),
                            "category": task.category, "turns": e.num_turns})
    ks = sorted({1, int(k)})
    summ = metrics.summarize(records, ks=ks)
    out = {"num_tasks": summ.num_tasks, "num_episodes": summ.num_episodes,
           "success_rate": summ.success_rate, "score": summ.score,
           "per_category": summ.per_category, "time_s": time.perf_counter() - t0,
           "turns_mean": (sum(r["turns"] for r in records) / len(records)) if records else 0.0,
           "infra_errors": sum(e.infra_error for eps in per_task for e in eps)}
    for kk, v in summ.pass_at.items():
        out[f"pass@{kk}"] = v
    for kk, v in summ.avg_at.items():
        out[f"avg@{kk}"] = v
    return out


def evaluate_main(config, workdir: str, *, tasks: Sequence, checkpoint: str = "", harness: str = "",
                  k: int = 0, split: str = "selection", out: str = "") -> dict:
    """Loads a policy (HF dir, a training workdir's latest checkpoint, or the config's model),
    evaluates it on ``tasks`` and writes a results JSON. Returns the results."""
    from harness_jax import config_validation
    from harness_jax.rl.learner import Learner
    from harness_jax.train import builders, rollout

    config_validation.validate(config, allow_test_split=True)
    os.makedirs(workdir, exist_ok=True)
    k = int(k or config.eval.k)
    temperature = float(config.eval.temperature)
    if k > 1 and temperature == 0:
        temperature = 0.7
    if checkpoint and os.path.exists(os.path.join(checkpoint, "tokenizer.json")):
        from harness_jax.sampling.tokenizer import load_tokenizer
        tokenizer = load_tokenizer(checkpoint)          # an exported HF dir carries its tokenizer
    elif checkpoint and os.path.isdir(os.path.join(checkpoint, "tokenizer")):
        from harness_jax.train import task_tokenizer
        tokenizer = task_tokenizer.load(os.path.join(checkpoint, "tokenizer"))   # a training workdir
    else:
        tokenizer = rollout.load_tokenizer(config, workdir)
    source = "config"
    if checkpoint and os.path.exists(os.path.join(checkpoint, "config.json")):
        from harness_jax.models import qwen3_5
        model = qwen3_5.load_hf(checkpoint, dtype=config.model.dtype)
        source = f"hf:{checkpoint}"
    else:
        model = builders.build_model(config)
    mesh = builders.make_mesh(config)
    learner = Learner(model, builders.learner_config(config, "grpo"), mesh=mesh, rules=builders.mesh_rules(config))
    if checkpoint and source == "config":
        from harness_jax.rl.checkpoint import CheckpointConfig, Checkpointer
        ck_dir = os.path.join(checkpoint, "checkpoints") if os.path.isdir(os.path.join(checkpoint, "checkpoints")) else checkpoint
        ck = Checkpointer(CheckpointConfig(ck_dir, save_on_sigterm=False))
        meta = ck.restore(learner)
        if meta is None:
            raise FileNotFoundError(f"--checkpoint={checkpoint}: neither an HF directory (config.json) nor "
                                    "a directory with orbax checkpoints; pass <workdir> of a training run or an HF dir")
        ck.close()
        source = f"orbax:{ck_dir}@{ck.latest_step()}"
    engine, _ = rollout.build_engine(config, learner, tokenizer, workdir)
    env_factory = builders.env_factory(config)
    if harness:
        config.unlock()
        config.harness.spec = harness
        config.lock()
    h = rollout.base_harness(config, env_factory)
    store = rollout.open_store(config, workdir)
    runner = rollout.EpisodeRunner(config, engine, env_factory, tokenizer, store)
    try:
        res = evaluate_tasks(config, runner, tasks, h, k=k, temperature=temperature, tag=f"eval-{split}")
    finally:
        if hasattr(engine, "close"):
            engine.close()
    res.update(split=split, k=k, temperature=temperature, policy=source, harness=harness or "H0",
               env=config.env.name, config_name=config.name)
    path = out or os.path.join(workdir, f"eval_{split}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1, default=float)
    logging.info("wrote %s", path)
    return res
