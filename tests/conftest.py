"""Shared test configuration.

Exactness checks run in float64: x64 is switched on for the whole suite. Tests of the float32
default use ``jax.enable_x64(False)`` locally.
"""

import os
import pathlib

# XLA compiles the suite's programs at optimisation level 0 (set before JAX starts its backend,
# inherited by the tests' subprocesses): compilation dominates the suite and takes about a quarter
# less time. The programs compute the same values: XLA's CPU backend uses no fast-math at any
# level. Users' programs keep XLA's default.
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0"]
).strip()

import jax
import pytest

jax.config.update("jax_enable_x64", True)

# XLA's compile time dominates most tests, and many compile the same functions: the same engine in
# several modules (JAX's in-memory caches are cleared after each one, below), in both pytest
# workers, and again in the docs' examples. JAX's persistent compilation cache keeps them on disk
# for the rest of the run (and for the next local run); the key is the compiled program itself.
jax.config.update(
    "jax_compilation_cache_dir", str(pathlib.Path(__file__).resolve().parents[1] / ".jax_cache")
)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)


@pytest.fixture(autouse=True, scope="module")
def _fresh_jax_caches():
    """Each test module starts and ends with empty JAX caches.

    Every compiled CPU executable keeps memory mappings alive; over the whole suite one worker
    process otherwise accumulates tens of thousands of them, reaches the kernel's limit on
    mappings per process (``vm.max_map_count``, 65,530 by default) and crashes inside XLA's
    compiler. Module-scoped fixtures share compiled functions within a module.
    """
    yield
    jax.clear_caches()
