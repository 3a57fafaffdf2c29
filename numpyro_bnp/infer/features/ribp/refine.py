r"""Refinement passes for the R-IBP filter on the linear-Gaussian model (a batch complement).

The one-pass filter freezes every row's ``b_n`` as soon as the row is absorbed, so features that
emerge late are never adopted by earlier rows, and early features (fitted to a handful of rows,
each holding many features) stay sums of true ones. :func:`refine` revisits a buffer of rows
``O`` ``(N, D)`` — the stream so far, or its recent part — with everything unfrozen: mean-field
coordinate ascent over ``q(Z) q(A) = Π_nk Bern(b_nk) Π_k N(μ_k, diag Σ_k)``, started from the
filter's features, with birth and death moves. Each pass:

1. **features** (one sweep over the slots, carrying the ``(N, D)`` residual): the exact
   coordinate update given all rows, ``Σ_k⁻¹ = Σ₀⁻¹ + Λ Σ_n b_nk``,
   ``μ_k = Σ_k (Σ₀⁻¹ μ₀ + Λ Σ_n b_nk r_nk)`` with ``r_nk = o_n - Σ_{j≠k} b_nj μ_j``;
2. **assignments** (one sweep over the slots, all rows at once): ``logit b_nk = logit π_nk +
   μ_kᵀ Λ r_nk - ½ (μ_kᵀ Λ μ_k + tr Λ Σ_k)``, with the IBP's conditional prior given the other
   rows, ``π_nk = m_{-n,k}/(β+N-1) + P(no other row uses k) (1 - e^{-ν})``, ``m_{-n,k} =
   Σ_{n'≠n} b_n'k`` and ``ν = αβ/(β+N-1)`` the rate of new features of one row;
3. **birth**: candidate features are the residuals of the ``num_candidates`` rows whose residual a
   new feature explains best (the log Bayes factor of a new feature with the feature integrated
   out, ``log N(r; μ₀, Σ₀ + Λ⁻¹) - log N(r; 0, Λ⁻¹)``); each candidate is re-estimated
   ``NUM_ROUNDS`` times from the rows that would adopt it (k-means-like steps, so that a new
   feature starts as the mean of the rows that share it rather than one row's residual, noise
   and all) and scored by the number of adopting rows. The best candidate adopted by at least
   two rows is put into a free slot (one birth per pass);
4. **death**: a feature used by fewer than ``min_use`` rows in expectation is removed; a feature
   that only one row uses cannot be told from that row's own offset and does not predict.

The result is a filter state for the buffer: ``S_k = Σ_n b_nk``, existence 1 for the kept
features, ``num_seen = N``; the stream can continue from it with :meth:`RIBPFilter.update`. Cost
O(N K D) per pass, memory O(N K); all shapes fixed (the capacity is set before the passes).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import xlogy

from numpyro_bnp._math import logit, normal_kl

__all__ = ["refine_linear_gaussian", "refine_state"]

NUM_ROUNDS = 4  # re-estimations of a candidate feature from the rows that take it


def _feature_sweep(obs, b, mean, active, lam, mu0, var0):
    """Coordinate update of every slot's Gaussian given all rows' ``b`` (step 1)."""
    resid = obs - b @ mean

    def slot(r, x):
        b_k, m_k = x
        r = r + b_k[:, None] * m_k
        prec = 1.0 / var0 + lam * jnp.sum(b_k)
        m_new = (mu0 / var0 + lam * (b_k @ r)) / prec
        return r - b_k[:, None] * m_new, (m_new, 1.0 / prec)

    new_mean, new_var = lax.scan(slot, resid, (b.T, mean))[1]
    keep = active[:, None]
    return jnp.where(keep, new_mean, mu0), jnp.where(keep, new_var, var0)


def _assignment_sweep(obs, b, mean, var, active, lam, beta, new_prob, eps):
    """Coordinate update of every ``b_nk`` given the features (step 2); ``b`` and residual."""
    num_rows = obs.shape[0]
    resid = obs - b @ mean
    quad = jnp.sum(lam * (mean * mean + var), axis=1)  # μᵀΛμ + tr ΛΣ

    def slot(r, x):
        b_k, m_k, quad_k, act_k = x
        r = r + b_k[:, None] * m_k
        others = jnp.maximum(jnp.sum(b_k) - b_k, 0.0)
        log_none = jnp.sum(jnp.log1p(-jnp.minimum(b_k, 1.0 - eps))) - jnp.log1p(
            -jnp.minimum(b_k, 1.0 - eps)
        )
        prior = others / (beta + num_rows - 1) + jnp.exp(log_none) * new_prob
        prior = jnp.clip(prior, eps, 1.0 - eps)
        score = logit(prior) + r @ (lam * m_k) - 0.5 * quad_k
        b_new = jnp.where(act_k, jax.nn.sigmoid(score), 0.0)
        return r - b_new[:, None] * m_k, b_new

    resid, b_t = lax.scan(slot, resid, (b.T, mean, quad, active))
    return b_t.T, resid


def _birth(resid, b, mean, var, active, lam, mu0, var0, new_prob, num_candidates, eps):
    """Step 3: at most one new feature, from the residuals (see the module docstring)."""
    spread = var0 + 1.0 / lam  # Σ₀ + Λ⁻¹
    log_bf = -0.5 * jnp.sum(jnp.log(lam * spread)) + 0.5 * jnp.sum(
        lam * resid * resid - (resid - mu0) ** 2 / spread, axis=1
    )  # (N,) log N(r; μ₀, Σ₀ + Λ⁻¹) - log N(r; 0, Λ⁻¹)
    prior_logit = logit(jnp.clip(new_prob, eps, 1.0 - eps))
    _, rows = lax.top_k(log_bf, num_candidates)

    def gains(feat, var):  # (N,) log-likelihood gain of each row taking the candidate feature
        return resid @ (lam * feat) - 0.5 * jnp.sum(lam * (feat * feat + var))

    def candidate(take):
        for _ in range(NUM_ROUNDS):  # re-estimate from the rows that take it (step 1 for it)
            var = 1.0 / (1.0 / var0 + lam * jnp.sum(take))
            feat = var * (mu0 / var0 + lam * (take @ resid))
            take = jax.nn.sigmoid(prior_logit + gains(feat, var))
        # the ELBO gain of adding it: Σ_n max_b [b (logit + g_n) + H(b)] - N log(1/(1-π)) - KL
        kl = jnp.sum(normal_kl(feat, var, mu0, var0))
        gain = jnp.sum(
            jax.nn.softplus(prior_logit + gains(feat, var)) - jax.nn.softplus(prior_logit)
        )
        return feat, var, take, gain - kl

    # candidates: single rows' residuals, and the residual's principal directions (with both
    # signs), taken up by the rows that project onto them by at least half the largest projection
    one_row = jax.nn.one_hot(rows, resid.shape[0], dtype=resid.dtype)
    _, vecs = jnp.linalg.eigh(resid.T @ resid)
    dirs = vecs[:, -num_candidates:].T
    proj = jnp.concatenate([dirs, -dirs]) @ resid.T  # (2C, N)
    along = (proj > 0.5 * jnp.max(proj, axis=1, keepdims=True)).astype(resid.dtype)
    feats, vars_, takes, score = jax.vmap(candidate)(jnp.concatenate([one_row, along]))
    best = jnp.argmax(score)
    free = ~active
    slot = jnp.argmax(free)
    ok = (score[best] > 0.0) & (jnp.sum(takes[best]) >= 2.0) & jnp.any(free)
    put = ok & (jnp.arange(active.shape[0]) == slot)
    mean = jnp.where(put[:, None], feats[best], mean)
    var = jnp.where(put[:, None], vars_[best], var)
    b = jnp.where(put[None, :], takes[best][:, None], b)
    return b, mean, var, active | put, ok


def refine_linear_gaussian(obs, b, mean, var, active, consts, *, num_passes, num_candidates):
    """Run ``num_passes`` refinement passes; jittable, fixed shapes.

    :param obs: ``(N, D)`` rows.
    :param b: ``(N, K)`` starting ``q(z_nk = 1)`` (zero on inactive slots).
    :param mean, var: ``(K, D)`` starting feature Gaussians.
    :param active: ``(K,)`` bool, slots holding a feature.
    :param consts: ``(lam, mu0, var0, alpha, beta, min_use)``: ``(D,)`` noise precision and
        feature prior, the IBP parameters and the death threshold.
    :return: ``b, mean, var, active`` after the passes and the ``(num_passes,)`` traces of the
        number of features and of the mean-field ELBO per row (up to constants).
    """
    lam, mu0, var0, alpha, beta, min_use = consts
    num_rows = obs.shape[0]
    eps = jnp.finfo(obs.dtype).eps
    new_prob = -jnp.expm1(-alpha * beta / (beta + num_rows - 1.0))

    def one_pass(carry, _):
        b, mean, var, active = carry
        mean, var = _feature_sweep(obs, b, mean, active, lam, mu0, var0)
        b, resid = _assignment_sweep(obs, b, mean, var, active, lam, beta, new_prob, eps)
        b, mean, var, active, _ = _birth(
            resid, b, mean, var, active, lam, mu0, var0, new_prob, num_candidates, eps
        )
        dead = active & (jnp.sum(b, axis=0) < min_use)
        active = active & ~dead
        b = jnp.where(active[None, :], b, 0.0)
        mean, var = jnp.where(active[:, None], mean, mu0), jnp.where(active[:, None], var, var0)
        # expected log-likelihood per row (the prior terms are left out: a progress measure)
        resid = obs - b @ mean
        spread = b @ (mean * mean + var) - (b * b) @ (mean * mean)
        fit = -0.5 * jnp.sum(lam * (resid * resid + spread)) / num_rows
        ent = -jnp.sum(xlogy(b, b) + xlogy(1.0 - b, 1.0 - b)) / num_rows
        return (b, mean, var, active), (jnp.sum(active), fit + ent)

    carry, traces = lax.scan(one_pass, (b, mean, var, active), None, length=num_passes)
    return (*carry, *traces)


_refine_jit = jax.jit(refine_linear_gaussian, static_argnames=("num_passes", "num_candidates"))


def refine_state(const, state, obs, use, num_passes, min_use, num_candidates):
    """:meth:`RIBPFilter.refine` after validation (and capacity growth): run the passes, compact.

    :param const: the filter's :class:`~numpyro_bnp.infer.features.ribp.update.RIBPConstants`
        (linear-Gaussian).
    :param state: the state whose capacity the passes use; with ``use`` given its active
        features (existence above 1/2) are the start, else the passes start from none.
    :param obs: ``(N, D)`` validated rows.
    :param use: ``(N, K)`` the rows' feature use under ``state`` (``start="filter"``) or ``None``.
    :return: the refined ``(mean, var, running_sum, existence)`` (kept features first) and the
        traces ``{"num_features", "fit"}`` of the passes.
    """
    dt = const.dtype
    active = np.asarray(state.existence > 0.5) & (use is not None)
    if use is not None:
        b = jnp.where(jnp.asarray(active), use, 0.0)
        mean, var = state.mean, state.var
    else:
        b = jnp.zeros((obs.shape[0], state.mean.shape[0]), dt)
        mean = jnp.broadcast_to(const.feature_loc, state.mean.shape)
        var = jnp.broadcast_to(const.feature_var, state.var.shape)
    consts = (
        const.noise_prec,
        const.feature_loc,
        const.feature_var,
        const.ibp.alpha,
        const.ibp.beta,
        jnp.asarray(min_use, dt),
    )
    b, mean, var, active, count, fit = _refine_jit(
        obs,
        b,
        mean,
        var,
        jnp.asarray(active),
        consts,
        num_passes=num_passes,
        num_candidates=num_candidates,
    )
    order = jnp.argsort(~active, stable=True)  # kept features first, as the prior indexes them
    eps = jnp.finfo(dt).eps
    fields = (
        mean[order],
        var[order],
        jnp.sum(b, axis=0)[order].astype(dt),
        jnp.where(active[order], 1.0 - eps, 0.0).astype(dt),
    )
    return fields, {"num_features": np.asarray(count), "fit": np.asarray(fit)}
