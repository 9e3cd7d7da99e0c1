"""The agent GRPO loop: task stream -> one group per task (G episodes through the executor) ->
rewards -> group advantages -> packed TrainBatch -> learner -> weight sync -> evaluation ->
checkpoint.

    from harness_jax.train import run
    summary = run.train(config, workdir)          # what launch/train.py runs (resolve, build, train)

``Trainer(ctx, extensions)`` trains the run context ``ctx`` (``train/context.py``: the resolved
spec, learner, engine, runner, harness, tokenizer, writer); the phases (``collect.Collector``,
``sft_warmstart``, ``evaluation``) and the methods' extensions (``train/extensions.py``) get the
context, never the trainer.

Modes (``rollout`` and ``rl`` sections):
* colocated: the embedded ``JaxEngine`` runs on the learner's devices; after each learner step its
  parameters are replaced in place (a device copy; no host round trip, no export);
* disaggregated: SGLang-API servers (SGLang or ``launch/serve.py``) elsewhere; after each step the
  policy is exported as a Hugging Face directory and the servers load it (``update_weights_from_disk``);
* synchronous (on-policy): batch i is collected with the weights after step i-1;
* asynchronous: a producer thread collects ahead of the learner (``producer.AsyncProducer``);
  batch i is *admitted* (its collection may start) only once the learner has finished step
  i - max_staleness, so no trajectory is ever more than ``max_staleness`` versions old when it is
  trained on, and nothing finished is discarded. The per-episode lag histogram is logged every
  step.

Checkpoints hold the learner state and the loop state (step, policy version, task-stream
position, SFT/eval history, each extension's state); running the same command again resumes,
with the same data order. SIGTERM finishes the current step (or SFT step), saves, and exits
cleanly.
"""
from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np
from absl import logging

from harness_jax.envs import registry
from harness_jax.models import qwen3_5
from harness_jax.paths import is_local
from harness_jax.rl import perf
from harness_jax.rl.batch import pack_segments
from harness_jax.rl.checkpoint import CheckpointConfig, Checkpointer
from harness_jax.rl.learner import summarize_update
from harness_jax.rl.metrics import flatten
from harness_jax.train import (builders, console, context, evaluation, groups as groups_lib, sft_warmstart,
                               telemetry, workdir as workdir_lib)
from harness_jax.train.collect import Batch, Collector, RolloutGroups
from harness_jax.train.data import TaskStream
from harness_jax.train.extensions import Extensions
from harness_jax.train.groups import FixedHarness
from harness_jax.train.producer import AsyncProducer
from harness_jax.train.stages import Stages


