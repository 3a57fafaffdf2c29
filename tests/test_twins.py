"""Truncated twins (numpyro_bnp.infer.truncated_twin): the user's NGGP mixture or IBP feature
model rewritten so that NumPyro's own engines run it. Each check compares with something
computed independently: the NGGP's exact EPPF pmf of K_n, a brute-force sum over labels with
SciPy densities, the known clusters of synthetic data, the finite beta-Bernoulli moments."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro import handlers
from numpyro.infer import MCMC, NUTS, DiscreteHMCGibbs, Predictive
from scipy import stats
from scipy.special import betaln, logsumexp

from numpyro_bnp import models
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.infer import truncated_twin
from numpyro_bnp.infer.twins import pitman_yor_of_nggp
from numpyro_bnp.models import (
    beta_bernoulli_linear_gaussian,
    linear_gaussian,
    nggp_normal_mixture,
)


def _remainder_bound(num_obs, discount, strength, truncation):
    """An upper bound on the total variation between the partitions of ``num_obs`` rows under
    the truncated and the full stick-breaking: they differ only if two rows fall in the last
    (remainder) weight, ``P <= C(n, 2) E[w_T^2]``, ``E[w_T^2] = prod_j E[(1 - v_j)^2]`` with
    ``E[(1 - v)^2] = b (b + 1) / ((a + b)(a + b + 1))`` for ``v ~ Beta(a, b)``."""
    j = np.arange(1, truncation)
    a, b = 1.0 - discount, strength + discount * j
    second = np.prod(b * (b + 1) / ((a + b) * (a + b + 1)))
    return num_obs * (num_obs - 1) / 2 * second


@pytest.mark.parametrize("sigma,tau,mass", [(0.0, 1.0, 1.5), (0.3, 0.0, 2.0)])
def test_twin_prior_partition_matches_the_nggp_pmf(sigma, tau, mass):
    """The twin's prior number of clusters K_n of n = 6 rows matches the NGGP's exact pmf (from
    its EPPF) within 5 MC standard errors plus the truncation bound. σ = 0: DP(mass); τ = 0:
    PY(σ, 0) whatever the mass (the mass 2.0 would give a different law as PY(σ, mass))."""
    n, t, draws = 6, 24, 8000
    kw = dict(num_obs=n, dim=1, mass=mass, sigma=sigma, tau=tau, max_clusters=t)
    twin = truncated_twin(nggp_normal_mixture)
    z = Predictive(twin, num_samples=draws, return_sites=["z"])(random.PRNGKey(0), **kw)["z"]
    z = np.asarray(z)
    k = np.array([len(np.unique(row)) for row in z])
    mc = np.bincount(k, minlength=n + 1)[1:] / draws
    exact = np.asarray(NGGP(mass, sigma, tau, num_points=n).num_clusters_pmf(), np.float64)
    discount, strength = pitman_yor_of_nggp(mass, sigma, tau)
    bound = _remainder_bound(n, discount, strength, t)
    assert bound < 1e-3
    se = np.sqrt(np.clip(exact * (1 - exact), 1e-4, None) / draws)
    np.testing.assert_array_less(np.abs(mc - exact), 5 * se + bound)


def _py_log_density_by_hand(x, v, mu, discount, strength, sigma_mu, sigma_o):
    """log p(v) + log p(mu) + sum_n log sum_k w_k N(x_n | mu_k, s_o), the labels summed by
    brute force over all T^N label vectors (SciPy densities)."""
    t = len(mu)
    j = np.arange(1, t)
    lp = stats.beta.logpdf(v, 1 - discount, strength + discount * j).sum()
    lp += stats.norm.logpdf(mu, 0.0, sigma_mu).sum()
    w = np.append(v, 1.0) * np.concatenate([[1.0], np.cumprod(1 - v)])
    terms = [
        sum(
            np.log(w[zn]) + stats.norm.logpdf(x[i], mu[zn], sigma_o).sum() for i, zn in enumerate(z)
        )
        for z in itertools.product(range(t), repeat=len(x))
    ]
    return lp + logsumexp(terms)


def test_twin_log_density_sums_the_labels_exactly():
    """The twin's log joint with the labels enumerated (as NUTS computes it) equals the brute-force
    sum over the 3^4 label vectors, for the PY(σ, 0) twin of an NGGP(a, σ, 0) mixture."""
    from numpyro.contrib.funsor import config_enumerate, enum
    from numpyro.contrib.funsor import log_density as enum_log_density

    x = np.array([[-1.0], [0.2], [1.5], [1.1]])
    kw = dict(num_obs=4, dim=1, mass=1.3, sigma=0.4, tau=0.0, sigma_mu=2.0, sigma_o=0.7)
    twin = truncated_twin(nggp_normal_mixture)
    v = np.array([0.3, 0.6])
    mu = np.array([[-1.0], [0.5], [1.2]])
    params = {"v": jnp.asarray(v), "mu": jnp.asarray(mu)}  # float64 (conftest)
    model = enum(config_enumerate(twin), first_available_dim=-2)
    kw["max_clusters"] = 3
    lp = jax.jit(lambda p: enum_log_density(model, (x,), kw, p)[0])(params)  # one compile
    expected = _py_log_density_by_hand(x[:, 0], v, mu[:, 0], 0.4, 0.0, 2.0, 0.7)
    np.testing.assert_allclose(float(lp), expected, rtol=1e-9)


def test_dp_twin_has_the_log_density_of_the_hand_written_dp_mixture():
    """The DP twin of nggp_diagonal_gaussian_mixture(max_clusters=T) is models.dp_mixture
    (truncation=T, the same components): same sites, same log joint with the labels summed out,
    so a benchmark can run NUTS on either."""
    from numpyro.contrib.funsor import config_enumerate, enum
    from numpyro.contrib.funsor import log_density as enum_log_density

    x = np.array([[-1.0], [0.2], [1.5], [1.1], [3.0]])
    prior = dict(num_obs=5, dim=1, mass=1.3, loc=0.3, kappa=0.05, concentration=2.0, rate=2.0)
    params = {
        "v": jnp.array([0.3, 0.5, 0.6]),
        "mu": jnp.array([[-1.0], [0.5], [1.2], [3.0]]),
        "lam": jnp.array([[1.0], [2.0], [0.5], [1.5]]),
    }

    def log_joint(model, **kw):
        model = enum(config_enumerate(model), first_available_dim=-2)
        return jax.jit(lambda p: enum_log_density(model, (x,), dict(prior, **kw), p)[0])(params)

    twin = truncated_twin(models.nggp_diagonal_gaussian_mixture)
    ours = log_joint(twin, sigma=0.0, tau=2.0, max_clusters=4)
    hand = log_joint(models.dp_mixture, truncation=4, components="diagonal_gaussian")
    np.testing.assert_allclose(float(ours), float(hand), rtol=1e-12)


def test_nuts_on_the_twin_finds_the_two_clusters():
    """NUTS on the DP twin of nggp_normal_mixture (labels summed out) on 2 x 8 rows at -2 and +2:
    two weights carry the data (the posterior of the rest, given the clusters, has mean
    ~ mass / (N + mass) = 0.06), and their means sit at the groups' means within 5 posterior sd
    (s_o / sqrt(8), the conjugate posterior given the clusters)."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-2.0, 0.3, (8, 1)), rng.normal(2.0, 0.3, (8, 1))])
    kw = dict(num_obs=16, dim=1, mass=1.0, sigma_mu=3.0, sigma_o=0.3, max_clusters=3)
    nuts = NUTS(truncated_twin(nggp_normal_mixture), max_tree_depth=4)
    mcmc = MCMC(nuts, num_warmup=100, num_samples=100, progress_bar=False)
    mcmc.run(random.PRNGKey(0), x, **kw)
    draws = mcmc.get_samples()
    assert "z" not in draws  # summed out
    weights = np.asarray(draws["weights"]).mean(0)
    heavy = np.flatnonzero(weights > 0.25)
    assert len(heavy) == 2 and weights.sum() - weights[heavy].sum() < 0.2
    mu = np.sort(np.asarray(draws["mu"])[:, heavy, 0].mean(0))
    truth = np.array([x[:8].mean(), x[8:].mean()])
    assert np.all(np.abs(mu - truth) < 5 * 0.3 / np.sqrt(8))


