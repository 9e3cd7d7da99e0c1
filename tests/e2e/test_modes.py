"""Loop modes beyond the synchronous colocated default, on the real stack (no test doubles):

* asynchronous rollouts with bounded staleness (admission by batches in flight), with the two
  hook points (group post-processor, harness selector) exercised;
* disaggregated rollouts against ``launch/serve.py`` in a second process, with an HF-export
  weight sync after every learner step (``rollout.sync_dtype=float32``: the default bf16 export
  would round them): the server ends up serving exactly the learner's weights.
"""
import os
import socket
import subprocess
import sys

import jax
import pytest

from harness_jax.sampling.http_util import wait_healthy
from tests.e2e import tiny_e2e_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _base(**kw):
    c = tiny_e2e_config.get_config()
    c.sft.enabled = False
    c.eval.at_start = False
    c.eval.num_tasks = 1
    c.ckpt.every_steps = 0
    c.ckpt.export_hf = False
    for k, v in kw.items():
        section, field = k.split("__")
        c[section][field] = v
    return c


def _trainer(c, work, extensions=()):
    from harness_jax.train import context, loop, spec

    ctx = context.build(spec.resolve(c, num_devices=1), work, devices=jax.devices()[:1])
    return loop.Trainer(ctx, extensions), ctx


class CountingPostProcessor:
    """A group post-processor that records what it sees and keeps the group (the Harness-S
    rescue hook point)."""

    def __init__(self):
        self.seen = []
        self.on_group = None

    async def __call__(self, group, rollout, step):
        self.seen.append((step, group.group_id, len(group.episodes)))
        if self.on_group is not None:
            self.on_group(step)
        return group


@pytest.mark.slow
def test_async_mode_honours_staleness_bound(tmp_path):
    """max_staleness=1: batch 1 is admitted while the learner trains on batch 0. The test holds the
    weight sync after step 0 until every group of batch 1 is collected (a wrapper around the run
    context's ``weight_sync``), so batch 1 is certainly generated with version-0 weights and
    trained at version 1: the lag-1 case is forced, not left to thread timing."""
    import threading

    from harness_jax.train.extensions import Extension

    c = _base(rl__async_mode=True, rl__max_staleness=1)
    c.num_steps = 3
    pp = CountingPostProcessor()
    selected = []

    class Hooks(Extension):
        """The two hook points through the extension interface (what Harness-S plugs into)."""

        def post_processors(self, run):
            return [pp]

        def harness_selector(self, run):
            def selector(task, step):
                selected.append(step)
                return run.harness
            return selector

    trainer, ctx = _trainer(c, str(tmp_path), [Hooks()])
    batch1_collected = threading.Event()
    real_sync = ctx.weight_sync

    def gated_sync(model, version):
        if version == 1:
            assert batch1_collected.wait(600), "batch 1 was never collected"
        real_sync(model, version)

    def on_group(step):
        if step == 1 and sum(s == 1 for s, _, _ in pp.seen) == c.rl.tasks_per_step:
            batch1_collected.set()

    pp.on_group = on_group
    ctx.weight_sync = gated_sync
    try:
        summary = trainer.run()
    finally:
        trainer.close()
        ctx.close()
    assert summary["step"] == 3 and summary["policy_version"] == 3
    hists = [{int(k): v for k, v in h.items()} for h in trainer.history["staleness"]]
    n = c.rl.tasks_per_step * c.rl.group_size
    assert hists[0] == {0: n}                      # batch 0: collected and trained at version 0
    assert hists[1] == {1: n}                      # batch 1: collected at version 0, trained at 1
    assert all(max(h) <= 1 for h in hists)          # never older than max_staleness
    assert trainer.history["admission_lag"][:2] == [0, 1]
    assert all(b <= 1 for b in trainer.history["admission_lag"])
    assert len(pp.seen) == 3 * c.rl.tasks_per_step and sorted(set(selected)) == [0, 1, 2]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_disaggregated_against_serve_with_weight_sync_every_step(tmp_path):
    from harness_jax.models import qwen3_5
    from harness_jax.sampling import JaxEngine
    from harness_jax.sampling.sglang_client import SGLangClient
    from harness_jax.sampling.types import GenerateRequest, SamplingParams
    from harness_jax.rl import policy
    from harness_jax.train import spec, task_tokenizer

    work = str(tmp_path / "run")
    init = str(tmp_path / "init_hf")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    c = _base(rollout__mode="disaggregated", rollout__server_urls=(url,),
              rollout__sync_every=1, rollout__sync_dtype="float32")   # the fp32 server gets the learner's exact weights
    c.num_steps = 2
    # an untrained policy solves nothing, so GRPO's advantages (and updates) are all zero here;
    # a short SFT warm start (synced to the server as well) guarantees the weights change
    c.sft.enabled = True
    c.sft.lr = 1e-2
    run = spec.resolve(c, num_devices=1)
    tok = task_tokenizer.load_or_train(run, os.path.join(work, "tokenizer"))
    mesh = policy.make_mesh(run.mesh, jax.devices()[:1])
    qwen3_5.save_hf(policy.build_model(run.model, mesh, policy.mesh_rules(run.mesh)), init)
    tok.save_pretrained(init)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    env.pop("XLA_FLAGS", None)
    server = subprocess.Popen([sys.executable, "launch/serve.py", f"--model_path={init}", f"--port={port}",
                               "--host=127.0.0.1", "--max_slots=4", f"--max_len={c.rollout.max_len}",
                               "--dtype=float32"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        wait_healthy(url, 300, server)
        prompt = tok.encode("<|im_start|>user\nHow many rows are in the table?<|im_end|>\n<|im_start|>assistant\n")
        greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
        client = SGLangClient([url])
        before = client.generate_sync(GenerateRequest(prompt, greedy, "probe-before"))
        trainer, ctx = _trainer(c, work)
        try:
            summary = trainer.run()
            after = client.generate_sync(GenerateRequest(prompt, greedy, "probe-after"))
            local = JaxEngine(ctx.learner.model(), max_slots=1, max_len=256)
            mine = local.generate_sync(GenerateRequest(prompt, greedy, "probe-local"))
            local.close()
            n_syncs = ctx.engine.weight_version
        finally:
            trainer.close()
            ctx.close()
        client.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert summary["step"] == 2 and summary["sft"]["steps"] == 2
    assert n_syncs == 2 and after.weight_version == 2     # one sync per learner step
    # the server generates with the learner's new weights, not the initial ones
    assert after.token_ids == mine.token_ids
    assert after.logprobs == pytest.approx(mine.logprobs, abs=1e-3)
    assert after.logprobs != pytest.approx(before.logprobs, abs=1e-3)
