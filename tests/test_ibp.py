"""RecursiveIBP against exact enumeration, an independent sequential pmf, SciPy and simulation.

Tolerances are Monte-Carlo standard errors: with C checked cells a bound of z standard errors
gives a family-wise false-alarm rate of about C * 2 * Phi(-z); the bounds below keep it under 1e-3.
"""

import itertools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro import handlers
from numpyro.infer import Predictive
from numpyro.infer.util import log_density
from scipy import stats
from scipy.special import logsumexp

from numpyro_bnp.distributions import RecursiveIBP, ibp_capacity, num_active_features

PAPER_ALPHAS = (1.1, 10.78, 15.37)
PAPER_BETAS = (2.3, 5.6, 12.9)


# ---------------------------------------------------------------------------- references
def buffet_matrices(num_rows, max_dishes):
    """All buffet-ordered binary matrices with ``num_rows`` rows and at most ``max_dishes`` columns.

    Columns created by customer ``i`` have their first 1 in row ``i`` and any pattern below it;
    columns are grouped by creating customer, so each matrix appears exactly once.
    """
    by_row = []
    for i in range(num_rows):
        tails = itertools.product((0, 1), repeat=num_rows - i - 1)
        by_row.append([(0,) * i + (1, *t) for t in tails])
    out = []
    for counts in itertools.product(range(max_dishes + 1), repeat=num_rows):
        if sum(counts) > max_dishes:
            continue
        groups = [itertools.product(by_row[i], repeat=c) for i, c in enumerate(counts)]
        for choice in itertools.product(*groups):
            cols = [c for group in choice for c in group]
            z = np.zeros((num_rows, max_dishes), np.int32)
            if cols:
                z[:, : len(cols)] = np.array(cols).T
            out.append(z)
    return np.stack(out)


def sequential_log_prob(z, alpha, beta):
    """Log-probability of a buffet matrix by walking the buffet process row by row (NumPy)."""
    num_rows = z.shape[0]
    counts = np.zeros(z.shape[1])
    dishes = 0
    lp = 0.0
    for n in range(1, num_rows + 1):
        denom = beta + n - 1
        old = z[n - 1, :dishes]
        p_old = counts[:dishes] / denom
        lp += np.sum(np.where(old == 1, np.log(p_old), np.log1p(-p_old)))
        new = int(z[n - 1, dishes:].sum())
        lp += stats.poisson.logpmf(new, alpha * beta / denom)
        counts += z[n - 1]
        dishes += new
    return lp


def recursion_marginals(alpha, beta, num_rows, num_cols):
    """The R-IBP recursion (paper Eq. 4) literally, row by row, with SciPy Poisson CDFs at k-1."""
    k = np.arange(1, num_cols + 1)
    p = np.zeros((num_rows, num_cols))
    running = np.zeros(num_cols)
    rate_prev = 0.0
    for n in range(1, num_rows + 1):
        rate = rate_prev + alpha * beta / (beta + n - 1)
        created = stats.poisson.cdf(k - 1, rate_prev) - stats.poisson.cdf(k - 1, rate)
        p[n - 1] = running / (beta + n - 1) + created
        running += p[n - 1]
        rate_prev = rate
    return p


# ---------------------------------------------------------------------------- exact pmf
@pytest.mark.parametrize(("num_rows", "max_dishes"), [(2, 7), (3, 5), (4, 3)])
@pytest.mark.parametrize(("alpha", "beta"), [(0.4, 1.0), (0.9, 2.3), (0.6, 0.5)])
def test_pmf_sums_to_one_over_enumerated_buffet_matrices(num_rows, max_dishes, alpha, beta):
    z = buffet_matrices(num_rows, max_dishes)
    lp = RecursiveIBP(alpha, beta, num_rows=num_rows, max_features=max_dishes).log_prob(z)
    # The enumeration stops at max_dishes columns: the total must be exactly P(Λ_N <= K).
    rate = alpha * beta * sum(1.0 / (beta + i) for i in range(num_rows))
    np.testing.assert_allclose(
        np.exp(logsumexp(lp)), stats.poisson.cdf(max_dishes, rate), rtol=1e-12
    )


