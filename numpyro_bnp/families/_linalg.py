"""Linear algebra of the Gaussian families: the O(D²) rank-one update of a Cholesky factor
(Golub and Van Loan 2013, Section 6.5.4), triangular solves and a Cholesky factorisation as plain
JAX loops (no LAPACK inside compiled steps, see below), and the constructors' checked Cholesky
factor of a covariance."""

import jax.numpy as jnp
import numpy as np
from jax import lax

from numpyro_bnp._checks import is_concrete


def _cholesky_rank1(tril, vec, coef):
    """The lower Cholesky factor of ``tril trilᵀ + coef vec vecᵀ`` in O(D²) (Golub and Van Loan
    2013, Section 6.5.4); ``coef < 0`` is a downdate.

    A downdate that rounding would push out of the positive-definite cone keeps each new
    diagonal entry at least ``sqrt(eps)`` times the old one. ``tril`` ``(D, D)``, ``vec``
    ``(D,)``, ``coef`` a scalar.
    """
    sign = jnp.sign(coef)
    work = jnp.sqrt(jnp.abs(coef)) * vec
    rows = jnp.arange(tril.shape[-1])
    eps = jnp.finfo(tril.dtype).eps

    def column(carry, k):
        factor, work = carry
        diag, wk = factor[k, k], work[k]
        new_diag = jnp.sqrt(jnp.maximum(diag**2 + sign * wk**2, eps * diag**2))
        c, s = new_diag / diag, wk / diag
        below = rows > k
        col = jnp.where(below, (factor[:, k] + sign * s * work) / c, factor[:, k])
        col = col.at[k].set(new_diag)
        work = jnp.where(below, c * work - s * col, work)
        return (factor.at[:, k].set(col), work), None

    (factor, _), _ = lax.scan(column, (tril, work), rows)
    return factor


# The family functions run batched over clusters inside an engine's compiled step. jax 0.10's
# batched CPU LAPACK kernels split a batch over XLA's intra-op thread pool and wait for the
# pieces, so two of them running at once can hold every worker of a small pool (two cores) and
# deadlock. The few triangular solves and factorisations below are therefore plain JAX loops
# over the D rows (O(D²) per row-sweep), and only the constructors call LAPACK.


def _solve_lower(tril, rhs):
    """``tril⁻¹ rhs`` by forward substitution (``tril`` ``(D, D)`` lower, ``rhs`` ``(D,)`` or
    ``(D, M)``), O(D² M)."""

    def row(sol, i):
        return sol.at[i].set((rhs[i] - tril[i] @ sol) / tril[i, i]), None

    sol, _ = lax.scan(row, jnp.zeros_like(rhs), jnp.arange(tril.shape[-1]))
    return sol


def _solve_upper(triu, rhs):
    """``triu⁻¹ rhs`` for an upper-triangular ``triu``: :func:`_solve_lower` with the order of
    the unknowns reversed."""
    return _solve_lower(triu[::-1, ::-1], rhs[::-1])[::-1]


def _cholesky(matrix):
    """The lower Cholesky factor of a ``(D, D)`` positive-definite ``matrix``, column by column
    (Cholesky–Banachiewicz), O(D³)."""
    rows = jnp.arange(matrix.shape[-1])

    def column(tril, j):
        col = matrix[:, j] - tril @ tril[j]
        diag = jnp.sqrt(col[j])
        return tril.at[:, j].set(
            jnp.where(rows > j, col / diag, jnp.where(rows == j, diag, 0))
        ), None

    tril, _ = lax.scan(column, jnp.zeros_like(matrix), rows)
    return tril


def _chol_spd(matrix, name, dim, dtype):
    """The lower Cholesky factor of a ``(dim, dim)`` symmetric positive-definite ``matrix``."""
    matrix = jnp.asarray(matrix, dtype)
    if matrix.shape != (dim, dim):
        raise ValueError(f"{name} must have shape {(dim, dim)}, got {matrix.shape}")
    tril = jnp.linalg.cholesky(matrix)
    if is_concrete(matrix) and not (
        np.allclose(matrix, matrix.T) and np.isfinite(np.asarray(tril)).all()
    ):
        raise ValueError(f"{name} must be symmetric positive definite")
    return tril
