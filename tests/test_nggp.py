"""NGGP partitions: exact EPPF, urn sampler, U | z, predictive (spec nrm_adf_ep.md §1–2, §10)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random
from scipy import integrate, optimize, special, stats

from numpyro_bnp._math import ggp_laplace_exponent, nggp_log_v, nggp_sample_log_u
from numpyro_bnp.distributions import NGGP, GeneralizedGammaProcess, cluster_sizes, num_clusters

# (a, σ, τ): NIG, general, DP, heavy discount, σ → 0, τ → 0, stable
GRID = np.array(
    [
        [1.0, 0.5, 1.0],
        [2.0, 0.3, 0.5],
        [0.7, 0.0, 1.3],
        [1.5, 0.75, 2.0],
        [1.0, 1e-6, 1.0],
        [1.0, 0.5, 1e-8],
        [1.2, 0.4, 0.0],
    ]
)


def partitions(n):
    """All canonical label vectors (restricted growth strings) of length n."""
    out = []

    def grow(prefix, top):
        if len(prefix) == n:
            out.append(prefix)
            return
        for label in range(top + 2):
            grow([*prefix, label], max(top, label))

    grow([0], 0)
    return np.array(out, dtype=np.int32)


def grid_nggp(n):
    return NGGP(GRID[:, 0], GRID[:, 1], GRID[:, 2], num_points=n)


def sizes_of(z):
    return [int(c) for c in np.bincount(z) if c > 0]


def crp_log_eppf(z, a):
    sizes = sizes_of(z)
    n = len(z)
    return (
        len(sizes) * np.log(a)
        + special.gammaln(a)
        - special.gammaln(a + n)
        + sum(special.gammaln(s) for s in sizes)
    )


def pitman_yor_log_eppf(z, sigma):
    """PY(σ, 0): Π_{i<K} (iσ) / (1)_{n-1} · Π (1-σ)_{n_k-1}."""
    sizes = sizes_of(z)
    k, n = len(sizes), len(z)
    lp = sum(np.log(i * sigma) for i in range(1, k)) - special.gammaln(n)
    return lp + sum(special.gammaln(s - sigma) - special.gammaln(1 - sigma) for s in sizes)


def log_upper_gamma(s, x):
    """Γ(s, x) for any real s via Γ(s, x) = (Γ(s+1, x) - x^s e^{-x}) / s (float64)."""
    if s > 0:
        return special.gammaincc(s, x) * special.gamma(s)
    if s == 0:
        return special.exp1(x)
    return (log_upper_gamma(s + 1, x) - x**s * np.exp(-x)) / s


def closed_form_v(n, k, a, sigma, tau):
    """The Lijoi–Mena–Prünster alternating sum (spec §2.2), usable for small n only."""
    beta = a * tau**sigma / sigma
    total = sum(
        special.comb(n - 1, i)
        * (-1) ** i
        * beta ** (i / sigma)
        * log_upper_gamma(k - i / sigma, beta)
        for i in range(n)
    )
    return sigma ** (k - 1) * np.exp(beta) / special.gamma(n) * total


# ------------------------------------------------------------------------------------ EPPF
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_eppf_sums_to_one_over_all_partitions(n):
    z = partitions(n)  # Bell(n) rows
    assert len(z) == [1, 2, 5, 15, 52, 203][n - 1]
    lp = grid_nggp(n).log_prob(z[:, None, :])  # (Bell(n), grid)
    np.testing.assert_allclose(special.logsumexp(np.asarray(lp), axis=0), 0.0, atol=1e-10)


def test_eppf_is_crp_at_sigma_zero_and_pitman_yor_at_tau_zero():
    z = partitions(6)
    dp = NGGP(0.7, 0.0, jnp.array([0.3, 1.3, 50.0]), num_points=6).log_prob(z[:, None, :])
    expected = np.array([crp_log_eppf(row, 0.7) for row in z])
    np.testing.assert_allclose(dp, np.repeat(expected[:, None], 3, 1), rtol=1e-13, atol=1e-13)
    py = NGGP(jnp.array([0.1, 1.2, 30.0]), 0.4, 0.0, num_points=6).log_prob(z[:, None, :])
    expected = np.array([pitman_yor_log_eppf(row, 0.4) for row in z])
    np.testing.assert_allclose(py, np.repeat(expected[:, None], 3, 1), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("a,sigma,tau", [(1.0, 0.5, 1.0), (2.0, 0.3, 0.5), (1.5, 0.75, 2.0)])
def test_closed_form_agrees_with_quadrature(a, sigma, tau):
    ks = np.arange(1, 6)
    quad, err = nggp_log_v(5, ks, a, sigma, tau)
    closed = np.log([closed_form_v(5, k, a, sigma, tau) for k in ks])
    np.testing.assert_allclose(quad, closed, rtol=0, atol=1e-8)  # cancellation-limited sum
    assert np.all(np.asarray(err) < 1e-12)


def test_quadrature_agrees_with_scipy_and_limits():
    def reference(n, k, a, s, t):
        def f(x):
            psi = float(ggp_laplace_exponent(np.exp(x), a, s, t))
            return np.exp(n * x + (k * s - n) * np.logaddexp(x, np.log(t)) - psi)

        value, _ = integrate.quad(f, -60, 60, epsabs=0, epsrel=1e-12, limit=400)
        return k * np.log(a) - special.gammaln(n) + np.log(value)

    for n, k, a, s, t in [(6, 3, 1.0, 0.5, 1.0), (50, 7, 2.0, 0.3, 0.5), (200, 30, 5.0, 0.9, 3.0)]:
        np.testing.assert_allclose(
            nggp_log_v(n, k, a, s, t)[0], reference(n, k, a, s, t), atol=1e-9
        )
    # σ → 0 tends to the DP closed form, τ → 0 to the stable one (continuity of the quadrature)
    ks = np.arange(1, 11)
    near_dp = nggp_log_v(10, ks, 0.7, 1e-9, 1.3)[0]
    np.testing.assert_allclose(near_dp, nggp_log_v(10, ks, 0.7, 0.0, 1.3)[0], atol=1e-7)
    # the EPPF depends on τ through β = a τ^σ / σ and converges at rate O(β): β = 3e-12 here
    near_stable = nggp_log_v(10, ks, 1.2, 0.4, 1e-30)[0]
    np.testing.assert_allclose(near_stable, nggp_log_v(10, ks, 1.2, 0.4, 0.0)[0], atol=1e-7)


def test_spec_facts_v_values_recursion_and_scale_invariance():
    # fact 6: log V_{4,k}
    np.testing.assert_allclose(
        nggp_log_v(4, np.arange(1, 5), 1.0, 0.5, 1.0)[0],
        [-3.555769170210249, -2.833423876250065, -2.022096025314878, -1.112377985725907],
        atol=1e-12,
    )
    np.testing.assert_allclose(
        nggp_log_v(4, np.arange(1, 5), 1.5, 0.75, 2.0)[0],
        [-4.98641367103122, -3.48546850958487, -1.92864286352655, -0.31042479208478],
        atol=1e-12,
    )
    # fact 5: V_{1,1} = 1 and V_{n,k} = (n - kσ) V_{n+1,k} + V_{n+1,k+1}
    for a, s, t in GRID:
        assert abs(float(nggp_log_v(1, 1, a, s, t)[0])) < 1e-12
        n = np.arange(1, 9)[:, None]
        k = np.arange(1, 9)[None, :]
        v = np.exp(nggp_log_v(n, np.minimum(k, n), a, s, t)[0])
        v_next = np.exp(nggp_log_v(n + 1, np.minimum(k, n + 1), a, s, t)[0])
        v_next_k1 = np.exp(nggp_log_v(n + 1, np.minimum(k + 1, n + 1), a, s, t)[0])
        mask = k <= n
        np.testing.assert_allclose(v[mask], ((n - k * s) * v_next + v_next_k1)[mask], rtol=1e-11)
    # fact 8: EPPF(a, σ, τ) = EPPF(a c^σ, σ, τ/c); log V_{5,3} = -3.6514073107787
    np.testing.assert_allclose(nggp_log_v(5, 3, 1.0, 0.5, 1.0)[0], -3.6514073107787, atol=1e-12)
    np.testing.assert_allclose(
        nggp_log_v(5, 3, 3**0.5, 0.5, 1 / 3)[0], -3.6514073107787, atol=1e-12
    )


def test_expected_num_clusters_spec_facts():
    # fact 3 (NGGP), fact 1 (DP), fact 2 (stable)
    np.testing.assert_allclose(
        NGGP(1.0, 0.5, 1.0, num_points=8).expected_num_clusters(),
        [
            1.0,
            1.7773427662,
            2.4296855324,
            3.0011366585,
            3.5152691483,
            3.9862234166,
            4.4232066090,
            4.8325870781,
        ],
        atol=1e-9,
    )
    dp = NGGP(0.7, 0.0, 1.0, num_points=40).expected_num_clusters()
    np.testing.assert_allclose(dp[3], 1.8602131543308, atol=1e-12)
    np.testing.assert_allclose(dp, np.cumsum(0.7 / (0.7 + np.arange(40))), rtol=1e-12)
    stable = NGGP(jnp.array([0.3, 5.0]), 0.4, 0.0, num_points=40).expected_num_clusters()
    n = np.arange(1, 41)
    exact = np.exp(special.gammaln(n + 0.4) - special.gammaln(1.4) - special.gammaln(n))
    np.testing.assert_allclose(stable, np.stack([exact, exact]), rtol=1e-11)
    np.testing.assert_allclose(stable[0, 5], 2.261952, atol=1e-6)
    pmf = grid_nggp(30).num_clusters_pmf()
    np.testing.assert_allclose(pmf.sum(-1), 1.0, atol=1e-10)  # fact 4: Σ_k V S = 1


def test_predictive_and_posterior_of_u_spec_fact_9():
    d = NGGP(1.0, 0.5, 1.0, num_points=6)
    z = jnp.array([0, 1, 0, 2, 1, 0])  # n = 6, K = 3
    p = d.predictive(z)
    assert p.shape == (7,)
    np.testing.assert_allclose(p[3], 0.382972894109618, atol=1e-12)
    np.testing.assert_allclose(p.sum(), 1.0, atol=1e-14)
    np.testing.assert_allclose(p[:3] / p[:3].sum(), np.array([2.5, 1.5, 0.5]) / 4.5, rtol=1e-13)
    # p(U_n | z) is normalized and E[a U (U+τ)^{σ-1}] / n = p(new | z)
    dens = lambda u: float(jnp.exp(d.log_posterior_u(u, z)))  # noqa: E731
    total, _ = integrate.quad(dens, 0, np.inf, epsabs=0, epsrel=1e-11, limit=200)
    mean_new, _ = integrate.quad(
        lambda u: dens(u) * u * (u + 1.0) ** -0.5 / 6, 0, np.inf, epsabs=0, epsrel=1e-11
    )
    np.testing.assert_allclose(total, 1.0, atol=1e-9)
    np.testing.assert_allclose(mean_new, 0.382972894109618, atol=1e-9)

    # plug-in Û = mode of log U (spec §3.4): p(new) = 0.36353013 (fact 9)
    def h1(s):  # h'(s) for m = 6, K = 3, (a, σ, τ) = (1, 0.5, 1)
        w = np.exp(s) / (np.exp(s) + 1.0)
        return 6.0 - (6.0 - 1.5) * w - w * (np.exp(s) + 1.0) ** 0.5

    u_hat = np.exp(optimize.brentq(h1, -20, 20, xtol=1e-14))
    np.testing.assert_allclose(d.predictive(z, u_hat)[3], 0.36353013, atol=1e-8)


def test_predictive_with_u_is_the_urn_of_eq_5():
    d = NGGP(2.0, 0.3, 0.5, num_points=5)
    z = jnp.array([0, 0, 1, 0, 2])
    p = d.predictive(z, 1.7)
    w = np.array([3 - 0.3, 1 - 0.3, 1 - 0.3, 2.0 * (1.7 + 0.5) ** 0.3])
    np.testing.assert_allclose(p[:4], w / w.sum(), rtol=1e-13)
    assert p[4] == 0.0
    dp = NGGP(2.0, 0.0, 0.5, num_points=5)
    np.testing.assert_allclose(dp.predictive(z), np.array([3, 1, 1, 2, 0, 0]) / 7, rtol=1e-12)


# ------------------------------------------------------------------------------------ sampling
SAMPLING = NGGP(
    jnp.array([1.0, 2.0, 1.5]),
    jnp.array([0.5, 0.0, 0.25]),
    jnp.array([1.0, 1.0, 0.0]),
    num_points=8,
)


@pytest.fixture(scope="module")
def draws():
    labels, (log_u,) = SAMPLING.sample_with_intermediates(random.PRNGKey(3), (20_000,))
    return np.asarray(labels), np.asarray(log_u)  # (S, 3, 8), (S, 3)


def test_sampled_num_clusters_match_exact(draws):
    labels, _ = draws
    # by projectivity the prefix of length m is a draw of a partition of m items
    k_path = np.maximum.accumulate(labels, axis=-1) + 1  # (S, 3, 8)
    mean = k_path.mean(0)
    se = k_path.std(0) / np.sqrt(len(labels)) + 1e-12
    assert np.all(np.abs(mean - np.asarray(SAMPLING.expected_num_clusters())) < 5 * se)


def test_sampled_cluster_sizes_match_exact(draws):
    labels, _ = draws
    z = partitions(8)  # 4140 partitions
    prob = np.exp(np.asarray(SAMPLING.log_prob(z[:, None, :])))  # (4140, 3)
    counts = np.stack([np.bincount(np.bincount(row), minlength=9)[1:9] for row in z])  # M_j
    exact = np.einsum("pj,pg->gj", counts, prob)  # E[M_j]
    sampled = np.asarray(cluster_sizes(labels))  # (S, 3, 8)
    m = np.stack([(sampled == j).sum(-1) for j in range(1, 9)], -1)  # (S, 3, 8)
    se = m.std(0) / np.sqrt(len(m))
    ok = np.abs(m.mean(0) - exact) < 5 * se + 1e-12
    assert np.all(ok | (exact < 1e-4)), (m.mean(0), exact)


def test_partition_frequencies_chi_square(draws):
    labels, _ = draws
    z = partitions(5)  # 52 cells, the prefixes of length 5
    prob = np.exp(
        np.asarray(
            NGGP(SAMPLING.mass, SAMPLING.sigma, SAMPLING.tau, num_points=5).log_prob(z[:, None, :])
        )
    )
    codes = {tuple(row): i for i, row in enumerate(z)}
    for g in range(3):
        observed = np.bincount([codes[tuple(r)] for r in labels[:, g, :5]], minlength=len(z))
        result = stats.chisquare(observed, prob[:, g] * len(labels))
        assert result.pvalue > 1e-4, (g, result)


def test_u_given_partition_is_exact(draws):
    labels, log_u = draws
    for g in range(3):
        k = num_clusters(labels[:, g])
        chosen = np.asarray(k) == 3
        d = NGGP(SAMPLING.mass[g], SAMPLING.sigma[g], SAMPLING.tau[g], num_points=8)
        z = jnp.array([0, 1, 2, 0, 0, 0, 0, 0])
        grid = np.linspace(-40, 15, 8001)
        dens = np.exp(np.asarray(d.log_posterior_u(np.exp(grid), z))) * np.exp(grid)
        cdf = integrate.cumulative_trapezoid(dens, grid, initial=0)
        np.testing.assert_allclose(cdf[-1], 1.0, atol=1e-6)
        result = stats.kstest(log_u[chosen, g], lambda x, c=cdf, t=grid: np.interp(x, t, c))
        assert result.pvalue > 1e-4, (g, result)


def test_sample_log_u_direct_draws_match_density():
    keys = random.split(random.PRNGKey(7), 4000)
    draw = jax.jit(jax.vmap(lambda key: nggp_sample_log_u(key, 50, 12, 3.0, 0.6, 0.2)))
    x = np.asarray(draw(keys))
    d = NGGP(3.0, 0.6, 0.2, num_points=50)
    z = jnp.asarray(np.r_[np.arange(12), np.zeros(38, int)])
    grid = np.linspace(-5, 15, 4001)
    dens = np.exp(np.asarray(d.log_posterior_u(np.exp(grid), z))) * np.exp(grid)
    cdf = integrate.cumulative_trapezoid(dens, grid, initial=0)
    assert stats.kstest(x, lambda t: np.interp(t, grid, cdf)).pvalue > 1e-4


# ------------------------------------------------------------------------------------ weights
def test_weights_and_left_out_mass():
    d = NGGP(jnp.array([2.0, 1.0]), jnp.array([0.5, 0.0]), jnp.array([1.0, 2.0]), num_points=3)
    w, rest = d.weights(random.PRNGKey(0), 200)
    assert w.shape == (2, 200)
    np.testing.assert_allclose(w.sum(-1) + rest, 1.0, atol=1e-12)
    assert np.all(np.diff(np.asarray(w), axis=-1) <= 0)
    # the left-out share is E[Σ_{j>K} J_j | J_K] = ∫_0^{J_K} θ ν(dθ) over the kept total
    jumps = GeneralizedGammaProcess(d.mass, d.sigma, d.tau).series(random.PRNGKey(0), 200)
    for g, (a, s, t) in enumerate([(2.0, 0.5, 1.0), (1.0, 0.0, 2.0)]):
        below, _ = integrate.quad(
            lambda x, a=a, s=s, t=t: a / special.gamma(1 - s) * x ** (-s) * np.exp(-t * x),
            0,
            float(jumps[g, -1]),
            epsabs=0,
            epsrel=1e-12,
        )
        np.testing.assert_allclose(rest[g], below / (float(jumps[g].sum()) + below), rtol=1e-9)
    assert rest[1] < 1e-30  # DP: the gamma jumps decay geometrically


# ------------------------------------------------------------------------------------ safety
def test_no_nan_over_extreme_parameters_and_large_n():
    a, s, t = (
        np.array(v)
        for v in zip(
            *itertools.product([1e-3, 1.0, 1e3], [0.0, 1e-8, 0.5, 0.99], [1e-10, 1.0, 1e6]),
            strict=True,
        )
    )
    for n in [10, 1000, 100_000]:
        ks = np.array([1, 2, max(n // 2, 1), n])[:, None]
        log_v, err = nggp_log_v(n, ks, a, s, t)
        assert np.all(np.isfinite(log_v)) and np.all(np.asarray(err) < 1e-6), n
    big = NGGP(
        jnp.array([1e-3, 2.0, 1e3]),
        jnp.array([0.99, 0.3, 1e-8]),
        jnp.array([1e6, 1.0, 1e-10]),
        num_points=100_000,
    )
    z, (log_u,) = big.sample_with_intermediates(random.PRNGKey(0))
    assert np.all(np.asarray(big.support(z)))
    assert np.all(np.isfinite(big.log_prob(z))) and np.all(np.isfinite(log_u))
    assert np.all(np.isfinite(big.predictive(z)))


def test_float32_default():
    with jax.enable_x64(False):
        d = NGGP(1.0, 0.5, 1.0, num_points=6)
        z = jnp.array([0, 1, 0, 2, 1, 0])
        lp = d.log_prob(z)
        assert lp.dtype == jnp.float32
        np.testing.assert_allclose(lp, -6.457128218697212, rtol=1e-5)
        assert d.sample(random.PRNGKey(0), (3,)).dtype == jnp.int32


# ------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"mass": 0.0, "sigma": 0.5}, "mass"),
        ({"mass": 1.0, "sigma": 1.0}, "sigma"),
        ({"mass": 1.0, "sigma": -0.1}, "sigma"),
        ({"mass": 1.0, "sigma": 0.5, "tau": -1.0}, "tau"),
        ({"mass": 1.0, "sigma": 0.0, "tau": 0.0}, "tau"),
        ({"mass": np.nan, "sigma": 0.5}, "mass"),
    ],
)
def test_bad_parameters_raise(kwargs, name):
    with pytest.raises(ValueError, match=name):
        NGGP(**kwargs, num_points=4)


def test_bad_sizes_and_labels_raise():
    with pytest.raises(ValueError, match="num_points"):
        NGGP(1.0, 0.5, num_points=0)
    with pytest.raises(TypeError, match="num_points"):
        NGGP(1.0, 0.5, num_points=2.5)
    d = NGGP(1.0, 0.5, num_points=4)
    with pytest.raises(ValueError, match="labels"):
        d.predictive(jnp.array([1, 0, 0]))
    with pytest.raises(TypeError, match="labels"):
        d.log_posterior_u(1.0, jnp.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="value"):
        d.log_prob(jnp.array([0, 1, 0]))
    assert d.log_prob(jnp.array([0, 2, 1, 0])) == -jnp.inf  # not canonical
    assert d.log_prob(jnp.array([0, 1, 1, 0])) > -jnp.inf
