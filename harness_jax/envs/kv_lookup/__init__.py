"""``kv_lookup``: reply with the value of the queried key (``env.py``); a one-turn CPU family
whose held-out splits share no set of values with training, so a gain there is a learned skill.

    tasks = registry.load_split("kv_lookup", "selection", n=256, seed=0, num_pairs=2)
"""
from harness_jax.envs import registry
from harness_jax.envs.base import teacher_reply
from harness_jax.envs.kv_lookup.env import (KEYS, NAME, SECTION, WORDS, KVLookupEnv, check_options,
                                            h0, load_split, prompt, value_set_key,
                                            value_sets)

registry.register(registry.EnvSpec(
    name=NAME, make=KVLookupEnv, load_split=load_split,
    description="one turn: the value of the queried key among a few key=value pairs (held-out value sets)",
    config=SECTION, h0=h0, demos=teacher_reply))

__all__ = ["KEYS", "NAME", "SECTION", "WORDS", "KVLookupEnv", "check_options", "h0", "load_split",
           "prompt", "teacher_reply", "value_set_key", "value_sets"]
