"""Conditional Bernoulli sampling: binary vectors with independent Bernoulli(π_i) entries,
conditioned on their sum: the conditional Bernoulli law (Chen, Dempster & Liu 1994) that the
restricted Bernoulli process of Doshi-Velez & Williamson (2017, Eq. 4) uses for each row.

Used by :mod:`numpyro_bnp.distributions.restricted_ibp`; every function takes the atom
probabilities on the last axis and works in log space through the Poisson-binomial DP of
``numpyro_bnp._math``.
"""

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.scipy.special import logsumexp

from numpyro_bnp._math import logit, poisson_binomial_log_pmf

_TILT_BRACKET = 300.0  # |θ| bound of the tilt search; logits of float32 probabilities are < 105
_TILT_STEPS = 64


def suffix_log_pmf(probs, max_count):
    """``B[i, r] = log P(Σ_{j >= i} z_j = r)``: ``(..., I + 1, max_count + 1)`` (backward table)."""
    return poisson_binomial_log_pmf(probs[..., ::-1], max_count, prefixes=True)[..., ::-1, :]


def _leave_one_out_log_pmf(prefix, suffix, counts):
    """``log P(Σ_{j≠i} z_j = c)`` for every atom ``i`` and each ``c`` in ``counts``: ``(I, C)``.

    The convolution ``Σ_s P(Σ_{j<i} z_j = s) P(Σ_{j>i} z_j = c - s)`` of the prefix and suffix
    tables (``(I + 1, M + 1)`` each, from :func:`poisson_binomial_log_pmf`); ``c < 0`` gives
    ``-inf``.
    """
    max_count = prefix.shape[-1] - 1
    s = jnp.arange(max_count + 1)
    idx = jnp.asarray(counts)[None, :] - s[:, None]  # (M + 1, C): suffix count c - s
    after = suffix[1:][:, jnp.clip(idx, 0, max_count)]  # (I, M + 1, C)
    terms = prefix[:-1][:, :, None] + jnp.where(idx >= 0, after, -jnp.inf)
    return logsumexp(terms, axis=1)


def inclusion_log_probs(probs, max_count):
    r"""``log P(z_i = 1 | Σ_j z_j = r)`` for ``r = 0..max_count``: shape ``(I, max_count + 1)``.

    First-order inclusion probabilities of the conditional-Bernoulli law (Chen, Dempster & Liu
    1994):
    :math:`π_i^{(r)} = π_i \mathrm{PB}_{-i}(r - 1) / \mathrm{PB}(r)`; for each feasible ``r`` they
    sum to ``r``. Infeasible ``r`` (``PB(r) = 0``) and ``r = 0`` give ``-inf``.
    """
    prefix = poisson_binomial_log_pmf(probs, max_count, prefixes=True)
    suffix = suffix_log_pmf(probs, max_count)
    counts = jnp.arange(max_count + 1)
    loo = _leave_one_out_log_pmf(prefix, suffix, counts - 1)
    total = prefix[-1]
    feasible = jnp.isfinite(total)
    out = jnp.log(probs)[:, None] + loo - jnp.where(feasible, total, 0.0)
    return jnp.where(feasible & (counts > 0), out, -jnp.inf)


def conditional_bernoulli_sequential(key, probs, suffix, count):
    """One draw of ``z ~ Bernoulli(probs)`` conditioned on ``Σ z = count`` (sequential sampler).

    A single pass over the atoms with the suffix table ``B`` of :func:`suffix_log_pmf`:
    ``P(z_i = 1 | r still to place) = π_i exp(B[i+1, r-1] - B[i, r])``. Exact; ``count`` must be
    feasible (``B[0, count] > -inf``).
    """
    log_u = jnp.log(random.uniform(key, probs.shape, probs.dtype))

    def step(remaining, inputs):
        log_p, b_next, b_here, lu = inputs
        log_take = log_p + b_next[jnp.maximum(remaining - 1, 0)] - b_here[remaining]
        take = (remaining > 0) & (lu < log_take)
        return remaining - take, take

    _, z = lax.scan(step, count, (jnp.log(probs), suffix[1:], suffix[:-1], log_u))
    return z.astype(jnp.int32)


def conditional_bernoulli_draw_by_draw(key, probs, count, max_count):
    """One conditional-Bernoulli draw, unit by unit, from inclusion probabilities.

    At draw ``t`` (``r = count - t`` units still to pick from the remaining set ``R``) unit ``i``
    is picked with probability ``π_i^{(r), R} / r``. This is exact: it picks the units of a
    conditional-Bernoulli sample in uniformly random order (Chen, Dempster & Liu 1994). Costs
    ``O(count · I · max_count)``; ``max_count`` draws are run, those past ``count`` masked.
    """

    def draw(t, state):
        z, key = state
        key, sub = random.split(key)
        remaining = jnp.where(z == 1, 0.0, probs)
        r = count - t
        prefix = poisson_binomial_log_pmf(remaining, max_count, prefixes=True)
        suffix = suffix_log_pmf(remaining, max_count)
        loo = _leave_one_out_log_pmf(prefix, suffix, jnp.reshape(r - 1, (1,)))[:, 0]
        unit = random.categorical(sub, jnp.log(remaining) + loo)  # ∝ π_i^{(r), R}
        return jnp.where(t < count, z.at[unit].set(1), z), key

    z0 = jnp.zeros(probs.shape, jnp.int32)
    return lax.fori_loop(0, max_count, draw, (z0, key))[0]


def tilts(probs, max_count):
    r"""Esscher tilts ``θ_J`` with ``Σ_i sigmoid(logit π_i + θ_J) = J``, ``J = 0..max_count``.

    Bisection on ``[-300, 300]`` (the sum is increasing in ``θ``); ``J = 0`` and ``J`` at or above
    the number of positive atoms end at the bracket, which makes the tilted proposal put
    (almost) all its mass on the extreme count. Any ``θ`` leaves the conditional law unchanged
    (Doshi-Velez & Williamson 2017, §3.3); the tilt only moves the proposal's mean count to ``J``.
    """
    logits = logit(probs)
    targets = jnp.arange(max_count + 1, dtype=probs.dtype)

    def bisect(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        low = jax.nn.sigmoid(logits[None, :] + mid[:, None]).sum(-1) < targets
        return jnp.where(low, mid, lo), jnp.where(low, hi, mid)

    lo = jnp.full(targets.shape, -_TILT_BRACKET, probs.dtype)
    lo, hi = lax.fori_loop(0, _TILT_STEPS, bisect, (lo, -lo))
    return 0.5 * (lo + hi)
