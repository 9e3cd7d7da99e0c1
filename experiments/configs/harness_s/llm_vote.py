"""harness_s/llm_vote: routing by LLM votes (three voters, Borda count) against the offline
``features`` router of ``dbbench_cpu``; ``hybrid`` (features first, votes where they cannot
separate) is the sweep's other arm. Voters are OpenAI-compatible endpoints; their responses go
through the content-addressed cache (``<workdir>/harness_s/llm_cache``), so a rerun or a resume
costs nothing. The key is read from ``OPENAI_API_KEY`` at call time (the config is refused,
with the fix, when it is unset); point ``base_url`` elsewhere (e.g. a local SGLang server,
``api_key_env=''``) with ``--config.harness_s.router.votes.voters=...``.

Commands::

    export OPENAI_API_KEY=...
    python launch/train.py --config=experiments/configs/harness_s/llm_vote.py:$POOL --workdir=/tmp/hs/votes
    python launch/sweep.py --config=experiments/configs/harness_s/llm_vote.py:$POOL \
        --sweep=router --workdir=/tmp/hs/votes_vs_hybrid

Expected result: not measured (needs an endpoint). Each rescue logs three votes with their
rankings in ``harness_s/routing.jsonl``; ``router/usage/*`` counts calls, cache hits, tokens and
cost; when every voter fails, the decision falls back to ``features`` (logged).
"""
from experiments.configs.harness_s import common, dbbench_cpu


def get_config(pool: str = ""):
    c = dbbench_cpu.get_config(pool)
    c.name = "hs_llm_vote_cpu"
    r = c.harness_s.router
    r.name = "llm_vote"                   # M voters, rankings fused
    r.votes.voters = tuple(               # three voters: one model at three seeds / temperatures
        {"name": f"v{i}", "base_url": "https://api.openai.com/v1", "model": "gpt-4o-mini",
         "api_key_env": "OPENAI_API_KEY", "temperature": t, "seed": i}
        for i, t in enumerate((0.0, 0.7, 1.0)))
    r.votes.aggregation = "borda"         # Borda count (rrf: reciprocal-rank fusion)
    return c


SWEEPS = {
    "router": lambda: common.hyper.sweep("harness_s.router.name", ["llm_vote", "hybrid"]),
    "seeds_x_router": common.seeds_x("harness_s.router.name", ("llm_vote", "hybrid", "features")),
}
