"""Conjugate families: predictives against NumPyro's own compound distributions, posteriors
against brute-force conjugate updates, KL and expectations against Monte Carlo, exact removal.

References are computed independently of the library: batch formulas in NumPy (float64) for the
posteriors, NumPyro distributions for the densities (SciPy and NumPy for the Gaussian densities
of the Monte-Carlo checks).
"""

import itertools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from family_cases import CASES, normal_case
from jax import lax, random
from scipy import stats
from scipy.special import logsumexp

from numpyro_bnp import families as fam

S = 20_000  # Monte-Carlo draws
K = 3  # clusters in the stacked tests
RNG = np.random.default_rng(0)  # reseeded per test (below)


@pytest.fixture(autouse=True)
def _rng_per_test(request):
    """Each test draws its data from a generator seeded by its own name, so the data do not
    depend on which tests ran before it in the same worker (pytest-xdist splits modules)."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


@jax.jit
def run_updates(family, params, stats, weights):
    """Sequential updates in a ``lax.scan`` (the family passes ``jit`` as a pytree)."""
    return lax.scan(lambda p, sw: (family.update(p, *sw), None), params, (stats, weights))[0]


@jax.jit
def log_predictive_all(family, params, obs):
    """``(N, K)``: every observation against every cluster."""
    return jax.vmap(lambda x: family.log_predictive(params, x))(obs)


def cluster(params, k):
    return jax.tree.map(lambda a: a[k], params)


def one(tree, n):
    return jax.tree.map(lambda a: a[n], tree)


def cluster_draws(draws, k):
    return jax.tree.map(lambda a: a[:, k], draws)


@jax.jit
def update(family, params, stats, weight):
    return family.update(params, stats, weight)


@jax.jit
def remove(family, params, stats, weight):
    return family.remove(params, stats, weight)


RHO = np.array([0.0, 0.35, 1.0])  # one interpolation weight per cluster


@jax.jit
def all_stats(family, obs):
    return jax.vmap(family.stats)(obs)


@jax.jit
def readouts(family, stacked, obs, key):
    """The read-outs the generic tests assert on, in one compiled program per family."""
    x2 = one(obs, 2)

    def read(params):
        lp = family.log_predictive(params, x2)
        return lp, family.expected_log_likelihood(params, x2), family.kl(params, family.prior)

    return {
        "log_pred": jax.vmap(lambda x: family.log_predictive(stacked, x))(obs),
        "means": family.mean(stacked),
        "mixed": family.interpolate(stacked, family.prior, RHO),
        "batched": read(stacked),
        "singles": lax.map(read, stacked),  # one cluster at a time
        "kl_self": family.kl(stacked, stacked),
        # S draws of every cluster: ``sample`` of the stack broadcast to batch shape (S, K)
        "draws": family.sample(
            key, jax.tree.map(lambda a: jnp.broadcast_to(a, (S, *a.shape)), stacked)
        ),
    }


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    """A family with its observations, weights (one column per cluster; the last column
    integers, i.e. duplicated data), the compiled read-outs and the brute-force references of
    every cluster and of the prior."""
    family, dense, obs, posterior = CASES[request.param](RNG)
    n = dense.shape[0]
    weights = RNG.uniform(size=(n, K))
    weights[:, 2] = np.round(weights[:, 2] * 3)
    stats = all_stats(family, obs)
    stacked = run_updates(family, family.init_clusters(K), stats, weights)
    out = readouts(family, stacked, obs, random.PRNGKey(1))
    out["scaled"] = run_updates(family, family.init_clusters(K), stats, weights * RHO)
    out = jax.tree.map(np.asarray, {**out, "stacked": stacked})
    return {
        "name": request.param,
        "family": family,
        "dense": dense,
        "obs": obs,
        "stats": stats,
        "weights": weights,
        "out": out,
        "refs": [posterior(weights[:, k]) for k in range(K)],
        "prior_ref": posterior(np.zeros(n)),
    }


def assert_tree_close(a, b, rtol=1e-10, atol=1e-12):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=atol)


# ------------------------------------------------------------------------------ generic truths


def test_log_predictive_matches_numpyro(case):
    """NumPyro's compound distributions (DirichletMultinomial, MultivariateNormal, ...) at the
    brute-force posterior. NumPyro's GammaPoisson and BetaBinomial go through JAX's ``betaln``,
    accurate to about 1e-6 in float64, hence their wider tolerance (and the exact SciPy checks
    below)."""
    atol = 1e-5 if case["name"] in ("gamma_poisson", "beta_bernoulli") else 1e-10
    for k, ref in enumerate(case["refs"]):
        want = ref["pred"](case["dense"])  # all observations at once
        np.testing.assert_allclose(case["out"]["log_pred"][:, k], want, rtol=1e-10, atol=atol)


def test_posterior_matches_brute_force(case):
    """Sequential weighted updates (rank-one for the Wishart scale) equal the batch formulas."""
    for k, ref in enumerate(case["refs"]):
        assert_tree_close(cluster(case["out"]["means"], k), ref["mean"])
        if "params" in ref:
            post = cluster(case["out"]["stacked"], k)
            if isinstance(post, fam.NormalWishartParams):
                post = (*post[:3], post.scale_tril @ post.scale_tril.T)
            assert_tree_close(tuple(post), ref["params"])


def test_remove_inverts_update(case):
    """EP cavities: removing an observation and adding it back reproduces the parameters, and
    removing what was added returns the cavity (to rounding)."""
    family, out = case["family"], case["out"]
    s, w = one(case["stats"], 0), case["weights"][0]
    cavity = remove(family, out["stacked"], s, w)
    assert_tree_close(update(family, cavity, s, w), out["stacked"])
    prior = family.init_clusters(K)
    assert_tree_close(remove(family, update(family, prior, s, w), s, w), prior)


def test_weights_add(case):
    """Tempered likelihoods multiply: weights 0.3 then 1.7 equal 2 (the datum twice)."""
    family, s = case["family"], one(case["stats"], 1)
    prior = family.init_clusters(K)
    twice = update(family, update(family, prior, s, 0.3), s, 1.7)
    assert_tree_close(twice, update(family, prior, s, 2.0))


@jax.jit
def absorb(family, params, obs, weights):
    return family.absorb(params, obs, weights)


def test_absorb_equals_row_updates(case):
    """A batch absorbed at once (the scatter added to Normal–Wishart / Normal–Gamma) equals
    the rows' sequential updates, with weights that differ per cluster (some zero)."""
    family = case["family"]
    weights = case["weights"].copy()
    weights[:, 0] = 0.0  # a cluster that gets nothing stays at the prior
    prior = family.init_clusters(K)
    sequential = run_updates(family, prior, case["stats"], weights)
    assert_tree_close(absorb(family, prior, case["obs"], weights), sequential, rtol=1e-9)


