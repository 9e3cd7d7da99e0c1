"""Orbax checkpointing of a ``Learner``: async saves, keep-N, interval, SIGTERM, atomic.

A checkpoint holds two items:

* ``state``: the learner's sharded train state pytree (parameters, optimizer state, optimizer
  step, RNG key), saved with ``StandardSave`` and restored onto the learner's shardings;
* ``meta``: JSON with the policy version, the optimizer step and the caller's data-iterator
  state (any JSON-serialisable value, e.g. a grain iterator's ``get_state()``).

Atomicity is Orbax's: a save is written to a temporary directory and renamed only once every
file (and, async, every host) is done, so ``latest_step()`` never names a half-written
checkpoint. On SIGTERM (preemption) a flag is set; the next ``maybe_save`` saves whatever the
interval says, waits for it to finish, and ``should_stop()`` tells the loop to exit.

Directories may be local paths or URIs (``gs://bucket/run/checkpoints``): paths go through etils
``epath``, which keeps the scheme (``os.path.abspath`` would turn it into a local ``gs:/``
folder). ``restore_params`` reads only the parameters of a checkpoint (evaluation, warm starts
from another run), without an optimizer or a learner.
"""
from __future__ import annotations

import dataclasses
import signal
import threading
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp

from harness_jax.paths import resolve


def restore_params(directory, abstract_params, step: Optional[int] = None):
    """Only the parameters (``state["params"]``) of the checkpoint at ``step`` (default: the
    latest) under ``directory``, restored onto ``abstract_params``' shardings
    (``ShapeDtypeStruct``s with ``sharding``). Returns ``(params, step)``; raises
    ``FileNotFoundError`` naming the directory when it holds no checkpoint."""
    path = resolve(directory)
    mgr = ocp.CheckpointManager(path, item_names=("state", "meta"))
    try:
        step = mgr.latest_step() if step is None else int(step)
        if step is None:
            raise FileNotFoundError(f"{path}: no Orbax checkpoint in this directory; pass a training "
                                    "run's checkpoints directory")
        item = {"params": abstract_params}
        out = mgr.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
            item, restore_args=ocp.checkpoint_utils.construct_restore_args(item), partial_restore=True)))
        return out["state"]["params"], step
    finally:
        mgr.close()


def restore_meta(directory, step: Optional[int] = None) -> tuple[Optional[dict], Optional[int]]:
    """``(meta, step)`` of the checkpoint at ``step`` (default: the latest) under ``directory``
    without touching its arrays (the loop state in ``meta["data_state"]``); ``(None, None)``
    when the directory holds no checkpoint."""
    path = resolve(directory)
    if not path.exists():
        return None, None
    mgr = ocp.CheckpointManager(path, item_names=("state", "meta"))
    try:
        step = mgr.latest_step() if step is None else int(step)
        if step is None:
            return None, None
        out = mgr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(out["meta"]), step
    finally:
        mgr.close()


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    directory: str
    max_to_keep: Optional[int] = 3          # keep the N newest (None = all)
    save_interval_steps: int = 1            # save when step % interval == 0 (plus on SIGTERM)
    async_save: bool = True                 # write in a background thread
    save_on_sigterm: bool = True

    def __post_init__(self):
        if not str(self.directory):
            raise ValueError("CheckpointConfig.directory: empty; give a writable directory")
        if self.save_interval_steps < 1:
            raise ValueError(f"CheckpointConfig.save_interval_steps: {self.save_interval_steps} must be >= 1")
        if self.max_to_keep is not None and self.max_to_keep < 1:
            raise ValueError(f"CheckpointConfig.max_to_keep: {self.max_to_keep} must be >= 1 (or None)")


class Checkpointer:
    """Saves/restores ``Learner`` state; ``step`` is the caller's counter (policy version)."""

    def __init__(self, cfg: CheckpointConfig):
        self.cfg = cfg
        opts = ocp.CheckpointManagerOptions(max_to_keep=cfg.max_to_keep, save_interval_steps=cfg.save_interval_steps,
                                            enable_async_checkpointing=cfg.async_save, create=True)
        self.directory = resolve(cfg.directory)
        self.manager = ocp.CheckpointManager(self.directory, options=opts, item_names=("state", "meta"))
        self._preempted = threading.Event()
        self._prev_handler = None
        if cfg.save_on_sigterm and threading.current_thread() is threading.main_thread():
            self._prev_handler = signal.signal(signal.SIGTERM, self._on_sigterm)

    # ---- preemption ----------------------------------------------------------------------
    def _on_sigterm(self, signum, frame):
        self._preempted.set()

    def should_stop(self) -> bool:
        """True once SIGTERM arrived; the loop should ``maybe_save`` (which then forces a save)
        and exit."""
        return self._preempted.is_set()

    # ---- save / restore ------------------------------------------------------------------
    def maybe_save(self, learner, step: Optional[int] = None, data_state: Any = None, force: bool = False) -> bool:
        """Save if the interval says so, on ``force``, or after SIGTERM. Returns whether it saved."""
        step = learner.policy_version if step is None else int(step)
        preempt = self._preempted.is_set()
        if not (force or preempt or step % self.cfg.save_interval_steps == 0):
            return False
        if step in self.manager.all_steps():
            return False
        meta = {"policy_version": int(learner.policy_version), "opt_step": int(learner.step),
                "data_state": data_state}
        self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(learner.state),
                                                        meta=ocp.args.JsonSave(meta)),
                          force=True)  # the interval decision was made above
        if preempt:
            self.manager.wait_until_finished()
        return True

    def latest_step(self) -> Optional[int]:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    def restore(self, learner, step: Optional[int] = None) -> Optional[dict]:
        """Restore onto the learner's shardings; returns the meta dict (with ``data_state``), or
        None when there is no checkpoint."""
        step = self.manager.latest_step() if step is None else step
        if step is None:
            return None
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), learner.state)
        out = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                                 meta=ocp.args.JsonRestore()))
        learner.state = out["state"]
        meta = dict(out["meta"])
        learner.policy_version = int(meta["policy_version"])
        return meta

    def wait(self):
        self.manager.wait_until_finished()

    def close(self):
        self.manager.wait_until_finished()
        self.manager.close()
        if self._prev_handler is not None:
            signal.signal(signal.SIGTERM, self._prev_handler)
            self._prev_handler = None
