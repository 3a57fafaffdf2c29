"""Numerically stable special functions shared by the distributions and engines.

Every function is pure ``jax.numpy``, broadcasts over its arguments and works under ``jit``,
``vmap`` and ``grad`` where that makes sense. Each piece of math lives here exactly once.
"""

import jax.numpy as jnp
from jax.scipy.special import digamma, gammainc, gammaln, xlogy

__all__ = ["generalized_harmonic", "poisson_interval_probs"]


def generalized_harmonic(beta, n):
    r"""The generalized harmonic number :math:`H^\beta_n = \sum_{i=1}^{n} \beta/(\beta+i-1)`.

    Computed in closed form as :math:`\beta\,(\psi(\beta+n) - \psi(\beta))` (no loop), so it is
    exact for real ``n >= 0`` and cheap for ``n`` in the millions. For ``beta = 1`` it is the
    ordinary harmonic number :math:`H_n`. The expected number of IBP(α, β) dishes after ``n``
    customers is ``alpha * generalized_harmonic(beta, n)`` (R-IBP paper, Section 3.2).

    :param beta: concentration, ``> 0``; any shape.
    :param n: number of terms, ``>= 0``; broadcast against ``beta``.
    """
    beta = jnp.asarray(beta)
    n = jnp.asarray(n, dtype=jnp.result_type(beta, float))
    return beta * (digamma(beta + n) - digamma(beta))


def poisson_interval_probs(rate_lo, rate_hi, num_events):
    r"""``P(N(rate_lo) < k <= N(rate_hi))`` for ``k = 1..num_events``, where ``N(t) ~ Poisson(t)``.

    For a Poisson counting process this is the probability that the ``k``-th event falls in the
    interval ``(rate_lo, rate_hi]`` of operational time, i.e.
    ``P(Poisson(rate_lo) <= k-1) - P(Poisson(rate_hi) <= k-1)`` — note the CDFs at ``k - 1``. In
    the IBP it is the probability that dish ``k`` is created by customer ``n`` when
    ``rate_lo = r_{n-1}`` and ``rate_hi = r_n`` (R-IBP paper, Eq. 4).

    All ``num_events`` values come from one vector of Poisson log-pmfs per rate and two cumulative
    sums, so the cost is ``O(num_events)`` elementwise work plus one incomplete-gamma evaluation
    per rate (for the tail mass beyond ``num_events``), not one per ``k``. The difference is taken
    between the *small* tails — lower CDFs where ``rate_lo > k``, upper tails otherwise — so that
    it never cancels two numbers close to 1. The result is clipped to ``[0, 1]``.

    Accuracy: better than 1e-9 relative in float64 (tested against a cancellation-free SciPy sum).
    In float32 the log-pmf carries an absolute error of about ``eps * k log(rate)``, which gives
    about ``1e-6 * rate`` absolute error (1e-5 at rates near 30, 2e-4 near 300); enable x64 where
    these digits matter.

    :param rate_lo: ``>= 0``; any shape.
    :param rate_hi: ``>= rate_lo``; broadcast against ``rate_lo``.
    :param int num_events: static number of event indices ``k = 1..num_events``.
    :return: array of shape ``broadcast(rate_lo, rate_hi).shape + (num_events,)``.
    """
    rate_lo, rate_hi = jnp.broadcast_arrays(jnp.asarray(rate_lo), jnp.asarray(rate_hi))
    dtype = jnp.result_type(rate_lo, float)
    rate_lo, rate_hi = rate_lo.astype(dtype)[..., None], rate_hi.astype(dtype)[..., None]
    j = jnp.arange(num_events, dtype=dtype)

    def tails(rate):
        pmf = jnp.exp(xlogy(j, rate) - rate - gammaln(j + 1.0))  # P(N = j), j < num_events
        below = jnp.cumsum(pmf, axis=-1)  # P(N <= k - 1) for k = 1..num_events
        # P(N >= k) = sum_{k <= j < num_events} pmf + P(N >= num_events)
        above_window = jnp.cumsum(pmf[..., ::-1], axis=-1)[..., ::-1]
        beyond = gammainc(jnp.asarray(num_events, dtype), rate)
        above = jnp.concatenate([above_window[..., 1:], jnp.zeros_like(beyond)], -1) + beyond
        return below, above

    below_lo, above_lo = tails(rate_lo)
    below_hi, above_hi = tails(rate_hi)
    k = j + 1.0
    diff = jnp.where(rate_lo > k, below_lo - below_hi, above_hi - above_lo)
    return jnp.clip(diff, 0.0, 1.0)


# ---------------------------------------------------------------------------- Poisson-binomial
def poisson_binomial_log_pmf(probs, max_count, *, prefixes=False):
    r"""Log pmf of the Poisson-binomial count ``S = Σ_i z_i``, ``z_i ~ Bernoulli(probs[..., i])``.

    Log-space forward dynamic programme over the atoms (last axis, ``I`` of them), truncated at
    ``max_count`` (restricted IBP spec §7.2):

    .. math::
        L_0 = (0, -∞, …, -∞), \qquad
        L_i[k] = \operatorname{logaddexp}\big(L_{i-1}[k] + \log(1 - π_i),\;
                                              L_{i-1}[k-1] + \log π_i\big).

    ``log(1 - π)`` is taken as ``log1p(-π)`` so that probabilities near 1 keep their digits, and
    the weight form ``π / (1 - π)`` (which overflows as ``π → 1``) is never used. Exact zeros and
    ones are allowed (they give ``-inf`` entries, never NaN). Cost ``O(I · max_count)`` in one
    ``lax.scan``; differentiable where the pmf is positive.

    :param probs: success probabilities in ``[0, 1]``, shape ``(..., I)``.
    :param int max_count: static; counts ``0..max_count`` are returned (counts above are dropped,
        not folded into the last entry).
    :param bool prefixes: if True, return the table of all prefixes instead of the last row.
    :return: ``(..., max_count + 1)`` with ``log P(S = k)``; with ``prefixes=True``
        ``(..., I + 1, max_count + 1)`` whose row ``i`` is the log pmf of ``Σ_{j < i} z_j``.
    """
    from jax import lax  # local import: keeps this appended section self-contained

    probs = jnp.asarray(probs)
    probs = probs.astype(jnp.result_type(probs, float))
    log_p = jnp.moveaxis(jnp.log(probs), -1, 0)
    log_q = jnp.moveaxis(jnp.log1p(-probs), -1, 0)
    init = jnp.full((*probs.shape[:-1], max_count + 1), -jnp.inf, probs.dtype)
    init = init.at[..., 0].set(0.0)
    empty = jnp.full((*probs.shape[:-1], 1), -jnp.inf, probs.dtype)

    def step(table, atom):
        lp, lq = atom
        shifted = jnp.concatenate([empty, table[..., :-1]], axis=-1)
        new = jnp.logaddexp(table + lq[..., None], shifted + lp[..., None])
        return new, (new if prefixes else None)

    last, rows = lax.scan(step, init, (log_p, log_q))
    if not prefixes:
        return last
    return jnp.concatenate([init[None], rows], axis=0).transpose(
        (*tuple(range(1, probs.ndim)), 0, probs.ndim)
    )


__all__ += ["poisson_binomial_log_pmf"]
