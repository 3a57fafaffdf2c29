"""XLA flags: ``enable_cpu_loop_kernels``'s option reaches the compiler, existing flags are kept;
importing ``numpyro_bnp`` on jax < 0.11 switches off the CPU scheduler that can deadlock there.

The flags only act in a process where JAX has not started, so the effect is checked in fresh
interpreters; the pytest process itself has started JAX long before.
"""

import os
import subprocess
import sys
import warnings

import jax
import pytest

from numpyro_bnp import enable_cpu_loop_kernels
from numpyro_bnp.xla_cpu import avoid_cpu_scheduler_hang

_SCHEDULER = "--xla_cpu_enable_concurrency_optimized_scheduler"
# the jax versions whose CPU runtime can deadlock, where importing numpyro_bnp adds the flag
_OLD_JAX = jax.__version_info__ < (0, 11)

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
    # the scheduler flag that the import adds on jax < 0.11 is checked by its own tests below
    flags = " ".join(f for f in out[2].split() if not f.startswith(_SCHEDULER))
    return out[0] == "True", int(out[1]), flags


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


def _import_flags(xla_flags=None):
    """``XLA_FLAGS`` after ``import numpyro_bnp`` in a fresh interpreter (``None``: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    code = "import os, numpyro_bnp; print(os.environ.get('XLA_FLAGS'))"
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    flag = out.stdout.strip()
    return None if flag == "None" else flag


def test_import_switches_off_the_scheduler_on_jax_0_10():
    off = f"{_SCHEDULER}=false"
    if _OLD_JAX:
        assert _import_flags() == off
        # other flags stay
        assert _import_flags("--xla_cpu_enable_fast_math=false").split() == [
            "--xla_cpu_enable_fast_math=false",
            off,
        ]
    else:  # jax 0.12 does not hang: nothing is added
        assert _import_flags() is None
        assert _import_flags("--xla_cpu_enable_fast_math=false") == (
            "--xla_cpu_enable_fast_math=false"
        )
    # a value the user set wins, on every version
    for user in (f"{_SCHEDULER}=true", f"--xla_cpu_enable_fast_math=false {_SCHEDULER}=false"):
        assert _import_flags(user) == user


def test_scheduler_after_jax_has_started(monkeypatch):
    # the import in this process came too late to act (JAX computed before, in other tests): on
    # jax < 0.11 a warning says so and XLA_FLAGS stays as it was
    jax.numpy.ones(1).block_until_ready()
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if _OLD_JAX:
            with pytest.raises(RuntimeWarning, match=f"{_SCHEDULER[2:]}=false.*before the first"):
                avoid_cpu_scheduler_hang()
        else:
            assert not avoid_cpu_scheduler_hang()
        assert os.environ["XLA_FLAGS"] == "--xla_cpu_enable_fast_math=false"
        monkeypatch.setenv("XLA_FLAGS", f"{_SCHEDULER}=true")  # the user's choice: no warning
        assert not avoid_cpu_scheduler_hang()
    assert os.environ["XLA_FLAGS"] == f"{_SCHEDULER}=true"
