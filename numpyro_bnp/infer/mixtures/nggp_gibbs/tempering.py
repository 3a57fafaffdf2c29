r"""Tempered replicas (parallel tempering) for the collapsed Gibbs sampler of NGGP mixtures.

Geyer, *Markov chain Monte Carlo maximum likelihood*, Computing Science and Statistics 1991;
Earl & Deem, *Parallel tempering: theory, applications, and new perspectives*, PCCP 2005; the
swap schedule of Syed, Bouchard-Côté, Deligiannidis & Doucet, *Non-reversible parallel
tempering: a scalable highly parallel MCMC scheme*, JRSS B 2022 (``docs/nrm.md``, "Tempered
replicas"; the same design as the CRM slice sampler's,
:mod:`numpyro_bnp.infer.features.crm.tempering`).

Replica ``r`` of a ladder ``1 = β_0 > β_1 > … > β_{R-1} > 0`` targets

.. math::
    π_r(h, z, U) \propto p(h)\, p(z, U \mid h)\, p(X \mid z)^{β_r},

the collapsed marginal likelihood (components integrated out) raised to ``β_r``. The prior parts
are untouched, so steps 1 and 2 of the sweep (``log U`` and the hyper-parameter sites,
:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.sweep`) are the same for every replica; the label step
and the merge–split moves read the data only through ratios of marginal likelihoods,
``p(X_k ∪ {x_n}) / p(X_k) = p(x_n | X_k)``, so at ``β_r`` they use the predictives raised to
``β_r`` (:func:`~numpyro_bnp.infer.mixtures.nggp_gibbs.sweep._assign`'s ``beta``) and the marginal
likelihoods' part of the merge–split ratio multiplied by ``β_r``, in the proposal's forward draw
and in the reverse move's probability alike
(:func:`~numpyro_bnp.infer.mixtures.nggp_gibbs.split_merge.split_merge`'s ``beta``). Each replica's
sweep then leaves its ``π_r`` invariant.

All replicas of a chain are swept as one vectorized program (``jax.vmap`` over the replicas,
``β_r`` an array: the untempered replica's ``1.0 * log p`` is exact). Then adjacent replicas
``(r, r+1)`` exchange their whole states (labels, ``U``, hyper-parameter sites, keys) with
probability ``min(1, exp(Δ_r))``,

.. math::
    Δ_r = \log \frac{π_r(s_{r+1}) π_{r+1}(s_r)}{π_r(s_r) π_{r+1}(s_{r+1})}
        = (β_r - β_{r+1}) (ℓ(s_{r+1}) - ℓ(s_r)),

``ℓ = log p(X | z)`` the untempered collapsed log-likelihood (the state's ``log_likelihood``).
For components that are not conjugate the replicas keep them, replica ``r`` targets
``p(h) p(z, U | h) p(θ) f(X | z, θ)^{β_r}``
(:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.auxiliary`) and
``ℓ = log f(X | z, θ)``: the same exchange.
An exchange is its own inverse and the pairs of one sweep are disjoint, so the product of the
replicas' targets is kept and the first replica's marginal is the posterior. The ladder and the
alternation of the pairs are those of every tempered sampler of the library
(:mod:`numpyro_bnp.infer.core.tempering`).
"""

import jax
import jax.numpy as jnp
from jax import random

from numpyro_bnp.infer.core.tempering import exchange_adjacent, split_replicas, stack_replicas
from numpyro_bnp.infer.mixtures.nggp_gibbs.sweep import _init_chain, _step

__all__ = ["swap_replicas", "tempered_init_chain", "tempered_step"]


def tempered_init_chain(
    key, rows, labels, hyper, family, cfg, to_sites, numbers, betas, init=_init_chain
):
    """A chain of ``R = len(betas)`` replicas, each started by ``init`` (the collapsed
    sampler's :func:`~numpyro_bnp.infer.mixtures.nggp_gibbs.sweep._init_chain`, or that of
    :mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.auxiliary`: the sequential pass tempered at its
    ``β_r``; the
    same ``labels`` when given), one key each. ``saturated`` / ``num_saturated``: any replica's
    first pass."""
    dtype = family.dtype
    beta = jnp.asarray(betas, dtype)
    keys = random.split(key, len(betas))

    def one(k, b):
        return init(k, rows, labels, hyper, family, cfg, to_sites, numbers, b)

    cold, hot = split_replicas(jax.vmap(one)(keys, beta))
    saturated = jnp.any(cold.saturated) | jnp.any(hot.saturated)
    num_pairs = len(betas) - 1
    return cold._replace(
        saturated=saturated,
        num_saturated=saturated.astype(jnp.int32),
        replicas=hot,
        swap_rate=jnp.ones(num_pairs, dtype),
        swapped=jnp.zeros(num_pairs, bool),
    )


def swap_replicas(key, states, betas, parity):
    """Exchange adjacent replicas (module docstring): the even pairs for ``parity`` 0, the odd
    ones for 1.

    :param states: the ``R`` replicas' states, stacked (an ``NGGPMarginalGibbsState`` with a
        leading axis ``R`` and no ``replicas``), replica ``r`` at ``β_r``;
    :param betas: ``(R,)`` the inverse temperatures.
    :return: ``(states, swap_rate, swapped)``: the states after the exchanges (their
        ``log_joint`` the tempered target of their new replica), ``(R - 1,)`` the acceptance
        probability ``min(1, exp(Δ_r))`` of every pair at the swept states (proposed or not: its
        mean over draws estimates the pair's acceptance rate) and ``(R - 1,)`` bool, the pairs
        exchanged.
    """
    ell = states.log_likelihood
    betas = jnp.asarray(betas, ell.dtype)
    delta = (betas[:-1] - betas[1:]) * (ell[1:] - ell[:-1])
    source, rate, swapped = exchange_adjacent(key, delta, parity)
    moved = source != jnp.arange(ell.shape[0])
    states = jax.tree.map(lambda a: a[source], states)
    # the tempered target at the new replica: the likelihood's power changes from β_source
    log_joint = jnp.where(
        moved,
        states.log_joint + (betas - betas[source]) * states.log_likelihood,
        states.log_joint,
    )
    states = states._replace(log_joint=log_joint.astype(states.log_joint.dtype))
    return states, rate.astype(ell.dtype), swapped


def tempered_step(state, rows, family, cfg, to_sites, numbers, betas, step=_step):
    """One MCMC iteration of a tempered chain: one sweep of every replica at its ``β_r`` by
    ``step`` (one vectorized program; the collapsed sweep, or that of
    :mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.auxiliary`), then :func:`swap_replicas` (even pairs
    after even sweeps). The exchange's key comes from the first replica's stream (it moves with its
    state)."""
    beta = jnp.asarray(betas, family.dtype)
    cold = state._replace(replicas=None, swap_rate=None, swapped=None)
    stack = stack_replicas(cold, state.replicas)

    def one(s, b):
        return step(s, rows, family, cfg, to_sites, numbers, b)

    swept = jax.vmap(one)(stack, beta)
    key, key_swap = random.split(swept.rng_key[0])
    swept = swept._replace(rng_key=swept.rng_key.at[0].set(key))
    swept, rate, swapped = swap_replicas(key_swap, swept, beta, state.i % 2)
    saturated = jnp.any(swept.saturated)
    new, hot = split_replicas(swept)
    return new._replace(
        saturated=saturated,
        num_saturated=state.num_saturated + saturated.astype(jnp.int32),
        replicas=hot,
        swap_rate=rate,
        swapped=swapped,
    )
