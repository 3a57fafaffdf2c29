"""NGGPMarginalGibbs on components that are not conjugate (Neal's Algorithm 8).

The reference is exact: five one-dimensional rows under an NGGP (σ = ½) mixture of Normals whose
location ``μ ~ N(0, 2²)`` and scale ``s ~ LogNormal(0, ½)`` are independent a priori (no
conjugate prior), so each cluster's marginal likelihood ``∫∫ ∏ N(x_i | μ, s) p(μ) p(s)`` is
computed by quadrature on a fine grid, and the posterior over all 52 partitions by enumeration
(the EPPF times those marginals). The chain's partition frequencies, and the components of row
0's cluster (``E[μ]``, ``E[log s]``, by the same quadrature), must match within 4 Monte-Carlo
standard errors (ArviZ ESS, ``mc_checks.check_mean``). A tempered replica is checked against its
enumerated tempered target in the same run, a chain without data against the prior, and a block
of ``numpyro.infer.Gibbs`` beside NUTS on a shared prior mean against the enumerated posterior
over the partitions and a grid of that mean.
"""

import functools
import itertools

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from mc_checks import check_labels_against_enumeration, check_mean, check_partition_events
from numpyro.infer import MCMC, NUTS, Gibbs
from scipy.special import logsumexp
from scipy.stats import laplace, lognorm, norm
from test_nggp_gibbs import X1, partitions

from numpyro_bnp import models
from numpyro_bnp._math import nggp_log_v
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.infer import NGGPMarginalGibbs
from numpyro_bnp.infer.mixtures.nggp_gibbs.auxiliary import PREDICTIVE_DRAWS

NGGP_PARAMS = dict(mass=1.0, sigma=0.5, tau=1.0)
SIGMA_MU, LOG_S_SCALE = 2.0, 0.5
BETAS = (1.0, 0.4)
PAIRS = tuple(itertools.combinations(range(5), 2))
FIELDS = ("num_clusters", "co_clustered", "replicas.num_clusters", "replicas.co_clustered")


def location_scale(obs=None, *, num_obs=5, max_clusters=8):
    z = numpyro.sample("z", NGGP(**NGGP_PARAMS, num_points=num_obs))
    with numpyro.plate("clusters", max_clusters):
        mu = numpyro.sample("mu", dist.Normal(0.0, SIGMA_MU).expand([1]).to_event(1))
        s = numpyro.sample("s", dist.LogNormal(0.0, LOG_S_SCALE).expand([1]).to_event(1))
    numpyro.sample("obs", dist.Normal(mu[z], s[z]).to_event(1), obs=obs)


# quadrature grid of (μ, log s) and the prior's weights on it
MU = np.linspace(-12.0, 12.0, 601)
LOG_S = np.linspace(-3.5, 2.5, 301)
_M, _L = np.meshgrid(MU, LOG_S, indexing="ij")
LOG_PRIOR = (
    norm.logpdf(_M, 0.0, SIGMA_MU)
    + lognorm.logpdf(np.exp(_L), LOG_S_SCALE)
    + _L
    + np.log(MU[1] - MU[0])
    + np.log(LOG_S[1] - LOG_S[0])
)


@functools.cache
def _cluster(rows, beta):
    xs = X1[list(rows), 0]
    log_w = LOG_PRIOR + beta * norm.logpdf(xs[:, None, None], _M, np.exp(_L)).sum(0)
    log_marginal = logsumexp(log_w)
    w = np.exp(log_w - log_marginal)
    return log_marginal, (w * _M).sum(), (w * _L).sum()


def cluster_posterior(rows, beta=1.0):
    """``(log marginal, E[μ], E[log s])`` of the cluster of the rows ``rows`` of ``X1`` by
    quadrature, the likelihood raised to ``beta``: ``∫ H_0(θ) ∏ f(x_i | θ)^β dθ`` (a tempered
    replica keeps the components, so its marginal is not the marginal likelihood to the power
    β)."""
    return _cluster(tuple(int(i) for i in rows), float(beta))


def enumeration(beta=1.0):
    """Every partition of the five rows, its log EPPF, log (tempered) marginal likelihood, and
    the posterior means of row 0's cluster's ``μ`` and ``log s`` given the partition."""
    parts = partitions(5)
    log_eppf = np.asarray(
        NGGP(**NGGP_PARAMS, num_points=5).log_prob(jnp.asarray(parts)), np.float64
    )
    log_lik, mu0, log_s0 = [], [], []
    for p in parts:
        per = [cluster_posterior(np.flatnonzero(p == k), beta) for k in range(p.max() + 1)]
        log_lik.append(sum(c[0] for c in per))
        mu0.append(per[p[0]][1])
        log_s0.append(per[p[0]][2])
    return parts, log_eppf, np.array(log_lik), np.array(mu0), np.array(log_s0)


