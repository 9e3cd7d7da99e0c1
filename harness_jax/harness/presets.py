"""Base harnesses (H0) per benchmark: the published protocols as ``HarnessSpec``s.

``base_harness(env_name, protocol)`` returns the harness the papers' baselines use: for DBBench's
text protocol the AgentBench v0.2 opening (instruction as a user turn, ``"Ok."`` from the agent,
then the question) with ReAct-free raw replies; for the function protocol the AgentBench-FC
system instruction with the environment's tools in Qwen3.5's XML calling format. WebShop's
text H0 is v0.2's opening (instruction, "Ok.", the one-shot example, 10 rounds), its function
H0 the FC instruction with ``search_action``/``click_action`` (20 rounds). Other
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
    elif env_name == "swe":  # OpenHands CodeAct-style H0 (texts in envs/swe/prompts.py)
        from harness_jax.envs.swe import prompts as swe
        from harness_jax.harness.specs import ObservationFormat

        text = swe.SYSTEM_PROMPT + ("" if protocol == "function" else "\n\n" + swe.TEXT_PROTOCOL)
        spec = HarnessSpec(name=f"swe-H0-{protocol}", system_prompt=text,
                           observation=ObservationFormat(max_chars=swe.H0_OBSERVATION_MAX_CHARS),
                           rules=ExecutionRules(max_turns=swe.H0_MAX_TURNS, max_tokens_per_turn=4096,
                                                episode_timeout_s=swe.H0_EPISODE_TIMEOUT_S))
    elif env_name == "appworld":
        from harness_jax.envs.appworld import protocol as aw

        # AppWorld's ReAct agent: instructions + worked example + the supervisor and task in one
        # user turn (text: ```python blocks); function calling: the same as the system prompt
        # with the execute_python tool. Literal braces in the code examples are escaped for
        # the task template's str.format.
        if protocol == "text":
            spec = HarnessSpec(name="appworld-H0-text", task_template=aw.REACT_INSTRUCTION.replace(
                "{", "{{").replace("}", "}}") + "\n\nUsing these APIs, write the code for the "
                "first step of this task:\n\n{observation}",
                rules=ExecutionRules(max_turns=50, on_unparsable="pass_raw"))
        else:
            spec = HarnessSpec(name="appworld-H0-function", system_prompt=aw.FUNCTION_INSTRUCTION,
                               rules=ExecutionRules(max_turns=50))
    elif env_name == "webshop":
        from harness_jax.envs.webshop import protocol as wsp

        if protocol == "text":   # v0.2: instruction, "Ok.", the one-shot example; 10 rounds
            spec = HarnessSpec(name="webshop-H0-text",
                               preamble=tuple(wsp.text_opening()),
                               rules=ExecutionRules(max_turns=wsp.TEXT_ROUNDS,
                                                    on_unparsable="pass_raw"))
        else:                    # FC: system instruction, search_action/click_action; 20 rounds
            spec = HarnessSpec(name="webshop-H0-function", system_prompt=wsp.FUNCTION_INSTRUCTION,
                               rules=ExecutionRules(max_turns=wsp.FUNCTION_ROUNDS))
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
