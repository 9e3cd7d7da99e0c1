"""Data the tests build on first use, prepared by .ci/run in the background once the project is
installed (beside the test run, whose tests wait on each builder's lock or atomic rename):

* the packaged Qwen3.5 vocabulary's ``tokenizer.json`` (~5 s of CPU), which both xdist workers
  would otherwise build at the same moment;
* AppWorld's generated data tree of tests/envs/test_appworld_runtime.py (78 tasks, seed 0; a few
  minutes), when AppWorld is installed.

Prints one line per item with its seconds; exits non-zero when a builder fails.
"""
import time


def main() -> int:
    t0 = time.perf_counter()
    from harness_jax.sampling.tokenizer import cached_tokenizer_file
    print(f"tokenizer.json {cached_tokenizer_file()} in {time.perf_counter() - t0:.1f} s", flush=True)
    from harness_jax.envs import appworld
    if not appworld.runtime_paths().installed():
        print("AppWorld is not installed: no tree to build (scripts/appworld.sh install)", flush=True)
        return 1
    t1 = time.perf_counter()
    tasks = appworld.generate_tasks(n=78, seed=0)
    print(f"AppWorld tree {tasks[0].data['data_dir']} ({len(tasks)} tasks) in {time.perf_counter() - t1:.1f} s",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
