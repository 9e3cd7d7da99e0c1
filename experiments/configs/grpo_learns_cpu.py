"""grpo_learns_cpu: does GRPO alone raise held-out success on CPU? (issue 25 item 5) on the
``kv_lookup`` family (``harness_jax/envs/kv_lookup``): the prompt lists key=value pairs and asks
for one key (``a=cat d=fog ? d``); the reply must be the queried value. The warm start is SFT on a
weak teacher that answers one of the listed values uniformly (right 1/num_pairs of the time), so
it answers with *a* listed value and ignores the query; GRPO has to learn the lookup from 0/1
rewards. Held-out tasks (``selection``) share no set of values with any training task (the
splits partition value sets by hash), so a held-out gain cannot come from memorised tasks (it can
come from answering a listed value more often: hence the per-position test below).

Why not the DBBench family (docs/harness_s.md, "GRPO learns on CPU"): there ~70% of the groups
had no reward variance and an update fitted to a few episodes disturbed held-out tasks; six
update settings lowered or kept held-out success. The intent here: every group of the warm start
has signal (success ~1/2 per attempt), and the one rule that raises training reward is the one
that also holds on held-out tasks. What the runs showed is at the end: the first holds (after
SFT on 16384 demonstrations), but this tiny model does not find the rule, even supervised.

Commands (one warm start, then GRPO per seed; ``nice -n 10`` on the shared machine)::

    # warm start: SFT on the weak teacher, no GRPO step (evaluations before and after SFT)
    python launch/train.py --config=experiments/configs/grpo_learns_cpu.py --workdir=/tmp/kv/sft \
        --config.sft.enabled=True --config.num_steps=0
    # GRPO from it, seeds 0, 1, 2 (its summary.json has #start, the warm start, and #final, both
    # evaluated on the same 256 selection tasks with the same random numbers)
    python launch/train.py --config=experiments/configs/grpo_learns_cpu.py --workdir=/tmp/kv/s0 \
        --config.seed=0 --config.model.init_from=/tmp/kv/sft
    # the paired comparison: final minus start, mean over tasks, bootstrap 95% interval over tasks
    python launch/evaluate.py --config=experiments/configs/grpo_learns_cpu.py --workdir=/tmp/kv/cmp0 \
        --checkpoint=/tmp/kv/s0/summary.json#final --baseline=/tmp/kv/s0/summary.json#start \
        --out=/tmp/kv/cmp0/paired.json

Pre-registered criterion (written and committed before any confirmatory run): on each of seeds
0, 1 and 2, held-out success after GRPO minus the warm start's, on the same 256 ``selection``
tasks and random numbers (Avg@4 at T=1, the primary measure; greedy reported beside it), has a
paired bootstrap 95% interval above 0, with the GRPO phase (the GRPO run's wall time from start-up
to its summary, its two evaluations included) under 20 min on the 2 shared cores. Pilot runs
that chose the setting used seed 7 and are reported as pilots, not as results.

Setting (chosen by the pilots, seed 7, below): keys a and b listed in order (``a=cat b=dog ? b``,
so the query names a position), 2 full-attention layers, SFT on 16384 teacher demonstrations
(1000 steps), GRPO lr 3e-4 for 200 steps. Its pilot (seed 7): held-out Avg@4 0.436 -> 0.488,
+0.053 [+0.004, +0.104]; greedy +0.059 [-0.020, +0.137]; per position 0.47/0.41 -> 0.50/0.48.
Added to the criterion before the confirmatory runs: the lookup itself counts as learned only if
the final held-out Avg@4 of both positions (categories position_1, position_2) is above 0.5, the
success of a policy that answers one of the two listed values at random; a gain with both at or
below 0.5 is the warm start's missing skill (answering a listed value) completed by GRPO.
The warm start of the confirmatory runs: /tmp/kvp/wsff2, made with the first command's flags
equal to these defaults (pilot commands in the measured section).

Measured (2026-12-07, after the criterion above was committed). **Result: not met.** The
warm start (/tmp/kvp/wsff2; before SFT 0.000; after SFT held-out Avg@4 0.436, Pass@4 0.871,
greedy 0.465; SFT 2.6 min wall beside another run, 93 s user CPU). GRPO, one run per seed,
one at a time, on the shared 2-core machine (load average, 1 min, 1.6-4.1: another session's
tests ran during seed 0); held-out = the same 256 selection tasks and random numbers at start and
end; after minus start [paired bootstrap 95% interval]:

* seed 0: Avg@4 0.436 -> 0.486, +0.051 [-0.010, +0.110]; greedy 0.465 -> 0.512, +0.047
  [-0.027, +0.121]; per position 0.424 / 0.543; 4.3 min wall for the whole run (start-up, both
  evaluations, 200 steps), 211 s user CPU;
* seed 1: Avg@4 -> 0.499, **+0.063 [+0.008, +0.120]**; greedy -> 0.543, +0.078 [-0.004, +0.164];
  per position 0.514 / 0.485; 3.6 min, 262 s;
* seed 2: Avg@4 -> 0.454, +0.019 [-0.036, +0.072]; greedy -> 0.492, +0.027 [-0.039, +0.094];
  per position 0.465 / 0.444; 3.4 min, 252 s.

The interval is above 0 on seed 1 only, so the criterion (every seed) fails; the lookup itself
was learned on no seed (no run has both positions above 0.5). Every run is well inside 20 min.
What GRPO did: the policy answered a listed value more often (Avg@4 towards 0.5, the ceiling of
a policy that picks one of the two at random) and lost its spread (Pass@4 0.871 -> 0.58-0.63;
token entropy 0.45 -> 0.07-0.21; zero-variance groups 0.04-0.07 in steps 1-10, 0.56-0.71 in
steps 191-200): it sharpened per-task preferences instead of finding the rule.

Pilots (seed 7 for GRPO; every warm start made with config.seed 0; one run each; held-out Avg@4
after SFT / Pass@4; "gold" = SFT on the correct answer, a check that the model can learn the rule
at all):

* 2-layer GDN + attention, 4 shuffled keys, 1024 teacher demos, 300 SFT steps: 0.262 / 0.594;
  GRPO lr 1e-3: held-out 0.262 -> 0.454 at step 50 (it learned to answer a listed value, not the
  lookup), zero-variance 0.33 -> 0.77, entropy 0.98 -> 0.25 (stopped at step 83);
  hidden 128 and 4 layers, same: 0.228 / 0.453; 1000 SFT steps: 0.387 / 0.648, GRPO lr 3e-4
  0.387 -> 0.418 at step 50 (stopped at 59);
* gold, 4 keys: the ~1000 correct of 2048 demos x 31 epochs were memorised (training nll
  0.14-0.20), 0.396 held out; the ~8200 correct of 16384: nll still 0.49-0.64 at step 480
  (stopped); gold, 2 shuffled keys, ~8200 correct of 16384 demos, 1000 steps: 0.410 / 0.820, nll 0.385 (the rule would give
  ~0); the same with 2 attention layers: 0.437 / 0.852 -- the rule is not learned even supervised;
* 2 keys in order (this setting), 1024 demos: 0.305 / 0.543 (0.405 / 0.652 with 2 attention
  layers), GRPO lr 1e-3: held-out 0.405 -> 0.424 at step 50 (stopped at 87), zero-variance 0.33-0.47 -> 0.64-0.66 (the warm start had
  memorised the teacher's coin flips); 16384 demos: 0.361 / 0.742 (0.436 / 0.871 with 2 attention
  layers); GRPO lr 1e-3 on the latter collapsed (entropy 0.45 -> 0.14, zero-variance 0.23 -> 0.67,
  0.446 at step 50, stopped at 79); lr 3e-4, 200 steps (this setting): 0.436 -> 0.488, +0.053
  [+0.004, +0.104], per position 0.50 / 0.48, 6.2 min wall beside another run, 272 s user.

Commands of the pilots: the first command with ``--config.sft.steps``, ``--config.sft.num_demos``,
``--config.sft.keep_failed_demos=False`` (gold), ``--config.env.kv_lookup.num_keys``,
``--config.env.kv_lookup.shuffle_keys`` and ``--config.model.arch.*`` as listed; the second with
``--config.seed=7 --config.num_steps=200 --config.eval.every_steps=50 --config.opt.lr=...``.
"""
from experiments.configs import common


