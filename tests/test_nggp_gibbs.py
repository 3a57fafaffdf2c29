"""NGGPMarginalGibbs against independent references.

* exact enumeration of the posterior over all partitions of five rows (EPPF times the conjugate
  marginal likelihoods written here with SciPy), for Gaussian rows under an NGGP (σ = ½, the
  U step matters) and documents under a Pitman–Yor-like σ > 0 with τ = 0;
* a prior-only chain: the exact pmf and mean of the number of clusters;
* a Geweke test: alternating sweeps with fresh data from the model recovers the prior;
* recovery of three known Gaussian clusters (Normal–Wishart components: the downdates of a
  full scatter), agreement of vectorized chains, the ArviZ export with its log-likelihood;
* the log-likelihood and log-joint diagnostics against the chain rule of predictives;
* saturation warns, bad input is refused naming the argument.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random
from mc_checks import check_labels_against_enumeration, check_mean
from mcmc_runs import run_chains
from numpyro.infer import Predictive
from saturation_checks import saturation_reports
from scipy.special import gammaln, logsumexp
from scipy.stats import multivariate_normal

from numpyro_bnp import diagnostics, models
from numpyro_bnp.arviz_compat import arviz, group
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.infer import NGGPMarginalGibbs
from numpyro_bnp.infer.core.mcmc import SaturationError
from numpyro_bnp.infer.mixtures.nggp_gibbs.sweep import _step

X1 = np.array([[-2.1], [-1.8], [0.2], [2.0], [2.3]])
NORMAL = dict(num_obs=5, dim=1, mass=1.0, sigma=0.5, tau=1.0, sigma_mu=2.0, sigma_o=0.7)
DOCS = np.array([[3, 1, 0, 0], [2, 2, 0, 0], [0, 0, 3, 1], [0, 1, 2, 2], [1, 1, 1, 1]])
DOC_MODEL = dict(num_obs=5, vocab_size=4, mass=1.5, sigma=0.3, tau=0.0, concentration=0.5)


def partitions(n):
    """All canonical label vectors of ``n`` items (restricted growth strings)."""
    out = [[0]]
    for _ in range(n - 1):
        out = [[*p, k] for p in out for k in range(max(p) + 2)]
    return np.array(out, np.int32)


def normal_marginal(xs):
    """log p(x_C) of one cluster: N(0, σ_o² I + σ_μ² 11ᵀ) per dimension."""
    n = len(xs)
    cov = NORMAL["sigma_o"] ** 2 * np.eye(n) + NORMAL["sigma_mu"] ** 2 * np.ones((n, n))
    return sum(multivariate_normal(np.zeros(n), cov).logpdf(xs[:, d]) for d in range(xs.shape[1]))


def docs_marginal(xs):
    """log p(x_C) of one cluster: multinomial coefficients times the Dirichlet ratio."""
    lam = np.full(xs.shape[1], DOC_MODEL["concentration"])
    coef = (gammaln(xs.sum(1) + 1) - gammaln(xs + 1).sum(1)).sum()
    post = lam + xs.sum(0)
    return (
        coef + gammaln(post).sum() - gammaln(post.sum()) - gammaln(lam).sum() + gammaln(lam.sum())
    )


def exact_posterior(data, marginal, mass, sigma, tau):
    """Every partition and its posterior probability by enumeration."""
    parts = partitions(len(data))
    prior = NGGP(mass, sigma, tau, num_points=len(data))
    log_eppf = np.asarray(prior.log_prob(jnp.asarray(parts)), np.float64)
    log_lik = np.array([sum(marginal(data[p == k]) for k in range(p.max() + 1)) for p in parts])
    log_post = log_eppf + log_lik
    return parts, np.exp(log_post - logsumexp(log_post))


def run(model, num_samples, *, num_chains=4, warmup=100, fields=("num_clusters",), **kwargs):
    kernel = NGGPMarginalGibbs(model)
    return run_chains(kernel, warmup, num_samples, num_chains, extra_fields=fields, **kwargs)


def check_against_enumeration(mcmc, parts, probs):
    """P(K = k) and P(rows i, j together) for every k and pair within 4 MCSE (ArviZ ESS)."""
    labels = np.asarray(mcmc.get_samples(group_by_chain=True)["z"])
    check_labels_against_enumeration(labels, probs, parts)


def test_gaussian_rows_match_the_enumerated_posterior():
    parts, probs = exact_posterior(X1, normal_marginal, 1.0, 0.5, 1.0)
    mcmc = run(models.nggp_normal_mixture, 1500, obs=jnp.asarray(X1), **NORMAL)
    check_against_enumeration(mcmc, parts, probs)


def test_documents_match_the_enumerated_posterior():
    parts, probs = exact_posterior(DOCS, docs_marginal, 1.5, 0.3, 0.0)
    mcmc = run(models.nggp_multinomial_mixture, 1500, obs=jnp.asarray(DOCS), **DOC_MODEL)
    check_against_enumeration(mcmc, parts, probs)


def test_diagnostics_are_the_chain_rule_of_predictives():
    """log p(X | z) = Σ_k log p(X_k), written with SciPy; log_joint adds the exact EPPF."""
    kernel = NGGPMarginalGibbs(models.nggp_normal_mixture)
    labels = np.array([1, 1, 0, 2, 2], np.int32)  # canonicalised by the kernel
    state = kernel.init(
        random.PRNGKey(0), 0, {"z": labels}, (), dict(obs=jnp.asarray(X1), **NORMAL)
    )
    np.testing.assert_array_equal(state.z["z"], [0, 0, 1, 2, 2])
    log_lik = sum(normal_marginal(X1[labels == k]) for k in range(3))
    np.testing.assert_allclose(state.log_likelihood, log_lik, rtol=1e-5)
    eppf = NGGP(1.0, 0.5, 1.0, num_points=5).log_prob(state.z["z"])
    np.testing.assert_allclose(state.log_joint, eppf + log_lik, rtol=1e-5)
    assert int(state.num_clusters) == 3


def test_log_predictive_is_the_exact_predictive_given_each_partition():
    """Per partition: Σ_k p(new row in k | z) p(x* | X_k) + p(new cluster | z) p(x* | H_0),
    the urn of NGGP.predictive and SciPy's Gaussian predictives; over draws, their mean."""
    kernel = NGGPMarginalGibbs(models.nggp_normal_mixture)
    args = dict(obs=jnp.asarray(X1), **NORMAL)
    test = np.array([[0.5], [3.0], [-6.0]])
    prior = NGGP(1.0, 0.5, 1.0, num_points=5)
    s2, v2 = NORMAL["sigma_o"] ** 2, NORMAL["sigma_mu"] ** 2
    expected = []
    for labels in partitions(5)[[0, 7, 30, 51]]:
        probs = np.asarray(prior.predictive(jnp.asarray(labels)), np.float64)
        dens = np.zeros((len(test), 6))
        for k in range(labels.max() + 2):
            xs = X1[labels == k, 0]
            prec = 1 / v2 + len(xs) / s2
            mean = xs.sum() / s2 / prec
            dens[:, k] = multivariate_normal(mean, 1 / prec + s2).pdf(test[:, 0])
        expected.append(np.log((dens * probs).sum(1)))
        got = kernel.log_predictive(labels[None], test, **args)
        np.testing.assert_allclose(got, expected[-1], rtol=1e-5)
    mean = logsumexp(np.array(expected), axis=0) - np.log(4)
    got = kernel.log_predictive({"z": partitions(5)[[0, 7, 30, 51]]}, test, **args)
    np.testing.assert_allclose(got, mean, rtol=1e-5)
    with pytest.raises(ValueError, match="new_rows"):
        kernel.log_predictive(partitions(5)[:1], np.ones((2, 3)), **args)


