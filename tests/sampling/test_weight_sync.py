"""SGLang weight sync without fp32 disk round trips: the bf16 export written by several
processes, and the distributed (torch gloo broadcasts) and tensor transports against the
SGLang-compatible EngineServer over real HTTP, with feature probing falling back to disk."""
import asyncio
import json
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx

from harness_jax.models import qwen3_5
from harness_jax.sampling import GenerateRequest, JaxEngine, SamplingParams, SGLangClient
from harness_jax.sampling import weight_sync
from harness_jax.sampling.server import EngineServer
from tests.sampling.conftest import ENGINE_KW

GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)


def _noisy(dirname, seed):
    m = qwen3_5.load_hf(dirname, dtype="float32")
    nnx.update(m, jax.tree_util.tree_map(
        lambda a: a + 0.05 * jax.random.normal(jax.random.key(seed), a.shape, a.dtype), nnx.state(m)))
    return m


def _bf16_rounded(a):
    a = np.asarray(a)
    return a.astype(ml_dtypes.bfloat16).astype(np.float32) if a.ndim >= 2 else a


def test_bf16_export_written_by_two_processes_loads_back(tiny_hf_dense_dir, tmp_path):
    """Each process writes its share of the tensors (by size), process 0 the index and config:
    together a checkpoint transformers' layout loads, matrices bf16 (half the fp32 bytes), 1-D
    parameters fp32 (A_log keeps its precision)."""
    m = _noisy(tiny_hf_dense_dir, 0)
    out = str(tmp_path / "v1")
    reps = [weight_sync.export_hf(m, out, process_index=p, process_count=2) for p in (1, 0)]
    assert all(r.files for r in reps) and not set(reps[0].files) & set(reps[1].files)
    index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
    assert sorted(set(index["weight_map"].values())) == sorted(reps[0].files + reps[1].files)
    fp32_bytes = sum(a.nbytes for a in jax.tree_util.tree_leaves(nnx.state(m)))
    assert sum(r.bytes for r in reps) < 0.55 * fp32_bytes
    back = qwen3_5.load_hf(out, dtype="float32")
    for a, b in zip(jax.tree_util.tree_leaves(nnx.state(m)), jax.tree_util.tree_leaves(nnx.state(back))):
        np.testing.assert_array_equal(_bf16_rounded(a), np.asarray(b))
    assert weight_sync.default_sync_dir("x").startswith("/dev/shm/")


@pytest.fixture(scope="module")
def sync_server(tiny_hf_dense_dir, tokenizer):
    """A server over its own engine (the shared programs of the dense engine: no compile) that
    knows its base model, so tensor and distributed updates can patch it."""
    base = qwen3_5.load_hf(tiny_hf_dense_dir, dtype="float32")
    eng = JaxEngine(qwen3_5.load_hf(tiny_hf_dense_dir, dtype="float32"), tokenizer=tokenizer, **ENGINE_KW)
    srv = EngineServer(eng, tokenizer=tokenizer, model_path=tiny_hf_dense_dir, model=base)
    url = srv.start()
    yield srv, url, eng
    srv.shutdown()
    eng.close()


@pytest.mark.parametrize("method", ["distributed", "tensor"])
def test_distributed_and_tensor_sync_install_the_bf16_weights(sync_server, tiny_hf_dense_dir, method):
    """Paused around the update, with a begin/end session: the server ends up serving exactly
    the bf16-rounded policy (the version verified), no export directory written."""
    srv, url, eng = sync_server
    client = SGLangClient(url, flush_interval_s=0.05, sync_method=method, sync_bucket_bytes=64 << 10)
    try:
        policy = _noisy(tiny_hf_dense_dir, 1 if method == "tensor" else 2)
        v = client.weight_version + 1
        rep = asyncio.run(client.sync_model(policy, weight_version=v))
        assert rep.method == method and not rep.fallback and rep.export_s == 0
        t = rep.per_server[url]
        assert t["begin_end"] and t["paused"] and t["update_s"] > 0
        for a, b in zip(jax.tree_util.tree_leaves(nnx.state(policy)), jax.tree_util.tree_leaves(nnx.state(srv.weights.base_model))):
            np.testing.assert_array_equal(_bf16_rounded(a), np.asarray(b))
        res = asyncio.run(client.generate(GenerateRequest([5, 6, 7], GREEDY, f"after-{method}")))
        ref = JaxEngine(srv.weights.base_model, **ENGINE_KW)
        try:
            assert res.token_ids == ref.generate_batch([[5, 6, 7]], GREEDY)[0].token_ids
        finally:
            ref.close()
        assert res.weight_version == v == eng.weight_version
    finally:
        client.close()


def test_sync_falls_back_to_disk_on_an_older_server(tiny_hf_dense_dir, tmp_path, tokenizer):
    """A server without the group / tensor / session endpoints (404, like SGLang before them):
    the sync uses the bf16 disk export instead, says so, and the version check still holds."""
    old = ("/init_weights_update_group", "/update_weights_from_distributed", "/update_weights_from_tensor",
           "/begin_weight_update", "/end_weight_update")
    eng = JaxEngine(qwen3_5.load_hf(tiny_hf_dense_dir, dtype="float32"), **ENGINE_KW)
    srv = EngineServer(eng, tokenizer=tokenizer, model=qwen3_5.load_hf(tiny_hf_dense_dir, dtype="float32"),
                       disabled_endpoints=old)
    url = srv.start()
    try:
        policy = _noisy(tiny_hf_dense_dir, 3)
        for k, method in enumerate(("distributed", "tensor")):
            client = SGLangClient(url, flush_interval_s=0.05, sync_method=method, weight_version=10 * k)
            try:
                rep = asyncio.run(client.sync_model(policy, str(tmp_path / f"{method}")))
                assert rep.method == "disk" and "404" in rep.fallback and rep.export_bytes > 0
                assert not rep.per_server[url]["begin_end"] and srv.weight_version == str(10 * k + 1)
                assert os.path.exists(tmp_path / method / "model.safetensors.index.json")
            finally:
                client.close()
        q = eng.served_state["model"]["layers"][0]["linear_attn"]["in_proj_qkv"]["weight"][...]
        want = _bf16_rounded(nnx.state(policy)["model"]["layers"][0]["linear_attn"]["in_proj_qkv"]["weight"][...])
        np.testing.assert_array_equal(np.asarray(q), want.T if eng.weight_layout == "in_out" else want)
    finally:
        srv.shutdown()
        eng.close()
