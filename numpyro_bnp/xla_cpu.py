"""XLA settings for runs on CPU; they must be made before JAX's first computation.

On CPU, XLA runs a compiled program as a sequence of small kernels ("thunks"); a ``while`` loop
(``lax.scan``, ``lax.fori_loop``) dispatches its body's kernels at every iteration, a fraction of a
microsecond each. Streaming filters iterate over dozens of feature slots per observation with a few
hundred flops per iteration, so that dispatch, not arithmetic, sets their speed. XLA can instead
compile a small loop, with everything it calls, into one kernel; it does so for loops whose
operations access less than ``xla_cpu_small_while_loop_byte_threshold`` bytes per iteration (by
XLA's cost model), passed as
``XLA_FLAGS=--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=N``. With jax
0.10 the default is about 1 kB, which a loop whose body works on vectors of a few dozen floats
already exceeds; jax 0.12 compiles such loops into kernels by default.
:func:`enable_cpu_loop_kernels` raises that limit for this process. Loops that sort, scatter or
call library kernels (large matrix products) are never compiled this way.
"""

import os
import warnings

__all__ = ["enable_cpu_loop_kernels"]

_OPTION = "xla_cpu_small_while_loop_byte_threshold"
_EXTRA = "--xla_backend_extra_options="


def _backends_initialized():
    try:
        from jax._src.xla_bridge import backends_are_initialized
    except ImportError:  # pragma: no cover - a JAX without this helper: assume not yet
        return False
    return backends_are_initialized()


def enable_cpu_loop_kernels(max_bytes=1 << 26):
    """Let XLA compile each CPU ``while`` loop accessing under ``max_bytes`` into one kernel.

    Call it at the start of a program, before JAX computes anything (like
    ``numpyro.set_host_device_count``): XLA reads its flags once, when JAX first uses the CPU. It
    appends the option to the ``XLA_FLAGS`` environment variable of this process, so it affects
    every JAX computation in the process, not only this library's. The R-IBP filter runs about
    twice as fast with it on jax 0.10 (``docs/ribp.md``, "Speed"). Each computation agrees with
    XLA's default to float rounding; a long sequence of decisions (births in
    ``RIBPFilter.refine``) can then take another path.

    :param int max_bytes: the most bytes a loop's operations may access per iteration (XLA's cost
        model) for it to be compiled into one kernel (default 64 MiB).
    :return: ``True`` if the option was added; ``False`` if ``XLA_FLAGS`` already sets it (the
        existing value is kept) or JAX has already started (a warning says so).
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"max_bytes must be a non-negative integer, got {max_bytes!r}")
    if _backends_initialized():
        warnings.warn(
            "enable_cpu_loop_kernels() has no effect: JAX has already run a computation in this "
            "process; call it before any JAX computation",
            stacklevel=2,
        )
        return False
    flags = os.environ.get("XLA_FLAGS", "").split()
    setting = f"{_OPTION}={max_bytes}"
    for i, flag in enumerate(flags):
        if flag.startswith(_EXTRA):
            if _OPTION in flag:
                return False
            options = flag[len(_EXTRA) :]
            flags[i] = _EXTRA + (f"{options},{setting}" if options else setting)
            break
    else:
        flags.append(_EXTRA + setting)
    os.environ["XLA_FLAGS"] = " ".join(flags)
    return True
