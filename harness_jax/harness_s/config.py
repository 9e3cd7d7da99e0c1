"""The router's config section, its parsed form, and its validation (for the central validator).

    from harness_jax.harness_s import config as hs_config
    c.harness_s.router = hs_config.router_config()          # the schema with its defaults
    problems = harness_s.find_router_problems(c.harness_s.router, pool=pool,
                                              path="harness_s.router")   # list[Problem]

``find_router_problems`` (in ``routers``, which knows the registered names) reports every problem with its dotted path, the bad value and the fix,
in ``harness_jax.config_validation``'s ``Problem`` form, so ``config_validation.find_problems``
can append them to its own list. ``make_router`` runs the same checks and raises
``ConfigValidationError``.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Mapping, Optional, Sequence

import ml_collections
from ml_collections import config_dict

from harness_jax.config_problems import Problem
from harness_jax.harness_s.editors import EDITORS
from harness_jax.harness_s.pool import load_pool, select_siblings

METRICS = ("rescue_rate", "success_rate")
AGGREGATIONS = ("borda", "rrf")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def router_config() -> ml_collections.ConfigDict:
    """The router section with its defaults (mount it as ``config.harness_s.router``)."""
    r = ml_collections.ConfigDict()
    r.name = "validation_topk"      # random | fixed_mixture | validation_topk | features | llm_vote | hybrid
    r.top_k = 4                     # distinct helpers per rescue (Rank-1 routing uses the first)
    r.include_base = False          # rank H0 too (Rank-1 at inference); rescue never picks H0
    r.seed = 0                      # random / fixed_mixture sampling seed
    r.metric = "rescue_rate"        # validation_topk order: rescue_rate (on H0's validation failures) | success_rate
    r.mixture_weights = config_dict.ConfigDict({}, type_safe=False)  # fixed_mixture: {sibling name or id: weight}; empty = uniform
    r.features = ml_collections.ConfigDict()
    r.features.l2 = 1.0             # L2 strength of the per-sibling logistic success models
    r.hybrid = ml_collections.ConfigDict()
    r.hybrid.margin = 0.1           # features decide unless the K-th and (K+1)-th probabilities are closer than this
    r.votes = ml_collections.ConfigDict()
    r.votes.voters = ()             # ({"name", "base_url", "model", "api_key_env", "temperature", "seed"}, ...)
    r.votes.aggregation = "borda"   # borda | rrf (reciprocal-rank fusion)
    r.votes.rrf_k = 60.0            # RRF constant: score += 1 / (rrf_k + rank)
    r.votes.cache_dir = ""          # content-addressed response cache of the voters ("" = off)
    r.votes.max_tokens = 512        # reply budget per vote
    r.votes.timeout_s = 60.0        # per-request HTTP timeout of a voter
    r.votes.excerpt_chars = 1500    # characters of H0's failed trace shown to voters
    r.log = ml_collections.ConfigDict()
    r.log.path = ""                 # JSONL file of every routing decision and outcome ("" = in memory only)
    r.log.max_decisions = 1000      # decisions kept in the router state (checkpointed)
    return r


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    node = cfg
    for part in dotted.split("."):
        if node is None:
            return default
        try:
            node = node[part]
        except (KeyError, TypeError, AttributeError):
            return default
    return node


@dataclasses.dataclass(frozen=True)
class VoterSpec:
    name: str
    base_url: str
    model: str
    api_key_env: str = ""
    temperature: float = 0.0
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class RouterConfig:
    """The parsed router section (see ``router_config`` for the meaning of each field)."""

    name: str = "validation_topk"
    top_k: int = 4
    include_base: bool = False
    seed: int = 0
    metric: str = "rescue_rate"
    mixture_weights: tuple = ()            # ((name or id, weight), ...)
    features_l2: float = 1.0
    hybrid_margin: float = 0.1
    voters: tuple = ()                     # VoterSpec, ...
    aggregation: str = "borda"
    rrf_k: float = 60.0
    cache_dir: str = ""
    vote_max_tokens: int = 512
    vote_timeout_s: float = 60.0
    excerpt_chars: int = 1500
    log_path: str = ""
    max_decisions: int = 1000

    @classmethod
    def from_config(cls, cfg: Any) -> "RouterConfig":
        if isinstance(cfg, RouterConfig):
            return cfg
        d = RouterConfig()
        voters = []
        for i, v in enumerate(_get(cfg, "votes.voters", ()) or ()):
            voters.append(VoterSpec(
                name=str(_get(v, "name", "") or f"voter{i}"), base_url=str(_get(v, "base_url", "")),
                model=str(_get(v, "model", "")), api_key_env=str(_get(v, "api_key_env", "") or ""),
                temperature=float(_get(v, "temperature", 0.0)), seed=int(_get(v, "seed", i))))
        weights = _get(cfg, "mixture_weights", {}) or {}
        return cls(
            name=_get(cfg, "name", d.name), top_k=_get(cfg, "top_k", d.top_k),
            include_base=bool(_get(cfg, "include_base", d.include_base)),
            seed=_get(cfg, "seed", d.seed), metric=_get(cfg, "metric", d.metric),
            mixture_weights=tuple((str(k), float(weights[k])) for k in weights),
            features_l2=_get(cfg, "features.l2", d.features_l2),
            hybrid_margin=_get(cfg, "hybrid.margin", d.hybrid_margin), voters=tuple(voters),
            aggregation=_get(cfg, "votes.aggregation", d.aggregation),
            rrf_k=_get(cfg, "votes.rrf_k", d.rrf_k),
            cache_dir=_get(cfg, "votes.cache_dir", d.cache_dir) or "",
            vote_max_tokens=_get(cfg, "votes.max_tokens", d.vote_max_tokens),
            vote_timeout_s=_get(cfg, "votes.timeout_s", d.vote_timeout_s),
            excerpt_chars=_get(cfg, "votes.excerpt_chars", d.excerpt_chars),
            log_path=_get(cfg, "log.path", d.log_path) or "",
            max_decisions=_get(cfg, "log.max_decisions", d.max_decisions))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def router_config_problems(cfg: Any, *, router_names: Sequence[str],
                           pool: Optional[Sequence] = None, pool_size: Optional[int] = None,
                           path: str = "harness_s.router",
                           environ: Optional[Mapping[str, str]] = None) -> list[Problem]:
    """Every problem of a router section (empty when fine); ``routers.find_router_problems``
    passes the registered ``router_names``.

    pool / pool_size: the sibling pool (H0 included) the router will rank, when known; names in
    ``mixture_weights`` are checked against ``pool``. environ: where voters' key variables must
    be set (default ``os.environ``).
    """
    ROUTERS = sorted(router_names)
    env = os.environ if environ is None else environ
    out: list[Problem] = []

    def bad(sub, value, problem, fix):
        out.append(Problem(f"{path}.{sub}", value, problem, fix))

    name = _get(cfg, "name", RouterConfig.name)
    if name not in ROUTERS:
        bad("name", name, f"unknown router; registered: {', '.join(sorted(ROUTERS))}",
            f"set --config.{path}.name to one of {', '.join(sorted(ROUTERS))}")
    include_base = bool(_get(cfg, "include_base", False))
    if pool is not None:
        pool_size = len(pool)
    n_cand = None if pool_size is None else pool_size - (0 if include_base else 1)
    if pool_size is not None and n_cand < 1:
        out.append(Problem(
            path, f"<pool of {pool_size}>", f"the sibling pool is empty: it has {pool_size} harness(es) and "
            f"{'no helper besides H0' if pool_size == 1 else 'not even H0'}",
            "evolve a pool first (launch/evolve.py) and point the run at its pool file, or "
            "turn rescue off"))
    k = _get(cfg, "top_k", RouterConfig.top_k)
    if not _is_int(k) or k < 1:
        bad("top_k", k, "must be an integer >= 1", f"set --config.{path}.top_k=4 (or 1 for Rank-1)")
    elif n_cand is not None and n_cand >= 1 and k > n_cand:
        bad("top_k", k, f"larger than the pool: only {n_cand} candidate(s) "
            f"({'H0 included' if include_base else 'H0 excluded'})",
            f"set --config.{path}.top_k to at most {n_cand}, or evolve a larger pool")
    if not _is_int(_get(cfg, "seed", 0)):
        bad("seed", _get(cfg, "seed"), "must be an integer", f"e.g. --config.{path}.seed=0")
    if _get(cfg, "metric", "rescue_rate") not in METRICS:
        bad("metric", _get(cfg, "metric"), f"unknown metric; allowed: {', '.join(METRICS)}",
            f"set --config.{path}.metric=rescue_rate")
    weights = _get(cfg, "mixture_weights", {}) or {}
    for key in weights:
        w = weights[key]
        if not _is_num(w) or w < 0:
            bad(f"mixture_weights.{key}", w, "a weight must be a number >= 0",
                "use non-negative numbers (they are normalised)")
        if pool is not None and hasattr(pool, "resolve"):
            try:
                pool.resolve(str(key))
            except KeyError as e:
                bad(f"mixture_weights.{key}", w, f"names no sibling of the pool ({e.args[0]})",
                    "use a sibling name or id from the pool report")
    if weights and all(_is_num(weights[k]) and weights[k] == 0 for k in weights):
        bad("mixture_weights", dict(weights), "all weights are 0",
            "give at least one sibling a positive weight, or leave it empty for uniform")
    l2 = _get(cfg, "features.l2", 1.0)
    if not _is_num(l2) or l2 <= 0:
        bad("features.l2", l2, "must be > 0", f"e.g. --config.{path}.features.l2=1.0")
    m = _get(cfg, "hybrid.margin", 0.1)
    if not _is_num(m) or not 0 <= m <= 1:
        bad("hybrid.margin", m, "must be a probability gap in [0, 1]",
            f"e.g. --config.{path}.hybrid.margin=0.1")
    _check_votes(cfg, bad, path, env, needs_voters=name in ("llm_vote", "hybrid"))
    md = _get(cfg, "log.max_decisions", 1000)
    if not _is_int(md) or md < 0:
        bad("log.max_decisions", md, "must be an integer >= 0", "e.g. 1000")
    return out


def _check_votes(cfg, bad, path, env, needs_voters: bool) -> None:
    voters = _get(cfg, "votes.voters", ()) or ()
    if needs_voters and not voters:
        bad("votes.voters", tuple(voters), "this router needs at least one LLM voter",
            f"add voters ({{'name', 'base_url', 'model', 'api_key_env', 'temperature', 'seed'}}) "
            f"to --config.{path}.votes.voters, or use --config.{path}.name=features")
    names = []
    for i, v in enumerate(voters):
        where = f"votes.voters[{i}]"
        url = str(_get(v, "base_url", "") or "")
        if not url.startswith(("http://", "https://")):
            bad(f"{where}.base_url", url, "must be an http(s):// URL of an OpenAI-compatible API",
                "e.g. https://api.openai.com/v1 or http://host:30000/v1")
        if not _get(v, "model"):
            bad(f"{where}.model", _get(v, "model"), "is empty", "name the model to call")
        key = str(_get(v, "api_key_env", "") or "")
        if key and not _ENV_NAME.fullmatch(key):
            bad(f"{where}.api_key_env", f"<{len(key)} characters>",
                "must be the NAME of an environment variable, never the key itself",
                "e.g. api_key_env='OPENAI_API_KEY' and export the key under that name")
        elif key and not env.get(key):
            bad(f"{where}.api_key_env", key, f"the environment variable {key} is unset",
                f"export {key}=<your key> before the run, or set api_key_env='' for an "
                "endpoint without auth")
        t = _get(v, "temperature", 0.0)
        if not _is_num(t) or t < 0:
            bad(f"{where}.temperature", t, "must be >= 0", "e.g. 0.7")
        if not _is_int(_get(v, "seed", i)):
            bad(f"{where}.seed", _get(v, "seed"), "must be an integer", f"e.g. {i}")
        names.append(str(_get(v, "name", "") or f"voter{i}"))
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        bad("votes.voters", dup, "voter names must be unique (they key the decision log)",
            "give every voter its own name")
    agg = _get(cfg, "votes.aggregation", "borda")
    if agg not in AGGREGATIONS:
        bad("votes.aggregation", agg, f"unknown aggregation; allowed: {', '.join(AGGREGATIONS)}",
            f"set --config.{path}.votes.aggregation=borda")
    rk = _get(cfg, "votes.rrf_k", 60.0)
    if not _is_num(rk) or rk <= 0:
        bad("votes.rrf_k", rk, "must be > 0", "60 is the usual constant")
    mt = _get(cfg, "votes.max_tokens", 512)
    if not _is_int(mt) or mt < 16:
        bad("votes.max_tokens", mt, "must be an integer >= 16", "e.g. 512")
    ts = _get(cfg, "votes.timeout_s", 60.0)
    if not _is_num(ts) or ts <= 0:
        bad("votes.timeout_s", ts, "must be > 0", "e.g. 60")
    ec = _get(cfg, "votes.excerpt_chars", 1500)
    if not _is_int(ec) or ec < 0:
        bad("votes.excerpt_chars", ec, "must be an integer >= 0", "e.g. 1500")


def router_config_dict(rc: RouterConfig) -> dict:
    """The nested-dict form of a parsed config (what ``from_config`` reads back)."""
    return {"name": rc.name, "top_k": rc.top_k, "include_base": rc.include_base,
            "seed": rc.seed, "metric": rc.metric, "mixture_weights": dict(rc.mixture_weights),
            "features": {"l2": rc.features_l2}, "hybrid": {"margin": rc.hybrid_margin},
            "votes": {"voters": [dataclasses.asdict(v) for v in rc.voters],
                      "aggregation": rc.aggregation, "rrf_k": rc.rrf_k,
                      "cache_dir": rc.cache_dir, "max_tokens": rc.vote_max_tokens,
                      "timeout_s": rc.vote_timeout_s, "excerpt_chars": rc.excerpt_chars},
            "log": {"path": rc.log_path, "max_decisions": rc.max_decisions}}


# ------------------------------------------------------------------ the whole harness_s section
SELECTORS = ("h0", "mixture")
HELPERS = ("router", "h0")                     # rescue.helpers
CREDITS = ("policy_tokens", "executed_action")  # = credit.CREDITS
POOL_SIBLINGS = ("all", "no_action_rewrites")  # = pool.POOL_SIBLINGS
SPLIT_MODES = ("split", "per_helper")          # = rescue.SPLIT_MODES
CALIBRATIONS = ("with_original", "replaced")   # = rescue.CALIBRATIONS


def harness_s_section() -> ml_collections.ConfigDict:
    """The experiment config's ``harness_s`` section (``experiments/configs/harness_s/``)."""
    s = ml_collections.ConfigDict()
    s.pool = ""                     # frozen pool file (pool-<hash>.json from launch/evolve.py); "" = none (GRPO only)
    s.pool_siblings = "all"         # "all" | "no_action_rewrites": route only over H0 and siblings that never rewrite or force an action
    s.rescue = ml_collections.ConfigDict()
    s.rescue.enabled = True         # replace all-failed H0 groups by attempts under router-picked helpers
    s.rescue.split = "split"        # "split": the G attempts are shared by the K helpers | "per_helper": G each
    s.rescue.calibration = "with_original"  # advantage statistics over the G original failures + the rescue | "replaced": the rescue alone
    s.rescue.helpers = "router"     # "router": siblings the router picks (Harness-S) | "h0": the attempts re-rolled under H0 (equal-budget control, no pool)
    s.rescue.credit = "policy_tokens"  # "policy_tokens": overlay-rewritten turns masked | "executed_action": also train on the executed rewritten action
    s.router = router_config()      # which helpers (and Rank-1 at evaluation); see docs/harness_s.md
    s.selector = ml_collections.ConfigDict()
    s.selector.name = "h0"          # harness a group is first rolled out under: "h0" | "mixture" (the fixed-mixture baseline)
    s.selector.weights = config_dict.ConfigDict({}, type_safe=False)  # mixture: {sibling name or id: weight}; empty = uniform over the pool (H0 included)
    s.validation = ml_collections.ConfigDict()
    s.validation.split = "search"   # split of the validation tasks (evolution's children, re-anchoring)
    s.validation.num_tasks = 32     # validation tasks
    s.validation.k = 2              # attempts per validation task
    s.validation.temperature = 0.0  # sampling temperature of validation attempts (0 = rollout.temperature)
    s.reanchor = ml_collections.ConfigDict()
    s.reanchor.every_steps = 0      # re-run validation of H0 and every sibling every N GRPO steps (0 = fixed profiles)
    s.reanchor.llm_profiles = False  # behaviour profiles by the harness_s.llm endpoint (False: offline summariser)
    s.evolve = ml_collections.ConfigDict()
    s.evolve.editor = "deterministic"  # "deterministic" (edit operators) | "llm" | "auto" (operators, then the LLM)
    s.evolve.diagnoser = False      # label uncertain failures with the harness_s.llm endpoint
    s.evolve.num_train_tasks = 32   # fresh training tasks whose failures give the repair directions
    s.evolve.train_attempts = 1     # episodes per training task
    s.evolve.seed_offset = 2000     # training tasks use env.task_seed + this (disjoint from SFT and the GRPO stream)
    s.evolve.max_generations = 3    # generations of children
    s.evolve.max_child_evaluations = 32  # budget: children evaluated on the validation split
    s.evolve.parents_per_generation = 2  # parents chosen by greedy joint validation coverage
    s.evolve.max_directions = 3     # repair directions edited per parent
    s.evolve.children_per_direction = 2  # proposals per (parent, direction)
    s.evolve.min_failures = 2       # failures a root cause needs to become a direction
    s.evolve.min_val_solved = 1     # a child must solve at least this many validation tasks
    s.evolve.out_dir = ""           # where the pool file and report go ("" = <workdir>/pool)
    s.llm = ml_collections.ConfigDict()
    s.llm.base_url = ""             # OpenAI-compatible endpoint of the editor, diagnoser and profiler ("" = offline)
    s.llm.model = ""                # its model name
    s.llm.api_key_env = ""          # NAME of the environment variable holding the key ("" = no auth)
    s.llm.temperature = 0.7         # editor sampling temperature (diagnoser and profiler use 0)
    s.llm.seed = 0                  # base seed of the calls
    s.llm.cache_dir = ""            # content-addressed response cache ("" = off)
    s.llm.timeout_s = 120.0         # per-request HTTP timeout
    return s


