"""harness_r1/tiny_cpu_policy: the Harness-R1 CPU demonstration with a frozen tiny POLICY as target.

Issue #14 section 7 asks for "a frozen tiny policy" as the target. ``tiny_cpu`` uses the scripted
DBBench agent; this config uses a trained model instead: the Harness-S CPU demo's SFT warm start
(``experiments/configs/cpu_learnable.py``, exported by ``launch/train.py`` as ``hf_final``: a
hidden-128 Qwen3.5 with its own 1k task BPE, 'isolate' pre-tokenizer). It is loaded on the
embedded ``JaxEngine`` (``r1.target.kind="jax"``) and run on the family it was trained on: one
domain (football players) in one table ``players``, no table sentence, SELECT categories only,
the minimal text-protocol H0, 3 turns, temperature 1.0 (as in the Harness-S demo). Everything
else -- the rule-based teacher, the tiny engineer, SFT then GRPO -- is ``tiny_cpu``, sized down
because every reward now costs real target decoding.

Commands (``hf_dir`` is the config argument; a missing directory is rejected by validation)::

    python launch/engineer.py --config=experiments/configs/harness_r1/tiny_cpu_policy.py:/tmp/r1pol/target_hf \
        --workdir=/tmp/r1pol/seed0
    python launch/evaluate_engineer.py --config=experiments/configs/harness_r1/tiny_cpu_policy.py:/tmp/r1pol/target_hf \
        --workdir=/tmp/r1pol/seed0
    python -m harness_jax.harness_r1.demo --workdirs=/tmp/r1pol/seed0 --out=docs/img/harness_r1_cpu_policy

Expected result (measured over seeds 0, 1, 2 with ``--config.seed=S``; docs/harness_r1.md
section 11.1, plot docs/img/harness_r1_cpu_policy.png): every harness change tested HURTS this
target. On the 6 held-out packets (baseline success 10.4%) the rule-based engineer's patch gives
Delta_B -0.083 (an on_init "skills" note the policy never saw in training), ReAct and
Self-Refine -0.104; after SFT the engineer reproduces the teacher (sampled -0.078 +- 0.009, 86%
valid; greedy -0.083); after 6 GRPO steps the sampled Delta_B is -0.017 +- 0.022 only because
the engineer learned to emit malformed responses (valid 0.22 sampled, 0.00 greedy: invalid
patches earn 0, more than any harmful patch). ~7 min wall / ~450 CPU-s for launch/engineer.py
and ~7.5 min for the full table on 2 loaded cores.
"""
import os

from experiments.configs import cpu_learnable
from experiments.configs.harness_r1 import tiny_cpu
from harness_jax.sweeps import hyper

DEFAULT_HF_DIR = "/tmp/hsdemo/sft/hf_final"   # where the Harness-S CPU demo's SFT exports its policy


def get_config(hf_dir: str = DEFAULT_HF_DIR):
    c = tiny_cpu.get_config()
    c.name = "r1_tiny_cpu_policy_dbbench"
    c.num_steps = 6                       # GRPO steps (each costs tasks_per_step x K x batch_size target episodes)

    # ---- the target's task family: exactly the one the policy was trained on (cpu_learnable)
    d = c.env.dbbench
    d.engine = "sqlite"                   # in-process SQLite
    d.max_rounds = 3                      # = env.max_turns
    d.domain = "player"                   # one domain ...
    d.table_name = "players"              # ... in one table
    d.describe_table = False              # no "The name of this table is ..." sentence
    d.categories = cpu_learnable.CATEGORIES  # SELECT questions only
    c.env.max_turns = 3                   # the policy's training episodes had 3 turns
    c.env.num_tasks = 1024                # generated tasks per split (as in its training)
    c.harness.spec = cpu_learnable.H0_MINIMAL  # its H0: text protocol, the question is the prompt

    # ---- the frozen target: the trained policy on the embedded JAX engine
    t = c.r1.target
    t.kind = "jax"                        # HF weights directory on the embedded JaxEngine
    t.model = os.path.expanduser(hf_dir)  # the HF export (weights + its task tokenizer)
    t.tokenizer = t.model                 # the executor renders and tokenises with the policy's own tokenizer
    t.version = ""                        # derived: the weights fingerprint (keys every cache)
    t.factory = ""                        # (kind "factory" only)
    t.options.kwargs = {}                 # (kind "factory" only)
    t.options.max_slots = 64              # 64 episodes decode together
    t.options.max_len = 1024              # tokens per engine slot
    t.options.decode_steps = 8            # decode tokens per host round trip
    t.options.prefill_buckets = (64, 256, 512)  # prefill chunk lengths
    t.temperature = 1.0                   # the Harness-S demo's rollout temperature (paired seeds)
    t.max_new_tokens = 64                 # one SQL action per turn (its training budget)
    t.max_context = 960                   # < max_len: room for harness hints in the context
    t.concurrency = 64                    # episodes in flight (one JaxEngine batch)
    c.r1.pool_workers = 0                 # reruns in this process (a worker would recompile the target)

    p = c.r1.packets
    p.train_batches = 12                  # 12 train packets
    p.held_out_batches = 6                # 6 held-out packets
    p.batch_size = 8                      # tasks per batch B
    p.budget_tokens = 600                 # small packets for a tiny engineer
    c.rl.group_size = 4                   # K patches per packet
    c.rl.tasks_per_step = 4               # packets per step (16 patches x 8 tasks = 128 episodes)
    c.rollout.max_slots = 24              # 4 packets x K=4 in training, 6 x 4 in evaluation
    c.sft.steps = 120                     # cold-start SFT steps (fewer, smaller teacher set)
    c.sft.ckpt_every_steps = 40           # a killed SFT loses at most 40 steps
    c.eval.num_tasks = 6                  # held-out packets evaluated
    c.eval.k = 4                          # samples per held-out packet (plus the greedy patch)
    c.eval.at_start = False               # the untrained engineer writes no valid patch (tiny_cpu measured 0.00)
    return c


SWEEPS = {
    "seeds": hyper.sweep("seed", [0, 1, 2]),
}
