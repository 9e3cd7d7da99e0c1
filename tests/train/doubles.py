"""Test doubles for the Trainer's phases, in process: a learner that records what it is given
(no model, no compile), a runner whose episodes have scripted rewards (no engine, no
environment), an engine and a weight sync that record versions, and a metrics writer that keeps
its rows. Everything else a run context holds is real: the resolved spec, the run paths, the
task stream over the generated DBBench split, Orbax checkpoints, the collector, the advantage
path and the packer. The end-to-end tests (``tests/e2e``) run the real model, engine and
environment.
"""
from __future__ import annotations

import itertools
import zlib

import jax.numpy as jnp
import numpy as np

from harness_jax.train import context, spec as spec_lib
from harness_jax.train.console import QUIET
from harness_jax.train.groups import Episode
from harness_jax.train.workdir import RunPaths
from harness_jax.types import TokenSegment


class RecordingLearner:
    """What the loop uses of a ``Learner``: a policy version, a state Orbax can save, ``update``
    (records the packed batch, returns one optimizer step's metrics), ``model``/``params_copy``
    for the weight sync, the row multiple for the packer."""

    row_multiple = 1
    ref_params = None

    def __init__(self):
        self.policy_version = 0
        self.step = 0
        self.state = {"w": jnp.zeros((3,), jnp.float32)}
        self.batches = []

    def update(self, tb):
        self.batches.append(tb)
        self.policy_version += 1
        self.step += 1
        self.state = {"w": self.state["w"] + 1.0}
        tokens = float(np.sum(tb.loss_mask))
        return [{"loss": float(np.sum(tb.advantages * tb.loss_mask)), "grad_norm": 1.0, "loss_tokens": tokens,
                 "tokens": tokens, "step_time_s": 0.01, "logp_recompute_s": 0.0}]

    def params_copy(self):
        return dict(self.state)

    def model(self, params=None):
        return ("model", int(self.policy_version))


class RecordingEngine:
    """The engine as the loop sees it: a weight version (the collector records it)."""

    def __init__(self):
        self.weight_version = 0


class RecordingSync:
    """``weight_sync(model, version)``: records every sync and moves the engine's version."""

    def __init__(self, engine):
        self.engine = engine
        self.versions = []

    def __call__(self, model, version):
        self.versions.append(int(version))
        self.engine.weight_version = int(version)


class ScriptedRunner:
    """``EpisodeRunner.run`` with a scripted reward per (task, attempt): ``reward(task, j)``
    (default: success when a hash of the episode id is even). Episodes carry one token segment
    (two sampled tokens) so the packer and the advantage path see real ``TokenSegment``s."""

    def __init__(self, engine, reward=None):
        self.engine = engine
        self.reward = reward or (lambda task, j, gid: float(zlib.crc32(f"{gid}-{j}".encode()) % 2))
        self.calls = []
        self.pool_version = ""
        self._ids = itertools.count()

    async def run(self, task, harness, n, group_id, *, seed=0, engine=None, temperature=None, store=True,
                  sampling_key=None):
        self.calls.append((task.task_id, group_id, n, temperature))
        out = []
        for j in range(n):
            r = float(self.reward(task, j, group_id))
            seg = TokenSegment([1, 2, 3, 4], [0, 0, 1, 1], [0.0, 0.0, -0.5, -0.5],
                               policy_version=int(self.engine.weight_version))
            out.append(Episode(episode_id=f"{group_id}-{j}", task=task, harness_id="H0", reward=r, success=r > 0,
                               segments=[seg], policy_version=int(self.engine.weight_version), num_turns=1))
        return out

    @property
    def rollout_fn(self):
        async def fn(task, harness, n, group_id, **kw):
            return await self.run(task, harness, n, group_id, **kw)
        return fn

    def close(self):
        pass


class RecordingWriter:
    """The metrics writer: keeps ``(step, metrics)`` rows."""

    def __init__(self):
        self.rows = []

    def write(self, step, metrics):
        self.rows.append((int(step), dict(metrics)))

    def flush(self):
        pass

    def close(self):
        pass


def tiny_config(**over):
    """``tiny_cpu`` for in-process phase tests: no SFT, no plots or exports, dotted overrides."""
    from experiments.configs import tiny_cpu

    c = tiny_cpu.get_config()
    c.num_steps = 2
    c.sft.enabled = False
    c.eval.at_start = False
    c.eval.num_tasks = 2
    c.rl.group_size = 2
    c.rl.tasks_per_step = 2
    c.ckpt.every_steps = 1
    c.ckpt.export_hf = False
    c.log.plot = False
    c.log.progress_bar = "off"
    c.log.store_traces = False
    c.log.tensorboard = False
    for k, v in over.items():
        node = c
        *parts, last = k.split(".")
        for p in parts:
            node = node[p]
        node[last] = v
    return c


def run_context(config, workdir, *, reward=None) -> context.RunContext:
    """A real ``RunContext`` of the resolved ``config`` with the doubles above for the learner,
    the engine, its weight sync, the runner and the writer."""
    run = spec_lib.resolve(config, num_devices=1)
    paths = RunPaths.of(str(workdir))
    paths.root.mkdir(parents=True, exist_ok=True)
    engine = RecordingEngine()
    return context.RunContext(spec=run, paths=paths, console=QUIET, tokenizer=None, model_cfg=None,
                              mesh=type("Mesh", (), {"size": 1})(), rules=None, peak_flops=0.0,
                              learner=RecordingLearner(), engine=engine, weight_sync=RecordingSync(engine),
                              env_factory=None, harness=run.base_harness,
                              runner=ScriptedRunner(engine, reward), writer=RecordingWriter())
