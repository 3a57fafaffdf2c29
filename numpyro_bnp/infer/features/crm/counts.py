r"""The count step of :class:`~numpyro_bnp.infer.CRMSlice` for the models with a count site.

Step 3 of the sweep of the slice sampler (Zhu, Bouchard-Côté & Campbell, *Slice sampling for
general completely random measures*, UAI 2020; :mod:`numpyro_bnp.infer.features.crm.sweep` and
``docs/crm_slice.md``, "What one sweep does") for the Normal latent trait models and the
prior-only ones: given the slice variables, row ``n`` may use the atoms ``k <= K_n`` only, and the
slice density (paper Eq. 25) adds the factor ``1/ξ(k_n)`` of the row's last used atom ``k_n``,
``ξ(k) = exp(-k / Δ_ξ)``, so that

.. math::
    P(X_{nk} = x \mid \cdot) \propto h(x \mid θ_k)\, f(y_n \mid X_n, ψ) / ξ(k_n(x)),
    \qquad k \le K_n,

``k_n(x)`` the last atom of row ``n`` with ``X_nk = x`` (the factor cancels when a later atom is
used). :func:`update_counts` visits the atoms in order, all rows at once: a two-point Gibbs draw
for Bernoulli counts, a ±1 Metropolis step for Poisson and negative-binomial ones; then
:func:`swap_moves`, exchange moves ``X_nj ↔ X_nk`` per row (not in the paper). The residual
``y - Xψ`` follows every change. The topic model's step 3, a Gibbs pass over the topic of every
word, is :func:`numpyro_bnp.infer.features.crm.topics.allocate_tokens`.

The count law ``h`` is that of the :class:`~numpyro_bnp.infer.features.crm.atoms.AtomSeries`
``atoms``;
``noise_var`` is ``σ²`` ``(D,)`` of the Normal observations, ``None`` for a prior-only model.
"""

import jax
import jax.numpy as jnp
from jax import lax, random


def update_counts(
    key, x, residual, traits, theta, slice_atoms, stop, *, atoms, noise_var, xi_scale, n_swaps
):
    """Update ``X_nk`` for ``k <= K_n`` (all rows at once, atoms in order), then :func:`swap_moves`.

    :param x: ``(N, C)`` counts; :param residual: ``(N, D)`` ``y - Xψ`` (``(N, 0)`` without
    data); :param traits: ``(C, D)``; :param theta: ``(C,)`` atoms; :param slice_atoms: ``(N,)``
    ``K_n``; :param stop: ``K* = max_n K_n`` (no later atom is visited); :param atoms, noise_var:
    see the module docstring; :param xi_scale: ``Δ_ξ``; :param int n_swaps: exchange moves per
    row (:class:`~numpyro_bnp.infer.CRMSlice`). :return: the new ``x`` and ``residual``.
    """
    used = x > 0
    later = jnp.flip(jnp.cumsum(jnp.flip(used, 1), 1), 1) - used  # used atoms after k
    has_later = later > 0
    observed, dtype = noise_var is not None, atoms.dtype
    inv_var = 1.0 / noise_var if observed else None
    delta = xi_scale
    bernoulli = atoms.likelihood == "bernoulli"

    def loglik(res, change, trait):  # log f(y_n | X_n + change e_k) - const, per row
        if not observed:
            return jnp.zeros(res.shape[0], dtype)
        r = res - change[:, None] * trait
        return -0.5 * jnp.sum(r * r * inv_var, axis=-1)

    def body(j, carry):
        x, residual, previous, key = carry
        key, k_prop, k_acc = random.split(key, 3)
        k = j + 1
        x_old = lax.dynamic_index_in_dim(x, j, axis=1, keepdims=False)
        trait, th = traits[j], theta[j]
        later_j = lax.dynamic_index_in_dim(has_later, j, axis=1, keepdims=False)

        def neg_log_xi(value):  # -log ξ(k_n(x)); cancels when a later atom is used
            last = jnp.where(value > 0, k, previous)
            return jnp.where(later_j, 0.0, last / delta)

        if bernoulli:
            one, zero = jnp.ones_like(x_old), jnp.zeros_like(x_old)
            logit = (
                jnp.log(th)
                - jnp.log1p(-th)
                + loglik(residual, (one - x_old).astype(dtype), trait)
                - loglik(residual, (zero - x_old).astype(dtype), trait)
                + neg_log_xi(one)
                - neg_log_xi(zero)
            )
            u = random.uniform(k_acc, x_old.shape, dtype)
            x_new = (u < jax.nn.sigmoid(logit)).astype(x.dtype)
        else:
            step = jnp.where(random.bernoulli(k_prop, 0.5, x_old.shape), 1, -1)
            x_prop = jnp.maximum(x_old + step, 0)
            change = (x_prop - x_old).astype(dtype)
            log_ratio = (
                atoms.entry_logh(x_prop, th)
                - atoms.entry_logh(x_old, th)
                + loglik(residual, change, trait)
                - loglik(residual, jnp.zeros_like(change), trait)
                + neg_log_xi(x_prop)
                - neg_log_xi(x_old)
            )
            u = random.uniform(k_acc, x_old.shape, dtype)
            ok = (x_old + step >= 0) & (jnp.log(u) < log_ratio)
            x_new = jnp.where(ok, x_prop, x_old).astype(x.dtype)
        x_new = jnp.where(k <= slice_atoms, x_new, x_old)
        if observed:
            residual = residual - (x_new - x_old).astype(dtype)[:, None] * trait
        previous = jnp.where(x_new > 0, k, previous)
        x = lax.dynamic_update_index_in_dim(x, x_new, j, axis=1)
        return x, residual, previous, key

    previous = jnp.zeros(x.shape[0], jnp.int32)
    key, key_swap = random.split(key)
    x, residual, _, _ = lax.fori_loop(0, stop, body, (x, residual, previous, key))
    return swap_moves(
        key_swap,
        x,
        residual,
        traits,
        theta,
        slice_atoms,
        atoms=atoms,
        noise_var=noise_var,
        xi_scale=xi_scale,
        n_swaps=n_swaps,
    )


