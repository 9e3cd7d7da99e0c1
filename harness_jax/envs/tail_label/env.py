"""``tail_label``: the label of the last word of a short list, one turn (a CPU family where GRPO
can raise held-out success; issue 25 item 5).

A task shows ``list_len`` distinct words; the reply must be the *last* word's label, one of
``a b c d`` by a fixed rule (``label_of``)::

    owl cat fig          ->  the reply "a" (label of "fig") succeeds (reward 1), anything else 0

The words of a task have distinct labels, so the label of a distractor (an earlier word) is always
wrong. Each task also carries a weak teacher's reply, ``teacher``: with probability
``teacher_accuracy`` the last word's label, otherwise the label of an earlier word, i.e. a teacher
that sometimes reads the wrong position: ``teacher_mistake="earlier"`` one of the earlier words
uniformly, ``"first"`` always the first word (a consistent second reading: with accuracy 0.5 the
two readings are equally likely, so a policy fitted to the teacher is a coin flip between them,
greedy decoding included). SFT on the teacher (``sft.keep_failed_demos``) gives a policy that
holds the rule partly; GRPO has to make it the policy's choice from 0/1 rewards.

**What the held-out splits do not share with ``train``.** Tasks are split by the hash of their
*set of words* (``splits.hash_partition`` of the sorted words, ``DEFAULT_FRACTIONS``): no set of
words that appears together in a ``search``, ``selection`` or ``test`` task appears together in
any ``train`` task, in any order. Every single word occurs in training, in the last place too
(the label table itself has to be learned from training tasks), so a held-out gain is the rule
"label the last word, ignore the others" applied to lists never seen; memorised training lists
give nothing. Within a split, tasks are drawn from the split's own random stream (``seed``).
"""
from __future__ import annotations

import itertools
import random

import ml_collections

from harness_jax.config_schema import EnvSection
from harness_jax.envs import splits
from harness_jax.envs.base import OneTurnAnswerEnv, Task

NAME = "tail_label"
LABELS = ("a", "b", "c", "d")
WORDS = ("cat", "dog", "sun", "red", "box", "map", "pen", "cup", "hat", "key", "owl", "jam",
         "fig", "ink", "bus", "toy", "fog", "egg", "elk", "bee", "car", "cow", "fox", "gem")


def label_of(word: str) -> str:
    """The fixed rule: the word's index in ``WORDS`` modulo the number of labels."""
    return LABELS[WORDS.index(word) % len(LABELS)]


def word_set_key(words) -> str:
    """The identity the splits partition: the set of words, order-free."""
    return f"{NAME}:" + ",".join(sorted(words))


def word_sets(split: str, list_len: int, num_words: int) -> list:
    """Every set of ``list_len`` words with distinct labels (from the first ``num_words`` words)
    that belongs to ``split``, sorted."""
    return [c for c in itertools.combinations(WORDS[:num_words], list_len)
            if len({label_of(w) for w in c}) == list_len
            and splits.hash_partition(word_set_key(c)) == split]


TEACHER_MISTAKES = ("earlier", "first")


def check_options(list_len: int, num_words: int, teacher_accuracy: float,
                  teacher_mistake: str = "earlier") -> None:
    """ValueError naming the ``config.env.tail_label`` field that is out of range."""
    if not 2 <= list_len <= len(LABELS):
        raise ValueError(f"env.tail_label.list_len={list_len}: use 2..{len(LABELS)} "
                         "(the words of a task have distinct labels)")
    if not 2 * len(LABELS) <= num_words <= len(WORDS):
        raise ValueError(f"env.tail_label.num_words={num_words}: use {2 * len(LABELS)}..{len(WORDS)} "
                         "(two words per label at least, so every split gets word sets)")
    if not 0.0 <= teacher_accuracy <= 1.0:
        raise ValueError(f"env.tail_label.teacher_accuracy={teacher_accuracy}: use 0..1")
    if teacher_mistake not in TEACHER_MISTAKES:
        raise ValueError(f"env.tail_label.teacher_mistake={teacher_mistake!r}: use one of {TEACHER_MISTAKES}")


def load_split(split: str, n: int = 256, seed: int = 0, list_len: int = 3,
               num_words: int = len(WORDS), teacher_accuracy: float = 0.5,
               teacher_mistake: str = "earlier") -> list:
    """``n`` tasks of ``split`` (module docstring), drawn from the split's own stream of ``seed``;
    category ``last_<label>``: the answer's label."""
    check_options(list_len, num_words, teacher_accuracy, teacher_mistake)
    pool = word_sets(split, list_len, num_words)
    if not pool:
        raise ValueError(f"env.tail_label.num_words={num_words}: no set of {list_len} words falls "
                         f"into split {split!r}; raise num_words")
    rng = random.Random(splits.split_seed(split, seed))
    tasks = []
    for _ in range(int(n)):
        words = list(rng.choice(pool))
        rng.shuffle(words)
        answer = label_of(words[-1])
        right = rng.random() < teacher_accuracy
        if right:
            teacher = answer
        else:
            teacher = label_of(rng.choice(words[:-1]) if teacher_mistake == "earlier" else words[0])
        tasks.append(Task(NAME, {"words": words, "answer": answer, "teacher": teacher,
                                 "nonce": rng.getrandbits(32)},
                          split=split, category=f"last_{answer}"))
    return tasks


class TailLabelEnv(OneTurnAnswerEnv):
    """One turn: the reply (stripped) must be the last word's label."""

    name = NAME

    def observe(self, task: Task) -> str:
        return " ".join(task.data["words"])


def _section() -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.list_len = 3                        # words shown per task (the last one's label is the answer; distinct labels)
    s.num_words = len(WORDS)              # words drawn from the first num_words of WORDS (the splits partition their sets)
    s.teacher_accuracy = 0.5              # chance the weak teacher labels the last word (else an earlier word's label)
    s.teacher_mistake = "earlier"         # the teacher's other reading: "earlier" (any earlier word, uniformly) or "first" (the first word)
    return s


def _split_kwargs(env) -> dict:
    t = env.tail_label
    return {"n": env.num_tasks, "seed": env.task_seed, "list_len": int(t.list_len),
            "num_words": int(t.num_words), "teacher_accuracy": float(t.teacher_accuracy),
            "teacher_mistake": str(t.teacher_mistake)}


SECTION = EnvSection(section=_section, env_kwargs=lambda env: {}, split_kwargs=_split_kwargs,
                     choices={"teacher_mistake": TEACHER_MISTAKES},
                     at_least={"list_len": 2, "num_words": 8, "teacher_accuracy": 0.0})


def h0(protocol: str) -> dict:
    """The base harness: no system prompt, the task text is the prompt, one turn."""
    return {"name": f"{NAME}-H0", "system_prompt": "", "task_template": "{observation}",
            "enable_thinking": False, "rules": {"max_turns": 1, "on_unparsable": "pass_raw"}}
