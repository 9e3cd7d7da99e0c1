"""harness_jax: training LLM agents together with their harnesses, in JAX."""
__version__ = "0.1.0"
