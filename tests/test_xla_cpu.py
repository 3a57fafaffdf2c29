"""``enable_cpu_loop_kernels``: the XLA option reaches the compiler, existing flags are kept.

The option only acts in a process where JAX has not started, so the effect is checked in fresh
interpreters; the pytest process itself has started JAX long before.
"""

import os
import subprocess
import sys
import warnings

import jax
import pytest

from numpyro_bnp import enable_cpu_loop_kernels

# compiles a scan over rows of 256 floats and prints whether the option was added, how many loops
# XLA turned into single-kernel calls, and XLA_FLAGS
_CHILD = """
import os, sys
import numpyro_bnp
print(numpyro_bnp.enable_cpu_loop_kernels(*map(int, sys.argv[1:])))
import jax, jax.numpy as jnp
def f(x):
    return jax.lax.scan(lambda c, y: (jnp.tanh(c * y + 1.0), c), x[0], x)
text = jax.jit(f).lower(jnp.ones((8, 256))).compile().as_text()
print(text.count('xla_cpu_small_call="true"'))
print(os.environ["XLA_FLAGS"])
"""


def _child(*args, xla_flags=None):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return out[0] == "True", int(out[1]), out[2]


def test_the_limit_reaches_the_compiler():
    # XLA's own default differs between versions (jax 0.10 runs this loop kernel by kernel,
    # jax 0.12 as one kernel), so the check is the option's two ends: 64 MiB and 0 bytes
    added, kernels, flags = _child()
    assert added and kernels == 1
    assert flags == "--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=67108864"
    added, kernels, _ = _child(0)  # a limit of 0 bytes: no loop qualifies
    assert added and kernels == 0


def test_existing_flags_are_kept():
    # other flags and other backend options stay; the option joins the existing list
    added, kernels, flags = _child(xla_flags="--xla_cpu_enable_fast_math=false")
    assert added and kernels == 1
    assert flags.split() == [
        "--xla_cpu_enable_fast_math=false",
        "--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=67108864",
    ]
    added, _, flags = _child(
        xla_flags="--xla_backend_extra_options=xla_cpu_disable_loop_unrolling=true"
    )
    assert added
    assert flags == (
        "--xla_backend_extra_options=xla_cpu_disable_loop_unrolling=true,"
        "xla_cpu_small_while_loop_byte_threshold=67108864"
    )
    # a value the user set wins
    user = "--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=0"
    added, kernels, flags = _child(xla_flags=user)
    assert not added and kernels == 0 and flags == user


def test_after_jax_has_started_it_warns_and_changes_nothing():
    jax.numpy.ones(1).block_until_ready()
    before = os.environ.get("XLA_FLAGS")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="before any JAX computation"):
            enable_cpu_loop_kernels()
    assert os.environ.get("XLA_FLAGS") == before


@pytest.mark.parametrize("bad", [-1, 1.5, True, "64"])
def test_bad_limit_is_refused(bad):
    with pytest.raises(ValueError, match="max_bytes"):
        enable_cpu_loop_kernels(bad)
