"""What a NumPyro and ArviZ user expects of a streaming result: an ArviZ export its tools read,
model-shaped samples for ``Predictive``, checkpoints that rebuild the filter, pickling, and
``num_obs`` left out."""

import pickle

import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest
from jax import random
from numpyro.infer import Predictive

from numpyro_bnp import arviz_compat
from numpyro_bnp.infer import RIBPFilter, streaming
from numpyro_bnp.models import factor_analysis, linear_gaussian

matplotlib.use("Agg")

DIM, SIGMA_O, ALPHA = 5, 0.2, 1.0
KWARGS = dict(dim=DIM, mass=ALPHA, sigma_o=SIGMA_O)  # no num_obs: the filter fills it in
OPTIONS = dict(max_features=16, num_steps=4, retire_threshold=1e-2, dtype=jnp.float32)


def scaled_noise(obs=None, *, num_obs, dim, noise_fn):
    """A linear-Gaussian model with an argument a checkpoint cannot store (a function)."""
    return linear_gaussian(obs, num_obs=num_obs, dim=dim, sigma_o=noise_fn(SIGMA_O))


def identity(x):
    return x


@pytest.fixture(scope="module")
def truth():
    """400 rows of a known linear-Gaussian model: 3 features, each used by a row w.p. 0.4."""
    rng = np.random.default_rng(0)
    feats = 2.0 * rng.normal(size=(3, DIM))
    z = (rng.random((400, 3)) < 0.4).astype(float)
    return feats, z @ feats + SIGMA_O * rng.normal(size=(400, DIM))


@pytest.fixture(scope="module")
def filt():
    return RIBPFilter(linear_gaussian, **OPTIONS)


@pytest.fixture(scope="module")
def result(filt, truth):
    return _run(filt, truth[1])


def _run(filt, data, **kw):
    return filt.run(random.PRNGKey(0), data, progress_bar=False, chunk_size=64, **KWARGS, **kw)


def _same_state(a, b):
    return all(
        x.dtype == y.dtype and np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(a, b, strict=True)
    )


# ---------------------------------------------------------------- ArviZ export
def test_export_is_read_by_summary_and_plot_trace(result):
    az = arviz_compat.arviz()
    chains, draws = 4, 500
    idata = result.to_arviz(random.PRNGKey(1), num_draws=draws, num_chains=chains)
    post = arviz_compat.group(idata, "posterior")
    k, slots = result.num_active, np.flatnonzero(np.asarray(result.active))
    assert k >= 1
    assert post["A"].dims == ("chain", "draw", "feature", "dim")
    assert post["A"].shape == (chains, draws, k, DIM)
    np.testing.assert_array_equal(post["feature"], slots)
    assert post["num_features"].dims == ("chain", "draw")
    stream = arviz_compat.group(idata, "stream")
    assert "chain" not in stream.dims and "draw" not in stream.dims
    np.testing.assert_array_equal(stream["time"], result.time)

    summary = az.summary(idata, round_to="none")
    # one row per posterior scalar, none per time step
    assert len(summary) == k * DIM + 1
    assert np.isfinite(summary[["mean", "sd"]].to_numpy(dtype=float)).all()
    a_rows = [name for name in summary.index if name.startswith("A[")]
    assert np.isfinite(summary.loc[a_rows, "r_hat"].to_numpy(dtype=float)).all()
    # the means of A are the filter's feature means, within 5 Monte-Carlo standard errors
    num = chains * draws
    got = summary.loc[a_rows, "mean"].to_numpy(dtype=float)
    se = np.sqrt(result.features["var"].ravel() / num)
    assert np.all(np.abs(got - result.features["mean"].ravel()) < 5 * se)
    # num_features draws sum Bernoulli(e_k): mean ρ = Σ e_k, variance Σ e_k (1 - e_k)
    e = np.asarray(result.existence_probs, float)
    se_n = np.sqrt(np.sum(e * (1 - e)) / num)
    assert abs(summary.loc["num_features", "mean"] - e.sum()) <= 5 * se_n + 1e-4  # float32 e_k

    import matplotlib.pyplot as plt

    az.plot_trace(idata)
    plt.close("all")


def test_stream_group_follows_trace_every(filt, truth):
    thin = _run(filt, truth[1][:200], trace_every=30)
    idata = thin.to_arviz(random.PRNGKey(1), num_draws=10)
    stream = arviz_compat.group(idata, "stream")
    np.testing.assert_array_equal(stream["time"], np.append(np.arange(30, 201, 30), 200))
    for key, trace in thin.traces.items():
        assert stream[key].dims == ("time",)
        np.testing.assert_array_equal(stream[key].values, trace)


