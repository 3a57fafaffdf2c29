"""R-IBP filter on hostile inputs: Newton safeguard, data outside the support, constants that
overflow float32, non-factorising likelihoods, argument checks and the model cache key.

Runs under x64 (``conftest.py``); the float32 cases pass ``dtype=jnp.float32``. The one compiled
filter is shared through a module-scoped fixture.
"""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from scipy.stats import poisson

from numpyro_bnp.distributions import RecursiveIBP
from numpyro_bnp.infer import RIBPFilter
from numpyro_bnp.infer.core.model import model_cache_key
from numpyro_bnp.infer.features.feature_model import read_feature_model
from numpyro_bnp.models import factor_analysis, linear_gaussian


def log_rate_poisson(obs=None, *, num_obs, dim, mass=3.0, max_features=8):
    z = numpyro.sample("Z", RecursiveIBP(mass, 1.0, num_rows=num_obs, max_features=max_features))
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([max_features, dim]).to_event(2))
    return numpyro.sample("obs", dist.Poisson(jnp.exp(z @ a)).to_event(2), obs=obs)


def logit_bernoulli(obs=None, *, num_obs, dim, max_features=4):
    z = numpyro.sample("Z", RecursiveIBP(1.0, 1.0, num_rows=num_obs, max_features=max_features))
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([max_features, dim]).to_event(2))
    return numpyro.sample("obs", dist.Bernoulli(logits=z @ a).to_event(2), obs=obs)


POISSON = dict(num_obs=1, dim=5)


@pytest.fixture(scope="module")
def counts():
    return np.random.default_rng(0).poisson(200.0, size=(300, 5)).astype(float)


@pytest.fixture(scope="module")
def poisson_run(counts):
    # 8 slots hold the 2-3 features these data need; the prior's mass beyond them is ~0.1
    filt = RIBPFilter(log_rate_poisson, max_features=8, truncation_tol=0.5, dtype=jnp.float32)
    return filt.run(random.PRNGKey(0), counts, progress_bar=False, chunk_size=300, **POISSON)


# ---------------------------------------------------------------------------- 1. Newton safeguard
def test_generic_newton_steps_stay_finite_and_fit_large_poisson_counts(poisson_run, counts):
    """Counts ~ Poisson(200) under a log link, float32: the unguarded Newton step from the
    prior (rate e⁰ = 1, gradient ≈ 200 per entry) overshoots to a rate of e^100, which is
    infinite in float32, and the whole state was NaN from the first row. Safeguarded, the
    state stays finite and fits: the plug-in rate ``exp(z μ)`` of the rows' rounded feature
    use must match the data mean to 2 % (the data mean's own sampling error is
    sqrt(200 / 300) / 200 = 0.4 %; measured 0.6 %), and the per-row ELBO of the last 100 rows
    must come within 1 nat of the log-likelihood at the true rate (measured 0.03) and above
    the first rows'."""
    res = poisson_run
    assert res.engine.kind == "generic"
    for field in res.state:
        assert np.all(np.isfinite(np.asarray(field)))
    elbo = res.traces["elbo"]
    assert np.all(np.isfinite(elbo))
    b = np.asarray(res.feature_use(counts))
    assert np.all(np.isfinite(b))
    rate = np.exp((b > 0.5) @ np.asarray(res.state.mean, np.float64))
    np.testing.assert_allclose(rate.mean(0), counts.mean(0), rtol=0.02)
    true_ll = poisson.logpmf(counts, 200.0).sum(1)
    assert elbo[-100:].mean() > true_ll[-100:].mean() - 1.0
    assert elbo[-100:].mean() > elbo[:10].mean()


