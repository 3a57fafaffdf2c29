"""Restricted IBP: Poisson-binomial DP, the restricted Bernoulli process and the five samplers.

References are brute-force enumeration (the pmf of a vector given π, the Poisson-binomial pmf)
and the exact collapsed sampler S1. Tolerances come from Monte-Carlo standard errors or from
chi-square tests; with about twenty tests at a threshold of p > 1e-3 (or 5 s.e.), the
family-wise false-alarm rate stays near 2e-2 with fixed seeds making every run reproducible.
"""

import itertools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro import handlers
from scipy import stats

from numpyro_bnp._math import poisson_binomial_log_pmf
from numpyro_bnp.distributions import (
    RestrictedBernoulliProcess,
    RestrictedIBP,
    exactly,
    left_ordered_form,
    left_ordered_matrix,
)
from numpyro_bnp.distributions._conditional_bernoulli import inclusion_log_probs
from numpyro_bnp.distributions._restricted_samplers import (
    _rows_given_probs,
    _stick_breaking_log_probs,
    _weak_limit_probs,
)
from numpyro_bnp.distributions.restricted_ibp import METHODS

ATOMS = np.array([0.9, 0.5, 0.3, 0.1, 0.05])  # π for the enumeration tests (I = 5)
ALL_VECTORS = np.array(list(itertools.product((0, 1), repeat=len(ATOMS))), np.int32)


def count_dists():
    """The three kinds of row-count law the issue names: point mass, Poisson, categorical."""
    return {
        "exactly": exactly(2),
        "poisson": dist.Poisson(1.3),
        "categorical": dist.Categorical(probs=jnp.array([0.1, 0.2, 0.3, 0.4])),
    }


# ---------------------------------------------------------------------------- references
def brute_poisson_binomial(probs):
    pmf = np.zeros(len(probs) + 1)
    for z in itertools.product((0, 1), repeat=len(probs)):
        z = np.array(z)
        pmf[z.sum()] += np.prod(np.where(z == 1, probs, 1 - probs))
    return pmf


def brute_restricted_pmf(probs, count_pmf):
    """P(z) = f(|z|) BeP(z) / PB(|z|) for every binary vector, by enumeration (NumPy)."""
    pb = brute_poisson_binomial(probs)
    bep = np.prod(np.where(ALL_VECTORS == 1, probs, 1 - probs), axis=1)
    counts = ALL_VECTORS.sum(1)
    return count_pmf[counts] * bep / pb[counts]


