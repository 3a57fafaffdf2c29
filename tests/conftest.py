"""Shared test configuration.

Exactness checks run in float64: x64 is switched on for the whole suite. Tests of the float32
default use ``jax.enable_x64(False)`` locally.
"""

import jax

jax.config.update("jax_enable_x64", True)