def get_config():
    c = common.base_config()
    c.name = "grpo_learns_cpu"
    c.seed = 0
    c.num_steps = 200                     # GRPO steps (pilot: 6.2 min wall beside another run)
    # pilots: two attention layers learned no faster than Gated DeltaNet + attention, and ran faster
    common.toy_model(c, ("full_attention", "full_attention"))
    common.toy_one_turn_loop(c)

    c.env.name = "kv_lookup"
    c.env.num_tasks = 4096                # training tasks the stream cycles over
    c.env.kv_lookup.num_pairs = 2         # pairs per task: the teacher (and the warm start) is right about half the time
    c.env.kv_lookup.num_keys = 2          # keys a, b (4 keys: not learned even by supervised SFT in the pilots)
    c.env.kv_lookup.shuffle_keys = False  # "a=.. b=.. ? b": the query names a position (shuffled keys: not learned, pilots)
    c.rollout.max_new_tokens = 4

    c.opt.lr = 3e-4                       # GRPO learning rate (1e-3 collapsed the policy's entropy within 80 steps, pilots)

    c.sft.enabled = False                 # the warm start command turns it on; GRPO runs start from model.init_from
    c.sft.keep_failed_demos = True        # the weak teacher's replies, right or wrong
    c.sft.num_demos = 16384               # teacher demonstrations, ~2 epochs (1024 = 31 epochs: SFT memorised the teacher's coin flips, groups without variance)
    c.sft.steps = 1000                    # SFT steps (300 left a third of the answers off the list)
    c.sft.batch_size = 32
    c.sft.lr = 3e-3
    c.sft.warmup_steps = 10
    c.sft.ckpt_every_steps = 1000

    c.ckpt.every_steps = 0                # at a stop request and at the end only
    c.ckpt.export_hf = False
    c.eval.num_tasks = 256                # held-out selection tasks (value sets never seen in training)
    c.eval.k = 4                          # Avg@4 at T=1, plus one greedy attempt
    c.eval.temperature = 1.0
    c.eval.every_steps = 0                # at the start and the end only
    c.log.peak_flops = 1e11
    c.log.progress_bar = "off"
    c.log.plot = False
    c.log.tensorboard = False
    c.log.store_traces = False
    return c
