"""OpenAI-compatible chat client for the helper LLMs (harness editor, profile inducer, router
voters, SFT teacher, frontier-engineer baselines, frozen target agents).

* ``base_url``, ``model`` and the NAME of the environment variable holding the key come from
  config; the key itself is read at call time and never stored in configs, caches or logs;
* an on-disk content-addressed response cache keyed by every request field (plus base URL):
  reruns are reproducible and free; cache hits are accounted separately;
* retries with exponential backoff on transport errors / 429 / 5xx (``Retry-After`` honoured),
  a client-side requests-per-minute limit;
* token and cost accounting per role;
* JSON / structured output: ``chat_json`` parses the reply (code fences and surrounding prose
  tolerated), checks it against a small JSON-schema subset, and on failure asks the model once
  to repair its answer before rejecting with ``StructuredOutputError``.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from harness_jax.sampling.http_util import TransportError, http_json

log = logging.getLogger(__name__)


class ChatClientError(RuntimeError):
    pass


class StructuredOutputError(ChatClientError):
    """The reply could not be parsed/validated as the requested JSON, even after repair."""


@dataclasses.dataclass(frozen=True)
class ChatClientConfig:
    base_url: str                          # e.g. https://api.openai.com/v1 or http://host:30000/v1
    model: str
    api_key_env: Optional[str] = None      # NAME of the env var with the key (None: no auth)
    cache_dir: Optional[str] = None        # content-addressed response cache (None: off)
    timeout_s: float = 120.0
    max_retries: int = 4
    backoff_s: float = 1.0
    requests_per_minute: float = 0.0       # 0: unlimited
    price_input_per_mtok: float = 0.0      # USD per million prompt tokens
    price_output_per_mtok: float = 0.0     # USD per million completion tokens
    supports_seed: bool = True
    extra_body: tuple = ()                 # ((key, value), ...) merged into every request

    def __post_init__(self):
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"ChatClientConfig.base_url {self.base_url!r} must start with http(s)://")
        if not self.model:
            raise ValueError("ChatClientConfig.model is empty; name the model to call")
        if self.api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.api_key_env):
            raise ValueError(f"ChatClientConfig.api_key_env must be an environment variable NAME "
                             f"(never the key itself), got a value of length {len(self.api_key_env)}")


@dataclasses.dataclass
class ChatResponse:
    content: str
    tool_calls: list                        # [{"id", "name", "arguments": dict|str}]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool                            # served from the on-disk cache
    raw: dict


@dataclasses.dataclass
class RoleUsage:
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


def request_key(base_url: str, body: dict) -> str:
    """Content address of a request: sha256 over the canonical JSON of every field."""
    canon = json.dumps({"base_url": base_url.rstrip("/"), "body": body}, sort_keys=True,
                       ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def extract_json(text: str) -> Any:
    """The JSON value in a reply: the whole text, a ```json fenced block, or the first balanced
    {...} / [...] span. Raises ValueError with the reason."""
    t = text.strip()
    try:
        return json.loads(t)
    except json.JSONDecodeError:
        pass
    m = re.search(r"```(?:json)?\s*\n?(.*?)```", t, re.S)
    if m:
        try:
            return json.loads(m.group(1).strip())
        except json.JSONDecodeError as e:
            raise ValueError(f"fenced block is not valid JSON: {e}")
    for open_c, close_c in (("{", "}"), ("[", "]")):
        start = t.find(open_c)
        while start >= 0:
            depth, in_str, esc = 0, False, False
            for i in range(start, len(t)):
                c = t[i]
                if in_str:
                    esc = (c == "\\") and not esc
                    if c == '"' and not esc:
                        in_str = False
                    continue
                if c == '"':
                    in_str = True
                elif c == open_c:
                    depth += 1
                elif c == close_c:
                    depth -= 1
                    if depth == 0:
                        try:
                            return json.loads(t[start:i + 1])
                        except json.JSONDecodeError:
                            break
            start = t.find(open_c, start + 1)
    raise ValueError("no JSON object or array found in the reply")


_TYPES = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float),
          "boolean": bool, "null": type(None)}


def validate_schema(value: Any, schema: Optional[dict], path: str = "$") -> list[str]:
    """Checks a JSON-schema subset (type, properties, required, items, enum,
    additionalProperties=false); returns error strings naming the path."""
    if not schema:
        return []
    errs = []
    typ = schema.get("type")
    if typ is not None:
        types = typ if isinstance(typ, list) else [typ]
        ok = any(isinstance(value, _TYPES[t]) and not (t in ("integer", "number") and isinstance(value, bool))
                 for t in types if t in _TYPES)
        if not ok:
            return [f"{path}: expected {typ}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        for k in schema.get("required", []):
            if k not in value:
                errs.append(f"{path}: missing required key {k!r}")
        props = schema.get("properties", {})
        for k, v in value.items():
            if k in props:
                errs += validate_schema(v, props[k], f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{path}: unexpected key {k!r}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            errs += validate_schema(v, schema["items"], f"{path}[{i}]")
    return errs


class OpenAIChatClient:
    """Chat completions with caching, retries, rate limiting and per-role accounting."""

    def __init__(self, config: ChatClientConfig):
        self.config = config
        self.usage: dict[str, RoleUsage] = {}
        self._lock = threading.Lock()
        self._last_call = 0.0
        if config.cache_dir:
            Path(config.cache_dir).mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------------ internals
    def _headers(self) -> dict:
        env = self.config.api_key_env
        if env is None:
            return {}
        key = os.environ.get(env)
        if not key:
            raise ChatClientError(f"environment variable {env} (ChatClientConfig.api_key_env) is not "
                                  "set; export the API key under that name")
        return {"Authorization": f"Bearer {key}"}

    def _cache_path(self, key: str) -> Optional[Path]:
        if not self.config.cache_dir:
            return None
        return Path(self.config.cache_dir) / key[:2] / f"{key}.json"

    def _rate_limit(self) -> None:
        rpm = self.config.requests_per_minute
        if rpm <= 0:
            return
        with self._lock:
            gap = 60.0 / rpm
            wait = self._last_call + gap - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._last_call = time.monotonic()

    def _post(self, body: dict) -> dict:
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        last = None
        for attempt in range(self.config.max_retries + 1):
            self._rate_limit()
            delay = self.config.backoff_s * (2 ** attempt)
            try:
                r = http_json("POST", url, body, timeout=self.config.timeout_s, headers=self._headers())
            except TransportError as e:
                last = str(e)
            else:
                if r.status == 200 and isinstance(r.json, dict) and r.json.get("choices"):
                    return r.json
                if r.status == 200:
                    raise ChatClientError(f"{url}: malformed response (no 'choices'): {r.text[:300]}")
                last = f"HTTP {r.status}: {r.text[:300]}"
                if r.status not in (408, 409, 429) and r.status < 500:
                    raise ChatClientError(f"{url} rejected the request ({last})")
                ra = r.headers.get("retry-after")
                if ra:
                    try:
                        delay = max(delay, float(ra))
                    except ValueError:
                        pass
            if attempt < self.config.max_retries:
                time.sleep(delay)
        raise ChatClientError(f"{url}: failed after {self.config.max_retries + 1} attempts: {last}")

    def _account(self, role: str, resp: ChatResponse) -> None:
        with self._lock:
            u = self.usage.setdefault(role, RoleUsage())
            u.calls += 1
            if resp.cached:
                u.cache_hits += 1
                return
            u.prompt_tokens += resp.prompt_tokens
            u.completion_tokens += resp.completion_tokens
            u.cost_usd += (resp.prompt_tokens * self.config.price_input_per_mtok
                           + resp.completion_tokens * self.config.price_output_per_mtok) / 1e6

    @staticmethod
    def _parse(raw: dict, cached: bool) -> ChatResponse:
        try:
            choice = raw["choices"][0]
            msg = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise ChatClientError(f"malformed chat response: no choices[0].message in {str(raw)[:300]}")
        calls = []
        for c in msg.get("tool_calls") or []:
            fn = c.get("function", {})
            args = fn.get("arguments", "")
            try:
                args = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                pass   # keep the raw string; the caller decides
            calls.append({"id": c.get("id"), "name": fn.get("name"), "arguments": args})
        usage = raw.get("usage") or {}
        return ChatResponse(content=msg.get("content") or "", tool_calls=calls,
                            finish_reason=choice.get("finish_reason") or "",
                            prompt_tokens=int(usage.get("prompt_tokens") or 0),
                            completion_tokens=int(usage.get("completion_tokens") or 0),
                            cached=cached, raw=raw)

    # --------------------------------------------------------------------------- API
    def build_body(self, messages: Sequence[dict], *, tools: Optional[Sequence[dict]] = None,
                   temperature: Optional[float] = None, top_p: Optional[float] = None,
                   max_tokens: Optional[int] = None, seed: Optional[int] = None,
                   response_format: Optional[dict] = None, stop: Optional[Sequence[str]] = None,
                   **extra) -> dict:
        body: dict = {"model": self.config.model, "messages": list(messages)}
        for k, v in (("tools", list(tools) if tools else None), ("temperature", temperature),
                     ("top_p", top_p), ("max_tokens", max_tokens), ("response_format", response_format),
                     ("stop", list(stop) if stop else None)):
            if v is not None:
                body[k] = v
        if seed is not None and self.config.supports_seed:
            body["seed"] = int(seed)
        body.update(dict(self.config.extra_body))
        body.update(extra)
        return body

    def chat(self, messages: Sequence[dict], *, role: str = "default", use_cache: bool = True,
             **kw) -> ChatResponse:
        """One chat completion (cached by content)."""
        body = self.build_body(messages, **kw)
        key = request_key(self.config.base_url, body)
        path = self._cache_path(key)
        if use_cache and path is not None and path.exists():
            resp = self._parse(json.loads(path.read_text()), cached=True)
        else:
            raw = self._post(body)
            resp = self._parse(raw, cached=False)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
                tmp.write_text(json.dumps(raw, ensure_ascii=False))
                os.replace(tmp, path)
        self._account(role, resp)
        return resp

    async def achat(self, messages: Sequence[dict], **kw) -> ChatResponse:
        return await asyncio.to_thread(self.chat, messages, **kw)

    def chat_json(self, messages: Sequence[dict], *, schema: Optional[dict] = None,
                  role: str = "default", repair: bool = True, **kw) -> Any:
        """A JSON reply validated against ``schema``; one repair round, then StructuredOutputError."""
        resp = self.chat(messages, role=role, **kw)
        value, errs = self._check_json(resp.content, schema)
        if not errs:
            return value
        if repair:
            fix = list(messages) + [
                {"role": "assistant", "content": resp.content},
                {"role": "user", "content": "Your reply was not valid: " + "; ".join(errs[:5])
                 + ". Reply again with ONLY the corrected JSON, no prose."}]
            resp2 = self.chat(fix, role=role, **kw)
            value, errs2 = self._check_json(resp2.content, schema)
            if not errs2:
                return value
            errs = errs2
        raise StructuredOutputError(f"role {role}: reply rejected after repair: {'; '.join(errs[:5])}")

    @staticmethod
    def _check_json(text: str, schema: Optional[dict]) -> tuple[Any, list[str]]:
        try:
            value = extract_json(text)
        except ValueError as e:
            return None, [str(e)]
        return value, validate_schema(value, schema)

    def usage_summary(self) -> dict:
        with self._lock:
            return {r: dataclasses.asdict(u) for r, u in self.usage.items()}
