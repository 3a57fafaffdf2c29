"""CRMTopicSlice on the beta–negative-binomial topic model (models.bnb_combinatorial_clustering).

Prior-only moments (exact values), a Geweke successive-conditional test started from exact joint
prior draws, recovery of well-separated topics, ArviZ export, bad models. Monte-Carlo tolerances
are 4 standard errors (false-alarm rate about 6e-5 per check).
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import lax, random
from jax.scipy.special import digamma
from mc_checks import check_mean
from numpyro.infer import MCMC

from numpyro_bnp.arviz_compat import arviz, from_numpyro, group
from numpyro_bnp.diagnostics import count_parity
from numpyro_bnp.distributions import BetaProcess, GammaProcess
from numpyro_bnp.infer import CRMTopicSlice
from numpyro_bnp.infer.features.crm.topic_slice import _sweep
from numpyro_bnp.infer.features.crm.topics import document_tokens, token_counts
from numpyro_bnp.models import bnb_combinatorial_clustering

# tiny model: 3 documents of prior length 1.5, λ = 3 (Bondesson marks V ~ Beta(1, 2) move), V = 4
MASS, CONC, BETA, VOCAB = 0.5, 3.0, 0.5, 4
LENGTHS = np.array([1.5, 1.5, 1.5])
R = LENGTHS * (CONC - 1.0) / (MASS * CONC)  # r_d = N_d (λ-1)/(αλ) = 2
TINY = dict(doc_lengths=LENGTHS, vocab_size=VOCAB, mass=MASS, concentration=CONC)
TINY["topic_concentration"] = BETA


def expected_active(total):
    """E[# atoms used] = ∫ (1 - (1-θ)^R) ν(dθ) = αλ (ψ(λ + R) - ψ(λ)), ν = αλ θ^-1 (1-θ)^(λ-1)."""
    return MASS * CONC * float(digamma(CONC + total) - digamma(CONC))


# E[K+] (atoms used by some document) and E[# non-zero X_dk] (document-topic pairs)
ACTIVE = expected_active(R.sum())
PAIRS = sum(expected_active(r) for r in R)
# E[Σ_v ψ_kv²] under Dir(β 1_V); the topics are independent of the counts a priori
PURITY = (BETA + 1.0) / (VOCAB * BETA + 1.0)


# ---------------------------------------------------------------------------------------------
# prior-only: the model traced without word counts
# ---------------------------------------------------------------------------------------------
def test_prior_only_matches_digamma_formula():
    mcmc = MCMC(
        CRMTopicSlice(bnb_combinatorial_clustering, xi_scale=2.0, max_features=32),
        num_warmup=200,
        num_samples=800,
        num_chains=8,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), **TINY)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    assert not np.any(extra["saturated"])
    assert 0.1 < float(extra["accept_marks"].mean()) < 0.99
    check_mean(extra["num_active"], ACTIVE)
    samples = mcmc.get_samples(group_by_chain=True)
    assert set(samples) == {"theta", "topics", "rates"}
    # rates | X ~ Gamma(r + X, θ) and X | rates ~ Poisson: E[π_dk] summed over the instantiated
    # atoms is not closed-form, but a document uses topic k only where its rate is positive
    live = np.asarray(samples["theta"]) > 0
    assert np.all((np.asarray(samples["rates"]) > 0) == live[..., None, :])
    assert np.allclose(np.asarray(samples["topics"]).sum(-1), live)


# ---------------------------------------------------------------------------------------------
# Geweke: exact joint prior draws, then successive-conditional steps (data | state, one sweep)
# ---------------------------------------------------------------------------------------------
NUM_CHAINS, NUM_STEPS, TOKENS, CAP = 128, 100, 40, 32


