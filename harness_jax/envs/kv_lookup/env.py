"""``kv_lookup``: look up the value of a key, one turn (a CPU family where GRPO can learn a skill).

A task lists ``num_pairs`` key=value pairs and asks for one key::

    a=cat d=fog ? d          ->  the reply "fog" succeeds (reward 1), anything else fails (0)

Keys are single letters (the first ``num_keys`` of ``KEYS``), values distinct words (the first
``num_values`` of ``WORDS``; none is a piece of the chat format's text, e.g. "ant" of
"assistant", which the task tokenizer makes a token). Each task also carries a weak teacher's reply, ``teacher``: one of
the listed values drawn uniformly, right only by chance (about 1/num_pairs). SFT on the teacher
(``sft.keep_failed_demos``) gives a policy that answers with *a* listed value but ignores the
query; GRPO has to learn the lookup itself from rewards.

**What the held-out splits do not share with ``train``.** Tasks are split by the hash of their
*set of values* (``splits.hash_partition`` of the sorted values, ``DEFAULT_FRACTIONS``): no set of
values that appears together in a ``search``, ``selection`` or ``test`` task appears together in
any ``train`` task (in any order or key assignment). The single words and keys are shared (every
word occurs in training, in other combinations), so a policy that memorised training tasks
(which value goes with which neighbours) gains nothing on held-out tasks; only the lookup rule
transfers. Within a split, tasks are drawn from the split's own random stream (``seed``).
"""
from __future__ import annotations

import itertools
import random

import ml_collections

from harness_jax.config_schema import EnvSection
from harness_jax.envs import splits
from harness_jax.envs.base import OneTurnAnswerEnv, Task

NAME = "kv_lookup"
KEYS = tuple("abcdefgh")
WORDS = ("cat", "dog", "sun", "red", "box", "map", "pen", "cup", "hat", "key", "owl", "jam",
         "fig", "ink", "bus", "toy", "fog", "egg", "elk", "bee", "car", "cow", "fox", "gem",
         "hen", "jar", "kit", "log", "mud", "net", "oak", "pig")


def prompt(pairs, query: str) -> str:
    """The task text: ``"a=cat d=fog ? d"``."""
    return " ".join(f"{k}={v}" for k, v in pairs) + f" ? {query}"


def value_set_key(values) -> str:
    """The identity the splits partition: the set of values, order-free."""
    return f"{NAME}:" + ",".join(sorted(values))


def value_sets(split: str, num_pairs: int, num_values: int) -> list:
    """Every set of ``num_pairs`` values (from the first ``num_values`` words) that belongs to
    ``split``, sorted."""
    return [c for c in itertools.combinations(WORDS[:num_values], num_pairs)
            if splits.hash_partition(value_set_key(c)) == split]


def check_options(num_pairs: int, num_keys: int, num_values: int) -> None:
    """ValueError naming the ``config.env.kv_lookup`` field that is out of range."""
    if not 2 <= num_keys <= len(KEYS):
        raise ValueError(f"env.kv_lookup.num_keys={num_keys}: use 2..{len(KEYS)}")
    if not 2 <= num_pairs <= num_keys:
        raise ValueError(f"env.kv_lookup.num_pairs={num_pairs}: use 2..num_keys ({num_keys}); "
                         "a task lists distinct keys")
    if not num_pairs + 2 <= num_values <= len(WORDS):
        raise ValueError(f"env.kv_lookup.num_values={num_values}: use {num_pairs + 2}..{len(WORDS)} "
                         "(num_pairs + 2 at least, so every split gets value sets)")


def load_split(split: str, n: int = 256, seed: int = 0, num_pairs: int = 2, num_keys: int = 4,
               num_values: int = len(WORDS), shuffle_keys: bool = True) -> list:
    """``n`` tasks of ``split`` (module docstring), drawn from the split's own stream of ``seed``.
    ``shuffle_keys=False`` lists the keys in alphabetical order (with ``num_keys == num_pairs``
    always the same keys in the same places, so the query names a position of the list)."""
    check_options(num_pairs, num_keys, num_values)
    pool = value_sets(split, num_pairs, num_values)
    if not pool:
        raise ValueError(f"env.kv_lookup.num_values={num_values}: no set of {num_pairs} values falls "
                         f"into split {split!r}; raise num_values")
    rng = random.Random(splits.split_seed(split, seed))
    tasks = []
    for _ in range(int(n)):
        values = list(rng.choice(pool))
        rng.shuffle(values)
        keys = rng.sample(KEYS[:num_keys], num_pairs)
        if not shuffle_keys:
            keys.sort()
        q = rng.randrange(num_pairs)
        pairs = [[k, v] for k, v in zip(keys, values)]
        tasks.append(Task(NAME, {"pairs": pairs, "query": keys[q], "answer": values[q],
                                 "teacher": rng.choice(values), "nonce": rng.getrandbits(32)},
                          split=split, category=f"position_{q + 1}"))
    return tasks


class KVLookupEnv(OneTurnAnswerEnv):
    """One turn: the reply (stripped) must be the queried key's value."""

    name = NAME

    def observe(self, task: Task) -> str:
        return prompt(task.data["pairs"], task.data["query"])


def _section() -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.num_pairs = 2                       # key=value pairs listed per task (the weak teacher is right 1/num_pairs of the time)
    s.num_keys = 4                        # keys drawn from the first num_keys letters a, b, c, ...
    s.num_values = len(WORDS)             # values drawn from the first num_values words (the splits partition their sets)
    s.shuffle_keys = True                 # keys listed in random order (False: alphabetical, so with num_keys == num_pairs the query names a position)
    return s


def _split_kwargs(env) -> dict:
    kv = env.kv_lookup
    return {"n": env.num_tasks, "seed": env.task_seed, "num_pairs": int(kv.num_pairs),
            "num_keys": int(kv.num_keys), "num_values": int(kv.num_values),
            "shuffle_keys": bool(kv.shuffle_keys)}


SECTION = EnvSection(section=_section, env_kwargs=lambda env: {}, split_kwargs=_split_kwargs,
                     at_least={"num_pairs": 2, "num_keys": 2, "num_values": 4})


def h0(protocol: str) -> dict:
    """The base harness: no system prompt, the task text is the prompt, one turn."""
    return {"name": f"{NAME}-H0", "system_prompt": "", "task_template": "{observation}",
            "enable_thinking": False, "rules": {"max_turns": 1, "on_unparsable": "pass_raw"}}