def swap_moves(
    key, x, residual, traits, theta, slice_atoms, *, atoms, noise_var, xi_scale, n_swaps
):
    """Exchange moves: per row, propose swapping ``X_nj`` and ``X_nk`` for ``j, k <= K_n``.

    Not in the paper: one-entry Gibbs cannot move a row from an atom to a near-duplicate of
    it (both intermediate states cost ``||ψ||²/2σ²``), so posterior modes with duplicated
    traits trap the sampler. The pair ``(j, k)`` is uniform on ``{1..K_n}²`` (a symmetric
    proposal given ``U``); the Metropolis ratio is the ratio of ``h``, ``f`` and
    ``1/ξ(k_n)``, so the target is unchanged.
    """
    if n_swaps == 0:
        return x, residual
    n = x.shape[0]
    rows = jnp.arange(n)
    index = jnp.arange(1, x.shape[1] + 1, dtype=jnp.int32)
    observed, dtype = noise_var is not None, atoms.dtype
    inv_var = 1.0 / noise_var if observed else None

    def move(_, carry):
        x, residual, key = carry
        key, k_j, k_k, k_acc = random.split(key, 4)
        span = jnp.maximum(slice_atoms, 1).astype(dtype)
        j = jnp.floor(random.uniform(k_j, (n,), dtype) * span).astype(jnp.int32)
        k = jnp.floor(random.uniform(k_k, (n,), dtype) * span).astype(jnp.int32)
        j, k = jnp.minimum(j, slice_atoms - 1), jnp.minimum(k, slice_atoms - 1)
        xj, xk = x[rows, j], x[rows, k]
        x_new = x.at[rows, j].set(xk).at[rows, k].set(xj)
        ok = (slice_atoms > 0) & (j != k) & (xj != xk)
        th_j, th_k = theta[j], theta[k]
        log_ratio = (
            atoms.entry_logh(xk, th_j)
            + atoms.entry_logh(xj, th_k)
            - atoms.entry_logh(xj, th_j)
            - atoms.entry_logh(xk, th_k)
        )
        change = (xk - xj).astype(dtype)[:, None] * (traits[j] - traits[k])
        if observed:
            r_new = residual - change
            log_ratio += -0.5 * jnp.sum((r_new**2 - residual**2) * inv_var, axis=-1)
        last_old = jnp.max(jnp.where(x > 0, index, 0), axis=1)
        last_new = jnp.max(jnp.where(x_new > 0, index, 0), axis=1)
        log_ratio += (last_new - last_old) / xi_scale  # 1/ξ(k_n), ξ(k) = e^{-k/Δ}
        accept = ok & (jnp.log(random.uniform(k_acc, (n,), dtype)) < log_ratio)
        x = jnp.where(accept[:, None], x_new, x)
        if observed:
            residual = jnp.where(accept[:, None], residual - change, residual)
        return x, residual, key

    x, residual, _ = lax.fori_loop(0, n_swaps, move, (x, residual, key))
    return x, residual
