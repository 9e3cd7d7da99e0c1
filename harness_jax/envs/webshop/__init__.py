"""WebShop (Yao et al. 2022) in text mode, offline: a generated catalog (or WebShop's own data
files), WebShop's pages and actions, BM25 search (``bm25s``), the published reward, and
AgentBench's text and function-calling protocols.

    from harness_jax.envs import registry
    tasks = registry.load_split("webshop", "train", n=100, n_products=1000)
    env = registry.make("webshop", protocol="text")
    first = env.reset(tasks[0])
    res = env.step("Thought:\\n...\\n\\nAction:\\nsearch[men's running shoes]")

    from harness_jax.envs.webshop import reward
    reward.get_reward(purchased, goal, price, options)     # WebShop's dict formats

Modules: ``reward`` (the published reward), ``generator``/``vocab`` (catalog and goals),
``search`` (BM25), ``pages`` (the site), ``world`` (shared catalog + index), ``data`` (WebShop's
files), ``protocol`` (AgentBench prompts and parsers), ``env`` (``WebShopEnv``), ``agents``
(oracle and random policies), ``family`` (tasks, splits, registry entry).
"""
from harness_jax.envs.webshop.env import ENV_NAME, WebShopEnv, summarize
from harness_jax.envs.webshop.family import (file_tasks, generate_tasks, generated_spec,
                                             load_split, make_task)
from harness_jax.envs.webshop.generator import GeneratedCatalog
from harness_jax.envs.webshop.world import World, clear_worlds, get_world

__all__ = ["ENV_NAME", "GeneratedCatalog", "WebShopEnv", "World", "clear_worlds", "file_tasks",
           "generate_tasks", "generated_spec", "get_world", "load_split", "make_task",
           "summarize"]


from harness_jax.envs import registry as _registry  # noqa: E402

from harness_jax.envs.webshop.family import SPEC as _SPEC  # noqa: E402

_registry.register(_SPEC)
