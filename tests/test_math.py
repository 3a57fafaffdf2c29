"""Special functions of ``numpyro_bnp._math`` against SciPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.special import digamma

from numpyro_bnp._math import generalized_harmonic, poisson_cdf_diff


def poisson_event_in_interval(k, r0, r1):
    """P(Pois(r0) < k <= Pois(r1)) as a sum of positive terms (no cancellation), with SciPy.

    The k-th event of a Poisson process falls in (r0, r1] iff j < k events happened by r0 and at
    least k - j of them happen in the increment of length r1 - r0.
    """
    j = np.arange(k)
    return float(np.sum(stats.poisson.pmf(j, r0) * stats.poisson.sf(k - j - 1, r1 - r0)))


@pytest.mark.parametrize("beta", [0.3, 1.0, 2.5, 40.0])
def test_generalized_harmonic_is_the_sum(beta):
    n = np.arange(0, 60)
    direct = np.concatenate([[0.0], np.cumsum(beta / (beta + np.arange(59)))])
    np.testing.assert_allclose(generalized_harmonic(beta, n), direct, rtol=1e-12, atol=1e-13)


def test_generalized_harmonic_at_one_is_harmonic_and_large_n_is_closed_form():
    np.testing.assert_allclose(generalized_harmonic(1.0, 10), np.sum(1.0 / np.arange(1, 11)))
    n = 1e6
    np.testing.assert_allclose(
        generalized_harmonic(2.0, n), 2.0 * (digamma(2.0 + n) - digamma(2.0))
    )


@pytest.mark.parametrize(
    ("k", "r0", "r1"),
    [
        (1, 0.0, 2.0),  # first event
        (5, 1.0, 1.3),  # lower tail, narrow interval
        (3, 40.0, 40.5),  # upper tail: both CDFs near 0, the cancellation case
        (60, 2.0, 3.0),  # deep lower tail
        (30, 29.0, 31.0),  # middle
        (200, 150.0, 150.01),  # far right, tiny increment
    ],
)
def test_poisson_cdf_diff_matches_positive_sum(k, r0, r1):
    expected = poisson_event_in_interval(k, r0, r1)
    got = float(poisson_cdf_diff(k, r0, r1))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-300)


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(1, 80),
    r0=st.floats(0.0, 120.0),
    width=st.floats(1e-3, 30.0),
)
def test_poisson_cdf_diff_property(k, r0, width):
    expected = poisson_event_in_interval(k, r0, r0 + width)
    got = float(poisson_cdf_diff(k, r0, r0 + width))
    # double precision: relative 1e-8 for representable values, absolute floor for underflow
    assert abs(got - expected) <= 1e-8 * expected + 1e-280
    assert 0.0 <= got <= 1.0


def test_poisson_cdf_diff_edge_cases_and_broadcasting():
    assert float(poisson_cdf_diff(0, 1.0, 2.0)) == 0.0
    assert float(poisson_cdf_diff(3, 2.0, 2.0)) == 0.0
    k = jnp.arange(1, 6)[:, None]
    out = poisson_cdf_diff(k, jnp.array([0.0, 1.0, 2.0]), jnp.array([1.0, 2.0, 4.0]))
    assert out.shape == (5, 3)
    # summing over all k gives the expected number of events in the interval: r1 - r0
    many = poisson_cdf_diff(
        jnp.arange(1, 200)[:, None], jnp.array([0.5, 7.0]), jnp.array([3.5, 9.0])
    )
    np.testing.assert_allclose(many.sum(0), [3.0, 2.0], rtol=1e-12)


def test_poisson_cdf_diff_float32_is_accurate_in_absolute_terms():
    # JAX's float32 incomplete gamma is good to about 1e-6 x rate absolute (the bound documented
    # in poisson_cdf_diff); the cancellation-free branch choice adds nothing to that.
    k, r0, r1 = np.arange(1, 120), 30.0, 33.0
    exact = np.array([poisson_event_in_interval(int(i), r0, r1) for i in k])
    with jax.enable_x64(False):
        got = poisson_cdf_diff(jnp.asarray(k, jnp.int32), jnp.float32(r0), jnp.float32(r1))
        assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got, np.float64), exact, atol=1e-6 * r1)