# ---------------------------------------------------------------------------- 2. support
def test_batches_outside_the_likelihoods_support_are_rejected(poisson_run, counts):
    filt = poisson_run.engine
    for bad, value in ((3, -1.0), (5, 2.5)):  # negative, fractional
        batch = counts[:8].copy()
        batch[bad, 2] = value
        with pytest.raises(ValueError, match=rf"batch 4 .*'obs'.*first bad row: {bad}\b"):
            filt.check_batch(batch, name="batch 4")
    # in a stream: rejected before any row of the batch reaches the state
    bad = counts[:4].copy()
    bad[1, 0] = 0.5
    empty = filt.init(random.PRNGKey(0), **POISSON)
    with pytest.raises(ValueError, match=r"batch 0 .*support.*first bad row: 1") as info:
        filt.run(random.PRNGKey(0), iter([bad, counts[:4]]), progress_bar=False, **POISSON)
    for got, want in zip(info.value.partial_state, empty, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    with pytest.raises(ValueError, match=r"test_obs .*first bad row: 1"):
        filt.log_predictive(empty, bad, rng_key=random.PRNGKey(0))

    bern = RIBPFilter(logit_bernoulli, dtype=jnp.float32)
    bern.init(random.PRNGKey(0), num_obs=1, dim=3)
    assert bern.kind == "generic"
    pixels = np.array([[0, 1, 1], [1, 0, 0], [0, 1, 0.5]])
    with pytest.raises(ValueError, match=r"data .*'obs'.*first bad row: 2"):
        bern.check_batch(pixels, name="data")
    np.testing.assert_array_equal(bern.check_batch(pixels[:2], name="data"), pixels[:2])


# ---------------------------------------------------------------------------- 3. float32 constants
@pytest.mark.parametrize(
    "model, kwargs, match",
    [
        (linear_gaussian, dict(sigma_o=1e-30), "noise precision"),
        (linear_gaussian, dict(sigma_a=1e20), "prior variance of the feature site 'A'"),
        (factor_analysis, dict(sigma_w=1e20), "prior variance of the weight site"),
        (linear_gaussian, dict(mass=1e39), "alpha of the RecursiveIBP site"),
    ],
)
def test_constants_that_overflow_float32_are_rejected(model, kwargs, match):
    kwargs = dict(num_obs=1, dim=3, max_features=4, **kwargs)
    filt = RIBPFilter(model, max_features=4, dtype=jnp.float32)
    with pytest.raises(ValueError, match=rf"{match}.*float32"):
        filt.init(random.PRNGKey(0), **kwargs)
    RIBPFilter(model, max_features=4, dtype=jnp.float64).init(random.PRNGKey(0), **kwargs)


def test_data_that_overflow_float32_are_rejected():
    filt = RIBPFilter(linear_gaussian, max_features=4, dtype=jnp.float32)
    filt.init(random.PRNGKey(0), num_obs=1, dim=3)
    data = np.ones((5, 3))
    data[2, 1] = 1e300
    with pytest.raises(ValueError, match=r"data contains values too large for float32.*row: 2"):
        filt.check_batch(data, name="data")


# ---------------------------------------------------------------------------- 4. factorisation
def test_likelihood_that_couples_the_output_dimensions_is_rejected():
    cov = 0.5 * np.eye(3) + 0.5  # fully correlated

    def correlated(obs=None, *, num_obs=1, dim=3, max_features=4):
        z = numpyro.sample("Z", RecursiveIBP(1.0, 1.0, num_rows=num_obs, max_features=max_features))
        a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([max_features, dim]).to_event(2))
        numpyro.sample("obs", dist.MultivariateNormal(z @ a, cov).to_event(1), obs=obs)

    match = r"RIBPFilter: the observed site 'obs' must factorise .*MultivariateNormal.*event shape"
    with pytest.raises(ValueError, match=match + r".*the model has: Z: RecursiveIBP"):
        RIBPFilter(correlated).init(random.PRNGKey(0))
    with pytest.raises(ValueError, match="'obs' must factorise"):
        read_feature_model(correlated, engine="RIBPFilter")
    # a univariate likelihood made into an event over D is fine
    assert read_feature_model(log_rate_poisson, model_kwargs=POISSON).likelihood == "generic"


# ---------------------------------------------------------------------------- 5. arguments
@pytest.mark.parametrize(
    "option, value, error",
    [
        ("retire_threshold", "a", TypeError),
        ("truncation_tol", np.nan, ValueError),
        ("dtype", jnp.int32, TypeError),
        ("newton_steps", True, TypeError),
        ("num_steps", 2.0, TypeError),
        ("max_features", 0, ValueError),
    ],
)
def test_constructor_arguments_are_checked_by_name(option, value, error):
    with pytest.raises(error, match=rf"^{option} must"):
        RIBPFilter(linear_gaussian, **{option: value})


