"""The run's entry point: config -> specs (once) -> parts -> the loop (what launch/train.py runs).

    from harness_jax.train import run
    summary = run.train(config, workdir)     # resolve, build, train, close

``train`` resolves the experiment config into the run's specs (``train.spec``: nothing after
this reads the config), picks the extensions of the methods the config has from the registry
(``train.extensions``: a ``harness_s`` section with a pool trains with Harness-S's rescue,
router and re-anchoring; a config without method sections is plain agent GRPO), builds the run
context and trains it (``train.loop.Trainer``). ``fit`` does the same for specs resolved by the
caller (Harness-R1's pipeline trains its engineer this way, with its own extension).
"""
from __future__ import annotations

import json
from typing import Any, Callable, Optional, Sequence

from harness_jax.train import console as console_lib, context, extensions as extensions_lib, loop, spec as spec_lib
from harness_jax.train import workdir as workdir_lib


def train(config, workdir, *, extensions: Sequence[Any] = (), devices: Optional[Sequence[Any]] = None,
          on_step: Optional[Callable[[int, dict], None]] = None,
          console: Optional[console_lib.Console] = None) -> dict:
    """Resolves ``config`` (``ConfigValidationError`` lists every problem), writes it to
    ``<workdir>/config.json`` (what launch/tables.py reads a run's benchmark, seed and row from),
    then ``fit``s it with the extensions of its methods plus ``extensions``; returns the run's
    summary."""
    run = spec_lib.resolve(config, num_devices=len(devices) if devices else None)
    to_json = getattr(config, "to_json_best_effort", None)   # a ConfigDict (not a test's observer of one)
    if to_json is not None:
        workdir_lib.write_json(workdir_lib.RunPaths.of(workdir).root / "config.json", json.loads(to_json(sort_keys=True)))
    return fit(run, workdir, extensions_lib.for_run(run) + list(extensions), devices=devices, on_step=on_step,
               console=console)


def fit(run, workdir, extensions: Sequence[Any] = (), *, devices: Optional[Sequence[Any]] = None,
        on_step: Optional[Callable[[int, dict], None]] = None,
        console: Optional[console_lib.Console] = None) -> dict:
    """Trains the resolved run ``run`` (``train.spec.RunSpec``) in ``workdir``: builds its
    context, runs the loop with ``extensions``, closes both."""
    console_lib.setup_logging(run.loop.log.library_level)   # before Orbax and friends start talking
    ctx = context.build(run, workdir, devices=devices, console=console)
    try:
        trainer = loop.Trainer(ctx, extensions, on_step=on_step)
        try:
            return trainer.run()
        finally:
            trainer.close()
    finally:
        ctx.close()
