"""ADF-NRM and EP-NRM against independent references.

* σ = 0: step for step equal to Lin's (2013) sequential variational DP algorithm, written here in
  NumPy/SciPy from the paper's description (responsibilities ∝ soft counts and the mass,
  Dirichlet–multinomial predictives), with the E[K_n] recursion written out separately;
* τ = 0 with the log-mode plug-in: ``a Û^σ = σ E[K]`` (the Pitman–Yor(σ, 0) urn);
* the exact plug-in predictive values of the spec (mode of log U and of U);
* the soft-count identities, the threshold ε ≥ σ, a single-cluster stream, recovery of known
  clusters, exchangeability over orders; EP with no pass equals ADF, EP passes raise the
  leave-one-out score; bad input, capacity growth and resume as for the other streaming engines.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from jax import random
from scipy.special import gammaln, logsumexp

from numpyro_bnp import models
from numpyro_bnp._math import nggp_log_new_weight
from numpyro_bnp.infer import ADFNRM, EPNRM, BadBatchError

VOCAB = 30
DOCS = dict(vocab_size=VOCAB, concentration=0.5, max_clusters=8)
GAUSS = dict(dim=2, sigma_mu=5.0, sigma_o=0.5, max_clusters=8)


def topic_corpus(seed, num_docs, num_topics=4, length=25):
    """Documents from well-separated topics (disjoint word blocks plus a little noise)."""
    rng = np.random.default_rng(seed)
    topics = np.full((num_topics, VOCAB), 0.02)
    block = VOCAB // num_topics
    for k in range(num_topics):
        topics[k, k * block : (k + 1) * block] = 1.0
    topics /= topics.sum(1, keepdims=True)
    labels = rng.integers(num_topics, size=num_docs)
    lengths = rng.integers(length // 2, 2 * length, size=num_docs)
    docs = np.stack([rng.multinomial(n, topics[k]) for n, k in zip(lengths, labels, strict=True)])
    return docs, labels


def gaussian_data(seed, num):
    rng = np.random.default_rng(seed)
    centres = np.array([[-6.0, 0.0], [6.0, 0.0], [0.0, 7.0]])
    labels = rng.integers(3, size=num)
    return centres[labels] + 0.5 * rng.normal(size=(num, 2)), labels


@pytest.fixture(scope="module")
def corpus():
    return topic_corpus(0, 120)


@pytest.fixture(scope="module")
def dp_engine():
    return ADFNRM(models.nggp_multinomial_mixture, new_cluster_threshold=0.05)


@pytest.fixture(scope="module")
def ig_engine():
    return ADFNRM(models.nggp_multinomial_mixture)  # ε = σ = 0.5


# ------------------------------------------------------------------ σ = 0: Lin (2013)


def dirichlet_multinomial_logpmf(x, lam):
    """log ∫ Mult(x | θ) Dir(θ | λ) dθ for dense counts x (V,), with λ (K, V)."""
    n = x.sum()
    coef = gammaln(n + 1) - gammaln(x + 1).sum()
    return (
        coef
        + gammaln(lam.sum(-1))
        - gammaln(lam.sum(-1) + n)
        + (gammaln(lam + x) - gammaln(lam)).sum(-1)
    )


def lin_sequential_dp(docs, mass, lam0, eps):
    """Lin (2013), *Online learning of nonparametric mixture models via sequential variational
    approximation*: for each document, ρ_k ∝ (Σ past ρ_k) · predictive under cluster k and
    ρ_new ∝ mass · predictive under the prior; a new cluster when ρ_new > eps, else ρ_new is
    dropped and ρ renormalised; the clusters absorb the document with weight ρ_k. Also the
    expected number of occupied clusters, Σ_k (1 - Π_i (1 - ρ_ik)) (independent marginals)."""
    lam = np.zeros((0, docs.shape[1]))
    counts = np.zeros(0)
    resp_history = []
    for x in docs:
        log_new = np.log(mass) + dirichlet_multinomial_logpmf(x, np.full((1, len(x)), lam0))[0]
        if len(counts):
            log_old = np.log(counts) + dirichlet_multinomial_logpmf(x, lam)
            logits = np.append(log_old, log_new)
            rho = np.exp(logits - logsumexp(logits))
        else:
            rho = np.array([1.0])
        if rho[-1] > eps or not len(counts):
            lam = np.vstack([lam, np.full(len(x), lam0)])
            counts = np.append(counts, 0.0)
        else:
            rho = rho[:-1] / rho[:-1].sum()
        lam = lam + rho[:, None] * x
        counts = counts + rho
        resp_history.append(rho)
    # E[K_n] from all responsibilities at once (not the recursion)
    width = len(counts)
    padded = np.array([np.pad(r, (0, width - len(r))) for r in resp_history])
    occupied = 1 - np.cumprod(1 - np.minimum(padded, 1 - 1e-16), axis=0)
    return lam, counts, padded, occupied.sum(1)


def test_sigma_zero_equals_lin_2013_step_for_step(corpus, dp_engine):
    docs, _ = corpus
    docs = docs[:60]
    kwargs = dict(DOCS, mass=0.7, sigma=0.0)
    state = dp_engine.init(None, **kwargs)
    step = jax.jit(dp_engine.update)
    rows = dp_engine.check_batch(docs)
    resp, expected_k = [], []
    for i in range(len(docs)):
        new, info = step(state, jax.tree.map(lambda a, i=i: a[i], rows))
        resp.append(np.asarray(new.counts - state.counts))
        expected_k.append(float(info.num_clusters))
        state = new
    lam, counts, lin_resp, lin_k = lin_sequential_dp(docs, 0.7, 0.5, 0.05)
    k = len(counts)
    assert int(state.active.sum()) == k >= 3
    np.testing.assert_allclose(np.array(resp)[:, :k], lin_resp, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(state.counts)[:k], counts, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(state.params.concentration)[:k], lam, rtol=1e-10)
    np.testing.assert_allclose(expected_k, lin_k, rtol=1e-9)


# ------------------------------------------------------------------ the plug-in Û


def test_new_cluster_weight_plug_in_values():
    """Spec facts (a, σ, τ) = (1, ½, 1), n = 6 in K = 3 blocks: the exact p(new) is 0.382973;
    the log-mode plug-in gives 0.36353013, the mode of U 0.31337244 (mpmath); σ = 0 gives the
    mass; the weight is invariant under (a, τ) → (a c^σ, τ / c)."""
    for mode, want in (("log", 0.36353013), ("linear", 0.31337244)):
        log_w, _ = nggp_log_new_weight(6, 3, 1.0, 0.5, 1.0, mode=mode)
        weight = float(np.exp(log_w))
        assert weight / (weight + 6 - 3 * 0.5) == pytest.approx(want, abs=1e-8)
    assert float(nggp_log_new_weight(5, 2.0, 1.3, 0.0, 2.0)[0]) == pytest.approx(np.log(1.3))
    c = 3.0
    plain = nggp_log_new_weight(7, 3.3, 1.0, 0.5, 1.0)[0]
    scaled = nggp_log_new_weight(7, 3.3, c**0.5, 0.5, 1 / c)[0]
    assert float(plain) == pytest.approx(float(scaled), abs=1e-12)
    # no mode of U for one point: Û = 0, the weight is a τ^σ
    log_w, log_u = nggp_log_new_weight(1, 1.0, 1.3, 0.5, 2.0, mode="linear")
    assert float(log_u) == -np.inf
    assert float(log_w) == pytest.approx(np.log(1.3) + 0.5 * np.log(2.0))


def test_log_mode_is_the_root_of_the_concave_objective():
    """h'(log Û) = 0 for h(s) = m s + (K̄σ - m) log(e^s + τ) - a/σ (e^s + τ)^σ, by finite
    differences of h written out here."""
    m, k_bar, a, s_, t = 40.0, 7.3, 2.0, 0.4, 0.7

    def h(s):
        return m * s + (k_bar * s_ - m) * np.log(np.exp(s) + t) - a / s_ * (np.exp(s) + t) ** s_

    _, log_u = nggp_log_new_weight(m, k_bar, a, s_, t)
    x, d = float(log_u), 1e-5
    assert (h(x + d) - h(x - d)) / (2 * d) == pytest.approx(0.0, abs=1e-6)
    assert h(x) > h(x + 0.1) and h(x) > h(x - 0.1)


def test_tau_zero_log_mode_gives_the_pitman_yor_urn(corpus):
    """τ = 0: a Û^σ = σ E[K] exactly at every step (spec fact 11)."""
    docs, _ = corpus
    engine = ADFNRM(models.nggp_multinomial_mixture)
    res = engine.run(None, docs[:50], **DOCS, mass=1.3, sigma=0.4, tau=0.0, progress_bar=False)
    k_before = res.traces["num_clusters"][:-1]
    a_u_sigma = 1.3 * np.exp(0.4 * res.traces["log_u"][1:])
    np.testing.assert_allclose(a_u_sigma, 0.4 * k_before, rtol=1e-10)


# ------------------------------------------------------------------ identities and recovery


def test_soft_count_identities_and_the_threshold(corpus, ig_engine):
    """Σ_k E[n_k] = n; 1 <= E[K_n] <= n, non-decreasing; every instantiated cluster keeps
    E[n_k] > σ (ε = σ = ½); one-hot data give integer counts."""
    docs, _ = corpus
    res = ig_engine.run(None, docs, **DOCS, mass=1.0, sigma=0.5, progress_bar=False)
    assert res.cluster_sizes.sum() == pytest.approx(len(docs), rel=1e-10)
    k = res.traces["num_clusters"]
    assert np.all(k >= 1 - 1e-12) and np.all(k <= res.time + 1e-12)
    assert np.all(np.diff(k) >= -1e-12)
    assert np.all(res.cluster_sizes > 0.5)
    with pytest.raises(ValueError, match="new_cluster_threshold must be at least"):
        ADFNRM(models.nggp_multinomial_mixture, new_cluster_threshold=0.2).init(
            None, **DOCS, mass=1.0, sigma=0.5
        )


@pytest.fixture(scope="module")
def gaussian_engine():
    return ADFNRM(models.nggp_normal_mixture)


def test_single_cluster_stream_opens_one_cluster(gaussian_engine):
    """Points from one Gaussian (noise as in the model): one cluster holds them all."""
    data = np.array([3.0, -2.0]) + 0.5 * np.random.default_rng(1).normal(size=(80, 2))
    res = gaussian_engine.run(None, data, **GAUSS, mass=1.0, sigma=0.5, progress_bar=False)
    assert len(res.cluster_sizes) == 1
    assert res.cluster_sizes[0] == pytest.approx(80)
    assert res.num_clusters == pytest.approx(1.0)


def test_recovers_known_gaussian_clusters(gaussian_engine):
    """Three well-separated clusters: three clusters hold all but 2 % of the points (ADF may
    keep a small cluster opened early), labels recovered (ARI), a held-out score that improves
    with more data."""
    from sklearn.metrics import adjusted_rand_score

    data, _ = gaussian_data(2, 400)
    test, test_labels = gaussian_data(3, 200)
    kwargs = dict(GAUSS, mass=1.0, sigma=0.5)
    small = gaussian_engine.run(None, data[:20], **kwargs, progress_bar=False)
    res = gaussian_engine.run(None, data, **kwargs, progress_bar=False)
    sizes = np.sort(res.cluster_sizes)[::-1]
    assert sizes[:3].sum() > 0.98 * len(data) and np.all(sizes[:3] > 0.25 * len(data))
    pred = res.predict_proba(test)
    assert pred.shape == (200, len(sizes) + 1)
    np.testing.assert_allclose(pred.sum(1), 1.0, rtol=1e-12)
    assert adjusted_rand_score(test_labels, pred.argmax(1)) > 0.98
    assert res.log_predictive(test).mean() > small.log_predictive(test).mean()


def test_held_out_score_is_exchangeable_over_orders(corpus, ig_engine):
    """ADF depends on the order; the held-out score of six random orders differs by less
    than 1 % of its size, and the data's own order lies within their spread."""
    docs, _ = corpus
    test, _ = topic_corpus(9, 60)
    kwargs = dict(DOCS, mass=1.0, sigma=0.5)
    rng = np.random.default_rng(4)
    scores = [
        ig_engine.run(None, docs[rng.permutation(len(docs))], **kwargs, progress_bar=False)
        .log_predictive(test)
        .mean()
        for _ in range(6)
    ]
    own = ig_engine.run(None, docs, **kwargs, progress_bar=False).log_predictive(test).mean()
    spread = max(scores) - min(scores)
    assert spread < 0.01 * abs(np.mean(scores))
    assert min(scores) - spread <= own <= max(scores) + spread


