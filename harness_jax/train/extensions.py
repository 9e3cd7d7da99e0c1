"""Loop extensions: how a method plugs into the training loop without the loop knowing it.

A ``LoopExtension`` is given the run context once it is built, contributes group
post-processors and a harness selector (the hooks of ``groups``), may do work after each
learner update (timed as its own phase), adds per-step metrics, and keeps state that is saved
in every checkpoint and restored on resume. Harness-S (``harness_jax.harness_s.training``) is
one: rescue as a post-processor, the router's state and decision log, re-anchoring.

    trainer = loop.Trainer(config, workdir, extensions=[MyExtension()])

Order in a step: collect (post-processors run per group) -> learner update -> weight sync ->
``after_update`` -> periodic evaluation -> checkpoint (``state_dict``) -> ``step_metrics`` ->
metrics written.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence


class LoopExtension:
    """Base class: every method is a no-op; override what the extension needs."""

    name = "extension"          # key of its state in checkpoints and of its summary section

    def attach(self, ctx) -> None:
        """Called once the run context (``train.context.RunContext``) is built."""

    def post_processors(self) -> Sequence[Any]:
        """``GroupPostProcessor``s to run on every collected group, in order."""
        return ()

    def harness_selector(self) -> Optional[Any]:
        """A ``HarnessSelector`` replacing the default (every task under H0), or None."""
        return None

    def after_update(self, trainer, timer) -> dict:
        """Work after the learner update and weight sync of ``trainer.step`` (``timer`` is the
        step's ``telemetry.PhaseTimer``); returns metrics."""
        return {}

    def step_metrics(self, batch, metrics: dict) -> dict:
        """Extra metrics of the step that trained on ``batch`` (``metrics`` holds the loop's,
        including ``time/step_s``)."""
        return {}

    def state_dict(self) -> dict:
        """JSON-serialisable state, saved with every checkpoint."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restores ``state_dict()``'s output when a run resumes."""

    def summary(self) -> dict:
        """A section of ``summary.json``."""
        return {}

    def close(self) -> None:
        """Releases what the extension started."""
