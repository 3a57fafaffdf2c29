"""Shared test configuration.

Exactness checks run in float64: x64 is switched on for the whole suite. Tests of the float32
default use ``jax.enable_x64(False)`` locally.
"""

import os
import pathlib
import subprocess
import sys


# XLA compiles the suite's programs at optimisation level 0 and, where this jaxlib still has them,
# with its older (non-MLIR) CPU fusion emitters (set before JAX starts its backend, inherited by
# the tests' subprocesses): compilation dominates the suite, and the two cut the whole suite on
# 2 cores from 21 to 15 minutes (jax 0.10). XLA's CPU backend uses no fast-math either way, so
# values agree to rounding. Users' programs keep XLA's defaults.
def _xla_knows(flag):
    """Whether this jaxlib accepts ``flag``: XLA aborts the process on a flag it does not know,
    so a child process asks."""
    probe = [sys.executable, "-c", "import jax; jax.devices()"]
    env = {**os.environ, "XLA_FLAGS": flag}
    return subprocess.run(probe, env=env, capture_output=True, check=False).returncode == 0


_OPT_LEVEL = "--xla_backend_optimization_level=0"
_OLD_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
_flags = os.environ.get("XLA_FLAGS", "").split()  # the tests' subprocesses inherit them
if _OPT_LEVEL not in _flags:  # every jaxlib knows it
    _flags.append(_OPT_LEVEL)
if _OLD_EMITTERS not in _flags and _xla_knows(_OLD_EMITTERS):
    _flags.append(_OLD_EMITTERS)
os.environ["XLA_FLAGS"] = " ".join(_flags)

import jax  # noqa: E402 (after XLA_FLAGS: the backend reads them once)
import pytest  # noqa: E402

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
