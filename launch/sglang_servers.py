"""Starts SGLang servers on a GPU host with the flags RL needs (GPU hosts only; not run in CI).

One server per group of ``--tp`` GPUs (data parallel by process, so each episode can stick to
one server for its prefix cache). Prints the URLs (and writes them to ``--urls_file``) for
``SGLangClient(urls)``.

RL flags and why (see shared/notes/sglang_api.md):
  --sampling-defaults openai   omitted sampling params are NOT filled from generation_config
                               (our client also sends every one explicitly)
  --skip-tokenizer-init        token-in/token-out: we never re-tokenize text
  --weight-version N           reported in meta_info / model_info, bumped by each sync
  --load-format dummy          (--dummy_weights) random init, overwritten by the first sync
  --mem-fraction-static        leave room when the learner shares the host
  radix cache stays ON         multi-turn prefix reuse; every weight sync flushes it

Example:
  python -m launch.sglang_servers --model_path /ckpt/qwen3.5-4b --gpus 0,1,2,3 --tp 1 \
      --base_port 30000 --urls_file /tmp/sglang_urls.txt
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Sequence

from absl import app, flags, logging

from harness_jax.sampling.http_util import wait_healthy

FLAGS = flags.FLAGS
flags.DEFINE_string("model_path", None, "HF checkpoint (also the tokenizer).", required=True)
flags.DEFINE_string("gpus", "0", "Comma-separated GPU ids on this host.")
flags.DEFINE_integer("tp", 1, "GPUs per server (tensor parallel).")
flags.DEFINE_integer("base_port", 30000, "Port of the first server; the others follow.")
flags.DEFINE_string("host", "0.0.0.0", "Bind address.")
flags.DEFINE_float("mem_fraction_static", 0.85, "KV-cache memory fraction.")
flags.DEFINE_integer("context_length", 0, "0 = from the model config.")
flags.DEFINE_integer("max_running_requests", 0, "0 = SGLang default.")
flags.DEFINE_string("weight_version", "0", "Initial weight version.")
flags.DEFINE_bool("dummy_weights", False, "Random init (--load-format dummy); the first sync loads real weights.")
flags.DEFINE_bool("deterministic", False, "--enable-deterministic-inference (slower; bitwise-reproducible).")
flags.DEFINE_bool("chat", False, "Keep the tokenizer and enable the Qwen3.5 tool-call/reasoning parsers (helper LLMs).")
flags.DEFINE_string("urls_file", "", "Write the server URLs here, one per line.")
flags.DEFINE_integer("health_timeout_s", 1800, "How long to wait for /health.")


def sglang_command(model_path: str, port: int, *, tp: int = 1, host: str = "0.0.0.0",
                   mem_fraction_static: float = 0.85, context_length: int = 0,
                   max_running_requests: int = 0, weight_version: str = "0",
                   dummy_weights: bool = False, deterministic: bool = False, chat: bool = False,
                   python: str = sys.executable) -> list[str]:
    """The ``sglang.launch_server`` argv for one RL rollout server."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    cmd = [python, "-m", "sglang.launch_server", "--model-path", model_path, "--host", host,
           "--port", str(port), "--tp-size", str(tp), "--mem-fraction-static", str(mem_fraction_static),
           "--sampling-defaults", "openai", "--weight-version", str(weight_version),
           "--trust-remote-code"]
    if chat:
        cmd += ["--tool-call-parser", "qwen3_coder", "--reasoning-parser", "qwen3"]
    else:
        cmd += ["--skip-tokenizer-init"]
    if context_length:
        cmd += ["--context-length", str(context_length)]
    if max_running_requests:
        cmd += ["--max-running-requests", str(max_running_requests)]
    if dummy_weights:
        cmd += ["--load-format", "dummy"]
    if deterministic:
        cmd += ["--enable-deterministic-inference"]
    return cmd


def gpu_groups(gpus: Sequence[str], tp: int) -> list[list[str]]:
    """Splits GPU ids into consecutive groups of ``tp``."""
    if len(gpus) % tp:
        raise ValueError(f"--gpus has {len(gpus)} ids, not a multiple of --tp={tp}")
    return [list(gpus[i:i + tp]) for i in range(0, len(gpus), tp)]


def main(argv):
    del argv
    groups = gpu_groups([g for g in FLAGS.gpus.split(",") if g], FLAGS.tp)
    procs, urls = [], []
    host_name = os.uname().nodename if FLAGS.host == "0.0.0.0" else FLAGS.host
    for i, group in enumerate(groups):
        port = FLAGS.base_port + i
        cmd = sglang_command(FLAGS.model_path, port, tp=FLAGS.tp, host=FLAGS.host,
                             mem_fraction_static=FLAGS.mem_fraction_static,
                             context_length=FLAGS.context_length,
                             max_running_requests=FLAGS.max_running_requests,
                             weight_version=FLAGS.weight_version, dummy_weights=FLAGS.dummy_weights,
                             deterministic=FLAGS.deterministic, chat=FLAGS.chat)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(group))
        logging.info("starting %s on GPUs %s", " ".join(cmd), group)
        procs.append(subprocess.Popen(cmd, env=env))
        urls.append(f"http://{host_name}:{port}")
    try:
        for url, p in zip(urls, procs):
            wait_healthy(url.replace(host_name, "127.0.0.1"), FLAGS.health_timeout_s, p, poll_s=5.0)
        if FLAGS.urls_file:
            with open(FLAGS.urls_file, "w") as f:
                f.write("\n".join(urls) + "\n")
        print("\n".join(urls), flush=True)
        while all(p.poll() is None for p in procs):
            time.sleep(10)
        logging.error("a server exited; stopping the others")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    app.run(main)
