"""Generated bad input at every public entry point: a ``TypeError``/``ValueError`` that names the
argument, and a streaming state that is exactly what it was before the bad input.

Hypothesis draws the bad values (sizes that are not positive integers, options outside their
range, batches with NaN/inf/overflowing/complex/misshapen values, counts outside a likelihood's
support). The engines are built once per module; every rejection happens on the host before any
compiled code runs, so the examples are cheap.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import random

from numpyro_bnp.distributions import (
    NGGP,
    BetaProcess,
    GammaProcess,
    RecursiveIBP,
    RestrictedBernoulliProcess,
    RestrictedIBP,
    exactly,
    ibp_capacity,
)
from numpyro_bnp.infer import (
    ADFNRM,
    EPNRM,
    AcceleratedIBPGibbs,
    CRMSlice,
    RestrictedIBPGibbs,
    RIBPFilter,
)
from numpyro_bnp.models import linear_gaussian, nggp_multinomial_mixture

FUZZ = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# anything that is not a positive integer (floats are refused even when whole: 3.0 is not a size)
not_a_size = st.one_of(
    st.integers(max_value=0),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
    st.complex_numbers(),
    st.lists(st.integers(1, 5), min_size=1, max_size=2),
)
# anything that is not a number in the open interval (0, 1)
not_a_probability = st.one_of(
    st.floats().filter(lambda x: not 0.0 < x < 1.0),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
)


def raises_naming(name, fn, *args, **kwargs):
    with pytest.raises((TypeError, ValueError)) as info:
        fn(*args, **kwargs)
    assert name in str(info.value), f"the error does not name {name!r}: {info.value}"


# ---------------------------------------------------------------------------- distributions
@FUZZ
@given(bad=not_a_size)
def test_distribution_sizes(bad):
    raises_naming("num_rows", RecursiveIBP, 1.0, 1.0, num_rows=bad, max_features=8)
    raises_naming("max_features", RecursiveIBP, 1.0, 1.0, num_rows=4, max_features=bad)
    raises_naming("num_rows", ibp_capacity, 1.0, num_rows=bad)
    raises_naming("num_points", NGGP, 1.0, 0.5, 1.0, num_points=bad)
    raises_naming("truncation", BetaProcess(1.0, 1.0).series, random.PRNGKey(0), bad)
    raises_naming("num_rows", RestrictedIBP, 1.0, exactly(1), num_rows=bad, max_features=4)


@FUZZ
@given(bad=st.sampled_from([np.nan, np.inf, -np.inf, -1.0, 0.0]))
def test_distribution_parameters(bad):
    raises_naming("alpha", RecursiveIBP, bad, 1.0, num_rows=4, max_features=8, validate_args=True)
    raises_naming("beta", RecursiveIBP, 1.0, bad, num_rows=4, max_features=8, validate_args=True)
    raises_naming("mass", GammaProcess, bad, 1.0, validate_args=True)


# ---------------------------------------------------------------------------- streaming engine
DIM = 3
MODEL = dict(num_obs=1, dim=DIM, mass=1.0, sigma_o=0.3)


@pytest.fixture(scope="module")
def filt():
    return RIBPFilter(linear_gaussian, max_features=16, dtype=jnp.float32)  # 1e300 overflows


@pytest.fixture(scope="module")
def good():
    rng = np.random.default_rng(0)
    return (rng.random((40, 2)) < 0.5) @ rng.normal(size=(2, DIM)) + 0.3 * rng.normal(
        size=(40, DIM)
    )


@pytest.fixture(scope="module")
def absorbed(filt, good):
    return filt.run(random.PRNGKey(0), good, progress_bar=False, chunk_size=32, **MODEL).state


@st.composite
def bad_batches(draw):
    """A batch the filter must refuse: a bad value somewhere, or the wrong shape or kind."""
    kind = draw(st.sampled_from(["value", "shape", "kind"]))
    rows = draw(st.integers(1, 5))
    if kind == "value":
        batch = np.zeros((rows, DIM))
        row, col = draw(st.integers(0, rows - 1)), draw(st.integers(0, DIM - 1))
        batch[row, col] = draw(st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e39]))
        return batch
    if kind == "shape":
        shape = draw(
            st.sampled_from(
                [(rows, DIM + 1), (rows, DIM - 1), (0, DIM), (rows, DIM, 1), (DIM + 2,)]
            )
        )
        return np.zeros(shape)
    return draw(
        st.sampled_from(
            [np.zeros((rows, DIM), complex), np.full((rows, DIM), "a"), [[1.0, "x", 2.0]], None]
        )
    )


def same_state(a, b):
    return all(
        np.array_equal(x, y, equal_nan=True)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


@FUZZ
@given(bad=bad_batches())
def test_a_bad_batch_names_itself_and_leaves_the_state_as_it_was(filt, good, absorbed, bad):
    before = jax.tree.map(np.array, absorbed)
    with pytest.raises((TypeError, ValueError)) as info:
        filt.run(
            random.PRNGKey(0),
            [good[:8], bad],
            init_state=absorbed,
            progress_bar=False,
            chunk_size=32,
            **MODEL,
        )
    assert "batch 1" in str(info.value), info.value
    # the good batch before it is absorbed, the bad one not at all, the state passed in untouched
    expected = filt.run(
        random.PRNGKey(0), good[:8], init_state=absorbed, progress_bar=False, chunk_size=32, **MODEL
    ).state
    assert same_state(info.value.partial_state, expected)
    assert same_state(absorbed, before)


@FUZZ
@given(
    option=st.sampled_from(["num_steps", "max_features", "newton_steps"]),
    bad=not_a_size.filter(lambda v: v is not None),
)
def test_filter_size_options(option, bad):
    raises_naming(option, RIBPFilter, linear_gaussian, **{option: bad})


@FUZZ
@given(option=st.sampled_from(["retire_threshold", "truncation_tol"]), bad=not_a_probability)
def test_filter_probability_options(option, bad):
    raises_naming(option, RIBPFilter, linear_gaussian, **{option: bad})


@FUZZ
@given(
    name=st.sampled_from(["num_samples", "batch_size"]),
    bad=not_a_size.filter(lambda v: v is not None),
)
def test_read_out_sizes(filt, good, absorbed, name, bad):
    raises_naming(
        name, filt.log_predictive, absorbed, good[:4], rng_key=random.PRNGKey(1), **{name: bad}
    )


def counts_model(obs=None, *, num_obs, dim, max_features=4):
    z = numpyro.sample("Z", RecursiveIBP(1.0, 1.0, num_rows=num_obs, max_features=max_features))
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([max_features, dim]).to_event(2))
    return numpyro.sample("obs", dist.Poisson(jnp.exp(z @ a)).to_event(2), obs=obs)


@pytest.fixture(scope="module")
def counts_filter():
    filt = RIBPFilter(counts_model, max_features=4)
    filt.init(random.PRNGKey(0), num_obs=1, dim=DIM)
    return filt


@FUZZ
@given(
    row=st.integers(0, 3),
    col=st.integers(0, DIM - 1),
    value=st.one_of(
        st.integers(max_value=-1).map(float),
        st.floats(0.0, 1e6).filter(lambda x: x != int(x)),
    ),
)
def test_counts_outside_the_poisson_support(counts_filter, row, col, value):
    batch = np.ones((4, DIM))
    batch[row, col] = value
    raises_naming("batch", counts_filter.check_batch, batch)


# ---------------------------------------------------------------------------- MCMC kernels
N_ROWS = 6


def ibp_model(obs=None):
    z = numpyro.sample("Z", RecursiveIBP(1.0, 1.0, num_rows=N_ROWS, max_features=6))
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([6, 2]).to_event(2))
    return numpyro.sample("obs", dist.Normal(z @ a, 0.5).to_event(2), obs=obs)


def restricted_model(obs=None):
    pi = numpyro.sample("pi", dist.Beta(0.3, 0.7).expand([6]).to_event(1))
    z = numpyro.sample("Z", RestrictedBernoulliProcess(pi, exactly(1)).expand([N_ROWS]).to_event(1))
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([6, 2]).to_event(2))
    return numpyro.sample("obs", dist.Normal(z @ a, 0.5).to_event(2), obs=obs)


KERNELS = {
    "CRMSlice": (CRMSlice, ibp_model),
    "RestrictedIBPGibbs": (RestrictedIBPGibbs, restricted_model),
    "AcceleratedIBPGibbs": (AcceleratedIBPGibbs, ibp_model),
}


@st.composite
def bad_observations(draw):
    """``(N, 2)`` data with a NaN or infinity somewhere, or complex, or text."""
    kind = draw(st.sampled_from(["value", "complex", "text"]))
    if kind == "complex":
        return np.zeros((N_ROWS, 2)) + 1j
    if kind == "text":
        return np.full((N_ROWS, 2), "0.5")
    obs = np.zeros((N_ROWS, 2))
    obs[draw(st.integers(0, N_ROWS - 1)), draw(st.integers(0, 1))] = draw(
        st.sampled_from([np.nan, np.inf, -np.inf])
    )
    return obs


@settings(FUZZ, max_examples=10)
@given(engine=st.sampled_from(sorted(KERNELS)), obs=bad_observations())
def test_kernels_name_the_observed_site_of_bad_data(engine, obs):
    kernel_cls, model = KERNELS[engine]
    raises_naming("'obs'", kernel_cls(model).init, random.PRNGKey(0), 0, None, (), {"obs": obs})


@FUZZ
@given(
    option=st.sampled_from(["max_features", "n_gamma", "n_marks", "n_swaps", "xi_scale"]),
    bad=st.one_of(st.integers(max_value=-1), st.text(max_size=2), st.booleans(), st.just(np.nan)),
)
def test_crm_slice_options(option, bad):
    raises_naming(option, CRMSlice, ibp_model, **{option: bad})


@FUZZ
@given(bad=not_a_size)
def test_accelerated_gibbs_options(bad):
    raises_naming("refresh_every", AcceleratedIBPGibbs, ibp_model, refresh_every=bad)


# ---------------------------------------------------------------------------- NGGP mixtures
VOCAB = 6
DOCS = dict(vocab_size=VOCAB, mass=1.0, sigma=0.5, concentration=0.5)


@pytest.fixture(scope="module")
def adf():
    return ADFNRM(nggp_multinomial_mixture, dtype=jnp.float32)


@pytest.fixture(scope="module")
def good_docs():
    return np.random.default_rng(1).poisson(2.0, size=(30, VOCAB))


@pytest.fixture(scope="module")
def adf_state(adf, good_docs):
    return adf.run(None, good_docs, progress_bar=False, chunk_size=16, **DOCS).state


@st.composite
def bad_documents(draw):
    """Word counts the engine must refuse: a value that is not a whole count, a wrong shape or
    kind."""
    kind = draw(st.sampled_from(["value", "shape", "kind"]))
    rows = draw(st.integers(1, 4))
    if kind == "value":
        batch = np.ones((rows, VOCAB))
        row, col = draw(st.integers(0, rows - 1)), draw(st.integers(0, VOCAB - 1))
        batch[row, col] = draw(st.sampled_from([np.nan, np.inf, -1.0, 0.5, 1e300, 2.0**24 + 1]))
        return batch
    if kind == "shape":
        shape = draw(st.sampled_from([(rows, VOCAB + 1), (0, VOCAB), (rows, VOCAB, 1)]))
        return np.zeros(shape)
    return draw(st.sampled_from([np.ones((rows, VOCAB), complex), np.full((rows, VOCAB), "a")]))


@FUZZ
@given(bad=bad_documents())
def test_a_bad_document_batch_names_itself_and_leaves_the_state(adf, good_docs, adf_state, bad):
    before = jax.tree.map(np.array, adf_state)
    with pytest.raises((TypeError, ValueError)) as info:
        adf.run(None, [good_docs[:5], bad], init_state=adf_state, progress_bar=False)
    assert "batch 1" in str(info.value), info.value
    expected = adf.run(None, good_docs[:5], init_state=adf_state, progress_bar=False).state
    assert same_state(info.value.partial_state, expected)
    assert same_state(adf_state, before)


@FUZZ
@given(bad=not_a_size.filter(lambda v: v is not None))
def test_mixture_engine_sizes(bad):
    raises_naming("max_clusters", ADFNRM, nggp_multinomial_mixture, max_clusters=bad)
    if not (type(bad) is int and bad == 0):  # zero EP passes is the ADF result
        raises_naming("num_passes", EPNRM, nggp_multinomial_mixture, num_passes=bad)


@FUZZ
@given(bad=not_a_probability.filter(lambda v: v is not None))
def test_mixture_engine_probabilities(bad):
    raises_naming(
        "new_cluster_threshold", ADFNRM, nggp_multinomial_mixture, new_cluster_threshold=bad
    )
    if bad != 1:
        raises_naming("damping", EPNRM, nggp_multinomial_mixture, num_passes=1, damping=bad)
