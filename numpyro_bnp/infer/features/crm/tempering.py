r"""Tempered replicas (parallel tempering) for the CRM slice sampler of linear-Gaussian models.

Geyer, *Markov chain Monte Carlo maximum likelihood*, Computing Science and Statistics 1991;
Earl & Deem, *Parallel tempering: theory, applications, and new perspectives*, PCCP 2005; the
swap schedule of Syed, Bouchard-Côté, Deligiannidis & Doucet, *Non-reversible parallel
tempering: a scalable highly parallel MCMC scheme*, JRSS B 2022 (``docs/crm_slice.md``,
"Tempered replicas").

Replica ``r`` of a ladder ``1 = β_0 > β_1 > … > β_{R-1} > 0`` targets the posterior with the
likelihood raised to ``β_r``. The observations of every model of
:class:`~numpyro_bnp.infer.CRMSlice` are ``y_n ~ N(Σ_k X_nk ψ_k, σ² I)``, and

.. math::
    N(y \mid m, σ^2)^{β} \propto N(y \mid m, σ^2/β)

with a constant that does not depend on the latent state: replica ``r`` is the same model with
noise variance ``σ²/β_r`` (:func:`replica_numbers`), swept by the unchanged sweep. After the
sweep of every replica, adjacent replicas ``(r, r+1)`` exchange their whole states (atoms,
arrivals, marks, counts, traits, keys) with probability ``min(1, exp(Δ_r))``,

.. math::
    Δ_r = g_r(s_{r+1}) + g_{r+1}(s_r) - g_r(s_r) - g_{r+1}(s_{r+1})
        = (β_r - β_{r+1}) (ℓ(s_{r+1}) - ℓ(s_r)),

``g_r`` the part of replica ``r``'s log density that differs between replicas (the Normal
likelihood at its noise variance and the trait prior of the instantiated atoms) and ``ℓ`` the
untempered log-likelihood ``log p(y | X, ψ)`` at ``σ²`` (:func:`swap_replicas` evaluates every
``g_r`` at every state, :func:`cross_log_densities`, so that it also holds when replicas differ in
more than ``β``: a block of :class:`numpyro.infer.Gibbs`, whose hot replicas keep the noise and
trait prior of the end of warm-up). Each swap is a Metropolis move with a symmetric proposal (an
exchange is its own inverse) and the pairs of one sweep are disjoint, so the product of the
replicas' targets is kept; the first replica's marginal is the untempered posterior. The
ladder and the alternation of the pairs (Syed et al. 2022, "DEO") are those of every tempered
sampler of the library (:mod:`numpyro_bnp.infer.core.tempering`).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_bnp.infer.core.tempering import exchange_adjacent
from numpyro_bnp.infer.features.crm import target

__all__ = [
    "Replicas",
    "constrain_replicas",
    "cross_log_densities",
    "replica_mesh",
    "replica_numbers",
    "swap_replicas",
]

REPLICA_AXIS = "replicas"


class Replicas(NamedTuple):
    """The tempered replicas of a :class:`~numpyro_bnp.infer.CRMSliceState` (its ``replicas``).

    :ivar states: the ``R - 1`` hot replicas, a ``CRMSliceState`` with a leading axis ``R - 1``
        (replica ``r`` at ``states[r - 1]``; the first replica is the state itself);
    :ivar noise_var, trait_loc, trait_var: ``(R - 1, D)`` the Gaussian numbers of the hot
        replicas (a block of :class:`numpyro.infer.Gibbs`: those at the end of warm-up, see
        :func:`replica_numbers`; otherwise ``None``: each sweep tempers the current ones).
    """

    states: object
    noise_var: jnp.ndarray | None = None
    trait_loc: jnp.ndarray | None = None
    trait_var: jnp.ndarray | None = None


def replica_numbers(numbers, betas):
    """The Gaussian numbers of each replica: ``noise_var`` ``(R, D)`` ``σ²/β_r`` (a likelihood
    raised to ``β_r``), the trait prior repeated: a ``CRMTraitNumbers`` whose ``obs`` is shared."""
    betas = jnp.asarray(betas, numbers.noise_var.dtype)
    num = betas.shape[0]
    return numbers._replace(
        noise_var=numbers.noise_var[None] / betas[:, None],
        trait_loc=jnp.broadcast_to(numbers.trait_loc, (num, *numbers.trait_loc.shape)),
        trait_var=jnp.broadcast_to(numbers.trait_var, (num, *numbers.trait_var.shape)),
    )


def replica_mesh(num_replicas, shard=True):
    """A one-axis :class:`jax.sharding.Mesh` over the largest number of devices that divides
    ``num_replicas`` (``None`` with one device or ``shard=False``: no sharding)."""
    if not shard:
        return None
    devices = jax.devices()
    size = max(d for d in range(1, min(len(devices), num_replicas) + 1) if num_replicas % d == 0)
    if size == 1:
        return None
    return jax.sharding.Mesh(np.asarray(devices[:size]), (REPLICA_AXIS,))


def constrain_replicas(tree, mesh):
    """``tree`` (leading axis: the replicas) laid out over ``mesh``'s devices (XLA's SPMD
    partitioner then runs each device's replicas there); unchanged without a mesh."""
    if mesh is None:
        return tree
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(REPLICA_AXIS))
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)


