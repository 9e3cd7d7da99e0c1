"""SGLangClient against the SGLang-compatible EngineServer over real HTTP (localhost)."""
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jax
import pytest

from harness_jax.sampling import GenerateRequest, SamplingParams, SGLangClient
from harness_jax.sampling.http_util import http_json
from harness_jax.sampling.server import EngineServer
from harness_jax.sampling.sglang_client import (SGLangProtocolError, SGLangRequestError,
                                                SGLangServerError, parse_generate_response)

from .doubles import ScriptedEngine

REPO = Path(__file__).resolve().parents[2]
GREEDY = SamplingParams(max_new_tokens=10, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def server(dense_engine, tokenizer, tiny_hf_dense_dir):
    srv = EngineServer(dense_engine, tokenizer=tokenizer, model_path=tiny_hf_dense_dir)
    url = srv.start()
    yield srv, url
    srv.shutdown()


@pytest.fixture(scope="module")
def client(server):
    c = SGLangClient(server[1], max_retries=1, backoff_s=0.05, flush_interval_s=0.05)
    yield c
    c.close()


def _run(coro):
    return asyncio.run(coro)


def test_generate_over_http_matches_engine(server, client, dense_engine):
    srv, url = server
    ref = dense_engine.generate_batch([[5, 6, 7]], GREEDY)[0]
    res = _run(client.generate(GenerateRequest([5, 6, 7], GREEDY, "h1", episode_id="e1")))
    assert res.token_ids == ref.token_ids and res.finish_reason == "length"
    assert res.logprobs == pytest.approx(ref.logprobs, abs=1e-6)
    assert res.weight_version == dense_engine.weight_version
    # raw batch request: list of input_ids, SGLang response shapes
    r = http_json("POST", url + "/generate", {"input_ids": [[5, 6, 7], [9]], "return_logprob": True,
                                              "sampling_params": {"max_new_tokens": 3, "temperature": 0,
                                                                  "ignore_eos": True}})
    assert r.status == 200 and isinstance(r.json, list) and len(r.json) == 2
    m = r.json[0]["meta_info"]
    assert r.json[0]["output_ids"] == ref.token_ids[:3]
    assert [x[1] for x in m["output_token_logprobs"]] == ref.token_ids[:3]
    assert m["finish_reason"] == {"type": "length", "length": 3} and m["prompt_tokens"] == 3
    # text input + SSE streaming shape (http_json keeps the last, cumulative chunk)
    r = http_json("POST", url + "/generate", {"text": "ab", "stream": True,
                                              "sampling_params": {"max_new_tokens": 2, "temperature": 0}})
    assert r.status == 200 and r.text.rstrip().endswith("data: [DONE]") and len(r.json["output_ids"]) <= 2
    info = _run(client.model_info())
    assert info["weight_version"] == str(dense_engine.weight_version) and info["is_generation"]


def _sse(url, body, timeout=120.0):
    """Opens a streaming ``/generate`` and yields each ``data:`` payload as it arrives
    (``"[DONE]"`` as a string); the caller may stop early, which closes the connection."""
    import http.client
    from urllib.parse import urlparse
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("POST", "/generate", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
        while True:
            line = resp.fp.readline()
            if not line:
                return
            line = line.decode().strip()
            if line.startswith("data:"):
                data = line[5:].strip()
                yield data if data == "[DONE]" else json.loads(data)
    finally:
        conn.close()


def test_streaming_generate_sends_chunks_as_tokens_come(server, dense_engine):
    """SSE over real HTTP: several cumulative chunks (one per engine step of decode_steps=4
    tokens), each a prefix of the next, the last one equal to the unstreamed result; the
    incremental mode sends deltas; ``stream_interval`` spaces chunks; a batch is a 400; a
    client that hangs up after the first chunk aborts its request."""
    srv, url = server
    g = SamplingParams(max_new_tokens=18, temperature=0.0, ignore_eos=True)
    ref = dense_engine.generate_batch([[5, 6, 7]], g)[0]
    body = {"input_ids": [5, 6, 7], "return_logprob": True, "stream": True,
            "sampling_params": {"max_new_tokens": 18, "temperature": 0, "ignore_eos": True}}
    chunks = list(_sse(url, body))
    assert chunks[-1] == "[DONE]"
    chunks = chunks[:-1]
    assert len(chunks) >= 18 // 4
    for a, b in zip(chunks, chunks[1:]):
        assert a["meta_info"]["finish_reason"] is None
        assert b["output_ids"][:len(a["output_ids"])] == a["output_ids"] and len(b["output_ids"]) > len(a["output_ids"])
    last = chunks[-1]
    assert last["output_ids"] == ref.token_ids
    assert last["meta_info"]["finish_reason"] == {"type": "length", "length": 18}
    assert [x[0] for x in last["meta_info"]["output_token_logprobs"]] == pytest.approx(ref.logprobs, abs=1e-6)
    # stream_interval: at least 7 new tokens between chunks (the last one may be shorter)
    spaced = [c for c in _sse(url, dict(body, sampling_params=dict(body["sampling_params"], stream_interval=7)))
              if c != "[DONE]"]
    sizes = [len(c["output_ids"]) for c in spaced]
    assert sizes[-1] == 18 and all(b - a >= 7 for a, b in zip([0] + sizes[:-2], sizes[:-1]))
    # incremental (delta) chunks from a server started with incremental_streaming_output
    inc = EngineServer(dense_engine, tokenizer=srv.tokenizer, incremental_streaming_output=True)
    inc_url = inc.start()
    try:
        deltas = [c for c in _sse(inc_url, body) if c != "[DONE]"]
    finally:
        inc.shutdown()
    assert len(deltas) >= 18 // 4
    assert [t for c in deltas for t in c["output_ids"]] == ref.token_ids
    assert [x[1] for c in deltas for x in c["meta_info"]["output_token_logprobs"]] == ref.token_ids
    assert "".join(c["text"] for c in deltas) == srv.tokenizer.decode(ref.token_ids)
    # one input per streaming request
    r = http_json("POST", url + "/generate", dict(body, input_ids=[[5, 6], [7]]))
    assert r.status == 400 and r.json["error"]["field"] == "stream"
    r = http_json("POST", url + "/generate", dict(body, input_ids=[5, 10**7]))   # checked before any chunk
    assert r.status == 400 and r.json["error"]["field"] == "input_ids"
    # hang up after the first chunk: the request is aborted, not run to its 400 tokens
    before = dense_engine.stats["tokens_generated"]
    long = dict(body, sampling_params=dict(body["sampling_params"], max_new_tokens=400))
    first = next(iter(_sse(url, long)))
    assert 0 < len(first["output_ids"]) < 400 and first["meta_info"]["finish_reason"] is None
    deadline = time.monotonic() + 60
    while not dense_engine.is_idle() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dense_engine.is_idle() and dense_engine.stats["tokens_generated"] - before < 400


def test_incremental_stream_text_never_splits_a_character(server):
    """Delta mode cuts text from the cumulative decode: a character whose UTF-8 bytes span
    several tokens (and engine steps) is sent once, whole (scripted engine: see doubles)."""
    tok = server[0].tokenizer
    ids = tok.encode("Ω≈ç√∫ 𓀀!", add_special_tokens=False)
    srv = EngineServer(ScriptedEngine(ids, step=1, finish="length"), tokenizer=tok,
                       incremental_streaming_output=True)
    chunks = list(srv.generate_stream({"input_ids": [1, 2], "stream": True,
                                       "return_logprob": True}))
    texts = [c["text"] for c in chunks]
    assert "".join(texts) == "Ω≈ç√∫ 𓀀!" and not any("\ufffd" in t for t in texts)
    assert "" in texts     # the steps that ended inside a character sent no text yet
    assert [t for c in chunks for t in c["output_ids"]] == ids


@pytest.mark.parametrize("body,field", [
    ({"input_ids": [1, 2], "sampling_params": {"max_tokens": 4}}, "sampling_params.max_tokens"),
    ({"input_ids": [1, 2], "sampling_params": {"temperature": -1}}, "sampling_params.temperature"),
    ({"input_ids": [1, 2], "sampling_params": {"frequency_penalty": 0.5}}, "sampling_params.frequency_penalty"),
    ({"input_ids": "abc"}, "input_ids"),
    ({"input_ids": [1, 10**7]}, "input_ids"),
    ({"sampling_params": {}}, "input_ids"),
    ({"input_ids": [1], "logprob_start_len": 0}, "logprob_start_len"),
])
def test_bad_requests_get_400_with_field(server, body, field):
    url = server[1]
    r = http_json("POST", url + "/generate", body)
    assert r.status == 400 and r.json["error"]["field"] == field, r.text
    assert http_json("GET", url + "/health").status == 200


def test_invalid_json_and_client_rejection(server, client):
    url = server[1]
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]))
    conn.request("POST", "/generate", body=b"{not json", headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 400 and json.loads(resp.read())["error"]["field"] == "body"
    with pytest.raises(SGLangRequestError, match="outside"):
        _run(client.generate(GenerateRequest([10**7], GREEDY, "bad")))


def _wait_tokens(engine, n, timeout=60.0):
    start = engine.stats["tokens_generated"]
    t0 = time.monotonic()
    while engine.stats["tokens_generated"] - start < n:
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("engine made no progress")
        time.sleep(0.001)


def test_abort_mid_generation_and_resume(server, client, dense_engine):
    long = SamplingParams(max_new_tokens=300, temperature=0.0, ignore_eos=True)
    ref = dense_engine.generate_batch([[11, 12]], long)[0]
    req = GenerateRequest([11, 12], long, "to-abort")

    async def go():
        task = asyncio.create_task(client.generate(req))
        await asyncio.to_thread(_wait_tokens, dense_engine, 8)
        await client.abort("to-abort")
        partial = await task
        full = await client.resume(req, partial)
        return partial, full

    partial, full = _run(go())
    assert partial.finish_reason == "abort" and 0 < len(partial.token_ids) < 300
    assert partial.token_ids == ref.token_ids[:len(partial.token_ids)]
    assert full.token_ids == ref.token_ids and full.finish_reason == "length"
    assert full.logprobs == pytest.approx(ref.logprobs, abs=1e-4)


def test_weight_sync_switches_outputs(server, client, dense_engine, dense_model, tiny_hf_dense_dir, tmp_path):
    from flax import nnx
    from harness_jax.models import qwen3_5
    before = _run(client.generate(GenerateRequest([5, 6, 7], GREEDY, "w0")))
    noisy = qwen3_5.load_hf(tiny_hf_dense_dir, dtype="float32")
    st = nnx.state(noisy)
    nnx.update(noisy, jax.tree_util.tree_map(
        lambda a: a + 0.05 * jax.random.normal(jax.random.key(1), a.shape, a.dtype), st))
    v0 = client.weight_version
    long = SamplingParams(max_new_tokens=200, temperature=0.0, ignore_eos=True)

    from harness_jax.sampling import weight_sync
    export = weight_sync.export_hf(noisy, str(tmp_path / "export"))   # bf16, before the request starts

    async def go():
        inflight = asyncio.create_task(client.generate(GenerateRequest([11, 12], long, "inflight")))
        await asyncio.to_thread(_wait_tokens, dense_engine, 8)
        rep = await client.update_weights_from_disk(export.out_dir, weight_version=v0 + 1)
        return rep, await inflight

    rep, inflight = _run(go())
    assert rep.weight_version == str(v0 + 1) and rep.method == "disk" and export.bytes > 0
    # the in-flight request was aborted by the pause and resumed on the new weights
    assert inflight.finish_reason == "length" and len(inflight.token_ids) == 200
    assert inflight.token_versions is not None and inflight.token_versions[0] == v0
    assert inflight.token_versions[-1] == v0 + 1
    after = _run(client.generate(GenerateRequest([5, 6, 7], GREEDY, "w1")))
    assert after.weight_version == v0 + 1 and after.token_ids != before.token_ids
    # sync back to the original checkpoint (plain disk path)
    _run(client.update_weights_from_disk(tiny_hf_dense_dir, weight_version=v0 + 2))
    back = _run(client.generate(GenerateRequest([5, 6, 7], GREEDY, "w2")))
    assert back.token_ids == before.token_ids and back.weight_version == v0 + 2
    bad = http_json("POST", server[1] + "/update_weights_from_disk", {"model_path": str(tmp_path / "nope")})
    assert bad.status == 400 and bad.json["success"] is False
    assert http_json("POST", server[1] + "/flush_cache").status == 200


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.slow
def test_server_killed_mid_request_gives_clear_error(tiny_hf_dense_dir):
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    proc = subprocess.Popen([sys.executable, "-m", "launch.serve", f"--model_path={tiny_hf_dense_dir}",
                             f"--port={port}", "--host=127.0.0.1", "--dtype=float32", "--max_len=64",
                             "--max_slots=2"], cwd=str(REPO), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    c = SGLangClient(url, max_retries=2, backoff_s=0.05)
    try:
        _run(c.wait_healthy(timeout_s=120, interval_s=0.2))

        async def go():
            task = asyncio.create_task(c.generate(GenerateRequest([1, 2, 3], GREEDY, "doomed")))
            await asyncio.sleep(0.3)          # the server is compiling / generating
            proc.kill()
            return await task

        with pytest.raises(SGLangServerError, match="failed after 3 attempts"):
            _run(go())
        assert _run(c.health()) == {url: False}
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        c.close()


def test_malformed_responses_give_clear_errors():
    good = {"output_ids": [4], "meta_info": {"finish_reason": {"type": "length", "length": 1},
                                             "output_token_logprobs": [[-0.5, 4, None]], "weight_version": "3"}}
    p = parse_generate_response(good)
    assert p["tokens"] == [4] and p["logprobs"] == [-0.5] and p["version"] == "3"
    spans = {"output_ids": [4, 5, 6], "meta_info": {
        "finish_reason": {"type": "length", "length": 3}, "weight_version": "8",
        "output_token_logprobs": [[-0.5, 4, None], [-0.1, 5, None], [-0.2, 6, None]],
        "weight_versions": [{"version": "7", "start": 0, "end": 1}, {"version": "8", "start": 1, "end": 3}]}}
    assert parse_generate_response(spans)["token_versions"] == [7, 8, 8]
    spans["meta_info"]["weight_versions"] = [{"version": "7", "start": 0, "end": 1}]
    with pytest.raises(SGLangProtocolError, match="does not cover"):
        parse_generate_response(spans)
    cases = [("<html>oops</html>", "not a JSON object"), ({"text": "x"}, "meta_info"),
             ({"meta_info": {"finish_reason": {"type": "stop"}}}, "output_token_logprobs"),
             ({"meta_info": {"output_token_logprobs": [["a", 1]], "finish_reason": {"type": "stop"}}},
              r"output_token_logprobs\[0\]"),
             ({"meta_info": {"output_token_logprobs": [], "finish_reason": "stop"}}, "finish_reason"),
             ({"output_ids": [5], "meta_info": {"output_token_logprobs": [[0.0, 4, None]],
                                                "finish_reason": {"type": "stop"}}}, "disagree")]
    for body, msg in cases:
        with pytest.raises(SGLangProtocolError, match=msg):
            parse_generate_response(body)


def test_malformed_body_over_http():
    """A scripted raw HTTP server (test double: a real server cannot be made to send garbage)."""
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            data = b"<html>502 proxy</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    c = SGLangClient(f"http://127.0.0.1:{srv.server_address[1]}", max_retries=0)
    try:
        with pytest.raises(SGLangProtocolError, match="not a JSON object"):
            _run(c.generate(GenerateRequest([1], GREEDY, "m")))
    finally:
        srv.shutdown()
        srv.server_close()
        c.close()


def test_sampling_params_are_all_explicit():
    from harness_jax.sampling.sglang_client import sampling_params_body
    from harness_jax.sampling.server import SGLANG_SAMPLING_KEYS
    sp = sampling_params_body(SamplingParams(max_new_tokens=5, seed=3))
    assert set(sp) <= SGLANG_SAMPLING_KEYS and "max_tokens" not in sp
    for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_new_tokens", "sampling_seed"):
        assert k in sp
    assert sp["top_k"] == -1 and sp["no_stop_trim"] is True


def test_episode_affinity_and_failover(server, dense_engine, tokenizer):
    """Two servers (sharing one engine): episodes stick to the server they started on; when that
    server goes away the request fails over to the other one."""
    second = EngineServer(dense_engine, tokenizer=tokenizer)
    url2 = second.start()
    c = SGLangClient([server[1], url2], max_retries=2, backoff_s=0.01)
    try:
        async def two_episodes():
            return await asyncio.gather(
                c.generate(GenerateRequest([5, 6], GREEDY, "a1", episode_id="A")),
                c.generate(GenerateRequest([7, 8], GREEDY, "b1", episode_id="B")))
        ra, rb = _run(two_episodes())
        home_a, home_b = c.server_of("A"), c.server_of("B")
        assert home_a == server[1] and home_b == url2     # least-loaded spreads them
        _run(c.generate(GenerateRequest([5, 6] + ra.token_ids + [9], GREEDY, "a2", episode_id="A")))
        assert c.server_of("A") == home_a
        second.shutdown()
        res = _run(c.generate(GenerateRequest([7, 8] + rb.token_ids + [9], GREEDY, "b2", episode_id="B")))
        assert len(res.token_ids) == GREEDY.max_new_tokens
        assert _run(c.health()) == {server[1]: True, url2: False}
        _run(c.end_episode("A"))
        assert c.server_of("A") is None
    finally:
        second.shutdown()
        c.close()


def test_in_place_update_reports_weight_version_spans(server, client, dense_engine, tiny_hf_dense_dir):
    """pause(in_place) -> update -> continue: the running request keeps its cache and finishes on
    the new weights; meta_info.weight_versions spans give every token's version."""
    url = server[1]
    v = client.weight_version
    long = SamplingParams(max_new_tokens=200, temperature=0.0, ignore_eos=True)

    async def go():
        task = asyncio.create_task(client.generate(GenerateRequest([11, 12], long, "spans")))
        await asyncio.to_thread(_wait_tokens, dense_engine, 8)
        assert http_json("POST", url + "/pause_generation", {"mode": "in_place"}).status == 200
        assert http_json("POST", url + "/flush_cache").status == 400          # busy: in place
        r = http_json("POST", url + "/update_weights_from_disk",
                      {"model_path": tiny_hf_dense_dir, "weight_version": str(v + 10)}, timeout=120)
        assert r.status == 200 and r.json["success"]
        assert http_json("POST", url + "/continue_generation", {}).status == 200
        return await task

    res = _run(go())
    assert len(res.token_ids) == 200 and res.token_versions is not None
    assert res.token_versions[0] == v and res.token_versions[-1] == v + 10
    assert res.token_versions == sorted(res.token_versions)
