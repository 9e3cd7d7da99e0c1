"""Runs a named sweep of an experiment config (thin main; the driver is harness_jax.sweeps).

    python launch/sweep.py --config=experiments/configs/tiny_cpu_sweep.py --sweep=seeds \
        --workdir=/tmp/sweep [--max_parallel=2] [--backend=ray --ray_address=http://HEAD:8265]

Each run gets ROOT/<run name>/ as the launcher's --workdir, with sweep/{spec,config,status}.json
and sweep/log.txt. Running the same command again skips finished runs, resumes interrupted ones
and reports failed ones (--retry_failed starts them again). Ctrl-C stops local runs cleanly
(they checkpoint); Ray jobs keep running and the same command re-attaches. Exit code: 0 all runs
done, 1 some failed, 3 some unfinished. See docs/experiments.md.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

from launch._flags import json_flag  # noqa: E402

_CONFIG = flags.DEFINE_string("config", None, "experiment config file (path[:arg]) declaring SWEEPS")
_SWEEP = flags.DEFINE_string("sweep", None, "name of the sweep in the config's SWEEPS ('list' lists them)")
_WORKDIR = flags.DEFINE_string("workdir", None, "sweep root: one sub-directory per run")
_LAUNCHER = flags.DEFINE_string("launcher", "launch/train.py", "launcher each run executes (takes --config, --workdir, --config.* flags)")
_BACKEND = flags.DEFINE_enum("backend", "local", ["local", "ray"], "where runs execute")
_MAX_PARALLEL = flags.DEFINE_integer("max_parallel", None, "runs at once (default: 1 local, unlimited on Ray)")
_RUN_ENV = flags.DEFINE_multi_string("run_env", [], "KEY=VALUE environment of every run; local: {slot} is the run's slot (e.g. CUDA_VISIBLE_DEVICES={slot})")
_PYTHON = flags.DEFINE_string("python", None, "interpreter for the launcher (default: this one locally, 'python' on Ray)")
_RETRY = flags.DEFINE_bool("retry_failed", False, "start failed runs again (default: report them)")
_DETACH = flags.DEFINE_bool("detach", False, "Ray: submit and return; the same command later follows the jobs")
_DRY = flags.DEFINE_bool("dry_run", False, "print what would run (argv, Ray job specs) and write nothing")
_PROGRESS = flags.DEFINE_float("progress_every_s", 60.0, "seconds between progress lines")
_KILL_AFTER = flags.DEFINE_float("kill_after_s", 600.0, "local: SIGKILL a run this long after asking it to stop")
_RAY_ADDRESS = flags.DEFINE_string("ray_address", None, "Ray dashboard address (http://HEAD:8265); default $RAY_ADDRESS")
_RAY_CPUS = flags.DEFINE_float("ray_num_cpus", None, "CPUs reserved for each run's job")
_RAY_GPUS = flags.DEFINE_float("ray_num_gpus", None, "GPUs reserved for each run's job")
_RAY_RES = flags.DEFINE_string("ray_resources", None, 'custom resources per job as JSON, e.g. \'{"TPU": 4}\'')
_RAY_MEM = flags.DEFINE_integer("ray_memory", None, "memory (bytes) reserved for each run's job")
_RAY_UPLOAD = flags.DEFINE_bool("ray_upload_code", True, "upload the repository as the jobs' working_dir (False: code is on the nodes)")
_RAY_RUNTIME_ENV = flags.DEFINE_string("ray_runtime_env", None, "extra Ray runtime_env as JSON (pip, env_vars, ...)")
_SET = flags.DEFINE_multi_string("set", [], "PATH=VALUE override of every run, under the sweep's own (e.g. --set=num_steps=2); VALUE a Python literal or a string")
flags.mark_flags_as_required(["config", "sweep"])


def _overrides(items):
    """``--set`` items as ``{path: value}`` (Python literals; anything else is a string)."""
    import ast

    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise app.UsageError(f"--set={it!r}: expected PATH=VALUE, e.g. --set=num_steps=2")
        try:
            out[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k] = v
    return out


def _env(items):
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise app.UsageError(f"--run_env={it!r}: expected KEY=VALUE")
        out[k] = v
    return out


def main(argv):
    del argv
    from harness_jax.sweeps import runner, spec
    from harness_jax.sweeps.local import LocalBackend

    if _SWEEP.value == "list":
        module = spec.load_config_module(spec.split_config_arg(_CONFIG.value)[0], runner.default_repo_root())
        for name in spec.sweep_names(module):
            print(name)
        return 0
    if not _WORKDIR.value:
        raise app.UsageError("--workdir is required (the sweep root)")
    ray = _BACKEND.value == "ray"
    python = _PYTHON.value or ("python" if ray else sys.executable)
    try:
        sw = runner.prepare(_CONFIG.value, _SWEEP.value, _WORKDIR.value, launcher=_LAUNCHER.value,
                            python=python, base=_overrides(_SET.value))
        if ray:
            from harness_jax.sweeps.ray_jobs import RayJobsBackend
            if os.path.isabs(spec.split_config_arg(sw.config_arg)[0]) and _RAY_UPLOAD.value:
                print(f"launch/sweep.py: warning: the config {sw.config_arg} is outside the repository that is "
                      "uploaded to the Ray jobs; the nodes must see that path", file=sys.stderr)
            address = _RAY_ADDRESS.value or os.environ.get("RAY_ADDRESS")
            if not address:
                raise app.UsageError("--backend=ray needs --ray_address=http://HEAD:8265 (or $RAY_ADDRESS)")
            backend = RayJobsBackend(address, sw.name, sw.repo_root, max_parallel=_MAX_PARALLEL.value or 0,
                                     env=_env(_RUN_ENV.value), num_cpus=_RAY_CPUS.value,
                                     num_gpus=_RAY_GPUS.value, resources=json_flag("ray_resources", _RAY_RES.value),
                                     memory=_RAY_MEM.value, upload_code=_RAY_UPLOAD.value,
                                     runtime_env=json_flag("ray_runtime_env", _RAY_RUNTIME_ENV.value))
        else:
            backend = LocalBackend(max_parallel=_MAX_PARALLEL.value or 1, env=_env(_RUN_ENV.value),
                                   cwd=sw.repo_root, kill_after_s=_KILL_AFTER.value)
        if _DRY.value:
            runner.dry_run(sw, backend, retry_failed=_RETRY.value)
            return 0
        result = runner.execute(sw, backend, retry_failed=_RETRY.value, detach=_DETACH.value,
                                progress_every_s=_PROGRESS.value)
    except spec.SweepError as e:
        print(f"launch/sweep.py: {e}", file=sys.stderr)
        return 2
    return result["exit_code"]


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
