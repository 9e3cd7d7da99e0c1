"""``word_label``: the toy environment family of the learning test (tests/e2e/test_learning.py).

A task shows one word (``"cat"``); the policy succeeds when its one reply is the word's label,
one of ``a b c d`` by a fixed rule (``label_of``). Each task also carries a weak teacher's reply,
``teacher``: a label drawn uniformly, right only by chance. SFT on the teacher's replies gives a
policy that answers with a label but not the word's (success about 1/4); GRPO then has to learn
the rule from rewards alone. (Copying a label shown in the prompt instead is not learned from
rewards by this tiny policy in 40 steps: the attention circuit gets too little signal.) One turn, a ~20-token episode: a tiny Qwen3.5 on the real loop
takes about half a second per GRPO step.

Importing this module registers the family (``harness_jax.envs.registry``), with its typed
config section ``config.env.word_label`` and its base harness (no system prompt, the word is the
prompt, one turn).
"""
from __future__ import annotations

import random

import ml_collections

from harness_jax.config_schema import EnvSection
from harness_jax.envs import registry
from harness_jax.envs.base import OneTurnAnswerEnv, Task

NAME = "word_label"
WORDS = ("sun", "cat", "red", "box", "map", "pen", "cup", "dog", "hat", "key", "owl", "jam",
         "fig", "ink", "bus", "toy")
LABELS = ("a", "b", "c", "d")


def label_of(word: str) -> str:
    return LABELS[WORDS.index(word) % len(LABELS)]


class WordLabelEnv(OneTurnAnswerEnv):
    """One turn: the reply (stripped) must be the word's label."""

    name = NAME

    def observe(self, task: Task) -> str:
        return task.data["word"]


def load_split(split: str, n: int = 256, seed: int = 0, num_words: int = len(WORDS)) -> list:
    """``n`` tasks of ``split`` over the first ``num_words`` words (each split its own random
    stream of ``seed``)."""
    if not 1 <= num_words <= len(WORDS):
        raise ValueError(f"env.word_label.num_words={num_words}: use 1..{len(WORDS)}")
    rng = random.Random(f"{NAME}-{seed}-{split}")
    tasks = []
    for _ in range(int(n)):
        word = rng.choice(WORDS[:num_words])
        tasks.append(Task(NAME, {"word": word, "answer": label_of(word), "teacher": rng.choice(LABELS),
                                 "nonce": rng.getrandbits(32)}, split=split))
    return tasks


def _section() -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.num_words = len(WORDS)              # distinct words the tasks draw from (the rule GRPO learns has this many entries)
    return s


SECTION = EnvSection(section=_section, env_kwargs=lambda env: {},
                     split_kwargs=lambda env: {"n": env.num_tasks, "seed": env.task_seed,
                                               "num_words": env.word_label.num_words},
                     at_least={"num_words": 1})


def _h0(protocol: str) -> dict:
    return {"name": f"{NAME}-H0", "system_prompt": "", "task_template": "{observation}",
            "enable_thinking": False, "rules": {"max_turns": 1, "on_unparsable": "pass_raw"}}


registry.register(registry.EnvSpec(name=NAME, make=WordLabelEnv, load_split=load_split,
                                   description="toy: reply with the label of the word shown (learning test)",
                                   config=SECTION, h0=_h0))
