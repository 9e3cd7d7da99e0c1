"""``tail_label``: reply with the label of the last word of a list (``env.py``); a one-turn CPU
family whose held-out splits share no set of words with training, so a held-out gain is the rule
applied to unseen lists.

    tasks = registry.load_split("tail_label", "selection", n=256, seed=0, list_len=3)
"""
from harness_jax.envs import registry
from harness_jax.envs.base import teacher_reply
from harness_jax.envs.tail_label.env import (LABELS, NAME, SECTION, TEACHER_MISTAKES, WORDS,
                                             TailLabelEnv, check_options, h0, label_of, load_split,
                                             word_set_key, word_sets)

registry.register(registry.EnvSpec(
    name=NAME, make=TailLabelEnv, load_split=load_split,
    description="one turn: the label of the last word of a short list (held-out word sets)",
    config=SECTION, h0=h0, demos=teacher_reply))

__all__ = ["LABELS", "NAME", "SECTION", "TEACHER_MISTAKES", "WORDS", "TailLabelEnv", "check_options",
           "h0", "label_of", "load_split", "teacher_reply", "word_set_key", "word_sets"]