def exact_prior_state(kernel, template, rng):
    """One exact draw of the kernel's atoms, counts and topics from the joint prior.

    Arrivals ``Γ`` of a unit-rate Poisson process, marks ``P ~ U(0, 1)``, counts ``X_dk ~ NB(r_d,
    θ_k)`` for ``CAP`` atoms (an atom beyond them is used with probability below 1e-8) and topics
    ``ψ_k ~ Dir(β)``; the words come from :func:`regenerate_words`. Draws with a document longer
    than the token buffer are redrawn: that conditions on an event of prior probability below
    1e-3 per draw (the chains keep the lengths, so the conditioned joint is kept too; the bias of
    the checked moments is far below their standard errors).
    """
    while True:
        gamma = np.cumsum(rng.exponential(size=CAP))
        marks = rng.uniform(size=CAP)
        atoms = kernel.constants.atoms
        theta = np.asarray(atoms.theta(jnp.asarray(gamma), jnp.asarray(marks)))
        x = rng.negative_binomial(R[:, None], 1.0 - theta[None, :])  # failures: mean rθ/(1-θ)
        if x.sum(1).max() <= TOKENS:
            break
    used = np.flatnonzero(x.any(0))
    num_atoms = used.max() + 1 if used.size else 0
    assert num_atoms < CAP - 8
    live = np.arange(CAP) < num_atoms
    topics = rng.dirichlet(np.full(VOCAB, BETA), size=CAP) * live[:, None]
    z = dict(template.z, theta=jnp.asarray(theta * live), topics=jnp.asarray(topics))
    return template._replace(
        z=z,
        arrivals=jnp.asarray(np.where(live, gamma, 0.0)),
        marks=jnp.asarray(np.where(live, marks, 0.5)),
        counts=jnp.asarray(x, jnp.int32),
        num_atoms=jnp.asarray(num_atoms, jnp.int32),
        rng_key=random.PRNGKey(rng.integers(2**31)),  # independent chains
    )


def regenerate_words(key, state):
    """``(words, their topics) | X, ψ``: document ``d`` gets ``X_dk`` words from ``ψ_k``, in a
    uniformly random order (the tokens of a document are exchangeable: the kernel's target for
    the topics given the words is that of randomly ordered tokens). Returns the words and the
    state with their topics."""
    x, topics = state.counts, state.z["topics"]
    position = jnp.arange(TOKENS)

    def document(key, counts):
        k_order, k_words = random.split(key)
        ends = jnp.cumsum(counts)
        valid = position < ends[-1]
        order = jnp.argsort(jnp.where(valid, random.uniform(k_order, (TOKENS,)), 2.0))
        atom = jnp.minimum(jnp.searchsorted(ends, position[order], side="right"), CAP - 1)
        words = random.categorical(k_words, jnp.log(topics[atom]), axis=-1)
        return jnp.where(valid, words, -1).astype(jnp.int32), jnp.where(valid, atom, 0)

    words, allocation = jax.vmap(document)(random.split(key, x.shape[0]), x)
    return words, state._replace(allocation=allocation.astype(jnp.int32))


def test_geweke_successive_conditional_keeps_the_joint():
    # Both steps keep every document's length, so each chain stays on its lengths: started from
    # exact joint prior draws (independent chains), every later state is again a joint prior
    # draw. Chains are i.i.d., so the standard error comes from the spread of the chain means.
    kernel = CRMTopicSlice(bnb_combinatorial_clustering, xi_scale=2.0, max_features=CAP)
    template_counts = np.zeros((len(R), VOCAB), np.int64)
    template_counts[0, 0] = TOKENS  # the token buffer holds TOKENS words per document
    kwargs = {k: v for k, v in TINY.items()}
    template = kernel.init(random.PRNGKey(0), 0, None, (template_counts,), kwargs)
    rng = np.random.default_rng(1)
    states = [exact_prior_state(kernel, template, rng) for _ in range(NUM_CHAINS)]
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    s_dirichlet = PURITY

    def step(state, key):
        words, state = regenerate_words(key, state)
        state = _sweep(kernel.constants, words, state)  # one sweep on these words
        x, topics = state.counts, state.z["topics"]
        active = jnp.any(x > 0, axis=0)
        purity = jnp.sum(jnp.where(active, jnp.sum(topics**2, -1) - s_dirichlet, 0.0))
        return state, (state.num_active, jnp.count_nonzero(x), purity, state.saturated)

    def chain(state, key):
        return lax.scan(step, state, random.split(key, NUM_STEPS))[1]

    keys = random.split(random.PRNGKey(2), NUM_CHAINS)
    k_plus, pairs, purity, saturated = jax.jit(jax.vmap(chain))(states, keys)
    assert not np.any(saturated)
    for draws, truth in ((k_plus, ACTIVE), (pairs, PAIRS), (purity, 0.0)):
        means = np.asarray(draws, np.float64).mean(1)
        se = means.std(ddof=1) / np.sqrt(NUM_CHAINS)
        assert abs(means.mean() - truth) < 4 * se, (means.mean(), truth, se)


