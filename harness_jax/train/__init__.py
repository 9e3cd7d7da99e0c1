"""The agent GRPO loop: the config resolved once into typed specs (``spec``), the run's parts
(``context``), task stream, episode collection, advantages, learner, weight sync, evaluation,
checkpoints, and the extensions methods plug in with (see docs/training.md).
``run.train(config, workdir)`` runs one experiment; ``launch/train.py`` is its command-line entry
point."""