def test_interpolate_is_tempering(case):
    """q^ρ H_0^(1−ρ) with q ∝ H_0 Π p(x_n|θ)^{w_n} is the posterior of weights ρ w_n."""
    assert_tree_close(case["out"]["mixed"], case["out"]["scaled"])


def test_stacked_clusters_equal_single_clusters(case):
    """log_predictive, expected_log_likelihood and kl of the ``(K, ...)`` stack equal those of
    the clusters one by one."""
    out = case["out"]
    for batched, single in zip(out["batched"], out["singles"], strict=True):
        np.testing.assert_allclose(batched, single, rtol=1e-12)
    np.testing.assert_allclose(out["kl_self"], np.zeros(K), atol=1e-10)


@jax.jit
def normalizer_checks(family, stacked, stats, obs, split):
    """The read-outs of the log-normaliser tests: ``log_predictive − [A(η + t(x)) − A(η)]`` of
    one datum under each cluster and the prior; the chain-rule log evidence of the data with
    0/1 weights ``split`` and ``1 − split`` and of all of them; the two posteriors and their
    merge's log ratio."""
    x, s = one(obs, 2), one(stats, 2)
    params = jax.tree.map(lambda a, p: jnp.concatenate([a, p[None]]), stacked, family.prior)
    log_h = family.log_predictive(params, x) - (
        family.log_normalizer(family.update(params, s, 1.0)) - family.log_normalizer(params)
    )

    def evidence(weights):
        def step(carry, item):
            p, total = carry
            s_n, x_n, w = item
            total = total + w * family.log_predictive(p, x_n)
            return (family.update(p, s_n, w), total), None

        start = (family.prior, jnp.zeros((), family.dtype))
        return lax.scan(step, start, (stats, obs, weights))[0]

    (post_a, ev_a), (post_b, ev_b) = evidence(split), evidence(1 - split)
    post_all, ev_all = evidence(jnp.ones_like(split))
    return {
        "log_h": log_h,
        "merged": family.merge(post_a, post_b),
        "all": post_all,
        "ratio": family.log_merge_ratio(post_a, post_b),
        "evidence_ratio": ev_all - ev_a - ev_b,
    }