def _pos(bad, path, v, lo=1, fix=None):
    if not _is_int(v) or v < lo:
        bad(path, v, f"must be an integer >= {lo}", fix or f"set --config.{path} >= {lo}")


def harness_s_problems(config: Any, *, check_paths: bool = True, router_names: Sequence[str] = (),
                       environ: Optional[Mapping[str, str]] = None) -> list[Problem]:
    """Every problem of ``config.harness_s`` (and its consistency with the rest of the config);
    empty when fine. Loads the pool file to check the router against its size."""
    s = config.harness_s
    out: list[Problem] = []
    env = os.environ if environ is None else environ

    def bad(path, value, problem, fix):
        out.append(Problem(path, value, problem, fix))

    pool = _pool_problems(config, bad, check_paths)
    if s.rescue.split not in SPLIT_MODES:
        bad("harness_s.rescue.split", s.rescue.split, f"unknown mode; allowed: {', '.join(SPLIT_MODES)}",
            "set --config.harness_s.rescue.split=split")
    if s.rescue.calibration not in CALIBRATIONS:
        bad("harness_s.rescue.calibration", s.rescue.calibration,
            f"unknown calibration; allowed: {', '.join(CALIBRATIONS)}",
            "set --config.harness_s.rescue.calibration=with_original")
    if s.rescue.helpers not in HELPERS:
        bad("harness_s.rescue.helpers", s.rescue.helpers, f"unknown helpers; allowed: {', '.join(HELPERS)}",
            "set --config.harness_s.rescue.helpers=router (Harness-S) or h0 (the resampling control)")
    if s.rescue.credit not in CREDITS:
        bad("harness_s.rescue.credit", s.rescue.credit, f"unknown credit; allowed: {', '.join(CREDITS)}",
            "set --config.harness_s.rescue.credit=policy_tokens")
    elif s.rescue.credit == "executed_action" and not _get(config, "rl.recompute_old_logp", True):
        bad("harness_s.rescue.credit", s.rescue.credit, "credited executed actions have no sampling "
            "log-probabilities: the learner must recompute them", "set --config.rl.recompute_old_logp=True")
    if s.pool_siblings not in POOL_SIBLINGS:
        bad("harness_s.pool_siblings", s.pool_siblings, f"unknown value; allowed: {', '.join(POOL_SIBLINGS)}",
            "set --config.harness_s.pool_siblings=all")
    if (s.rescue.enabled and s.rescue.helpers == "router") or s.pool:
        out += router_config_problems(s.router, router_names=router_names, pool=pool,
                                      path="harness_s.router", environ=env)
    _selector_problems(s, bad, pool)
    v = s.validation
    if v.split == "test":
        bad("harness_s.validation.split", v.split, "the test split is sealed: evolution and re-anchoring never read it",
            "use 'search' (or 'selection')")
    elif v.split not in ("train", "search", "selection"):
        bad("harness_s.validation.split", v.split, "unknown split", "use 'search'")
    _pos(bad, "harness_s.validation.num_tasks", v.num_tasks)
    _pos(bad, "harness_s.validation.k", v.k)
    if not _is_num(v.temperature) or v.temperature < 0:
        bad("harness_s.validation.temperature", v.temperature, "must be >= 0", "0 = the run's rollout.temperature")
    _pos(bad, "harness_s.reanchor.every_steps", s.reanchor.every_steps, 0,
         "set --config.harness_s.reanchor.every_steps=0 (never) or N > 0")
    _evolve_problems(s, bad)
    _llm_problems(s, bad, env)
    return out


