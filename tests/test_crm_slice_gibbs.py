"""CRMSlice as a block of numpyro.infer.Gibbs, with NUTS on the continuous hyper-parameters.

A Geweke joint test of the composed sampler, recovery of the noise scale and the features on
synthetic data with the ArviZ export, the zero-padded CRM density the NUTS block evaluates, and
the models a Gibbs block cannot serve. Monte-Carlo tolerances are 4 standard errors with the
effective sample size from ArviZ.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import lax, random
from mc_checks import check_mean
from numpyro.infer import MCMC, NUTS, Gibbs

from numpyro_bnp.arviz_compat import arviz, from_numpyro, group
from numpyro_bnp.distributions import BetaProcess, GammaProcess
from numpyro_bnp.infer import CRMSlice
from numpyro_bnp.models import beta_bernoulli_linear_gaussian, gamma_poisson_linear_gaussian

CRM_SITES = ["theta", "X", "psi"]


def hyper_model(obs=None, *, num_obs=3, dim=1):
    """The beta–Bernoulli model with Gamma priors on the mass, the noise and the trait scales."""
    mass = numpyro.sample("mass", dist.Gamma(4.0, 4.0))  # mean 1, sd 0.5
    sigma_o = numpyro.sample("sigma_o", dist.Gamma(10.0, 20.0))  # mean 0.5, sd 0.16
    sigma_a = numpyro.sample("sigma_a", dist.Gamma(10.0, 10.0))  # mean 1, sd 0.32
    return beta_bernoulli_linear_gaussian(
        obs,
        num_obs=num_obs,
        dim=dim,
        mass=mass,
        sigma_o=sigma_o,
        sigma_a=sigma_a,
        max_features=20,
    )


def test_geweke_gibbs_with_nuts_keeps_the_joint():
    # successive conditionals: y ~ f(· | X, ψ, σ), then one Gibbs sweep (CRMSlice with its mass
    # update, then NUTS on σ and σ_0) given y; the chain must keep the joint prior of
    # (c, θ, X, ψ, σ, σ_0, y)
    n, warmup, steps, chains = 3, 200, 2500, 4
    kernel = Gibbs(
        [
            (CRMSlice(hyper_model, xi_scale=2.0), [*CRM_SITES, "mass"]),
            (NUTS(hyper_model, max_tree_depth=4), ["sigma_o", "sigma_a"]),
        ]
    )
    y0 = jnp.zeros((n, 1))
    state = kernel.init(random.PRNGKey(0), warmup, None, (y0,), {})

    def with_keys(key):  # the chains start together and differ by their keys
        keys = random.split(key, len(state.block_states))
        blocks = tuple(b._replace(rng_key=k) for b, k in zip(state.block_states, keys, strict=True))
        return state._replace(block_states=blocks)

    states = jax.vmap(with_keys)(random.split(random.PRNGKey(1), chains))
    constrain = kernel.get_constrain_fn((y0,), {})

    def step(state, key):
        v = constrain(state.z)
        mean = v["X"].astype(v["psi"].dtype) @ v["psi"]
        y = mean + v["sigma_o"] * random.normal(key, mean.shape, mean.dtype)
        state = kernel.sample(state, (y,), {})
        out = (
            state.block_states[0].num_active,
            v["mass"],
            v["sigma_o"],
            v["sigma_a"],
            jnp.mean(y**2),
        )
        return state, out

    def chain(state, key):
        return lax.scan(step, state, random.split(key, steps))[1]

    out = jax.jit(jax.vmap(chain))(states, random.split(random.PRNGKey(2), chains))
    k_plus, mass, sigma_o, sigma_a, y2 = (np.asarray(o)[:, warmup + 100 :] for o in out)
    check_mean(mass, 1.0)
    check_mean(k_plus, 1.0 + 1.0 / 2.0 + 1.0 / 3.0)  # E[K+] = E[c] H_N, E[c] = 1
    check_mean(sigma_o, 0.5)
    check_mean(sigma_a, 1.0)
    # E[y²] = E[σ²] + E[σ_0²] E[Σ_k X_nk] = (0.025 + 0.25) + (0.1 + 1) E[c]
    check_mean(y2, 0.275 + 1.1)


@pytest.fixture(scope="module")
def synthetic():
    rng = np.random.default_rng(0)
    features = np.kron(np.eye(3), np.ones((1, 4)))  # three disjoint blocks, D = 12
    z = (rng.random((100, 3)) < 0.4).astype(int)
    y = z @ features + 0.3 * rng.normal(size=(100, 12))
    return y, features


def noise_model(obs=None, *, num_obs, dim):
    mass = numpyro.sample("mass", dist.Gamma(2.0, 1.0))
    sigma_o = numpyro.sample("sigma_o", dist.HalfNormal(1.0))
    return beta_bernoulli_linear_gaussian(
        obs, num_obs=num_obs, dim=dim, mass=mass, sigma_o=sigma_o, sigma_a=1.0, max_features=20
    )


@pytest.fixture(scope="module")
def gibbs_run(synthetic):
    # the mass updated inside the CRM block, NUTS on the noise scale
    y, _ = synthetic
    kernel = Gibbs(
        [(CRMSlice(noise_model), [*CRM_SITES, "mass"]), (NUTS(noise_model), ["sigma_o"])]
    )
    mcmc = MCMC(kernel, num_warmup=250, num_samples=150, progress_bar=False)
    fields = ("block_states.0.num_active", "block_states.0.saturated")
    mcmc.run(random.PRNGKey(0), y, num_obs=100, dim=12, extra_fields=fields)
    return mcmc


def test_gibbs_recovers_noise_and_features(synthetic, gibbs_run):
    y, features = synthetic
    extra = gibbs_run.get_extra_fields()
    assert not np.any(extra["block_states.0.saturated"])
    k_plus = np.asarray(extra["block_states.0.num_active"])
    assert np.mean(k_plus == 3) > 0.8, np.bincount(k_plus)
    samples = gibbs_run.get_samples()
    # σ | y is about N(σ̂, σ²/(2 N D)) with σ̂ the residual scale: sd 0.3/sqrt(2400) = 0.006
    sigma_o = np.asarray(samples["sigma_o"])
    ess = float(arviz().ess(sigma_o[None]))
    se = np.sqrt(0.3**2 / (2 * y.size) + sigma_o.var() / ess)
    assert abs(sigma_o.mean() - 0.3) < 4 * se, (sigma_o.mean(), se, ess)
    assert 0.5 * 0.006 < sigma_o.std() < 2 * 0.006
    x, psi = np.asarray(samples["X"][-1]), np.asarray(samples["psi"][-1])
    found = psi[x.any(0)]
    dist_matrix = np.abs(found[:, None, :] - features[None]).max(-1)
    assert found.shape[0] == 3 and sorted(dist_matrix.argmin(0)) == [0, 1, 2]
    assert dist_matrix.min(0).max() < 0.25  # entry sd about 0.3/sqrt(40 rows) = 0.05


def test_gibbs_exports_to_arviz(gibbs_run):
    data = from_numpyro(gibbs_run)
    posterior = group(data, "posterior")
    assert set(posterior.data_vars) == {"mass", "sigma_o", "theta", "X", "psi"}
    assert np.all(posterior["mass"].values > 0)
    assert posterior["sigma_o"].shape == (1, 150)
    log_lik = group(data, "log_likelihood")["obs"].values
    assert log_lik.shape[:2] == (1, 150) and np.all(np.isfinite(log_lik))
    # the exported atoms are decreasing then zero: the CRM density is finite there
    theta = posterior["theta"].values[0]
    crm = BetaProcess(1.0, truncation=theta.shape[-1])
    assert np.all(np.isfinite(np.asarray(crm.log_prob(theta))))


def test_crm_density_of_zero_padded_atoms():
    # the K largest atoms followed by empty slots: the density of those K atoms
    for crm, short in [
        (BetaProcess(2.0, truncation=4), BetaProcess(2.0, truncation=2)),
        (GammaProcess(1.5, truncation=4), GammaProcess(1.5, truncation=2)),
    ]:
        padded = jnp.array([0.6, 0.3, 0.0, 0.0])
        np.testing.assert_allclose(crm.log_prob(padded), short.log_prob(padded[:2]), rtol=1e-12)
        assert crm.log_prob(jnp.zeros(4)) == 0.0  # no atom: probability one
        with warnings.catch_warnings():  # NumPyro's validation warns about these values
            warnings.simplefilter("ignore", UserWarning)
            assert crm.log_prob(jnp.array([0.6, 0.0, 0.3, 0.0])) == -jnp.inf  # atom after a gap
            assert crm.log_prob(jnp.array([0.3, 0.6, 0.0, 0.0])) == -jnp.inf  # not decreasing


# ---------------------------------------------------------------------------------------------
# what a Gibbs block cannot serve, and the standalone kernel with a latent hyper-parameter
# ---------------------------------------------------------------------------------------------
def mass_model(obs=None, *, num_obs=4, dim=1):
    mass = numpyro.sample("mass", dist.Gamma(2.0, 2.0))
    return beta_bernoulli_linear_gaussian(obs, num_obs=num_obs, dim=dim, mass=mass, max_features=10)


def gamma_poisson_hyper(obs=None, *, num_obs=4, dim=1):
    sigma_o = numpyro.sample("sigma_o", dist.HalfNormal(1.0))
    return gamma_poisson_linear_gaussian(
        obs, num_obs=num_obs, dim=dim, sigma_o=sigma_o, max_features=10
    )


def run_gibbs(model, hyper, **kernel_kwargs):
    kernel = Gibbs([(CRMSlice(model, **kernel_kwargs), CRM_SITES), (NUTS(model), [hyper])])
    MCMC(kernel, num_warmup=1, num_samples=1, progress_bar=False).run(
        random.PRNGKey(0), jnp.zeros((4, 1))
    )


def test_gibbs_block_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"\['theta'.*depend on sites of other Gibbs blocks"):
        run_gibbs(mass_model, "mass")
    for representation in ("bondesson", "rejection"):  # atoms out of order
        with pytest.raises(ValueError, match="representation='inverse_levy'"):
            run_gibbs(gamma_poisson_hyper, "sigma_o", representation=representation)
    with pytest.raises(ValueError, match="10 atoms of the model's CRM site as its capacity"):
        run_gibbs(gamma_poisson_hyper, "sigma_o", representation="inverse_levy", max_features=30)
    # standalone, a latent hyper-parameter is named, with the way out
    mcmc = MCMC(CRMSlice(gamma_poisson_hyper), num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(ValueError, match=r"\['sigma_o'\].*another block of numpyro.infer.Gibbs"):
        mcmc.run(random.PRNGKey(0), jnp.zeros((4, 1)))
