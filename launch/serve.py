"""Serves a Qwen3.5 checkpoint over SGLang's HTTP API (plus OpenAI chat) from the JAX engine.

Usage:
  python -m launch.serve --model_path /ckpt/qwen3.5-0.8b --port 30000 --max_slots 16 --max_len 4096

Then e.g. ``curl localhost:30000/generate -d '{"input_ids": [1, 2], "return_logprob": true,
"sampling_params": {"max_new_tokens": 8, "temperature": 0}}'`` or point ``SGLangClient`` /
``OpenAIChatClient(base_url="http://host:30000/v1")`` at it. Weight updates:
``POST /update_weights_from_disk {"model_path": ..., "weight_version": "7"}``.
"""
from absl import app, flags, logging

FLAGS = flags.FLAGS
flags.DEFINE_string("model_path", None, "HF-format Qwen3.5 checkpoint directory.", required=True)
flags.DEFINE_string("tokenizer_path", None, "Tokenizer dir (default: the checkpoint, else the packaged Qwen3.5 vocabulary).")
flags.DEFINE_string("host", "0.0.0.0", "Bind address.")
flags.DEFINE_integer("port", 30000, "Port.")
flags.DEFINE_integer("max_slots", 8, "Concurrent requests (cache rows).")
flags.DEFINE_integer("max_len", 4096, "Tokens per row (prompt + generated).")
flags.DEFINE_integer("decode_steps", 8, "Decode tokens per host round trip.")
flags.DEFINE_string("dtype", "bfloat16", "Weights / activations dtype: float32 or bfloat16.")
flags.DEFINE_string("served_model_name", "", "Name reported by /model_info and /v1/models.")
flags.DEFINE_string("weight_version", "0", "Initial weight version.")
flags.DEFINE_integer("seed", 0, "Seeds engine-chosen per-request seeds.")
flags.DEFINE_bool("incremental_streaming_output", False,
                  "Streamed /generate chunks carry only the new tokens (default: cumulative, like SGLang).")


def main(argv):
    del argv
    from harness_jax import compile_cache
    from harness_jax.sampling.server import build_server
    compile_cache.enable()                # a restarted server loads its programs instead of compiling
    server = build_server(FLAGS.model_path, tokenizer_path=FLAGS.tokenizer_path, max_slots=FLAGS.max_slots,
                          max_len=FLAGS.max_len, decode_steps=FLAGS.decode_steps, dtype=FLAGS.dtype,
                          served_model_name=FLAGS.served_model_name, weight_version=FLAGS.weight_version,
                          seed=FLAGS.seed, incremental_streaming_output=FLAGS.incremental_streaming_output)
    logging.info("serving %s on http://%s:%d", FLAGS.model_path, FLAGS.host, FLAGS.port)
    server.serve_forever(FLAGS.host, FLAGS.port)


if __name__ == "__main__":
    app.run(main)