def test_log_predictive_is_a_normalised_mixture(gaussian_engine):
    """The full predictive integrates to one over the plane (quadrature on a grid)."""
    data, _ = gaussian_data(5, 100)
    res = gaussian_engine.run(None, data, **GAUSS, mass=1.0, sigma=0.5, progress_bar=False)
    grid = np.linspace(-30, 30, 301)
    xx, yy = np.meshgrid(grid, grid)
    dens = np.exp(res.log_predictive(np.column_stack([xx.ravel(), yy.ravel()])))
    assert dens.sum() * (grid[1] - grid[0]) ** 2 == pytest.approx(1.0, abs=1e-4)


# ------------------------------------------------------------------ documents as rows


def test_sparse_dense_and_batches_agree(corpus, ig_engine):
    """A scipy.sparse matrix, dense rows and an iterator of batches with different numbers of
    distinct words per document give the same state."""
    docs, _ = corpus
    kwargs = dict(DOCS, mass=1.0, sigma=0.5)
    dense = ig_engine.run(None, docs, **kwargs, progress_bar=False, chunk_size=32)
    sparse = ig_engine.run(
        None, scipy.sparse.csr_matrix(docs), **kwargs, progress_bar=False, chunk_size=32
    )
    short = docs.copy()
    short[:40, 10:] = 0  # the first batch has fewer distinct words per document
    batches = [short[:40], scipy.sparse.csr_matrix(docs[40:90]), docs[90:]]
    pieces = ig_engine.run(None, iter(batches), **kwargs, progress_bar=False, chunk_size=32)
    for a, b in zip(jax.tree.leaves(dense.state), jax.tree.leaves(sparse.state), strict=True):
        np.testing.assert_array_equal(a, b)
    whole = np.vstack([short[:40], docs[40:]])
    once = ig_engine.run(None, whole, **kwargs, progress_bar=False, chunk_size=32)
    for a, b in zip(jax.tree.leaves(once.state), jax.tree.leaves(pieces.state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_bad_documents_are_rejected_and_the_state_is_kept(corpus, ig_engine, tmp_path):
    docs, _ = corpus
    kwargs = dict(DOCS, mass=1.0, sigma=0.5)
    first = ig_engine.run(None, docs[:50], **kwargs, progress_bar=False)
    bad = docs[50:60].astype(float)
    bad[3, 2] = 1.5
    for batch, match in (
        (bad, "document 3 holds 1.5"),
        (-docs[50:60], "non-negative integers"),
        (docs[50:60, :5], r"shape \(n, V=30\)"),
        (np.zeros((0, VOCAB)), "empty"),
    ):
        with pytest.raises(BadBatchError, match=match) as err:
            ig_engine.run(
                None, iter([docs[50:60], batch]), init_state=first.state, progress_bar=False
            )
        assert int(err.value.partial_state.num_seen) == 60  # the good batch was absorbed
    with pytest.raises(TypeError, match="word counts"):
        ig_engine.check_batch(np.full((2, VOCAB), "a"))


def test_resume_is_bit_for_bit(corpus, ig_engine, tmp_path):
    docs, _ = corpus
    kwargs = dict(DOCS, mass=1.0, sigma=0.5)
    whole = ig_engine.run(None, docs, **kwargs, progress_bar=False, chunk_size=16)
    half = ig_engine.run(None, docs[:50], **kwargs, progress_bar=False, chunk_size=16)
    path = tmp_path / "adf.npz"
    half.save(path)
    engine, state = ADFNRM.from_checkpoint(models.nggp_multinomial_mixture, path)
    rest = engine.run(None, docs[50:], init_state=state, progress_bar=False, chunk_size=16)
    for a, b in zip(jax.tree.leaves(whole.state), jax.tree.leaves(rest.state), strict=True):
        np.testing.assert_array_equal(a, b)
    again = ig_engine.load(path)
    np.testing.assert_array_equal(again.params.concentration, half.state.params.concentration)
    broken = half.state._replace(counts=-half.state.counts)
    with pytest.raises(ValueError, match="counts must be >= 0"):
        ig_engine.check_state(broken)


def test_capacity_grows_or_warns(gaussian_engine):
    """Twenty clusters from four slots: the grown run equals a run with enough slots; a fixed
    capacity warns."""
    rng = np.random.default_rng(6)
    centres = rng.normal(size=(20, 2)) * 40
    data = centres[rng.integers(20, size=300)] + 0.5 * rng.normal(size=(300, 2))
    kwargs = dict(GAUSS, mass=1.0, sigma=0.5)
    grown = gaussian_engine.run(None, data, **kwargs, progress_bar=False)
    fixed = ADFNRM(models.nggp_normal_mixture, max_clusters=64).run(
        None, data, **kwargs, progress_bar=False
    )
    assert ADFNRM.capacity(grown.state) > 16 and len(grown.cluster_sizes) >= 18
    np.testing.assert_allclose(grown.cluster_sizes, fixed.cluster_sizes, rtol=1e-10)
    full = ADFNRM(models.nggp_normal_mixture, max_clusters=4)
    with pytest.warns(RuntimeWarning, match="max_clusters"):
        truncated = full.run(None, data, **kwargs, progress_bar=False)
    # a full capacity keeps a valid state: each row's weights sum to one over the four clusters
    full.check_state(truncated.state)
    np.testing.assert_allclose(truncated.state.counts.sum(), 300, rtol=1e-6)
    assert float(truncated.state.num_clusters) <= 4


def test_to_arviz_weights_and_components(gaussian_engine):
    from numpyro_bnp import arviz_compat

    data, _ = gaussian_data(7, 150)
    res = gaussian_engine.run(None, data, **GAUSS, mass=1.0, sigma=0.5, progress_bar=False)
    idata = res.to_arviz(random.PRNGKey(0), num_draws=200, num_chains=2)
    post = arviz_compat.group(idata, "posterior")
    weights = np.asarray(post["weights"])
    assert weights.shape == (2, 200, len(res.cluster_sizes) + 1)
    # Dirichlet(E[n_k] - σ, ..., a(Û+τ)^σ): means within 4 standard errors
    conc = np.append(
        res.cluster_sizes - 0.5, np.exp(res.engine._log_prior_weights(res.state)[0][-1])
    )
    mean = conc / conc.sum()
    sd = np.sqrt(mean * (1 - mean) / (conc.sum() + 1) / 400)
    assert np.all(np.abs(weights.reshape(-1, len(conc)).mean(0) - mean) < 4 * sd + 1e-12)


# ------------------------------------------------------------------ EP


@pytest.fixture(scope="module")
def ep_runs(corpus):
    docs, _ = corpus
    kwargs = dict(DOCS, mass=1.0, sigma=0.5)
    adf = ADFNRM(models.nggp_multinomial_mixture).run(None, docs, **kwargs, progress_bar=False)
    ep0 = EPNRM(models.nggp_multinomial_mixture, num_passes=0).run(
        random.PRNGKey(0), docs, **kwargs, progress_bar=False
    )
    ep = EPNRM(models.nggp_multinomial_mixture, num_passes=4).run(
        random.PRNGKey(1), docs, **kwargs, progress_bar=False
    )
    return adf, ep0, ep


def test_ep_without_passes_equals_adf(ep_runs):
    adf, ep0, _ = ep_runs
    for a, b in zip(jax.tree.leaves(adf.state), jax.tree.leaves(ep0.state), strict=True):
        np.testing.assert_array_equal(a, b)


def test_ep_passes_raise_the_leave_one_out_score(ep_runs, corpus):
    _, _, ep = ep_runs
    docs, _ = corpus
    score = ep.traces["log_predictive"]
    assert len(score) >= 2 and np.all(np.diff(score) >= -1e-9)
    assert ep.cluster_sizes.sum() == pytest.approx(len(docs), rel=1e-9)
    assert np.all(ep.cluster_sizes >= 0.5)


def test_ep_cavity_then_absorb_is_the_identity(ep_runs, corpus):
    """Removing an observation's responsibilities and adding them back gives the state back."""
    adf, _, _ = ep_runs
    docs, _ = corpus
    engine = adf.engine
    obs = jax.tree.map(lambda a: a[0], engine.check_batch(docs[:1]))
    weights = jnp.where(adf.state.active, 0.3, 0.0)
    cavity = engine._remove(adf.state, obs, weights)
    family = engine._family
    back = family.update(cavity.params, family.stats(obs), weights)
    np.testing.assert_allclose(back.concentration, adf.state.params.concentration, rtol=1e-12)
    np.testing.assert_allclose(cavity.counts + weights, adf.state.counts, rtol=1e-12)


# ------------------------------------------------------------------ merges


def hard_state(engine, docs, slots, capacity=8):
    """An engine state whose slot ``slots[n]`` absorbed document ``n`` with weight one."""
    family, rows = engine._family, engine.check_batch(docs)
    weights = np.eye(capacity)[slots]
    step = lambda p, item: (family.update(p, family.stats(item[0]), item[1]), None)  # noqa: E731
    params = jax.jit(lambda r, w: jax.lax.scan(step, family.init_clusters(capacity), (r, w))[0])(
        rows, jnp.asarray(weights)
    )
    counts = weights.sum(0)
    log_empty = counts * np.log1p(-(1 - np.finfo(np.float64).eps))  # as the update clips r = 1
    return engine.empty(capacity)._replace(
        params=params,
        counts=jnp.asarray(counts),
        log_empty=jnp.asarray(log_empty),
        active=jnp.asarray(counts > 0),
        num_clusters=jnp.asarray(float((counts > 0).sum())),
        num_seen=jnp.asarray(len(docs), jnp.int32),
    )


def test_merge_gain_is_the_collapsed_log_joint_ratio(corpus, dp_engine):
    """σ = 0, two clusters of hard-assigned documents: the gain of merging them is the chain-rule
    log evidence ratio of their documents (Dirichlet–multinomial predictives, written here) plus
    the DP's log partition-probability ratio, read from NGGP(σ = 0).log_prob of the two
    labellings."""
    from numpyro_bnp.distributions import NGGP

    docs, labels = corpus
    chosen = np.concatenate([np.flatnonzero(labels == 0)[:10], np.flatnonzero(labels == 1)[:10]])
    slots = np.repeat([0, 1], 10)
    dp_engine.init(None, **DOCS, mass=2.0, sigma=0.0)
    state = hard_state(dp_engine, docs[chosen], slots)
    gain, partner = dp_engine._merge_gains(state)

    def evidence(group):
        lam, total = np.full(VOCAB, 0.5), 0.0
        for x in group:
            total += dirichlet_multinomial_logpmf(x, lam[None])[0]
            lam = lam + x
        return total

    data_term = evidence(docs[chosen]) - evidence(docs[chosen[:10]]) - evidence(docs[chosen[10:]])
    nggp = NGGP(2.0, 0.0, 1.0, num_points=20)
    prior_term = nggp.log_prob(jnp.zeros(20, jnp.int32)) - nggp.log_prob(jnp.asarray(slots))
    assert int(partner[0]) == 1 and int(partner[1]) == 0
    np.testing.assert_allclose(gain[:2], data_term + prior_term, rtol=1e-9)
    assert np.all(np.isneginf(gain[2:]))


def test_merges_join_duplicates_and_keep_the_creation_order(corpus, ig_engine):
    """A topic split over slots 0 and 1, two other topics in slots 2 and 3: one merge joins the
    halves into the posterior of the whole topic, the other clusters move down one slot and a
    fresh slot goes last; the soft counts add, ``ℓ`` adds and ``E[K]`` follows; no pair is
    worth merging afterwards."""
    docs, labels = corpus
    slots = np.full(len(labels), -1)
    slots[labels == 0] = np.arange(np.sum(labels == 0)) % 2  # one topic over slots 0 and 1
    slots[labels == 1], slots[labels == 2] = 2, 3
    keep = slots >= 0
    ig_engine.init(None, **DOCS, mass=1.0, sigma=0.5)
    state = hard_state(ig_engine, docs[keep], slots[keep])
    merged = jax.jit(ig_engine.merge_clusters)(state)
    want = hard_state(ig_engine, docs[keep], np.maximum(slots[keep] - 1, 0))
    np.testing.assert_array_equal(merged.active, want.active)
    np.testing.assert_allclose(merged.counts, want.counts, rtol=1e-12)
    for a, b in zip(jax.tree.leaves(merged.params), jax.tree.leaves(want.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    ell = np.asarray(state.log_empty)
    np.testing.assert_allclose(merged.log_empty[0], ell[0] + ell[1], rtol=1e-12)
    np.testing.assert_allclose(
        merged.num_clusters, 4 + np.expm1(ell[0]) + np.expm1(ell[1]) - np.expm1(ell[0] + ell[1])
    )
    assert float(jnp.max(ig_engine._merge_gains(merged)[0])) < 0


def test_merges_remove_the_duplicates_of_a_stream():
    """Bars topics and short documents: one ADF pass opens duplicate clusters of some bars;
    with merges every 100 documents the stream ends with the ten bars, each document in its
    bar's cluster (adjusted Rand index against the truth)."""
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(0)
    bars = np.concatenate([np.kron(np.eye(5), np.ones(5)), np.kron(np.ones(5), np.eye(5))])
    topics = (bars + 0.02) / (bars + 0.02).sum(1, keepdims=True)
    labels = rng.integers(10, size=1500)
    docs = np.stack([rng.multinomial(8, topics[k]) for k in labels])
    kwargs = dict(vocab_size=25, concentration=0.1, mass=1.0, sigma=0.5, progress_bar=False)
    res = ADFNRM(models.nggp_multinomial_mixture, merge_every=100).run(None, docs, **kwargs)
    assert np.sum(res.cluster_sizes > 20) == 10
    hard = res.predict_proba(docs)[:, :-1].argmax(1)
    assert adjusted_rand_score(labels, hard) > 0.98
    assert np.any(np.diff(res.traces["num_instantiated"]) < 0)  # clusters were merged


def test_options_are_validated():
    for kwargs, err in (
        (dict(u_estimate="mean"), ValueError),
        (dict(new_cluster_threshold=1.5), ValueError),
        (dict(max_clusters=0), ValueError),
        (dict(max_clusters=2.5), TypeError),
        (dict(merge_every=0), ValueError),
        (dict(merge_threshold=1.0), ValueError),
        (dict(merge_every=10, merge_threshold=float("nan")), ValueError),
    ):
        with pytest.raises(err):
            ADFNRM(models.nggp_multinomial_mixture, **kwargs)
    with pytest.raises(ValueError, match="num_passes"):
        EPNRM(models.nggp_multinomial_mixture, num_passes=-1)
    with pytest.raises(ValueError, match="damping"):
        EPNRM(models.nggp_multinomial_mixture, num_passes=1, damping=0.0)


def test_plot_cluster_sizes_draws_the_sizes_by_rank(ep_runs):
    import matplotlib

    matplotlib.use("Agg")
    from numpyro_bnp.plots import plot_cluster_sizes

    adf, _, ep = ep_runs
    fig = plot_cluster_sizes({"ADF": adf, "EP": ep})
    sizes_ax, time_ax = fig.axes
    ranks, sizes = sizes_ax.lines[0].get_data()
    np.testing.assert_array_equal(ranks, np.arange(1, len(sizes) + 1))
    np.testing.assert_array_equal(sizes, np.sort(adf.cluster_sizes)[::-1])
    np.testing.assert_array_equal(time_ax.lines[1].get_data()[1], ep.traces["num_clusters"])
    with pytest.raises(TypeError, match="dict"):
        plot_cluster_sizes([adf])


def test_constants_that_vanish_in_float32_are_refused():
    engine = ADFNRM(models.nggp_multinomial_mixture, dtype=np.float32)
    with pytest.raises(ValueError, match="component prior's concentration must be positive"):
        engine.init(None, **dict(DOCS, concentration=1e-50), mass=1.0, sigma=0.5)
    with pytest.raises(ValueError, match="mass of the NGGP site"):
        engine.init(None, **DOCS, mass=1e-60, sigma=0.5)


def test_results_pickle(ep_runs, corpus):
    import pickle

    adf, _, ep = ep_runs
    docs, _ = corpus
    for result in (adf, ep):
        again = pickle.loads(pickle.dumps(result))
        np.testing.assert_array_equal(
            again.log_predictive(docs[:5]), result.log_predictive(docs[:5])
        )
        assert again.engine.options == result.engine.options