def test_export_draws_z_of_given_rows_from_their_feature_use(result, truth):
    rows = truth[1][:20]
    chains, draws = 4, 250
    idata = result.to_arviz(random.PRNGKey(2), num_draws=draws, num_chains=chains, obs=rows)
    z = arviz_compat.group(idata, "posterior")["Z"]
    assert z.dims == ("chain", "draw", "row", "feature")
    assert z.shape == (chains, draws, 20, result.num_active)
    assert set(np.unique(z.values)) <= {0.0, 1.0}
    b = np.asarray(result.feature_use(rows))[:, np.asarray(result.active)]
    se = np.sqrt(b * (1 - b) / (chains * draws))
    assert np.all(np.abs(z.values.mean(axis=(0, 1)) - b) <= 5 * se + 1e-6)
    observed = arviz_compat.group(idata, "observed_data")["obs"]
    np.testing.assert_allclose(observed.values, rows.astype(np.float32))


# ---------------------------------------------------------------- Predictive
def test_predictive_reproduces_the_datas_shape_mean_and_variance(result, truth):
    data = truth[1]
    n, num = data.shape[0], 200
    samples = result.posterior_samples(random.PRNGKey(3), num, num_obs=n)
    k = result.num_active
    assert samples["Z"].shape == (num, n, k) and samples["A"].shape == (num, k, DIM)
    pred = Predictive(linear_gaussian, posterior_samples=samples)(
        random.PRNGKey(4), num_obs=n, **KWARGS
    )["obs"]
    assert pred.shape == (num, n, DIM)
    pred = np.asarray(pred, float)
    # mean per column: the data's sample mean has standard error sqrt(var / n); the
    # predictive's Monte-Carlo error (num * n draws) is added; 5 standard errors
    se = np.sqrt(data.var(axis=0) / n + pred.var(axis=(0, 1)) / (num * n))
    assert np.all(np.abs(pred.mean(axis=(0, 1)) - data.mean(axis=0)) < 5 * se)
    # variance per column, roughly: the one-pass filter's features are approximate (a blend
    # of true ones shifts variance between columns; on this stream the per-column ratios lie
    # in 0.75-1.2), so within a factor 1.5, well outside the sampling error of a variance of
    # 400 rows (about sqrt(2 / 400) = 7 %) and far from a predictive without the features
    # (noise only: ratios 0.006-0.07)
    ratio = pred.var(axis=1).mean(axis=0) / data.var(axis=0)
    assert np.all((ratio > 1 / 1.5) & (ratio < 1.5)), ratio


def test_predictive_of_given_rows_fits_them(result, truth):
    rows = truth[1][:50]
    samples = result.posterior_samples(random.PRNGKey(5), 100, obs=rows)
    assert samples["Z"].shape == (100, 50, result.num_active)
    pred = Predictive(linear_gaussian, posterior_samples=samples)(
        random.PRNGKey(6), num_obs=50, **KWARGS
    )["obs"]
    # the predictive mean of each given row explains it far better than the column means do
    resid = np.mean((np.asarray(pred).mean(axis=0) - rows) ** 2)
    assert resid < 0.1 * np.mean((rows - rows.mean(axis=0)) ** 2)


def test_factor_analysis_samples_hold_the_weight_site(truth):
    fa = RIBPFilter(factor_analysis, max_features=16, dtype=jnp.float32)
    res = fa.run(random.PRNGKey(0), truth[1][:64], progress_bar=False, chunk_size=64, **KWARGS)
    samples = res.posterior_samples(random.PRNGKey(1), 30, num_obs=7)
    k = res.num_active
    assert {name: v.shape for name, v in samples.items()} == {
        "Z": (30, 7, k),
        "A": (30, k, DIM),
        "W": (30, 7, k),
    }
    w = np.asarray(samples["W"])  # the weights' prior, N(0, 1) in factor_analysis
    assert abs(w.mean()) < 5 / np.sqrt(w.size) and abs(w.std() - 1) < 0.2
    pred = Predictive(factor_analysis, posterior_samples=samples)(
        random.PRNGKey(2), num_obs=7, **KWARGS
    )
    assert pred["obs"].shape == (30, 7, DIM)