def test_twin_of_the_normalized_inverse_gaussian_raises():
    """σ > 0 and τ > 0 (NIG: σ = 1/2) has no stick-breaking twin: a ValueError says why."""
    twin = truncated_twin(nggp_normal_mixture)
    with pytest.raises(ValueError, match="sigma > 0 and tau > 0"):
        handlers.seed(twin, 0)(num_obs=5, dim=1, sigma=0.5, tau=1.0)
    with pytest.raises(ValueError, match="sigma > 0 and tau > 0"):
        pitman_yor_of_nggp(1.0, 0.5, 1.0)


def _no_row_plate(obs=None, *, num_obs):
    z = numpyro.sample("z", NGGP(1.0, 0.0, 1.0, num_points=num_obs))
    with numpyro.plate("cluster", 3):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([1]).to_event(1))
    return numpyro.sample("obs", dist.Normal(mu[z], 1.0).to_event(2), obs=obs)


def test_bad_input_raises_naming_the_argument():
    with pytest.raises(TypeError, match="model"):
        truncated_twin("not a model")
    for bad in (0, -2):
        with pytest.raises(ValueError, match="truncation"):
            truncated_twin(nggp_normal_mixture, truncation=bad)
    with pytest.raises((TypeError, ValueError), match="truncation"):
        truncated_twin(nggp_normal_mixture, truncation=2.5)
    too_many = truncated_twin(nggp_normal_mixture, truncation=5)
    with pytest.raises(ValueError, match="truncation must be at most the 3 clusters"):
        handlers.seed(too_many, 0)(num_obs=4, dim=1, max_clusters=3)
    with pytest.raises(ValueError, match=r"numpyro\.plate over its N=4 rows"):
        handlers.seed(truncated_twin(_no_row_plate), 0)(np.zeros((4, 1)), num_obs=4)
    with pytest.raises(ValueError, match="max_features"):
        handlers.seed(truncated_twin(linear_gaussian, truncation=3), 0)(
            num_obs=4, dim=1, max_features=5
        )


