"""AcceleratedIBPGibbs: prior recovery, exact enumeration, recovery of known features, ArviZ.

Runs under x64 (``conftest.py``). Tolerances are Monte-Carlo standard errors with the effective
sample size from ArviZ; each MCMC run is shared through a module-scoped fixture.
"""

import itertools

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC
from scipy.optimize import linear_sum_assignment
from scipy.special import gammaln
from scipy.stats import multivariate_normal

from numpyro_bnp.arviz_compat import arviz, from_numpyro, group
from numpyro_bnp.diagnostics import count_parity
from numpyro_bnp.distributions import RecursiveIBP, ibp_capacity, num_active_features
from numpyro_bnp.infer import AcceleratedIBPGibbs
from numpyro_bnp.models import factor_analysis, linear_gaussian

FIELDS = ("num_active", "parity", "log_joint", "log_likelihood", "saturated")


def _ess(draws):
    """ArviZ bulk ESS of a ``(chain, draw)`` array (the number of draws if it is constant)."""
    draws = np.asarray(draws, float)
    if draws.std() == 0:
        return draws.size
    return float(arviz().ess(draws))


def _run(x, chains, samples, chain_method, warmup=100, init_params=None, **model_kwargs):
    mcmc = MCMC(
        AcceleratedIBPGibbs(linear_gaussian),
        num_warmup=warmup,
        num_samples=samples,
        num_chains=chains,
        chain_method=chain_method,
        progress_bar=False,
    )
    n, d = x.shape
    mcmc.run(
        random.PRNGKey(0),
        jnp.asarray(x),
        num_obs=n,
        dim=d,
        init_params=init_params,
        extra_fields=FIELDS,
        **model_kwargs,
    )
    return mcmc


# ---------------------------------------------------------------------------- prior only
PRIOR = dict(mass=2.0, concentration=2.5, num_rows=8)


@pytest.fixture(scope="module")
def prior_run():
    """σ_o = 1e6: the likelihood is flat, the chain must sample the IBP(α, β) prior."""
    capacity = ibp_capacity(PRIOR["mass"], PRIOR["concentration"], num_rows=PRIOR["num_rows"])
    x = np.zeros((PRIOR["num_rows"], 1))
    mcmc = _run(
        x,
        4,
        1500,
        "vectorized",
        mass=PRIOR["mass"],
        concentration=PRIOR["concentration"],
        sigma_o=1e6,
        max_features=capacity,
    )
    return mcmc, capacity


def test_prior_only_recovers_ibp_feature_count(prior_run):
    """E[K_active] = α Σ_n β/(β + n - 1) and E[Σ Z] = α N (β ≠ 1) within 4.5 MC s.e."""
    mcmc, capacity = prior_run
    alpha, beta, n = PRIOR["mass"], PRIOR["concentration"], PRIOR["num_rows"]
    k = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_active"], float)
    ones = np.asarray(mcmc.get_samples(group_by_chain=True)["Z"]).sum((-2, -1)).astype(float)
    exact_k = alpha * sum(beta / (beta + i) for i in range(n))
    for draws, exact in [(k, exact_k), (ones, alpha * n)]:
        se = draws.std() / np.sqrt(_ess(draws))
        assert abs(draws.mean() - exact) < 4.5 * se, (draws.mean(), exact, se)
    # the IBP variance of K is its Poisson mean: a check on the shape of the law, not just its mean
    assert abs(k.var() / exact_k - 1.0) < 0.2
    assert not np.asarray(mcmc.get_extra_fields()["saturated"]).any()
    assert k.max() < capacity


# ---------------------------------------------------------------------------- exact enumeration
TINY = dict(mass=1.5, concentration=0.5, sigma_a=1.0, sigma_o=0.7, max_features=4)
TINY_X = np.array([[1.0, 0.2], [0.9, -1.1], [-0.1, 1.0]])


