"""SGLang's ``/generate`` wire format as the engine server speaks it (stdlib only): request
validation (every error a ``BadRequest`` naming the field), sampling parameters, finish reasons,
and the SSE stream wrapper."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from harness_jax.sampling.types import FINISH_LENGTH, FINISH_STOP, GenerateResult, SamplingParams

# every key SGLang 0.5.23's contract accepts in sampling_params; anything else is a 400
SGLANG_SAMPLING_KEYS = frozenset({
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
    "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "no_stop_trim", "stream_interval", "logit_bias",
    "sampling_seed", "custom_params", "beam_width", "watermark", "choice"})
# accepted keys this engine cannot honour unless they carry their neutral value
_NEUTRAL = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
            "min_new_tokens": 0, "n": 1, "stop_regex": None, "json_schema": None, "regex": None,
            "ebnf": None, "structural_tag": None, "logit_bias": None, "custom_params": None,
            "beam_width": None, "watermark": None, "choice": None}


class BadRequest(Exception):
    """A 400: ``field`` names what is wrong, ``message`` says the fix."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def require(cond: bool, field: str, message: str) -> None:
    if not cond:
        raise BadRequest(field, message)


def int_list(x: Any, field: str) -> list[int]:
    require(isinstance(x, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in x),
            field, "must be a list of ints")
    return list(x)


def parse_sampling_params(sp: Any, field: str = "sampling_params") -> tuple[SamplingParams, dict]:
    """SGLang ``sampling_params`` dict -> (SamplingParams, extras). Raises BadRequest."""
    if sp is None:
        sp = {}
    require(isinstance(sp, dict), field, "must be an object")
    unknown = sorted(set(sp) - SGLANG_SAMPLING_KEYS)
    require(not unknown, f"{field}.{unknown[0] if unknown else ''}",
            f"unknown sampling parameter(s) {unknown}; SGLang rejects them (use max_new_tokens, not max_tokens)")
    for k, neutral in _NEUTRAL.items():
        v = sp.get(k, neutral)
        require(v is None or v == neutral or (k == "n" and v == 1) or (neutral is None and not v),
                f"{field}.{k}", f"value {v!r} is not supported by harness_jax serve (only {neutral!r})")
    stop = sp.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    require(isinstance(stop, (list, tuple)) and all(isinstance(s, str) and s for s in stop),
            f"{field}.stop", "must be a non-empty string or a list of them")
    stop_ids = sp.get("stop_token_ids") or []
    stop_ids = int_list(stop_ids, f"{field}.stop_token_ids")
    top_k = sp.get("top_k", -1)
    require(isinstance(top_k, int), f"{field}.top_k", "must be an int")
    if top_k >= 1 << 30 or top_k == 0:
        top_k = -1
    seed = sp.get("sampling_seed")
    require(seed is None or isinstance(seed, int), f"{field}.sampling_seed", "must be an int")
    max_new = sp.get("max_new_tokens", 128)
    require(isinstance(max_new, int) and max_new >= 1, f"{field}.max_new_tokens", "must be an int >= 1")
    for k in ("temperature", "top_p", "min_p"):
        require(isinstance(sp.get(k, 0.0), (int, float)) and not isinstance(sp.get(k), bool),
                f"{field}.{k}", "must be a number")
    try:
        params = SamplingParams(
            temperature=float(sp.get("temperature", 1.0)), top_p=float(sp.get("top_p", 1.0)),
            top_k=int(top_k), min_p=float(sp.get("min_p", 0.0)), max_new_tokens=int(max_new),
            stop_token_ids=tuple(stop_ids), stop=tuple(stop), seed=seed,
            ignore_eos=bool(sp.get("ignore_eos", False)))
    except ValueError as e:
        msg = str(e)
        name = msg.split(".")[1].split(" ")[0] if msg.startswith("SamplingParams.") else "?"
        raise BadRequest(f"{field}.{name}", msg)
    extras = {"skip_special_tokens": bool(sp.get("skip_special_tokens", True)),
              "no_stop_trim": bool(sp.get("no_stop_trim", False))}
    return params, extras


def sglang_finish_reason(res: GenerateResult) -> dict:
    if res.finish_reason == FINISH_STOP:
        return {"type": "stop", "matched": res.stop_reason}
    if res.finish_reason == FINISH_LENGTH:
        return {"type": "length", "length": len(res.token_ids)}
    return {"type": "abort", "message": res.message or "aborted", "status_code": None, "err_type": None}



class SSEStream:
    """SSE output objects whose ``close`` also closes the engine stream, which aborts the request
    if it still runs (the client went away, or the handler stopped early), even before the
    first chunk was produced."""

    def __init__(self, outputs: Iterator[dict], close_engine_stream: Callable[[], None]):
        self._outputs, self._close = outputs, close_engine_stream

    def __iter__(self):
        return self._outputs

    def close(self) -> None:
        self._outputs.close()
        self._close()