def _pool_problems(config, bad, check_paths):
    """The pool file: exists, loads, same environment; required when something uses it."""
    s = config.harness_s
    if not s.pool:
        uses = [w for w, on in (("rescue", s.rescue.enabled and s.rescue.helpers == "router"), ("the mixture selector", s.selector.name == "mixture"),
                                ("re-anchoring", s.reanchor.every_steps)) if on]
        if uses:
            bad("harness_s.pool", s.pool, f"{uses[0]} needs a sibling pool",
                "run launch/evolve.py and set --config.harness_s.pool=<pool-<hash>.json>, or turn "
                "harness_s.rescue.enabled off (GRPO only)")
        return None
    if not check_paths:
        return None
    if not os.path.isfile(s.pool):
        bad("harness_s.pool", s.pool, "no pool file at this path",
            "run launch/evolve.py and point --config.harness_s.pool at the pool-<hash>.json it writes")
        return None
    try:
        pool = load_pool(s.pool)
    except Exception as e:  # noqa: BLE001 - any unreadable pool is a config problem
        bad("harness_s.pool", s.pool, f"the pool cannot be loaded ({e})",
            "point it at an unmodified pool file written by launch/evolve.py")
        return None
    if s.pool_siblings in POOL_SIBLINGS:
        pool = select_siblings(pool, s.pool_siblings)
    if pool.env_name and pool.env_name != config.env.name:
        bad("harness_s.pool", s.pool, f"the pool was evolved on {pool.env_name!r}, the run is "
            f"on {config.env.name!r}", "evolve a pool for this environment")
    return pool