@pytest.fixture(scope="module")
def tempered_run():
    """4 vectorized chains of 2 replicas (β = 1, 0.4) on the five rows."""
    kernel = NGGPMarginalGibbs(location_scale, pairs=PAIRS, temperatures=BETAS)
    mcmc = MCMC(
        kernel,
        num_warmup=100,
        num_samples=1500,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), obs=jnp.asarray(X1), extra_fields=FIELDS)
    return kernel, mcmc


def test_partitions_and_components_match_the_enumerated_posterior(tempered_run):
    kernel, mcmc = tempered_run
    assert not kernel.collapsed
    extra = mcmc.get_extra_fields(group_by_chain=True)
    for r, beta in enumerate(BETAS):
        parts, log_eppf, log_lik, _, _ = enumeration(beta)
        log_post = log_eppf + log_lik
        probs = np.exp(log_post - logsumexp(log_post))
        name = "" if r == 0 else "replicas."
        num = np.asarray(extra[f"{name}num_clusters"])
        together = np.asarray(extra[f"{name}co_clustered"])
        if r:
            num, together = num[:, :, r - 1], together[:, :, r - 1]
        check_partition_events(num, together, probs, parts)
    # the components of row 0's cluster: E[μ] and E[log s] of the posterior
    parts, log_eppf, log_lik, mu0, log_s0 = enumeration()
    probs = np.exp(log_eppf + log_lik - logsumexp(log_eppf + log_lik))
    samples = mcmc.get_samples(group_by_chain=True)
    z0 = np.asarray(samples["z"])[..., 0]
    mu = np.take_along_axis(np.asarray(samples["mu"])[..., 0], z0[..., None], -1)[..., 0]
    s = np.take_along_axis(np.asarray(samples["s"])[..., 0], z0[..., None], -1)[..., 0]
    check_mean(mu, probs @ mu0)
    check_mean(np.log(s), probs @ log_s0)


def test_a_chain_without_data_samples_the_prior():
    """The partition's EPPF (the number of clusters) and the components' prior (the first
    row's cluster's μ and s; the empty slots' fresh draws are not counted)."""
    mcmc = MCMC(
        NGGPMarginalGibbs(location_scale),
        num_warmup=50,
        num_samples=1000,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(1), extra_fields=("num_clusters",))
    parts = partitions(5)
    probs = np.exp(np.asarray(NGGP(**NGGP_PARAMS, num_points=5).log_prob(jnp.asarray(parts))))
    num = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_clusters"])
    for k in (1, 2, 3):
        check_mean(num == k, probs[parts.max(1) + 1 == k].sum())
    samples = mcmc.get_samples(group_by_chain=True)
    z0 = np.asarray(samples["z"])[..., :1]
    mu = np.take_along_axis(np.asarray(samples["mu"])[..., 0], z0, -1)[..., 0]
    log_s = np.log(np.take_along_axis(np.asarray(samples["s"])[..., 0], z0, -1)[..., 0])
    check_mean(mu, 0.0)
    check_mean(mu**2, SIGMA_MU**2)
    check_mean(log_s**2, LOG_S_SCALE**2)


def test_log_predictive_is_the_mixture_given_each_draw(tempered_run):
    """For draws of (labels, μ, s): the weights (n_k − σ) V_{N+1,K}/V_{N,K} of the clusters'
    Normal densities and V_{N+1,K+1}/V_{N,K} of a new cluster's prior predictive (quadrature
    here; the kernel's Monte-Carlo estimate over prior draws, checked against its standard
    error)."""
    kernel, mcmc = tempered_run
    samples = {k: np.asarray(v)[:3] for k, v in mcmc.get_samples().items()}
    new = np.array([[-2.0], [0.5], [3.0]])
    ours = kernel.log_predictive(samples, new, obs=jnp.asarray(X1))
    log_v = np.asarray(nggp_log_v(6.0, jnp.arange(1.0, 7.0), 1.0, 0.5, 1.0)[0], np.float64)
    base = np.array([logsumexp(LOG_PRIOR + norm.logpdf(x, _M, np.exp(_L))) for x in new[:, 0]])
    scores = []
    draws = zip(samples["z"], samples["mu"][..., 0], samples["s"][..., 0], strict=True)
    for labels, mu, scale in draws:
        sizes = np.bincount(labels)
        k = len(sizes)
        log_w = np.append(np.log(sizes - 0.5) + log_v[k - 1], log_v[k])
        dens = norm.logpdf(new[:, :1], mu[:k], scale[:k])  # (M, k)
        scores.append(logsumexp(np.column_stack([dens, base]) + log_w, axis=1) - logsumexp(log_w))
    exact = logsumexp(np.array(scores), axis=0) - np.log(len(scores))
    # the kernel's new-cluster term is a mean of PREDICTIVE_DRAWS prior densities: its log
    # differs from the exact one by at most its relative error, which 4 standard errors bound
    rng = np.random.default_rng(0)
    mu = rng.normal(0.0, SIGMA_MU, PREDICTIVE_DRAWS)
    scale = rng.lognormal(0.0, LOG_S_SCALE, PREDICTIVE_DRAWS)
    dens = norm.pdf(new, mu, scale)  # (M, draws)
    relative_se = dens.std(1) / dens.mean(1) / np.sqrt(PREDICTIVE_DRAWS)
    assert np.all(np.abs(ours - exact) < 4 * relative_se), (ours - exact, relative_se)
    with pytest.raises(ValueError, match="component sites"):  # the labels alone are not enough
        kernel.log_predictive(samples["z"], new, obs=jnp.asarray(X1))


