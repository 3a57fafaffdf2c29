"""Argument checks and NumPyro conventions of the MCMC kernels, distributions and ready models."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC

from numpyro_bnp import infer, models
from numpyro_bnp.distributions import (
    NGGP,
    BetaPrimeProcess,
    BetaProcess,
    GammaProcess,
    GeneralizedGammaProcess,
    RecursiveIBP,
    RestrictedBernoulliProcess,
    RestrictedIBP,
    exactly,
    num_active_features,
)
from numpyro_bnp.infer import AcceleratedIBPGibbs, CRMSlice, RestrictedIBPGibbs

N, D, K = 6, 2, 6


def _ibp_model(obs=None, deterministic=False):
    z = numpyro.sample("Z", RecursiveIBP(1.0, 1.0, num_rows=N, max_features=K))
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([K, D]).to_event(2))
    if deterministic:
        numpyro.deterministic("num_used", num_active_features(z))
        numpyro.deterministic("mean", z @ a)
    return numpyro.sample("obs", dist.Normal(z @ a, 0.5).to_event(2), obs=obs)


def _restricted_model(obs=None, deterministic=False):
    pi = numpyro.sample("pi", dist.Beta(0.3, 0.7).expand([K]).to_event(1))
    z = numpyro.sample("Z", RestrictedBernoulliProcess(pi, exactly(1)).expand([N]).to_event(1))
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([K, D]).to_event(2))
    if deterministic:
        numpyro.deterministic("num_used", num_active_features(z))
        numpyro.deterministic("mean", z @ a)
    return numpyro.sample("obs", dist.Normal(z @ a, 0.5).to_event(2), obs=obs)


KERNELS = {
    "CRMSlice": (CRMSlice, _ibp_model),
    "RestrictedIBPGibbs": (RestrictedIBPGibbs, _restricted_model),
    "AcceleratedIBPGibbs": (AcceleratedIBPGibbs, _ibp_model),
}


def _data():
    return np.array(random.normal(random.PRNGKey(0), (N, D)), np.float64)


def _bad(kind):
    y = _data()
    if kind == "nan":
        y[2, 1] = np.nan
    elif kind == "inf":
        y[3, 0] = -np.inf
    elif kind == "complex":
        y = y + 1j * np.ones_like(y)
    elif kind == "float32_overflow":
        y[1, 1] = 1e300  # finite in float64, inf in float32
    return y


# ---------------------------------------------------------------------------- 1. observed data
@pytest.mark.parametrize("kind", ["nan", "inf", "complex", "float32_overflow"])
@pytest.mark.parametrize("engine", sorted(KERNELS))
def test_kernels_reject_bad_observed_data(engine, kind):
    kernel_cls, model = KERNELS[engine]
    error, match = ValueError, "observed site 'obs' contains NaN or infinite values"
    if kind == "complex":
        error, match = TypeError, "observed site 'obs' must hold real numbers"
    elif kind == "float32_overflow":
        match = "observed site 'obs' contains values too large for float32"
    with jax.enable_x64(kind != "float32_overflow"), pytest.raises(error, match=match):
        kernel_cls(model).init(random.PRNGKey(0), 0, None, (), {"obs": _bad(kind)})


# ---------------------------------------------------------------------------- 4. shared checks
@pytest.mark.parametrize("engine", sorted(KERNELS))
def test_kernels_check_the_model_function(engine):
    kernel_cls, _ = KERNELS[engine]
    with pytest.raises(TypeError, match="model must be a NumPyro model function"):
        kernel_cls(dist.Normal)  # a class, not a model function
    with pytest.raises(TypeError, match="model must be a NumPyro model function"):
        kernel_cls(3)


def test_kernel_sizes_accept_numpy_integers_and_reject_bool():
    assert AcceleratedIBPGibbs(_ibp_model, refresh_every=np.int64(8)).refresh_every == 8
    kernel = CRMSlice(_ibp_model, max_features=np.int64(20), n_gamma=np.int32(0))
    assert (kernel.max_features, kernel.n_gamma) == (20, 0)
    with pytest.raises(TypeError, match="refresh_every"):
        AcceleratedIBPGibbs(_ibp_model, refresh_every=True)
    with pytest.raises(TypeError, match="n_swaps"):
        CRMSlice(_ibp_model, n_swaps=False)
    with pytest.raises(ValueError, match="max_features"):
        CRMSlice(_ibp_model, max_features=0)


@pytest.mark.parametrize("engine", sorted(KERNELS))
def test_kernels_reject_keys_of_the_wrong_shape(engine):
    kernel_cls, model = KERNELS[engine]
    keys = jnp.zeros((2, 3), jnp.uint32)
    with pytest.raises(ValueError, match="rng_key must be one PRNG key or a batch"):
        kernel_cls(model).init(keys, 0, None, (), {"obs": _data()})


# ---------------------------------------------------------------------------- 5. conventions
def test_crm_slice_rejects_init_params():
    with pytest.raises(ValueError, match="CRMSlice does not take init_params"):
        CRMSlice(_ibp_model).init(
            random.PRNGKey(0), 0, {"Z": jnp.zeros((N, K), jnp.int32)}, (), {"obs": _data()}
        )


def test_state_classes_are_named_after_their_kernels():
    assert infer.RestrictedIBPGibbsState._fields[:2] == ("i", "z")
    assert infer.AcceleratedIBPGibbsState._fields[:2] == ("i", "z")
    assert not hasattr(infer, "RestrictedGibbsState")
    assert not hasattr(infer, "AcceleratedGibbsState")


@pytest.fixture(scope="module", params=sorted(KERNELS))
def deterministic_run(request):
    kernel_cls, model = KERNELS[request.param]
    kwargs = {"max_features": 10} if kernel_cls is CRMSlice else {}
    mcmc = MCMC(
        kernel_cls(partial(model, deterministic=True), **kwargs),
        num_warmup=2,
        num_samples=3,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(1), obs=_data())
    return mcmc.get_samples()


def test_kernels_return_deterministic_sites(deterministic_run):
    samples = deterministic_run
    assert {"num_used", "mean"} <= set(samples)
    np.testing.assert_array_equal(samples["num_used"], num_active_features(samples["Z"]))
    np.testing.assert_allclose(
        samples["mean"], samples["Z"].astype(jnp.float32) @ samples["A"], rtol=1e-5, atol=1e-5
    )


# ---------------------------------------------------------------------------- 2. event shapes
def _crms():
    return [
        BetaProcess(1.0, truncation=5),
        GammaProcess(1.0, truncation=5),
        GeneralizedGammaProcess(1.0, 0.3, truncation=5),
        BetaPrimeProcess(1.0, truncation=5),
    ]


@pytest.mark.parametrize("shape", [(5, 8), (3, 8), (4, 7), (8,)])
def test_recursive_ibp_log_prob_rejects_other_matrix_shapes(shape):
    ibp = RecursiveIBP(1.0, num_rows=4, max_features=8, validate_args=True)
    with pytest.raises(ValueError, match=r"value must have shape \(\.\.\., 4, 8\)"):
        ibp.log_prob(jnp.zeros(shape, jnp.int32))


def test_recursive_ibp_log_prob_still_broadcasts_batches():
    ibp = RecursiveIBP(jnp.array([1.0, 2.0]), num_rows=4, max_features=8)
    z = ibp.sample(random.PRNGKey(0), (3,))  # (3, 2, 4, 8)
    lp = ibp.log_prob(z)
    assert lp.shape == (3, 2) and bool(jnp.all(jnp.isfinite(lp)))
    assert ibp.log_prob(z[0, 0]).shape == (2,)  # one matrix against the batch
    full = jnp.ones((4, 8), jnp.int32)  # every row takes every dish: m_k = N
    assert bool(jnp.all(ibp.log_prob(full) < jnp.inf))


@pytest.mark.parametrize("crm", _crms(), ids=lambda c: type(c).__name__)
def test_crm_log_prob_rejects_vectors_of_another_length(crm):
    with pytest.raises(ValueError, match=r"value must have shape \(\.\.\., 5\)"):
        crm.log_prob(jnp.array([0.5, 0.2, 0.1]))
    atoms = jnp.array([0.5, 0.2, 0.1, 0.0, 0.0])
    assert crm.log_prob(jnp.stack([atoms, atoms])).shape == (2,)  # batches still broadcast


def test_restricted_distributions_and_nggp_reject_other_event_shapes():
    rbp = RestrictedBernoulliProcess(jnp.full(4, 0.5), exactly(2))
    with pytest.raises(ValueError, match=r"value must have shape \(\.\.\., 4\)"):
        rbp.log_prob(jnp.array([1, 1, 0]))
    assert rbp.log_prob(jnp.array([[1, 1, 0, 0], [1, 0, 0, 0]])).shape == (2,)
    ribp = RestrictedIBP(1.0, exactly(1), num_rows=3, max_features=4)
    with pytest.raises(ValueError, match=r"value must have shape \(\.\.\., 3, 4\)"):
        ribp.log_prob(jnp.zeros((3, 5), jnp.int32))
    nggp = NGGP(1.0, 0.3, num_points=4)
    with pytest.raises(ValueError, match=r"value must have shape \(\.\.\., 4\)"):
        nggp.log_prob(jnp.array([0, 0, 1]))


# ---------------------------------------------------------------------------- 3. parameters
@pytest.mark.parametrize("alpha, beta", [(jnp.inf, 1.0), (1.0, jnp.inf), (jnp.nan, 1.0)])
def test_recursive_ibp_rejects_non_finite_parameters(alpha, beta):
    with pytest.raises(ValueError, match=r"^(alpha|beta) must be finite"):
        RecursiveIBP(alpha, beta, num_rows=3, max_features=4)  # without validate_args


def test_restricted_bernoulli_process_rejects_unreachable_counts():
    with pytest.raises(ValueError, match=r"no probability on the row counts 0\.\.0"):
        RestrictedBernoulliProcess(jnp.zeros(3), exactly(1))
    with pytest.raises(ValueError, match=r"row counts 3\.\.3"):
        RestrictedBernoulliProcess(jnp.ones(3), exactly(1))
    with pytest.raises(ValueError, match=r"batch index \(1,\)"):
        RestrictedBernoulliProcess(jnp.array([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]), exactly(1))
    # reachable counts keep working, with or without atoms at 0 and 1
    z = RestrictedBernoulliProcess(jnp.array([1.0, 0.5, 0.0]), exactly(2)).sample(
        random.PRNGKey(0), (20,)
    )
    np.testing.assert_array_equal(z[:, 0], 1)
    np.testing.assert_array_equal(z.sum(-1), 2)


def _trace(model, **kwargs):
    return numpyro.handlers.trace(numpyro.handlers.seed(model, rng_seed=0)).get_trace(**kwargs)


@pytest.mark.parametrize(
    "model, kwargs, name",
    [
        (models.beta_bernoulli_linear_gaussian, {"mass": -1.0}, "mass"),
        (models.beta_bernoulli_linear_gaussian, {"sigma_o": 0.0}, "sigma_o"),
        (models.beta_bernoulli_linear_gaussian, {"sigma_a": -1.0}, "sigma_a"),
        (models.beta_bernoulli_linear_gaussian, {"max_features": 0}, "max_features"),
        (models.gamma_poisson_linear_gaussian, {"mass": -1.0}, "mass"),
        (models.gamma_poisson_linear_gaussian, {"rate": -2.0}, "rate"),
        (models.linear_gaussian, {"sigma_o": -0.1}, "sigma_o"),
        (models.linear_gaussian, {"max_features": 0}, "max_features"),
    ],
)
def test_ready_models_name_bad_hyper_parameters(model, kwargs, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        _trace(model, num_obs=4, dim=2, **kwargs)


def test_bnb_model_names_bad_hyper_parameters():
    with pytest.raises(ValueError, match=r"^mass must be"):
        _trace(models.bnb_combinatorial_clustering, doc_lengths=[3, 4], vocab_size=5, mass=-1.0)
    with pytest.raises(ValueError, match=r"^concentration must be finite and > 1"):
        _trace(
            models.bnb_combinatorial_clustering, doc_lengths=[3, 4], vocab_size=5, concentration=1
        )


def test_ready_models_accept_numpy_integer_sizes():
    tr = _trace(models.linear_gaussian, num_obs=np.int64(4), dim=np.int64(2), max_features=5)
    assert tr["obs"]["value"].shape == (4, 2)
    tr = _trace(models.beta_bernoulli_linear_gaussian, num_obs=np.int64(4), dim=2, max_features=5)
    assert tr["theta"]["value"].shape == (5,)


def test_restricted_model_says_mass_must_be_below_the_capacity():
    with pytest.raises(ValueError, match=r"mass must be < max_features.*Increase max_features"):
        _trace(
            models.restricted_linear_gaussian,
            num_obs=4,
            dim=2,
            count_dist=exactly(1),
            mass=5.0,
            max_features=5,
        )


def test_demo_reports_an_unwritable_output_directory(capsys):
    from numpyro_bnp.__main__ import main

    assert main(["demo", "--out-dir", "/proc/nope", "--only", "ibp"]) != 0
    err = capsys.readouterr().err
    assert "--out-dir '/proc/nope' cannot hold the figures" in err


def test_kernel_options_cannot_change_under_compiled_code():
    kernel = CRMSlice(_ibp_model, n_gamma=3)
    with pytest.raises(AttributeError, match=r"CRMSlice\.n_gamma is fixed"):
        kernel.n_gamma = 0
    baseline = AcceleratedIBPGibbs(_ibp_model, refresh_every=8)
    with pytest.raises(AttributeError, match=r"AcceleratedIBPGibbs\.refresh_every is fixed"):
        baseline.refresh_every = 2
    assert (kernel.n_gamma, baseline.refresh_every) == (3, 8)
