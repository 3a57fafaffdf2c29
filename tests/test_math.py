"""Special functions of ``numpyro_bnp._math`` against SciPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.special import digamma

from numpyro_bnp._math import generalized_harmonic, poisson_interval_probs


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


def reference_interval_probs(r0, r1, num_events):
    return np.array([poisson_event_in_interval(k, r0, r1) for k in range(1, num_events + 1)])


@pytest.mark.parametrize(
    ("r0", "r1", "num_events"),
    [
        (0.0, 2.0, 30),  # first customer: P(Poisson(2) >= k)
        (1.0, 1.3, 40),  # narrow interval at small rates
        (40.0, 40.5, 30),  # all k below the rates: the lower-CDF branch
        (2.0, 3.0, 80),  # deep upper tails
        (29.0, 31.0, 90),  # both branches
        (150.0, 150.01, 260),  # large rates, tiny increment
    ],
)
def test_poisson_interval_probs_match_positive_sum(r0, r1, num_events):
    expected = reference_interval_probs(r0, r1, num_events)
    got = np.asarray(poisson_interval_probs(r0, r1, num_events))
    assert got.shape == (num_events,)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-300)


@settings(max_examples=40, deadline=None)
@given(r0=st.floats(0.0, 120.0), width=st.floats(1e-3, 30.0))
def test_poisson_interval_probs_property(r0, width):
    expected = reference_interval_probs(r0, r0 + width, 60)
    got = np.asarray(poisson_interval_probs(r0, r0 + width, 60))
    # double precision: relative 1e-8 for representable values, absolute floor for underflow
    assert np.all(np.abs(got - expected) <= 1e-8 * expected + 1e-280)
    assert np.all((got >= 0.0) & (got <= 1.0))


def test_poisson_interval_probs_edge_cases_and_broadcasting():
    np.testing.assert_array_equal(poisson_interval_probs(2.0, 2.0, 5), np.zeros(5))
    out = poisson_interval_probs(jnp.array([0.0, 1.0, 2.0]), jnp.array([[1.0], [4.0]]), 5)
    assert out.shape == (2, 3, 5)
    # summed over all k: the expected number of events in the interval, r1 - r0
    many = poisson_interval_probs(jnp.array([0.5, 7.0]), jnp.array([3.5, 9.0]), 200)
    np.testing.assert_allclose(many.sum(-1), [3.0, 2.0], rtol=1e-12)


def test_poisson_interval_probs_float32_meets_the_documented_bound():
    r0, r1 = 30.0, 33.0
    exact = reference_interval_probs(r0, r1, 120)
    with jax.enable_x64(False):
        got = poisson_interval_probs(jnp.float32(r0), jnp.float32(r1), 120)
        assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got, np.float64), exact, atol=1e-6 * r1)


def test_poisson_interval_probs_keep_relative_accuracy_for_tiny_increments_in_float32():
    # Late in a stream the increment αβ/(β+n-1) is tiny; a difference of two CDFs would keep only
    # eps / increment of it. The increment is exactly representable so that float32 rounding of
    # the rates does not blur the comparison. Values below 1e-12 are not compared: there the
    # one incomplete-gamma difference for the mass beyond num_events dominates in float32.
    lo, width = 100.0, 2.0**-13
    exact = reference_interval_probs(lo, lo + width, 200)
    with jax.enable_x64(False):
        got = poisson_interval_probs(jnp.float32(lo), jnp.float32(lo) + jnp.float32(width), 200)
    relevant = exact > 1e-12
    assert relevant.sum() > 100
    np.testing.assert_allclose(np.asarray(got, np.float64)[relevant], exact[relevant], rtol=2e-4)


def test_normal_and_bernoulli_kl_match_numpyro():
    import numpyro.distributions as dist
    from numpyro.distributions.kl import kl_divergence

    from numpyro_bnp._math import bernoulli_kl, logit, normal_kl

    rng = np.random.default_rng(3)
    mq, mp = rng.normal(size=5), rng.normal(size=5)
    vq, vp = rng.gamma(2.0, size=5), rng.gamma(2.0, size=5)
    expected = kl_divergence(dist.Normal(mq, np.sqrt(vq)), dist.Normal(mp, np.sqrt(vp)))
    np.testing.assert_allclose(normal_kl(mq, vq, mp, vp), expected, rtol=1e-12)
    b, q = np.array([0.0, 0.3, 1.0, 0.9]), np.array([0.2, 0.5, 0.7, 0.9])
    direct = [
        sum(p * np.log(p / r) for p, r in ((bi, qi), (1 - bi, 1 - qi)) if p > 0)
        for bi, qi in zip(b, q, strict=True)
    ]
    np.testing.assert_allclose(bernoulli_kl(b, q), direct, rtol=1e-12, atol=1e-15)
    p = np.array([1e-12, 0.25, 0.5, 1 - 1e-12])
    np.testing.assert_allclose(logit(p), np.log(p) - np.log1p(-p), rtol=1e-12)