# ---------------------------------------------------------------------------------------------
# log_joint: the log density of the sampler's target at its state
# ---------------------------------------------------------------------------------------------
def test_log_joint_is_the_collapsed_log_density_at_the_state():
    """``log_joint`` = atoms (``-Γ_K``, Bondesson) + ``Σ log NB(X_dk | r_d, θ_k)`` (the rates
    integrated out) + ``Σ_k log Dir(ψ_k; β)`` + the tokens' words and topics given ``X``
    (``Σ log ψ_{z w} + Σ log X_dk! - Σ log y_dv!``) - Λ, from SciPy (NumPyro's
    ``NegativeBinomialProbs`` is off by 1e-6 here) and NumPyro's ``Dirichlet``."""
    from scipy import integrate, stats
    from scipy.special import gammaln

    counts = np.random.default_rng(5).poisson(1.5, size=(len(R), VOCAB))
    kernel = CRMTopicSlice(bnb_combinatorial_clustering, xi_scale=2.0, max_features=16)
    args = (jnp.asarray(counts),)
    state = kernel.init(random.PRNGKey(0), 0, None, args, TINY)
    sweep = jax.jit(lambda s: kernel.sample(s, args, TINY))
    c = MASS * CONC  # Bondesson: θ = V e^{-Γ/c}, V ~ Beta(1, λ - 1)

    def log_nu(t):
        return np.log(MASS * CONC) - np.log(t) + (CONC - 1.0) * np.log1p(-t)

    for _ in range(6):
        state = sweep(state)
        k = int(state.num_atoms)
        theta = np.asarray(state.z["theta"][:k])
        x, topics = np.asarray(state.counts[:, :k]), np.asarray(state.z["topics"][:k])
        words, topic_of = document_tokens(counts), np.asarray(state.allocation)
        valid = words >= 0
        last = float(state.arrivals[k - 1])
        rho = np.exp(-last / c)
        lam = integrate.quad(
            lambda t, rho=rho: (1.0 - (1.0 - rho * t) ** R.sum()) * np.exp(log_nu(t)),
            0.0,
            1.0,
            limit=200,
            epsabs=1e-13,
        )[0]
        tokens = np.log(topics[topic_of[valid], words[valid]]).sum()
        ref = (
            -last
            + stats.nbinom.logpmf(x, R[:, None], 1.0 - theta).sum()  # NB(r_d, θ_k) counts
            + float(dist.Dirichlet(jnp.full(VOCAB, BETA)).log_prob(jnp.asarray(topics)).sum())
            + tokens
            + gammaln(x + 1.0).sum()
            - gammaln(counts + 1.0).sum()
            - lam
        )
        np.testing.assert_allclose(float(state.log_joint), ref, rtol=1e-9)


# ---------------------------------------------------------------------------------------------
# recovery of three well-separated topics; ArviZ
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def documents():
    rng = np.random.default_rng(0)
    truth = np.kron(np.eye(3), np.ones((1, 4))) / 4.0  # three topics on disjoint word blocks
    weights = rng.dirichlet(np.full(3, 0.5), size=40)
    counts = rng.poisson(30.0 * weights @ truth)
    return counts, truth


@pytest.fixture(scope="module")
def topic_run(documents):
    counts, _ = documents
    mcmc = MCMC(
        CRMTopicSlice(bnb_combinatorial_clustering, max_features=20),
        num_warmup=200,
        num_samples=100,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), counts, doc_lengths=counts.sum(1), vocab_size=12)
    return mcmc


def test_recovers_well_separated_topics(documents, topic_run):
    counts, truth = documents
    assert not np.any(topic_run.get_extra_fields()["saturated"])
    samples = {k: np.asarray(v) for k, v in topic_run.get_samples().items()}
    blocks = truth > 0
    aligned = []
    for theta, topics, rates in zip(
        samples["theta"], samples["topics"], samples["rates"], strict=True
    ):
        # expected words of each topic Σ_d π_dk: the three true topics each carry about a third
        # of the words; extra topics a few tokens at most
        main = rates.sum(0) / counts.sum() > 0.1
        if main.sum() != 3:
            continue
        error = np.abs(topics[main][:, None] - truth[None]).max(-1)  # (found, true)
        match = error.argmin(0)
        assert sorted(match) == [0, 1, 2]  # a permutation
        found = topics[main][match]
        assert np.all((found * blocks).sum(1) > 0.9)  # each on its own block of words
        assert np.all(theta[main] > 0)
        aligned.append(found)
    assert len(aligned) > 0.9 * len(samples["theta"]), len(aligned)
    # the posterior mean of each topic is about the empirical word frequencies of its block (data
    # noise makes them differ from the generating 1/4 by up to 0.06); its posterior sd is about
    # sqrt(0.25 * 0.75 / 300 words) = 0.025, so 0.03 is about 1 sd and 8 MCSE
    empirical = counts.sum(0) * blocks
    empirical = empirical / empirical.sum(1, keepdims=True)
    assert np.abs(np.mean(aligned, 0) - empirical).max() < 0.03