def test_pmf_matches_the_spec_reference_values():
    # N = 3, α = 1.7, β = 2.3 (spec §1.2 "checks run")
    d = RecursiveIBP(1.7, 2.3, num_rows=3, max_features=4)
    z = np.zeros((3, 3, 4), np.int32)
    z[1, 0, 0] = 1
    z[2, 0, 0] = z[2, 1, 1] = 1
    np.testing.assert_allclose(np.exp(d.log_prob(z)), [0.02250, 0.020461, 0.018605], atol=5e-6)


def test_pmf_equals_the_sequential_walk_on_random_draws():
    alpha, beta = 2.7, 0.8
    d = RecursiveIBP(alpha, beta, num_rows=9, max_features=48)
    z = np.asarray(d.sample(random.PRNGKey(3), (40,)))
    expected = [sequential_log_prob(zi, alpha, beta) for zi in z]
    np.testing.assert_allclose(d.log_prob(z), expected, rtol=1e-12)


def test_sample_frequencies_match_pmf_chi_square():
    d = RecursiveIBP(0.8, 1.5, num_rows=3, max_features=10)
    num_draws = 20_000
    z = np.asarray(d.sample(random.PRNGKey(11), (num_draws,)))
    keys, counts = np.unique(z.reshape(num_draws, -1), axis=0, return_counts=True)
    probs = np.exp(np.asarray(d.log_prob(keys.reshape(-1, 3, 10))))
    expected = probs * num_draws
    big = expected >= 5  # pool the rare matrices into one cell (including those never drawn)
    obs = np.append(counts[big], num_draws - counts[big].sum())
    exp = np.append(expected[big], num_draws - expected[big].sum())
    assert big.sum() >= 15
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_log_prob_is_minus_inf_outside_the_support():
    d = RecursiveIBP(2.0, 1.0, num_rows=3, max_features=4)
    good = np.array([[1, 1, 0, 0], [0, 1, 1, 0], [1, 0, 0, 0]])
    non_binary = good * 2
    out_of_order = good[:, [2, 0, 1, 3]]  # a row-2 dish before row-1 dishes
    gap = good[:, [0, 1, 3, 2]]  # an empty column between used ones
    lp = d.log_prob(np.stack([good, non_binary, out_of_order, gap]))
    assert np.isfinite(lp[0]) and np.all(np.isneginf(lp[1:]))
    with pytest.warns(UserWarning, match="Out-of-support"):
        RecursiveIBP(2.0, num_rows=3, max_features=4, validate_args=True).log_prob(gap)


# ---------------------------------------------------------------------------- marginals
@pytest.mark.parametrize(("alpha", "beta"), [(2.0, 1.5), (10.78, 5.6), (1.1, 12.9)])
def test_marginals_equal_the_literal_recursion(alpha, beta):
    d = RecursiveIBP(alpha, beta, num_rows=15, max_features=90)
    np.testing.assert_allclose(d.marginals(), recursion_marginals(alpha, beta, 15, 90), atol=1e-13)


def test_marginals_first_row_and_column_sums():
    d = RecursiveIBP(3.3, 0.7, num_rows=12, max_features=80)
    p = np.asarray(d.marginals())
    k = np.arange(1, 81)
    np.testing.assert_allclose(p[0], stats.poisson.sf(k - 1, 3.3), atol=1e-14)
    # every row takes Poisson(α) dishes: E[row sum] = α (up to the negligible truncation)
    np.testing.assert_allclose(p.sum(1), 3.3, atol=1e-9)


@pytest.fixture(scope="module")
def paper_grid():
    """Batch of the paper's nine (α, β) pairs and 2,000 draws of each (N = 10)."""
    alpha = jnp.array(PAPER_ALPHAS)[:, None]
    beta = jnp.array(PAPER_BETAS)[None, :]
    capacity = ibp_capacity(alpha, beta, num_rows=10, tail_prob=1e-9)
    d = RecursiveIBP(alpha, beta, num_rows=10, max_features=capacity)
    z, (overflow,) = d.sample_with_intermediates(random.PRNGKey(0), (2_000,))
    return d, np.asarray(z), np.asarray(overflow)


def test_marginals_match_simulation_on_the_paper_grid(paper_grid):
    d, z, overflow = paper_grid
    assert z.shape == (2_000, 3, 3, 10, d.max_features) and not overflow.any()
    p = np.asarray(d.marginals())
    mc = z.mean(0)
    # s.e. from the exact p (the truth under the null), floored at one count for p ~ 0
    se = np.sqrt(np.maximum(p * (1 - p), 1.0 / z.shape[0]) / z.shape[0])
    assert np.max(np.abs(mc - p) / se) < 5.5  # ~1.5e4 cells: family-wise false alarm ~6e-4