def _enumerate_posterior(x, mass, concentration, sigma_a, sigma_o, max_features):
    """Collapsed posterior over left-ordered classes with at most ``max_features`` columns.

    A class is a multiset of non-zero column patterns; its IBP(α, β) probability is
    ``(αβ)^K / Π_h K_h! · exp(-α Σ_n β/(β+n-1)) · Π_k Γ(m_k) Γ(N - m_k + β) / Γ(N + β)``
    (Griffiths & Ghahramani 2011; α = ``mass``, β = ``concentration``) and each column of ``x``
    is ``N(0, σ_o² I + σ_a² Z Z^T)``.
    """
    alpha, beta = mass, concentration
    n, d = x.shape
    patterns = [p for p in itertools.product([0, 1], repeat=n) if any(p)]
    harmonic = sum(beta / (beta + i) for i in range(n))
    keys, logp = [], []
    for k in range(max_features + 1):
        for combo in itertools.combinations_with_replacement(range(len(patterns)), k):
            z = np.array([patterns[c] for c in combo], float).T.reshape(n, k)
            m = z.sum(0)
            mult = np.bincount(combo, minlength=len(patterns))
            lp = k * np.log(alpha * beta) - gammaln(mult + 1).sum() - alpha * harmonic
            lp += np.sum(gammaln(m) + gammaln(n - m + beta) - gammaln(n + beta))
            cov = sigma_o**2 * np.eye(n) + sigma_a**2 * z @ z.T
            lp += sum(multivariate_normal(np.zeros(n), cov).logpdf(x[:, j]) for j in range(d))
            keys.append(tuple(combo))
            logp.append(lp)
    logp = np.array(logp)
    probs = np.exp(logp - logp.max())
    return {key: i for i, key in enumerate(keys)}, probs / probs.sum(), patterns


@pytest.fixture(scope="module")
def tiny_run():
    # the capacity binds on purpose (test_matches_exact_enumeration): the kernel says so
    with pytest.warns(RuntimeWarning, match=r"the feature capacity \(4, .* was full"):
        return _run(TINY_X, 4, 3000, "vectorized", warmup=200, **TINY)


def test_matches_exact_enumeration(tiny_run):
    """Class frequencies and the law of K agree with the enumerated collapsed posterior.

    The capacity (4) binds with posterior probability ~5%, so this also checks that the chain
    targets the posterior restricted to the capacity. 4.5 s.e. per check, 18 checks.
    """
    index, probs, patterns = _enumerate_posterior(TINY_X, **TINY)
    pattern_id = {p: i for i, p in enumerate(patterns)}
    z = np.asarray(tiny_run.get_samples(group_by_chain=True)["Z"])
    labels = np.empty(z.shape[:2], int)
    for c, s in np.ndindex(*z.shape[:2]):
        cols = sorted(pattern_id[tuple(col)] for col in z[c, s].T if col.any())
        labels[c, s] = index[tuple(cols)]
    num_active = np.asarray(tiny_run.get_extra_fields(group_by_chain=True)["num_active"])
    sizes = np.array([len(key) for key in sorted(index, key=index.get)])
    checks = [(labels == i, probs[i]) for i in np.argsort(-probs)[:13]]
    checks += [(num_active == k, probs[sizes == k].sum()) for k in range(TINY["max_features"] + 1)]
    for indicator, exact in checks:
        se = np.sqrt(exact * (1 - exact) / _ess(indicator))
        assert abs(indicator.mean() - exact) < 4.5 * se, (indicator.mean(), exact, se)


def test_state_diagnostics_are_consistent(tiny_run):
    """parity / num_active / saturated match Z; log_joint and log_likelihood equal independent
    SciPy values."""
    samples = tiny_run.get_samples()
    extra = tiny_run.get_extra_fields()
    z = np.asarray(samples["Z"])
    np.testing.assert_array_equal(extra["parity"], count_parity(z))
    np.testing.assert_array_equal(extra["num_active"], num_active_features(z))
    assert np.all(np.asarray(extra["saturated"])[extra["num_active"] == TINY["max_features"]])
    assert np.asarray(RecursiveIBP(1.0, num_rows=3, max_features=4).support(z)).all()
    prior = RecursiveIBP(TINY["mass"], TINY["concentration"], num_rows=3, max_features=4)
    for s in range(0, len(z), 997):
        cov = TINY["sigma_o"] ** 2 * np.eye(3) + TINY["sigma_a"] ** 2 * z[s] @ z[s].T
        lik = sum(multivariate_normal(np.zeros(3), cov).logpdf(TINY_X[:, j]) for j in range(2))
        np.testing.assert_allclose(extra["log_likelihood"][s], lik, rtol=1e-10)
        np.testing.assert_allclose(extra["log_joint"][s], prior.log_prob(z[s]) + lik, rtol=1e-10)