def test_log_normalizer_and_merges(case):
    """``A`` is the log-normaliser of the natural parameters: the predictive is
    ``h(x) exp(A(η + t(x)) − A(η))`` with the same ``h(x)`` under every cluster and the prior; the
    merge of the posteriors of two halves of the data is the posterior of all of it, and its log
    ratio equals the chain-rule log evidence ``log p(D) − log p(D_a) − log p(D_b)`` (sums of the
    predictives, themselves checked against NumPyro above)."""
    n = case["dense"].shape[0]
    split = (np.arange(n) % 3 == 0).astype(float)
    got = normalizer_checks(
        case["family"], case["out"]["stacked"], case["stats"], case["obs"], split
    )
    np.testing.assert_allclose(got["log_h"], got["log_h"][0], rtol=1e-10, atol=1e-10)
    assert_tree_close(got["merged"], got["all"], rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got["ratio"], got["evidence_ratio"], rtol=1e-9, atol=1e-9)


def test_kl_matches_monte_carlo(case):
    """KL(q_k || H_0) = E_q[log q − log H_0], within 5 Monte-Carlo standard errors."""
    k = 1
    theta = cluster_draws(case["out"]["draws"], k)
    ratio = case["refs"][k]["theta"](theta) - case["prior_ref"]["theta"](theta)
    se = ratio.std() / np.sqrt(S)
    assert abs(ratio.mean() - float(case["out"]["batched"][2][k])) < 5 * se


def test_expected_log_likelihood_matches_monte_carlo(case):
    """E_q[log p(x | θ)] against the likelihood's log density at posterior draws."""
    values = case["refs"][0]["lik"](cluster_draws(case["out"]["draws"], 0), case["dense"][2])
    se = values.std() / np.sqrt(S)
    assert abs(values.mean() - float(case["out"]["batched"][1][0])) < 5 * se


def test_sample_mean_matches_posterior_mean(case):
    """Each coordinate of the draws' mean within 5 standard errors of the brute-force mean."""
    want = jax.tree.leaves(case["refs"][2]["mean"])
    theta = cluster_draws(case["out"]["draws"], 2)
    for got, mean in zip(jax.tree.leaves(theta), want, strict=True):
        got = np.asarray(got)
        se = got.std(0) / np.sqrt(S)
        assert np.all(np.abs(got.mean(0) - mean) < 5 * se + 1e-12)


@jax.jit
def _update_and_predict(family, obs, weights):
    x = one(obs, 0)
    params = family.update(family.init_clusters(K), family.stats(x), weights)
    return params, family.log_predictive(params, x)