def test_expected_num_features_and_row_sums_match_simulation(paper_grid):
    d, z, _ = paper_grid
    num_draws = z.shape[0]
    # dishes existing after n customers: columns whose first 1 is in the first n rows
    created_by = np.cumsum(z, axis=-2) > 0  # (S, 3, 3, N, K)
    num_dishes = created_by.sum(-1).mean(0)  # (3, 3, N)
    exact = np.asarray(d.expected_num_features())
    se = np.sqrt(exact / num_draws)  # Λ_n is Poisson with mean r_n
    assert np.max(np.abs(num_dishes - exact) / se) < 4.5  # 90 cells
    np.testing.assert_allclose(num_dishes[..., -1], num_active_features(z).mean(0))
    row_sums = z.sum(-1).mean(0)  # each row sum is Poisson(α)
    alpha = np.asarray(d.alpha)[..., None]
    assert np.max(np.abs(row_sums - alpha) / np.sqrt(alpha / num_draws)) < 4.5


def test_marginal_mse_falls_like_one_over_num_samples():
    """Paper Fig. 4: the MC error of the marginals has mean-squared error sum p(1-p) / (cells S)."""
    d = RecursiveIBP(10.78, 5.6, num_rows=10, max_features=128)
    p = np.asarray(d.marginals())
    expected_unit_mse = np.mean(p * (1 - p))
    replicates = 16
    z = np.asarray(d.sample(random.PRNGKey(5), (replicates, 64 + 256 + 1024)))
    start = 0
    for size in (64, 256, 1024):
        block = z[:, start : start + size]
        start += size
        mse = np.mean((block.mean(1) - p) ** 2, axis=(-2, -1))  # one MSE per replicate
        ratio = mse * size / expected_unit_mse
        assert abs(ratio.mean() - 1.0) < 5 * ratio.std(ddof=1) / np.sqrt(replicates)


# ---------------------------------------------------------------------------- filtering prior
def test_filtering_prior_with_no_data_is_the_first_row_of_the_marginals():
    d = RecursiveIBP(4.0, 2.0, num_rows=5, max_features=40)
    q = d.filtering_prior(jnp.zeros(40), jnp.zeros(40), 0)
    np.testing.assert_allclose(q, d.marginals()[0], atol=1e-15)


def test_filtering_prior_matches_eq5_with_scipy():
    alpha, beta, num_seen, num_cols = 3.0, 1.7, 6, 30
    rng = np.random.default_rng(0)
    b = rng.beta(0.3, 1.0, size=(num_seen, num_cols)) * (np.arange(num_cols) < 9)
    running_sum, log_complement = b.sum(0), np.log1p(-b).sum(0)
    rate = np.sum(1 - np.prod(1 - b, 0))
    new_rate = alpha * beta / (beta + num_seen)
    k = np.arange(1, num_cols + 1)
    expected = (
        running_sum / (beta + num_seen)
        + stats.poisson.cdf(k - 1, rate)
        - stats.poisson.cdf(k - 1, rate + new_rate)
    )
    d = RecursiveIBP(alpha, beta, num_rows=1, max_features=1)  # capacity comes from the stats
    q = d.filtering_prior(running_sum, log_complement, num_seen)
    np.testing.assert_allclose(q, np.clip(expected, 0, 1), atol=1e-14)
    # Σ_k q = Σ_k S_k / (β + n - 1) + αβ / (β + n - 1) when nothing is clipped
    assert np.all(expected <= 1)
    np.testing.assert_allclose(q.sum(), (running_sum.sum() + alpha * beta) / (beta + num_seen))


def test_filtering_prior_batches_over_parameters_and_statistics():
    d = RecursiveIBP(jnp.array([1.0, 2.0, 3.0]), 1.0, num_rows=4, max_features=8)
    stats_ = jnp.zeros((2, 1, 12))
    q = d.filtering_prior(stats_, stats_, jnp.zeros((2, 1)))
    assert q.shape == (2, 3, 12)
    np.testing.assert_allclose(
        q[1, 2], RecursiveIBP(3.0, num_rows=1, max_features=12).marginals()[0]
    )


