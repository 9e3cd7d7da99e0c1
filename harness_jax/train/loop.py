"""The agent GRPO loop: task stream -> G episodes per task through the executor -> rewards ->
group advantages -> packed TrainBatch -> learner -> weight sync -> evaluation -> checkpoint.

    from harness_jax.train import loop
    summary = loop.train(config, workdir)            # what launch/train.py runs

Modes (config.rollout / config.rl):
* colocated: the embedded ``JaxEngine`` runs on the learner's devices; after each learner step its
  parameters are replaced in place (a device copy; no host round trip, no export);
* disaggregated: SGLang-API servers (SGLang or ``launch/serve.py``) elsewhere; after each step the
  policy is exported as a Hugging Face directory and the servers load it (``update_weights_from_disk``);
* synchronous (on-policy): batch i is collected with the weights after step i-1;
* asynchronous: a producer thread collects ahead of the learner; batch i is *admitted* (its
  collection may start) only once the learner has finished step i - max_staleness, so no
  trajectory is ever more than ``max_staleness`` versions old when it is trained on, and nothing
  finished is discarded. The per-episode lag histogram is logged every step.

Hooks (Harness-S plugs in here without touching the loop): ``harness_selector(task, step)``
chooses the harness a group is rolled out under (H0 by default); ``post_processors`` transform a
finished group before its advantages (rescue, logging of routing decisions, ...).

Checkpoints hold the learner state and the loop state (step, policy version, task-stream
position, SFT/eval history); running the same command again resumes, with the same data order.
SIGTERM finishes the current step, saves, and exits cleanly.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import queue
import signal
import threading
import time
from typing import Any, Optional, Sequence

import jax
import numpy as np
from absl import logging

from harness_jax import config_validation
from harness_jax.train import builders, groups as groups_lib, telemetry
from harness_jax.train.data import TaskStream
from harness_jax.train.groups import FixedHarness, Group


@dataclasses.dataclass
class Batch:
    """One rollout batch, ready for the learner."""

    step: int                          # loop step it was collected for
    groups: list[Group]
    stream_state_before: dict          # task-stream position before its tasks were drawn
    dropped_groups: int = 0            # dynamic sampling
    oversample_rounds: int = 0
    rollout_s: float = 0.0
    collect_started_version: int = 0


class Trainer:
    """Owns every part of one run; ``run()`` executes it (see module docstring)."""

    def __init__(self, config, workdir: str, *, post_processors: Sequence[Any] = (),
                 harness_selector: Any = None, devices: Optional[Sequence[Any]] = None):
        self.devices = list(devices) if devices is not None else None
        config_validation.validate(config, num_devices=len(self.devices) if self.devices else None)
        self.config = config
        self.workdir = os.path.abspath(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.post_processors = list(post_processors)
        self._harness_selector = harness_selector
        self._stop = threading.Event()          # SIGTERM / request_stop()
        self.step = 0
        self.sft_done = not config.sft.enabled
        self.history: dict[str, Any] = {"eval": []}
        self._setup()

    # ============================================================ set-up
    def _setup(self):
        from harness_jax.rl.learner import Learner
        from harness_jax.train import rollout

        c = self.config
        self.tokenizer = rollout.load_tokenizer(c, self.workdir)
        self.model_cfg = builders.model_config(c)
        tok_vocab = len(self.tokenizer)
        if self.model_cfg.vocab_size < tok_vocab:
            raise config_validation.ConfigValidationError([config_validation.Problem(
                "model.overrides.vocab_size", self.model_cfg.vocab_size,
                f"smaller than the tokenizer's {tok_vocab} tokens",
                f"set --config.model.overrides.vocab_size >= {tok_vocab}")])
        self.mesh = builders.make_mesh(c, self.devices)
        self.rules = builders.mesh_rules(c)
        self.peak_flops = float(c.log.peak_flops) or (
            telemetry.measure_matmul_peak_flops() if c.mesh.platform == "cpu" else 0.0)
        logging.info("per-device peak for MFU: %.3g FLOP/s (%s)", self.peak_flops,
                     "config" if c.log.peak_flops else "measured fp32 matmul")
        model = builders.build_model(c, self.model_cfg)
        self._initial_model = model
        self.learner = Learner(model, builders.learner_config(c, "grpo", peak_flops=self.peak_flops),
                               mesh=self.mesh, rules=self.rules,
                               ref_model=model if c.rl.kl_coef > 0 else None)
        self.pack_cfg = builders.pack_config(c, self.learner)
        self.num_params = int(sum(x.size for x in jax.tree.leaves(self.learner.state["params"])))
        self.env_factory = builders.env_factory(c)
        self.train_tasks = builders.load_tasks(c, c.env.train_split)
        self.eval_tasks = builders.load_tasks(c, c.env.eval_split, n=c.eval.num_tasks)
        self.stream = TaskStream(self.train_tasks, seed=c.seed)
        self.base_harness = rollout.base_harness(c, self.env_factory)
        self.harness_selector = self._harness_selector or FixedHarness(self.base_harness)
        self.store = rollout.open_store(c, self.workdir)
        self.engine, self.weight_sync = rollout.build_engine(c, self.learner, self.tokenizer, self.workdir)
        self.runner = rollout.EpisodeRunner(c, self.engine, self.env_factory, self.tokenizer, self.store)
        self.writer = rollout.metrics_writer(c, self.workdir)
        from harness_jax.rl.checkpoint import CheckpointConfig, Checkpointer
        self.ckpt = Checkpointer(CheckpointConfig(os.path.join(self.workdir, "checkpoints"), max_to_keep=c.ckpt.keep,
                                                  save_interval_steps=1, async_save=True,
                                                  save_on_sigterm=False))   # the loop handles SIGTERM
        self.resumed_from = None
        if c.ckpt.resume and self.ckpt.latest_step() is not None:
            self._restore(self.ckpt.latest_step())

    # ============================================================ checkpoint
    def _meta(self, stream_state: dict) -> dict:
        return {"step": self.step, "policy_version": self.learner.policy_version,
                "stream": stream_state, "sft_done": self.sft_done, "history": self.history,
                "config_name": self.config.name}

    def save(self, stream_state: Optional[dict] = None) -> None:
        t0 = time.perf_counter()
        self.ckpt.maybe_save(self.learner, step=self.step, force=True,
                             data_state=self._meta(stream_state or self.stream.state()))
        self.ckpt.wait()
        logging.info("checkpoint at step %d (%.2fs)", self.step, time.perf_counter() - t0)

    def _restore(self, step: int) -> None:
        meta = self.ckpt.restore(self.learner, step)["data_state"]
        self.learner.policy_version = int(meta["policy_version"])
        self.step = int(meta["step"])
        self.sft_done = bool(meta["sft_done"])
        self.history = meta.get("history") or {"eval": []}
        self.stream.restore(meta["stream"])
        self.weight_sync(self.learner, self.learner.policy_version)
        self.resumed_from = step
        logging.info("resumed from checkpoint step %d (policy version %d)", step, self.learner.policy_version)

    # ============================================================ collection
    async def _collect_group(self, task, step: int, index: int) -> Group:
        harness = self.harness_selector(task, step)
        gid = f"s{step}-g{index}-{task.task_id}"
        episodes = await self.runner.run(task, harness, self.config.rl.group_size, gid,
                                         seed=_seed(self.config.seed, step, index))
        ok = [e for e in episodes if not e.infra_error]   # infra failures are not task failures
        group = Group(gid, task, ok, harness_id=_harness_id(harness),
                      info={"infra_errors": len(episodes) - len(ok)})
        for pp in self.post_processors:
            group = await pp(group, self.runner.rollout_fn, step)
            if group is None:
                break
        return group

    async def _collect(self, step: int) -> Batch:
        c = self.config
        t0 = time.perf_counter()
        state_before = self.stream.state()
        version0 = self.engine_version()
        tasks = self.stream.take(c.rl.tasks_per_step)
        got = await asyncio.gather(*[self._collect_group(t, step, i) for i, t in enumerate(tasks)])
        got = [g for g in got if g is not None]
        kept, dropped = groups_lib.dynamic_sampling_filter(got, c.rl.dynamic_sampling)
        n_dropped, rounds = len(dropped), 0
        while (c.rl.dynamic_sampling == "oversample" and len(kept) < c.rl.tasks_per_step
               and rounds < c.rl.max_oversample_rounds):
            rounds += 1
            need = c.rl.tasks_per_step - len(kept)
            extra = self.stream.take(need)
            more = await asyncio.gather(*[self._collect_group(t, step, 1000 * rounds + i)
                                          for i, t in enumerate(extra)])
            k2, d2 = groups_lib.dynamic_sampling_filter([g for g in more if g is not None], "oversample")
            kept += k2
            n_dropped += len(d2)
        return Batch(step, kept, state_before, n_dropped, rounds, time.perf_counter() - t0, version0)

    def engine_version(self) -> int:
        return int(self.engine.weight_version)

    # ============================================================ learner side
    def _train_on(self, batch: Batch, timer: telemetry.PhaseTimer) -> dict:
        from harness_jax.rl.batch import pack_segments

        c = self.config
        adv = groups_lib.compute_advantages(batch.groups, eps=c.rl.adv_eps, scale=c.rl.adv_scale,
                                            baseline=c.rl.adv_baseline)
        hist = groups_lib.staleness_histogram(batch.groups, self.learner.policy_version)
        segments = [s for g in batch.groups for e in g.episodes for s in e.segments]
        episodes = [e for g in batch.groups for e in g.episodes]
        out: dict[str, float] = {}
        if segments:
            tb = pack_segments(segments, self.pack_cfg)
            with timer.phase("train"):
                steps = self.learner.update(tb)
            timer.add("logprob_recompute", steps[0].get("logp_recompute_s", 0.0))
            timer.times["train"] -= steps[0].get("logp_recompute_s", 0.0)
            last = steps[-1]
            for k, v in last.items():
                out[f"learner/{k}"] = float(v)
            tokens = sum(m["tokens"] for m in steps)
            train_s = sum(m["step_time_s"] for m in steps)
            fpt = telemetry.flops_per_token(self.model_cfg, tb.shape[1], self.num_params)
            out["perf/train_tokens_per_s"] = tokens / max(train_s, 1e-9)
            if fpt:
                out["perf/mfu"] = telemetry.mfu(fpt, tokens, train_s, self.peak_flops, self.mesh.size)
            for k, v in tb.stats.as_dict().items():
                out[f"pack/{k}"] = float(v)
        else:
            self.learner.policy_version += 1   # an empty batch (all groups dropped) still advances
            out["learner/skipped_empty_batch"] = 1.0
        rewards = [e.reward for e in episodes]
        gen_tokens = sum(int(np.sum(s.loss_mask)) for s in segments)
        out.update({
            "rollout/episodes": len(episodes),
            "rollout/reward_mean": float(np.mean(rewards)) if rewards else 0.0,
            "rollout/success_rate": float(np.mean([e.success for e in episodes])) if episodes else 0.0,
            "rollout/turns_mean": float(np.mean([e.num_turns for e in episodes])) if episodes else 0.0,
            "rollout/infra_errors": float(sum(g.info.get("infra_errors", 0) for g in batch.groups)),
            "rollout/generated_tokens": float(gen_tokens),
            "rollout/gen_tokens_per_s": gen_tokens / max(batch.rollout_s, 1e-9),
            "groups/kept": float(len(batch.groups)),
            "groups/dropped_zero_variance": float(batch.dropped_groups),
            "groups/oversample_rounds": float(batch.oversample_rounds),
            "groups/zero_variance_fraction": float(adv["zero_variance_fraction"]),
            "staleness/max": float(max(hist) if hist else 0),
            "staleness/mean": (float(sum(k * v for k, v in hist.items()) / max(sum(hist.values()), 1))),
        })
        for lag, n in hist.items():
            out[f"staleness/hist_{lag}"] = float(n)
        # how many learner versions behind the engine was when this batch's collection started
        out["staleness/admission_lag"] = float(batch.step - batch.collect_started_version)
        self.history.setdefault("admission_lag", []).append(batch.step - batch.collect_started_version)
        self.history.setdefault("staleness", []).append({str(k): v for k, v in hist.items()})
        self.history.setdefault("task_ids", []).append([g.task.task_id for g in batch.groups])
        return out

    # ============================================================ evaluation
    def evaluate(self, tag: str) -> dict:
        from harness_jax.train import evaluation

        t0 = time.perf_counter()
        res = evaluation.evaluate_tasks(self.config, self.runner, self.eval_tasks, self.base_harness,
                                        k=self.config.eval.k, temperature=self.config.eval.temperature,
                                        tag=tag)
        res["step"] = self.step
        res["tag"] = tag
        res["time_s"] = time.perf_counter() - t0
        self.history["eval"].append(res)
        self.writer.write(self.step, {f"eval/{k}": v for k, v in _flat(res).items()
                                      if isinstance(v, (int, float))})
        logging.info("eval[%s] step %d: success %.3f %s", tag, self.step, res["success_rate"],
                     {k: v for k, v in res.items() if k.startswith(("pass@", "avg@"))})
        return res

    # ============================================================ SFT warm start
    def _sft(self) -> dict:
        from harness_jax.train import sft_warmstart

        c = self.config
        self.evaluate("before_sft")
        res = sft_warmstart.run_sft(c, self, self.workdir)
        self.sft_done = True
        self.history["sft"] = res
        self.evaluate("after_sft")
        self.save()
        return res

    # ============================================================ main loop
    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> dict:
        from harness_jax.envs import registry

        c = self.config
        prev = _install_sigterm(self._stop)
        try:
            with registry.training_scope(c.name):
                return self._run()
        finally:
            _restore_sigterm(prev)

    def _run(self) -> dict:
        c = self.config
        if not self.sft_done:
            self._sft()
        elif self.step == 0 and c.eval.at_start and not self.history["eval"]:
            self.evaluate("start")
        progress = telemetry.Progress(c.num_steps, self.step, c.log.progress_bar)
        producer = _AsyncProducer(self) if c.rl.async_mode else None
        if producer is not None:
            producer.start(self.step)
        preempted = False
        last_state = self.stream.state()
        try:
            while self.step < c.num_steps:
                timer = telemetry.PhaseTimer()
                t_step = time.perf_counter()
                if producer is None:
                    with timer.phase("rollout"):
                        batch = asyncio.run(self._collect(self.step))
                else:
                    with timer.phase("queue_wait"):
                        batch = producer.get()
                    timer.add("rollout_overlapped", batch.rollout_s)
                metrics = self._train_on(batch, timer)
                self.step += 1
                if self.step % c.rollout.sync_every == 0 or self.step == c.num_steps:
                    with timer.phase("weight_sync"):
                        self.weight_sync(self.learner, self.learner.policy_version)
                if producer is not None:
                    producer.step_done(self.step)
                # the stream position to resume from: before the oldest batch not yet trained on
                last_state = producer.resume_state() if producer is not None else self.stream.state()
                if c.eval.every_steps and self.step % c.eval.every_steps == 0 and self.step < c.num_steps:
                    with timer.phase("eval"):
                        self.evaluate("periodic")
                stop = self._stop.is_set()
                if (c.ckpt.every_steps and self.step % c.ckpt.every_steps == 0) or stop:
                    with timer.phase("checkpoint"):
                        self.save(last_state)
                metrics.update(timer.pop())
                metrics["time/step_s"] = time.perf_counter() - t_step
                metrics["policy_version"] = float(self.learner.policy_version)
                self.writer.write(self.step, metrics)
                progress.update(1, reward=metrics["rollout/reward_mean"],
                                loss=metrics.get("learner/loss", 0.0))
                if stop:
                    preempted = True
                    logging.info("stop requested (SIGTERM): checkpoint saved at step %d; exiting", self.step)
                    break
        finally:
            progress.close()
            if producer is not None:
                producer.close()
        if not preempted:
            self.evaluate("final")
            self.save(last_state)
            if c.ckpt.export_hf:
                from harness_jax.models import qwen3_5
                out = os.path.join(self.workdir, "hf_final")
                qwen3_5.save_hf(self.learner.model(), out)
                self.tokenizer.save_pretrained(out)   # evaluate.py / transformers load it from there
        summary = {"step": self.step, "policy_version": self.learner.policy_version,
                   "preempted": preempted, "resumed_from": self.resumed_from,
                   "eval": self.history["eval"], "sft": self.history.get("sft")}
        with open(os.path.join(self.workdir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1, default=float)
        return summary

    def close(self) -> None:
        for closer in (getattr(self.engine, "close", None), getattr(self.writer, "close", None),
                       getattr(self.store, "close", None), self.ckpt.close):
            if closer is not None:
                try:
                    closer()
                except Exception as e:  # closing must not hide the run's own result
                    logging.warning("close failed: %s", e)


class _AsyncProducer:
    """Collects rollout batches on a background thread, admission-bounded by staleness.

    Batch i may start only when ``i - learner_steps_done <= max_staleness``; since collection
    starts with the weights of version >= i - max_staleness, every episode's lag at train time is
    at most ``max_staleness``. Finished batches are never discarded.
    """

    def __init__(self, trainer: Trainer):
        self.t = trainer
        self.k = int(trainer.config.rl.max_staleness)
        self._q: "queue.Queue[Any]" = queue.Queue()
        self._cv = threading.Condition()
        self._done = 0
        self._closed = False
        self._pending_states: list[dict] = []   # stream states of batches produced, not yet trained
        self._thread: Optional[threading.Thread] = None

    def start(self, first_step: int) -> None:
        self._done = first_step
        self._thread = threading.Thread(target=self._work, args=(first_step,), daemon=True,
                                        name="rollout-producer")
        self._thread.start()

    def _work(self, first: int) -> None:
        from harness_jax.envs import registry
        try:
            with registry.training_scope(self.t.config.name):
                for i in range(first, self.t.config.num_steps):
                    with self._cv:
                        self._cv.wait_for(lambda: self._closed or i - self._done <= self.k)
                        if self._closed:
                            return
                    batch = asyncio.run(self.t._collect(i))
                    with self._cv:
                        self._pending_states.append(batch.stream_state_before)
                    self._q.put(batch)
        except BaseException as e:  # surface the producer's failure in the learner thread
            self._q.put(e)

    def get(self) -> Batch:
        item = self._q.get()
        if isinstance(item, BaseException):
            raise RuntimeError(f"rollout producer failed: {item!r}") from item
        return item

    def step_done(self, steps_done: int) -> None:
        with self._cv:
            self._done = steps_done
            if self._pending_states:
                self._pending_states.pop(0)
            self._cv.notify_all()

    def resume_state(self) -> dict:
        """Stream position before the oldest batch not yet trained on (collected batches in
        flight are re-collected after a restart: same tasks, fresh rollouts)."""
        with self._cv:
            return self._pending_states[0] if self._pending_states else self.t.stream.state()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=600)


# ---------------------------------------------------------------------------------------------
def train(config, workdir: str, **kw) -> dict:
    """Build, run and close one training run (the launcher's entry point)."""
    trainer = Trainer(config, workdir, **kw)
    try:
        return trainer.run()
    finally:
        trainer.close()


def _seed(seed: int, step: int, index: int) -> int:
    return (int(seed) * 1_000_003 + step * 10_007 + index) % (2 ** 31 - 1)


def _harness_id(h) -> str:
    for attr in ("harness_id", "id", "name"):
        v = getattr(h, attr, None)
        if isinstance(v, str) and v:
            return v
    return type(h).__name__


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "/"))
        else:
            out[key] = v
    return out


def _install_sigterm(stop: threading.Event):
    if threading.current_thread() is not threading.main_thread():
        return None
    def handler(signum, frame):
        logging.warning("SIGTERM received: finishing the current step, then checkpoint and exit")
        stop.set()
    return signal.signal(signal.SIGTERM, handler)


def _restore_sigterm(prev) -> None:
    if prev is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, prev)