class Trainer:
    """Trains one run context: ``Trainer(ctx, extensions).run()`` (``ctx``:
    ``context.RunContext``; ``extensions``: ``train.extensions.Extension``s). ``on_step(step,
    metrics)`` is called after every GRPO step."""

    def __init__(self, ctx: context.RunContext, extensions: Sequence[Any] = (), *,
                 on_step: Optional[Callable[[int, dict], None]] = None):
        self.ctx = ctx
        self.spec = ctx.spec.loop                  # train.spec.LoopSpec
        self.ext = Extensions(extensions)
        for e in self.ext:
            e.attach(ctx)
        self._stop = threading.Event()             # SIGTERM / request_stop()
        self.step = 0
        self.sft_done = not self.spec.sft_enabled
        self.history: dict[str, Any] = {"eval": []}
        self.on_step = on_step
        env = ctx.spec.env
        self.stream = self.ext.first("task_stream", ctx) or TaskStream(
            builders.task_source(env, env.train_split), seed=ctx.spec.seed)
        self.eval_tasks = self.ext.first("eval_tasks", ctx)
        if self.eval_tasks is None:
            self.eval_tasks = builders.load_tasks(env, env.eval_split, n=self.spec.eval.num_tasks)
        cs = ctx.spec.collector
        group = self.ext.first("group_source", ctx) or RolloutGroups(
            ctx.runner, self.ext.first("harness_selector", ctx) or FixedHarness(ctx.harness),
            group_size=cs.group_size, seed=cs.seed)
        self.collector = Collector(cs, ctx.runner, self.stream, group, self.ext.collected("post_processors", ctx))
        # the warm start is a stage of the run directory: a rerun with other SFT inputs is refused
        self._stages = Stages(str(ctx.paths.root), "sft-warm-start-v1") if is_local(ctx.paths.root) else None
        self._sft_key = (sft_warmstart.sft_cache_key(ctx.spec, ctx.tokenizer)[0]
                         if self.spec.sft_enabled and self._stages is not None else "")
        self.ckpt = Checkpointer(CheckpointConfig(ctx.paths.checkpoints, max_to_keep=self.spec.ckpt.keep,
                                                  save_interval_steps=1, async_save=True,
                                                  save_on_sigterm=False))   # the loop handles SIGTERM
        self.resumed_from = None
        if self.spec.ckpt.resume and self.ckpt.latest_step() is not None:
            self._restore(self.ckpt.latest_step())

    # ============================================================ checkpoint
    def _meta(self, stream_state: dict) -> dict:
        return {"step": self.step, "policy_version": self.ctx.learner.policy_version,
                "stream": stream_state, "sft_done": self.sft_done, "history": self.history,
                "config_name": self.spec.name,
                # each extension's state as one JSON string (any JSON value survives Orbax's meta)
                "extensions": {e.name: json.dumps(e.state_dict()) for e in self.ext}}

    def save(self, stream_state: Optional[dict] = None) -> None:
        t0 = time.perf_counter()
        self.ckpt.maybe_save(self.ctx.learner, step=self.step, force=True,
                             data_state=self._meta(stream_state or self.stream.state()))
        self.ckpt.wait()
        logging.info("checkpoint at step %d (%.2fs)", self.step, time.perf_counter() - t0)

    def _restore(self, step: int) -> None:
        learner = self.ctx.learner
        meta = self.ckpt.restore(learner, step)["data_state"]
        learner.policy_version = int(meta["policy_version"])
        self.step = int(meta["step"])
        self.sft_done = bool(meta["sft_done"])
        self.history = meta.get("history") or {"eval": []}
        self.stream.restore(meta["stream"])
        states = meta.get("extensions") or {}
        for e in self.ext:
            if e.name in states:
                e.load_state_dict(json.loads(states[e.name]))
        if self._sft_key and self.sft_done:
            self._stages.done("sft", self._sft_key)
        if learner.ref_params is not None and self.spec.sft_enabled and self.sft_done:
            # the KL reference is the policy RL started from: the warm start's final checkpoint
            context.init_reference(learner, self.ctx.paths.sft_checkpoints)
        self.ctx.sync_weights()
        self.resumed_from = step
        logging.info("resumed from checkpoint step %d (policy version %d)", step, learner.policy_version)

    # ============================================================ learner side
    def _train_on(self, batch: Batch, timer: telemetry.PhaseTimer) -> dict:
        s, learner = self.spec, self.ctx.learner
        adv = groups_lib.compute_advantages(batch.groups, eps=s.adv_eps, scale=s.adv_scale, baseline=s.adv_baseline)
        hist = groups_lib.staleness_histogram(batch.groups, learner.policy_version)
        episodes = [e for g in batch.groups for e in g.episodes]
        segments = [seg for e in episodes for seg in e.segments]
        out: dict[str, float] = {}
        if segments:
            tb = pack_segments(segments, self.ctx.pack_config())
            t0 = time.perf_counter()
            steps = learner.update(tb)          # [] = no signal in the batch: no optimizer step
            recompute_s = steps[0]["logp_recompute_s"] if steps else 0.0
            timer.add("logprob_recompute", recompute_s)
            timer.add("train", time.perf_counter() - t0 - recompute_s)
            out.update({f"learner/{k}": float(v) for k, v in summarize_update(steps).items()})
            if steps:
                out.update(_throughput(steps, self.ctx.peak_flops, self.ctx.mesh.size))
            out.update({f"pack/{k}": float(v) for k, v in tb.stats.as_dict().items()})
        else:
            learner.policy_version += 1   # an empty batch (all groups dropped) still advances
            out["learner/skipped_empty_batch"] = 1.0
        out.update(_rollout_metrics(batch, episodes, segments, adv, hist))
        self.history.setdefault("admission_lag", []).append(batch.step - batch.collect_started_version)
        self.history.setdefault("staleness", []).append({str(k): v for k, v in hist.items()})
        self.history.setdefault("task_ids", []).append([g.task.task_id for g in batch.groups])
        return out

    # ============================================================ evaluation
    def evaluate(self, tag: str) -> dict:
        ev = self.spec.eval
        t0 = time.perf_counter()
        res = self.ext.first("evaluate", self.ctx, self.eval_tasks, tag)
        if res is None:
            res = evaluation.evaluate_tasks(self.ctx.runner, self.eval_tasks, self.ctx.harness, k=ev.k,
                                            temperature=ev.temperature, tag=tag, console=self.ctx.console,
                                            greedy=ev.greedy)
        res.update(step=self.step, tag=tag, time_s=time.perf_counter() - t0)
        self.history["eval"].append(res)
        self.ctx.writer.write(self.step, {f"eval/{k}": v for k, v in flatten(res).items()
                                          if isinstance(v, (int, float)) and not isinstance(v, bool)})
        self.ctx.console.line(self.ext.first("eval_line", tag, res) or console.eval_line(tag, self.step, res))
        return res

    # ============================================================ SFT warm start
    def _sft(self) -> bool:
        """Runs (or resumes) the warm start; False when a stop request interrupted it."""
        if self.spec.eval.at_start and not any(e["tag"] == "before_sft" for e in self.history["eval"]):
            self.evaluate("before_sft")
        res = self.ext.first("warm_start", self.ctx, self._stop.is_set)
        if res is None:
            res = sft_warmstart.warm_start(self.ctx, should_stop=self._stop.is_set)
        self.history["sft"] = res
        if not res["finished"]:
            return False
        self.sft_done = True
        if self._sft_key:
            self._stages.mark("sft", self._sft_key, {k: v for k, v in res.items() if k != "details"})
        self.evaluate("after_sft")
        self.save()
        return True

    # ============================================================ main loop
    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> dict:
        prev = _install_sigterm(self._stop)
        try:
            with registry.training_scope(self.spec.name):
                return self._run()
        finally:
            _restore_sigterm(prev)

    def _run(self) -> dict:
        s = self.spec
        if self.resumed_from is None and not self.ctx.colocated:
            self.ctx.sync_weights()             # servers may hold other weights: start from ours
        if not self.sft_done:
            if not self._sft():
                logging.info("stop requested (SIGTERM) during the SFT warm start: its checkpoint is saved; exiting")
                return self._finish(preempted=True, last_state=self.stream.state())
        elif self.step == 0 and s.eval.at_start and not self.history["eval"]:
            self.evaluate("start")
        progress = self.ctx.console.bar(s.num_steps, "grpo", initial=self.step)
        producer = (AsyncProducer(self.collector.collect, self.stream, s.num_steps, s.max_staleness)
                    if s.async_mode else None)
        if producer is not None:
            producer.start(self.step)
        preempted = False
        last_state = self.stream.state()
        try:
            while self.step < s.num_steps and not preempted:
                metrics, last_state, preempted = self._step(producer)
                progress.update(1, reward=metrics["rollout/reward_mean"], loss=metrics.get("learner/loss", 0.0))
        finally:
            progress.close()
            if producer is not None:
                producer.close()
        if preempted:
            logging.info("stop requested (SIGTERM): checkpoint saved at step %d; exiting", self.step)
        return self._finish(preempted, last_state)

    def _step(self, producer) -> tuple[dict, dict, bool]:
        """One GRPO step: batch -> update -> weight sync -> (eval) -> (checkpoint) -> metrics.
        Returns the metrics, the stream state to resume from and whether a stop was requested."""
        s = self.spec
        timer = telemetry.PhaseTimer()
        t_step = time.perf_counter()
        if producer is None:
            with timer.phase("rollout"):
                batch = self.collector.collect(self.step)
        else:
            with timer.phase("queue_wait"):
                batch = producer.get()
            timer.add("rollout_overlapped", batch.rollout_s)
        metrics = self._train_on(batch, timer)
        self.step += 1
        if self.step % s.sync_every == 0 or self.step == s.num_steps:
            with timer.phase("weight_sync"):
                self.ctx.sync_weights()
        metrics.update(self.ext.merged("after_update", self.ctx, self.step, timer))
        if producer is not None:
            producer.step_done(self.step)
        # the stream position to resume from: before the oldest batch not yet trained on
        last_state = producer.resume_state() if producer is not None else self.stream.state()
        if s.eval.every_steps and self.step % s.eval.every_steps == 0 and self.step < s.num_steps:
            with timer.phase("eval"):
                self.evaluate("periodic")
        stop = self._stop.is_set()
        if (s.ckpt.every_steps and self.step % s.ckpt.every_steps == 0) or stop:
            with timer.phase("checkpoint"):
                self.save(last_state)
        metrics.update(timer.pop())
        metrics["time/step_s"] = time.perf_counter() - t_step
        metrics["policy_version"] = float(self.ctx.learner.policy_version)
        metrics.update(self.ext.merged("step_metrics", self.ctx, batch, metrics))
        self.ctx.writer.write(self.step, metrics)
        last_eval = self.history["eval"][-1] if self.history["eval"] else None
        self.ctx.console.line(self.ext.first("step_line", self.step, s.num_steps, metrics, last_eval)
                              or console.step_line(self.step, s.num_steps, metrics, last_eval))
        if self.on_step is not None:
            self.on_step(self.step, metrics)
        if s.ckpt.every_steps and self.step % s.ckpt.every_steps == 0:
            self.plot()
        return metrics, last_state, stop

    def plot(self) -> None:
        """``<workdir>/progress.png`` (``log.plot``; local workdirs; a failing plot only warns)."""
        if not self.spec.log.plot or not is_local(self.ctx.paths.root):
            return
        try:
            self.ctx.writer.flush()
            console.plot_progress(str(self.ctx.paths.root))
        except Exception as e:  # noqa: BLE001 - a plot must never stop training
            logging.warning("progress plot failed: %s", e)

    def _finish(self, preempted: bool, last_state: dict) -> dict:
        if not preempted:
            self.evaluate("final")
            self.save(last_state)
            if self.spec.ckpt.export_hf:
                self._export_hf()
        self.plot()
        summary = {"step": self.step, "policy_version": self.ctx.learner.policy_version,
                   "preempted": preempted, "resumed_from": self.resumed_from,
                   "eval": self.history["eval"], "sft": self.history.get("sft"),
                   **{e.name: e.summary() for e in self.ext}}
        workdir_lib.write_json(self.ctx.paths.summary, summary)
        return summary

    def _export_hf(self) -> None:
        model, tok = self.ctx.learner.model(), self.ctx.tokenizer

        def write(d):
            qwen3_5.save_hf(model, d)
            tok.save_pretrained(d)   # evaluate.py / transformers load it from there
        workdir_lib.write_dir(self.ctx.paths.hf_final, write)

    def close(self) -> None:
        """Closes the checkpointer and the extensions (the run context is its builder's)."""
        try:
            self.ckpt.close()
        finally:
            for e in self.ext:
                e.close()