# ---------------------------------------------------------------------------- capacity
def test_overflow_is_flagged_and_warned():
    d = RecursiveIBP(6.0, 1.0, num_rows=8, max_features=5)
    with pytest.warns(RuntimeWarning, match="max_features=5"):
        z, (overflow,) = d.sample_with_intermediates(random.PRNGKey(0), (200,))
    rate = 6.0 * sum(1 / n for n in range(1, 9))
    frac = float(overflow.mean())
    expected = stats.poisson.sf(5, rate)
    assert abs(frac - expected) < 5 * math.sqrt(expected * (1 - expected) / 200)
    assert int(num_active_features(z).max()) == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # under jit: flagged, never a warning
        _, (flag,) = jax.jit(lambda k: d.sample_with_intermediates(k, (200,)))(random.PRNGKey(0))
    np.testing.assert_array_equal(flag, overflow)


@pytest.mark.parametrize(
    ("alpha", "beta", "num_rows", "tail_prob"), [(10.0, 5.0, 1000, 1e-6), (1.0, 1.0, 5, 1e-300)]
)
def test_ibp_capacity_is_the_poisson_quantile(alpha, beta, num_rows, tail_prob):
    k = ibp_capacity(alpha, beta, num_rows=num_rows, tail_prob=tail_prob)
    rate = alpha * beta * sum(1.0 / (beta + i) for i in range(num_rows))
    assert stats.poisson.sf(k, rate) <= tail_prob < stats.poisson.sf(k - 1, rate)


# ---------------------------------------------------------------------------- NumPyro behaviour
def test_batch_shapes_broadcast_and_agree_with_scalar_distributions():
    d = RecursiveIBP(
        jnp.array([[1.0], [2.5], [4.0]]), jnp.array([0.5, 3.0]), num_rows=6, max_features=40
    )
    assert d.batch_shape == (3, 2) and d.event_shape == (6, 40)
    z = d.sample(random.PRNGKey(1), (5,))
    assert z.shape == (5, 3, 2, 6, 40) and z.dtype == jnp.int32
    lp = d.log_prob(z)
    assert lp.shape == (5, 3, 2)
    scalar = RecursiveIBP(2.5, 0.5, num_rows=6, max_features=40)
    np.testing.assert_allclose(lp[:, 1, 0], scalar.log_prob(z[:, 1, 0]), rtol=1e-13)
    np.testing.assert_allclose(d.marginals()[1, 0], scalar.marginals(), atol=1e-15)
    np.testing.assert_allclose(
        d.mean[2, 1], RecursiveIBP(4.0, 3.0, num_rows=6, max_features=40).mean
    )
    assert d.expected_num_features().shape == (3, 2, 6)


def test_jit_and_vmap_agree_with_eager():
    d = RecursiveIBP(2.0, 1.5, num_rows=6, max_features=32)
    key = random.PRNGKey(7)
    z = d.sample(key, (3,))
    np.testing.assert_array_equal(jax.jit(lambda dd, k: dd.sample(k, (3,)))(d, key), z)
    np.testing.assert_allclose(jax.jit(lambda dd, x: dd.log_prob(x))(d, z), d.log_prob(z))
    alphas = jnp.array([0.5, 1.0, 2.0, 4.0])
    vmapped = jax.vmap(lambda a: RecursiveIBP(a, 1.5, num_rows=6, max_features=32).log_prob(z[0]))
    batched = RecursiveIBP(alphas, 1.5, num_rows=6, max_features=32).log_prob(z[0])
    np.testing.assert_allclose(vmapped(alphas), batched, rtol=1e-13)
    grad = jax.grad(lambda a: RecursiveIBP(a, 1.5, num_rows=6, max_features=32).log_prob(z[0]))(2.0)
    # d/dα log P = K+/α - H^β_N
    k_plus = float(num_active_features(z[0]))
    assert np.isclose(grad, k_plus / 2.0 - 1.5 * sum(1 / (1.5 + i) for i in range(6)))


def ibp_model(obs=None, num_rows=6, max_features=24):
    alpha = numpyro.sample("alpha", dist.Gamma(4.0, 2.0))
    z = numpyro.sample("z", RecursiveIBP(alpha, 1.0, num_rows=num_rows, max_features=max_features))
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([max_features, 2]).to_event(2))
    numpyro.deterministic("num_features", num_active_features(z))
    numpyro.sample("obs", dist.Normal(z @ a, 0.5).to_event(2), obs=obs)


