"""Cold-start SFT (Harness-R1 stage 1): teacher-forced next-token loss on response tokens only.

Examples are ``(prompt_ids, response_ids)`` pairs (already tokenized with the chat template);
they become ``TokenSegment``s whose loss mask covers the response, are packed like RL batches
and trained with a ``Learner`` in ``mode="sft"``.

Normalisation (the learner's ``loss.agg``):

* ``"token_mean"`` (default): the summed response-token NLL of a batch over that batch's number
  of response tokens (each batch's own token mean: tokens of short batches weigh more);
* ``"dataset_token_mean"`` with ``norm_constant = dataset_token_norm(segments, batch)`` (=
  the data set's response tokens / batches per epoch): every batch's sum is divided by the same
  number, so the mean of the step losses over an epoch is the NLL averaged over *all response
  tokens of the data set* (Harness-R1's cold-start loss, METHODS) and every token weighs the
  same whatever batch it lands in.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

from harness_jax.rl import batch as rlbatch
from harness_jax.types import TokenSegment


def sft_segment(prompt_ids: Sequence[int], response_ids: Sequence[int], **meta) -> TokenSegment:
    """One SFT example as a TokenSegment (loss only on the response)."""
    if len(response_ids) == 0:
        raise ValueError("sft_segment: response_ids is empty; an SFT example needs a response to train on")
    ids = [int(t) for t in prompt_ids] + [int(t) for t in response_ids]
    mask = [0] * len(prompt_ids) + [1] * len(response_ids)
    return TokenSegment(token_ids=ids, loss_mask=mask, rollout_logprobs=[0.0] * len(ids),
                        turn_starts=[len(prompt_ids)], **meta)


def dataset_token_norm(segments: Sequence[TokenSegment], examples_per_batch: int) -> float:
    """The ``"dataset_token_mean"`` denominator: the data set's loss tokens per optimizer batch
    (total loss tokens / batches per epoch), see the module docstring."""
    if examples_per_batch < 1:
        raise ValueError(f"dataset_token_norm: examples_per_batch={examples_per_batch} must be >= 1")
    total = sum(int(np.sum(s.loss_mask[1:])) for s in segments)   # targets of positions 1..n-1
    if total == 0:
        raise ValueError("dataset_token_norm: the examples have no loss token")
    return total / -(-len(segments) // examples_per_batch)


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    epochs: int = 2                        # passes over the examples (reshuffled every epoch)
    examples_per_batch: int = 24           # examples per optimizer step (before packing)
    seed: int = 42                         # shuffling seed (epoch e uses seed + e)
    max_steps: Optional[int] = None        # stop after this many optimizer steps (None: after epochs)
    pack: rlbatch.PackConfig = rlbatch.PackConfig()

    def __post_init__(self):
        if self.epochs < 1 or self.examples_per_batch < 1:
            raise ValueError("SFTConfig: epochs and examples_per_batch must be >= 1")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"SFTConfig.max_steps: {self.max_steps} must be >= 1 (or None)")

    @classmethod
    def for_steps(cls, steps: int, num_examples: int, examples_per_batch: int, **kw) -> "SFTConfig":
        """A config of exactly ``steps`` optimizer steps over ``num_examples`` examples (as many
        epochs as that takes)."""
        per_epoch = -(-num_examples // examples_per_batch)
        return cls(epochs=max(-(-steps // max(per_epoch, 1)), 1), examples_per_batch=examples_per_batch,
                   max_steps=steps, **kw)


class SFTBatches:
    """Deterministic epoch-shuffled packed batches with a resumable position.

    ``get_state()``/``set_state()`` are JSON-serialisable (checkpointed by ``Checkpointer``).
    """

    def __init__(self, segments: Sequence[TokenSegment], cfg: SFTConfig, row_multiple: int = 1):
        if not segments:
            raise ValueError("SFTBatches: no examples to train on")
        self.segments = list(segments)
        self.cfg = cfg
        self.pack = dataclasses.replace(cfg.pack, row_multiple=row_multiple)
        self.epoch, self.pos, self.steps = 0, 0, 0

    def steps_per_epoch(self) -> int:
        return -(-len(self.segments) // self.cfg.examples_per_batch)

    @property
    def total_steps(self) -> int:
        n = self.cfg.epochs * self.steps_per_epoch()
        return n if self.cfg.max_steps is None else min(n, self.cfg.max_steps)

    @property
    def finished(self) -> bool:
        return self.steps >= self.total_steps

    def __iter__(self) -> Iterator[rlbatch.TrainBatch]:
        return self

    def __next__(self) -> rlbatch.TrainBatch:
        if self.finished:
            raise StopIteration
        order = np.random.default_rng(self.cfg.seed + self.epoch).permutation(len(self.segments))
        n = self.cfg.examples_per_batch
        idx = order[self.pos:self.pos + n]
        self.pos += n
        self.steps += 1
        if self.pos >= len(self.segments):
            self.epoch, self.pos = self.epoch + 1, 0
        return rlbatch.pack_segments([self.segments[i] for i in idx], self.pack)

    def get_state(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos, "steps": self.steps}

    def set_state(self, state: dict) -> None:
        self.epoch, self.pos, self.steps = int(state["epoch"]), int(state["pos"]), int(state["steps"])


def train_sft(learner, batches: SFTBatches, *, checkpointer=None, writer=None,
              on_step: Optional[Callable[[int, dict], None]] = None,
              should_stop: Optional[Callable[[], bool]] = None) -> list[dict]:
    """Run SFT to the end of ``batches``, resuming from ``checkpointer`` when it has a save.

    ``learner.cfg.mode`` must be ``"sft"``. Saves at the checkpointer's interval, and stops early
    (after saving) when ``should_stop()`` or the checkpointer's SIGTERM flag says so; then
    ``batches.finished`` is False and running the same call again continues where it stopped.
    Returns the metrics of the steps run by this call.
    """
    if learner.cfg.mode != "sft":
        raise ValueError(f"train_sft: learner mode is {learner.cfg.mode!r}; build it with LearnerConfig(mode='sft')")
    if checkpointer is not None:
        meta = checkpointer.restore(learner)
        if meta is not None and meta.get("data_state"):
            batches.set_state(meta["data_state"])

    def stop() -> bool:
        return bool((should_stop is not None and should_stop())
                    or (checkpointer is not None and checkpointer.should_stop()))

    history = []
    for b in batches:
        for m in learner.update(b):
            m.update({f"pack/{k}": v for k, v in b.stats.as_dict().items()})
            history.append(m)
            if writer is not None:
                writer.write(learner.step, m, prefix="sft/")
            if on_step is not None:
                on_step(learner.step, m)
        if checkpointer is not None:
            checkpointer.maybe_save(learner, data_state=batches.get_state())
        if stop():
            break
    if checkpointer is not None:
        checkpointer.maybe_save(learner, data_state=batches.get_state(), force=True)
        checkpointer.wait()
    return history
