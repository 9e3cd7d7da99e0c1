"""Loop modes beyond the synchronous colocated default, on the real stack (no test doubles):

* asynchronous rollouts with bounded staleness (admission by batches in flight), with the two
  hook points (group post-processor, harness selector) exercised;
* disaggregated rollouts against ``launch/serve.py`` in a second process, with an HF-export
  weight sync after every learner step: the server ends up serving exactly the learner's weights.
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


class CountingPostProcessor:
    """A group post-processor that records what it sees and keeps the group (the Harness-S
    rescue hook point)."""

    def __init__(self):
        self.seen = []

    async def __call__(self, group, rollout, step):
        self.seen.append((step, group.group_id, len(group.episodes)))
        return group


def test_async_mode_honours_staleness_bound(tmp_path):
    from harness_jax.train import loop

    c = _base(rl__async_mode=True, rl__max_staleness=1)
    c.num_steps = 3
    pp = CountingPostProcessor()
    selected = []

    def selector(task, step):
        selected.append(step)
        return trainer.base_harness

    trainer = loop.Trainer(c, str(tmp_path), post_processors=[pp], harness_selector=selector,
                           devices=jax.devices()[:1])
    try:
        summary = trainer.run()
    finally:
        trainer.close()
    assert summary["step"] == 3 and summary["policy_version"] == 3
    hists = trainer.history["staleness"]
    lags = [int(k) for h in hists for k in h]
    assert lags and max(lags) <= 1, hists                 # never older than max_staleness
    assert all(b <= 1 for b in trainer.history["admission_lag"]), trainer.history["admission_lag"]
    # collection overlapped training: some trajectories were trained one version late
    assert 1 in lags, hists
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
    from harness_jax.train import builders, loop, task_tokenizer

    work = str(tmp_path / "run")
    init = str(tmp_path / "init_hf")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    c = _base(rollout__mode="disaggregated", rollout__engine="sglang", rollout__server_urls=(url,),
              rollout__sync_every=1)
    c.num_steps = 2
    # an untrained policy solves nothing, so GRPO's advantages (and updates) are all zero here;
    # a short SFT warm start (synced to the server as well) guarantees the weights change
    c.sft.enabled = True
    c.sft.lr = 1e-2
    tok = task_tokenizer.load_or_train(c, work)
    qwen3_5.save_hf(builders.build_model(c), init)
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
        trainer = loop.Trainer(c, work, devices=jax.devices()[:1])
        try:
            summary = trainer.run()
            after = client.generate_sync(GenerateRequest(prompt, greedy, "probe-after"))
            local = JaxEngine(trainer.learner.model(), max_slots=1, max_len=256)
            mine = local.generate_sync(GenerateRequest(prompt, greedy, "probe-local"))
            local.close()
            n_syncs = trainer.weight_sync.client.weight_version
        finally:
            trainer.close()
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
