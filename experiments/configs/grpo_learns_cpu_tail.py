"""grpo_learns_cpu_tail: does GRPO alone raise held-out success on CPU? (issue 25 item 5, second
family) on ``tail_label`` (``harness_jax/envs/tail_label``): the prompt is a list of three distinct
words (``owl cat fig``) and the reply must be the label of the last one (a fixed word -> a b c d
table; the words of a task have distinct labels, so a distractor's label is always wrong). The
warm start is SFT on a weak teacher that labels the last word half of the time and the *first*
word otherwise (``teacher_mistake="first"``), so the policy holds two readings of the task at
about even odds; GRPO has to make the right one the policy's choice from 0/1 rewards. Held-out
tasks (``selection``) share no set of words with any training task (the splits partition word
sets by hash; every word occurs last in training, so the label table itself is learned there), so
a held-out gain is the rule applied to unseen lists, not memorised tasks.

Why the family changed (``grpo_learns_cpu``, ``kv_lookup``: not shown): that tiny model did not
learn the lookup (copy the queried value out of the prompt) even supervised, and GRPO only
sharpened per-task preferences. Here the rule is a position (the last word) plus a label table,
which this model learns supervised in under a minute (pilot "gold" below: 0.995 held out), and the
teacher holds it half-way, so GRPO chooses between readings the policy already has (the usual
situation in LLM RL) instead of discovering a skill.

Commands (one warm start, then GRPO per seed; ``nice -n 10`` on the shared machine)::

    # warm start: SFT on the weak teacher, no GRPO step (evaluations before and after SFT)
    python launch/train.py --config=experiments/configs/grpo_learns_cpu_tail.py --workdir=/tmp/tl/ws \
        --config.sft.enabled=True --config.num_steps=0
    # GRPO from it, seeds 0, 1, 2 (its summary.json has #start, the warm start, and #final, both
    # evaluated on the same 256 selection tasks with the same random numbers)
    python launch/train.py --config=experiments/configs/grpo_learns_cpu_tail.py --workdir=/tmp/tl/s0 \
        --config.seed=0 --config.model.init_from=/tmp/tl/ws
    # the paired comparison: final minus start, mean over tasks, bootstrap 95% interval over tasks
    python launch/evaluate.py --config=experiments/configs/grpo_learns_cpu_tail.py --workdir=/tmp/tl/cmp0 \
        --checkpoint=/tmp/tl/s0/summary.json#final --baseline=/tmp/tl/s0/summary.json#start \
        --out=/tmp/tl/cmp0/paired.json

Pre-registered criterion (written and committed before any confirmatory run; the same as
``grpo_learns_cpu``'s): on each of seeds 0, 1 and 2, held-out success after GRPO minus the warm
start's, on the same 256 ``selection`` tasks and random numbers (Avg@4 at T=1, the primary
measure), has a paired bootstrap 95% interval above 0, with the GRPO phase (the GRPO run's wall
time from start-up to its summary, its two evaluations included) under 20 min on the 2 shared
cores. Reported beside it, not part of the criterion: the greedy difference with its interval,
per-label held-out success, Pass@4, zero-variance groups and entropy. The three runs start from
one warm start made with the first command (config.seed 0) after this commit; pilot runs that
chose the setting used GRPO seed 7 and are reported as pilots, not as results.

Setting (chosen by the pilots below): 3 words, 2 full-attention layers of hidden 64, SFT on 8192
teacher demonstrations (400 steps of 32, ~1.6 epochs), teacher right 0.5 and otherwise labelling
the first word, GRPO lr 3e-4, G = 8 x 16 tasks, 100 steps.

Measured (2026-12-07, after the criterion above was committed in bfb2007). **Result: met on
every seed.** Warm start /tmp/tlc/ws (the first command, 37 s wall, 35 s user CPU; its numbers
are identical to the pilot warm start's, the run is deterministic): before SFT 0.000; after SFT
held-out Avg@4 0.419, Pass@4 0.859, greedy 0.551, per label a/b/c/d 0.29/0.49/0.35/0.51. GRPO, one
run per seed, one at a time, on the shared 2-core machine (load average, 1 min, 4.3-5.3 during
the GRPO runs: two other Python processes, not these runs', used the cores beside them); held-out = the same 256 selection tasks and
random numbers at start and end; final minus start [paired bootstrap 95% interval], tasks up/down:

* seed 0: Avg@4 0.419 -> 0.991, **+0.572 [+0.540, +0.604]**, 245/0; greedy 0.551 -> 1.000,
  +0.449 [+0.387, +0.512], 115/0; Pass@4 1.000; per label 0.996/0.984/0.988/0.996; training
  reward 0.42 (step 1), 0.51 (10), 0.82 (25), 0.98 (50), 0.99 (100), first >= 0.9 at step 43;
  zero-variance groups 0.18 (mean of steps 1-10) -> 0.91 (steps 91-100), entropy 0.40 -> 0.06;
  1.5 min wall for the whole GRPO run (start-up, both evaluations, 100 steps), 74 s user CPU;
* seed 1: Avg@4 -> 0.993, **+0.574 [+0.542, +0.606]**, 245/0; greedy -> 1.000, +0.449
  [+0.387, +0.512], 115/0; per label 1.000/0.992/0.984/0.996; reward 0.53, 0.48, 0.77, 0.91,
  0.99, first >= 0.9 at step 39; zero-variance 0.14 -> 0.88, entropy 0.42 -> 0.08; 1.6 min, 80 s;
* seed 2: Avg@4 -> 0.989, **+0.570 [+0.538, +0.603]**, 245/0; greedy -> 1.000, +0.449
  [+0.387, +0.512], 115/0; per label 1.000/0.984/0.984/0.989; reward 0.34, 0.51, 0.89, 0.98,
  0.96, first >= 0.9 at step 31; zero-variance 0.10 -> 0.91, entropy 0.48 -> 0.05; 1.5 min, 76 s.

Seed 0 again after the learner's on-policy step (a62c581: one optimizer step per batch takes its
old log-probs from the step's own forward instead of a separate recompute; same math up to float
rounding), same warm start, 2026-12-07 22:43: Avg@4 0.419 -> 0.992, +0.573 [+0.541, +0.605],
245/0; greedy -> 1.000; 94 s wall, 114 s user CPU (machine idle, measured ~20% slower than at
22:00 on a fixed probe, docs/ci.md).

The interval is above 0 on all three seeds and every GRPO phase is far inside 20 min (1.5-1.6
min), so the pre-registered criterion is met. What it shows and what it does not: GRPO from 0/1
rewards chose, on lists never seen together in training, the right one of two readings the warm
start held at about even odds (greedy 0.55 -> 1.00); it did not discover a skill the policy
lacked (the kv_lookup question, still open), and the family is easy for this model (gold SFT
alone reaches 0.995).

Pilots (2026-12-07, shared 2-core machine, load average 1.1-3.8; every warm start made with
config.seed 0; GRPO seed 7, evaluations at steps 0, 50, 100; held-out = 256 selection tasks):

* gold (``--config.sft.keep_failed_demos=False``: SFT on the 4166 of 8192 teacher demonstrations
  that are right, i.e. the rule; teacher_mistake "earlier"): held-out Avg@4 0.995, Pass@4 1.000,
  greedy 0.996 after 400 SFT steps (nll 6.30 -> 0.0015); 53 s wall, 44 s user CPU for the whole
  run. The model learns the rule supervised, held out.
* weak teacher, ``teacher_mistake="earlier"`` (otherwise one of the two earlier words' labels,
  uniformly): warm start Avg@4 0.511, Pass@4 0.953, but greedy already 1.000 (the right label is
  the teacher's most frequent reply on every list, so the argmax holds the rule); GRPO: 0.511 ->
  0.976 (step 50) -> 0.987, paired +0.477 [+0.446, +0.506], greedy +0.000; 1.7 min wall, 89 s
  user. GRPO only sharpened sampling (training reward 0.86 by step 11): rejected as too weak a
  test, hence the "first" teacher.
* weak teacher, ``teacher_mistake="first"`` (this setting; flag
  ``--config.env.tail_label.teacher_mistake=first``, now the default): warm start Avg@4 0.419,
  Pass@4 0.859, greedy 0.551 (per label 0.29-0.51), SFT nll 0.50, 37 s wall; GRPO: training
  reward 0.43 (step 1), 0.32 (step 5), 0.70 (step 10), 0.80 (step 25), 0.95 (step 50), 0.98 (step
  100); zero-variance groups 0.075 (mean of steps 1-10) -> 0.875 (steps 91-100), entropy 0.49 ->
  0.06; held-out Avg@4 0.419 -> 0.979 (step 50) -> 0.988, paired +0.569 [+0.537, +0.602] (245
  tasks up, 0 down); greedy 0.551 -> 1.000, +0.449 [+0.387, +0.512]; 1.6 min wall, 88 s user.
"""
from experiments.configs import common