def _selector_problems(s, bad, pool) -> None:
    if s.selector.name not in SELECTORS:
        bad("harness_s.selector.name", s.selector.name, f"unknown selector; allowed: {', '.join(SELECTORS)}",
            "set --config.harness_s.selector.name=h0")
    weights = s.selector.weights or {}
    for key in weights:
        if not _is_num(weights[key]) or weights[key] < 0:
            bad(f"harness_s.selector.weights.{key}", weights[key], "a weight must be a number >= 0",
                "use non-negative numbers (they are normalised)")
        elif pool is not None:
            try:
                pool.resolve(str(key))
            except KeyError as e:
                bad(f"harness_s.selector.weights.{key}", weights[key], f"names no sibling of the pool ({e.args[0]})",
                    "use a sibling name or id from the pool report")
    if weights and all(_is_num(weights[k]) and weights[k] == 0 for k in weights):
        bad("harness_s.selector.weights", dict(weights), "all weights are 0",
            "give at least one sibling a positive weight, or leave it empty for uniform")


def _evolve_problems(s, bad) -> None:
    e = s.evolve
    if e.editor not in EDITORS:
        bad("harness_s.evolve.editor", e.editor, f"unknown editor; allowed: {', '.join(EDITORS)}",
            "set --config.harness_s.evolve.editor=deterministic")
    for f in ("num_train_tasks", "train_attempts", "max_generations", "parents_per_generation",
              "max_directions", "children_per_direction", "min_failures"):
        _pos(bad, f"harness_s.evolve.{f}", e[f])
    for f in ("seed_offset", "max_child_evaluations", "min_val_solved"):
        _pos(bad, f"harness_s.evolve.{f}", e[f], 0)


