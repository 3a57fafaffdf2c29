"""The shared streaming core, exercised through the R-IBP filter and a minimal engine of the
protocol: resume, bad input, errors of the source and of the engine, non-finite states, trace
thinning, checkpoints, capacity, ArviZ export."""

import warnings
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest
from jax import random

import numpyro_bnp
from numpyro_bnp import arviz_compat
from numpyro_bnp.infer import BadBatchError, NonFiniteStateError, RIBPFilter, streaming
from numpyro_bnp.models import factor_analysis, linear_gaussian
from numpyro_bnp.plots import plot_learning_curve

KWARGS = dict(num_obs=1, dim=5, mass=3.0, sigma_a=1.0, sigma_o=0.2)


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


def test_learning_curve_scores_the_states_of_one_stream(filt, data):
    """Each point is the score of the state after that many rows, the end one run's state, and
    on data with six features the held-out fit improves from 10 to 250 rows."""
    train, test = data[:250], data[250:]

    def score(result):  # the expected log-likelihood under the rows' fitted features (exact)
        b = np.asarray(result.feature_use(test))
        resid = test - b @ np.asarray(result.state.mean)
        return -0.5 * np.sum(resid**2, axis=1) / KWARGS["sigma_o"] ** 2

    curve = streaming.learning_curve(
        filt,
        random.PRNGKey(0),
        train,
        score,
        eval_at=[10, 60, 250],
        progress_bar=False,
        chunk_size=64,
        **KWARGS,
    )
    full = _run(filt, train)
    for a, b in zip(full.state, curve.result.state, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    part = score(_run(filt, train[:60]))
    np.testing.assert_allclose(curve.mean[1], part.mean(), rtol=1e-6)
    np.testing.assert_allclose(curve.se[1], part.std(ddof=1) / np.sqrt(len(part)), rtol=1e-6)
    np.testing.assert_array_equal(curve.time, [10, 60, 250])
    np.testing.assert_array_equal(curve.result.time, np.arange(1, 251))  # the whole stream's
    for key, trace in full.traces.items():
        np.testing.assert_array_equal(curve.result.traces[key], trace)
    assert curve.mean[-1] - curve.mean[0] > 3 * np.hypot(curve.se[-1], curve.se[0])
    fig = plot_learning_curve(curve, references={"noise only": -2.5})
    (ax,) = fig.axes
    assert len(ax.get_legend().get_texts()) == 2
    for bad in ([60, 10], [0, 10], [10, 251], [], [1.5]):
        with pytest.raises(ValueError, match="eval_at must be increasing"):
            streaming.learning_curve(filt, random.PRNGKey(0), train, score, eval_at=bad)


def test_iterator_of_batches_equals_one_array(filt, data):
    whole = _run(filt, data)
    pieces = _run(filt, (data[i : i + 37] for i in range(0, len(data), 37)))
    for a, b in zip(whole.state, pieces.state, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (np.zeros((4, 6)), BadBatchError, r"batch 1 must have shape \(n, 5\)"),
        (np.full((4, 5), np.nan), BadBatchError, "batch 1 contains NaN"),
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
    big = {**KWARGS, "mass": 12.0, "sigma_o": 1e6}  # prior-dominated: ρ_64 = 12 H_64 ≈ 57
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
    idata = res.to_arviz(random.PRNGKey(1), num_draws=num_draws // 4)  # 4 chains
    stream = arviz_compat.group(idata, "stream")
    assert stream["num_features"].dims == ("time",)
    np.testing.assert_array_equal(stream["time"], np.arange(1, 301))
    np.testing.assert_allclose(stream["num_features"].values, res.traces["num_features"])
    summary = arviz_compat.arviz().summary(idata, var_names=["A"], kind="stats")
    means = res.features["mean"].ravel()
    sd = np.sqrt(res.features["var"]).ravel()
    column = "mean" if "mean" in summary.columns else summary.columns[0]
    got = summary[column].to_numpy(dtype=float)
    assert got.shape == means.shape
    # summary rounds to 2-3 decimals; 5 Monte-Carlo standard errors plus that rounding
    assert np.all(np.abs(got - means) < 5 * sd / np.sqrt(num_draws) + 5e-3)


# ---------------------------------------------------------------- a tiny engine of the protocol
class SumState(NamedTuple):
    total: jnp.ndarray
    num_seen: jnp.ndarray


class SumInfo(NamedTuple):
    total: jnp.ndarray


class ReciprocalSum:
    """A minimal streaming engine: the running sum of ``1 / obs`` (infinite after a zero)."""

    dim, dtype, kind, state_type = 2, np.dtype(np.float64), "reciprocal", SumState
    progress_key, progress_label, capacity_option = "total", "sum", "max_terms"

    def __init__(self):
        self.scan_chunk = streaming.chunk_scanner(self.update)
        self.calls = 0

    def init(self):
        return SumState(jnp.zeros(self.dim, self.dtype), jnp.zeros((), jnp.int32))

    def update(self, state, obs):
        self.calls += 1  # counts the traces of update (jit traces it once per chunk shape)
        total = state.total + 1.0 / obs
        return SumState(total, state.num_seen + 1), SumInfo(jnp.sum(total))

    def check_batch(self, batch, name="batch"):
        return streaming.check_batch(batch, dim=self.dim, dtype=self.dtype, name=name)

    def check_state(self, state, name="state"):
        if not isinstance(state, SumState):
            raise TypeError(f"{name} must be a SumState")

    def capacity(self, state):
        return 1

    def empty(self, capacity):
        return self.init()

    def grow(self, state, capacity):
        raise AssertionError("ReciprocalSum never grows")

    def truncated(self, state):
        return False

    def num_seen(self, state):
        return int(state.num_seen)


def _stream(engine, data, **kw):
    return streaming.run(engine, engine.init(), data, chunk_size=32, progress_bar=False, **kw)


def test_nonfinite_state_stops_the_stream_with_the_last_good_state():
    engine = ReciprocalSum()
    data = np.random.default_rng(1).uniform(1.0, 2.0, size=(100, 2))
    data[70, 1] = 0.0  # 1 / 0: the sum becomes infinite in the third chunk (rows 64-95)
    good = _stream(engine, data[:64])
    good_state, good_traces = good[0], good[1]
    with pytest.raises(NonFiniteStateError, match=r"\['total'\].*observations 65-96") as info:
        _stream(engine, iter([data[:50], data[50:]]))
    err = info.value
    assert isinstance(err, FloatingPointError)
    assert err.fields == ["total"] and err.rows == (64, 95)
    assert "float64" in str(err) and "Rescale the data" in str(err)
    for a, b in zip(err.partial_state, good_state, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(err.partial_traces["total"], good_traces["total"])
    np.testing.assert_array_equal(err.partial_time, np.arange(1, 65))


def test_error_inside_the_update_propagates_as_itself(data):
    class Broken(ReciprocalSum):
        def update(self, state, obs):
            self.calls += 1
            self.raised = ValueError("an engine bug: update cannot trace")
            raise self.raised

    engine = Broken()
    with pytest.raises(ValueError, match="engine bug") as info:
        _stream(engine, iter([np.ones((40, 2)), np.ones((40, 2))]))
    assert info.value is engine.raised  # the original error, not a re-run of the pending rows
    assert engine.calls == 1
    assert not hasattr(info.value, "partial_state")  # not treated as a bad batch


def test_data_source_failure_keeps_every_absorbed_row(filt, data):
    def source():
        yield data[:100]
        yield data[100:200]
        raise RuntimeError("sensor offline")

    good = _run(filt, data[:200])
    with pytest.raises(RuntimeError, match="sensor offline") as info:
        _run(filt, source())
    err = info.value
    assert int(err.partial_state.num_seen) == 200  # 200 = 3 chunks of 64 + 8 pending rows
    for a, b in zip(err.partial_state, good.state, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(err.partial_traces["elbo"], good.traces["elbo"])
    np.testing.assert_array_equal(err.partial_time, np.arange(1, 201))


def test_trace_every_keeps_the_unthinned_rows_at_those_times(filt, data):
    full = _run(filt, data)
    thin = _run(filt, data, trace_every=7)
    expected = np.append(np.arange(7, 301, 7), 300)  # every 7th observation and the last
    np.testing.assert_array_equal(thin.time, expected)
    for key, trace in full.traces.items():
        np.testing.assert_array_equal(thin.traces[key], trace[expected - 1])
    for a, b in zip(full.state, thin.state, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    # a resumed stream counts from the state's num_seen: the kept times stay on the same grid
    first = _run(filt, data[:150], trace_every=7)
    resumed = _run(filt, data[150:], trace_every=7, init_state=first.state)
    np.testing.assert_array_equal(resumed.time, np.append(np.arange(154, 301, 7), 300))
    for key, trace in full.traces.items():
        np.testing.assert_array_equal(resumed.traces[key], trace[resumed.time - 1])
    with pytest.raises(ValueError, match="trace_every must be a positive integer"):
        _run(filt, data, trace_every=0)


def test_trace_every_over_many_chunks_matches_the_full_traces():
    """Beyond the merging of the kept rows into blocks (every 64 chunks)."""
    engine = ReciprocalSum()
    data = np.random.default_rng(2).uniform(1.0, 2.0, size=(5003, 2))
    state, traces, time = _stream(engine, data)  # 157 chunks of 32
    np.testing.assert_array_equal(time, np.arange(1, 5004))
    thin_state, thin, thin_time = _stream(engine, data, trace_every=10)
    np.testing.assert_array_equal(thin_time, np.append(np.arange(10, 5001, 10), 5003))
    np.testing.assert_array_equal(thin["total"], traces["total"][thin_time - 1])
    np.testing.assert_array_equal(thin_state.total, state.total)


def test_loop_speaks_in_the_engines_words(capsys):
    class Full(ReciprocalSum):
        def truncated(self, state):
            return True

    data = np.ones((40, 2))
    with pytest.warns(RuntimeWarning, match=r"capacity 1 \(max_terms\).*max_terms=None") as rec:
        _stream(Full(), data, growable=False)
    assert "feature" not in str(rec[0].message)
    capsys.readouterr()
    streaming.run(ReciprocalSum(), ReciprocalSum().init(), data, chunk_size=32)
    bar = capsys.readouterr().err
    assert "sum=" in bar and "feature" not in bar


def test_to_arviz_requires_a_key(filt, data):
    res = _run(filt, data[:64])
    with pytest.raises(TypeError, match="rng_key"):
        res.to_arviz()
    with pytest.raises(TypeError, match="rng_key"):
        res.to_arviz(None)


# ---------------------------------------------------------------- checkpoints and init_state
def _corrupt(state, **fields):
    return state._replace(**{k: jnp.asarray(v) for k, v in fields.items()})


@pytest.fixture(scope="module")
def absorbed(filt, data):
    return _run(filt, data[:100]).state


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda s: {"mean": s.mean.at[0, 0].set(np.nan)}, r"init_state.mean holds NaN"),
        (lambda s: {"var": s.var.at[1, 2].set(np.inf)}, r"init_state.var holds NaN or inf"),
        (lambda s: {"existence": s.existence.at[0].set(5.0)}, r"existence must be in \[0, 1\]"),
        (lambda s: {"num_seen": np.int32(-5)}, r"init_state.num_seen must be >= 0, got -5"),
        (lambda s: {"var": s.var.at[0, 0].set(-1.0)}, r"init_state.var must be > 0, got -1"),
        (lambda s: {"running_sum": -s.running_sum - 1}, r"init_state.running_sum must be >= 0"),
        (lambda s: {"truncation": np.float32(2.0)}, r"truncation must be in \[0, 1\]"),
        (lambda s: {"mean": s.mean.astype(np.float64)}, r"mean must have dtype float32"),
        (lambda s: {"num_seen": np.float32(3)}, r"num_seen must have dtype int32"),
        (lambda s: {"mean": np.zeros((100, 5), np.float32)}, r"init_state.var must have shape"),
        (lambda s: {"existence": s.existence[:4]}, r"existence must have shape \(32,\)"),
        (lambda s: {"mean": s.mean[:, :4], "var": s.var[:, :4]}, r"shape \(K, 5\)"),
    ],
)
def test_bad_init_state_is_rejected_naming_the_field(filt, data, absorbed, change, match):
    bad = _corrupt(absorbed, **change(absorbed))
    with pytest.raises(ValueError, match=match):
        _run(filt, data[100:], init_state=bad)


def test_init_state_of_another_capacity_or_type_is_rejected(data, absorbed):
    small = RIBPFilter(linear_gaussian, max_features=8, dtype=jnp.float32)
    with pytest.raises(ValueError, match=r"32 slots but the filter fixes max_features=8"):
        small.run(random.PRNGKey(0), data, init_state=absorbed, progress_bar=False, **KWARGS)
    with pytest.raises(TypeError, match="init_state must be an RIBPState"):
        small.run(random.PRNGKey(0), data, init_state=tuple(absorbed), progress_bar=False, **KWARGS)


def test_checkpoint_records_the_engine_and_file_names_agree(filt, data, tmp_path):
    res = _run(filt, data[:100])
    res.save(tmp_path / "ckpt")  # no suffix: save writes exactly this path ...
    assert (tmp_path / "ckpt").is_file() and not (tmp_path / "ckpt.npz").exists()
    with np.load(tmp_path / "ckpt", allow_pickle=False) as saved:
        record = {k: saved[k].item() for k in saved.files if k.startswith("__")}
    assert record["__engine__"] == "RIBPFilter" and record["__kind__"] == "linear_gaussian"
    assert record["__capacity__"] == 32 and record["__dtype__"] == "float32"
    assert record["__version__"] == numpyro_bnp.__version__
    loaded = filt.load(tmp_path / "ckpt")  # ... and load reads it
    for a, b in zip(loaded, res.state, strict=True):
        assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match=r"state.existence must be in \[0, 1\]"):
        streaming.save(
            tmp_path / "bad", _corrupt(res.state, existence=res.state.existence + 2), filt
        )
    assert not (tmp_path / "bad").exists()


def test_checkpoint_is_checked_against_the_engine_that_resumes_it(filt, data, tmp_path):
    path = tmp_path / "state.npz"
    _run(filt, data[:100]).save(path)
    fa = RIBPFilter(factor_analysis, max_features=32, dtype=jnp.float32)
    with pytest.raises(ValueError, match="kind 'linear_gaussian', expected 'factor_analysis'"):
        fa.load(path, **KWARGS)
    small = RIBPFilter(linear_gaussian, max_features=8, dtype=jnp.float32)
    with pytest.raises(ValueError, match="32 slots but the filter fixes max_features=8"):
        small.load(path, **KWARGS)
    wide = RIBPFilter(linear_gaussian, max_features=32, dtype=jnp.float64)
    with pytest.raises(ValueError, match="holds a float32 state, expected float64"):
        wide.load(path, **KWARGS)
    # a field corrupted in the file
    with np.load(path, allow_pickle=False) as saved:
        contents = {k: saved[k] for k in saved.files}
    contents["existence"][0] = 5.0
    np.savez(tmp_path / "bad.npz", **contents)
    with pytest.raises(ValueError, match=r"bad.npz: state.existence must be in \[0, 1\], got 5"):
        filt.load(tmp_path / "bad.npz")


def test_a_file_that_is_not_a_checkpoint_is_rejected(filt, data, tmp_path):
    good = tmp_path / "good.npz"
    _run(filt, data[:100]).save(good)
    raw = good.read_bytes()
    files = {
        "empty.npz": b"",
        "truncated.npz": raw[: len(raw) // 2],
        "text.npz": b"time,value\n1,2\n",
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    np.save(tmp_path / "array.npy", np.zeros(3))
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    for name in [*files, "array.npy", "other.npz"]:
        with pytest.raises(ValueError, match="is not a numpyro_bnp checkpoint"):
            filt.load(tmp_path / name)
