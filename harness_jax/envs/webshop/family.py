"""The WebShop env family's glue: tasks, splits, and the registry entry (kept in one place).

* ``make_task(goal, world_spec, split)``: the only constructor of WebShop tasks; ``Task`` enforces the
  sealed test split.
* ``load_split(split, ...)``: generated worlds (default) or WebShop's own files.
  - generated: products are assigned to splits by the hash of their ASIN (70/10/10/10 by
    default, ``fractions``), and split ``s`` draws ``n`` products of its own share from its own
    seed stream (``splits.split_seed``), one solvable goal each (a random option
    combination). Splits never share a target product; all splits share the catalog (the
    store shows every product, as WebShop's does).
  - files (``products=``, ``attributes=``, optional ``human_instructions=``): WebShop's goal
    list (human goals when the human file is given), either ``partition="hash"`` (by the
    target's ASIN, as above) or ``partition="agentbench"``: test = AgentBench's ``std``
    (goals 0-199), selection = ``dev`` (200-279), search = 280-999, train = ``env_train``
    (1000 on). ``n`` takes the first n goals of the split in WebShop's order.
* ``SECTION``: the typed ``config.env.webshop`` section of experiment configs.
* ``SPEC``: the ``registry.EnvSpec`` (``registry.make("webshop", ...)`` builds a
  ``WebShopEnv``; ``registry.load_split("webshop", split, ...)`` calls ``load_split``).
"""
from __future__ import annotations

import random
from typing import Optional

import ml_collections

from harness_jax.config_schema import EnvSection, or_none
from harness_jax.envs.base import Task
from harness_jax.envs.splits import check_split
from harness_jax.envs import splits
from harness_jax.envs.registry import EnvSpec
from harness_jax.envs.webshop import generator
from harness_jax.envs.webshop.env import WebShopEnv
from harness_jax.envs.webshop.protocol import h0
from harness_jax.envs.webshop.world import check_spec, get_world

ENV_NAME = "webshop"
AGENTBENCH_RANGES = {"test": (0, 200), "selection": (200, 280), "search": (280, 1000),
                     "train": (1000, None)}


def make_task(goal: dict, world_spec: dict, split: str = "train",
              goal_index: Optional[int] = None) -> Task:
    """A WebShop task: ``data = {"goal": <WebShop goal dict>, "world": <world spec>}``."""
    check_split(split)   # the seal itself is enforced where the Task is made
    for key in ("instruction_text", "attributes", "goal_options", "price_upper", "query",
                "name", "product_category", "asin"):
        if key not in goal:
            raise ValueError(f"webshop goal: missing {key!r} (WebShop's goal keys: asin, query, "
                             "name, product_category, instruction_text, attributes, "
                             "goal_options, price_upper)")
    data = {"goal": goal, "world": check_spec(world_spec)}
    if goal_index is not None:
        data["goal_index"] = int(goal_index)
    return Task(env_name=ENV_NAME, data=data, split=split, category=goal.get("category"))


def generated_spec(n_products: int = 1000, seed: int = 0) -> dict:
    return {"kind": "generated", "n_products": int(n_products), "seed": int(seed)}


def generate_tasks(n: int, split: str = "train", seed: int = 0, n_products: int = 1000,
                   catalog_seed: int = 0, fractions: Optional[dict] = None) -> list:
    """``n`` goals on the generated catalog ``(n_products, catalog_seed)`` for ``split``."""
    check_split(split)
    spec = generated_spec(n_products, catalog_seed)
    catalog = get_world(spec).catalog
    rng = random.Random(splits.split_seed(split, seed))
    tasks: list = []
    seen: set = set()
    budget = 50 * n + 1000   # draws before giving up (a split owns ~10-70% of the products)
    while len(tasks) < n and budget > 0:
        budget -= 1
        i = rng.randrange(len(catalog))
        asin = catalog.asin(i)
        if i in seen or splits.hash_partition(f"webshop|{catalog_seed}|{asin}",
                                                fractions) != split:
            continue
        seen.add(i)
        goal = generator.goal_for_product(catalog, i, rng)
        if goal is not None:
            tasks.append(make_task(goal, spec, split))
    if len(tasks) < n:
        raise ValueError(f"webshop split {split!r}: only {len(tasks)} of {n} goals found in a "
                         f"catalog of {n_products} products; use a larger n_products")
    return tasks


