r"""Parallel tempering pieces shared by the samplers with tempered replicas.

:class:`~numpyro_bnp.infer.CRMSlice` (:mod:`numpyro_bnp.infer.features.crm.tempering`) and
:class:`~numpyro_bnp.infer.NGGPMarginalGibbs`
(:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.tempering`) run
replicas at a ladder ``1 = β_0 > β_1 > … > β_{R-1} > 0`` of inverse temperatures (Geyer 1991;
Earl & Deem 2005) and exchange adjacent replicas after each sweep with probability
``min(1, exp(Δ_r))``, ``Δ_r`` the log ratio of the two replicas' targets at the exchanged and
the kept states (each sampler computes it). The pairs alternate deterministically: even pairs
``(0, 1), (2, 3), …`` after even sweeps, odd ones after odd sweeps (Syed, Bouchard-Côté,
Deligiannidis & Doucet, *Non-reversible parallel tempering*, JRSS B 2022, "DEO"), so a state
travels the ladder in ``O(R)`` sweeps rather than ``O(R²)``. An exchange is its own inverse and
the pairs of one sweep are disjoint: each is a Metropolis move that keeps the product of the
replicas' targets.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

__all__ = [
    "exchange_adjacent",
    "split_replicas",
    "stack_replicas",
    "temperature_ladder",
    "temperatures_option",
]


def temperature_ladder(temperatures, num_cells=None):
    """The inverse temperatures ``(β_0, …, β_{R-1})`` of ``temperatures``, or ``None``.

    :param temperatures: ``None`` (no tempering); an int ``R >= 2``: the geometric ladder
        ``β_r = exp(-r √(2 / (N D)))`` for ``N D = num_cells`` observed numbers (the spacing at
        which the expected log swap ratio of two replicas of a Gaussian likelihood is about -1,
        ``docs/crm_slice.md``; ``num_cells=None`` checks the int only); or a sequence of inverse
        temperatures ``1 = β_0 > β_1 > … > β_{R-1} > 0``.
    :raises ValueError: naming ``temperatures``, for anything else.
    """
    if temperatures is None:
        return None
    if isinstance(temperatures, bool | np.bool_):
        raise ValueError(
            f"temperatures must be None, an int >= 2 or a sequence, got {temperatures}"
        )
    if isinstance(temperatures, int | np.integer):
        if temperatures < 2:
            raise ValueError(
                f"temperatures must be an int >= 2 (the number of replicas), got {temperatures} "
                "(None runs without tempered replicas)"
            )
        if num_cells is None:
            return None
        step = math.sqrt(2.0 / max(int(num_cells), 1))
        return tuple(math.exp(-r * step) for r in range(int(temperatures)))
    try:
        betas = np.asarray(temperatures, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"temperatures must be None, an int >= 2 or a sequence of inverse temperatures, "
            f"got {temperatures!r}"
        ) from None
    if betas.ndim != 1 or betas.size < 2:
        raise ValueError(
            "temperatures must be a sequence of at least 2 inverse temperatures "
            f"1 = β_0 > β_1 > ... > 0, got {temperatures!r}"
        )
    if not np.all(np.isfinite(betas)):
        raise ValueError(f"temperatures must be finite, got {temperatures!r}")
    if betas[0] != 1.0:
        raise ValueError(
            f"temperatures must start at 1 (the untempered replica, whose draws are the "
            f"samples), got {betas[0]}"
        )
    if np.any(betas <= 0):
        raise ValueError(f"temperatures must be > 0, got {temperatures!r}")
    if np.any(np.diff(betas) >= 0):
        raise ValueError(f"temperatures must be strictly decreasing, got {temperatures!r}")
    return tuple(float(b) for b in betas)


def temperatures_option(temperatures):
    """What a kernel keeps of its ``temperatures`` argument: ``None``, an int ``R`` (its ladder
    waits for the data's size, :func:`temperature_ladder` at ``init``) or the checked ladder.

    :raises ValueError: naming ``temperatures`` (:func:`temperature_ladder`).
    """
    temperature_ladder(temperatures)
    if temperatures is None or isinstance(temperatures, int | np.integer):
        return None if temperatures is None else int(temperatures)
    return temperature_ladder(temperatures)


def exchange_adjacent(key, delta, parity):
    """Which adjacent replicas exchange their states (module docstring).

    :param delta: ``(R - 1,)`` the log acceptance ratios ``Δ_r`` of the pairs ``(r, r + 1)``
        (NaN: never exchanged); :param parity: 0 proposes the even pairs, 1 the odd ones.
    :return: ``(source, rate, swapped)``: ``(R,)`` the replica whose state each replica takes,
        ``(R - 1,)`` the acceptance probabilities ``min(1, exp(Δ_r))`` of every pair (proposed
        or not: its mean over sweeps estimates the pair's acceptance rate) and ``(R - 1,)``
        bool, the pairs exchanged.
    """
    num = delta.shape[0] + 1
    pair = jnp.arange(num - 1)
    rate = jnp.where(jnp.isnan(delta), 0.0, jnp.exp(jnp.minimum(delta, 0.0)))
    log_u = jnp.log(random.uniform(key, (num - 1,), delta.dtype))
    swapped = (pair % 2 == parity) & (log_u < delta)
    index = jnp.arange(num)
    up = jnp.concatenate([swapped, jnp.zeros(1, bool)])  # replica r takes r + 1's state
    down = jnp.concatenate([jnp.zeros(1, bool), swapped])  # replica r takes r - 1's state
    source = jnp.where(up, index + 1, jnp.where(down, index - 1, index))
    return source, rate, swapped


def stack_replicas(first, rest):
    """One pytree with a leading replica axis: ``first`` then the stacked ``rest``."""
    return jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)


def split_replicas(states):
    """``(the first replica, the others)`` of states with a leading replica axis."""
    return jax.tree.map(lambda a: a[0], states), jax.tree.map(lambda a: a[1:], states)