def test_a_prior_only_chain_recovers_the_number_of_clusters_pmf():
    """Traced without data the chain samples the NGGP partition prior: P(K_N = k), E[K_N]."""
    params = dict(num_obs=10, dim=1, mass=2.0, sigma=0.5, tau=1.0)
    mcmc = run(models.nggp_normal_mixture, 1000, **params)
    num = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_clusters"])
    prior = NGGP(2.0, 0.5, 1.0, num_points=10)
    pmf = np.asarray(prior.num_clusters_pmf())
    check_mean(num, float(prior.expected_num_clusters()[-1]))
    for k in range(1, 11):
        if pmf[k - 1] > 0.02:
            check_mean(num == k, pmf[k - 1])


def test_geweke():
    """Successive conditionals (a sweep given x, then x | z from the model) keep the joint
    p(z, x): E[K], E[x_0 x_1] and E[x_0²] equal their prior values (marginal-conditional
    draws), within 4 MCSE of both."""
    params = dict(num_obs=4, dim=1, mass=1.0, sigma=0.5, tau=1.0, sigma_mu=1.5, sigma_o=0.6)
    model = models.nggp_normal_mixture
    kernel = NGGPMarginalGibbs(model)
    x0 = jnp.zeros((4, 1))
    state = kernel.init(random.split(random.PRNGKey(0), 8), 0, None, (), dict(obs=x0, **params))
    numbers = kernel._numbers((), dict(obs=x0, **params))  # the NGGP and family: fixed
    fixed = (kernel._family, kernel._cfg, kernel._to_sites, numbers)
    step = jax.vmap(lambda s, x: _step(s, x, *fixed), (0, 0))
    sigma_mu, sigma_o = params["sigma_mu"], params["sigma_o"]

    def one(carry, key):
        state, x = carry
        state = step(state, x)
        key_mu, key_x = random.split(key)
        mu = sigma_mu * random.normal(key_mu, (8, 4, 1))
        labels = state.z["z"]
        x = jnp.take_along_axis(mu, labels[..., None], axis=1)
        x = x + sigma_o * random.normal(key_x, x.shape)
        stats = jnp.stack([state.num_clusters, x[:, 0, 0] * x[:, 1, 0], x[:, 0, 0] ** 2], -1)
        return (state, x), stats

    keys = random.split(random.PRNGKey(1), 1500)
    _, stats = jax.jit(lambda s, x: jax.lax.scan(one, (s, x), keys))(state, jnp.zeros((8, 4, 1)))
    stats = np.asarray(stats, np.float64)[300:].transpose(1, 0, 2)  # (chain, draw, stat)
    prior = Predictive(model, num_samples=20000)(random.PRNGKey(2), **params)
    z, x = np.asarray(prior["z"]), np.asarray(prior["obs"], np.float64)
    truth = [np.mean(z.max(-1) + 1), np.mean(x[:, 0, 0] * x[:, 1, 0]), np.mean(x[:, 0, 0] ** 2)]
    for s, t in zip(np.moveaxis(stats, -1, 0), truth, strict=True):
        check_mean(s, t)


