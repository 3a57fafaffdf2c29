r"""Collapsed row moves of :class:`~numpyro_bnp.infer.CRMSlice`: every trait integrated out.

For the beta–Bernoulli (IBP) linear-Gaussian model of the slice sampler (Zhu, Bouchard-Côté &
Campbell, *Slice sampling for general completely random measures*, UAI 2020, Eq. 11;
``docs/crm_slice.md``, "Collapsed rows"), with one noise variance ``σ²`` and one trait prior
``N(μ_0, σ_0² I)`` for all columns. The count step given the traits moves one entry at a time
with every trait fixed, so a feature's trait and the rows that use it can only change together
by small steps: from an empty start the chain climbs for hundreds of sweeps to a posterior mode
the collapsed sampler of Doshi-Velez & Ghahramani (2009) reaches in tens. This move updates
``X`` given the atoms ``θ`` and the slice variables ``U`` with all traits ``ψ`` integrated out:

.. math::
    P(X_{nk} = 1 \mid X_{-nk}, θ, U, Y) \propto θ_k\, N(y_n; x M_{-n}, (σ^2 + x Σ_{-n} x^\top) I)
    \,/\, ξ(k_n(x)), \qquad k \le K_n,

``x`` the row with ``X_nk = 1`` (against ``1 - θ_k`` and the row with ``X_nk = 0``),
``(Σ_{-n}, M_{-n})`` the posterior of the traits given the other rows
(:mod:`numpyro_bnp.infer.features.linear_gaussian`; an atom no other row uses has its prior),
``k_n(x)``
the row's last used atom and ``ξ(k) = e^{-k/Δ_ξ}`` (paper Eq. 25). The rows are visited in order,
each row's entries ``k = 1..K*`` in order, as in the accelerated sampler: remove the row from the
posterior (a rank-one downdate), flip its entries with the predictive updated in ``O(K + D)`` per
flip, add it back. An unused atom revealed within the row's slice is a birth, its trait
integrated out: at any dimension the row's fit against the Occam factor decides it. The rows'
moves are Gibbs updates of ``p(X | θ, U, Y)``; the kernel then draws ``ψ | X, Y``, so the pair
is a blocked Gibbs update of ``(X, ψ)`` and nothing that conditions on ``ψ`` sees the old traits.

Round-off: ``XᵀX`` and ``XᵀY`` are kept by additions and ``(Σ, M)`` recomputed from them every
``refresh_every`` rows.
"""

import jax
import jax.numpy as jnp
from jax import lax, random

from numpyro_bnp.infer.features.linear_gaussian import (
    add_row,
    entry_moments,
    feature_posterior,
    posterior_covariance,
    predictive_log_density,
    prior_for_unshared,
    remove_row,
    set_entry,
)

__all__ = ["collapsed_rows"]


def collapsed_rows(
    key,
    x,
    obs,
    theta,
    slice_atoms,
    stop,
    *,
    atoms,
    noise_var,
    trait_loc,
    trait_var,
    xi_scale,
    refresh_every,
):
    """One pass over the rows (module docstring).

    :param key: PRNG key.
    :param x: ``(N, C)`` binary counts; :param obs: ``(N, D)`` observations ``Y``;
    :param theta: ``(C,)`` atoms; :param slice_atoms: ``(N,)`` slice bounds ``K_n``;
    :param stop: ``K* = max_n K_n`` (no later atom is visited).
    :param atoms: the :class:`~numpyro_bnp.infer.features.crm.atoms.AtomSeries` (Bernoulli counts).
    :param noise_var: ``σ²``; :param trait_loc: ``μ_0``, a scalar or ``(D,)``;
    :param trait_var: ``σ_0²``; scalars.
    :param float xi_scale: ``Δ_ξ``; :param int refresh_every: rows between recomputations of
        the posterior.
    :return: the new ``x`` ``(N, C)``.
    """
    num_rows, cap = x.shape
    dtype, dim = atoms.dtype, obs.shape[-1]
    noise_sd = jnp.sqrt(noise_var)
    index = jnp.arange(1, cap + 1, dtype=jnp.int32)
    on, off = jnp.ones(cap, jnp.int32), jnp.zeros(cap, jnp.int32)
    log_odds = atoms.entry_logh(on, theta) - atoms.entry_logh(off, theta)  # log θ/(1 - θ)
    unif = random.uniform(key, (num_rows, cap), dtype)

    def row(n, carry):
        xf, gram, xty, cov, mean = carry
        zn, yn = xf[n], obs[n]
        cov, mean = remove_row(cov, mean, zn, yn, noise_sd)
        shared = jnp.diagonal(gram) - zn > 0
        cov, mean = prior_for_unshared(cov, mean, shared, trait_var, trait_loc)

        def flip(k, c):
            zn, s, v, r = c
            now = zn[k]
            moments = entry_moments(k, now, s, v, r, cov, mean)
            (v0, r0), (v1, r1) = moments
            # -log ξ(k_n(x)): the last atom other than k, or k itself when it is later
            other = jnp.max(jnp.where((zn > 0) & (index != k + 1), index, 0))
            slice_term = (jnp.maximum(k + 1, other) - other) / xi_scale
            logit = (
                log_odds[k]
                + slice_term
                + predictive_log_density(r1 @ r1, v1, dim)
                - predictive_log_density(r0 @ r0, v0, dim)
            )
            new = (unif[n, k] < jax.nn.sigmoid(logit)).astype(dtype)
            new = jnp.where(k + 1 <= slice_atoms[n], new, now)
            return zn.at[k].set(new), *set_entry(k, now, new, s, cov, moments)

        s = cov @ zn
        init = (zn, s, noise_var + zn @ s, yn - zn @ mean)
        zn_new, *_ = lax.fori_loop(0, stop, flip, init)
        cov, mean = add_row(cov, mean, zn_new, yn, noise_sd)
        gram = gram + jnp.outer(zn_new, zn_new) - jnp.outer(zn, zn)
        xty = xty + jnp.outer(zn_new - zn, yn)
        return xf.at[n].set(zn_new), gram, xty, cov, mean

    def block(b, carry):
        xf, gram, xty = carry
        mean, chol = feature_posterior(gram, xty, noise_var, trait_var, trait_loc)
        lo = b * refresh_every
        hi = jnp.minimum(lo + refresh_every, num_rows)
        carry = (xf, gram, xty, posterior_covariance(chol), mean)
        xf, gram, xty, _, _ = lax.fori_loop(lo, hi, row, carry)
        return xf, gram, xty

    xf = x.astype(dtype)
    num_blocks = -(-num_rows // refresh_every)
    xf, _, _ = lax.fori_loop(0, num_blocks, block, (xf, xf.T @ xf, xf.T @ obs))
    return xf.astype(x.dtype)