def test_handlers_trace_substitute_condition_and_log_density():
    trace = handlers.trace(handlers.seed(ibp_model, 0)).get_trace()
    site = trace["z"]
    assert site["value"].shape == (6, 24) and site["intermediates"][0].shape == ()
    z0, obs = site["value"], trace["obs"]["value"]
    fixed = handlers.trace(
        handlers.substitute(handlers.seed(ibp_model, 1), data={"z": z0})
    ).get_trace()
    np.testing.assert_array_equal(fixed["z"]["value"], z0)
    assert not fixed["z"]["is_observed"]
    conditioned = handlers.trace(
        handlers.condition(handlers.seed(ibp_model, 1), data={"z": z0})
    ).get_trace()
    assert conditioned["z"]["is_observed"]
    params = {name: trace[name]["value"] for name in ("alpha", "z", "A")}
    joint = jax.jit(lambda p: log_density(ibp_model, (), {"obs": obs}, p)[0])(params)
    expected = (
        dist.Gamma(4.0, 2.0).log_prob(params["alpha"])
        + RecursiveIBP(params["alpha"], num_rows=6, max_features=24).log_prob(z0)
        + dist.Normal(0.0, 1.0).log_prob(params["A"]).sum()
        + dist.Normal(z0 @ params["A"], 0.5).log_prob(obs).sum()
    )
    np.testing.assert_allclose(joint, expected, rtol=1e-12)


def test_predictive_draws_the_prior():
    samples = Predictive(ibp_model, num_samples=400)(random.PRNGKey(2))
    assert samples["z"].shape == (400, 6, 24) and samples["obs"].shape == (400, 6, 2)
    # E[K+] = E[α] H_6 under the Gamma(4, 2) hyperprior; Var = E[α] H_6 + Var[α] H_6²
    h6 = sum(1 / n for n in range(1, 7))
    mean, var = 2.0 * h6, 2.0 * h6 + 1.0 * h6**2
    k = np.asarray(samples["num_features"])
    assert abs(k.mean() - mean) < 5 * math.sqrt(var / 400)


# ---------------------------------------------------------------------------- validation
def test_bad_parameters_are_rejected_with_clear_messages():
    with pytest.raises(ValueError, match="alpha"):
        RecursiveIBP(-1.0, num_rows=3, max_features=4, validate_args=True)
    with pytest.raises(ValueError, match="beta"):
        RecursiveIBP(1.0, 0.0, num_rows=3, max_features=4, validate_args=True)
    with pytest.raises(TypeError, match="num_rows"):
        RecursiveIBP(1.0, num_rows=2.5, max_features=4)
    with pytest.raises(ValueError, match="num_rows"):
        RecursiveIBP(1.0, num_rows=0, max_features=4)
    with pytest.raises(TypeError, match="max_features"):
        RecursiveIBP(1.0, num_rows=3, max_features=True)
    with pytest.raises(ValueError, match="tail_prob"):
        ibp_capacity(1.0, num_rows=3, tail_prob=0.0)
    with pytest.raises(ValueError, match="alpha"):
        ibp_capacity(np.nan, num_rows=3)


def test_float32_by_default():
    with jax.enable_x64(False):
        d = RecursiveIBP(10.78, 5.6, num_rows=10, max_features=128)
        z = d.sample(random.PRNGKey(0), (2,))
        assert z.dtype == jnp.int32
        assert d.log_prob(z).dtype == jnp.float32 and d.marginals().dtype == jnp.float32
        p32 = np.asarray(d.marginals(), np.float64)
    d64 = RecursiveIBP(10.78, 5.6, num_rows=10, max_features=128)
    # the documented float32 bound of poisson_interval_probs: about 1e-6 x rate, absolute
    rate = float(d64.expected_num_features()[-1])
    np.testing.assert_allclose(p32, np.asarray(d64.marginals()), atol=1e-6 * rate)


def test_ibp_capacity_inside_jit_equals_host_value():
    # a model that computes its capacity is re-traced under jit by the engines
    host = ibp_capacity(2.0, 0.5, num_rows=30)

    @jax.jit
    def traced(x):
        return x + ibp_capacity(2.0, 0.5, num_rows=30)

    assert int(traced(0)) == host
    with pytest.raises(TypeError, match="concrete alpha and beta"):
        jax.jit(lambda a: ibp_capacity(a, num_rows=30))(2.0)  # a traced parameter cannot work
