"""Harness-R1 registered as a training method: it owns the ``r1`` config section (the typed
``config.R1Section``), and it trains with its own pipeline (``launch/engineer.py``:
``pipeline.run``), so a plain training run refuses a config with an ``r1`` section.

The section's own rules are checked where its fields are declared (``config``); here are the
ones that need more: the files the section names, the arms the table knows
(``evaluate.ARMS``), and what Harness-R1 constrains in the rest of the config.
"""
from __future__ import annotations

import os

from harness_jax.train.schema import read
from harness_jax.harness_r1.config import R1Section
from harness_jax.harness_r1.evaluate import ARMS
from harness_jax.train import extensions


def resolve(config, bad, check_paths: bool = True) -> R1Section:
    """The ``r1`` section's spec; every problem of it goes to ``bad``."""
    r1 = read(R1Section, config.r1, "r1", bad)
    t = r1.target
    if check_paths and t.kind == "jax" and t.model and "://" not in t.model:
        _jax_target_dir(t, bad)
    if check_paths and t.tokenizer and not os.path.isdir(os.path.expanduser(t.tokenizer)):
        bad("r1.target.tokenizer", t.tokenizer, "no tokenizer directory here",
            "point --config.r1.target.tokenizer at a directory with tokenizer.json (e.g. the target's "
            "HF export), or give '' for the packaged Qwen3.5 vocabulary")
    if config.env.name == "alfworld" and t.concurrency > 1:
        bad("r1.target.concurrency", t.concurrency,
            "ALFWorld's engine is not thread-safe: concurrent episodes in one process fail",
            "set --config.r1.target.concurrency=1 (and spread reruns with r1.pool_workers)")
    rl = config.rl
    if rl.async_mode and isinstance(rl.max_staleness, int) and rl.max_staleness > 4:
        bad("rl.max_staleness", rl.max_staleness, "Harness-R1 trains with staleness <= 4",
            "set --config.rl.max_staleness to 1..4")
    for i, a in enumerate(r1.table.arms):
        if a not in ARMS:
            bad(f"r1.table.arms[{i}]", a, "unknown arm", f"use some of {', '.join(ARMS)}")
    if r1.table.ablate and r1.table.ablate not in ARMS:
        bad("r1.table.ablate", r1.table.ablate, "unknown arm", f"use one of {', '.join(ARMS)} or ''")
    return r1


def _jax_target_dir(t, bad) -> None:
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


extensions.register(extensions.Method(section="r1", resolve=resolve, trained_by="launch/engineer.py"))
