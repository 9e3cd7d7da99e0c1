"""The agent GRPO loop: task stream, episode collection, advantages, learner, weight sync,
evaluation, checkpoints (see docs/training.md). ``loop.train(config, workdir)`` runs one
experiment; ``launch/train.py`` is its command-line entry point."""