def _throughput(steps: list[dict], peak_flops: float, num_devices: int) -> dict:
    """Tokens/s and MFU over all optimizer steps of one update (``rl.perf.mfu``)."""
    tokens = sum(m["tokens"] for m in steps)
    train_s = sum(m["step_time_s"] for m in steps)
    out = {"perf/train_tokens_per_s": tokens / max(train_s, 1e-9)}
    if all("model_flops" in m for m in steps):
        out["perf/mfu"] = perf.mfu(sum(m["model_flops"] for m in steps), train_s, peak_flops, num_devices)
    return out


def _rollout_metrics(batch: Batch, episodes, segments, adv: dict, hist: dict) -> dict:
    rewards = [e.reward for e in episodes]
    first = [s for g in batch.groups for s in g.first_successes]
    gen_tokens = sum(int(np.sum(s.loss_mask)) for s in segments)
    out = {
        "rollout/episodes": len(episodes),
        "rollout/reward_mean": float(np.mean(rewards)) if rewards else 0.0,
        # training success: the groups' first rollouts (under H0 unless a selector chose otherwise),
        # never the episodes a post-processor rolled out instead (Harness-S helpers)
        "rollout/success_rate": float(np.mean(first)) if first else 0.0,
        "rollout/trained_success_rate": float(np.mean([e.success for e in episodes])) if episodes else 0.0,
        "rollout/turns_mean": float(np.mean([e.num_turns for e in episodes])) if episodes else 0.0,
        "rollout/infra_errors": float(sum(g.info.get("infra_errors", 0) for g in batch.groups)),
        "rollout/generated_tokens": float(gen_tokens),
        "rollout/gen_tokens_per_s": gen_tokens / max(batch.rollout_s, 1e-9),
        "groups/kept": float(len(batch.groups)),
        "groups/dropped_zero_variance": float(batch.dropped_groups),
        "groups/oversample_rounds": float(batch.oversample_rounds),
        # groups whose trained episodes share one reward (injected baseline rewards are not signal) ...
        "groups/zero_variance_fraction": float(adv["trained_zero_variance_fraction"]),
        # ... and groups whose advantage statistics (baseline rewards included) have no spread
        "groups/zero_variance_fraction_with_baseline": float(adv["zero_variance_fraction"]),
        "staleness/max": float(max(hist) if hist else 0),
        "staleness/mean": float(sum(k * v for k, v in hist.items()) / max(sum(hist.values()), 1)),
        # how many learner versions behind the engine was when this batch's collection started
        "staleness/admission_lag": float(batch.step - batch.collect_started_version),
    }
    out.update({f"staleness/hist_{lag}": float(n) for lag, n in hist.items()})
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
