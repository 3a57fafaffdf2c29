r"""The conjugate linear-Gaussian feature posterior, shared by the feature-model engines.

For observations ``X`` ``(N, D)`` with ``X = Z A + E``, ``E_nd ~ N(0, σ²)`` and a Gaussian prior
``A_kd ~ N(μ_0, σ_A²)`` on the ``K x D`` features, each column ``d`` of ``A`` has the posterior
(Griffiths & Ghahramani 2011, Eqs. 21-26; Doshi-Velez & Ghahramani 2009, Sec. 3)

.. math::
    A_{·d} \mid Z, X \sim N(M_{·d}, Σ), \quad
    Σ = P^{-1},\ P = Z^\top Z / σ^2 + I / σ_A^2, \quad
    M_{·d} = Σ\,(Z^\top X_{·d} / σ^2 + μ_0 / σ_A^2),

and, for ``μ_0 = 0``, ``A`` integrated out,

.. math::
    \log p(X \mid Z) = -\tfrac{ND}{2} \log(2πσ^2) - \tfrac{DK}{2} \log σ_A^2
        - \tfrac{D}{2} \log |P| - \tfrac{1}{2σ^2}\big(\operatorname{tr} X^\top X
        - \operatorname{tr}(X^\top Z M)\big)

(matrix determinant lemma and Woodbury on ``σ² I + σ_A² Z Zᵀ``). ``Z`` need not be binary (count
matrices work the same way).
"""

import jax
import jax.numpy as jnp
from jax import random
from jax.scipy.linalg import cho_solve, solve_triangular

__all__ = [
    "add_row",
    "collapsed_log_marginal",
    "entry_moments",
    "feature_posterior",
    "posterior_covariance",
    "predictive_log_density",
    "prior_for_unshared",
    "remove_row",
    "sample_feature_posterior",
    "set_entry",
]


def _moments(gram, ztx, noise_var, feature_var, prior_loc):
    eye = jnp.eye(gram.shape[0], dtype=gram.dtype)
    chol = jnp.linalg.cholesky(gram / noise_var + eye / feature_var)
    return cho_solve((chol, True), ztx / noise_var + prior_loc / feature_var), chol


def feature_posterior(gram, ztx, noise_var, feature_var, prior_loc=0.0):
    r"""Moments of ``A | Z, X ~ N(M, Σ)``, ``Σ = (ZᵀZ/σ² + I/σ_A²)⁻¹`` (module docstring).

    :param gram: ``ZᵀZ`` ``(K, K)``.
    :param ztx: ``ZᵀX`` ``(K, D)``.
    :param noise_var: σ², a scalar or ``(D,)`` (one per column).
    :param feature_var: σ_A², a scalar or ``(D,)``.
    :param prior_loc: μ_0, a scalar or ``(D,)`` (default 0).
    :return: ``(mean, chol)``: ``M`` ``(K, D)`` and the lower Cholesky factor ``L`` of the
        precision ``P = L Lᵀ``, ``(K, K)`` when both variances are scalars, else ``(D, K, K)``
        (one per column).
    """
    noise_var, feature_var = jnp.asarray(noise_var), jnp.asarray(feature_var)
    prior_loc = jnp.asarray(prior_loc, ztx.dtype)
    if noise_var.ndim == 0 and feature_var.ndim == 0:
        return _moments(gram, ztx, noise_var, feature_var, prior_loc)
    dim = ztx.shape[-1]
    mean, chol = jax.vmap(_moments, in_axes=(None, 1, 0, 0, 0), out_axes=(1, 0))(
        gram,
        ztx,
        jnp.broadcast_to(noise_var, (dim,)),
        jnp.broadcast_to(feature_var, (dim,)),
        jnp.broadcast_to(prior_loc, (dim,)),
    )
    return mean, chol


def posterior_covariance(chol):
    """``Σ = P⁻¹ = (L Lᵀ)⁻¹`` ``(K, K)`` from the factor ``L`` of :func:`feature_posterior`."""
    return cho_solve((chol, True), jnp.eye(chol.shape[-1], dtype=chol.dtype))


def sample_feature_posterior(key, mean, chol):
    r"""One draw ``A = M + L^{-T} ε``, ``ε ~ N(0, I)`` ``(K, D)``: ``A_{·d} ~ N(M_{·d}, (L Lᵀ)⁻¹)``.

    :param key: PRNG key (used once, for ``ε`` of ``mean``'s shape and dtype).
    :param mean: ``M`` ``(K, D)``.
    :param chol: ``L`` from :func:`feature_posterior`, ``(K, K)`` or ``(D, K, K)``.
    """
    eps = random.normal(key, mean.shape, mean.dtype)
    if chol.ndim == 2:
        return mean + solve_triangular(chol.T, eps, lower=False)

    def whiten(c, e):
        return solve_triangular(c.T, e, lower=False)

    return mean + jax.vmap(whiten, in_axes=(0, 1), out_axes=1)(chol, eps)


