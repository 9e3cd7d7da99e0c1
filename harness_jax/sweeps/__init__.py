"""Config sweeps: named lists of override dicts in experiment configs, expanded into runs with
their own workdirs (resolved config, code version, status) and run on a backend (local processes
or Ray jobs). ``launch/sweep.py`` is the command; docs/experiments.md the guide; ``rundir`` the
on-disk layout and its reader (``load_sweep``)."""
from harness_jax.sweeps import hyper  # noqa: F401
from harness_jax.sweeps.rundir import RunDir, code_version, load_sweep  # noqa: F401
from harness_jax.sweeps.spec import RunSpec, SweepError  # noqa: F401
