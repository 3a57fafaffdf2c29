r"""Collapsed Gibbs sampling for linear-Gaussian feature models with a restricted IBP prior.

:class:`RestrictedIBPGibbs` is a :class:`numpyro.infer.mcmc.MCMCKernel` for
:func:`numpyro_bnp.models.restricted_linear_gaussian` and any model of the same shape (the contract
of :func:`numpyro_bnp.infer.features.restricted_model.read_restricted_feature_model`):

.. math::
    π_k \sim \mathrm{Beta}(a_k, b_k), \quad
    P(z_n \mid π) = f_n(|z_n|)\,\frac{\prod_k π_k^{z_{nk}} (1 - π_k)^{1 - z_{nk}}}
                                      {\mathrm{PB}_π(|z_n|)}, \quad
    A_k \sim N(0, σ_A^2 I), \quad o_n \sim N(z_n A, σ_o^2 I).

One step (the posterior-inference section of Doshi-Velez & Williamson 2017 is not recoverable;
the moves are derived here, summarised in ``docs/restricted_ibp.md``, "Posterior inference", and
checked against enumeration in the tests):

1. **Rows, with A integrated out.** Given the other rows, ``o_n`` is Gaussian with mean
   ``z_n H`` and covariance ``σ_o² (1 + z_n P z_nᵀ) I`` (``P = (Z₋ₙᵀZ₋ₙ + σ_o²/σ_A² I)⁻¹``,
   ``H = P Z₋ₙᵀ O₋ₙ``), so every candidate row costs ``O(K + D)`` after one rank-one downdate.
   Each row gets, in turn: an independence Metropolis–Hastings proposal from its own prior row law
   given ``π`` (``J ~ f_n``, then the conditional-Bernoulli draw; accepted with the likelihood
   ratio); ``|z_n|`` **swap moves** — remove a uniformly chosen active feature and put the one back
   among the inactive ones with probability ``∝ (π_k / (1 - π_k)) p(o_n | ·)`` (the count and so
   ``f_n`` and ``PB_π`` cancel); and, unless ``f_n`` is a point mass, a sweep of single-site Gibbs
   flips with the count factor ``f_n(m) / PB_π(m)`` (the row's prior law above, evaluated at the
   two counts the flip moves between).
2. **Column complements** (unless every ``f_n`` is a point mass): for each ``k``, propose
   ``z_{:k} → 1 - z_{:k}`` together with ``logit π_k → -logit π_k`` and accept with the ratio of
   ``p(O, Z, π)`` (features integrated out). This joins modes that no single-row move connects:
   a feature shared by all rows against none (``C + (A_i - C/2) + (A_j - C/2) = A_i + A_j``), or
   feature ``k`` against its complement (``B_j = A_j + A_k``, ``C = -2 A_k``).
3. **π given Z** is *not* conjugate: the normaliser ``Π_n PB_π(|z_n|)`` couples the atoms. Each
   ``logit π_k`` is updated by univariate slice sampling (Neal 2003) of its exact conditional
   ``Beta(a_k + m_k, b_k + N - m_k) / Π_J PB_π(J)^{n_J}``, where ``PB_π`` is split into the
   leave-one-out pmf of the other atoms (``O(J_max²)`` per atom from prefix and suffix tables).
4. **Scale.** The rows' law is invariant to the Esscher tilt ``logit π → logit π + θ`` (only
   relative odds matter once the counts are fixed; Doshi-Velez & Williamson 2017, §3.3), so the data
   say nothing about the overall scale and coordinate updates move it slowly. A tilt move
   slice-samples ``θ`` from the prior alone, ``Π_k π_k^{a_k}(1 - π_k)^{b_k}`` at the tilted point (a
   log-concave density in ``θ``; the translation group's generalised Gibbs step, Liu & Sabatti
   2000).
5. **Features** ``A | Z, O`` are drawn from their Gaussian posterior (mean ``M⁻¹ZᵀO``, covariance
   ``σ_o² M⁻¹`` per column, ``M = ZᵀZ + σ_o²/σ_A² I``). The rows never use this draw (they are
   collapsed), so it only reports ``A``.

**Warmup tempering.** Single-row moves can stick in local modes of feature models (e.g. one
feature shared by all rows plus one per pair of true features). During the first half of the
warmup the row and column-complement updates see the likelihood to a power rising linearly to 1;
after that every step leaves the posterior invariant.

Shapes are fixed (``N x K`` rows, ``K`` atoms); ``π`` is kept as logits (tiny atoms underflow in
float32).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import betaln, logsumexp
from numpyro.infer.mcmc import MCMCKernel

from numpyro_bnp._checks import model_function
from numpyro_bnp._math import logit, poisson_binomial_add_atom, poisson_binomial_log_pmf
from numpyro_bnp.distributions._conditional_bernoulli import (
    conditional_bernoulli_sequential,
    suffix_log_pmf,
)
from numpyro_bnp.infer.core.mcmc import (
    chains_batched,
    over_chains,
    slice_sample,
    with_deterministic,
)
from numpyro_bnp.infer.features.linear_gaussian import (
    collapsed_log_marginal,
    feature_posterior,
    posterior_covariance,
    predictive_log_density,
    sample_feature_posterior,
)
from numpyro_bnp.infer.features.restricted_model import read_restricted_feature_model

__all__ = ["RestrictedIBPGibbs", "RestrictedIBPGibbsState"]

_LOGIT_WIDTH = 4.0  # slice width for logit π_k (posterior sd ~ 1/sqrt(m_k); prior tails ~ K/α)
_TILT_WIDTH = 1.0


class RestrictedIBPGibbsState(NamedTuple):
    """State of :class:`RestrictedIBPGibbs` (one chain; vectorized chains add a leading axis).

    :ivar i: iteration.
    :ivar z: ``{weight site: π (K,), rows site: Z (N, K) int32, feature site: A (K, D)}`` — the
        sample field.
    :ivar logits: ``(K,)`` ``logit π`` (the exact state; ``π`` itself may round to 0).
    :ivar num_active: features used by at least one row.
    :ivar accept_prob: fraction of rows whose prior-row proposal was accepted in this step.
    :ivar log_joint: ``log p(O, Z, π)`` with the features integrated out (label-free: use it to
        compare chains and for convergence diagnostics).
    :ivar log_likelihood: ``log p(O | Z)``, the features integrated out (the collapsed likelihood
        of :func:`~numpyro_bnp.infer.features.linear_gaussian.collapsed_log_marginal`).
    :ivar rng_key: PRNG key.
    """

    i: jnp.ndarray
    z: dict
    logits: jnp.ndarray
    num_active: jnp.ndarray
    accept_prob: jnp.ndarray
    log_joint: jnp.ndarray
    log_likelihood: jnp.ndarray
    rng_key: jnp.ndarray


# ---------------------------------------------------------------------------- small pieces
def _log_convolve(a, b):
    """``log Σ_s exp(a[s] + b[J - s])`` for ``J = 0..M`` (two log pmfs on ``0..M``)."""
    counts = jnp.arange(a.shape[-1])
    idx = counts[:, None] - counts[None, :]
    terms = a[None, :] + jnp.where(idx >= 0, b[jnp.clip(idx, 0)], -jnp.inf)
    return logsumexp(terms, axis=1)


def _row_log_lik(x, u, s, noise_var):
    """``log N(x; u, σ_o²(1 + s) I)`` up to a constant; ``u`` ``(..., D)``, ``s`` ``(...)``."""
    return predictive_log_density(jnp.sum((x - u) ** 2, -1), noise_var * (1.0 + s), x.shape[-1])


def _clipped_probs(logits):
    """``sigmoid(logits)`` with the logits clipped so that ``0 < π < 1`` in the dtype.

    The state keeps the exact logits; the Poisson-binomial tables and conditional-Bernoulli draws
    need probabilities with finite logs (an atom rounded to exactly 0 or 1 would make a count
    impossible). Clipping changes ``π`` by at most the dtype's resolution.
    """
    info = jnp.finfo(logits.dtype)
    low, high = jnp.log(info.tiny) + 1.0, -jnp.log(info.eps)
    clipped = jnp.clip(logits, low, high)
    return clipped, jax.nn.sigmoid(clipped)


# ---------------------------------------------------------------------------- the moves
def _update_rows(key, z, logits, nums, max_count, fixed_count, power=1.0):
    """One sweep over the rows (step 1 of the module docstring); returns ``(Z, accepted (N,))``.

    ``power`` tempers the likelihood (``p(o_n | ·)^power``; 1 is the posterior).
    """
    dtype = logits.dtype
    x = nums.obs.astype(dtype)
    noise_var = nums.noise_var.astype(dtype)
    num_features = z.shape[1]
    logits, probs = _clipped_probs(logits)
    log_pb = poisson_binomial_log_pmf(probs, max_count)
    log_f = nums.count_log_pmf.astype(dtype)
    # log f_n(J) - log PB(J), with -inf at J = max_count + 1 for the flips
    count_term = jnp.concatenate([log_f - log_pb, jnp.full((z.shape[0], 1), -jnp.inf, dtype)], 1)
    suffix = suffix_log_pmf(probs, max_count)
    zf = z.astype(dtype)
    ztx = zf.T @ x
    _, chol = feature_posterior(zf.T @ zf, ztx, noise_var, nums.feature_var.astype(dtype))
    minv = posterior_covariance(chol) / noise_var  # M⁻¹ = (ZᵀZ + σ_o²/σ_A² I)⁻¹ = Σ / σ_o²

    def row(carry, inputs):
        minv, ztx = carry
        z_n, x_n, log_f_n, term_n, key = inputs
        k_prop, k_count, k_accept, k_swap, k_flip = random.split(key, 5)
        z_old = z_n.astype(dtype)
        v = minv @ z_old
        p = minv + jnp.outer(v, v) / (1.0 - z_old @ v)  # (M - z zᵀ)⁻¹: the other rows only
        rest = ztx - jnp.outer(z_old, x_n)
        h = p @ rest  # (K, D) posterior mean of A given the other rows
        diag = jnp.diag(p)

        def stats(zv):
            pz = p @ zv
            return zv @ h, pz, zv @ pz

        def log_lik(u, s):
            return power * _row_log_lik(x_n, u, s, noise_var)

        # (a) independence proposal from the prior row law given π
        count = random.categorical(k_count, log_f_n)
        z_prop = conditional_bernoulli_sequential(k_prop, probs, suffix, count).astype(dtype)
        cur, prop = stats(z_old), stats(z_prop)
        log_ratio = log_lik(prop[0], prop[2]) - log_lik(cur[0], cur[2])
        accept = jnp.log(random.uniform(k_accept, dtype=dtype)) < log_ratio
        zv = jnp.where(accept, z_prop, z_old)
        u, pz, s = jax.tree.map(lambda a, b: jnp.where(accept, a, b), prop, cur)

        # (b) swaps: move one of the |z_n| ones, keeping the count
        def swap(t, c):
            zv, u, pz, s = c
            k_j, k_k = random.split(random.fold_in(k_swap, t))
            j = random.categorical(k_j, jnp.where(zv > 0, 0.0, -jnp.inf))
            zb = zv.at[j].set(0.0)
            ub, pzb, sb = u - h[j], pz - p[:, j], s - 2.0 * pz[j] + p[j, j]
            score = logits + log_lik(ub[None, :] + h, sb + 2.0 * pzb + diag)
            k = random.categorical(k_k, jnp.where(zb > 0, -jnp.inf, score))
            return zb.at[k].set(1.0), ub + h[k], pzb + p[:, k], sb + 2.0 * pzb[k] + p[k, k]

        num_ones = jnp.sum(zv).astype(jnp.int32)
        zv, u, pz, s = lax.fori_loop(0, num_ones, swap, (zv, u, pz, s))

        # (c) single-site flips with the count factor f_n(m) / PB_π(m)
        if not fixed_count:

            def flip(c, inputs):
                zv, u, pz, s = c
                k, key = inputs
                on = zv[k] > 0
                sign = jnp.where(on, -1.0, 1.0)  # towards the other value
                u2, pz2, s2 = u + sign * h[k], pz + sign * p[:, k], s + sign * 2.0 * pz[k] + p[k, k]
                m = jnp.sum(zv).astype(jnp.int32) - on
                ll, ll2 = log_lik(u, s), log_lik(u2, s2)
                log_on = logits[k] + term_n[m + 1] + jnp.where(on, ll, ll2)
                log_off = term_n[m] + jnp.where(on, ll2, ll)
                take = random.uniform(key, dtype=dtype) < jax.nn.sigmoid(log_on - log_off)
                change = take != on
                zv = zv.at[k].set(jnp.where(take, 1.0, 0.0))
                u, pz, s = jax.tree.map(
                    lambda a, b: jnp.where(change, a, b), (u2, pz2, s2), (u, pz, s)
                )
                return (zv, u, pz, s), None

            keys = random.split(k_flip, num_features)
            (zv, u, pz, s), _ = lax.scan(flip, (zv, u, pz, s), (jnp.arange(num_features), keys))

        minv = p - jnp.outer(pz, pz) / (1.0 + s)  # add the new row back (Sherman–Morrison)
        ztx = rest + jnp.outer(zv, x_n)
        return (minv, ztx), (zv.astype(jnp.int32), accept)

    keys = random.split(key, z.shape[0])
    _, (z, accepted) = lax.scan(row, (minv, ztx), (z, x, log_f, count_term, keys))
    return z, accepted


def _update_logits(key, logits, z, beta_a, beta_b, max_count):
    """Slice-sample each ``logit π_k`` from its exact conditional (step 3), ``k = 1..K`` in turn."""
    dtype = logits.dtype
    num_rows = z.shape[0]
    uses = z.sum(0).astype(dtype)
    per_count = jnp.zeros(max_count + 1, dtype).at[z.sum(1)].add(1.0)  # n_J
    suffix = suffix_log_pmf(_clipped_probs(logits)[1], max_count)  # atoms after k, old values
    prefix = jnp.full(max_count + 1, -jnp.inf, dtype).at[0].set(0.0)  # atoms before k, new
    ninf = jnp.full((1,), -jnp.inf, dtype)

    def atom(prefix, inputs):
        ell, a, b, m, after, key = inputs
        others = _log_convolve(prefix, after)  # log PB_{-k}(J)
        others_less = jnp.concatenate([ninf, others[:-1]])  # log PB_{-k}(J - 1)

        def log_density(t):
            lp, lq = jax.nn.log_sigmoid(t), jax.nn.log_sigmoid(-t)
            log_pb = jnp.logaddexp(lq + others, lp + others_less)
            normaliser = jnp.sum(jnp.where(per_count > 0, per_count * log_pb, 0.0))
            return (a + m) * lp + (b + num_rows - m) * lq - normaliser

        new = slice_sample(key, ell, log_density, _LOGIT_WIDTH)
        return poisson_binomial_add_atom(
            prefix, jax.nn.log_sigmoid(new), jax.nn.log_sigmoid(-new)
        ), new

    keys = random.split(key, logits.shape[0])
    inputs = (logits, beta_a.astype(dtype), beta_b.astype(dtype), uses, suffix[1:], keys)
    _, logits = lax.scan(atom, prefix, inputs)
    return logits


def _complement_columns(key, z, logits, nums, max_count, power=1.0):
    """Column-complement moves (step 2 of the module docstring), ``k = 1..K`` in turn.

    The proposal ``z_{:k} → 1 - z_{:k}``, ``logit π_k → -logit π_k`` is an involution with unit
    Jacobian in the logit coordinates, and the logit-space factor ``π_k (1 - π_k)`` of the target
    is unchanged by it, so it is accepted with ``min(1, p(O, Z', π') / p(O, Z, π))`` (features
    integrated out; the likelihood to the power ``power``). It is rejected when a row count leaves
    the support of its ``f_n``. Returns the new ``(Z, logits)``.
    """
    dtype = logits.dtype
    log_f = nums.count_log_pmf.astype(dtype)
    num_rows = z.shape[0]
    x = nums.obs.astype(dtype)
    x_sum = x.sum(0)

    def log_target(z, logits, stats):
        counts = z.sum(1)
        inside = counts <= max_count
        f_n = jnp.take_along_axis(log_f, jnp.clip(counts, 0, max_count)[:, None], 1)[:, 0]
        ok = jnp.all(inside & jnp.isfinite(f_n))
        log_prior = _log_prior(logits, jnp.where(ok, z, 0), nums, max_count)
        log_lik = _feature_posterior(z, nums, dtype, stats)[2]
        return jnp.where(ok, log_prior + power * log_lik, -jnp.inf)

    def column(carry, inputs):
        z, logits, (gram, ztx), current = carry
        k, key = inputs
        col = z[:, k].astype(dtype)
        # ZᵀZ and ZᵀO with column k complemented: O(K² + KD), not O(NK²)
        cross = z.sum(0).astype(dtype) - gram[k]  # (1 - z_k)ᵀ z_j
        cross = cross.at[k].set(num_rows - col.sum())
        gram_new = gram.at[k, :].set(cross).at[:, k].set(cross)
        ztx_new = ztx.at[k].set(x_sum - ztx[k])
        z_new = z.at[:, k].set(1 - z[:, k])
        logits_new = logits.at[k].set(-logits[k])
        proposed = log_target(z_new, logits_new, (gram_new, ztx_new))
        take = jnp.log(random.uniform(key, dtype=dtype)) < proposed - current
        z, logits, gram, ztx = jax.tree.map(
            lambda a, b: jnp.where(take, a, b),
            (z_new, logits_new, gram_new, ztx_new),
            (z, logits, gram, ztx),
        )
        return (z, logits, (gram, ztx), jnp.where(take, proposed, current)), None

    keys = random.split(key, logits.shape[0])
    zf = z.astype(dtype)
    stats = zf.T @ zf, zf.T @ x
    init = (z, logits, stats, log_target(z, logits, stats))
    (z, logits, _, _), _ = lax.scan(column, init, (jnp.arange(logits.shape[0]), keys))
    return z, logits


def _tilt(key, logits, beta_a, beta_b):
    """Esscher tilt move (step 4): ``logits + θ`` with ``θ`` slice-sampled from the prior alone."""
    a, b = beta_a.astype(logits.dtype), beta_b.astype(logits.dtype)

    def log_density(theta):
        t = logits + theta
        return jnp.sum(a * jax.nn.log_sigmoid(t) + b * jax.nn.log_sigmoid(-t))

    return logits + slice_sample(key, jnp.zeros((), logits.dtype), log_density, _TILT_WIDTH)


def _feature_posterior(z, nums, dtype, stats=None):
    r"""``p(A | Z, O)`` and the collapsed ``log p(O | Z)``: ``(mean (K, D), chol, log_lik)``.

    :func:`~numpyro_bnp.infer.features.linear_gaussian.feature_posterior` and
    :func:`~numpyro_bnp.infer.features.linear_gaussian.collapsed_log_marginal` with the model's σ_o
    and
    σ_A (``chol`` is the lower Cholesky factor of the precision ``ZᵀZ/σ_o² + I/σ_A²``). ``stats``
    may give ``(ZᵀZ, ZᵀO)`` already computed (then ``z`` is not used).
    """
    x = nums.obs.astype(dtype)
    noise_var = nums.noise_var.astype(dtype)
    feature_var = nums.feature_var.astype(dtype)
    if stats is None:
        zf = z.astype(dtype)
        stats = zf.T @ zf, zf.T @ x
    gram, ztx = stats
    mean, chol = feature_posterior(gram, ztx, noise_var, feature_var)
    log_lik = collapsed_log_marginal(
        chol, ztx, mean, jnp.sum(x * x), x.shape[0], noise_var, feature_var
    )
    return mean, chol, log_lik


def _draw_features(key, z, nums, dtype):
    """``A ~ p(A | Z, O)`` (step 5) and the collapsed ``log p(O | Z)``."""
    mean, chol, log_lik = _feature_posterior(z, nums, dtype)
    return sample_feature_posterior(key, mean, chol), log_lik


def _log_prior(logits, z, nums, max_count):
    """``log p(π) + log P(Z | π)`` (Beta densities on ``π``, restricted rows; A excluded)."""
    dtype = logits.dtype
    lp, lq = jax.nn.log_sigmoid(logits), jax.nn.log_sigmoid(-logits)
    a, b = nums.beta_a.astype(dtype), nums.beta_b.astype(dtype)
    log_beta = jnp.sum((a - 1.0) * lp + (b - 1.0) * lq - betaln(a, b))
    counts = z.sum(1)
    uses = z.sum(0).astype(dtype)
    log_pb = poisson_binomial_log_pmf(_clipped_probs(logits)[1], max_count)
    log_f = jnp.take_along_axis(nums.count_log_pmf.astype(dtype), counts[:, None], 1)[:, 0]
    rows = jnp.sum(log_f - log_pb[counts]) + jnp.sum(uses * lp + (z.shape[0] - uses) * lq)
    return log_beta + rows


# ---------------------------------------------------------------------------- the kernel
class RestrictedIBPGibbs(MCMCKernel):
    r"""Collapsed Gibbs sampler for restricted-IBP linear-Gaussian models (module docstring).

    Works with :class:`numpyro.infer.MCMC` (any number of chains, ``chain_method`` "sequential",
    "vectorized" or "parallel"), ``arviz.from_numpyro`` (posterior, log-likelihood, sample stats)
    and ``MCMC(..., jit_model_args=True)``: data and hyperparameters are read from the model at
    every step, through the model itself.

    The model is read once per :meth:`init` by
    :func:`~numpyro_bnp.infer.features.restricted_model.read_restricted_feature_model`; a model that
    does not fit raises a ``ValueError`` naming the site expected and listing the sites found.

    :param model: a NumPyro model such as :func:`numpyro_bnp.models.restricted_linear_gaussian`.
    :param bool anneal: temper the likelihood during the first half of the warmup (module
        docstring); the samples after warmup are exact either way.

    Samples are a dict with the model's weight (``π``, ``(K,)``), rows (``Z``, ``(N, K)``) and
    feature (``A``, ``(K, D)``) sites. Feature labels are not identified: summarise label-free
    functions (sorted ``π``, ``num_active``, row counts, ``log_joint``) when computing ESS or
    R-hat. Extra fields: ``num_active``, ``accept_prob`` (fraction of rows whose prior-row proposal
    was accepted), ``log_joint`` (``log p(O, Z, π)``, features integrated out; compare chains
    with it — a chain stuck in a local mode has a clearly lower value), ``log_likelihood``
    (``log p(O | Z)``, features integrated out).
    ``init_params`` may give the weight and/or rows site values (constrained); otherwise ``π``
    starts at its prior mean and the rows are drawn from their prior law given it (different for
    each chain); the features are drawn from their posterior.

    **Example**

    .. code-block:: python

        >>> from functools import partial
        >>> import numpyro.distributions as dist
        >>> from jax import random
        >>> from numpyro.infer import MCMC
        >>> from numpyro_bnp import models
        >>> from numpyro_bnp.infer import RestrictedIBPGibbs
        >>> model = partial(models.restricted_linear_gaussian, num_obs=20, dim=4,
        ...                 count_dist=dist.Poisson(2.0), mass=2.0, max_features=10)
        >>> obs = random.normal(random.PRNGKey(0), (20, 4))
        >>> mcmc = MCMC(RestrictedIBPGibbs(model), num_warmup=50, num_samples=100,
        ...             progress_bar=False)
        >>> mcmc.run(random.PRNGKey(1), obs=obs)
        >>> mcmc.get_samples()["Z"].shape
        (100, 20, 10)
    """

    sample_field = "z"

    def __init__(self, model, *, anneal=True):
        self._model = model_function(model)
        self._anneal = bool(anneal)
        self._num_warmup = 0
        self._spec = None
        self._read_for = None
        self._batched = False

    @property
    def model(self):
        return self._model

    @property
    def default_fields(self):
        return ("z",)

    def get_diagnostics_str(self, state):
        return f"{int(state.num_active)} active, row acceptance {float(state.accept_prob):.2f}"

    def _values(self, logits, z, a):
        spec = self._spec
        return {spec.weight_site: jax.nn.sigmoid(logits), spec.rows_site: z, spec.feature_site: a}

    def _placeholder(self, dtype):
        spec = self._spec
        return self._values(
            jnp.zeros(spec.max_features, dtype),
            jnp.zeros((spec.num_rows, spec.max_features), jnp.int32),
            jnp.zeros((spec.max_features, spec.dim), dtype),
        )

    def _init_params(self, init_params):
        """The user's initial ``π`` / ``Z`` (validated), each ``None`` when not given."""
        if init_params is None:
            return None, None
        if not isinstance(init_params, dict):
            raise TypeError("init_params must be a dict of site values")
        spec = self._spec
        unknown = set(init_params) - {spec.weight_site, spec.rows_site, spec.feature_site}
        if unknown:
            raise ValueError(f"init_params has unknown sites {sorted(unknown)}")
        pi, z = init_params.get(spec.weight_site), init_params.get(spec.rows_site)
        shapes = {
            spec.weight_site: (spec.max_features,),
            spec.rows_site: (spec.num_rows, spec.max_features),
        }
        for name, value in ((spec.weight_site, pi), (spec.rows_site, z)):
            if value is not None and jnp.shape(value)[-len(shapes[name]) :] != shapes[name]:
                raise ValueError(
                    f"init_params[{name!r}] must have shape {shapes[name]}, got {jnp.shape(value)}"
                )
        if pi is not None and not bool(jnp.all((jnp.asarray(pi) > 0) & (jnp.asarray(pi) < 1))):
            raise ValueError(f"init_params[{spec.weight_site!r}] must lie strictly inside (0, 1)")
        if z is not None:
            z_host = np.asarray(z)
            counts = z_host.sum(-1)
            allowed = spec.count_support  # (N, max_count + 1)
            rows = np.broadcast_to(np.arange(spec.num_rows), counts.shape)
            inside = counts <= spec.max_count
            if not (
                np.isin(z_host, (0, 1)).all()
                and inside.all()
                and allowed[rows, np.minimum(counts, spec.max_count)].all()
            ):
                raise ValueError(
                    f"init_params[{spec.rows_site!r}] must be binary with every row count allowed "
                    "by that row's count law"
                )
        return pi, z

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        self._num_warmup = num_warmup
        cached = self._read_for
        if cached is None or cached[0] is not model_args or cached[1] is not model_kwargs:
            # Sequential chains call init once per chain with the same arguments: read the model
            # and compile the initialisation once (the references keep the identities valid).
            self._spec = read_restricted_feature_model(
                self._model, model_args, model_kwargs, engine="RestrictedIBPGibbs"
            )

            def init_one(key, pi, z):
                return self._init_one(key, pi, z, model_args, model_kwargs)

            self._read_for = (model_args, model_kwargs, jax.jit(init_one), {})
        _, _, init_one, batched = self._read_for
        pi, z = self._init_params(init_params)
        self._batched = chains_batched(rng_key, "RestrictedIBPGibbs")
        if not self._batched:
            return init_one(rng_key, pi, z)
        # chain_method="vectorized": a batch of keys (and of init params)
        in_axes = (0, None if pi is None else 0, None if z is None else 0)
        if in_axes not in batched:
            batched[in_axes] = jax.jit(over_chains(init_one, True, in_axes))
        return batched[in_axes](rng_key, pi, z)

    def _init_one(self, rng_key, pi, z, model_args, model_kwargs):
        spec = self._spec
        dtype = jnp.result_type(float)
        nums = spec.numbers(self._placeholder(dtype), model_args, model_kwargs)
        key, k_count, k_rows, k_a = random.split(rng_key, 4)
        if pi is None:  # the prior mean a / (a + b); the first π update moves it (cheap to compile)
            logits = jnp.log(nums.beta_a.astype(dtype)) - jnp.log(nums.beta_b.astype(dtype))
        else:
            pi = jnp.clip(jnp.asarray(pi, dtype), jnp.finfo(dtype).tiny, 1.0 - jnp.finfo(dtype).eps)
            logits = logit(pi)
        if z is None:
            _, probs = _clipped_probs(logits)
            suffix = suffix_log_pmf(probs, spec.max_count)
            counts = random.categorical(k_count, nums.count_log_pmf.astype(dtype))
            keys = random.split(k_rows, spec.num_rows)
            z = jax.vmap(conditional_bernoulli_sequential, (0, None, None, 0))(
                keys, probs, suffix, counts
            )
        z = jnp.asarray(z, jnp.int32)
        a, log_lik = _draw_features(k_a, z, nums, dtype)
        return RestrictedIBPGibbsState(
            i=jnp.zeros((), jnp.int32),
            z=self._values(logits, z, a),
            logits=logits,
            num_active=jnp.sum(z.sum(0) > 0).astype(jnp.int32),
            accept_prob=jnp.zeros((), dtype),
            log_joint=log_lik + _log_prior(logits, z, nums, spec.max_count),
            log_likelihood=log_lik,
            rng_key=key,
        )

    def _sample_one(self, state, model_args, model_kwargs):
        spec = self._spec
        z, logits = state.z[spec.rows_site], state.logits
        nums = spec.numbers(state.z, model_args, model_kwargs)
        key, k_rows, k_flip, k_pi, k_tilt, k_a = random.split(state.rng_key, 6)
        power = 1.0
        if self._anneal and self._num_warmup > 0:  # linear from ~0 to 1 over half the warmup
            power = jnp.clip((state.i + 1.0) / (0.5 * self._num_warmup), 0.0, 1.0)
        z, accepted = _update_rows(k_rows, z, logits, nums, spec.max_count, spec.fixed_count, power)
        if not spec.fixed_count:
            z, logits = _complement_columns(k_flip, z, logits, nums, spec.max_count, power)
        logits = _update_logits(k_pi, logits, z, nums.beta_a, nums.beta_b, spec.max_count)
        logits = _tilt(k_tilt, logits, nums.beta_a, nums.beta_b)
        a, log_lik = _draw_features(k_a, z, nums, logits.dtype)
        return RestrictedIBPGibbsState(
            i=state.i + 1,
            z=self._values(logits, z, a),
            logits=logits,
            num_active=jnp.sum(z.sum(0) > 0).astype(jnp.int32),
            accept_prob=jnp.mean(accepted.astype(logits.dtype)),
            log_joint=log_lik + _log_prior(logits, z, nums, spec.max_count),
            log_likelihood=log_lik,
            rng_key=key,
        )

    def sample(self, state, model_args, model_kwargs):
        def one(s):
            return self._sample_one(s, model_args, model_kwargs)

        return over_chains(one, self._batched)(state)

    def postprocess_fn(self, model_args, model_kwargs):
        """The sampled site values plus the model's deterministic sites at them."""
        return with_deterministic(
            self._model, model_args, model_kwargs, engine="RestrictedIBPGibbs"
        )
