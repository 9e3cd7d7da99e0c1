"""The smallest end-to-end configuration: the tiny_cpu main job shrunk for CI (seconds per step).

Used by tests/e2e through ``launch/train.py --config=tests/e2e/tiny_e2e_config.py``.
"""
from experiments.configs import tiny_cpu


def get_config():
    c = tiny_cpu.get_config()
    c.name = "tiny_e2e"
    c.num_steps = 3
    c.model.tokenizer_vocab = 1024
    c.model.overrides = dict(vocab_size=1024, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             layer_types=("linear_attention", "full_attention"), num_attention_heads=2,
                             num_key_value_heads=1, head_dim=16, linear_num_key_heads=1,
                             linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
                             tie_word_embeddings=True, max_position_embeddings=2048, eos_token_id=2,
                             pad_token_id=0)
    c.rollout.max_slots = 4
    c.rollout.max_len = 1280
    c.rollout.max_new_tokens = 64
    c.rollout.concurrency = 4
    c.env.kwargs = dict(engine="sqlite", protocol="text", max_rounds=2)
    c.env.split_kwargs = dict(n=64, seed=0)
    c.env.max_turns = 2
    c.rl.group_size = 2
    c.rl.tasks_per_step = 2
    c.rl.pack_len = 1280
    c.opt.lr = 1e-3
    c.sft.enabled = True
    c.sft.num_demos = 4
    c.sft.steps = 2
    c.sft.batch_size = 2
    c.ckpt.every_steps = 1
    c.eval.num_tasks = 2
    c.log.peak_flops = 1e11               # fixed: no matmul probe in CI
    c.log.progress_bar = "off"
    return c