def truncated_count_pmf(count_dist, max_count):
    """f on 0..max_count, renormalised (the law the library promises for the row counts)."""
    k = np.arange(max_count + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pmf = np.exp(np.asarray(count_dist.log_prob(k)))
    pmf = np.where(np.isfinite(pmf) & (k <= getattr(count_dist.support, "upper_bound", k)), pmf, 0)
    return pmf / pmf.sum()


def chi_square_pvalue(observed, expected_probs, min_expected=5.0):
    """Goodness of fit with cells of expected count < min_expected pooled into one."""
    observed = np.asarray(observed, float)
    expected = np.asarray(expected_probs, float) * observed.sum()
    big = expected >= min_expected
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    assert not np.any(obs[~keep]), "observations where the target has no mass"
    if keep.sum() == 1:  # a point mass: every observation is in its one cell
        return 1.0
    return stats.chisquare(obs[keep], exp[keep]).pvalue


def vector_counts(z):
    """Counts of each of the 2^I binary vectors (rows of ALL_VECTORS) among the rows of z."""
    index = np.asarray(z).reshape(-1, len(ATOMS)) @ (2 ** np.arange(len(ATOMS))[::-1])
    return np.bincount(index, minlength=len(ALL_VECTORS))


def class_table(*samples):
    """Contingency table of left-ordered matrices (rows: samplers; columns: matrix classes)."""
    keys = [[m.tobytes() for m in np.asarray(z, np.int8).reshape(len(z), -1)] for z in samples]
    classes = sorted(set().union(*keys))
    index = {c: i for i, c in enumerate(classes)}
    table = np.zeros((len(samples), len(classes)))
    for row, ks in enumerate(keys):
        np.add.at(table[row], [index[k] for k in ks], 1)
    return table


def two_sample_pvalue(z_a, z_b, min_expected=5.0):
    """Chi-square homogeneity test of two samples of matrices, rare classes pooled."""
    table = class_table(z_a, z_b)
    expected = table.sum(0) * table.sum(1, keepdims=True) / table.sum()
    rare = expected.min(0) < min_expected
    pooled = np.column_stack([table[:, ~rare], table[:, rare].sum(1)])
    pooled = pooled[:, pooled.sum(0) > 0]
    assert pooled.shape[1] >= 5
    return stats.chi2_contingency(pooled).pvalue


# ---------------------------------------------------------------------------- Poisson-binomial DP
def test_poisson_binomial_dp_equals_enumeration_and_moments():
    rng = np.random.default_rng(0)
    probs = rng.uniform(size=(3, 8))
    probs[1, :2] = [0.0, 1.0]  # exact zeros and ones are allowed
    probs[2, 0] = 1 - 1e-12  # near one: log1p keeps the digits
    log_pmf = np.asarray(poisson_binomial_log_pmf(probs, 8))
    for p, lp in zip(probs, log_pmf, strict=True):
        np.testing.assert_allclose(np.exp(lp), brute_poisson_binomial(p), atol=1e-15)
    pmf = np.exp(log_pmf)
    k = np.arange(9)
    np.testing.assert_allclose(pmf.sum(-1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(pmf @ k, probs.sum(-1), rtol=1e-13)
    variance = pmf @ k**2 - (pmf @ k) ** 2
    np.testing.assert_allclose(variance, (probs * (1 - probs)).sum(-1), rtol=1e-12)
    assert not np.any(np.isnan(log_pmf))
    # truncation drops the counts above max_count without touching the others; the prefix table
    # holds the pmf of every leading block of atoms
    table = np.asarray(poisson_binomial_log_pmf(probs, 3, prefixes=True))
    assert table.shape == (3, 9, 4)
    np.testing.assert_allclose(table[:, -1], log_pmf[:, :4], rtol=1e-13)
    np.testing.assert_allclose(np.exp(table[0, 4]), brute_poisson_binomial(probs[0, :4])[:4])


def test_poisson_binomial_dp_in_float32():
    probs = np.random.default_rng(1).uniform(size=40)
    exact = np.asarray(poisson_binomial_log_pmf(probs, 40))
    with jax.enable_x64(False):
        single = poisson_binomial_log_pmf(jnp.asarray(probs, jnp.float32), 40)
        assert single.dtype == jnp.float32
    big = np.exp(exact) > 1e-6
    np.testing.assert_allclose(np.asarray(single)[big], exact[big], atol=2e-5)


# ---------------------------------------------------------------------------- restricted BeP
@pytest.mark.parametrize("name", ["exactly", "poisson", "categorical"])
def test_restricted_bernoulli_pmf_equals_enumeration(name):
    count_dist = count_dists()[name]
    d = RestrictedBernoulliProcess(ATOMS, count_dist)
    expected = brute_restricted_pmf(ATOMS, truncated_count_pmf(count_dist, len(ATOMS)))
    np.testing.assert_allclose(np.exp(d.log_prob(ALL_VECTORS)), expected, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(np.exp(d.log_prob(ALL_VECTORS)).sum(), 1.0, rtol=1e-13)
    # the mean from inclusion probabilities equals the enumerated marginals
    np.testing.assert_allclose(d.mean, expected @ ALL_VECTORS, rtol=1e-12)
    with pytest.warns(UserWarning, match="Out-of-support"):
        assert np.isneginf(d.log_prob(np.array([1, 2, 0, 0, 0])))


def test_esscher_tilt_leaves_the_law_unchanged_and_inclusion_probabilities_sum_to_j():
    logits = np.log(ATOMS) - np.log1p(-ATOMS)
    tilted = 1 / (1 + np.exp(-(logits + 1.3)))
    f = dist.Categorical(probs=jnp.array([0.2, 0.3, 0.5]))
    lp = RestrictedBernoulliProcess(ATOMS, f).log_prob(ALL_VECTORS)
    lp_tilted = RestrictedBernoulliProcess(tilted, f).log_prob(ALL_VECTORS)
    np.testing.assert_allclose(np.exp(lp_tilted), np.exp(lp), atol=1e-15)
    incl = np.exp(np.asarray(inclusion_log_probs(jnp.asarray(ATOMS), 5)))  # (I, J + 1)
    np.testing.assert_allclose(incl.sum(0), np.arange(6), rtol=1e-12)


@pytest.mark.parametrize("name", ["exactly", "poisson", "categorical"])
def test_restricted_bernoulli_samples_match_enumeration_chi_square(name):
    count_dist = count_dists()[name]
    d = RestrictedBernoulliProcess(ATOMS, count_dist)
    z = np.asarray(d.sample(random.PRNGKey(3), (20_000,)))
    assert z.shape == (20_000, 5) and z.dtype == np.int32
    target = np.exp(np.asarray(d.log_prob(ALL_VECTORS)))
    assert chi_square_pvalue(vector_counts(z), target) > 1e-3
    # the row count follows f exactly (truncated to the five atoms)
    count_pmf = truncated_count_pmf(count_dist, 5)
    assert chi_square_pvalue(np.bincount(z.sum(1), minlength=6), count_pmf) > 1e-3


def test_restricted_bernoulli_batches_probs_against_count_dists():
    probs = np.stack([ATOMS, ATOMS[::-1] * 0.5])
    f = dist.Poisson(jnp.array([[0.5], [2.0], [4.0]]))  # batch (3, 1) x probs batch (2,)
    d = RestrictedBernoulliProcess(probs, f)
    assert d.batch_shape == (3, 2) and d.event_shape == (5,)
    z = d.sample(random.PRNGKey(0), (7,))
    assert z.shape == (7, 3, 2, 5)
    lp = d.log_prob(z)
    single = RestrictedBernoulliProcess(probs[1], dist.Poisson(2.0)).log_prob(z[:, 1, 1])
    np.testing.assert_allclose(lp[:, 1, 1], single, rtol=1e-13)
    jitted = jax.jit(lambda dd, x: dd.log_prob(x))(d, z)
    np.testing.assert_allclose(jitted, lp, rtol=1e-13)


def test_restricted_bernoulli_float32_by_default():
    with jax.enable_x64(False):
        d = RestrictedBernoulliProcess([0.9, 0.5, 0.3, 0.1, 0.05], dist.Poisson(1.3))
        lp = d.log_prob(ALL_VECTORS)
        assert lp.dtype == jnp.float32 and d.sample(random.PRNGKey(0), (3,)).dtype == jnp.int32
    exact = RestrictedBernoulliProcess(ATOMS, dist.Poisson(1.3)).log_prob(ALL_VECTORS)
    np.testing.assert_allclose(np.asarray(lp, float), exact, rtol=1e-5)


def test_bad_count_dist_and_probs_raise_clear_errors():
    with pytest.raises(ValueError, match="probs must lie in"):
        RestrictedBernoulliProcess([0.2, 1.3], exactly(1))
    with pytest.raises(ValueError, match="probs must lie in"):
        RestrictedBernoulliProcess([0.2, np.nan], exactly(1))
    with pytest.raises(ValueError, match="probs must have a last axis"):
        RestrictedBernoulliProcess(0.5, exactly(1))
    with pytest.raises(ValueError, match="count_dist must have its support on the non-negative"):
        RestrictedBernoulliProcess(ATOMS, dist.Normal(2.0, 1.0))
    with pytest.raises(ValueError, match=r"count_dist .* negative counts"):
        RestrictedBernoulliProcess(ATOMS, dist.DiscreteUniform(-1, 3))
    with pytest.raises(TypeError, match="count_dist must be a numpyro distribution"):
        RestrictedBernoulliProcess(ATOMS, 2)
    with pytest.raises(ValueError, match="count_dist must be a scalar"):
        RestrictedBernoulliProcess(ATOMS, dist.Poisson(jnp.ones(2)).to_event(1))
    with pytest.raises(ValueError, match=r"count_dist puts probability .* above the number of"):
        RestrictedBernoulliProcess(ATOMS, exactly(6))
    with pytest.raises(ValueError, match="count must be a non-negative integer"):
        exactly(-1)
    # mass above I only through zero-probability categories is fine
    RestrictedBernoulliProcess(ATOMS, dist.Categorical(probs=jnp.array([0.5, 0.5, 0, 0, 0, 0, 0])))


# ---------------------------------------------------------------------------- rows given π
@pytest.mark.parametrize("method", ["uncollapsed_rejection", "tilted_rejection", "inclusion"])
def test_rows_given_probs_match_enumeration(method):
    """S2–S4 given the truncated π̃: rows are exactly the restricted Bernoulli process."""
    f = dist.Categorical(probs=jnp.array([0.1, 0.2, 0.3, 0.4]))
    target = RestrictedBernoulliProcess(ATOMS, f)
    log_f, _ = target._count_tables()
    rows = jax.jit(_rows_given_probs, static_argnums=(3, 4, 5))
    z, rejections, exhausted = rows(
        random.PRNGKey(4), jnp.asarray(ATOMS), log_f[:4], 6000, method, 10**6
    )
    assert not exhausted
    assert chi_square_pvalue(vector_counts(z), np.exp(target.log_prob(ALL_VECTORS))) > 1e-3
    # expected rejections: sum over rows of (1 / acceptance - 1), acceptance PB(J) (plain proposals)
    if method == "inclusion":
        assert rejections == 0
    elif method == "uncollapsed_rejection":
        pb = brute_poisson_binomial(ATOMS)[:4]
        weights = np.array([0.0, 0.2, 0.3, 0.4])  # rows with J = 0 are zero without proposals
        geometric_mean = np.sum(weights * (1 - pb) / pb)
        geometric_var = np.sum(weights * (1 - pb) / pb**2)
        assert abs(rejections / 6000 - geometric_mean) < 5 * math.sqrt(geometric_var / 6000)


def test_truncated_beta_process_constructions():
    """Weak limit: E Σ π̃ = α; stick-breaking (c = 1): E π_i = (α / (1 + α))^i (spec §7.3)."""
    alpha, draws = 3.0, 4000
    keys = random.split(random.PRNGKey(5), draws)
    weak = jax.vmap(lambda k: _weak_limit_probs(k, alpha, 2.0, 30))(keys)
    total = np.asarray(weak.sum(1))
    assert abs(total.mean() - alpha) < 5 * total.std() / math.sqrt(draws)
    sticks = np.exp(np.asarray(jax.vmap(lambda k: _stick_breaking_log_probs(k, alpha, 8))(keys)))
    assert np.all(np.diff(sticks, axis=1) <= 0)
    expected = (alpha / (1 + alpha)) ** np.arange(1, 9)
    se = sticks.std(0) / math.sqrt(draws)
    assert np.all(np.abs(sticks.mean(0) - expected) < 5 * se)


# ---------------------------------------------------------------------------- the five samplers
SMALL = {"num_rows": 3, "max_features": 40, "directing": "stick_breaking", "max_rejections": 2000}
NUM_MATRICES = 10_000


def sample_capped(d, key, num, method, max_dropped=2e-3):
    """Draws whose rejection loop finished within ``max_rejections``, the rest dropped.

    The number of rejections is heavy-tailed (a draw may need 10^6 proposals), so the tests cap
    it and drop the few capped draws. Dropping a fraction ``q`` of the draws changes the law of
    the rest by at most ``q / (1 - q)`` in total variation; the tests require ``q <= 2e-3``, far
    below what their chi-square tests can resolve at 10,000 draws.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the flags are checked here instead
        z, info = d.sample_with_info(key, (num,), method=method)
    assert not np.any(info.overflow)
    done = ~np.asarray(info.exhausted)
    assert done.mean() >= 1 - max_dropped, done.mean()
    return np.asarray(z)[done], jax.tree.map(lambda x: np.asarray(x)[done], info)


GENERAL_F = dist.Categorical(probs=jnp.array([0.3, 0.7]))  # 0 or 1 feature per row


@pytest.fixture(scope="module")
def general_f_samples():
    """10,000 matrices (3 rows, α = 1.5, c = 1) from each sampler, f = Categorical(0.3, 0.7).

    Rejection counts are heavy-tailed on both sides (see ``docs/restricted_ibp.md``): a small
    total mass makes ``PB_μ(J)`` small for ``J >= α`` (infinite expected rejections), several
    atoms near 1 make it small for small ``J``. α = 1.5 with ``J <= 1`` keeps both tails light
    enough for a quick test. The approximate samplers use 40 stick-breaking atoms: the truncation
    error, the chance that a proposal has a one beyond atom 40, is about α E[π_40] =
    1.5 (0.6)^40 = 2e-9, far below the Monte-Carlo error, so they must agree with the exact ones.
    """
    d = RestrictedIBP(1.5, GENERAL_F, **SMALL)
    out = {}
    for i, method in enumerate(METHODS):
        out[method] = sample_capped(d, random.PRNGKey(10 + i), NUM_MATRICES, method)
    return out


@pytest.mark.parametrize("method", METHODS)
def test_every_sampler_row_counts_follow_f(general_f_samples, method):
    z, _ = general_f_samples[method]
    assert z.shape[1:] == (3, 40) and bool(left_ordered_matrix(z).all())
    counts = np.bincount(z.sum(-1).ravel(), minlength=2)
    assert chi_square_pvalue(counts, [0.3, 0.7]) > 1e-3


@pytest.mark.parametrize("method", [m for m in METHODS if m != "collapsed_rejection"])
def test_every_sampler_agrees_with_the_exact_collapsed_sampler(general_f_samples, method):
    z_exact, _ = general_f_samples["collapsed_rejection"]
    z, _ = general_f_samples[method]
    assert two_sample_pvalue(z_exact, z) > 1e-3


def test_rejection_counts_reported(general_f_samples):
    assert np.all(np.asarray(general_f_samples["inclusion"][1].num_rejections) == 0)
    for method in ("collapsed_rejection", "uncollapsed_rejection", "retrospective"):
        info = general_f_samples[method][1]
        assert np.median(info.num_rejections) >= 1
    # tilting moves each proposal's mean count to J_n: fewer rejections than plain proposals
    plain = np.mean(general_f_samples["uncollapsed_rejection"][1].num_rejections)
    tilted = np.mean(general_f_samples["tilted_rejection"][1].num_rejections)
    assert tilted < plain


@pytest.mark.parametrize("method", ["collapsed_rejection", "retrospective"])
@pytest.mark.parametrize("name", ["exactly", "poisson"])
def test_exact_samplers_row_counts_follow_f(method, name):
    count_dist = count_dists()[name]
    if name == "poisson":
        count_dist = dist.Poisson(0.5)  # mostly J < α: a light-tailed number of rejections
    options = {**SMALL, "max_rejections": 20_000}  # f reaches J = 2 >= α: heavier tails
    d = RestrictedIBP(1.5 if name == "poisson" else 2.5, count_dist, **options)
    z, _ = sample_capped(d, random.PRNGKey(20), 5_000 if name == "poisson" else 500, method)
    sums = z.sum(-1).ravel()
    if name == "exactly":
        assert np.all(sums == 2)
    else:
        pmf = truncated_count_pmf(count_dist, 40)
        assert chi_square_pvalue(np.bincount(sums, minlength=41), pmf) > 1e-3


# ---------------------------------------------------------------------------- exchangeability
def naive_accepted_counts_rows(alpha, num_draws, seed):
    """Paper B §3.2: IBP candidates from the counts of the *accepted* rows only, f = δ_1, c = 1.

    Returns, per draw, 1 if (Z_2, Z_3) = (e_1, e_2), 2 if (e_2, e_1), 0 otherwise.
    """
    rng = np.random.default_rng(seed)
    out = np.zeros(num_draws, np.int8)
    for d in range(num_draws):
        counts = [1]  # Z_1 = e_1 with probability 1
        rows = []
        for n in (2, 3):
            while True:
                old = [k for k, m in enumerate(counts) if rng.uniform() < m / n]
                new = rng.poisson(alpha / n)
                if len(old) + new == 1:
                    break
            row = old[0] if old else len(counts)
            counts = counts + [0] * new
            counts[row] += 1
            rows.append(row)
        out[d] = 1 if rows == [0, 1] else 2 if rows == [1, 0] else 0
    return out


def order_patterns(z):
    """1 if (Z_2, Z_3) = (e_1, e_2), 2 if (e_2, e_1), given Z_1 = e_1 (left-ordered, f = δ_1)."""
    first = np.zeros((3, z.shape[-1]), np.int32)
    a, b = first.copy(), first.copy()
    a[0, 0] = a[1, 0] = a[2, 1] = 1
    b[0, 0] = b[2, 0] = b[1, 1] = 1
    return np.where((z == a).all((1, 2)), 1, np.where((z == b).all((1, 2)), 2, 0))


def test_exchangeability_counter_example_naive_vs_ours():
    alpha, draws = 1.5, 10_000
    # paper B §3.2 with the missing equations re-derived (spec §7.4): 0.114 and 0.143 at α = 1.5
    # (α > J = 1 keeps the expected number of rejections of the exact samplers finite)
    p_12 = 2 * alpha / ((2 + alpha) * (6 + alpha))
    p_21 = 3 * alpha / (2 * (2 + alpha) * (3 + alpha))
    naive = naive_accepted_counts_rows(alpha, draws, seed=0)
    for value, p in ((1, p_12), (2, p_21)):
        assert abs(np.mean(naive == value) - p) < 5 * math.sqrt(p * (1 - p) / draws)
    d = RestrictedIBP(alpha, exactly(1), **SMALL)
    for method in ("collapsed_rejection", "retrospective"):
        pattern = order_patterns(sample_capped(d, random.PRNGKey(30), draws, method)[0])
        n_12, n_21 = np.sum(pattern == 1), np.sum(pattern == 2)
        # exchangeable: the two orders are equally likely (binomial test of n_12 vs n_21)
        assert stats.binomtest(int(n_12), int(n_12 + n_21)).pvalue > 1e-3
        # and the naive construction is far from that: its counts fail the same test
        naive_12, naive_21 = np.sum(naive == 1), np.sum(naive == 2)
        assert stats.binomtest(int(naive_12), int(naive_12 + naive_21)).pvalue < 1e-6


# ---------------------------------------------------------------------------- numpyro behaviour
def test_left_ordered_form_is_the_canonical_column_order():
    rng = np.random.default_rng(0)
    z = (rng.uniform(size=(4, 40, 12)) < 0.3).astype(np.int32)
    lof = np.asarray(left_ordered_form(z))
    for zi, li in zip(z, lof, strict=True):
        expected = np.array(sorted(map(tuple, zi.T), reverse=True)).T
        np.testing.assert_array_equal(li, expected)
    perm = rng.permutation(12)
    np.testing.assert_array_equal(left_ordered_form(z[..., perm]), lof)
    assert bool(left_ordered_matrix(lof).all()) and not bool(left_ordered_matrix(z).all())


def test_handlers_batch_shapes_and_flags():
    def model():
        import numpyro

        numpyro.sample("z", RestrictedIBP(2.0, exactly(2), **SMALL))

    trace = handlers.trace(handlers.seed(model, 0)).get_trace()
    (info,) = trace["z"]["intermediates"]
    assert trace["z"]["value"].shape == (3, 40) and info.num_rejections.shape == ()
    d = RestrictedIBP(jnp.array([1.0, 2.0]), exactly(1), **SMALL)
    assert d.batch_shape == (2,) and d.sample(random.PRNGKey(0), (5,)).shape == (5, 2, 3, 40)
    # the rejection bound is flagged and warned about, never silent
    tight = RestrictedIBP(2.0, exactly(2), num_rows=3, max_features=40, max_rejections=1)
    with pytest.warns(RuntimeWarning, match="max_rejections=1"):
        z, info = tight.sample_with_info(random.PRNGKey(1), (50,))
    assert np.any(info.exhausted) and np.all(np.asarray(info.num_rejections) <= 1)
    with pytest.raises(NotImplementedError, match="no tractable pmf"):
        d.log_prob(z[0])


def test_restricted_ibp_rejects_bad_arguments():
    with pytest.raises(ValueError, match="count_dist must have its support"):
        RestrictedIBP(2.0, dist.Gamma(2.0), num_rows=3, max_features=10)
    with pytest.raises(ValueError, match="above max_features = 10"):
        RestrictedIBP(2.0, exactly(11), num_rows=3, max_features=10)
    with pytest.raises(ValueError, match="method must be one of"):
        RestrictedIBP(2.0, exactly(1), num_rows=3, max_features=10, method="gibbs")
    with pytest.raises(ValueError, match="truncation"):
        RestrictedIBP(2.0, exactly(1), num_rows=3, max_features=10, truncation=11)
    d = RestrictedIBP(2.0, exactly(1), concentration=2.0, num_rows=3, max_features=10)
    with pytest.raises(ValueError, match="concentration == 1"):
        d.sample(random.PRNGKey(0), method="retrospective")
    d = RestrictedIBP(12.0, exactly(1), num_rows=3, max_features=10)
    with pytest.raises(ValueError, match=r"truncation I \(10\) > alpha"):
        d.sample(random.PRNGKey(0), method="inclusion")
    d = RestrictedIBP(2.0, exactly(6), num_rows=3, max_features=10, truncation=5)
    with pytest.raises(ValueError, match="above truncation = 5"):
        d.sample(random.PRNGKey(0), method="tilted_rejection")