def cross_log_densities(numbers, obs, x, traits, num_atoms):
    """``(G, L)``, ``(R, R)``: ``G[r, s] = g_r(state s)``, the Normal log-likelihood of state
    ``s`` at replica ``r``'s noise variance plus the log prior density of its instantiated
    traits under replica ``r``'s trait prior (:mod:`numpyro_bnp.infer.features.crm.target`), and
    ``L[r, s]`` its log-likelihood part.

    :param numbers: the replicas' numbers (:func:`replica_numbers`: ``(R, D)`` fields);
    :param obs: ``(N, D)`` or ``None``; :param x, traits, num_atoms: the states' ``(R, N, C)``
        counts, ``(R, C, D)`` traits and ``(R,)`` instantiated atoms.
    """
    dtype = traits.dtype
    num = traits.shape[0]

    def at_replicas(fn, state_args, replica_args):  # (R, R): replica r (rows), state s
        over_states = jax.vmap(fn, in_axes=(*(0,) * len(state_args), *(None,) * len(replica_args)))
        return jax.vmap(lambda *r: over_states(*state_args, *r))(*replica_args)

    if obs is None:
        lik = jnp.zeros((num, num), dtype)
    else:  # one residual per state, its column sums of squares at every replica's noise
        squares = jax.vmap(lambda a, b: jnp.sum((obs - a.astype(dtype) @ b) ** 2, 0))(x, traits)
        lik = at_replicas(
            lambda sq, var: target.log_likelihood_of_squares(sq, obs.shape[0], var),
            (squares,),
            (numbers.noise_var,),
        )
    prior = at_replicas(
        target.trait_log_prior,
        (traits, num_atoms),
        (numbers.trait_loc, numbers.trait_var),
    )
    return lik + prior, lik


def swap_replicas(key, states, numbers, obs, parity, *, count_site, trait_site):
    """Exchange adjacent replicas (module docstring): the even pairs for ``parity`` 0, the odd
    ones for 1.

    :param states: the ``R`` replicas' states, stacked (a ``CRMSliceState`` with a leading axis);
    :param numbers: their Gaussian numbers (``(R, D)`` fields); :param obs: the data or ``None``.
    :return: ``(states, swap_rate, swapped)``: the states after the exchanges (their
        ``log_likelihood`` and ``log_joint`` at their new replica), ``(R - 1,)`` the acceptance
        probability ``min(1, exp(Δ_r))`` of every pair at the swept states (proposed or not: its
        mean over draws estimates the pair's acceptance rate) and ``(R - 1,)`` bool, the pairs
        exchanged.
    """
    x, traits = states.z[count_site], states.z[trait_site]
    g, lik = cross_log_densities(numbers, obs, x, traits, states.num_atoms)
    num = g.shape[0]
    pair = jnp.arange(num - 1)
    # each difference compares two replicas' densities at one state: exactly 0 when they agree
    delta = (g[pair, pair + 1] - g[pair + 1, pair + 1]) + (g[pair + 1, pair] - g[pair, pair])
    source, rate, swapped = exchange_adjacent(key, delta, parity)
    index = jnp.arange(num)
    moved = source != index
    states = jax.tree.map(lambda a: a[source], states)
    log_lik = jnp.where(moved, lik[index, source], states.log_likelihood)
    log_joint = jnp.where(
        moved,
        states.log_joint - g[source, source] + g[index, source],
        states.log_joint,
    )
    states = states._replace(
        log_likelihood=log_lik.astype(states.log_likelihood.dtype),
        log_joint=log_joint.astype(states.log_joint.dtype),
    )
    return states, rate, swapped
