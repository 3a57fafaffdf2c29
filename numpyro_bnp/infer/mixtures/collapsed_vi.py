r"""Collapsed variational inference for one batch of a truncated Dirichlet-process mixture.

Kurihara, Welling & Teh, *Collapsed variational Dirichlet process mixture models*, IJCAI 2007
(``docs/power_prior.md``). The mixture has ``T`` components ``θ_k`` with conjugate priors (a
family of :mod:`numpyro_bnp.families`), labels ``z_n`` and the truncated stick-breaking (TSB)
prior ``v_k ~ Beta(1, α)``, ``v_T = 1``, whose sticks are integrated out:

.. math::
    p(z) = \prod_{k<T} \frac{Γ(1+α)}{Γ(α)} \frac{Γ(1+N_k)\, Γ(α+N_{>k})}{Γ(1+α+N_{\ge k})}.

The variational family is ``q(z, θ) = Π_n Cat(z_n | φ_n) Π_k q(θ_k | λ_k)``. The counts
``N_k, N_{>k}, N_{≥k}`` are sums of independent Bernoullis under ``q(z)``; their expected logs
(and log-gammas) are replaced by their second-order Taylor expansions about the mean (Teh,
Kurihara & Welling 2008), ``E log(c + N) ≈ log(c + E N) − Var N / (2 (c + E N)²)`` and
``E log Γ(c + N) ≈ log Γ(c + E N) + ψ'(c + E N) Var N / 2``. The coordinate updates are

.. math::
    φ_{nk} \propto \exp\big(E[\log p(z_n = k \mid z_{-n})] + E_{q(θ_k)}[\log p(x_n \mid θ_k)]\big),
    \qquad λ_k = λ_{\mathrm{prior},k} + \sum_n φ_{nk}\, t(x_n),

with ``E log p(z_n = k | z_{−n}) = E log(1 + N_k) − E log(1 + α + N_{≥k}) + Σ_{j<k} [E log(α +
N_{>j}) − E log(1 + α + N_{≥j})]`` (leave-one-out counts; for ``k = T`` only the sum). The
``φ_n`` are swept one row at a time (a ``lax.scan``, the leave-one-out counts kept exactly), then
all ``λ_k`` are solved at once (:meth:`~numpyro_bnp.families.ConjugateFamily.absorb`), until the
ELBO

.. math::
    L = E_q[\log p(z)] + \sum_{n,k} φ_{nk} E[\log p(x_n \mid θ_k)]
        - \sum_k \mathrm{KL}(q(θ_k \mid λ_k) \,\|\, p(θ_k \mid λ_{\mathrm{prior},k}))
        - \sum_{n,k} φ_{nk} \log φ_{nk}

changes by less than ``tol`` relative to its size. ``λ_prior`` is one prior per component: the
model's, or a power prior of the previous batch's posterior
(:mod:`~numpyro_bnp.infer.mixtures.power_prior`).

Shapes: ``obs`` ``(N, D)`` with ``mask`` ``(N,)`` (padding rows have mask 0 and ``φ = 0``), ``φ``
``(N, T)``, parameters of the family with a leading axis ``T``.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.scipy.special import gammaln, polygamma, xlogy


class BatchFit(NamedTuple):
    """The fit of one batch: responsibilities ``phi`` ``(N, T)``, posterior ``params`` (leading
    axis ``T``), the ``elbo``, the number of sweeps ``num_iter`` and whether the ELBO met the
    tolerance (``converged``)."""

    phi: jnp.ndarray
    params: object
    elbo: jnp.ndarray
    num_iter: jnp.ndarray
    converged: jnp.ndarray


def _tails(phi):
    """``(s_{≥k}, s_{>k})`` ``(..., T)``: each row's probability of a label ``≥ k`` and ``> k``."""
    at_least = jnp.clip(jnp.cumsum(phi[..., ::-1], axis=-1)[..., ::-1], 0.0, 1.0)
    return at_least, jnp.clip(at_least - phi, 0.0, 1.0)


