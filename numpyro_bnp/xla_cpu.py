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

With jax 0.10 (jaxlib 0.10.x, the version pip installs on Python 3.11), XLA's CPU runtime can
deadlock: a compiled program that runs many independent operations at once (tempered replicas
of :class:`~numpyro_bnp.infer.CRMSlice` with vectorized chains, ``AcceleratedIBPGibbs`` sweeps
in a ``lax.scan``) sometimes never returns, every thread idle and the caller waiting in
``block_until_ready``. It happens at random, after a few or a few dozen sweeps. With XLA's
concurrency-optimized scheduler (which orders the kernels of a program) switched off,
``XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false``, none of the runs tried
hangs, at no measurable cost in speed. jax 0.12 does not hang. So on jax older than 0.11, importing
``numpyro_bnp`` adds that flag to ``XLA_FLAGS`` (:func:`avoid_cpu_scheduler_hang`) unless the
variable already sets it (to either value). It takes effect only if JAX has not yet computed
anything in the process; otherwise a ``RuntimeWarning`` says to import ``numpyro_bnp`` (or set
the flag) before the first JAX computation.
"""

import os
import warnings

__all__ = ["avoid_cpu_scheduler_hang", "enable_cpu_loop_kernels"]

_OPTION = "xla_cpu_small_while_loop_byte_threshold"
_EXTRA = "--xla_backend_extra_options="
_SCHEDULER = "xla_cpu_enable_concurrency_optimized_scheduler"


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


def avoid_cpu_scheduler_hang():
    """Switch off XLA's concurrency-optimized CPU scheduler on jax < 0.11, where it can deadlock.

    ``import numpyro_bnp`` calls it (see the module's description); a program need not. On jax
    older than 0.11 it appends ``--xla_cpu_enable_concurrency_optimized_scheduler=false`` to the
    ``XLA_FLAGS`` environment variable of this process, unless the variable already sets that
    flag (the user's value is kept). XLA reads its flags when JAX first computes: if JAX already
    has, nothing changes and a ``RuntimeWarning`` says to import ``numpyro_bnp`` (or set the flag
    in ``XLA_FLAGS``) before the first JAX computation.

    :return: ``True`` if the flag was added, otherwise ``False``.
    """
    import jax

    if jax.__version_info__ >= (0, 11) or _SCHEDULER in os.environ.get("XLA_FLAGS", ""):
        return False
    if _backends_initialized():
        warnings.warn(
            f"with jax {jax.__version__}, XLA's CPU runtime can hang forever unless "
            f"XLA_FLAGS contains --{_SCHEDULER}=false; JAX has already computed in this process, "
            "so numpyro_bnp could not set it: import numpyro_bnp (or set XLA_FLAGS) before the "
            "first JAX computation",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    flags = os.environ.get("XLA_FLAGS", "").split()
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"--{_SCHEDULER}=false"])
    return True