def test_conjugate_models_stay_collapsed_and_bad_settings_are_refused():
    kernel = NGGPMarginalGibbs(models.nggp_normal_mixture)
    kernel.init(
        random.PRNGKey(0),
        0,
        None,
        (jnp.asarray(X1),),
        dict(num_obs=5, dim=1, sigma_o=0.7),
    )
    assert kernel.collapsed
    with pytest.raises(ValueError, match="split_merge=2"):
        NGGPMarginalGibbs(location_scale, split_merge=2).init(
            random.PRNGKey(0), 0, None, (jnp.asarray(X1),), {}
        )
    with pytest.raises(ValueError, match="num_auxiliary"):
        NGGPMarginalGibbs(location_scale, num_auxiliary=0)

    def first_component(obs=None):
        z = numpyro.sample("z", NGGP(**NGGP_PARAMS, num_points=5))
        with numpyro.plate("clusters", 8):
            mu = numpyro.sample("mu", dist.Normal(0.0, SIGMA_MU).expand([1]).to_event(1))
            s = numpyro.sample("s", dist.LogNormal(0.0, 0.5).expand([1]).to_event(1))
        numpyro.sample("obs", dist.Normal(mu[0] + 0 * mu[z], s[z]).to_event(1), obs=obs)

    with pytest.raises(ValueError, match="renumbered"):
        NGGPMarginalGibbs(first_component).init(random.PRNGKey(0), 0, None, (jnp.asarray(X1),), {})


def test_a_gibbs_block_with_nuts_on_a_shared_location_matches_the_enumerated_posterior():
    """As a block of ``numpyro.infer.Gibbs`` beside NUTS on the components' shared prior mean
    ``m ~ N(0, 1)``: locations ``μ_k ~ Laplace(m, 1)`` (not conjugate to the known-noise
    Normal rows), so each cluster's marginal likelihood given ``m`` is a quadrature over ``μ``,
    and the posterior of ``(m, partition)`` an enumeration over the 52 partitions and a grid
    of ``m``: P(K = k), every pair of rows together and ``E[m]`` within 4 s.e."""
    noise = 0.7

    def shared_mean(obs=None):
        m = numpyro.sample("m", dist.Normal(0.0, 1.0))
        z = numpyro.sample("z", NGGP(**NGGP_PARAMS, num_points=5))
        with numpyro.plate("clusters", 8):
            mu = numpyro.sample("mu", dist.Laplace(m, 1.0).expand([1]).to_event(1))
        numpyro.sample("obs", dist.Normal(mu[z], noise).to_event(1), obs=obs)

    blocks = [
        (NGGPMarginalGibbs(shared_mean, pairs=PAIRS), ["z", "mu"]),
        (NUTS(shared_mean), ["m"]),
    ]
    mcmc = MCMC(
        Gibbs(blocks), num_warmup=100, num_samples=1000, num_chains=2,
        chain_method="sequential", progress_bar=False,
    )  # fmt: skip
    mcmc.run(random.PRNGKey(2), obs=jnp.asarray(X1))
    samples = mcmc.get_samples(group_by_chain=True)
    labels = np.asarray(samples["z"])
    # the exact posterior on a grid of m: p(m) EPPF(z) Π_c ∫ Laplace(μ | m, 1) Π N(x_i | μ, s) dμ
    m_grid = np.linspace(-5.0, 5.0, 201)
    mu_grid = np.linspace(-9.0, 9.0, 901)
    log_prior_mu = laplace.logpdf(mu_grid[None, :], m_grid[:, None]) + np.log(
        mu_grid[1] - mu_grid[0]
    )
    parts = partitions(5)
    log_eppf = np.asarray(NGGP(**NGGP_PARAMS, num_points=5).log_prob(jnp.asarray(parts)))
    log_post = np.zeros((len(parts), len(m_grid))) + norm.logpdf(m_grid) + log_eppf[:, None]
    for p, part in enumerate(parts):
        for k in range(part.max() + 1):
            lik = norm.logpdf(X1[part == k, 0][:, None], mu_grid, noise).sum(0)
            log_post[p] += logsumexp(log_prior_mu + lik, axis=1)
    post = np.exp(log_post - logsumexp(log_post))
    probs = post.sum(1)
    check_labels_against_enumeration(labels, probs, parts)
    check_mean(np.asarray(samples["m"]), (post.sum(0) * m_grid).sum())