def predictive_log_density(sq_resid, var, dim):
    r"""``log N(x; u, v I_D) + (D/2) log 2π = -(D/2) log v - |x - u|² / (2v)``.

    The one-row form of the marginal: given the other rows, a row ``x_n`` ``(D,)`` with features
    ``z_n`` is ``N(z_n M_{-n}, (σ² + z_n Σ_{-n} z_nᵀ) I_D)`` (``M_{-n}, Σ_{-n}`` the posterior of
    the other rows), so ``log p(X | Z)`` is a sum of these terms over the rows.

    :param sq_resid: ``|x - u|²``, any shape.
    :param var: ``v``, broadcasting with ``sq_resid``.
    :param int dim: ``D``.
    """
    return -0.5 * dim * jnp.log(var) - 0.5 * sq_resid / var


def remove_row(cov, mean, row, obs, noise_sd):
    r"""``(Σ_{-n}, M_{-n})``: the posterior ``(Σ, M)`` without row ``n``, the Sherman-Morrison
    downdate of ``P - u uᵀ``, ``u = z_n / σ`` (Doshi-Velez & Ghahramani 2009, Sec. 3).

    :param cov: ``Σ`` ``(K, K)``; :param mean: ``M`` ``(K, D)``; :param row: ``z_n`` ``(K,)``
        (float); :param obs: ``x_n`` ``(D,)``; :param noise_sd: ``σ`` (scalar).
    """
    u = row / noise_sd
    g = cov @ u
    denom = 1.0 - u @ g
    return cov + jnp.outer(g, g) / denom, mean + jnp.outer(g, (u @ mean - obs / noise_sd) / denom)


def add_row(cov, mean, row, obs, noise_sd):
    """The posterior with row ``n`` added back: the Sherman-Morrison update of ``P + u uᵀ``
    (arguments as :func:`remove_row`)."""
    u = row / noise_sd
    g = cov @ u
    denom = 1.0 + u @ g
    return cov - jnp.outer(g, g) / denom, mean + jnp.outer(g, (obs / noise_sd - u @ mean) / denom)


def prior_for_unshared(cov, mean, shared, feature_var, prior_loc=0.0):
    """``(Σ_{-n}, M_{-n})`` with the rows and columns of the features no other row uses
    (``shared`` ``(K,)`` False) set to the prior ``N(μ_0, σ_A²)``, exactly their posterior given
    the other rows (a downdate leaves round-off there)."""
    both = shared[:, None] & shared[None, :]
    cov = jnp.where(both, cov, jnp.diag(jnp.full(cov.shape[0], feature_var, cov.dtype)))
    return cov, jnp.where(shared[:, None], mean, prior_loc)


def entry_moments(k, on, s, v, r, cov, mean):
    r"""The predictive of row ``n`` with ``z_nk = 0`` and with ``z_nk = 1``, the other entries
    fixed: ``N(x_n; z_n M_{-n}, v I_D)`` is carried as the residual ``r = x_n - z_n M_{-n}``
    ``(D,)``, ``v = σ² + z_n Σ_{-n} z_nᵀ`` and ``s = Σ_{-n} z_nᵀ`` ``(K,)``; flipping one entry
    changes them by ``O(K + D)``.

    :param k: the entry; :param on: ``z_nk`` now (0. or 1.); ``cov, mean``: ``Σ_{-n}, M_{-n}``.
    :return: ``((v0, r0), (v1, r1))``.
    """
    ckk, mk = cov[k, k], mean[k]
    t = s[k] - on * ckk  # (Σ z^0)_k, z^0 = z_n with z_nk = 0
    v0 = v - on * (2.0 * t + ckk)
    r0 = r + on * mk
    return (v0, r0), (v0 + 2.0 * t + ckk, r0 - mk)


def set_entry(k, on, new, s, cov, moments):
    """``(s, v, r)`` of the row after ``z_nk`` changed from ``on`` to ``new``, with the
    ``moments`` of :func:`entry_moments`."""
    (v0, r0), (v1, r1) = moments
    s = s + (new - on) * cov[:, k]
    return s, jnp.where(new > 0, v1, v0), jnp.where(new > 0, r1, r0)


def collapsed_log_marginal(chol, ztx, mean, xx, num_rows, noise_var, feature_var):
    r"""``log p(X | Z)`` with ``A ~ N(0, σ_A² I)`` integrated out (module docstring).

    :param chol: ``L`` ``(K, K)`` from :func:`feature_posterior` (scalar variances, ``μ_0 = 0``).
    :param ztx: ``ZᵀX`` ``(K, D)``.
    :param mean: ``M`` ``(K, D)`` from :func:`feature_posterior`.
    :param xx: ``tr XᵀX`` (scalar).
    :param int num_rows: ``N``.
    :param noise_var: σ² (scalar).
    :param feature_var: σ_A² (scalar).
    """
    num_features, dim = ztx.shape
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol)))
    quad = (xx - jnp.sum(ztx * mean)) / noise_var
    return (
        -0.5 * num_rows * dim * jnp.log(2.0 * jnp.pi * noise_var)
        - 0.5 * dim * num_features * jnp.log(feature_var)
        - 0.5 * dim * log_det
        - 0.5 * quad
    )