def _llm_problems(s, bad, env) -> None:
    needs_llm = [p for p, on in (("harness_s.evolve.editor", s.evolve.editor in ("llm", "auto")),
                                 ("harness_s.evolve.diagnoser", bool(s.evolve.diagnoser)),
                                 ("harness_s.reanchor.llm_profiles", bool(s.reanchor.llm_profiles))) if on]
    llm = s.llm
    if needs_llm and not llm.base_url:
        bad("harness_s.llm.base_url", llm.base_url, f"{', '.join(needs_llm)} need(s) an LLM endpoint",
            "set --config.harness_s.llm.base_url (and .model), or use the offline implementations")
    if llm.base_url:
        if not str(llm.base_url).startswith(("http://", "https://")):
            bad("harness_s.llm.base_url", llm.base_url, "must be an http(s):// URL of an OpenAI-compatible API",
                "e.g. http://host:30000/v1")
        if not llm.model:
            bad("harness_s.llm.model", llm.model, "is empty", "name the model to call")
        key = str(llm.api_key_env or "")
        if key and not _ENV_NAME.fullmatch(key):
            bad("harness_s.llm.api_key_env", f"<{len(key)} characters>",
                "must be the NAME of an environment variable, never the key itself",
                "e.g. api_key_env='OPENAI_API_KEY' and export the key under that name")
        elif key and not env.get(key):
            bad("harness_s.llm.api_key_env", key, f"the environment variable {key} is unset",
                f"export {key}=<your key> before the run, or set api_key_env='' for an endpoint without auth")
    if not _is_num(llm.temperature) or llm.temperature < 0:
        bad("harness_s.llm.temperature", llm.temperature, "must be >= 0", "e.g. 0.7")
    if not _is_num(llm.timeout_s) or llm.timeout_s <= 0:
        bad("harness_s.llm.timeout_s", llm.timeout_s, "must be > 0", "e.g. 120")


