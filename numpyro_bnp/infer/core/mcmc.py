"""What the library's MCMC kernels share as :class:`numpyro.infer.mcmc.MCMCKernel` s.

* :func:`chains_batched` / :func:`over_chains` — ``numpyro.infer.MCMC`` hands ``init`` one PRNG
  key per call (``chain_method="sequential"`` or ``"parallel"``) or a batch of keys, one per chain
  (``chain_method="vectorized"``); the kernel then maps its one-chain functions over the batch.
* :func:`with_deterministic` — the ``postprocess_fn`` of a kernel whose sample field holds the
  model's site values: the model's ``numpyro.deterministic`` sites are recomputed from them, so
  ``mcmc.get_samples()`` returns them as it does for NUTS.
* :func:`slice_sample` — one univariate slice-sampling update (Neal 2003), the exact update of a
  continuous scalar whose conditional has no closed form.
* :func:`report_saturation` — a kernel whose capacity was full in a sweep says so on the host
  (a ``RuntimeWarning``, or a :class:`SaturationError` with ``on_saturation="error"``), never
  silently, for one chain or a batch of vectorized chains.
"""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from numpyro import handlers
from numpyro.util import is_prng_key

from numpyro_bnp._checks import is_concrete
from numpyro_bnp.infer.core.model import trace_model

__all__ = [
    "ON_SATURATION",
    "SaturationError",
    "chains_batched",
    "on_saturation_option",
    "over_chains",
    "report_saturation",
    "slice_sample",
    "with_deterministic",
]

ON_SATURATION = ("warn", "error")

SLICE_MAX_STEPS = 32  # stepping-out limit per side (exact for any limit, Neal 2003 §4.1)
SLICE_MAX_SHRINK = 100  # shrinkage halves the bracket around the current point: never reached


def chains_batched(rng_key, engine):
    """True for a batch of keys ``(num_chains, 2)`` (vectorized chains), False for one key.

    :raises ValueError: naming ``rng_key`` and ``engine`` when it is neither.
    """
    if is_prng_key(rng_key):
        return False
    shape = jnp.shape(rng_key)
    typed = jax.dtypes.issubdtype(jnp.asarray(rng_key).dtype, jax.dtypes.prng_key)
    if (typed and len(shape) == 1) or (not typed and len(shape) == 2 and shape[1] == 2):
        return True
    raise ValueError(
        f"{engine}: rng_key must be one PRNG key or a batch of keys of shape (num_chains, 2), "
        f"got shape {shape}"
    )


def over_chains(fn, batched, in_axes=0):
    """``fn`` for one chain, mapped over the leading axis of a batch of chains when ``batched``."""
    return jax.vmap(fn, in_axes=in_axes) if batched else fn


def with_deterministic(model, model_args, model_kwargs, fn=None, *, engine="the MCMC kernel"):
    """A ``postprocess_fn``: ``fn(z)`` plus the model's deterministic sites at the values ``z``.

    The model is replayed with its sample sites substituted by ``z`` (traceable, so it runs
    inside the compiled collection loop of ``numpyro.infer.MCMC``); a model without deterministic
    sites costs nothing at run time. An error inside the model is re-raised as itself, with a
    note naming ``engine`` (:func:`~numpyro_bnp.infer.core.model.trace_model`).
    """

    def postprocess(z):
        out = dict(z if fn is None else fn(z))
        replay = handlers.substitute(model, data=out)
        tr = trace_model(
            replay, model_args, model_kwargs, f"{engine} (recomputing deterministic sites)"
        )
        for name, site in tr.items():
            if site["type"] == "deterministic" and name not in out:
                out[name] = site["value"]
        return out

    return postprocess


