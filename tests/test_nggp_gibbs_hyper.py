"""NGGPMarginalGibbs with priors on the NGGP's mass, σ and τ, and as a block of numpyro's Gibbs.

* the joint of the partition and ``U`` the kernel updates the hyper-parameters with, integrated
  over ``U`` by SciPy quadrature, is the EPPF (at several ``(a, σ, τ)``), and it is
  ``∝ a^K e^{-a ψ(U)/a}`` in the mass (the Gamma conjugacy);
* a prior-only chain with ``mass ~ Gamma``, ``σ ~ Beta``, ``τ ~ Gamma`` keeps the prior: the
  hyper-parameters' prior means and the pmf of ``K_N`` averaged over their prior by Gauss
  quadrature;
* exact enumeration of the posterior over the 52 partitions of five rows with the mass
  integrated by Gauss–Laguerre quadrature: ``P(K = k)``, co-clustering and ``E[mass | X]``;
* a ``numpyro.infer.Gibbs`` composite, NUTS on the noise scale, recovers it (and exports);
* priors of the wrong support and sites the kernel cannot learn are refused, naming the site.

Monte-Carlo tolerances are 4 standard errors with the ESS from ArviZ (``mc_checks``).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from mc_checks import check_labels_against_enumeration, check_mean
from mcmc_runs import run_chains
from numpyro.infer import MCMC, NUTS, Gibbs
from scipy import integrate
from scipy.special import gammaln, logsumexp, roots_genlaguerre, roots_jacobi
from test_nggp_gibbs import X1, normal_marginal, partitions

from numpyro_bnp import models
from numpyro_bnp.arviz_compat import arviz, from_numpyro, group
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.infer import NGGPMarginalGibbs
from numpyro_bnp.infer.mixtures.model import MixtureNumbers
from numpyro_bnp.infer.mixtures.nggp_gibbs.sweep import _Config, _log_joint_u

MASS = (2.0, 2.0)  # Gamma(shape, rate) prior of the mass: mean 1
SIGMA = (2.0, 3.0)  # Beta prior of σ: mean 0.4
TAU = (3.0, 3.0)  # Gamma prior of τ: mean 1


def gamma_nodes(shape, rate, n):
    """Gauss–Laguerre nodes and weights (summing to one) of a Gamma(shape, rate) law."""
    x, w = roots_genlaguerre(n, shape - 1.0)
    return x / rate, w / w.sum()


def beta_nodes(a, b, n):
    """Gauss–Jacobi nodes and weights (summing to one) of a Beta(a, b) law."""
    x, w = roots_jacobi(n, b - 1.0, a - 1.0)
    return (1.0 + x) / 2.0, w / w.sum()


def hyper_model(obs=None, *, num_obs=5, dim=1):
    mass = numpyro.sample("mass", dist.Gamma(*MASS))
    sigma = numpyro.sample("sigma", dist.Beta(*SIGMA))
    tau = numpyro.sample("tau", dist.Gamma(*TAU))
    return models.nggp_normal_mixture(
        obs, num_obs=num_obs, dim=dim, mass=mass, sigma=sigma, tau=tau, sigma_mu=2.0, sigma_o=0.7
    )


def mass_model(obs=None, *, num_obs=5, dim=1):
    mass = numpyro.sample("mass", dist.Gamma(*MASS))
    return models.nggp_normal_mixture(
        obs, num_obs=num_obs, dim=dim, mass=mass, sigma=0.5, tau=1.0, sigma_mu=2.0, sigma_o=0.7
    )


def run(model, num_samples, *, warmup=200, num_chains=4, **kwargs):
    kernel = NGGPMarginalGibbs(model)
    return run_chains(
        kernel, warmup, num_samples, num_chains, extra_fields=("num_clusters",), **kwargs
    )


def test_the_joint_with_u_integrates_to_the_eppf_and_is_gamma_in_the_mass():
    """∫ p(z, log U = x | a, σ, τ) dx = EPPF(z) (SciPy quadrature against NGGP.log_prob, whose
    V_{N,K} is its own quadrature or closed form), and log p(z, log U | a) - K log a + a ψ₁(U)
    does not depend on a (ψ₁ the Laplace exponent at unit mass): the mass is Gamma-conjugate."""
    with jax.enable_x64():
        labels = np.array([0, 0, 1, 0, 2, 1, 3], np.int32)
        counts = jnp.asarray(np.bincount(labels, minlength=7), jnp.int32)
        cfg = _Config(num_rows=7, capacity=7, pairs=(), partition_site="z", doc_width=0)

        @jax.jit
        def log_joint(x, a, s, t):
            nggp = MixtureNumbers(a, s, t, 0.0, {}, None)
            return _log_joint_u(counts, cfg, x, nggp, jnp.float64)

        def joint(x, a, s, t):
            return float(log_joint(*(jnp.float64(v) for v in (x, a, s, t))))

        for a, s, t in [(1.3, 0.5, 1.0), (0.4, 0.25, 2.5), (2.0, 0.0, 0.7), (0.8, 0.6, 0.0)]:
            eppf = float(NGGP(a, s, t, num_points=7).log_prob(jnp.asarray(labels)))
            total, _ = integrate.quad(
                lambda x, a=a, s=s, t=t, e=eppf: np.exp(joint(x, a, s, t) - e), -40, 40, limit=200
            )
            np.testing.assert_allclose(total, 1.0, rtol=1e-7)
        for x, s, t in [(0.3, 0.5, 1.0), (-1.0, 0.0, 2.0), (1.5, 0.3, 0.0)]:
            psi_1 = np.asarray(
                [joint(x, 1.0, s, t) - joint(x, 2.0, s, t) + 4 * np.log(2.0)]
            )  # = ψ₁(U) exactly when the rest is free of a
            rest = [joint(x, a, s, t) - 4 * np.log(a) + a * psi_1[0] for a in (0.3, 1.0, 4.0)]
            np.testing.assert_allclose(rest, rest[0], rtol=1e-12, atol=1e-10)
            u = np.exp(x)
            exact = np.log1p(u / t) if s == 0 else ((u + t) ** s - t**s) / s
            np.testing.assert_allclose(psi_1[0], exact, rtol=1e-12)


def test_a_prior_only_chain_with_a_mass_prior_keeps_the_prior():
    """Without data the chain samples the joint prior of (mass, z): E[mass] = 1 and
    P(K_8 = k) = E[pmf(k | a)] over the Gamma prior by 24-node Gauss–Laguerre quadrature."""
    mcmc = run(mass_model, 1000, num_obs=8)
    mass = np.asarray(mcmc.get_samples(group_by_chain=True)["mass"])
    assert mass.shape == (4, 1000)
    check_mean(mass, 1.0)
    a, w = gamma_nodes(*MASS, 24)
    with jax.enable_x64():
        pmfs = NGGP(a, 0.5, 1.0, num_points=8).num_clusters_pmf()
    pmf = w @ np.asarray(pmfs)
    np.testing.assert_allclose(pmf.sum(), 1.0, rtol=1e-9)
    num = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_clusters"])
    check_mean(num, pmf @ np.arange(1, 9))
    for k in range(1, 9):
        if pmf[k - 1] > 0.02:
            check_mean(num == k, pmf[k - 1])


def test_mass_sigma_tau_priors_match_the_enumerated_posterior():
    """p(z, a, σ, τ | X) ∝ p(X | z) EPPF(z | a, σ, τ) p(a) p(σ) p(τ) over all 52 partitions of
    five rows, (a, σ, τ) on a 16 x 10 x 10 Gauss–Laguerre/Jacobi grid of their priors (the
    EPPF's V_{N,K} from NGGP.log_v, its factors and the conjugate marginals written with
    SciPy): P(K = k), co-clustering of every pair and the posterior means of a, σ and τ."""
    parts = partitions(5)
    a, wa = gamma_nodes(*MASS, 16)
    s, ws = beta_nodes(*SIGMA, 10)
    t, wt = gamma_nodes(*TAU, 10)
    grid = np.stack(np.meshgrid(a, s, t, indexing="ij"), -1).reshape(-1, 3)  # (G, 3)
    log_w = np.log(np.einsum("i,j,k->ijk", wa, ws, wt).reshape(-1))
    with jax.enable_x64():  # V_{5,K} for K = 1..5 at every node (NGGP.log_v: quadrature)
        log_v = np.asarray(NGGP(*grid.T, num_points=5).log_v(5, np.arange(1, 6)[:, None])[0])
    sizes = np.stack([np.bincount(p, minlength=5) for p in parts])[:, :, None]  # (52, 5, 1)
    sigma = grid[:, 1]
    factors = np.where(sizes > 0, gammaln(sizes - sigma) - gammaln(1.0 - sigma), 0.0).sum(1)
    log_eppf = log_v[parts.max(1)] + factors  # (52, G): V_{N,K} Π_k (1 - σ)_{n_k - 1}
    with jax.enable_x64():  # the reference's EPPF is NGGP.log_prob (two nodes checked)
        for g in (0, len(grid) - 1):
            exact = NGGP(*grid[g], num_points=5).log_prob(jnp.asarray(parts))
            np.testing.assert_allclose(log_eppf[:, g], exact, rtol=1e-10)
    log_lik = np.array(
        [sum(normal_marginal(X1[p == k]) for k in range(p.max() + 1)) for p in parts]
    )
    log_post = log_eppf + log_w[None, :] + log_lik[:, None]
    post = np.exp(log_post - logsumexp(log_post))  # (52, G)
    probs = post.sum(1)
    means = post.sum(0) @ grid  # E[a | X], E[σ | X], E[τ | X]

    mcmc = run(hyper_model, 1500, warmup=100, obs=jnp.asarray(X1))
    samples = mcmc.get_samples(group_by_chain=True)
    for name, mean in zip(("mass", "sigma", "tau"), means, strict=True):
        check_mean(np.asarray(samples[name]), mean)
    check_labels_against_enumeration(np.asarray(samples["z"]), probs, parts)


def noise_model(obs=None, *, num_obs, dim=1, sigma_o=None):
    if sigma_o is None:
        sigma_o = numpyro.sample("sigma_o", dist.HalfNormal(1.0))
    return models.nggp_normal_mixture(
        obs,
        num_obs=num_obs,
        dim=dim,
        mass=0.5,
        sigma=0.25,
        sigma_mu=5.0,
        sigma_o=sigma_o,
        max_clusters=20,
    )


def test_gibbs_block_with_nuts_recovers_the_noise_scale():
    """Gibbs([(NGGPMarginalGibbs, partition and components), (NUTS, sigma_o)]) on three
    clusters of 1-D rows with noise 0.5: sigma_o's posterior mean within 4 s.e. of the truth
    (the posterior sd sqrt(σ²/2N) plus the MCSE), the three clusters never mixed, and the
    ArviZ export holds every site and the log-likelihood. (A hyper-parameter site of the
    kernel in a composite: the example of docs/nrm.md.)"""
    rng = np.random.default_rng(0)
    truth = np.repeat(np.arange(3), 15)
    x = (np.array([-6.0, 0.0, 6.0])[truth] + 0.5 * rng.normal(size=45))[:, None]
    kernel = Gibbs(
        [
            (NGGPMarginalGibbs(noise_model), ["z", "mu"]),
            (NUTS(noise_model), ["sigma_o"]),
        ]
    )
    mcmc = MCMC(kernel, num_warmup=100, num_samples=200, progress_bar=False)
    mcmc.run(random.PRNGKey(0), x, num_obs=45, extra_fields=("block_states.0.num_clusters",))
    sigma_o = np.asarray(mcmc.get_samples()["sigma_o"])
    ess = float(arviz().ess(sigma_o[None]))
    se = np.sqrt(0.5**2 / (2 * x.size) + sigma_o.var() / ess)
    assert abs(sigma_o.mean() - 0.5) < 4 * se, (sigma_o.mean(), se, ess)
    num = np.asarray(mcmc.get_extra_fields()["block_states.0.num_clusters"])
    assert num.min() >= 3, np.bincount(num)
    # rows of different true clusters are never together; those of one true cluster nearly
    # always (under σ = 0.25 a row in a tail may open a cluster of its own)
    labels = np.asarray(mcmc.get_samples()["z"])
    together = labels[:, :, None] == labels[:, None, :]
    assert not np.any(together[:, truth[:, None] != truth[None, :]])
    assert together[:, truth[:, None] == truth[None, :]].mean() > 0.8
    data = from_numpyro(mcmc)
    assert {"sigma_o", "z", "mu"} <= set(group(data, "posterior").data_vars)
    assert np.all(np.isfinite(group(data, "log_likelihood")["obs"].values))
    # held out: each draw's predictive at its own sigma_o, as the kernel computes it on the
    # model with that sigma_o fixed
    draws = {name: value[::70] for name, value in mcmc.get_samples().items()}
    new = np.array([[-6.2], [0.3], [3.0]])
    kernel = NGGPMarginalGibbs(noise_model)
    got = kernel.log_predictive(draws, new, x, num_obs=45)
    per_draw = [
        NGGPMarginalGibbs(functools.partial(noise_model, sigma_o=float(s))).log_predictive(
            z[None], new, x, num_obs=45
        )
        for z, s in zip(draws["z"], draws["sigma_o"], strict=True)
    ]
    want = logsumexp(np.array(per_draw), axis=0) - np.log(len(per_draw))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_priors_of_the_wrong_support_and_unlearnable_sites_are_refused():
    def wrong_sigma(obs=None):
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
        return models.nggp_normal_mixture(obs, num_obs=4, dim=1, sigma=sigma)

    def wrong_mass(obs=None):
        mass = numpyro.sample("mass", dist.Normal(1.0, 1.0))
        return models.nggp_normal_mixture(obs, num_obs=4, dim=1, mass=mass)

    key = random.PRNGKey(0)
    for model, name in [(wrong_sigma, "sigma"), (wrong_mass, "mass")]:
        with pytest.raises(ValueError, match=f"site '{name}'"):
            NGGPMarginalGibbs(model).init(key, 0, None, (), {})
    # a noise scale sets the likelihood: another Gibbs block must sample it
    with pytest.raises(ValueError, match=r"'sigma_o' sets the observed site.*numpyro.infer.Gibbs"):
        NGGPMarginalGibbs(noise_model).init(key, 0, None, (), dict(num_obs=4))
    kernel = NGGPMarginalGibbs(mass_model)
    with pytest.raises(ValueError, match=r"hyper-parameter sites \['mass'\]"):
        kernel.log_predictive(partitions(5)[:2], X1[:1], obs=jnp.asarray(X1))
    with pytest.raises(ValueError, match=r"init_params\['mass'\] must be finite"):
        kernel.init(key, 0, {"z": np.zeros(5, np.int32), "mass": np.nan}, (), {})