def test_feature_twin_prior_moments():
    """The finite beta-Bernoulli twin of linear_gaussian (IBP(α, β), K atoms): a row uses α
    features on average, as under the IBP, and the number of features N rows use has the finite
    model's mean K (1 - B(a, b + N) / B(a, b)), a = αβ/K, b = β - a, which tends to the IBP's
    Σ_n αβ / (β + n - 1) as K grows. The twin of beta_bernoulli_linear_gaussian has
    E[Σ_k θ_k] = mass."""
    alpha, beta, n, k, draws = 2.0, 1.5, 5, 12, 4000
    kw = dict(num_obs=n, dim=1, mass=alpha, concentration=beta, max_features=k)
    twin = truncated_twin(linear_gaussian)
    z = np.asarray(Predictive(twin, num_samples=draws, return_sites=["Z"])(
        random.PRNGKey(1), **kw)["Z"])  # fmt: skip
    assert z.shape == (draws, n, k)
    per_row = z.sum(-1).ravel()
    se = per_row.std() / np.sqrt(draws)  # rows of one draw are dependent: draws, not rows
    assert abs(per_row.mean() - alpha) < 5 * se * np.sqrt(n)
    a, b = alpha * beta / k, beta - alpha * beta / k
    used = (z.sum(1) > 0).sum(-1)
    finite = k * (1 - np.exp(betaln(a, b + n) - betaln(a, b)))
    assert abs(used.mean() - finite) < 5 * used.std() / np.sqrt(draws)
    a_big = alpha * beta / 1e6
    ibp = np.sum(alpha * beta / (beta + np.arange(n)))
    assert (
        abs(1e6 * (1 - np.exp(betaln(a_big, beta - a_big + n) - betaln(a_big, beta - a_big))) - ibp)
        < 1e-3
    )
    crm = truncated_twin(beta_bernoulli_linear_gaussian)
    theta = Predictive(crm, num_samples=draws, return_sites=["theta", "X"])(
        random.PRNGKey(2), num_obs=n, dim=1, mass=alpha, concentration=beta, max_features=k
    )
    total = np.asarray(theta["theta"]).sum(-1)
    assert abs(total.mean() - alpha) < 5 * total.std() / np.sqrt(draws)
    # the counts X ~ Bernoulli(theta).expand([N, K]).to_event(2) get their batch axes back
    # (DiscreteHMCGibbs updates entries of sites with enumerable support), same log density
    tr = handlers.trace(handlers.seed(crm, 0)).get_trace(num_obs=n, dim=1, max_features=k)
    counts = tr["X"]["fn"]
    assert counts.batch_shape == (n, k) and counts.event_shape == ()
    assert counts.has_enumerate_support
    value, probs = tr["X"]["value"], tr["theta"]["value"]
    expected = stats.bernoulli.logpmf(np.asarray(value), np.asarray(probs)).sum()
    np.testing.assert_allclose(float(counts.log_prob(value).sum()), expected, rtol=1e-10)


def test_discrete_hmc_gibbs_on_the_feature_twin_recovers_the_features():
    """DiscreteHMCGibbs(NUTS) on the twin of linear_gaussian, 6 rows built from one feature
    (rows 0-2 use it) and small noise: the posterior mean of Z @ A reproduces each row within
    5 noise sd (the data are 2 or 0 in every column, far apart on that scale)."""
    rng = np.random.default_rng(3)
    feature = np.array([2.0, -2.0])
    z_true = (np.arange(6) < 3).astype(float)[:, None]
    x = z_true * feature + 0.1 * rng.normal(size=(6, 2))
    kw = dict(num_obs=6, dim=2, mass=1.0, sigma_a=2.0, sigma_o=0.1, max_features=2)
    kernel = DiscreteHMCGibbs(NUTS(truncated_twin(linear_gaussian), max_tree_depth=4))
    mcmc = MCMC(kernel, num_warmup=100, num_samples=100, progress_bar=False)
    mcmc.run(random.PRNGKey(4), x, **kw)
    draws = mcmc.get_samples()
    mean = np.einsum("snk,skd->nd", np.asarray(draws["Z"], float), np.asarray(draws["A"])) / 100
    assert np.all(np.abs(mean - x) < 5 * 0.1)