def _row_terms(phi_n):
    """``(3, T)`` one row's Bernoulli probabilities of the counts ``N_k, N_{>k}, N_{≥k}``."""
    at_least, above = _tails(phi_n)
    return jnp.stack([phi_n, above, at_least])


def count_moments(phi):
    """``(mean, var)``, each ``(3, T)``: the means and variances of ``N_k``, ``N_{>k}`` and
    ``N_{≥k}`` (rows 0, 1, 2) under ``q(z)``, sums of independent Bernoullis (Poisson-binomial)."""
    at_least, above = _tails(phi)
    probs = jnp.stack([phi, above, at_least])  # (3, N, T)
    return probs.sum(1), (probs * (1.0 - probs)).sum(1)


def _expected_log(c, mean, var):
    """Second-order ``E log(c + N)``."""
    shifted = c + mean
    return jnp.log(shifted) - var / (2.0 * shifted**2)


def _expected_log_gamma(c, mean, var):
    """Second-order ``E log Γ(c + N)``."""
    shifted = c + mean
    return gammaln(shifted) + 0.5 * polygamma(1, shifted) * var


def label_log_prior(mean, var, alpha):
    """``(T,)`` ``E[log p(z_n = k | z_{−n})]`` from the leave-one-out count moments ``mean``,
    ``var`` ``(3, T)`` (module docstring; second-order expansions)."""
    take = _expected_log(1.0, mean[0], var[0]) - _expected_log(1.0 + alpha, mean[2], var[2])
    passing = _expected_log(alpha, mean[1], var[1]) - _expected_log(1.0 + alpha, mean[2], var[2])
    passed = jnp.cumsum(passing) - passing  # Σ_{j<k}
    last = jnp.arange(mean.shape[-1]) == mean.shape[-1] - 1  # v_T = 1: no stick to take
    return passed + jnp.where(last, 0.0, take)


def expected_log_prior(phi, alpha):
    """``E_q[log p(z)]`` of the collapsed TSB prior (module docstring; second order)."""
    mean, var = count_moments(phi)
    terms = (
        gammaln(1.0 + alpha)
        - gammaln(alpha)
        + _expected_log_gamma(1.0, mean[0], var[0])
        + _expected_log_gamma(alpha, mean[1], var[1])
        - _expected_log_gamma(1.0 + alpha, mean[2], var[2])
    )
    return jnp.sum(terms[:-1])


def sweep(phi, loglik, mask, alpha):
    """One pass of the ``φ_n`` updates, row by row, each against the others' current values.

    :param phi: ``(N, T)`` responsibilities; :param loglik: ``(N, T)``
        ``E_q[log p(x_n | θ_k)]``; :param mask: ``(N,)`` 1 for rows, 0 for padding.
    :return: ``(N, T)`` the new responsibilities.
    """
    mean, var = count_moments(phi)

    def row(carry, inputs):
        mean, var = carry
        phi_n, loglik_n, valid = inputs
        own = _row_terms(phi_n)
        mean, var = mean - own, var - own * (1.0 - own)
        new = valid * jax.nn.softmax(label_log_prior(mean, var, alpha) + loglik_n)
        own = _row_terms(new)
        return (mean + own, var + own * (1.0 - own)), new

    return lax.scan(row, (mean, var), (phi, loglik, mask))[1]


def expected_log_likelihood(family, params, obs):
    """``(N, T)`` ``E_{q(θ_k)}[log p(x_n | θ_k)]``."""
    return jax.vmap(lambda x: family.expected_log_likelihood(params, x))(obs)


def elbo(family, prior, params, phi, loglik, alpha):
    """The batch's collapsed ELBO (module docstring) at ``φ``, ``params`` and their
    ``loglik`` ``(N, T)``."""
    return (
        expected_log_prior(phi, alpha)
        + jnp.sum(phi * loglik)
        - jnp.sum(family.kl(params, prior))
        - jnp.sum(xlogy(phi, phi))
    )