# ---------------------------------------------------------------- checkpoints and pickling
def test_resume_from_a_checkpoint_alone_is_bit_for_bit(filt, truth, tmp_path):
    data = truth[1]
    sigma = np.full(DIM, SIGMA_O, np.float32)  # an array model argument: stored in the npz
    kwargs = {**KWARGS, "sigma_o": sigma}
    full = filt.run(random.PRNGKey(0), data, progress_bar=False, chunk_size=64, **kwargs)
    first = filt.run(random.PRNGKey(0), data[:150], progress_bar=False, chunk_size=64, **kwargs)
    first.save(tmp_path / "ckpt.npz")
    record = streaming.read_checkpoint(tmp_path / "ckpt.npz")
    assert record["options"] == {**filt.options, "dtype": "float32"}
    assert record["options"]["num_steps"] == 4 and record["options"]["retire_threshold"] == 1e-2
    assert record["model_kwargs"]["num_obs"] == 1
    np.testing.assert_array_equal(record["model_kwargs"]["sigma_o"], sigma)

    resumed_filt, state = RIBPFilter.from_checkpoint(linear_gaussian, tmp_path / "ckpt.npz")
    assert resumed_filt.options == filt.options
    rest = resumed_filt.run(random.PRNGKey(0), data[150:], init_state=state, progress_bar=False)
    assert _same_state(rest.state, full.state)
    for key, trace in full.traces.items():
        np.testing.assert_array_equal(np.concatenate([first.traces[key], rest.traces[key]]), trace)


def test_from_checkpoint_refuses_a_model_that_does_not_match(filt, truth, tmp_path):
    path = tmp_path / "ckpt.npz"
    _run(filt, truth[1][:64]).save(path)
    with pytest.raises(ValueError, match=r"mass=5.0 differs .* \(mass=1.0\)"):
        RIBPFilter.from_checkpoint(linear_gaussian, path, mass=5.0)
    with pytest.raises(ValueError, match=r"concentration=2\.0 was not given to the model"):
        RIBPFilter.from_checkpoint(linear_gaussian, path, concentration=2.0)
    with pytest.raises(ValueError, match=r"does not match.*W: Normal"):
        RIBPFilter.from_checkpoint(factor_analysis, path)
    # the recorded value passed again (an int for the float 1.0) is the same argument
    again, state = RIBPFilter.from_checkpoint(linear_gaussian, path, mass=1, dim=DIM)
    assert int(state.num_seen) == 64 and again.spec.alpha == ALPHA


def test_an_argument_that_cannot_be_stored_must_be_passed_again(truth, tmp_path):
    filt = RIBPFilter(scaled_noise, max_features=16, dtype=jnp.float32)
    kwargs = dict(dim=DIM, noise_fn=identity)
    res = filt.run(random.PRNGKey(0), truth[1][:64], progress_bar=False, **kwargs)
    res.save(tmp_path / "ckpt.npz")
    record = streaming.read_checkpoint(tmp_path / "ckpt.npz")
    assert isinstance(record["model_kwargs"]["noise_fn"], streaming.NotStorable)
    with pytest.raises(ValueError, match=r"noise_fn.*could not be stored.*pass them again"):
        RIBPFilter.from_checkpoint(scaled_noise, tmp_path / "ckpt.npz")
    _, state = RIBPFilter.from_checkpoint(scaled_noise, tmp_path / "ckpt.npz", noise_fn=identity)
    assert _same_state(state, res.state)


def test_a_result_pickles_and_keeps_streaming(filt, truth, result):
    data = truth[1]
    first = _run(filt, data[:150])
    loaded = pickle.loads(pickle.dumps(first))
    assert _same_state(loaded.state, first.state)
    for key in ("mean", "var"):
        np.testing.assert_array_equal(loaded.features[key], first.features[key])
    assert loaded.engine is not filt and loaded.engine.options == filt.options
    rest = loaded.engine.run(
        random.PRNGKey(0), data[150:], init_state=loaded.state, progress_bar=False
    )
    assert _same_state(rest.state, result.state)


# ---------------------------------------------------------------- num_obs optional
def test_num_obs_is_filled_in_only_when_the_model_needs_it(filt, truth):
    def keyword_only(obs=None, *, num_obs, dim):
        pass

    def positional(obs, num_obs, dim):
        pass

    def with_default(obs=None, *, num_obs=10, dim=3):
        pass

    def without(obs=None, *, dim=3):
        pass

    fill = streaming.model_arguments
    assert fill(keyword_only, (), {"dim": 3}) == {"dim": 3, "num_obs": 1}
    assert fill(keyword_only, (), {"num_obs": 7}) == {"num_obs": 7}
    assert fill(positional, (None,), {}) == {"num_obs": 1}
    assert fill(positional, (None, 5), {}) == {}  # given by position
    assert fill(with_default, (), {}) == {}
    assert fill(without, (), {}) == {}
    # the filter traces the model with num_obs=1 when it is left out: the same stream
    implicit = filt.init(random.PRNGKey(0), **KWARGS)
    explicit = filt.init(random.PRNGKey(0), num_obs=1, **KWARGS)
    assert _same_state(implicit, explicit) and filt.model_kwargs["num_obs"] == 1
    a = _run(filt, truth[1][:64])
    b = _run(filt, truth[1][:64], num_obs=1)
    assert _same_state(a.state, b.state)
