"""The agent GRPO loop: task stream -> G episodes per task through the executor -> rewards ->
group advantages -> packed TrainBatch -> learner -> weight sync -> evaluation -> checkpoint.

    from harness_jax.train import loop
    summary = loop.train(config, workdir)            # what launch/train.py runs

The run's parts live in one explicit ``RunContext`` (``train/context.py``: learner, engine,
runner, harness, tokenizer, writer); the phases (``collect.Collector``, ``sft_warmstart``,
``evaluation``) get it, never the trainer.

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

Checkpoints hold the learner state and the loop state (step, policy version, task-stream
position, SFT/eval history); running the same command again resumes, with the same data order.
SIGTERM finishes the current step (or SFT step), saves, and exits cleanly.
"""
from __future__ import annotations

import json
import queue
import signal
import threading
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np
from absl import logging

from harness_jax.rl import perf
from harness_jax.train import builders, console, context, groups as groups_lib, telemetry, workdir as workdir_lib
from harness_jax.train.collect import Batch, Collector
from harness_jax.train.data import TaskStream
from harness_jax.train.groups import FixedHarness


class Trainer:
    """One run: ``Trainer(config, workdir)`` builds the run context, ``run()`` executes it."""

    def __init__(self, config, workdir, *, post_processors: Sequence[Any] = (),
                 harness_selector: Any = None, extensions: Sequence[Any] = (),
                 devices: Optional[Sequence[Any]] = None,
                 on_step: Optional[Callable[[int, dict], None]] = None):
        from harness_jax.rl.checkpoint import CheckpointConfig, Checkpointer

        self.config = config
        console.setup_logging(config.log.library_level)   # before Orbax and friends start talking
        self.ctx = context.build(config, workdir, devices=devices)
        self.extensions = list(extensions)      # train.extensions.LoopExtension
        post_processors = list(post_processors)
        for ext in self.extensions:
            ext.attach(self.ctx)
            post_processors += list(ext.post_processors())
            harness_selector = ext.harness_selector() or harness_selector
        self._stop = threading.Event()          # SIGTERM / request_stop()
        self.step = 0
        self.sft_done = not config.sft.enabled
        self.history: dict[str, Any] = {"eval": []}
        self.on_step = on_step                  # on_step(step, metrics) after every GRPO step
        self._build_data(harness_selector, post_processors)
        self.pack_cfg = self.ctx.pack_config()
        self.ckpt = Checkpointer(CheckpointConfig(self.ctx.paths.checkpoints, max_to_keep=config.ckpt.keep,
                                                  save_interval_steps=1, async_save=True,
                                                  save_on_sigterm=False))   # the loop handles SIGTERM
        self.resumed_from = None
        if config.ckpt.resume and self.ckpt.latest_step() is not None:
            self._restore(self.ckpt.latest_step())

    def _build_data(self, harness_selector, post_processors) -> None:
        """The training stream, the evaluation items and the collector (a trainer of another
        policy, e.g. Harness-R1's engineer over failure packets, overrides this)."""
        c = self.config
        self.stream = TaskStream(builders.task_source(c, c.env.train_split), seed=c.seed)
        self.eval_tasks = builders.load_tasks(c, c.env.eval_split, n=c.eval.num_tasks)
        self.collector = Collector(c, self.ctx.runner, self.stream,
                                   harness_selector or FixedHarness(self.ctx.harness), post_processors)

    # ============================================================ checkpoint
    def _meta(self, stream_state: dict) -> dict:
        return {"step": self.step, "policy_version": self.ctx.learner.policy_version,
                "stream": stream_state, "sft_done": self.sft_done, "history": self.history,
                "config_name": self.config.name,
                # each extension's state as one JSON string (any JSON value survives Orbax's meta)
                "extensions": {e.name: json.dumps(e.state_dict()) for e in self.extensions}}

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
        for ext in self.extensions:
            if ext.name in states:
                ext.load_state_dict(json.loads(states[ext.name]))
        if learner.ref_params is not None and self.config.sft.enabled and self.sft_done:
            # the KL reference is the policy RL started from: the warm start's final checkpoint
            context.init_reference(learner, self.ctx.paths.sft_checkpoints)
        self.ctx.sync_weights()
        self.resumed_from = step
        logging.info("resumed from checkpoint step %d (policy version %d)", step, learner.policy_version)

    # ============================================================ learner side
    def _train_on(self, batch: Batch, timer: telemetry.PhaseTimer) -> dict:
        from harness_jax.rl.batch import pack_segments
        from harness_jax.rl.learner import summarize_update

        c, learner = self.config, self.ctx.learner
        adv = groups_lib.compute_advantages(batch.groups, eps=c.rl.adv_eps, scale=c.rl.adv_scale,
                                            baseline=c.rl.adv_baseline)
        hist = groups_lib.staleness_histogram(batch.groups, learner.policy_version)
        episodes = [e for g in batch.groups for e in g.episodes]
        segments = [s for e in episodes for s in e.segments]
        out: dict[str, float] = {}
        if segments:
            tb = pack_segments(segments, self.pack_cfg)
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
        from harness_jax.train import evaluation

        c = self.config
        t0 = time.perf_counter()
        res = evaluation.evaluate_tasks(self.ctx.runner, self.eval_tasks, self.ctx.harness, k=c.eval.k,
                                        temperature=c.eval.temperature, tag=tag, progress=c.log.progress_bar,
                                        greedy=c.eval.greedy)
        res.update(step=self.step, tag=tag, time_s=time.perf_counter() - t0)
        self.history["eval"].append(res)
        self.ctx.writer.write(self.step, {f"eval/{k}": v for k, v in _flat(res).items()
                                          if isinstance(v, (int, float))})
        logging.info("eval[%s] step %d: success %.3f %s", tag, self.step, res["success_rate"],
                     {k: v for k, v in res.items() if k.startswith(("pass@", "avg@"))})
        return res

    # ============================================================ SFT warm start
    def _warm_start(self) -> dict:
        """The SFT phase (gold demonstrations here); its summary has ``finished``."""
        from harness_jax.train import sft_warmstart

        return sft_warmstart.warm_start(self.ctx, should_stop=self._stop.is_set)

    def _sft(self) -> bool:
        """Runs (or resumes) the warm start; False when a stop request interrupted it."""
        if self.config.eval.at_start and not any(e["tag"] == "before_sft" for e in self.history["eval"]):
            self.evaluate("before_sft")
        res = self._warm_start()
        self.history["sft"] = res
        if not res["finished"]:
            return False
        self.sft_done = True
        self.evaluate("after_sft")
        self.save()
        return True

    # ============================================================ main loop
    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> dict:
        from harness_jax.envs import registry

        prev = _install_sigterm(self._stop)
        try:
            with registry.training_scope(self.config.name):
                return self._run()
        finally:
            _restore_sigterm(prev)

    def _run(self) -> dict:
        c = self.config
        if self.resumed_from is None and c.rollout.mode != "colocated":
            self.ctx.sync_weights()             # servers may hold other weights: start from ours
        if not self.sft_done:
            if not self._sft():
                logging.info("stop requested (SIGTERM) during the SFT warm start: its checkpoint is saved; exiting")
                return self._finish(preempted=True, last_state=self.stream.state())
        elif self.step == 0 and c.eval.at_start and not self.history["eval"]:
            self.evaluate("start")
        progress = telemetry.Progress(c.num_steps, self.step, c.log.progress_bar)
        producer = (_AsyncProducer(self.collector.collect, self.stream, c.num_steps, c.rl.max_staleness)
                    if c.rl.async_mode else None)
        if producer is not None:
            producer.start(self.step)
        preempted = False
        last_state = self.stream.state()
        try:
            while self.step < c.num_steps and not preempted:
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
        c = self.config
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
        if self.step % c.rollout.sync_every == 0 or self.step == c.num_steps:
            with timer.phase("weight_sync"):
                self.ctx.sync_weights()
        for ext in self.extensions:
            metrics.update(ext.after_update(self, timer))
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
        metrics["policy_version"] = float(self.ctx.learner.policy_version)
        for ext in self.extensions:
            metrics.update(ext.step_metrics(batch, metrics))
        self.ctx.writer.write(self.step, metrics)
        logging.info("%s", console.step_line(self.step, c.num_steps, metrics,
                                             self.history["eval"][-1] if self.history["eval"] else None))
        if self.on_step is not None:
            self.on_step(self.step, metrics)
        if c.ckpt.every_steps and self.step % c.ckpt.every_steps == 0:
            self.plot()
        return metrics, last_state, stop

    def plot(self) -> None:
        """``<workdir>/progress.png`` (``log.plot``; local workdirs; a failing plot only warns)."""
        from harness_jax.paths import is_local

        if not self.config.log.plot or not is_local(self.ctx.paths.root):
            return
        try:
            self.ctx.writer.flush()
            console.plot_progress(str(self.ctx.paths.root))
        except Exception as e:  # noqa: BLE001 - a plot must never stop training
            logging.warning("progress plot failed: %s", e)

    def _finish(self, preempted: bool, last_state: dict) -> dict:
        c = self.config
        if not preempted:
            self.evaluate("final")
            self.save(last_state)
            if c.ckpt.export_hf:
                self._export_hf()
        self.plot()
        summary = {"step": self.step, "policy_version": self.ctx.learner.policy_version,
                   "preempted": preempted, "resumed_from": self.resumed_from,
                   "eval": self.history["eval"], "sft": self.history.get("sft"),
                   **{e.name: e.summary() for e in self.extensions}}
        workdir_lib.write_json(self.ctx.paths.summary, summary)
        return summary

    def _export_hf(self) -> None:
        from harness_jax.models import qwen3_5

        model, tok = self.ctx.learner.model(), self.ctx.tokenizer

        def write(d):
            qwen3_5.save_hf(model, d)
            tok.save_pretrained(d)   # evaluate.py / transformers load it from there
        workdir_lib.write_dir(self.ctx.paths.hf_final, write)

    def close(self) -> None:
        try:
            self.ckpt.close()
            for ext in self.extensions:
                ext.close()
        finally:
            self.ctx.close()


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
    gen_tokens = sum(int(np.sum(s.loss_mask)) for s in segments)
    out = {
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
        "staleness/mean": float(sum(k * v for k, v in hist.items()) / max(sum(hist.values()), 1)),
        # how many learner versions behind the engine was when this batch's collection started
        "staleness/admission_lag": float(batch.step - batch.collect_started_version),
    }
    out.update({f"staleness/hist_{lag}": float(n) for lag, n in hist.items()})
    return out


class _AsyncProducer:
    """Collects rollout batches on a background thread, admission-bounded by staleness.

    Batch i may start only when ``i - learner_steps_done <= max_staleness``; since collection
    starts with the weights of version >= i - max_staleness, every episode's lag at train time is
    at most ``max_staleness``. Finished batches are never discarded.
    """

    def __init__(self, collect: Callable[[int], Batch], stream: TaskStream, num_steps: int, max_staleness: int):
        self._collect = collect
        self._stream = stream
        self._num_steps = int(num_steps)
        self.k = int(max_staleness)
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
            with registry.training_scope("rollout-producer"):
                for i in range(first, self._num_steps):
                    with self._cv:
                        self._cv.wait_for(lambda: self._closed or i - self._done <= self.k)
                        if self._closed:
                            return
                    batch = self._collect(i)
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
            return self._pending_states[0] if self._pending_states else self._stream.state()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=600)


# ---------------------------------------------------------------------------------------------
def train(config, workdir, **kw) -> dict:
    """Build, run and close one training run (the launcher's entry point)."""
    trainer = Trainer(config, workdir, **kw)
    try:
        return trainer.run()
    finally:
        trainer.close()


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