def slice_sample(key, x0, log_density, width, max_steps=SLICE_MAX_STEPS):
    """One univariate slice-sampling update of ``x0`` (Neal, *Slice sampling*, Ann. Statist.
    2003: stepping out, Fig. 3, then shrinkage, Fig. 5), which leaves the density
    ``∝ exp(log_density(x))`` invariant for any ``width > 0``.

    ``x0`` is a scalar, or an array of independent coordinates updated together: then
    ``log_density`` maps an array of ``x0``'s shape to the array of the coordinates' own log
    densities (elementwise independent targets, e.g. one per mixture component), ``width``
    broadcasts to it, and each coordinate has its own slice, bracket and draws; the loop runs
    until every coordinate is done, a done one kept as it is.

    Written as one ``while_loop`` over phases (0: step the left end out, 1: the right end, 2:
    shrink, 3: done) so that ``log_density`` is traced twice, not once per loop. The
    stepping-out budget ``max_steps`` is split at random between the ends, which keeps the
    update exact (Neal 2003 §4.1); the shrinkage always ends (the bracket closes in on ``x0``),
    ``SLICE_MAX_SHRINK`` only bounds the loop against rounding. A point where ``log_density``
    is NaN is outside the slice.
    """
    shape, dtype = jnp.shape(x0), jnp.result_type(x0)
    k_y, k_u, k_j, k_loop = random.split(key, 4)
    log_y = log_density(x0) - random.exponential(k_y, shape, dtype=dtype)
    width = jnp.broadcast_to(jnp.asarray(width, dtype), shape)
    lo = x0 - width * random.uniform(k_u, shape, dtype=dtype)
    steps_left = jnp.floor(max_steps * random.uniform(k_j, shape)).astype(jnp.int32)

    def body(c):
        phase, lo, hi, n_lo, n_hi, x, key, it = c
        key, sub = random.split(key)
        trial = lo + (hi - lo) * random.uniform(sub, shape, dtype=dtype)
        point = jnp.where(phase == 0, lo, jnp.where(phase == 1, hi, trial))
        inside = log_density(point) > log_y
        grow_lo = (phase == 0) & inside & (n_lo > 0)
        grow_hi = (phase == 1) & inside & (n_hi > 0)
        shrink = (phase == 2) & ~inside
        lo = jnp.where(grow_lo, lo - width, jnp.where(shrink & (trial < x0), trial, lo))
        hi = jnp.where(grow_hi, hi + width, jnp.where(shrink & (trial >= x0), trial, hi))
        accept = (phase == 2) & inside
        x = jnp.where(accept, trial, x)
        phase = jnp.where(
            phase == 0,
            jnp.where(grow_lo, 0, 1),
            jnp.where(phase == 1, jnp.where(grow_hi, 1, 2), jnp.where(accept | (phase == 3), 3, 2)),
        )
        return phase, lo, hi, n_lo - grow_lo, n_hi - grow_hi, x, key, it + 1

    zeros = jnp.zeros(shape, int)
    init = (zeros, lo, lo + width, steps_left, max_steps - 1 - steps_left, x0, k_loop, 0)
    init = tuple(jnp.asarray(v) for v in init)
    phase, *_, x, _, _ = lax.while_loop(
        lambda c: jnp.any(c[0] < 3) & (c[7] < 2 * max_steps + SLICE_MAX_SHRINK), body, init
    )
    return jnp.where(phase == 3, x, x0)


class SaturationError(RuntimeError):
    """A sweep needed more than the kernel's capacity (raised with ``on_saturation="error"``)."""


def on_saturation_option(value, engine):
    """Check the ``on_saturation`` option of ``engine``: ``"warn"`` or ``"error"``."""
    if value not in ON_SATURATION:
        raise ValueError(f"{engine}: on_saturation must be one of {ON_SATURATION}, got {value!r}")
    return value


def saturation_message(saturated, num_saturated, sweeps, *, engine, capacity, remedy):
    """The message of a saturated sweep, or ``None`` when no chain saturated in it.

    :param saturated: ``()`` or ``(C,)`` bool, the chains whose capacity was full in this sweep;
    :param num_saturated: the same shape, each chain's saturated sweeps so far;
    :param sweeps: the same shape, each chain's sweeps so far;
    :param str capacity: the capacity, in words (e.g. ``"the atom buffer (max_features=8)"``);
    :param str remedy: what to do about it.
    """
    saturated = np.atleast_1d(np.asarray(saturated, bool))
    if not saturated.any():
        return None
    count = np.atleast_1d(np.asarray(num_saturated))
    total = np.atleast_1d(np.asarray(sweeps))
    chains = np.flatnonzero(saturated)
    if saturated.size == 1:
        where = f"in {int(count[0])} of {int(total[0])} sweeps"
    else:
        parts = ", ".join(f"chain {c}: {int(count[c])} of {int(total[c])} sweeps" for c in chains)
        where = f"({parts})"
    return (
        f"{engine}: {capacity} was full {where}: those sweeps ran on a truncated model. "
        f"{remedy}. With on_saturation='error' the run stops instead; the field 'saturated' "
        "(extra_fields) marks each such sweep."
    )


def _saturation_callback(saturated, num_saturated, sweeps, *, on_saturation, **message_kwargs):
    """Host side of :func:`report_saturation`: raise, or warn when a saturated chain's count of
    saturated sweeps reaches a power of two (1, 2, 4, ...: the count stays current without a
    warning per sweep)."""
    message = saturation_message(saturated, num_saturated, sweeps, **message_kwargs)
    if message is None:
        return
    if on_saturation == "error":
        raise SaturationError(message)
    count = np.atleast_1d(np.asarray(num_saturated))[np.atleast_1d(np.asarray(saturated, bool))]
    if np.any((count & (count - 1)) == 0):
        warnings.warn(message, RuntimeWarning, stacklevel=2)


def report_saturation(saturated, num_saturated, sweeps, *, on_saturation, **message_kwargs):
    """Say on the host that a sweep saturated the capacity (inside a kernel's ``sample``).

    A host callback runs only in a sweep where some chain saturated (a ``lax.cond`` on the
    batch, outside any ``vmap`` of the chains): a run whose capacity suffices never leaves the
    device. There it warns (``on_saturation="warn"``; again each time a chain's count of
    saturated sweeps doubles) or raises :class:`SaturationError` (``"error"``; inside a compiled
    run NumPyro surfaces it as a ``RuntimeError`` carrying the message). The arguments are
    those of :func:`saturation_message`. Called outside ``jit`` (concrete values) it warns or
    raises at once.
    """
    host = functools.partial(_saturation_callback, on_saturation=on_saturation, **message_kwargs)
    if is_concrete(saturated):  # outside jit (a kernel's first state): on the host at once
        host(saturated, num_saturated, sweeps)
        return
    lax.cond(
        jnp.any(saturated),
        lambda: jax.debug.callback(host, saturated, num_saturated, sweeps),
        lambda: None,
    )