def get_config():
    c = common.base_config()
    c.name = "grpo_learns_cpu_tail"       # run name in logs and summaries
    c.seed = 0                            # the warm start's seed; GRPO runs pass --config.seed=0/1/2
    c.num_steps = 100                     # GRPO steps (pilot: held-out Avg@4 0.98 by step 50, 1.6 min wall for 100)
    common.toy_model(c, ("full_attention", "full_attention"))
    common.toy_one_turn_loop(c)

    c.env.name = "tail_label"            # the family (harness_jax/envs/tail_label)
    c.env.num_tasks = 4096                # training tasks the stream cycles over
    c.env.tail_label.list_len = 3         # words per task: the last one's label is the answer
    c.env.tail_label.teacher_accuracy = 0.5  # the weak teacher labels the last word half of the time
    c.env.tail_label.teacher_mistake = "first"  # the first word's label otherwise ("earlier": greedy already right, pilots)
    c.rollout.max_new_tokens = 4          # a label and <|im_end|> fit

    c.opt.lr = 3e-4                       # GRPO learning rate (grpo_learns_cpu's; 1e-3 collapsed that policy's entropy)

    c.sft.enabled = False                 # the warm start command turns it on; GRPO runs start from model.init_from
    c.sft.keep_failed_demos = True        # the weak teacher's replies, right or wrong
    c.sft.num_demos = 8192                # teacher demonstrations (~4100 right, ~4100 labelling the first word)
    c.sft.steps = 400                     # SFT steps of 32 (~1.6 epochs)
    c.sft.batch_size = 32                 # demonstrations per SFT step
    c.sft.lr = 3e-3                       # SFT learning rate (gold pilot: nll 0.0015 in 400 steps)
    c.sft.warmup_steps = 10               # SFT learning-rate warm-up steps
    c.sft.ckpt_every_steps = 400          # one SFT checkpoint, at the end (the warm start GRPO loads)

    c.ckpt.every_steps = 0                # at a stop request and at the end only
    c.ckpt.export_hf = False              # no Hugging Face export of the toy model
    c.eval.num_tasks = 256                # held-out selection tasks (word sets never seen in training)
    c.eval.k = 4                          # Avg@4 at T=1, plus one greedy attempt
    c.eval.temperature = 1.0              # Avg@4 sampled at T=1, as GRPO samples
    c.eval.every_steps = 0                # at the start and the end only
    c.log.peak_flops = 1e11               # nominal CPU peak for the MFU column
    c.log.progress_bar = "off"            # plain log lines (runs go to files)
    c.log.plot = False                    # no plots
    c.log.tensorboard = False             # metrics.jsonl only
    c.log.store_traces = False            # no episode traces (summary.json keeps per-task results)
    return c
