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

    Written with the pmf differences ``d_j = p_j(rate_lo) - p_j(rate_hi)``, the value is
    ``sum_{j<k} d_j`` and also ``-sum_{j>=k} d_j``. Each ``d_j`` is computed to full relative
    accuracy by factoring out the larger pmf (``log p_j(hi) - log p_j(lo) = j log1p(δ/lo) - δ``,
    ``δ = rate_hi - rate_lo``), which matters late in a stream where ``δ = αβ/(β+n-1)`` is tiny.
    ``d_j`` is positive below ``j* = δ / log(rate_hi/rate_lo)`` and negative above, so the lower
    sum is used for ``k <= j*`` and the upper sum for ``k > j*``: every sum has terms of one sign
    and nothing cancels. The upper sum's mass beyond ``num_events`` is one incomplete-gamma
    difference per rate pair. All ``k`` cost ``O(num_events)`` elementwise work and two cumulative
    sums — no iterative special function per ``k``. The result is clipped to ``[0, 1]``.

    Accuracy: better than 1e-9 relative in float64 (tested against a cancellation-free SciPy sum).
    In float32 the log-pmfs carry an absolute error of about ``eps * k log(rate)``: values are
    good to about 1e-6 absolute (at most 1e-5 at rates in the hundreds), and to about 1e-4
    relative for tiny increments; enable x64 where more digits matter.

    :param rate_lo: ``>= 0``; any shape.
    :param rate_hi: ``>= rate_lo``; broadcast against ``rate_lo``.
    :param int num_events: static number of event indices ``k = 1..num_events``.
    :return: array of shape ``broadcast(rate_lo, rate_hi).shape + (num_events,)``.
    """
    rate_lo, rate_hi = jnp.broadcast_arrays(jnp.asarray(rate_lo), jnp.asarray(rate_hi))
    dtype = jnp.result_type(rate_lo, float)
    lo, hi = rate_lo.astype(dtype)[..., None], rate_hi.astype(dtype)[..., None]
    delta = hi - lo
    j = jnp.arange(num_events, dtype=dtype)
    positive = lo > 0
    safe_lo = jnp.where(positive, lo, 1.0)
    log_pmf_lo = xlogy(j, safe_lo) - safe_lo - gammaln(j + 1.0)
    log_ratio = j * jnp.log1p(delta / safe_lo) - delta  # log p_j(hi) - log p_j(lo)
    # d_j = ±(larger pmf)(1 - exp(-|log ratio|)): full relative accuracy, no overflow
    diff_pos = jnp.exp(log_pmf_lo + jnp.maximum(log_ratio, 0.0)) * -jnp.expm1(-jnp.abs(log_ratio))
    diff_pos = jnp.where(log_ratio <= 0, diff_pos, -diff_pos)
    # rate_lo = 0: p_j(0) = 1[j = 0], so d_0 = 1 - exp(-hi) and d_j = -p_j(hi) for j > 0
    diff_zero = jnp.where(j == 0, -jnp.expm1(-hi), -jnp.exp(xlogy(j, hi) - hi - gammaln(j + 1.0)))
    diff = jnp.where(positive, diff_pos, diff_zero)
    lower = jnp.cumsum(diff, axis=-1)  # sum_{j<k} d_j for k = 1..num_events
    num = jnp.asarray(num_events, dtype)
    beyond = gammainc(num, hi) - gammainc(num, lo)  # -sum_{j>=num_events} d_j
    from_index = beyond - jnp.cumsum(diff[..., ::-1], axis=-1)[..., ::-1]  # -sum_{j>=i} d_j
    upper = jnp.concatenate([from_index[..., 1:], beyond], axis=-1)  # k = i for i = 1..num_events
    safe_delta = jnp.where(delta > 0, delta, 1.0)
    crossover = jnp.where(delta > 0, safe_delta / jnp.log1p(safe_delta / safe_lo), lo)  # j*
    return jnp.clip(jnp.where(j + 1.0 <= crossover, lower, upper), 0.0, 1.0)