def three_clusters(seed, per_cluster=20):
    rng = np.random.default_rng(seed)
    centres = np.array([[-5.0, 0.0], [5.0, 0.0], [0.0, 6.0]])
    labels = np.repeat(np.arange(3), per_cluster)
    return centres[labels] + rng.normal(size=(3 * per_cluster, 2)), labels


def test_recovers_three_gaussian_clusters_and_exports_to_arviz():
    x, truth = three_clusters(0)
    args = dict(obs=jnp.asarray(x), num_obs=60, dim=2, mass=0.5, sigma=0.1, kappa=0.05)
    args["max_clusters"] = 12
    mcmc = run(
        models.nggp_gaussian_mixture,
        100,
        num_chains=2,
        warmup=50,
        fields=("num_clusters", "co_clustered", "saturated"),
        **args,
    )
    labels = np.asarray(mcmc.get_samples()["z"])
    fields = mcmc.get_extra_fields()
    assert np.bincount(np.asarray(fields["num_clusters"])).argmax() == 3
    # the truth's partition, up to naming, is the posterior's point estimate: rows together in
    # more than half of the draws exactly when their true labels agree (the posterior also
    # splits a true cluster in two in about a quarter of the draws at these settings)
    same = truth[:, None] == truth[None, :]
    together = labels[:, :, None] == labels[:, None, :]
    np.testing.assert_array_equal(together.mean(0) > 0.5, same)
    assert not np.any(fields["saturated"])
    data = diagnostics.from_mcmc(mcmc)
    log_lik = group(data, "log_likelihood")["obs"]
    assert log_lik.shape == (2, 100, 60)
    assert np.all(np.isfinite(np.asarray(log_lik)))
    sizes = dict(group(data, "posterior")["mu"].sizes)
    assert sizes == {"chain": 2, "draw": 100, "cluster": 12, "dim": 2}
    num = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_clusters"])
    assert float(arviz().rhat(num)) < 1.05