def test_dtype_follows_the_prior(case):
    """A float32 family stays float32 under float64 data and weights (fixed state dtypes)."""
    family = jax.tree.map(
        lambda a: a.astype(jnp.float32) if a.dtype == jnp.float64 else a, case["family"]
    )
    params, lp = _update_and_predict(family, case["obs"], np.ones(K))
    assert {a.dtype for a in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
    assert lp.dtype == jnp.float32


# ------------------------------------------------------------------------ Dirichlet–multinomial


def test_dirichlet_multinomial_pmf_sums_to_one():
    """All 6 count vectors with V = 3 and N = 2, at a non-symmetric posterior."""
    family = fam.DirichletMultinomial.from_prior(dist.Dirichlet(jnp.array([0.3, 1.0, 2.5])))
    params = update(family, family.prior, fam.sparse_counts(jnp.array([4, 0, 1])), 0.6)
    dense = [c for c in itertools.product(range(3), repeat=3) if sum(c) == 2]
    assert len(dense) == 6
    lp = log_predictive_all(family, params, fam.sparse_counts(np.array(dense)))
    assert float(logsumexp(np.asarray(lp))) == pytest.approx(0.0, abs=1e-13)


def test_split_documents_equal_numpyros_dirichlet_multinomial():
    """Split documents (small counts by the log-free product form, counts above SMALL_COUNT
    by log-gamma) against NumPyro's DirichletMultinomial at a posterior with concentrations
    from 1e-3 to 1e4, and updates equal to those of the unsplit documents."""
    from numpyro_bnp.infer.mixtures.documents import check_documents

    vocab = 12
    conc = np.geomspace(1e-3, 1e4, vocab)
    family = fam.DirichletMultinomial.from_prior(dist.Dirichlet(jnp.asarray(conc)))
    dense = RNG.poisson(np.geomspace(0.2, 30, vocab), size=(9, vocab))
    dense[0] = 0
    dense[0, 3] = fam.SMALL_COUNT + 1  # only a large count
    dense[1] = (dense[1] > 0).astype(int)  # only small counts
    split = check_documents(dense, vocab=vocab, dtype=np.float64)
    assert split.large_ids is not None and (split.counts <= fam.SMALL_COUNT).all()
    plain = fam.sparse_counts(dense)
    w = RNG.uniform(size=len(dense))
    post_split = run_updates(family, family.prior, split, w)
    post_plain = run_updates(family, family.prior, plain, w)
    np.testing.assert_allclose(post_split.concentration, post_plain.concentration, rtol=1e-13)
    np.testing.assert_allclose(post_split.total, post_plain.total, rtol=1e-13)
    got = jax.vmap(lambda x: family.log_predictive(post_split, x))(split)
    ref = dist.DirichletMultinomial(post_plain.concentration, total_count=dense.sum(1))
    np.testing.assert_allclose(got, ref.log_prob(jnp.asarray(dense)), rtol=1e-12, atol=1e-10)
    elbo = jax.vmap(lambda x: family.expected_log_likelihood(post_split, x))(split)
    elbo_plain = jax.vmap(lambda x: family.expected_log_likelihood(post_plain, x))(plain)
    np.testing.assert_allclose(elbo, elbo_plain, rtol=1e-12)


def test_sparse_counts_pads_documents_of_different_lengths():
    dense = np.array([[0, 2, 0, 1, 0], [0, 0, 0, 0, 0], [5, 0, 0, 0, 0]])
    docs = fam.sparse_counts(dense)
    assert docs.ids.shape == (3, 2) and docs.ids.dtype == jnp.int32
    rebuilt = np.zeros_like(dense)
    np.add.at(rebuilt, (np.arange(3)[:, None], np.asarray(docs.ids)), np.asarray(docs.counts))
    np.testing.assert_array_equal(rebuilt, dense)
    wide = fam.sparse_counts(dense, max_words=7)  # wider than the vocabulary: padded
    assert wide.ids.shape == (3, 7)
    family = fam.DirichletMultinomial.from_prior(dist.Dirichlet(jnp.full(5, 0.4)))
    np.testing.assert_allclose(
        log_predictive_all(family, family.prior, wide),
        log_predictive_all(family, family.prior, docs),
        rtol=1e-13,
    )


def test_dirichlet_multinomial_predictive_never_touches_the_vocabulary():
    """O(distinct words): no intermediate of the predictive or the update has V entries."""
    vocab = 100_003
    family = fam.DirichletMultinomial.from_prior(dist.Dirichlet(jnp.ones(vocab)))
    doc = fam.SparseCounts(jnp.array([5, 17, 99_999]), jnp.array([2, 1, 4]))
    params = family.init_clusters(2)
    jaxpr = jax.make_jaxpr(family.log_predictive)(params, doc)
    sizes = [np.prod(v.aval.shape) for eqn in jaxpr.eqns for v in eqn.outvars]
    assert max(sizes) < vocab
    update_jaxpr = jax.make_jaxpr(family.update)(params, doc, jnp.ones(2))
    scatter = [e for e in update_jaxpr.eqns if "scatter" in e.primitive.name]
    assert len(scatter) == 1 and scatter[0].invars[2].aval.shape == (2, 3)  # (K, L) updates


@pytest.mark.parametrize(
    ("counts", "kwargs", "message"),
    [
        ([[1, -1]], {}, "non-negative integers"),
        ([[0.5, 1.0]], {}, "non-negative integers"),
        (["a", "b"], {}, "non-negative integers"),
        ([[1, 2, 0]], {"max_words": 1}, "max_words must be at least .* 2, got 1"),
        (np.zeros((2, 0)), {}, r"shape \(\.\.\., V\)"),
    ],
)
def test_sparse_counts_rejects_bad_counts(counts, kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        fam.sparse_counts(counts, **kwargs)


def test_dirichlet_multinomial_float32_keeps_digits_at_large_concentrations():
    """λ ~ 1e6 (a cluster after millions of words): float32 agrees with float64 to 1e-3 where
    the difference of two float32 ``gammaln`` would be off by units."""
    conc = 1e6 * (1 + RNG.uniform(size=50))
    doc = fam.sparse_counts(np.bincount(RNG.integers(0, 50, size=30), minlength=50))
    values = []
    for dtype in (jnp.float32, jnp.float64):
        family = fam.DirichletMultinomial.from_prior(dist.Dirichlet(jnp.asarray(conc, dtype)))
        values.append(float(jax.jit(type(family).log_predictive)(family, family.prior, doc)))
    assert abs(values[0] - values[1]) < 1e-3


# ------------------------------------------------------------------------------------ Gaussians


@pytest.mark.parametrize(
    ("prior_full", "noise_full"), [(False, False), (False, True), (True, False)]
)
def test_normal_known_covariance_variants(prior_full, noise_full):
    """Diagonal and full prior or noise: predictive N(x; m, Σ + P⁻¹) and the mean of θ."""
    family, dense, obs, posterior = normal_case(RNG, prior_full, noise_full)
    weights = RNG.uniform(size=len(dense))
    post = run_updates(family, family.prior, all_stats(family, obs), weights)
    ref = posterior(weights)
    lp = log_predictive_all(family, post, obs)
    np.testing.assert_allclose(lp, ref["pred"](dense), rtol=1e-10)
    np.testing.assert_allclose(family.mean(post), ref["mean"], rtol=1e-10)
    assert (family.noise_tril is None) == (not prior_full and not noise_full)


def test_normal_wishart_kl_reference_value():
    """m1 = (0.3, −0.2), κ1 = 3, W1 = [[0.5, 0.1], [0.1, 0.8]], ν1 = 6 against m0 = 0, κ0 = 1,
    W0 = I, ν0 = 4: 0.937491 (closed form, confirmed by 200k Monte-Carlo draws)."""
    family = fam.NormalWishart.from_prior(
        dist.Wishart(4.0, scale_matrix=jnp.eye(2)), loc=jnp.zeros(2), kappa=1.0
    )
    w1 = np.array([[0.5, 0.1], [0.1, 0.8]])
    q = fam.NormalWishartParams(
        jnp.array(3.0),
        jnp.array([0.3, -0.2]),
        jnp.array(6.0),
        np.linalg.cholesky(np.linalg.inv(w1)),
    )
    kl = jax.jit(fam.NormalWishart.kl)(family, q, family.prior)
    assert float(kl) == pytest.approx(0.937491, abs=1e-6)


def test_normal_wishart_float32_far_from_the_origin():
    """2,000 points around 1000 · 1 in float32: the centred rank-one updates keep the scale
    matrix (about N · Var, a million times smaller than Σ x xᵀ) to 1e-4 relative. The mean is a
    float32 number near 1000 updated 2,000 times, each rounding it by at most half a unit in the
    last place (ulp): a random walk of standard deviation sqrt(n / 12) ulp, allowed 4 of them."""
    rng = np.random.default_rng(3)  # its own generator: the data must not depend on test order
    dim, n = 3, 2000
    m0 = np.full(dim, 1000.0)
    data = m0 + rng.normal(size=(n, dim)) * [1.0, 2.0, 0.5]
    weights = rng.uniform(size=n)
    prior = dist.Wishart(jnp.float32(dim + 1.0), scale_matrix=jnp.eye(dim, dtype=jnp.float32))
    family = fam.NormalWishart.from_prior(prior, loc=m0.astype(np.float32), kappa=np.float32(1))
    post = run_updates(family, family.prior, jnp.asarray(data, jnp.float32), weights)
    assert post.scale_tril.dtype == jnp.float32
    total = weights.sum()  # the centred batch formula, in float64
    mean = weights @ data / total
    centred = data - mean
    psi = np.eye(dim) + np.einsum("n,ni,nj->ij", weights, centred, centred)
    psi += total / (1 + total) * np.outer(mean - m0, mean - m0)
    loc = (m0 + total * mean) / (1 + total)
    got = np.asarray(post.scale_tril, np.float64) @ np.asarray(post.scale_tril, np.float64).T
    assert np.linalg.norm(got - psi) / np.linalg.norm(psi) < 1e-4
    rounding_sd = np.sqrt(n / 12) * np.spacing(np.float32(1000))
    np.testing.assert_allclose(np.asarray(post.loc, np.float64), loc, rtol=0, atol=4 * rounding_sd)


# ------------------------------------------------------------------------ Poisson and Bernoulli


def test_gamma_poisson_and_beta_bernoulli_exact_pmfs():
    """Against SciPy (negative binomial with p = b/(b+1); Bernoulli with p = a/(a+b)), and the
    Poisson predictive of a scalar-event prior sums to 1."""
    gp = fam.GammaPoisson.from_prior(dist.Gamma(2.5, 0.7))
    params = update(gp, gp.init_clusters(2), 3.0, jnp.array([0.4, 1.0]))
    x = np.arange(400.0)
    lp = np.asarray(log_predictive_all(gp, params, x))  # (400, 2)
    a, b = np.asarray(params.concentration), np.asarray(params.rate)
    np.testing.assert_allclose(
        lp[:20], stats.nbinom.logpmf(np.arange(20)[:, None], a, b / (b + 1)), rtol=1e-12
    )
    np.testing.assert_allclose(logsumexp(lp, axis=0), 0.0, atol=1e-12)
    bb = fam.BetaBernoulli.from_prior(dist.Beta(jnp.array([0.5, 2.0]), 1.5).to_event(1))
    params = update(bb, bb.prior, jnp.array([1.0, 0.0]), 0.8)
    a, b = np.asarray(params.concentration1), np.asarray(params.concentration0)
    p = a / (a + b)
    xs = np.array(list(itertools.product((0.0, 1.0), repeat=2)))
    want = stats.bernoulli.logpmf(xs, p).sum(-1)
    np.testing.assert_allclose(log_predictive_all(bb, params, xs), want, rtol=1e-12)


# ------------------------------------------------------------------------------------- bad priors


def test_a_plate_over_clusters_is_dropped():
    base = dist.Normal(0.0, 2.0).expand([3]).to_event(1)
    a = fam.NormalNormal.from_prior(base, noise_scale=0.5)
    b = fam.NormalNormal.from_prior(base.expand([7]), noise_scale=0.5)
    assert_tree_close(a, b, rtol=0)
    c = fam.DirichletMultinomial.from_prior(dist.Dirichlet(jnp.ones(4)).expand([5]))
    assert c.prior.concentration.shape == (4,)


EYE3 = jnp.eye(3)
NORMAL3 = dist.Normal(0.0, 1.0).expand([3]).to_event(1)


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (
            lambda: fam.DirichletMultinomial.from_prior(dist.Normal(0.0, 1.0)),
            TypeError,
            "prior must be a Dirichlet distribution .* got Normal",
        ),
        (
            lambda: fam.DirichletMultinomial.from_prior(jnp.ones(3)),
            TypeError,
            "prior must be a Dirichlet distribution .* got ArrayImpl",
        ),
        (
            lambda: fam.DirichletMultinomial.from_prior(dist.Dirichlet(jnp.ones((2, 3)))),
            ValueError,
            r"prior: its concentration must have a shape broadcasting to \(3,\) "
            r"\(one prior .*batch shape \(\).*got \(2, 3\)",
        ),
        (
            lambda: fam.NormalNormal.from_prior(dist.Gamma(1.0, 1.0), noise_scale=1.0),
            TypeError,
            "prior must be a Normal or MultivariateNormal distribution .* got Gamma",
        ),
        (
            lambda: fam.NormalNormal.from_prior(dist.Normal(jnp.zeros(3), 1.0), noise_scale=1.0),
            ValueError,
            r"prior must have 1 event axes \(\(D,\): use Normal",
        ),
        (
            lambda: fam.NormalNormal.from_prior(NORMAL3, noise_covariance=jnp.eye(2)),
            ValueError,
            r"noise_covariance must have shape \(3, 3\), got \(2, 2\)",
        ),
        (lambda: fam.NormalNormal.from_prior(NORMAL3), TypeError, "give exactly one"),
        (
            lambda: fam.NormalNormal.from_prior(NORMAL3, noise_scale=1.0, noise_covariance=EYE3),
            TypeError,
            "give exactly one",
        ),
        (
            lambda: fam.NormalNormal.from_prior(NORMAL3, noise_scale=-1.0),
            ValueError,
            "noise_scale must be positive",
        ),
        (
            lambda: fam.NormalNormal.from_prior(NORMAL3, noise_scale=jnp.ones(2)),
            ValueError,
            r"noise_scale must have a shape broadcasting to \(3,\), got \(2,\)",
        ),
        (
            lambda: fam.NormalNormal.from_prior(NORMAL3, noise_covariance=-EYE3),
            ValueError,
            "noise_covariance must be symmetric positive definite",
        ),
        (
            lambda: fam.NormalWishart.from_prior(dist.Gamma(1.0, 1.0), loc=0.0, kappa=1.0),
            TypeError,
            "precision_prior must be a Wishart distribution .* got Gamma",
        ),
        (
            lambda: fam.NormalWishart.from_prior(
                dist.Wishart(4.0, scale_matrix=EYE3), loc=jnp.zeros(2), kappa=1.0
            ),
            ValueError,
            r"loc must have a shape broadcasting to \(3,\), got \(2,\)",
        ),
        (
            lambda: fam.NormalWishart.from_prior(
                dist.Wishart(1.5, scale_matrix=EYE3), loc=0.0, kappa=1.0
            ),
            ValueError,
            "concentration .* must exceed D - 1 = 2, got 1.5",
        ),
        (
            lambda: fam.NormalWishart.from_prior(
                dist.Wishart(4.0, scale_matrix=EYE3), loc=0.0, kappa=0.0
            ),
            ValueError,
            "kappa must be positive",
        ),
        (
            lambda: fam.NormalGamma.from_prior(
                dist.Wishart(4.0, scale_matrix=EYE3), loc=0.0, kappa=1.0
            ),
            TypeError,
            "precision_prior must be a Gamma distribution .* got Wishart",
        ),
        (
            lambda: fam.NormalGamma.from_prior(dist.Gamma(1.0, 1.0), loc=0.0, kappa=1.0),
            ValueError,
            "precision_prior must have 1 event axes",
        ),
        (
            lambda: fam.GammaPoisson.from_prior(dist.Beta(1.0, 1.0)),
            TypeError,
            "prior must be a Gamma distribution .* got Beta",
        ),
        (
            lambda: fam.BetaBernoulli.from_prior(dist.Beta(jnp.ones(2), 1.0)),
            ValueError,
            r"prior: its concentration1 must have a shape broadcasting to \(\) .*got \(2,\)",
        ),
        (
            lambda: fam.BetaBernoulli.from_prior(dist.Gamma(1.0, 1.0)),
            TypeError,
            "prior must be a Beta distribution .* got Gamma",
        ),
    ],
)
def test_bad_priors_are_named(build, error, message):
    with pytest.raises(error, match=message):
        build()