def test_arviz_export(topic_run, documents):
    counts, _ = documents
    data = from_numpyro(topic_run)
    posterior = group(data, "posterior")
    stats = group(data, "sample_stats")
    assert set(posterior.data_vars) == {"theta", "topics", "rates"}
    assert posterior["rates"].shape == (2, 100, 40, 20)
    # the log-likelihood ArviZ computes by re-running the model = the kernel's own
    loglik = group(data, "log_likelihood")["counts"].values
    np.testing.assert_allclose(
        loglik.reshape(2, 100, -1).sum(-1), stats["log_likelihood"].values, rtol=1e-8
    )
    az = arviz()
    for name in ("parity", "num_active"):
        values = stats[name].values
        assert float(np.asarray(az.ess(values))) > 0
        assert np.isfinite(float(np.asarray(az.rhat(values))))
    assert np.array_equal(np.asarray(group(data, "observed_data")["counts"].values), counts)


def test_grow_pads_the_topic_state(documents, topic_run):
    counts, _ = documents
    kernel = topic_run.sampler
    state = kernel.grow(jax.tree.map(lambda x: x[:1], topic_run.last_state), 24)
    assert state.z["rates"].shape == (1, 40, 24) and state.z["topics"].shape == (1, 24, 12)
    assert state.counts.shape == (1, 40, 24)
    assert np.array_equal(state.counts[0, :, :20], topic_run.last_state.counts[0])
    kwargs = dict(doc_lengths=counts.sum(1), vocab_size=12)
    state = jax.jit(lambda s: kernel.sample(s, (counts,), kwargs))(state)
    state = jax.tree.map(lambda x: x[0], state)
    words = jnp.asarray(document_tokens(counts))
    assert np.array_equal(token_counts(words, state.allocation, 24), state.counts)
    assert np.array_equal(state.counts.sum(1), counts.sum(1))
    assert state.parity == count_parity(state.counts)


# ---------------------------------------------------------------------------------------------
# bad models
# ---------------------------------------------------------------------------------------------
def topic_sites(counts, word_dist, prior=None, topic_prior=None):
    theta = numpyro.sample("theta", prior or BetaProcess(1.0, 1.5, truncation=5))
    odds = theta / (1.0 - theta) if prior is None else theta
    topics = numpyro.sample(
        "topics", (topic_prior or dist.Dirichlet(jnp.ones(3))).expand([5]).to_event(1)
    )
    rates = numpyro.sample("rates", dist.Gamma(1.0, 1.0 / odds).expand([4, 5]).to_event(2))
    numpyro.sample("counts", word_dist(rates @ topics).to_event(2), obs=counts)


def binomial_words(counts):
    topic_sites(counts, lambda mean: dist.Binomial(10, jnp.minimum(mean, 1.0)))


def gamma_process_rates(counts):
    topic_sites(counts, dist.Poisson, prior=GammaProcess(1.0, truncation=5))


def shifted_poisson_words(counts):
    topic_sites(counts, lambda mean: dist.Poisson(mean + 1.0))


@pytest.mark.parametrize(
    "model, match",
    [
        (binomial_words, "Poisson word counts with mean rates @ topics; site 'counts' is Binomial"),
        (
            gamma_process_rates,
            "rate site 'rates' .* BetaProcess prior, but 'theta' is GammaProcess",
        ),
        (shifted_poisson_words, "the Poisson site 'counts' with mean rates @ topics"),
    ],
)
def test_bad_topic_models_name_the_site(model, match):
    mcmc = MCMC(CRMTopicSlice(model), num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(ValueError, match=match):
        mcmc.run(random.PRNGKey(0), np.ones((4, 3)))


def test_bad_word_counts_and_lengths():
    mcmc = MCMC(CRMTopicSlice(bnb_combinatorial_clustering), num_warmup=1, num_samples=1)
    with pytest.raises(ValueError, match="site 'counts' must be non-negative integers"):
        mcmc.run(random.PRNGKey(0), np.full((2, 3), 0.5), doc_lengths=[1.0, 1.0], vocab_size=3)
    # the model rejects a zero length first (even without NumPyro's own validation)
    with (
        numpyro.validation_enabled(False),
        pytest.raises(ValueError, match="doc_lengths must be finite"),
    ):
        mcmc.run(random.PRNGKey(0), np.ones((2, 3)), doc_lengths=[3.0, 0.0], vocab_size=3)
