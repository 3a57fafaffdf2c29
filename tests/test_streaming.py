"""The shared streaming core, exercised through the R-IBP filter: resume, bad input, capacity,
ArviZ export."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from jax import random

from numpyro_bnp import arviz_compat
from numpyro_bnp.infer import RIBPFilter
from numpyro_bnp.models import linear_gaussian

KWARGS = dict(num_obs=1, dim=5, alpha=3.0, sigma_a=1.0, sigma_o=0.2)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(6, 5))
    z = (rng.random((300, 6)) < 0.3).astype(float)
    return z @ feats + 0.2 * rng.normal(size=(300, 5))


@pytest.fixture(scope="module")
def filt():
    """One float32 filter shared by the tests (one compiled chunk function)."""
    return RIBPFilter(linear_gaussian, max_features=32, dtype=jnp.float32)


def _run(filt, data, **kw):
    return filt.run(random.PRNGKey(0), data, progress_bar=False, chunk_size=64, **KWARGS, **kw)


def test_save_load_resume_is_bit_for_bit(filt, data, tmp_path):
    full = _run(filt, data)
    first = _run(filt, data[:150])  # 150 is not a multiple of the chunk size
    first.save(tmp_path / "state.npz")
    resumed = _run(filt, data[150:], init_state=filt.load(tmp_path / "state.npz"))
    assert resumed.state.mean.dtype == jnp.float32
    for a, b in zip(full.state, resumed.state, strict=True):
        assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b))
    for key, trace in full.traces.items():
        joined = np.concatenate([first.traces[key], resumed.traces[key]])
        np.testing.assert_array_equal(trace, joined)
    np.testing.assert_array_equal(resumed.time, np.arange(151, 301))


def test_iterator_of_batches_equals_one_array(filt, data):
    whole = _run(filt, data)
    pieces = _run(filt, (data[i : i + 37] for i in range(0, len(data), 37)))
    for a, b in zip(whole.state, pieces.state, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (np.zeros((4, 6)), ValueError, r"batch 1 must have shape \(n, 5\)"),
        (np.full((4, 5), np.nan), ValueError, "batch 1 contains NaN"),
        (np.array([["a"] * 5] * 4), TypeError, "batch 1 must hold real numbers"),
        (np.ones((4, 5), complex), TypeError, "batch 1 must hold real numbers"),
    ],
)
def test_bad_batch_is_rejected_and_leaves_the_state_unchanged(filt, data, bad, error, match):
    good = _run(filt, data[:100])
    start = filt.init(random.PRNGKey(0), **KWARGS)
    before = [np.asarray(x).copy() for x in start]
    with pytest.raises(error, match=match) as info:
        filt.run(
            random.PRNGKey(0),
            iter([data[:100], bad, data[100:]]),
            progress_bar=False,
            chunk_size=64,
            init_state=start,
            **KWARGS,
        )
    # the stream stopped exactly after the last good batch ...
    for a, b in zip(info.value.partial_state, good.state, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(info.value.partial_traces["elbo"], good.traces["elbo"])
    # ... and the state passed in was not touched
    for a, b in zip(start, before, strict=True):
        assert np.array_equal(np.asarray(a), b)
    with pytest.raises(error, match=match.replace("batch 1", "data")):
        filt.run(random.PRNGKey(0), bad, progress_bar=False, **KWARGS)


def test_capacity_grows_geometrically_like_a_fixed_large_capacity(data):
    big = {**KWARGS, "alpha": 12.0, "sigma_o": 1e6}  # prior-dominated: ρ_64 = 12 H_64 ≈ 57
    grown = RIBPFilter(linear_gaussian, dtype=jnp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no truncation warning when the capacity may grow
        res = grown.run(random.PRNGKey(0), data[:64], progress_bar=False, chunk_size=64, **big)
    initial = grown.init(random.PRNGKey(0), **big).mean.shape[0]
    assert res.state.mean.shape[0] in (2 * initial, 4 * initial, 8 * initial)
    assert res.state.truncation <= grown.truncation_tol
    # the same stream with the final capacity fixed from the start: the same filter up to the
    # float32 rounding of the extra, empty slots
    fixed = RIBPFilter(linear_gaussian, max_features=res.state.mean.shape[0], dtype=jnp.float32)
    ref = fixed.run(random.PRNGKey(0), data[:64], progress_bar=False, chunk_size=64, **big)
    np.testing.assert_allclose(res.traces["num_features"], ref.traces["num_features"], rtol=1e-5)


def test_to_arviz_summary_matches_the_variational_posterior(filt, data):
    res = _run(filt, data)
    num_draws = 2000
    idata = res.to_arviz(random.PRNGKey(1), num_draws=num_draws)
    stats = arviz_compat.group(idata, "sample_stats")
    assert stats["num_features"].dims[-1] == "time"
    np.testing.assert_array_equal(stats["time"], np.arange(1, 301))
    np.testing.assert_allclose(stats["num_features"].values.ravel(), res.traces["num_features"])
    summary = arviz_compat.arviz().summary(idata, var_names=["A"], kind="stats")
    means = res.features["mean"].ravel()
    sd = np.sqrt(res.features["var"]).ravel()
    column = "mean" if "mean" in summary.columns else summary.columns[0]
    got = summary[column].to_numpy(dtype=float)
    assert got.shape == means.shape
    # summary rounds to 2-3 decimals; 5 Monte-Carlo standard errors plus that rounding
    assert np.all(np.abs(got - means) < 5 * sd / np.sqrt(num_draws) + 5e-3)