# ---------------------------------------------------------------------------- recovery
def _synthetic(num_rows=100, dim=16, sigma_o=0.5, seed=0):
    rng = np.random.default_rng(seed)
    features = np.zeros((3, dim))
    features[0, :5], features[1, 5:10], features[2, 10:] = 1.0, 1.0, 1.0
    z = (rng.random((num_rows, 3)) < 0.5).astype(float)
    return z, features, z @ features + sigma_o * rng.normal(size=(num_rows, dim))


@pytest.fixture(scope="module")
def recovery_run():
    z, features, x = _synthetic()
    mcmc = _run(x, 2, 150, "sequential", sigma_o=0.5, max_features=12)
    return mcmc, z, features


def test_recovers_number_of_features_and_features(recovery_run):
    """K = 3 in most draws; features match the truth (up to permutation) within 4.5 s.e."""
    mcmc, z_true, a_true = recovery_run
    samples = mcmc.get_samples()
    k = np.asarray(mcmc.get_extra_fields()["num_active"])
    assert np.mean(k == 3) > 0.8, np.bincount(k)
    errors, agreement = [], []
    for s in np.flatnonzero(k == 3):
        a, z = np.asarray(samples["A"][s, :3]), np.asarray(samples["Z"][s, :, :3])
        rows, cols = linear_sum_assignment(((a[:, None] - a_true[None]) ** 2).sum(-1))
        errors.append(a[rows] - a_true[cols])
        agreement.append(np.mean(z[:, rows] == z_true[:, cols]))
    # posterior mean of a feature entry: truth ± σ_o / sqrt(m_k)
    se = 0.5 / np.sqrt(z_true.sum(0))[:, None]
    assert np.all(np.abs(np.mean(errors, 0)) < 4.5 * se)
    assert np.mean(agreement) > 0.97


def test_multichain_arviz_export(recovery_run):
    """from_numpyro gives posterior, log-likelihood and sample_stats; ESS / R-hat on K, parity."""
    mcmc = recovery_run[0]
    az = arviz()
    data = from_numpyro(mcmc)
    posterior = group(data, "posterior")
    assert posterior["Z"].shape == (2, 150, 100, 12) and posterior["A"].shape == (2, 150, 12, 16)
    assert group(data, "log_likelihood")["obs"].shape[:2] == (2, 150)
    stats = group(data, "sample_stats")
    for name in ("num_active", "parity"):
        ess = float(az.ess(np.asarray(stats[name], float)))
        rhat = float(az.rhat(np.asarray(stats[name], float)))
        assert 10 < ess <= 2 * 150 * 1.5 and rhat < 1.1, (name, ess, rhat)


# ---------------------------------------------------------------------------- bad models
def _no_ibp(obs=None):
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([4, 2]).to_event(2))
    numpyro.sample("obs", dist.Normal(a.sum(0), 1.0).expand([3, 2]).to_event(2), obs=obs)


def _bad_run(model, x, **kwargs):
    mcmc = MCMC(AcceleratedIBPGibbs(model), num_warmup=1, num_samples=1, progress_bar=False)
    mcmc.run(random.PRNGKey(0), x, **kwargs)


def test_bad_models_get_clear_errors():
    x = jnp.zeros((3, 2))
    with pytest.raises(ValueError, match=r"RecursiveIBP distribution, found 0.*A: Normal"):
        _bad_run(_no_ibp, x)
    with pytest.raises(ValueError, match=r"linear-Gaussian observed site 'obs'.*factor_analysis"):
        _bad_run(factor_analysis, x, num_obs=3, dim=2, max_features=4)
    with pytest.raises(ValueError, match="site 'obs' is not observed"):
        _bad_run(linear_gaussian, None, num_obs=3, dim=2, max_features=4)
    with pytest.raises(ValueError, match="observed site 'obs' contains NaN or infinite values"):
        _bad_run(linear_gaussian, x.at[0, 0].set(jnp.nan), num_obs=3, dim=2, max_features=4)
    with pytest.raises(TypeError, match="model must be"):
        AcceleratedIBPGibbs("linear_gaussian")