FULL = dict(num_obs=15, dim=2, mass=1.0, sigma=0.0, max_clusters=2)  # 3 clusters in 2 slots


@pytest.mark.parametrize("chains", [1, 2])
def test_a_full_capacity_warns_with_counts(chains):
    """Every pass is saturated (the first state's sequential pass and 5 sweeps): the warnings
    report each chain's count when it reaches 1, 2 and 4."""
    x, _ = three_clusters(1, per_cluster=5)
    with pytest.warns(RuntimeWarning, match=r"clusters plate \(2 slots") as record:
        mcmc = run(
            models.nggp_normal_mixture, 5, num_chains=chains, warmup=0, fields=("saturated",),
            obs=jnp.asarray(x), **FULL,
        )  # fmt: skip
        jax.effects_barrier()
    assert np.all(mcmc.get_extra_fields()["saturated"])
    messages = [str(w.message) for w in record if "clusters plate" in str(w.message)]
    assert all("larger max_clusters" in m for m in messages)
    who = range(chains) if chains > 1 else [None]
    assert saturation_reports(messages) == {(c, k, k) for c in who for k in (1, 2, 4)}


def test_a_full_capacity_can_stop_the_run():
    x, _ = three_clusters(1, per_cluster=5)
    kernel = NGGPMarginalGibbs(models.nggp_normal_mixture, on_saturation="error")
    with pytest.raises(SaturationError, match=r"clusters plate \(2 slots.* in 1 of 1 sweeps"):
        kernel.init(random.PRNGKey(0), 0, None, (), dict(obs=jnp.asarray(x), **FULL))


def test_bad_input_is_refused_naming_it():
    kernel = NGGPMarginalGibbs(models.nggp_normal_mixture)
    args = dict(obs=jnp.asarray(X1), **NORMAL)
    key = random.PRNGKey(0)
    with pytest.raises(ValueError, match=r"init_params\['z'\] must be integer labels"):
        kernel.init(key, 0, {"z": np.zeros(4, np.int32)}, (), args)
    with pytest.raises(ValueError, match=r"must lie in \[0, 5\)"):
        kernel.init(key, 0, {"z": np.array([0, 1, 2, 3, 5])}, (), args)
    bad = X1.copy()
    bad[2, 0] = np.nan
    with pytest.raises(ValueError, match="obs"):
        kernel.init(key, 0, None, (), dict(args, obs=jnp.asarray(bad)))
    with pytest.raises(ValueError, match="pairs must be integer row indices"):
        NGGPMarginalGibbs(models.nggp_normal_mixture, pairs=[1, 2])
    with pytest.raises(ValueError, match="pairs must index rows"):
        NGGPMarginalGibbs(models.nggp_normal_mixture, pairs=[(0, 7)]).init(key, 0, None, (), args)
    with pytest.raises(ValueError, match="NGGP"):
        NGGPMarginalGibbs(models.dp_mixture).init(
            key, 0, None, (), dict(obs=jnp.asarray(X1), num_obs=5, dim=1)
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="init must run"):
            NGGPMarginalGibbs(models.nggp_normal_mixture).sample(None, (), {})