def test_constructor_takes_numpy_integers():
    filt = RIBPFilter(linear_gaussian, num_steps=np.int64(3), max_features=np.int32(4))
    assert filt.num_steps == 3 and type(filt.num_steps) is int
    with pytest.raises(TypeError, match=r"^model must be a NumPyro model function"):
        RIBPFilter("linear_gaussian")


@pytest.mark.parametrize("value", [np.nan, 0, 2.5, True])
def test_read_out_sizes_are_checked_by_name(poisson_run, counts, value):
    res, filt = poisson_run, poisson_run.engine
    key = random.PRNGKey(0)
    for name in ("num_samples", "batch_size"):
        with pytest.raises((TypeError, ValueError), match=f"^{name} must be a positive integer"):
            res.log_predictive(counts[:2], rng_key=key, **{name: value})
    with pytest.raises((TypeError, ValueError), match=r"^batch_size must be a positive integer"):
        res.feature_use(counts[:2], batch_size=value)
    with pytest.raises((TypeError, ValueError), match=r"^num_draws must be a positive integer"):
        filt.posterior_draws(key, res.state, value)


def test_log_predictive_needs_a_prng_key(poisson_run, counts):
    res = poisson_run
    with pytest.raises(TypeError, match="rng_key"):
        res.log_predictive(counts[:2])
    for key in (None, 0, np.zeros(3, np.uint32)):
        with pytest.raises(TypeError, match=r"^rng_key must be a JAX PRNG key"):
            res.log_predictive(counts[:2], rng_key=key)
        with pytest.raises(TypeError, match=r"^rng_key must be a JAX PRNG key"):
            res.engine.log_predictive(res.state, counts[:2], rng_key=key)


# ---------------------------------------------------------------------------- 6. cache key
def shifted_prior(loc, obs=None, *, num_obs=1, dim=2, max_features=4):
    z = numpyro.sample("Z", RecursiveIBP(1.0, 1.0, num_rows=num_obs, max_features=max_features))
    a = numpyro.sample("A", dist.Normal(loc.mean(), 1.0).expand([max_features, dim]).to_event(2))
    return numpyro.sample("obs", dist.Normal(z @ a, 0.5).to_event(2), obs=obs)


def test_model_cache_compares_large_argument_arrays_by_value():
    """NumPy abbreviates arrays over 1,000 elements in ``repr``: two arrays differing in one
    middle element printed alike, and the filter kept the first array's prior."""
    first = np.zeros(2001)
    second = first.copy()
    second[1000] = 2001.0  # the mean moves from 0 to 1
    assert repr(first) == repr(second)
    filt = RIBPFilter(shifted_prior, max_features=4)
    state = filt.init(random.PRNGKey(0), first)
    np.testing.assert_array_equal(np.asarray(state.mean), 0.0)
    spec = filt.spec
    filt.init(random.PRNGKey(0), first.copy())  # equal contents: the read is reused
    assert filt.spec is spec
    state = filt.init(random.PRNGKey(0), second)
    assert filt.spec is not spec
    np.testing.assert_array_equal(filt.spec.feature_loc, 1.0)
    np.testing.assert_array_equal(np.asarray(state.mean), 1.0)

    key = model_cache_key(shifted_prior, (first,), {"dim": 2})
    assert key == model_cache_key(shifted_prior, (first.copy(),), {"dim": 2})
    assert key != model_cache_key(shifted_prior, (second,), {"dim": 2})
    assert key != model_cache_key(shifted_prior, (first.astype(np.float32),), {"dim": 2})
    assert key != model_cache_key(shifted_prior, (first.reshape(3, 667),), {"dim": 2})
    assert key != model_cache_key(shifted_prior, (first,), {"dim": 3})
    assert key != model_cache_key(shifted_prior, (first,), {"dim": 2.0})
    assert key != model_cache_key(linear_gaussian, (first,), {"dim": 2})
    assert key == model_cache_key(shifted_prior, (jnp.asarray(first),), {"dim": 2})


def test_options_closed_over_by_compiled_code_cannot_change():
    filt = RIBPFilter(linear_gaussian, num_steps=2)
    for option, value in (("num_steps", 5), ("ossify", False), ("dtype", np.float32)):
        with pytest.raises(AttributeError, match=rf"RIBPFilter\.{option} is fixed"):
            setattr(filt, option, value)
    assert filt.num_steps == 2 and filt.ossify
