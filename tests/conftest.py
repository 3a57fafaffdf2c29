"""Shared test configuration.

Exactness checks run in float64: x64 is switched on for the whole suite. Tests of the float32
default use ``jax.enable_x64(False)`` locally.
"""

import jax
import pytest

jax.config.update("jax_enable_x64", True)


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