# ------------------------------------------------------------------ the resolved section
@dataclasses.dataclass(frozen=True)
class RescueSpec:
    enabled: bool
    split: str
    calibration: str
    helpers: str
    credit: str


@dataclasses.dataclass(frozen=True)
class ValidationSpec:
    split: str
    num_tasks: int
    k: int
    temperature: float


@dataclasses.dataclass(frozen=True)
class EvolveSpec:
    editor: str
    diagnoser: bool
    num_train_tasks: int
    train_attempts: int
    seed_offset: int
    max_generations: int
    max_child_evaluations: int
    parents_per_generation: int
    max_directions: int
    children_per_direction: int
    min_failures: int
    min_val_solved: int
    out_dir: str


@dataclasses.dataclass(frozen=True)
class LLMSpec:
    base_url: str
    model: str
    api_key_env: str
    temperature: float
    seed: int
    cache_dir: str
    timeout_s: float


@dataclasses.dataclass(frozen=True)
class HarnessSSpec:
    """The ``harness_s`` section, resolved (every field is ``harness_s_section``'s)."""

    pool: str
    pool_siblings: str
    rescue: RescueSpec
    router: RouterConfig
    selector_name: str
    selector_weights: tuple                # ((sibling name or id, weight), ...)
    validation: ValidationSpec
    reanchor_every_steps: int
    reanchor_llm_profiles: bool
    evolve: EvolveSpec
    llm: LLMSpec

    @property
    def uses_pool(self) -> bool:
        """Whether training needs the pool (rescue by router-picked siblings, the mixture selector
        or re-anchoring)."""
        return bool(self.pool) and bool((self.rescue.enabled and self.rescue.helpers == "router")
                                        or self.selector_name == "mixture" or self.reanchor_every_steps)

    @property
    def trains(self) -> bool:
        """Whether training runs the Harness-S extension: it uses the pool, or resamples all-fail
        groups under H0 (``rescue.helpers="h0"``, which needs no pool)."""
        return self.uses_pool or (self.rescue.enabled and self.rescue.helpers == "h0")


def harness_s_spec(s) -> HarnessSSpec:
    """The typed form of a (checked) ``harness_s`` config section."""
    def fields(cls, node):
        return cls(**{f.name: node[f.name] for f in dataclasses.fields(cls)})

    weights = s.selector.weights or {}
    return HarnessSSpec(
        pool=str(s.pool), pool_siblings=str(s.pool_siblings), rescue=fields(RescueSpec, s.rescue), router=RouterConfig.from_config(s.router),
        selector_name=str(s.selector.name), selector_weights=tuple((str(k), float(weights[k])) for k in weights),
        validation=fields(ValidationSpec, s.validation), reanchor_every_steps=int(s.reanchor.every_steps),
        reanchor_llm_profiles=bool(s.reanchor.llm_profiles), evolve=fields(EvolveSpec, s.evolve),
        llm=fields(LLMSpec, s.llm))
