"""CRMSlice with the CRM mass learned (alpha ~ Gamma(a, b)): the exact conditional of the mass.

The derivation (``numpyro_bnp.infer.features.crm.atoms.mass_conditional``): every series scales
with the
mass, ``τ_α(V, Γ) = τ_1(V, Γ/α)`` and ``Λ_α = α Λ_1``; holding the atoms (``T = Γ/α``) fixed,
``p(α | ·) ∝ p(α) α^K e^{-α S}`` with ``S = T_K + Λ_1(T_K)``. Checked here numerically: the
scaling identities of the atom series, the conditional against the α-dependence of the kernel's
own ``log_joint`` (itself checked against NumPyro's model density in ``test_crm_slice.py``), and
prior-only runs that recover the prior of α and ``E[K+] = E[α] H_N`` within 4 Monte-Carlo
standard errors (ESS from ArviZ), for the conjugate Gamma draw and the slice-sampling update of
another prior.
"""

import functools

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from mc_checks import check_mean
from numpyro.infer import MCMC

from numpyro_bnp.distributions import BetaProcess, GammaProcess
from numpyro_bnp.infer import CRMSlice
from numpyro_bnp.infer.features.crm import target
from numpyro_bnp.infer.features.crm.atoms import AtomSeries, mass_conditional
from numpyro_bnp.models import beta_bernoulli_linear_gaussian, linear_gaussian

ROWS = 6


def harmonic(n):
    return float(np.sum(1.0 / np.arange(1, n + 1)))


def series(crm, representation, likelihood="bernoulli"):
    return AtomSeries(
        crm,
        representation,
        likelihood,
        None,
        ROWS,
        jnp.float64,
        n_gamma=1,
        gamma_step=1.0,
        n_marks=1,
        mark_step=0.3,
    )


CASES = [
    (lambda m: BetaProcess(m, 1.0), "bondesson", "bernoulli"),
    (lambda m: BetaProcess(m, 2.0), "bondesson", "bernoulli"),
    (lambda m: BetaProcess(m, 2.0), "inverse_levy", "bernoulli"),
    (lambda m: BetaProcess(m, 2.0), "rejection", "bernoulli"),
    (lambda m: GammaProcess(m, 1.5), "bondesson", "poisson"),
    (lambda m: GammaProcess(m, 1.5), "rejection", "poisson"),
]


@pytest.mark.parametrize("make, representation, likelihood", CASES)
def test_series_scale_with_the_mass(make, representation, likelihood):
    # τ_α(V, Γ) = τ_1(V, Γ/α), Λ_α(Γ) = α Λ_1(Γ/α), and at_mass is the series built at α
    alpha = 2.7
    at_alpha = series(make(alpha), representation, likelihood)
    unit = series(make(1.0), representation, likelihood)
    moved = series(make(0.9), representation, likelihood).at_mass(alpha)
    gamma = jnp.array([0.3, 1.1, 2.5, 4.0])
    marks = jnp.array([0.2, 0.7, 0.45, 0.9])
    theta = at_alpha.theta(gamma, marks)
    np.testing.assert_allclose(unit.theta(gamma / alpha, marks), theta, rtol=1e-10)
    np.testing.assert_allclose(moved.theta(gamma, marks), theta, rtol=1e-10)
    for g, t in zip(gamma, theta, strict=True):
        tail = at_alpha.log_no_later_use(g, t, 3)
        np.testing.assert_allclose(alpha * unit.log_no_later_use(g / alpha, t, 3), tail, rtol=1e-7)
        np.testing.assert_allclose(moved.log_no_later_use(g, t, 3), tail, rtol=1e-7)


def test_mass_conditional_is_the_alpha_dependence_of_the_target():
    # fix the atoms θ_{1:K} (T = Γ/α) and the counts; the kernel's log_joint at Γ = α T, plus the
    # Jacobian K log α of Γ -> T, must be K log α - α S + const (S from mass_conditional)
    base = series(BetaProcess(1.0, 2.0), "bondesson")
    t = jnp.array([0.2, 0.5, 1.3, 0.0, 0.0])
    marks = jnp.array([0.3, 0.8, 0.6, 0.5, 0.5])
    x = jnp.array(np.random.default_rng(0).random((ROWS, 5)) < 0.5, jnp.int32).at[:, 3:].set(0)
    x = x.at[0, 2].set(1)
    traits = jnp.zeros((5, 1))
    values = []
    for alpha in (0.4, 1.0, 2.5, 6.0):
        atoms = base.at_mass(alpha)
        gamma = alpha * t
        theta = jnp.where(jnp.arange(5) < 3, atoms.theta(jnp.where(t > 0, gamma, 1.0), marks), 0)
        log_joint = target.log_joint(
            atoms, theta, gamma, 3, x, traits, 0.0, trait_loc=0.0, trait_var=1.0
        )
        k, s = mass_conditional(alpha, gamma[2], 3, atoms.log_no_later_use(gamma[2], theta[2], 3))
        values.append(float(log_joint) + 3 * np.log(alpha) - (float(k) * np.log(alpha) - alpha * s))
        assert float(k) == 3
    np.testing.assert_allclose(values, values[0], rtol=1e-9)  # no other α-dependence


def learned_mass_model(prior):
    def model(obs=None, *, num_obs=ROWS, dim=1):
        mass = numpyro.sample("alpha", prior)
        return beta_bernoulli_linear_gaussian(
            obs, num_obs=num_obs, dim=dim, mass=mass, max_features=20
        )

    return model


def learned_ibp_mass(prior):  # the IBP model with a prior on α: its site "mass"
    return functools.partial(linear_gaussian, num_obs=ROWS, dim=1, mass=prior, max_features=20)


@pytest.mark.parametrize(
    "make_model, prior, mean, second_moment",
    [
        (learned_mass_model, dist.Gamma(2.0, 2.0), 1.0, 1.5),  # conjugate: E[α²] = a(a+1)/b²
        (learned_mass_model, dist.LogNormal(0.0, 0.5), np.exp(0.125), np.exp(0.5)),  # slice
        (learned_ibp_mass, dist.Gamma(2.0, 2.0), 1.0, 1.5),  # RecursiveIBP(α, 1) = BP(α, 1)
    ],
    ids=["gamma", "lognormal", "ibp_gamma"],
)
def test_prior_only_recovers_the_mass_prior(make_model, prior, mean, second_moment):
    # no data: the chain's α must follow its prior, and K+ its prior mean E[α] H_N (λ = 1)
    kernel = CRMSlice(make_model(prior), xi_scale=3.0, max_features=48)
    mcmc = MCMC(
        kernel,
        num_warmup=100,
        num_samples=1500,
        num_chains=8,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0))
    extra = mcmc.get_extra_fields(group_by_chain=True)
    assert not np.any(extra["saturated"])
    alpha = np.asarray(mcmc.get_samples(group_by_chain=True)[kernel.spec.mass_site], np.float64)
    check_mean(alpha, mean)
    check_mean(alpha**2, second_moment)
    check_mean(extra["num_active"], mean * harmonic(ROWS))
