"""AppWorld on its real runtime: AppWorld's own environment servers in their own virtual
environment (``scripts/appworld.sh``), generated task data in AppWorld's ``data/`` format (or the
real data bundle), the code-cell protocol, and TGC/SGC.

    from harness_jax.envs import appworld
    tasks = appworld.generate_tasks(n=30, seed=0)   # Task objects backed by a generated data tree
    cells = appworld.oracle_cells(tasks[0])          # the scripted solution, as code cells
    env = appworld.AppWorldEnv()
    env.reset(tasks[0])
    res = env.step("```python\\n" + cells[0] + "\\n```")   # .observation / .reward / .done / .info
    env.evaluate()                                    # AppWorld's evaluator: success, failures...

Real data: ``appworld.load_tasks("/path/to/data", dataset="dev")`` (or ``load_split`` through
the registry with ``data_dir=...``). Nothing here imports ``appworld`` itself; everything that
needs it runs in the AppWorld venv behind the service (``venv_side/``).
"""
from harness_jax.envs.appworld.data import (ENV_NAME, load_bundle_split, load_tasks, make_task,
                                            scenario_map, scenario_of)
from harness_jax.envs.appworld.env import AppWorldEnv
from harness_jax.envs.appworld.generator import (build_tree, generate_tasks, list_templates,
                                                 oracle_cells, wrong_cells)
from harness_jax.envs.appworld.protocol import (FUNCTION_INSTRUCTION, REACT_INSTRUCTION,
                                                TOOL_NAME, TOOL_SPECS, extract_code, task_prompt)
from harness_jax.envs.appworld.service import (AppWorldBusy, AppWorldTaskError,
                                               AppWorldUnavailable, EpisodeConnection,
                                               ServiceClient, runtime_paths, start_service)


def service_available() -> bool:
    """True when the AppWorld service answers (tests and the registry use it)."""
    return ServiceClient().available()


def load_split(split: str, n: int = 30, seed: int = 0, data_dir=None, **kw) -> list:
    """Registry loader: ``data_dir`` (a real AppWorld data tree) gives its datasets' split
    (``data.load_bundle_split``); otherwise ``n`` generated tasks from the split's own seed
    stream (``registry.split_seed``), so splits never share a generator seed."""
    if data_dir is not None:
        return load_bundle_split(split, data_dir, **kw)
    from harness_jax.envs import splits
    return generate_tasks(n=n, seed=splits.split_seed(split, seed), split=split, **kw)


def tgc_sgc(results, ks=(1, 3)) -> dict:
    """AppWorld's metrics from ``[(task, success), ...]`` (a task may appear k times, one per
    sample): TGC and SGC in percent as ``appworld evaluate`` reports them (a scenario counts only
    if all its tasks succeed), averaged over the k runs (run r = every task's r-th sample), and
    Pass@k / Avg@k over the samples of each task."""
    from harness_jax import scoring as metrics
    by_task: dict = {}
    scen: dict = {}
    for t, ok in results:
        tid = t.data["task_id"]
        by_task.setdefault(tid, []).append(bool(ok))
        scen[tid] = t.data.get("scenario_id") or scenario_of(tid)
    if not by_task:
        raise ValueError("tgc_sgc: no results")
    runs = min(len(v) for v in by_task.values())
    per_run = [metrics.tgc_sgc({tid: v[r] for tid, v in by_task.items()}, scen)
               for r in range(runs)]
    summary = metrics.summarize([{"task_id": tid, "success": ok} for tid, v in by_task.items()
                                 for ok in v], ks)
    return {"tgc": 100.0 * sum(m["tgc"] for m in per_run) / runs,
            "sgc": 100.0 * sum(m["sgc"] for m in per_run) / runs,
            "tasks": len(by_task), "scenarios": len(set(scen.values())), "runs": runs,
            "pass_at": summary.pass_at, "avg_at": summary.avg_at}


__all__ = [
    "ENV_NAME", "AppWorldBusy", "AppWorldEnv", "AppWorldTaskError", "AppWorldUnavailable",
    "EpisodeConnection", "FUNCTION_INSTRUCTION",
    "REACT_INSTRUCTION", "ServiceClient", "TOOL_NAME", "TOOL_SPECS", "build_tree",
    "extract_code", "generate_tasks", "list_templates", "load_bundle_split", "load_split",
    "load_tasks", "make_task", "oracle_cells", "runtime_paths", "scenario_map", "scenario_of",
    "service_available", "start_service", "task_prompt", "tgc_sgc", "wrong_cells",
]


from harness_jax.envs import registry as _registry  # noqa: E402
from harness_jax.envs.appworld.registration import SPEC as _SPEC  # noqa: E402

_registry.register(_SPEC)
