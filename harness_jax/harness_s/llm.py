"""One structured LLM call for every Harness-S role (diagnoser, editor, voter, profiler).

``structured_call`` sends the messages through the cached, costed ``OpenAIChatClient``, parses
the reply as JSON, checks it against a JSON schema and then against the role's own semantic
check, and on any failure asks the model ONCE to repair its answer (the reply and the list of
errors are sent back). A second failure rejects the answer: the caller falls back to its
deterministic implementation. Transport failures (after the client's own retries) are
rejections too, never exceptions, so one broken endpoint cannot stop a run.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

from harness_jax.sampling.openai_client import (ChatClientConfig, ChatClientError,
                                                OpenAIChatClient, extract_json, validate_schema)

# check(value) -> (normalised value, errors); errors empty when the answer is acceptable
Check = Callable[[Any], tuple[Any, list[str]]]


@dataclasses.dataclass
class StructuredResult:
    ok: bool
    value: Any = None
    errors: list[str] = dataclasses.field(default_factory=list)
    attempts: int = 0               # model calls made (1, or 2 with the repair round)
    repaired: bool = False
    cached: bool = False            # every call was served from the response cache
    raw: list[str] = dataclasses.field(default_factory=list)  # the reply texts

    def to_dict(self) -> dict:
        return {"ok": self.ok, "errors": self.errors[:5], "attempts": self.attempts,
                "repaired": self.repaired, "cached": self.cached}


def _evaluate(text: str, schema: Optional[dict], check: Optional[Check]) -> tuple[Any, list[str]]:
    try:
        value = extract_json(text)
    except ValueError as e:
        return None, [str(e)]
    errs = validate_schema(value, schema)
    if errs:
        return None, errs
    if check is not None:
        return check(value)
    return value, []


def structured_call(client: OpenAIChatClient, messages: Sequence[dict], *,
                    schema: Optional[dict] = None, check: Optional[Check] = None,
                    role: str = "default", **sampling) -> StructuredResult:
    """A validated JSON answer (one repair round) or a rejection with the reasons."""
    res = StructuredResult(ok=False)
    msgs = list(messages)
    cached = []
    for attempt in range(2):
        try:
            resp = client.chat(msgs, role=role, **sampling)
        except ChatClientError as e:
            res.errors = [f"{role}: the endpoint failed: {e}"]
            res.attempts = attempt + 1
            return res
        cached.append(resp.cached)
        res.raw.append(resp.content)
        res.attempts = attempt + 1
        value, errs = _evaluate(resp.content, schema, check)
        if not errs:
            res.ok, res.value, res.errors = True, value, []
            res.repaired = attempt == 1
            res.cached = all(cached)
            return res
        res.errors = errs
        msgs = msgs + [
            {"role": "assistant", "content": resp.content},
            {"role": "user", "content": "Your reply was not accepted: " + "; ".join(errs[:6])
             + ". Reply again with ONLY the corrected JSON object, no prose."}]
    res.cached = all(cached)
    return res


def make_client(base_url: str, model: str, *, api_key_env: Optional[str] = None,
                cache_dir: Optional[str] = None, timeout_s: float = 120.0,
                max_retries: int = 2, **kw) -> OpenAIChatClient:
    """An ``OpenAIChatClient`` from the plain fields Harness-S configs carry."""
    return OpenAIChatClient(ChatClientConfig(
        base_url=base_url, model=model, api_key_env=api_key_env or None,
        cache_dir=cache_dir or None, timeout_s=timeout_s, max_retries=max_retries, **kw))
