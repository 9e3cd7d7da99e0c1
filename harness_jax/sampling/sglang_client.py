"""Async client for servers speaking SGLang's native HTTP API (SGLang itself on GPU hosts, or
``launch/serve.py`` over the embedded engine).

What it guarantees (see ``shared/notes/sglang_api.md``):
  * every sampling parameter is sent explicitly (servers fill omitted ones from the model's
    generation config, which silently breaks importance ratios); ``max_new_tokens`` not
    ``max_tokens``; ``no_stop_trim`` and ``spaces_between_special_tokens=False``;
  * tokens and behaviour logprobs come from ``meta_info.output_token_logprobs`` (``[lp, id, _]``);
  * several servers: episode affinity (an episode stays on one server for its prefix cache),
    otherwise least in-flight; a global concurrency limit; per-request timeout (the rid is then
    aborted on the worker so it does not keep decoding); bounded retries with exponential backoff
    on transport errors and 5xx, failing over to another server when there is one;
  * an aborted request (pause for a weight sync, or an abort we did not ask for) is resumed by
    appending its partial tokens to the prompt and lowering ``max_new_tokens``; per-token weight
    versions are kept; an abort asked for with ``abort()`` is returned as is;
  * weight sync (``sglang_sync.WeightSyncer``): pause -> flush_cache (retry until idle) ->
    [begin_weight_update] -> the update (a bf16 export to a memory-backed dir and
    ``update_weights_from_disk``, or ``update_weights_from_distributed`` broadcasts, or
    ``update_weights_from_tensor``) -> [end_weight_update] -> continue, on every server, optional
    endpoints feature-probed (404 = older server, falling back to disk), the version verified
    afterwards and every phase timed.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
from typing import Any, Optional, Sequence

from harness_jax.sampling.errors import SGLangError, SGLangProtocolError, SGLangRequestError, SGLangServerError
from harness_jax.sampling.http_util import HttpResponse, TransportError, http_json
from harness_jax.sampling.sglang_sync import WeightSyncer, WeightSyncReport
from harness_jax.sampling.types import (FINISH_ABORT, FINISH_LENGTH, FINISH_STOP, GenerateRequest,
                                        GenerateResult, RolloutEngine, SamplingParams)

log = logging.getLogger(__name__)

__all__ = ["SGLangClient", "WeightSyncReport", "SGLangError", "SGLangServerError", "SGLangRequestError",
           "SGLangProtocolError", "parse_generate_response", "sampling_params_body"]


def _parse_version(v: Any) -> int:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return 0


def sampling_params_body(p: SamplingParams, max_new_tokens: Optional[int] = None) -> dict:
    """Every sampling parameter, explicitly (SGLang 0.5.23 key names)."""
    sp = {"temperature": float(p.temperature), "top_p": float(p.top_p),
          "top_k": int(p.top_k) if p.top_k >= 1 else -1, "min_p": float(p.min_p),
          "max_new_tokens": int(max_new_tokens if max_new_tokens is not None else p.max_new_tokens),
          "stop_token_ids": list(p.stop_token_ids), "stop": list(p.stop),
          "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
          "ignore_eos": bool(p.ignore_eos), "skip_special_tokens": False,
          "spaces_between_special_tokens": False, "no_stop_trim": True}
    if p.seed is not None:
        sp["sampling_seed"] = int(p.seed)
    return sp


def parse_generate_response(body: Any, url: str = "") -> dict:
    """Validates one /generate response; returns {tokens, logprobs, finish, matched, version,
    message, cached_tokens}. Raises SGLangProtocolError naming the bad field."""
    where = f"{url}/generate response"
    if isinstance(body, list):
        if len(body) != 1:
            raise SGLangProtocolError(f"{where}: expected one result, got a list of {len(body)}")
        body = body[0]
    if not isinstance(body, dict):
        raise SGLangProtocolError(f"{where}: body is not a JSON object: {str(body)[:200]!r}")
    meta = body.get("meta_info")
    if not isinstance(meta, dict):
        raise SGLangProtocolError(f"{where}: missing 'meta_info' object")
    otl = meta.get("output_token_logprobs")
    if not isinstance(otl, list):
        raise SGLangProtocolError(f"{where}: missing 'meta_info.output_token_logprobs' "
                                  "(was return_logprob sent? is this an SGLang server?)")
    tokens, lps = [], []
    for i, x in enumerate(otl):
        if not (isinstance(x, (list, tuple)) and len(x) >= 2 and isinstance(x[1], int)
                and isinstance(x[0], (int, float))):
            raise SGLangProtocolError(f"{where}: meta_info.output_token_logprobs[{i}] = {x!r} is not "
                                      "[logprob, token_id, text]")
        lps.append(float(x[0]))
        tokens.append(int(x[1]))
    out_ids = body.get("output_ids")
    if out_ids is not None and list(out_ids)[-len(tokens):] != tokens and tokens:
        raise SGLangProtocolError(f"{where}: output_ids disagree with output_token_logprobs ids")
    fr = meta.get("finish_reason")
    if not isinstance(fr, dict) or fr.get("type") not in ("stop", "length", "abort"):
        raise SGLangProtocolError(f"{where}: meta_info.finish_reason = {fr!r} is not "
                                  "{'type': 'stop'|'length'|'abort', ...}")
    finish = {"stop": FINISH_STOP, "length": FINISH_LENGTH, "abort": FINISH_ABORT}[fr["type"]]
    token_versions = None
    spans = meta.get("weight_versions")
    if spans:   # the request lived across an in-place update: version per token span
        token_versions = [None] * len(tokens)
        for j, sp in enumerate(spans):
            try:
                v, a, b = _parse_version(sp["version"]), int(sp["start"]), int(sp["end"])
            except (KeyError, TypeError, ValueError):
                raise SGLangProtocolError(f"{where}: meta_info.weight_versions[{j}] = {sp!r} is not "
                                          "{'version', 'start', 'end'}")
            token_versions[a:b] = [v] * (min(b, len(tokens)) - min(a, len(tokens)))
        if any(v is None for v in token_versions):
            raise SGLangProtocolError(f"{where}: meta_info.weight_versions does not cover all "
                                      f"{len(tokens)} output tokens")
    return {"tokens": tokens, "logprobs": lps, "finish": finish, "matched": fr.get("matched"),
            "token_versions": token_versions,
            "message": fr.get("message") or "", "version": meta.get("weight_version"),
            "cached_tokens": int(meta.get("cached_tokens") or 0)}


class SGLangClient(RolloutEngine):
    """RolloutEngine over one or more SGLang-API servers.

    Args:
      urls: base URLs (``http://host:port``) or one URL.
      max_concurrency: in-flight /generate calls over all servers.
      timeout_s: per-attempt timeout of a /generate call.
      max_retries: extra attempts after a transport error / 5xx / timeout.
      backoff_s: first backoff; doubles per attempt.
      resume_aborted: resume requests aborted by the server (weight sync, pause) by appending
        their partial tokens; at most ``max_resumes`` times.
      flush_retries / flush_interval_s: how long weight sync waits for a server to go idle.
      sync_method / sync_dtype / sync_bucket_bytes / group_backend / group_address: the weight
        sync transport (``sglang_sync.WeightSyncer``): "disk" (default), "distributed" or
        "tensor", the dtype of the matrices sent, the bucket size, and the weights update
        group's torch backend and the trainer address servers join it at.
    """

    def __init__(self, urls: Sequence[str] | str, *, max_concurrency: int = 64, timeout_s: float = 600.0,
                 connect_timeout_s: float = 10.0, max_retries: int = 3, backoff_s: float = 0.5,
                 resume_aborted: bool = True, max_resumes: int = 16, flush_retries: int = 60,
                 flush_interval_s: float = 1.0, weight_version: int = 0, sync_method: str = "disk",
                 sync_dtype: str = "bfloat16", sync_bucket_bytes: int = 512 << 20, group_backend: str = "gloo",
                 group_address: str = "127.0.0.1"):
        urls = [urls] if isinstance(urls, str) else list(urls)
        if not urls:
            raise ValueError("SGLangClient.urls: give at least one server URL")
        for u in urls:
            if not u.startswith(("http://", "https://")):
                raise ValueError(f"SGLangClient.urls: {u!r} must start with http:// or https://")
        self.urls = [u.rstrip("/") for u in urls]
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.resume_aborted = resume_aborted
        self.max_resumes = int(max_resumes)
        self.flush_retries = int(flush_retries)
        self.flush_interval_s = float(flush_interval_s)
        self._version = int(weight_version)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.max_concurrency + 8,
                                                           thread_name_prefix="sglang-http")
        self._inflight = {u: 0 for u in self.urls}
        self._affinity: dict[str, str] = {}
        self._rid_server: dict[str, str] = {}
        self._user_aborted: set[str] = set()
        self._sem: Optional[asyncio.Semaphore] = None
        self._sem_loop = None
        self._unpaused_flag = True       # False while a weight sync runs (new calls wait)
        self.last_sync: Optional[WeightSyncReport] = None
        self.syncer = WeightSyncer(self, sync_method, sync_dtype, sync_bucket_bytes, group_backend, group_address)

    # -------------------------------------------------------------------------- plumbing
    @property
    def weight_version(self) -> int:
        return self._version

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._sem is None or self._sem_loop is not loop:
            self._sem, self._sem_loop = asyncio.Semaphore(self.max_concurrency), loop
        return self._sem

    async def call(self, method: str, url: str, body: Any = None, timeout: Optional[float] = None,
                   headers: Optional[dict] = None) -> HttpResponse:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool, lambda: http_json(method, url, body, timeout or self.connect_timeout_s, headers))

    def _pick(self, request: GenerateRequest, exclude: set) -> str:
        ep = request.episode_id
        if ep is not None and ep in self._affinity and self._affinity[ep] not in exclude:
            return self._affinity[ep]
        cands = [u for u in self.urls if u not in exclude] or self.urls
        url = min(cands, key=lambda u: self._inflight[u])
        if ep is not None:
            self._affinity[ep] = url
        return url

    def server_of(self, episode_id: str) -> Optional[str]:
        """The server an episode is pinned to (its KV cache lives there), None when unpinned."""
        return self._affinity.get(episode_id)

    async def _wait_unpaused(self) -> None:
        while not self._unpaused_flag:
            await asyncio.sleep(0.01)

    # ---------------------------------------------------------------------------- generate
    async def _post_generate(self, request: GenerateRequest, ids: list[int], max_new: int,
                             bad: set) -> tuple[str, dict]:
        """One /generate with retries/failover; returns (url, parsed)."""
        body = {"input_ids": ids, "rid": request.request_id, "return_logprob": True, "stream": False,
                "sampling_params": sampling_params_body(request.params, max_new)}
        last_err = None
        for attempt in range(self.max_retries + 1):
            url = self._pick(request, bad)
            self._rid_server[request.request_id] = url
            self._inflight[url] += 1
            try:
                # behind an sglang router (consistent_hashing), the episode keeps its worker too
                hdrs = {"X-SMG-Routing-Key": request.episode_id} if request.episode_id else None
                resp = await self.call("POST", url + "/generate", body, timeout=self.timeout_s, headers=hdrs)
            except TransportError as e:
                last_err = e
                if len(self.urls) > 1:
                    bad.add(url)          # fail over to another server on the next attempt
                if "timed out" in str(e) or "timeout" in str(e).lower():
                    await self._abort_on(url, request.request_id)   # stop orphaned decoding
            else:
                if resp.status == 200:
                    return url, parse_generate_response(resp.json if resp.json is not None else resp.text, url)
                msg = (resp.json or {}).get("error", {}) if isinstance(resp.json, dict) else {}
                text = msg.get("message") if isinstance(msg, dict) else None
                if 400 <= resp.status < 500:
                    raise SGLangRequestError(f"{url}/generate rejected the request (HTTP {resp.status}): "
                                             f"{text or resp.text[:500]}")
                last_err = SGLangServerError(f"HTTP {resp.status}: {text or resp.text[:300]}")
            finally:
                self._inflight[url] -= 1
            if attempt < self.max_retries:
                await asyncio.sleep(self.backoff_s * (2 ** attempt))
        raise SGLangServerError(f"/generate for request {request.request_id} failed after "
                                f"{self.max_retries + 1} attempts on {sorted(set(self.urls))}: {last_err}")

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        if not request.input_ids:
            raise ValueError(f"request {request.request_id}: input_ids is empty")
        ids = [int(t) for t in request.input_ids]
        prompt_len = len(ids)
        toks, lps, vers = [], [], []
        res = None
        resumes = 0
        bad: set = set()
        async with self._semaphore():
            while True:
                await self._wait_unpaused()
                remaining = request.params.max_new_tokens - len(toks)
                url, res = await self._post_generate(request, ids + toks, remaining, bad)
                v = _parse_version(res["version"])
                toks += res["tokens"]
                lps += res["logprobs"]
                vers += res["token_versions"] or [v] * len(res["tokens"])
                if (res["finish"] == FINISH_ABORT and self.resume_aborted
                        and request.request_id not in self._user_aborted
                        and resumes < self.max_resumes and len(toks) < request.params.max_new_tokens):
                    resumes += 1
                    log.info("request %s aborted on %s (%s); resuming with %d partial tokens",
                             request.request_id, url, res["message"], len(toks))
                    continue
                break
        self._user_aborted.discard(request.request_id)
        self._rid_server.pop(request.request_id, None)
        finish = res["finish"]
        if finish == FINISH_ABORT and len(toks) >= request.params.max_new_tokens:
            finish = FINISH_LENGTH
        return GenerateResult(
            request_id=request.request_id, token_ids=toks, logprobs=lps, finish_reason=finish,
            weight_version=vers[-1] if vers else _parse_version(res["version"]),
            token_versions=vers if len(set(vers)) > 1 else None, stop_reason=res["matched"],
            prompt_tokens=prompt_len, cached_tokens=res["cached_tokens"], message=res["message"])

    async def resume(self, request: GenerateRequest, partial: GenerateResult) -> GenerateResult:
        """Continues an aborted result: re-submits prompt + partial tokens, concatenates."""
        if partial.finish_reason != FINISH_ABORT:
            return partial
        left = request.params.max_new_tokens - len(partial.token_ids)
        if left < 1:
            return dataclasses.replace(partial, finish_reason=FINISH_LENGTH)
        req2 = dataclasses.replace(request, input_ids=list(request.input_ids) + list(partial.token_ids),
                                   params=dataclasses.replace(request.params, max_new_tokens=left))
        rest = await self.generate(req2)
        vers = [partial.weight_version] * len(partial.token_ids)
        vers += rest.token_versions or [rest.weight_version] * len(rest.token_ids)
        return GenerateResult(
            request_id=request.request_id, token_ids=list(partial.token_ids) + rest.token_ids,
            logprobs=list(partial.logprobs) + rest.logprobs, finish_reason=rest.finish_reason,
            weight_version=rest.weight_version, token_versions=vers if len(set(vers)) > 1 else None,
            stop_reason=rest.stop_reason, prompt_tokens=len(request.input_ids),
            cached_tokens=rest.cached_tokens, message=rest.message)

    async def end_episode(self, episode_id: str) -> None:
        self._affinity.pop(episode_id, None)

    # ------------------------------------------------------------------------- control
    async def _abort_on(self, url: str, rid: Optional[str], abort_all: bool = False) -> None:
        try:
            await self.call("POST", url + "/abort_request", {"rid": rid or "", "abort_all": abort_all})
        except TransportError as e:
            log.warning("abort on %s failed: %s", url, e)

    async def abort(self, request_id: str) -> None:
        """Aborts a request; its ``generate`` returns the partial tokens with finish 'abort'."""
        self._user_aborted.add(request_id)
        urls = [self._rid_server[request_id]] if request_id in self._rid_server else self.urls
        await asyncio.gather(*(self._abort_on(u, request_id) for u in urls))

    async def abort_all(self) -> None:
        for rid in list(self._rid_server):
            self._user_aborted.add(rid)
        await asyncio.gather(*(self._abort_on(u, None, abort_all=True) for u in self.urls))

    async def health(self) -> dict[str, bool]:
        async def one(u):
            try:
                return (await self.call("GET", u + "/health")).status == 200
            except TransportError:
                return False
        oks = await asyncio.gather(*(one(u) for u in self.urls))
        return dict(zip(self.urls, oks))

    async def wait_healthy(self, timeout_s: float = 600.0, interval_s: float = 2.0) -> None:
        t0 = time.monotonic()
        while True:
            h = await self.health()
            if all(h.values()):
                return
            if time.monotonic() - t0 > timeout_s:
                raise SGLangServerError(f"servers not healthy after {timeout_s:.0f}s: "
                                        f"{[u for u, ok in h.items() if not ok]}")
            await asyncio.sleep(interval_s)

    async def model_info(self, url: Optional[str] = None) -> dict:
        url = url or self.urls[0]
        for path in ("/model_info", "/get_model_info"):   # older servers: get_model_info only
            r = await self.call("GET", url + path)
            if r.status == 200 and isinstance(r.json, dict):
                return r.json
            if r.status != 404:
                break
        raise SGLangProtocolError(f"{url}: /model_info failed (HTTP {r.status}): {r.text[:200]}")

    # ---------------------------------------------------------------------- weight sync
    async def post_ok(self, url: str, path: str, body: Any, *, optional: bool = False,
                      timeout: Optional[float] = None) -> bool:
        """POST expecting 200; returns False on 404 when ``optional`` (older server)."""
        r = await self.call("POST", url + path, body, timeout=timeout)
        if r.status == 404 and optional:
            return False
        if r.status != 200 or (isinstance(r.json, dict) and r.json.get("success") is False):
            raise SGLangServerError(f"{url}{path} failed (HTTP {r.status}): {r.text[:500]}")
        return True

    def set_paused(self, paused: bool) -> None:
        """While a sync runs new ``generate`` calls wait (requests it aborts resume after)."""
        self._unpaused_flag = not paused

    def _next_version(self, weight_version: Optional[int]) -> str:
        return str(self._version + 1 if weight_version is None else int(weight_version))

    async def update_weights_from_disk(self, model_path: str, weight_version: Optional[int] = None,
                                       pause_mode: str = "abort") -> WeightSyncReport:
        """Runs the sync protocol with ``update_weights_from_disk`` of ``model_path`` on every
        server; requests aborted by the pause resume after."""
        if pause_mode not in ("abort", "retract", "in_place"):
            raise ValueError(f"pause_mode {pause_mode!r}: use 'abort', 'retract' or 'in_place'")
        version = self._next_version(weight_version)
        rep = await self.syncer.update_from_disk(model_path, version, pause_mode)
        self._version, self.last_sync = int(version), rep
        return rep

    async def sync_model(self, model, out_dir: Optional[str] = None, weight_version: Optional[int] = None,
                         pause_mode: str = "abort", method: Optional[str] = None) -> WeightSyncReport:
        """Sends an nnx model's weights to every server by ``method`` (default the client's
        ``sync_method``): the matrices cast to ``sync_dtype`` on device, then a disk export to
        ``out_dir`` (default: a memory-backed dir, ``weight_sync.default_sync_dir``), or
        broadcasts / serialized tensors, falling back to disk when the servers lack them."""
        if pause_mode not in ("abort", "retract", "in_place"):
            raise ValueError(f"pause_mode {pause_mode!r}: use 'abort', 'retract' or 'in_place'")
        version = self._next_version(weight_version)
        rep = await self.syncer.sync_model(model, out_dir, version, pause_mode, method)
        self._version, self.last_sync = int(version), rep
        return rep

    def close(self) -> None:
        self.syncer.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
