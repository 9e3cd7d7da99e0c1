"""The smallest end-to-end configuration: the tiny_cpu main job shrunk for CI (seconds per step).

Used by tests/e2e through ``launch/train.py --config=tests/e2e/tiny_e2e_config.py``.
"""
from experiments.configs import tiny_cpu


def get_config():
    c = tiny_cpu.get_config()
    c.name = "tiny_e2e"
    c.num_steps = 3
    c.model.tokenizer_vocab = 1024
    a = c.model.arch
    a.vocab_size, a.hidden_size, a.intermediate_size, a.num_hidden_layers = 1024, 32, 64, 2
    a.layer_types = ("linear_attention", "full_attention")
    a.num_attention_heads, a.num_key_value_heads, a.head_dim = 2, 1, 16
    a.linear_num_key_heads, a.linear_num_value_heads, a.linear_key_head_dim, a.linear_value_head_dim = 1, 2, 16, 16
    a.max_position_embeddings = 2048
    c.rollout.max_slots = 4
    c.rollout.max_len = 1280
    c.rollout.max_new_tokens = 64
    c.rollout.concurrency = 4
    c.env.dbbench.max_rounds = 2
    c.env.num_tasks = 64
    c.env.max_turns = 2
    c.rl.group_size = 2
    c.rl.tasks_per_step = 2
    c.rl.skip_no_signal = False           # 2 groups of 2 on a tiny model rarely carry signal: step anyway, so every step logs the learner's figures
    c.rl.pack_len = 1280
    c.opt.lr = 1e-3
    c.sft.enabled = True
    c.sft.num_demos = 4
    c.sft.steps = 2
    c.sft.batch_size = 2
    c.sft.warmup_steps = 0
    c.ckpt.every_steps = 1
    c.eval.num_tasks = 2
    c.log.peak_flops = 1e11               # fixed: no matmul probe in CI
    c.log.progress_bar = "off"
    return c
