"""Router config validation: bad configs are rejected with the dotted path and the fix."""
import pytest

from harness_jax import harness_s
from harness_jax.config_validation import ConfigValidationError
from harness_jax.harness.presets import base_harness
from harness_jax.harness.siblings import Sibling
from harness_jax.harness_s.pool import PoolEntry, SiblingPool

from .builders import router_cfg
from .test_routers import make_pool


_cfg = router_cfg


def _problems(cfg, pool=None, environ=None, **kw):
    return harness_s.find_router_problems(cfg, pool=pool, environ=environ or {}, **kw)


def test_defaults_are_valid_and_parse():
    pool = make_pool()
    assert _problems(_cfg(), pool) == []
    rc = harness_s.validate_router_config(_cfg(top_k=2), pool, environ={})
    assert rc.name == "validation_topk" and rc.top_k == 2 and rc.voters == ()


def test_plain_dicts_take_the_defaults():
    assert _problems({"name": "features"}, make_pool()) == []
    rc = harness_s.validate_router_config({"votes": {"aggregation": "rrf"}}, make_pool(),
                                          environ={})
    assert rc.name == "validation_topk" and rc.top_k == 4 and rc.aggregation == "rrf"


def test_unknown_router():
    (p,) = _problems(_cfg(name="oracle"))
    assert p.path == "harness_s.router.name" and "unknown router" in p.problem
    assert "hybrid" in p.fix and "llm_vote" in p.fix
    assert str(p).startswith("config.harness_s.router.name = 'oracle'")


def test_k_larger_than_the_pool():
    pool = make_pool()                               # H0 + 4 helpers
    (p,) = _problems(_cfg(top_k=5), pool)
    assert p.path == "harness_s.router.top_k" and "only 4 candidate(s)" in p.problem
    assert "at most 4" in p.fix
    assert _problems(_cfg(top_k=5, include_base=True), pool) == []   # Rank-1 ranks H0 too
    assert _problems(_cfg(top_k=0), pool)[0].problem == "must be an integer >= 1"


def test_empty_pool():
    only_h0 = SiblingPool([PoolEntry(Sibling(base_harness("dbbench"), name="H0"))])
    probs = _problems(_cfg(top_k=1), only_h0)
    assert len(probs) == 1 and "the sibling pool is empty" in probs[0].problem
    assert "no helper besides H0" in probs[0].problem and "evolve a pool first" in probs[0].fix
    with pytest.raises(ValueError, match="at least the base harness"):
        SiblingPool([])
    with pytest.raises(ConfigValidationError, match="sibling pool is empty"):
        harness_s.make_router(_cfg(top_k=1), only_h0)


def test_voter_key_variable_unset_and_other_voter_problems():
    voters = ({"name": "a", "base_url": "https://api.example.com/v1", "model": "m",
               "api_key_env": "HS_TEST_VOTER_KEY", "temperature": 0.7, "seed": 0},
              {"name": "a", "base_url": "ftp://x", "model": "", "api_key_env": "sk-abc def",
               "temperature": -1, "seed": 1})
    cfg = _cfg(name="llm_vote", **{"votes.voters": voters})
    probs = {p.path: p for p in _problems(cfg, make_pool())}
    key = probs["harness_s.router.votes.voters[0].api_key_env"]
    assert "HS_TEST_VOTER_KEY is unset" in key.problem and "export HS_TEST_VOTER_KEY" in key.fix
    bad_key = probs["harness_s.router.votes.voters[1].api_key_env"]
    assert "never the key itself" in bad_key.problem and "sk-abc" not in str(bad_key.value)
    for path in ("voters[1].base_url", "voters[1].model", "voters[1].temperature", "voters"):
        assert f"harness_s.router.votes.{path}" in probs
    ok = _problems(cfg, make_pool(), environ={"HS_TEST_VOTER_KEY": "secret"})
    assert "harness_s.router.votes.voters[0].api_key_env" not in {p.path for p in ok}
    with pytest.raises(ConfigValidationError) as e:
        harness_s.make_router(cfg, make_pool(), environ={})
    assert "HS_TEST_VOTER_KEY is unset" in str(e.value) and len(e.value.problems) == len(probs)


def test_vote_routers_need_voters_and_other_fields_are_checked():
    probs = {p.path for p in _problems(_cfg(name="hybrid", **{
        "votes.aggregation": "mean", "votes.rrf_k": 0, "hybrid.margin": 2.0,
        "features.l2": -1.0, "metric": "accuracy", "log.max_decisions": -1}), make_pool())}
    assert probs == {f"harness_s.router.{p}" for p in (
        "votes.voters", "votes.aggregation", "votes.rrf_k", "hybrid.margin", "features.l2",
        "metric", "log.max_decisions")}


def test_mixture_weights_must_name_pool_siblings():
    probs = _problems(_cfg(name="fixed_mixture", mixture_weights={"nope": 1.0, "sA": -2.0}),
                      make_pool())
    paths = sorted(p.path for p in probs)
    assert paths == ["harness_s.router.mixture_weights.nope", "harness_s.router.mixture_weights.sA"]
    (zero,) = _problems(_cfg(name="fixed_mixture", mixture_weights={"sA": 0.0}), make_pool())
    assert "all weights are 0" in zero.problem


def test_the_path_prefix_is_the_callers():
    (p,) = _problems(_cfg(name="x"), path="rescue.router")
    assert p.path == "rescue.router.name" and "--config.rescue.router.name" in p.fix