def fit(family, prior, obs, mask, phi, alpha, max_iter, tol):
    """Coordinate ascent from the responsibilities ``phi`` to convergence.

    :param family: a :class:`~numpyro_bnp.families.ConjugateFamily`; :param prior: its
        parameters with a leading axis ``T`` (one prior per component).
    :param max_iter: the most sweeps; :param tol: stop when the ELBO changes by less than
        ``tol * |ELBO|``.
    :return: :class:`BatchFit`.
    """
    phi = phi * mask[:, None]

    def solve(phi):
        params = family.absorb(prior, obs, phi)
        loglik = expected_log_likelihood(family, params, obs)
        return params, loglik, elbo(family, prior, params, phi, loglik, alpha)

    params, loglik, value = solve(phi)

    def step(carry):
        phi, _, loglik, value, _, num_iter = carry
        phi = sweep(phi, loglik, mask, alpha)
        params, loglik, new = solve(phi)
        return phi, params, loglik, new, jnp.abs(new - value) <= tol * jnp.abs(new), num_iter + 1

    def going(carry):
        return ~carry[4] & (carry[5] < max_iter)

    start = (phi, params, loglik, value, jnp.zeros((), bool), jnp.zeros((), jnp.int32))
    phi, params, _, value, converged, num_iter = lax.while_loop(going, step, start)
    return BatchFit(phi, params, value, num_iter, converged)


def initial_responsibilities(family, prior, obs, mask, fresh, key):
    """Two starting responsibilities ``(2, N, T)`` of a batch, to fit from both and keep the
    fit of the higher ELBO (variational EM's usual restarts).

    0. **the components claim the batch**: each row takes the components that are not
       ``fresh`` ``(T,)`` (their prior carries a previous batch) in proportion to their
       predictive densities; the fresh ones start empty and take, in the sweeps, the rows the
       others explain worse. A component whose data moved is pulled towards them, which is
       what lets the power prior see the change.
    1. **seeded anew**, k-means++ style (Arthur & Vassilvitskii 2007) in the family's
       predictive, ignoring what the priors carry: each component in turn is seeded by one row
       drawn with probability proportional to how much less likely it is under the best
       component so far than the best-explained row (the first uniformly), starting from the
       posterior of that row alone; each row then takes the seeded components in proportion to
       their predictive densities. This start wins where the priors are weak (a large change,
       ``ρ`` near 0) and the claimed start would keep merged clusters.

    With every component fresh (the first batch, ``ρ = 0``), the first start is the second.
    """
    base = jax.tree.map(lambda a: a[0], family.init_clusters(1))
    log_pred = jax.vmap(lambda x: family.log_predictive(prior, x))(obs)  # (N, T)
    keys = random.split(key, fresh.shape[0])

    def seed(carry, inputs):
        seeded, best = carry
        k, key = inputs
        surprise = jnp.where(jnp.isfinite(best), -best, 0.0)
        weight = mask * (surprise - jnp.min(jnp.where(mask > 0, surprise, jnp.inf)) + 1e-6)
        row = random.categorical(key, jnp.log(weight))
        start = family.update(base, family.stats(obs[row]), 1.0)
        column = jax.vmap(lambda x: family.log_predictive(start, x))(obs)
        return (seeded.at[:, k].set(column), jnp.maximum(best, column)), None

    empty = jnp.full(log_pred.shape, -jnp.inf, log_pred.dtype)
    (seeded, _), _ = lax.scan(
        seed, (empty, jnp.full(mask.shape, -jnp.inf)), (jnp.arange(fresh.shape[0]), keys)
    )
    seeded = jax.nn.softmax(seeded, axis=1)
    claimed = jax.nn.softmax(jnp.where(fresh, -jnp.inf, log_pred), axis=1)
    claimed = jnp.where(jnp.all(fresh), seeded, claimed)
    return jnp.stack([claimed, seeded]) * mask[:, None]