def file_tasks(split: str, products: str, attributes: str,
               human_instructions: Optional[str] = None, num_products: Optional[int] = None,
               n: Optional[int] = None, partition: str = "hash",
               fractions: Optional[dict] = None) -> list:
    """Goals of WebShop's own files for ``split`` (module docstring)."""
    if partition not in ("hash", "agentbench"):
        raise ValueError(f"partition={partition!r}: expected 'hash' or 'agentbench'")
    spec = {"kind": "files", "products": products, "attributes": attributes,
            "human_instructions": human_instructions, "num_products": num_products}
    world = get_world(spec)
    goals = world.goals or []
    if partition == "agentbench":
        lo, hi = AGENTBENCH_RANGES[split]
        picked = list(enumerate(goals))[lo:hi]
    else:
        picked = [(k, g) for k, g in enumerate(goals)
                  if splits.hash_partition(f"webshop|{g['asin']}", fractions) == split]
    if n is not None:
        picked = picked[:n]
    return [make_task(g, world.spec, split, goal_index=k) for k, g in picked]


def load_split(split: str, n: int = 100, seed: int = 0, n_products: int = 1000,
               catalog_seed: int = 0, products: Optional[str] = None,
               attributes: Optional[str] = None, human_instructions: Optional[str] = None,
               num_products: Optional[int] = None, partition: str = "hash",
               fractions: Optional[dict] = None) -> list:
    """Registry loader (module docstring)."""
    if products is not None or attributes is not None:
        if products is None or attributes is None:
            raise ValueError("webshop files: give both products= (items_shuffle*.json) and "
                             "attributes= (items_ins_v2*.json)")
        return file_tasks(split, products, attributes, human_instructions, num_products, n,
                          partition, fractions)
    return generate_tasks(n, split, seed, n_products, catalog_seed, fractions)


def make_env(**kw):
    return WebShopEnv(**kw)


def _section() -> ml_collections.ConfigDict:
    """The typed ``config.env.webshop`` section."""
    s = ml_collections.ConfigDict()
    s.max_rounds = 0                  # the environment's own round limit (0 = the protocol's: text 10, function 20)
    s.show_attrs = False              # item pages show the Attributes button (WebShop's show_attrs)
    s.strict_format = False           # an unparsable reply ends the episode (AgentBench) instead of a hint
    s.index_dir = ""                  # where the BM25 index of a catalog is cached ("" = built in memory)
    s.n_products = 1000               # generated catalog: products
    s.catalog_seed = 0                # generated catalog: seed (env.task_seed draws the goals)
    s.products = ""                   # WebShop's items_shuffle*.json (with attributes: real data instead of a generated catalog)
    s.attributes = ""                 # WebShop's items_ins_v2*.json
    s.human_instructions = ""         # WebShop's items_human_ins.json: human-written goals ("" = the synthetic ones)
    s.num_products = 0                # real data: products loaded (0 = all)
    s.partition = "hash"              # real data: "hash" (by target ASIN) | "agentbench" (test = std goals 0-199, selection = dev 200-279)
    return s


def _env_kwargs(env) -> dict:
    s = env.webshop
    return dict(protocol=env.protocol, max_rounds=or_none(int(s.max_rounds)),
                show_attrs=bool(s.show_attrs), strict_format=bool(s.strict_format),
                index_dir=or_none(s.index_dir))


def _split_kwargs(env) -> dict:
    s = env.webshop
    return dict(n=int(env.num_tasks), seed=int(env.task_seed), n_products=int(s.n_products),
                catalog_seed=int(s.catalog_seed), products=or_none(s.products),
                attributes=or_none(s.attributes), human_instructions=or_none(s.human_instructions),
                num_products=or_none(int(s.num_products)), partition=s.partition)


SECTION = EnvSection(section=_section, env_kwargs=_env_kwargs, split_kwargs=_split_kwargs,
                     choices={"partition": ("hash", "agentbench")},
                     at_least={"max_rounds": 0, "n_products": 1, "num_products": 0})


def _spec():
    return EnvSpec(ENV_NAME, make_env, load_split,
                   "WebShop text mode (AgentBench protocols) on a generated catalog or "
                   "WebShop's own data files; BM25 search, the published reward",
                   config=SECTION, h0=h0)


SPEC = _spec()
