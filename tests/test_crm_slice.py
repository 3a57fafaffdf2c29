"""CRMSlice: prior-only moments, a Geweke joint test, recovery, chains and ArviZ, bad models.

Every Monte-Carlo tolerance is 4 standard errors with the effective sample size from ArviZ
(false-alarm rate about 6e-5 per check). Compilation dominates the run time, so tests that can
share a chain do (module fixtures): the beta–Bernoulli prior-only chain also serves the capacity
growth and the chain-method tests.
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
from mcmc_runs import run_chains
from numpyro.infer import MCMC
from saturation_checks import expected_reports, saturation_reports

from numpyro_bnp.arviz_compat import arviz, from_numpyro, group
from numpyro_bnp.diagnostics import count_parity
from numpyro_bnp.distributions import BetaProcess, GammaProcess, RecursiveIBP
from numpyro_bnp.distributions.ibp import num_active_features
from numpyro_bnp.infer import CRMSlice
from numpyro_bnp.models import (
    beta_bernoulli_linear_gaussian,
    gamma_poisson_linear_gaussian,
    linear_gaussian,
)


def harmonic(n):
    return float(np.sum(1.0 / np.arange(1, n + 1)))


def run(kernel, num_samples, num_chains=4, seed=0, num_warmup=100, **model_kwargs):
    return run_chains(kernel, num_warmup, num_samples, num_chains, seed, **model_kwargs)


# ---------------------------------------------------------------------------------------------
# prior-only runs recover the prior (spec §T.11; drawing new atoms from the prior fails these)
# ---------------------------------------------------------------------------------------------
BB_PRIOR = dict(num_obs=6, dim=1, mass=1.5)
BB_BURN_IN = 100  # draws after the saturated start, dropped


@pytest.fixture(scope="module")
def bb_prior():
    """One beta–Bernoulli prior-only run, 4 vectorized chains: 20 sweeps on a buffer of 4 atoms
    (saturated), then :meth:`CRMSlice.grow` to 64 atoms and 1,600 more sweeps."""
    kernel = CRMSlice(beta_bernoulli_linear_gaussian, xi_scale=3.0, max_features=4)
    with pytest.warns(RuntimeWarning, match="atom buffer") as small_warnings:
        mcmc = run(kernel, 20, num_warmup=0, **BB_PRIOR)
    small = {
        "samples": mcmc.get_samples(group_by_chain=True),
        "saturated": np.asarray(mcmc.get_extra_fields(group_by_chain=True)["saturated"]),
        "warnings": [str(w.message) for w in small_warnings],
    }
    state = kernel.grow(mcmc.last_state, 64)
    mcmc.post_warmup_state = state
    mcmc.num_samples = BB_BURN_IN + 1500
    with warnings.catch_warnings(record=True) as grown_warnings:
        warnings.simplefilter("always")
        mcmc.run(random.PRNGKey(1), **BB_PRIOR)
    grown = [str(w.message) for w in grown_warnings]
    return dict(kernel=kernel, small=small, grown_state=state, mcmc=mcmc, grown_warnings=grown)


def test_prior_only_beta_bernoulli_matches_c_harmonic(bb_prior):
    mcmc, n, mass = bb_prior["mcmc"], BB_PRIOR["num_obs"], BB_PRIOR["mass"]
    extra = mcmc.get_extra_fields(group_by_chain=True)
    assert not np.any(extra["saturated"])
    k_plus = np.asarray(extra["num_active"])[:, BB_BURN_IN:]
    check_mean(k_plus, mass * harmonic(n))  # E[K+] = c H_N
    x = mcmc.get_samples(group_by_chain=True)["X"]
    check_mean(x[:, BB_BURN_IN:].sum(-1).mean(-1), mass)  # E[Σ_k X_nk] = c
    assert np.array_equal(extra["parity"], count_parity(x))
    assert np.array_equal(extra["num_active"], num_active_features(x))


def test_saturation_is_reported_and_grow_continues(bb_prior):
    saturated = bb_prior["small"]["saturated"]
    assert np.any(saturated)  # a buffer of 4 atoms is too small here
    # vectorized chains: a host warning names the chains and counts the saturated sweeps
    # (again when a chain's count doubles); none once the buffer suffices
    expected = expected_reports(saturated, vectorized=True)
    assert saturation_reports(bb_prior["small"]["warnings"]) == expected
    assert all("kernel.grow(mcmc.last_state)" in m for m in bb_prior["small"]["warnings"])
    assert not [m for m in bb_prior["grown_warnings"] if "atom buffer" in m]
    assert bb_prior["small"]["samples"]["X"].shape == (4, 20, 6, 4)
    state = bb_prior["grown_state"]
    assert state.z["X"].shape == (4, 6, 64) and state.arrivals.shape == (4, 64)
    mcmc = bb_prior["mcmc"]
    assert not np.any(mcmc.get_extra_fields()["saturated"])
    assert mcmc.get_samples()["X"].shape == (4 * 1600, 6, 64)
    with pytest.raises(ValueError, match="max_features"):
        bb_prior["kernel"].grow(state, 8)


def test_chain_methods_agree(bb_prior):
    # the saturated start of the shared run again, chains one after the other: the same draws
    # and the same saturation warnings, one chain at a time; "parallel" without host devices:
    # numpyro warns and runs the chains sequentially
    with pytest.warns(UserWarning, match="not enough devices") as record:
        mcmc = MCMC(
            CRMSlice(beta_bernoulli_linear_gaussian, xi_scale=3.0, max_features=4),
            num_warmup=0,
            num_samples=20,
            num_chains=4,
            chain_method="parallel",
            progress_bar=False,
        )
        mcmc.run(random.PRNGKey(0), **BB_PRIOR)
    sequential = mcmc.get_samples(group_by_chain=True)
    for name, value in bb_prior["small"]["samples"].items():
        np.testing.assert_allclose(sequential[name], value, rtol=1e-5, atol=1e-6)
    messages = [str(w.message) for w in record if "atom buffer" in str(w.message)]
    expected = expected_reports(bb_prior["small"]["saturated"], vectorized=False)
    assert saturation_reports(messages) == expected


@pytest.mark.parametrize("representation", ["bondesson", "rejection"])
def test_prior_only_two_parameter_ibp_moves_the_marks(representation):
    # IBP(α, β = 2) read as BetaProcess(α, 2): the marks are sampled — Bondesson V ~ Beta(1, 1),
    # or the rejection series' acceptance uniforms (dominating measure γ C θ^{-1}, kept with
    # probability 1 - θ)
    mass, concentration, n = 1.0, 2.0, 5
    mcmc = run(
        CRMSlice(linear_gaussian, representation=representation, xi_scale=3.0, max_features=64),
        900,  # ESS about 220 (K+ mixes well here)
        num_obs=n,
        dim=1,
        mass=mass,
        concentration=concentration,
    )
    extra = mcmc.get_extra_fields(group_by_chain=True)
    assert not np.any(extra["saturated"])
    assert 0.1 < float(extra["accept_marks"].mean()) < 0.99
    ibp = RecursiveIBP(mass, concentration, num_rows=n, max_features=1)
    truth = float(ibp.expected_num_features()[-1])
    check_mean(extra["num_active"], truth)


@pytest.mark.parametrize(
    "representation, num_samples, max_features",
    [("bondesson", 1500, 40), ("rejection", 2000, 60)],  # rejection: Rosiński's series
)
def test_prior_only_gamma_poisson_matches_log_formula(representation, num_samples, max_features):
    mass, rate, n = 1.5, 1.0, 6
    mcmc = run(
        CRMSlice(
            gamma_poisson_linear_gaussian,
            representation=representation,
            xi_scale=3.0,
            max_features=max_features,
        ),
        num_samples,
        num_obs=n,
        dim=1,
        mass=mass,
        rate=rate,
    )
    extra = mcmc.get_extra_fields(group_by_chain=True)
    assert not np.any(extra["saturated"])
    check_mean(extra["num_active"], mass * np.log1p(n / rate))  # ∫(1 - e^{-Nθ}) ν(dθ)
    x = mcmc.get_samples(group_by_chain=True)["X"]
    check_mean(x.sum(-1).mean(-1), mass / rate)  # E[Σ_k X_nk] = ∫ θ ν(dθ)


PRIOR_STARTS = 4000  # independent first states: the standard error of E[K+] about 0.03


@pytest.mark.parametrize(
    "model, model_kwargs, expected_k, expected_row",
    [  # IBP(1, β = 2) by Bondesson with random marks; gamma–Poisson with Poisson counts
        (linear_gaussian, dict(mass=1.0, concentration=2.0), None, 1.0),
        (gamma_poisson_linear_gaussian, dict(mass=1.5), 1.5 * np.log1p(5), 1.5),
    ],
)
def test_prior_start_draws_the_first_state_from_the_prior(
    model, model_kwargs, expected_k, expected_row
):
    # start="prior": i.i.d. first states, so K+ ~ Poisson(E[K+]) (mean and variance) and
    # E[Σ_k X_nk] = ∫ θ ν(dθ), each within 4 standard errors
    n = 5
    kernel = CRMSlice(model, start="prior", max_features=48)
    keys = random.split(random.PRNGKey(3), PRIOR_STARTS)
    state = kernel.init(keys, 0, None, (), dict(num_obs=n, dim=1, **model_kwargs))
    if expected_k is None:
        ibp = RecursiveIBP(1.0, 2.0, num_rows=n, max_features=1)
        expected_k = float(ibp.expected_num_features()[-1])
    assert not np.any(state.saturated)
    k_plus = np.asarray(state.num_active, np.float64).reshape(4, -1)
    check_mean(k_plus, expected_k)
    var_se = np.sqrt((np.mean((k_plus - k_plus.mean()) ** 4) - k_plus.var() ** 2) / k_plus.size)
    assert abs(k_plus.var() - expected_k) < 4 * var_se
    x = np.asarray(state.z[kernel.spec.count_site])
    check_mean(x.sum(-1).mean(-1).reshape(4, -1), expected_row)
    # the atoms up to the last used one, in series order
    used = np.any(x > 0, axis=-2)
    last = np.where(used.any(-1), x.shape[-1] - np.argmax(used[:, ::-1], axis=-1), 0)
    assert np.array_equal(np.asarray(state.num_atoms), last)
    arrivals = np.asarray(state.arrivals)
    live = np.arange(48) < last[:, None]
    assert np.all(np.where(live[:, 1:], np.diff(arrivals, axis=-1), 1.0) > 0)
    assert np.all(arrivals[~live] == 0)


def test_prior_start_that_overflows_the_buffer_is_reported():
    kernel = CRMSlice(beta_bernoulli_linear_gaussian, start="prior", max_features=2)
    model_kwargs = dict(num_obs=6, dim=1, mass=4.0)
    keys = random.split(random.PRNGKey(0), 8)
    with pytest.warns(RuntimeWarning, match=r"start='prior'.*chain\(s\) \[.*buffer of 2"):
        state = kernel.init(keys, 0, None, (), model_kwargs)
    assert np.any(state.saturated) and np.all(np.asarray(state.num_atoms) <= 2)
    kernel = CRMSlice(
        beta_bernoulli_linear_gaussian, start="prior", max_features=2, on_saturation="error"
    )
    with pytest.raises(RuntimeError, match="start='prior'"):
        kernel.init(keys, 0, None, (), model_kwargs)


def negative_binomial_model(obs=None, *, num_obs=3, total_count=2.0, mass=1.0):
    theta = numpyro.sample("theta", BetaProcess(mass, 1.0, truncation=20))
    k = theta.shape[-1]
    x = numpyro.sample(
        "X", dist.NegativeBinomialProbs(total_count, theta).expand([num_obs, k]).to_event(2)
    )
    psi = numpyro.sample("psi", dist.Normal(0.0, 1.0).expand([k, 1]).to_event(2))
    return numpyro.sample("obs", dist.Normal(x @ psi, 1.0).to_event(2), obs=obs)


def test_prior_only_beta_negative_binomial():
    # P(atom unused by N rows) = (1-θ)^{N r}: with λ = 1, E[K+] = c H_{N r} for integer N r
    mcmc = run(CRMSlice(negative_binomial_model, xi_scale=3.0, max_features=40), 1500)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    assert not np.any(extra["saturated"])
    check_mean(extra["num_active"], harmonic(6))


# ---------------------------------------------------------------------------------------------
# Geweke: successive-conditional draws (y | X, ψ, then one sweep) keep the joint prior
# ---------------------------------------------------------------------------------------------
def test_geweke_successive_conditional_keeps_the_joint():
    n, mass, sigma_o, sigma_a = 3, 1.0, 0.5, 1.0
    kernel = CRMSlice(beta_bernoulli_linear_gaussian, xi_scale=2.0, max_features=30)
    kwargs = dict(num_obs=n, dim=1, mass=mass, sigma_o=sigma_o, sigma_a=sigma_a)
    obs = jnp.zeros((n, 1))
    states = jax.vmap(lambda k: kernel.init(k, 0, None, (obs,), kwargs))(
        random.split(random.PRNGKey(1), 4)
    )

    def step(state, key):
        x, psi = state.z["X"], state.z["psi"]
        mean = x.astype(psi.dtype) @ psi
        y = mean + sigma_o * random.normal(key, mean.shape, mean.dtype)
        state = kernel.sample(state, (y,), kwargs)  # the sweep reads the data it is given
        return state, (state.num_active, jnp.mean(y**2))

    def chain(state, key):
        return lax.scan(step, state, random.split(key, 2000))[1]

    k_plus, y2 = jax.jit(jax.vmap(chain))(states, random.split(random.PRNGKey(2), 4))
    k_plus, y2 = np.asarray(k_plus)[:, 100:], np.asarray(y2)[:, 100:]
    check_mean(k_plus, mass * harmonic(n))
    check_mean(y2, sigma_o**2 + sigma_a**2 * mass)  # E[y²] = σ² + σ_0² E[Σ_k X_nk]


# ---------------------------------------------------------------------------------------------
# log_joint: the log density of the sampler's target at its state, against the model's own
# ---------------------------------------------------------------------------------------------
LJ_Y = np.random.default_rng(3).normal(size=(4, 2))
LJ_MODELS = {  # model, its kwargs, Lévy log density log ν(θ), h_0(θ) = P(a row does not use θ)
    "beta_bernoulli": (
        beta_bernoulli_linear_gaussian,
        dict(mass=1.5, concentration=2.0, sigma_a=0.8, sigma_o=0.5),
        lambda t: np.log(1.5 * 2.0) - np.log(t) + (2.0 - 1.0) * np.log1p(-t),
        lambda t: 1.0 - t,
    ),
    "beta_bernoulli_unit": (  # concentration 1: atoms up to 1 - 1e-20, Λ's upper limit
        beta_bernoulli_linear_gaussian,
        dict(mass=1.0, concentration=1.0, sigma_a=0.8, sigma_o=0.5),
        lambda t: -np.log(t),
        lambda t: 1.0 - t,
    ),
    "gamma_poisson": (
        gamma_poisson_linear_gaussian,
        dict(mass=1.5, rate=1.0, sigma_a=0.8, sigma_o=0.5),
        lambda t: np.log(1.5) - np.log(t) - 1.0 * t,
        lambda t: np.exp(-t),
    ),
}


def _expected_used_after(log_nu, h0, upper, scale=1.0):
    """Λ = ∫_0^upper (1 - h_0(ρθ)^N) ν(θ) dθ by SciPy: the expected number of atoms after the
    last instantiated one that some row uses."""
    from scipy import integrate

    n = LJ_Y.shape[0]

    def f(t):
        return (1.0 - h0(scale * t) ** n) * np.exp(log_nu(t))

    return integrate.quad(f, 0.0, upper, limit=200, epsabs=1e-13, epsrel=1e-11)[0]


def _model_densities(model, args, kwargs, values, condition_theta):
    """``numpyro.infer.util.log_density`` of the model at ``values`` (with ``θ`` conditioned on,
    not scored, when ``condition_theta``: ``log p(X, ψ, y | θ)``) and the log-likelihood of the
    observed site, as one compiled program (run eagerly, each is hundreds of compilations)."""
    from numpyro.infer.util import log_density

    def densities(values):
        values, fn = dict(values), model
        if condition_theta:
            given = numpyro.handlers.substitute(model, {"theta": values.pop("theta")})
            fn = numpyro.handlers.block(given, hide=["theta"])
        model_lp, trace = log_density(fn, args, kwargs, values)
        obs = trace["obs"]
        return model_lp, obs["fn"].log_prob(obs["value"]).sum()

    return jax.jit(densities)(values)


@pytest.mark.parametrize(
    "name, representation",
    [
        ("beta_bernoulli", "inverse_levy"),
        ("beta_bernoulli", "bondesson"),  # V ~ Beta(1, 1): marks sampled
        ("beta_bernoulli_unit", "bondesson"),  # V = 1
        ("gamma_poisson", "inverse_levy"),
    ],
)
def test_log_joint_is_the_models_log_density_at_the_state(name, representation):
    """``log_joint`` = ``log p(y, X, ψ_{1:K}, Γ_{1:K}, P_{1:K})`` with the tail integrated out.

    The counts, traits and data terms come from ``numpyro.infer.util.log_density`` of the model
    with ``max_features = K`` at the state's values; the atoms' term is ``-Γ_K`` (first ``K``
    arrivals of a unit-rate Poisson process), and for the inverse-Lévy series, whose atoms are
    the model's ``K`` largest (``Γ_k = N(θ_k)``), the model's own density of ``θ`` minus the
    Jacobian ``Σ_k log ν(θ_k)``; minus ``Λ``, SciPy's quadrature.
    """
    model, kwargs, log_nu, h0 = LJ_MODELS[name]
    kwargs = dict(num_obs=4, dim=2, **kwargs)
    kernel = CRMSlice(model, representation=representation, xi_scale=2.0, max_features=16)
    args = (jnp.asarray(LJ_Y),)
    state = kernel.init(random.PRNGKey(0), 0, None, args, kwargs)
    # no atom: exp(-Λ(0)) and the data given X ψ = 0
    top = 1.0 if name.startswith("beta_bernoulli") else np.inf  # the largest possible atom
    noise = -0.5 * np.sum(LJ_Y**2) / 0.25 - LJ_Y.size * np.log(0.5 * np.sqrt(2 * np.pi))
    empty = noise - _expected_used_after(log_nu, h0, top)
    np.testing.assert_allclose(float(state.log_joint), empty, rtol=1e-9)
    sweep = jax.jit(lambda s: kernel.sample(s, args, kwargs))
    checked = set()
    for _ in range(8):
        state = sweep(state)
        k = int(state.num_atoms)
        checked.add(k)
        if k == 0:
            np.testing.assert_allclose(float(state.log_joint), empty, rtol=1e-9)
            continue
        values = {
            "theta": state.z["theta"][:k],
            "X": state.z["X"][:, :k],
            "psi": state.z["psi"][:k],
        }
        theta, last = np.asarray(values["theta"]), float(state.arrivals[k - 1])
        bondesson = representation != "inverse_levy"
        model_lp, log_lik = _model_densities(
            model, args, dict(kwargs, max_features=k), values, condition_theta=bondesson
        )
        if not bondesson:
            atoms = float(model_lp) - np.sum(log_nu(theta))
            upper, scale = theta[-1], 1.0
        else:  # Bondesson atoms are not in order: the model's density of θ does not apply
            atoms = float(model_lp) - last  # -Γ_K: the atoms in the sampler's coordinates
            upper = top
            c = kwargs["mass"] * kwargs["concentration"]  # Bondesson's c = γλ
            scale = np.exp(-last / c)  # ρ = e^{-Γ_K/c}
        lam = _expected_used_after(log_nu, h0, upper, scale)
        np.testing.assert_allclose(float(state.log_joint), atoms - lam, rtol=1e-9)
        np.testing.assert_allclose(float(state.log_likelihood), float(log_lik), rtol=1e-9)
    assert len(checked) > 1  # several numbers of atoms


# ---------------------------------------------------------------------------------------------
# recovery, chains, ArviZ
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def synthetic():
    rng = np.random.default_rng(0)
    features = np.kron(np.eye(3), np.ones((1, 4)))  # three disjoint blocks, D = 12
    z = (rng.random((200, 3)) < 0.3).astype(int)
    y = z @ features + 0.2 * rng.normal(size=(200, 12))
    return y, features


@pytest.fixture(scope="module")
def recovery_run(synthetic):
    y, _ = synthetic
    mcmc = MCMC(
        CRMSlice(linear_gaussian),
        num_warmup=300,
        num_samples=150,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), y, num_obs=200, dim=12, mass=1.0, sigma_o=0.2)
    return mcmc


def test_recovers_linear_gaussian_features(synthetic, recovery_run):
    _, features = synthetic
    k_plus = np.asarray(recovery_run.get_extra_fields()["num_active"])
    assert np.mean(k_plus == 3) > 0.5, np.bincount(k_plus)
    samples = recovery_run.get_samples()
    errors = []
    for z, a in zip(samples["Z"], samples["A"], strict=True):
        used = np.asarray(z).any(0)
        if used.sum() != 3:
            continue
        found = np.asarray(a)[used]
        # match up to permutation: each true block to its nearest found feature
        dist_matrix = np.abs(found[:, None, :] - features[None]).max(-1)
        errors.append(dist_matrix.min(0).max())
        assert sorted(dist_matrix.argmin(0)) == [0, 1, 2]
    # posterior sd of an entry is about σ / sqrt(60 rows) = 0.026: 0.15 is ~6 sd
    assert np.median(errors) < 0.15


def test_multichain_arviz_export(recovery_run):
    data = from_numpyro(recovery_run)
    stats = group(data, "sample_stats")
    posterior = group(data, "posterior")
    assert stats["num_active"].shape == (2, 150)
    assert set(posterior.data_vars) == {"Z", "A"}
    assert group(data, "log_likelihood")["obs"].shape[:2] == (2, 150)
    az = arviz()
    for name in ("parity", "num_active"):
        values = stats[name].values
        if np.ptp(values) == 0:  # a constant trace (e.g. K+ = 3 throughout) has no R-hat
            continue
        ess = float(np.asarray(az.ess(values)))
        rhat = float(np.asarray(az.rhat(values)))
        assert ess > 0 and np.isfinite(rhat)
    # the exported parity is the paper's test function of the exported counts
    z = posterior["Z"].values
    assert np.array_equal(stats["parity"].values, count_parity(z))
    # unused atoms export zero traits
    unused = ~z.any(-2)
    assert np.all(posterior["A"].values[unused] == 0)


# ---------------------------------------------------------------------------------------------
# bad models and arguments
# ---------------------------------------------------------------------------------------------
def no_crm_model(obs=None):
    x = numpyro.sample("X", dist.Bernoulli(0.5).expand([4, 3]).to_event(2))
    psi = numpyro.sample("psi", dist.Normal(0, 1).expand([3, 2]).to_event(2))
    numpyro.sample("obs", dist.Normal(x @ psi, 1.0).to_event(2), obs=obs)


def binomial_count_model(obs=None):
    theta = numpyro.sample("theta", BetaProcess(1.0, truncation=5))
    x = numpyro.sample("counts", dist.Binomial(3, theta).expand([4, 5]).to_event(2))
    psi = numpyro.sample("psi", dist.Normal(0, 1).expand([5, 2]).to_event(2))
    numpyro.sample("obs", dist.Normal(x @ psi, 1.0).to_event(2), obs=obs)


def bernoulli_gamma_model(obs=None):
    theta = numpyro.sample("theta", GammaProcess(1.0, truncation=5))
    x = numpyro.sample("X", dist.Bernoulli(jnp.minimum(theta, 1.0)).expand([4, 5]).to_event(2))
    psi = numpyro.sample("psi", dist.Normal(0, 1).expand([5, 2]).to_event(2))
    numpyro.sample("obs", dist.Normal(x @ psi, 1.0).to_event(2), obs=obs)


def poisson_obs_model(obs=None):
    theta = numpyro.sample("theta", BetaProcess(1.0, truncation=5))
    x = numpyro.sample("X", dist.Bernoulli(theta).expand([4, 5]).to_event(2))
    psi = numpyro.sample("psi", dist.Normal(0, 1).expand([5, 2]).to_event(2))
    numpyro.sample("obs", dist.Poisson(jnp.exp(x @ psi)).to_event(2), obs=obs)


@pytest.mark.parametrize(
    "model, match",
    [
        (no_crm_model, "exactly one sample site with a CompletelyRandomMeasure"),
        (binomial_count_model, "count likelihood of site 'counts' \\(Binomial"),
        (bernoulli_gamma_model, "count site 'X' is bernoulli and needs rates in \\[0, 1\\]"),
        (poisson_obs_model, "site 'obs' is Poisson"),
    ],
)
def test_bad_models_name_the_site(model, match):
    obs = np.zeros((4, 2))
    mcmc = MCMC(CRMSlice(model), num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(ValueError, match=match):
        mcmc.run(random.PRNGKey(0), obs)


def test_bad_arguments():
    with pytest.raises(TypeError, match="model"):
        CRMSlice("not a model")
    with pytest.raises(ValueError, match="representation"):
        CRMSlice(linear_gaussian, representation="stick")
    with pytest.raises(ValueError, match="xi_scale"):
        CRMSlice(linear_gaussian, xi_scale=0.0)
    with pytest.raises(ValueError, match="max_features"):
        CRMSlice(linear_gaussian, max_features=0)
    # IBP(α, β < 1) has no Bondesson representation: the error says which prior and why
    kernel = CRMSlice(linear_gaussian)
    mcmc = MCMC(kernel, num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(ValueError, match=r"site 'Z'.*concentration >= 1"):
        mcmc.run(random.PRNGKey(0), num_obs=3, dim=1, concentration=0.5)
    mcmc = MCMC(
        CRMSlice(linear_gaussian, representation="rejection"),
        num_warmup=1,
        num_samples=1,
        progress_bar=False,
    )
    with pytest.raises(ValueError, match=r"site 'Z'.*concentration \+ discount >= 1"):
        mcmc.run(random.PRNGKey(0), num_obs=3, dim=1, concentration=0.5)
    with pytest.raises(ValueError, match="collapsed_rows must be True or False"):
        CRMSlice(linear_gaussian, collapsed_rows=1)
    with pytest.raises(ValueError, match=r"start must be one of \('empty', 'prior'\)"):
        CRMSlice(linear_gaussian, start="posterior")
    # the collapsed row moves need Bernoulli counts: a gamma–Poisson model is refused at init
    kernel = CRMSlice(gamma_poisson_linear_gaussian, collapsed_rows=True)
    mcmc = MCMC(kernel, num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(ValueError, match=r"collapsed_rows=True needs Bernoulli counts.*poisson"):
        mcmc.run(random.PRNGKey(0), num_obs=3, dim=1)


@pytest.mark.parametrize("crm", [BetaProcess(2.0, truncation=4), GammaProcess(2.0, truncation=4)])
def test_crm_support_bijection(crm):
    # biject_to(CRM support) lets ArviZ / NumPyro initialise a CRM site: round trip + Jacobian
    from numpyro.distributions.transforms import biject_to

    transform = biject_to(crm.support)
    x = jnp.array([0.3, -1.2, 2.0, 0.1])
    y = transform(x)
    assert bool(crm.support(y))
    np.testing.assert_allclose(transform.inv(y), x, rtol=1e-10)
    log_det = np.linalg.slogdet(np.asarray(jax.jacfwd(transform)(x)))[1]
    np.testing.assert_allclose(transform.log_abs_det_jacobian(x, y), log_det, rtol=1e-10)


def test_bnb_clustering_prior_document_length():
    # r_d = N_d (λ-1)/(αλ) makes E[length of document d] = r_d ∫ θ/(1-θ) ν(dθ) = N_d (spec D6)
    from numpyro.infer import Predictive

    from numpyro_bnp.models import bnb_combinatorial_clustering

    lengths = np.array([50.0, 100.0])
    prior = Predictive(bnb_combinatorial_clustering, num_samples=500)(
        random.PRNGKey(0), doc_lengths=lengths, vocab_size=5, concentration=3.0
    )
    totals = np.asarray(prior["counts"]).sum(-1)  # (S, D), i.i.d. draws
    se = totals.std(0) / np.sqrt(totals.shape[0])
    assert np.all(np.abs(totals.mean(0) - lengths) < 4 * se), (totals.mean(0), se)
    assert prior["topics"].shape[-1] == 5 and np.allclose(prior["topics"].sum(-1), 1.0)
