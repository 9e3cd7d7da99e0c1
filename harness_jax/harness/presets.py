"""Base harnesses (H0) per benchmark: the published protocols as ``HarnessSpec``s.

``base_harness(env_name, protocol)`` returns the harness the papers' baselines use: for DBBench's
text protocol the AgentBench v0.2 opening (instruction as a user turn, ``"Ok."`` from the agent,
then the question) with ReAct-free raw replies; for the function protocol the AgentBench-FC
system instruction with the environment's tools in Qwen3.5's XML calling format. Other
environments get a neutral H0 (the environment's first observation is the task). The protocol
texts are read from the environment package, so the two never drift apart.
"""
from __future__ import annotations

from harness_jax.harness.specs import ExecutionRules, HarnessSpec


def base_harness(env_name: str, protocol: str = "function", **overrides) -> HarnessSpec:
    """H0 for ``env_name`` (``protocol``: "text" or "function"); ``overrides`` replace fields."""
    if protocol not in ("text", "function"):
        raise ValueError(f"base_harness: protocol must be 'text' or 'function', got {protocol!r}")
    if env_name == "dbbench":
        from harness_jax.envs.dbbench import protocol as proto

        if protocol == "text":
            spec = HarnessSpec(name="dbbench-H0-text",
                               preamble=({"role": "user", "content": proto.TEXT_INSTRUCTION},
                                         {"role": "assistant", "content": "Ok."}),
                               rules=ExecutionRules(max_turns=20, on_unparsable="pass_raw"))
        else:
            spec = HarnessSpec(name="dbbench-H0-function", system_prompt=proto.FUNCTION_INSTRUCTION,
                               rules=ExecutionRules(max_turns=20))
    else:
        spec = HarnessSpec(name=f"{env_name}-H0-{protocol}", rules=ExecutionRules(max_turns=50))
    if overrides:
        import dataclasses

        spec = dataclasses.replace(spec, **overrides)
    return spec


# Named harnesses: ``config.harness.spec`` may name one (built for the run's env and protocol).
_NAMED = {"H0": base_harness}


def register(name: str, factory) -> None:
    """Registers ``factory(env_name, protocol) -> HarnessSpec`` under ``name``."""
    _NAMED[name] = factory


def names() -> list:
    return sorted(_NAMED)


def named(name: str, env_name: str, protocol: str) -> HarnessSpec:
    if name not in _NAMED:
        raise KeyError(f"harness {name!r} is not registered; registered: {names()}")
    return _NAMED[name](env_name, protocol)
