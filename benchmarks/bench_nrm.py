"""Benchmark of ADF / EP for NGGP mixtures of multinomials (Tank, Foti & Fox, AISTATS 2015).

    python benchmarks/bench_nrm.py              # Reuters, digits, synthetic corpus of 100,000 docs
    python benchmarks/bench_nrm.py --quick      # synthetic corpus of 5,000 docs, n in {1k, 5k}
    python benchmarks/bench_nrm.py --data reuters digits
    python benchmarks/bench_nrm.py --selfcheck  # only the checks of the NumPy reference (seconds)

Engines: :class:`numpyro_bnp.infer.ADFNRM` (assumed density filtering, one pass, the paper's
Algorithm 1, see docs/nrm.md) and :class:`numpyro_bnp.infer.EPNRM` (expectation propagation
after ADF) on :func:`numpyro_bnp.models.nggp_multinomial_mixture`, with the DP (σ = 0) and the
normalized inverse-Gaussian ("IG", σ = 1/2) priors, τ = 1. Where the library does not provide
them yet the rows are skipped with a message and the rest of the script runs. The engine calls
are in :func:`run_adf`, :func:`run_ep` and :func:`run_adf_gaussian`.

The naive reference (:class:`NumpyADF`) is an independent NumPy/SciPy implementation of the same
ADF step for Dirichlet–multinomial components, one document at a time in Python: the predictive
weights of the paper's Eq. (23) (max(E[n_k] − σ, 0) and a(Û + τ)^σ, Û the mode of log U,
the root of h'(s) = 0, by safeguarded Newton), the Dirichlet–multinomial predictive summed over
the document's distinct words, log-sum-exp responsibilities, the new-cluster threshold ε, soft
counts and the recursion E[K_n] = E[K_{n-1}] + Σ_k r_k exp(ℓ_k), ℓ_k = Σ_i log1p(−r_ik).
``--selfcheck`` checks it against a brute-force recomputation from the full history (for σ = 0
this is Lin's 2013 sequential variational DP) and checks the held-out scoring.

Data and what is printed (one table of figures and one of ratios per data set):

* Reuters (``lda.datasets.load_reuters``, 395 documents, vocabulary 4,258; ``pip install lda``):
  a fixed 80/20 train/test split; held-out log predictive per document, clusters, documents/s.
* scikit-learn digits as 64-word count documents (pixel intensities 0–16 are the counts), 80/20:
  NMI/ARI of the hard assignments of the training images (argmax of ``predict_proba``) against
  the digit labels, held-out log predictive; scikit-learn ``BayesianGaussianMixture`` (truncated
  DP, 50 full- or diagonal-covariance components) on the dequantised pixels as what users use
  today, and the engine with diagonal Gaussian components on the same pixels, its Normal–Gamma
  prior scaled by the data as scikit-learn scales its own (:func:`gaussian_prior`: the prior's
  cluster variance chosen on a validation split of the training images).
* A synthetic corpus at NYT-like scale: cluster labels from a Pitman–Yor(0.75, 1) Chinese
  restaurant process, topics θ_k ~ Dirichlet(0.05) over 8,000 words, lengths ~ Poisson(150) (about
  127 distinct words per document), held as scipy.sparse CSR; a random 2,000 held out (exchangeable
  with the training documents). At each training size n (a curve over n) the ADF/EP rows (EP and
  ADF with merges up to n = 5,000; one timed run from n = 20,000), the NumPy reference (at n =
  5,000 only: it is slow), and the oracle: the true partition of the n training documents with its
  Dirichlet posteriors and the generating Pitman–Yor urn weights, i.e. ground-truth-labelled
  cluster parameters. Topics this sparse over 8,000 words barely overlap, so the partition is
  recovered almost exactly (NMI ≈ 1) and the priors differ through the predictive weights, chiefly
  that of a new cluster.

Hyper-parameters (all options): GGP mass a = 1, τ = 1, threshold ε = 0.5 (≥ σ for both priors),
Dirichlet λ0 = 0.05 (Reuters, synthetic) and 0.2 (digits), ``max_clusters`` = 4,096.

Held-out scores are log p(x | N_x) of each test document under the full predictive mixture
(instantiated clusters and a new one), multinomial coefficient included, in nats per document.
"""

import argparse
import time
import warnings
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from _nrm_reference import (  # the benchmarks folder is on sys.path when the script runs
    NumpyADF,
    brute_force_adf,
    dm_log_marginals,
    log_mode_u,
    mixture_log_predictive,
    mixture_proba,
)
from scipy.special import gammaln

TAU = 1.0
PRIORS = (("DP", 0.0), ("IG", 0.5))
CHUNK = 256  # engine chunk size
EP_PASSES = (1, 5, 20)
MERGE_EVERY = 100  # documents between the merge rounds of the "ADF IG merges" rows
SINGLE_RUN_DOCS = 20_000  # from this training size on, each engine runs once (see _timed_run)

# synthetic corpus (the paper's §4.2 generator at the scale of its NYT experiment)
SYN_VOCAB, SYN_DISCOUNT, SYN_CONCENTRATION = 8_000, 0.75, 1.0
SYN_TOPIC_CONCENTRATION, SYN_MEAN_LENGTH = 0.05, 150.0
# default Dirichlet λ0 per data set (synthetic: the generator's; the others: the best of
# {0.01, 0.05, 0.2, 1} for the NumPy reference's held-out log predictive, both priors)
CONCENTRATION = {"reuters": 0.05, "digits": 0.2, "synthetic": SYN_TOPIC_CONCENTRATION}


class Hyper(NamedTuple):
    """Hyper-parameters shared by the engines and the reference (GGP mass a, Dirichlet λ0, ε)."""

    mass: float = 1.0
    concentration: float = SYN_TOPIC_CONCENTRATION
    threshold: float = 0.5
    max_clusters: int = 4096


# ============================================================================ engine calls
def _library():
    """``(ADFNRM, EPNRM, models)`` from numpyro_bnp; a class is None where it is not there yet."""
    try:
        from numpyro_bnp import infer, models
    except ImportError as err:  # pragma: no cover - the library itself missing
        print(f"numpyro_bnp not importable ({err}): engine rows skipped")
        return None, None, None
    adf, ep = getattr(infer, "ADFNRM", None), getattr(infer, "EPNRM", None)
    if getattr(models, "nggp_multinomial_mixture", None) is None:
        adf = ep = None
    return adf, ep, models


def _engine_kwargs(data, sigma, hyper, **sizes):
    """The model's arguments for a streaming engine: the model is traced for one row (its
    ``num_obs`` and ``max_clusters`` size that trace only); the engine's capacity grows."""
    return dict(
        mass=hyper.mass, sigma=sigma, tau=TAU, chunk_size=CHUNK, progress_bar=False, **sizes
    )


def _timed_run(engine, data, kwargs, seed):
    """Run on ``data`` twice: ``(result, s, cold s)``. The first (cold) run compiles the
    engine's chunk scan once per capacity it grows through (a few seconds each); the second
    reuses them, and its time is the one per document in the tables. From ``SINGLE_RUN_DOCS``
    documents on there is one run (the compilations are then a small part of it): its time is
    both."""
    import jax
    from jax import random

    t0 = time.perf_counter()
    out = engine.run(random.PRNGKey(seed), data, **kwargs)
    jax.block_until_ready(out.cluster_sizes)
    cold_s = time.perf_counter() - t0
    if data.shape[0] >= SINGLE_RUN_DOCS:
        return out, cold_s, cold_s
    t0 = time.perf_counter()
    result = engine.run(random.PRNGKey(seed), data, **kwargs)
    jax.block_until_ready(result.cluster_sizes)
    return result, time.perf_counter() - t0, cold_s


def run_adf(train, sigma, hyper, seed=0, merge_every=None):
    """``ADFNRM`` on ``train`` ((N, V) dense counts or CSR): ``(result, seconds, cold s)``."""
    adf, _, models = _library()
    engine = adf(
        models.nggp_multinomial_mixture,
        new_cluster_threshold=hyper.threshold,
        u_estimate="log_mode",
        merge_every=merge_every,
    )
    kwargs = _engine_kwargs(
        train, sigma, hyper, vocab_size=train.shape[1], concentration=hyper.concentration
    )
    return _timed_run(engine, train, kwargs, seed)


def run_ep(train, sigma, hyper, num_passes, seed=0):
    """``EPNRM`` (ADF then ``num_passes`` EP sweeps) on ``train``: ``(result, s, cold s)``."""
    _, ep, models = _library()
    engine = ep(
        models.nggp_multinomial_mixture,
        num_passes=num_passes,
        new_cluster_threshold=hyper.threshold,
        u_estimate="log_mode",
    )
    kwargs = _engine_kwargs(
        train, sigma, hyper, vocab_size=train.shape[1], concentration=hyper.concentration
    )
    del kwargs["chunk_size"]  # EP holds the data set: no chunks
    return _timed_run(engine, train, kwargs, seed)


def gaussian_model():
    """The library's NGGP mixture of Gaussians (diagonal preferred), or None."""
    _, _, models = _library()
    if models is None:
        return None
    for name in ("nggp_diagonal_gaussian_mixture", "nggp_gaussian_mixture"):
        if getattr(models, name, None) is not None:
            return name, getattr(models, name)
    return None


def _gaussian_engine(train, sigma, hyper, prior):
    """``ADFNRM`` on the library's Gaussian mixture and its keyword arguments for ``train``."""
    from numpyro_bnp.infer import ADFNRM

    _, model = gaussian_model()
    engine = ADFNRM(model, new_cluster_threshold=hyper.threshold, u_estimate="log_mode")
    kwargs = _engine_kwargs(train, sigma, hyper, dim=train.shape[1], **prior)
    return engine, kwargs


def run_adf_gaussian(train, sigma, hyper, prior, seed=0):
    """``ADFNRM``, Gaussian components with the Normal–Gamma ``prior`` (keyword arguments of the
    model), on ``train`` ((N, D) float): ``(result, s, cold s)``."""
    engine, kwargs = _gaussian_engine(train, sigma, hyper, prior)
    return _timed_run(engine, train, kwargs, seed)


# cluster variance relative to the data's, per dimension, tried by gaussian_prior
PRIOR_VARIANCE_SCALES = (1.0, 0.3, 0.1, 0.03, 0.01)


def gaussian_prior(train, sigma, hyper):
    """A data-scaled Normal–Gamma prior for the diagonal Gaussian mixture, as scikit-learn's
    ``BayesianGaussianMixture`` scales its priors by the data: ``m0`` the training mean, ``κ0 =
    0.1`` and precisions ``Gamma(1, s · var_d)`` (a cluster's expected precision ``1 / (s ·
    var_d)``). The scale ``s`` is chosen from :data:`PRIOR_VARIANCE_SCALES` by the log predictive
    of the last 20 % of ``train`` after a run on the first 80 % (the test set is not used).
    Returns ``(prior, s, validation log pred per row)``."""
    from jax import random

    cut = int(0.8 * len(train))
    fit, valid = train[:cut], train[cut:]
    mean, var = train.mean(0), np.maximum(train.var(0), 1e-6)
    best = None
    for scale in PRIOR_VARIANCE_SCALES:
        prior = dict(loc=mean, kappa=0.1, concentration=1.0, rate=scale * var)
        engine, kwargs = _gaussian_engine(fit, sigma, hyper, prior)
        result = engine.run(random.PRNGKey(0), fit, **kwargs)  # untimed: one run
        score = float(np.mean(np.asarray(result.log_predictive(valid))))
        if best is None or score > best[2]:
            best = (prior, scale, score)
    return best


# set to True if the engines' log_predictive leaves out log(N_x! / Π_v x_v!) (docs/nrm.md §5.1)
ENGINE_OMITS_MULTINOMIAL_COEF = False


def log_multinomial_coef(docs):
    """log(N_x! / Π_v x_v!) of each document (M,)."""
    docs = sp.csr_matrix(docs, dtype=np.float64)
    rows = np.repeat(np.arange(docs.shape[0]), np.diff(docs.indptr))
    per_word = np.bincount(rows, gammaln(docs.data + 1.0), minlength=docs.shape[0])
    return gammaln(np.asarray(docs.sum(axis=1)).ravel() + 1.0) - per_word


def engine_row(label, run, n, test, evaluate=None, note="", counts=True):
    """A table row from an engine run ``(result, s, cold s)``.

    ``evaluate``: ``(docs, labels)`` whose hard assignments (argmax of ``predict_proba``) are
    scored against ``labels`` by NMI / ARI; ``counts``: the test rows are count documents.
    """
    result, seconds, cold_s = run
    sizes = np.asarray(result.cluster_sizes)
    row = dict(
        label=label,
        n=n,
        docs_s=n / seconds,
        seconds=seconds,
        lp=np.asarray(result.log_predictive(test), np.float64),
        K=len(sizes),
        EK=float(np.asarray(result.traces["num_clusters"])[-1]),
        note=f"cold run {cold_s:.1f} s" + (f"; {note}" if note else ""),
    )
    if ENGINE_OMITS_MULTINOMIAL_COEF and counts:
        row["lp"] = row["lp"] + log_multinomial_coef(test)
    if evaluate is not None:
        docs, labels = evaluate
        row.update(clustering(np.argmax(np.asarray(result.predict_proba(docs)), axis=1), labels))
    return row


def engine_rows(train, test, hyper, evaluate=None, ep_passes=EP_PASSES, seed=0, merges=True):
    """ADF (and EP for each number of sweeps in ``ep_passes``) rows for both priors, and ADF IG
    with merges if ``merges``; [] without the engine."""
    adf_cls, ep_cls, _ = _library()
    rows = []
    if adf_cls is None:
        return rows
    n = train.shape[0]
    for prior, sigma in PRIORS:
        rows.append(
            engine_row(f"ADF {prior}", run_adf(train, sigma, hyper, seed), n, test, evaluate)
        )
        if ep_cls is not None:
            for passes in ep_passes:
                run = run_ep(train, sigma, hyper, passes, seed)
                rows.append(engine_row(f"EP x{passes} {prior}", run, n, test, evaluate))
    if merges:
        run = run_adf(train, 0.5, hyper, seed, merge_every=MERGE_EVERY)
        rows.append(engine_row("ADF IG merges", run, n, test, evaluate, f"every {MERGE_EVERY}"))
    for row in rows:
        if row["K"] >= hyper.max_clusters:
            row["note"] += "; saturated (K = max_clusters)"
    return rows


# ============================================================================ held-out scoring
def clustering(assigned, labels):
    """NMI and ARI of hard assignments (n,) against true labels (n,)."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    return dict(
        nmi=normalized_mutual_info_score(labels, assigned),
        ari=adjusted_rand_score(labels, assigned),
    )


def reference_row(label, ref, test, evaluate=None):
    row = dict(
        label=label,
        n=ref.n,
        docs_s=ref.n / ref.seconds,
        seconds=ref.seconds,
        lp=ref.log_predictive(test),
        K=ref.num_clusters,
        EK=ref.expected_k,
        note="Python loop, float64",
    )
    if evaluate is not None:
        docs, labels = evaluate
        row.update(clustering(np.argmax(ref.predict_proba(docs), axis=1), labels))
    return row


def reference_rows(train, test, hyper, evaluate=None):
    return [
        reference_row(
            f"NumPy ADF {prior}",
            NumpyADF(
                train.shape[1], hyper.mass, sigma, TAU, hyper.concentration, hyper.threshold
            ).fit(train),
            test,
            evaluate,
        )
        for prior, sigma in PRIORS
    ]


# ============================================================================ self-checks
def _tiny_corpus(seed, num_docs=14, vocab=6):
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(vocab, 0.3), size=3)
    z = rng.integers(0, 3, num_docs)
    return np.array([rng.multinomial(rng.integers(2, 7), topics[k]) for k in z])


def selfcheck():
    """Brute-force checks of the reference and of the scoring; returns the number of failures."""
    from scipy.stats import dirichlet_multinomial

    failures = 0

    def report(name, err, tol):
        nonlocal failures
        ok = err <= tol
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name:<72} {err:.2e} (tol {tol:g})")

    # 1. the ADF step against the recomputation from the full history
    for sigma, threshold in ((0.0, 0.2), (0.0, 0.05), (0.5, 0.5), (0.3, 0.35)):
        for seed in range(3):
            docs = _tiny_corpus(seed)
            ref = NumpyADF(docs.shape[1], 1.3, sigma, TAU, 0.4, threshold, capacity=2)
            resp = [ref.step(np.flatnonzero(x), x[x > 0].astype(float)) for x in docs]
            k = ref.num_clusters
            mine = np.array([np.pad(r, (0, k - len(r))) for r in resp])
            brute, k_bar = brute_force_adf(docs, 1.3, sigma, TAU, 0.4, threshold)
            err = np.inf if brute.shape != mine.shape else np.abs(brute - mine).max()
            tag = "Lin 2013 (σ = 0)" if sigma == 0 else f"σ = {sigma}"
            tol = 1e-10 if sigma == 0 else 1e-7  # the brute force's Û: bounded search, 1e-10 in s
            report(
                f"responsibilities vs brute force, {tag}, ε = {threshold}, seed {seed}"
                f" (K {k} of {len(docs)})",
                err,
                tol,
            )
            report(
                f"  E[K_n] recursion vs 1 − Π(1 − r), {tag}, seed {seed}",
                abs(ref.expected_k - k_bar),
                tol,
            )

    # 2. Û: the spec's plug-in value, τ = 0 closed form, bracketing by a scalar root finder
    s = log_mode_u(6, 3, 1.0, 0.5, 1.0)
    w = np.sqrt(np.exp(s) + 1.0)
    report(
        "p(new) plug-in, (a, σ, τ) = (1, .5, 1), m = 6, K = 3: 0.36353013",
        abs(w / (4.5 + w) - 0.36353013),
        1e-8,
    )
    for m, k_bar, a, sigma in ((10, 4.2, 2.0, 0.5), (300, 40.0, 0.7, 0.25), (5, 5.0, 1.0, 0.9)):
        s = log_mode_u(m, k_bar, a, sigma, 0.0)
        report(
            f"τ = 0: a Û^σ = K̄σ (m={m}, K̄={k_bar}, a={a}, σ={sigma})",
            abs(a * np.exp(sigma * s) - k_bar * sigma),
            1e-9,
        )
    from scipy.optimize import brentq

    for m, k_bar, a, sigma, tau in (
        (1, 1.0, 1.0, 0.5, 1.0),
        (1000, 80.0, 1.0, 0.5, 1.0),
        (50, 20, 3.0, 0.75, 0.1),
    ):

        def dh(s, m=m, k_bar=k_bar, a=a, sigma=sigma, tau=tau):
            u = np.exp(s)
            return m - (m - k_bar * sigma) * u / (u + tau) - a * u * (u + tau) ** (sigma - 1)

        root = brentq(dh, -50, 50, xtol=1e-13)
        report(
            f"Newton vs brentq for h'(s) = 0 (m={m}, K̄={k_bar}, a={a}, σ={sigma}, τ={tau})",
            abs(log_mode_u(m, k_bar, a, sigma, tau, s0=40.0) - root),
            1e-8,
        )

    # 3. held-out scoring: sparse marginals vs SciPy's pmf; mixture vs probability space
    rng = np.random.default_rng(7)
    test = rng.poisson(0.8, (9, 7))
    test[0] = 0
    test[0, 3] = 5
    stats = rng.gamma(0.5, 2.0, (4, 7)) * (rng.random((4, 7)) < 0.5)
    lam0 = 0.3
    lm = dm_log_marginals(test, sp.csr_matrix(stats), lam0)
    alphas = np.vstack([lam0 + stats, np.full(7, lam0)])
    direct = np.array([[dirichlet_multinomial.logpmf(x, a, x.sum()) for a in alphas] for x in test])
    report(
        "sparse Dirichlet–multinomial log marginals vs scipy.stats.dirichlet_multinomial",
        np.abs(lm - direct).max(),
        1e-10,
    )
    log_w = np.log(rng.random(5))
    mix = mixture_log_predictive(lm, log_w)
    w = np.exp(log_w) / np.exp(log_w).sum()
    report(
        "mixture log predictive vs log(Σ_k w_k p_k) in probability space",
        np.abs(mix - np.log(np.exp(direct) @ w)).max(),
        1e-10,
    )
    proba = mixture_proba(lm, log_w)
    report(
        "predict_proba vs w_k p_k / Σ w p",
        np.abs(proba - np.exp(direct) * w / (np.exp(direct) @ w)[:, None]).max(),
        1e-12,
    )

    from scipy.stats import multinomial

    coef = multinomial.logpmf(test, test.sum(1), np.full(7, 1 / 7)) + test.sum(1) * np.log(7)
    report(
        "log multinomial coefficient vs scipy.stats.multinomial",
        np.abs(log_multinomial_coef(test) - coef).max(),
        1e-10,
    )

    docs = _tiny_corpus(3, num_docs=30)
    for sigma in (0.0, 0.5):
        ref = NumpyADF(6, 1.3, sigma, TAU, 0.4, 0.5).fit(docs)
        held = _tiny_corpus(4, num_docs=8)
        log_w = ref.log_weights()
        weights = np.exp(log_w - log_w.max())
        weights /= weights.sum()
        alphas = np.vstack([0.4 + ref.stats[: ref.num_clusters], np.full(6, 0.4)])
        p = np.array([[dirichlet_multinomial.pmf(x, a, x.sum()) for a in alphas] for x in held])
        report(
            f"NumpyADF.log_predictive vs probability space from its state, σ = {sigma}",
            np.abs(ref.log_predictive(held) - np.log(p @ weights)).max(),
            1e-10,
        )

    # 4. the Pitman–Yor CRP sampler: mean number of clusters vs the exact E[K_n]
    n, draws = 1000, 40
    rng = np.random.default_rng(0)
    mean_k = np.mean(
        [pitman_yor_labels(n, SYN_DISCOUNT, SYN_CONCENTRATION, rng).max() + 1 for _ in range(draws)]
    )
    c, d = SYN_CONCENTRATION, SYN_DISCOUNT
    exact = c / d * (np.exp(gammaln(c + d + n) - gammaln(c + d) - gammaln(c + n) + gammaln(c)) - 1)
    report(
        f"PY(0.75, 1) CRP: |mean K_1000 / E[K_1000] − 1| over {draws} draws (E[K] {exact:.1f})",
        abs(mean_k - exact) / exact,
        0.03,
    )
    print("all checks passed" if failures == 0 else f"{failures} check(s) FAILED")
    return failures


# ============================================================================ data
def pitman_yor_labels(num_docs, discount, concentration, rng):
    """Cluster labels (N,) of a Pitman–Yor(discount, concentration) Chinese restaurant process.

    A new cluster with probability (c + K d)/(i + c); otherwise a previous document is drawn
    uniformly and its cluster k kept with probability (n_k − d)/n_k, which picks k with
    probability ∝ n_k − d (acceptance at least 1 − d).
    """
    labels = np.empty(num_docs, np.int64)
    counts = np.zeros(num_docs, np.int64)
    new = rng.random(num_docs)
    k = 0
    for i in range(num_docs):
        if new[i] * (i + concentration) < concentration + k * discount:
            labels[i], counts[k] = k, 1
            k += 1
            continue
        while True:
            t = labels[rng.integers(i)]
            if rng.random() * counts[t] < counts[t] - discount:
                break
        labels[i] = t
        counts[t] += 1
    return labels


def synthetic_corpus(num_docs, seed=0, vocab=SYN_VOCAB):
    """Synthetic Pitman–Yor multinomial mixture: (N, V) int32 CSR counts and labels (N,).

    Labels from a PY(0.75, 1) CRP; for each cluster a topic θ_k ~ Dirichlet(0.05) over the
    vocabulary; document lengths ~ Poisson(150) (at least 1); words drawn by inverse CDF,
    vectorised per cluster.
    """
    rng = np.random.default_rng(seed)
    labels = pitman_yor_labels(num_docs, SYN_DISCOUNT, SYN_CONCENTRATION, rng)
    lengths = np.maximum(rng.poisson(SYN_MEAN_LENGTH, num_docs), 1)
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(labels.max() + 2))
    keys, counts = [], []
    for k in range(labels.max() + 1):
        docs = order[bounds[k] : bounds[k + 1]]
        cdf = np.cumsum(rng.gamma(SYN_TOPIC_CONCENTRATION, size=vocab))
        lens = lengths[docs]
        words = np.searchsorted(cdf, rng.random(lens.sum()) * cdf[-1], side="right")
        uniq, cnt = np.unique(
            np.repeat(docs, lens) * vocab + np.minimum(words, vocab - 1), return_counts=True
        )
        keys.append(uniq)
        counts.append(cnt)
    keys, counts = np.concatenate(keys), np.concatenate(counts).astype(np.int32)
    corpus = sp.csr_matrix((counts, (keys // vocab, keys % vocab)), shape=(num_docs, vocab))
    return corpus, labels


def oracle_row(train, labels, test, lam0, label="oracle (true partition)"):
    """Held-out log predictive under the true partition of the n training documents.

    Clusters: the true labels, each with its Dirichlet posterior λ0 + Σ_{i∈k} x_i; weights: the
    generating PY(d, c) urn, (n_k − d)/(n + c) and (c + K d)/(n + c) for a new cluster.
    """
    ids, inv = np.unique(labels, return_inverse=True)
    n, k = len(labels), len(ids)
    onehot = sp.csr_matrix((np.ones(n), (inv, np.arange(n))), shape=(k, n))
    sizes = np.bincount(inv)
    log_w = np.log(np.append(sizes - SYN_DISCOUNT, SYN_CONCENTRATION + k * SYN_DISCOUNT))
    lp = mixture_log_predictive(dm_log_marginals(test, onehot @ train, lam0), log_w)
    return dict(label=label, n=n, lp=lp, K=k, note="PY(0.75, 1) urn, Dirichlet posteriors")


# ============================================================================ tables
def _fmt(value, spec, width):
    if value is None:
        return f"{'-':>{width}}"
    sign, spec = ("+", spec[1:]) if spec.startswith("+") else ("", spec)
    return f"{value:>{sign}{width}{spec}}"


def print_tables(title, rows, pairs, measure_note=None):
    """One table of figures per row and one of ratios for the ``(A, B)`` label pairs at each n."""
    print(f"\n== {title}")
    print(
        f"{'n':>7}  {'method':<22} {'docs/s':>9} {'fit s':>7} {'log pred/doc':>13} {'± s.e.':>6} "
        f"{'K':>5} {'E[K_n]':>7} {'NMI':>5} {'ARI':>5}  note"
    )
    for r in rows:
        lp = r.get("lp")
        mean = None if lp is None else lp.mean()
        se = None if lp is None else lp.std(ddof=1) / np.sqrt(len(lp))
        print(
            f"{r['n']:>7,}  {r['label']:<22} {_fmt(r.get('docs_s'), ',.0f', 9)} "
            f"{_fmt(r.get('seconds'), '.1f', 7)} {_fmt(mean, '.2f', 13)} "
            f"{_fmt(se, '.2f', 6)} {_fmt(r.get('K'), 'd', 5)} {_fmt(r.get('EK'), '.1f', 7)} "
            f"{_fmt(r.get('nmi'), '.3f', 5)} {_fmt(r.get('ari'), '.3f', 5)}  {r.get('note', '')}"
        )
    by_key = {(r["n"], r["label"]): r for r in rows}
    lines = []
    for n in sorted({r["n"] for r in rows}):
        for a, b in pairs:
            ra, rb = by_key.get((n, a)), by_key.get((n, b))
            if ra is None or rb is None:
                continue
            speed = ra["docs_s"] / rb["docs_s"] if "docs_s" in ra and "docs_s" in rb else None
            delta = se = None
            if ra.get("measure") == rb.get("measure") and "lp" in ra and "lp" in rb:
                diff = ra["lp"] - rb["lp"]
                delta, se = diff.mean(), diff.std(ddof=1) / np.sqrt(len(diff))
            k_ratio = ra["K"] / rb["K"] if ra.get("K") and rb.get("K") else None
            lines.append(
                f"{n:>7,}  {a + ' vs ' + b:<40} {_fmt(speed, '.1f', 9)} "
                f"{_fmt(delta, '+.2f', 13)} {_fmt(se, '.2f', 6)} {_fmt(k_ratio, '.2f', 7)}"
            )
    if lines:
        print(f"{'n':>7}  {'ratio':<40} {'speed x':>9} {'Δ log pred':>13} {'± s.e.':>6} {'K x':>7}")
        print("\n".join(lines))
    print(
        "log pred/doc: held-out log p(x | N_x) per document (nats; multinomial coefficient"
        " included); Δ log pred = A − B on the same test documents (paired s.e.), the log of the"
        " per-document likelihood ratio; speed x: documents/s of A over B; K: instantiated"
        " clusters; NMI/ARI: argmax of predict_proba on the training documents vs the labels."
    )
    if measure_note:
        print(measure_note)


def standard_pairs(ep_passes=EP_PASSES, extra=()):
    pairs = [(f"ADF {p}", f"NumPy ADF {p}") for p, _ in PRIORS]
    pairs += [("ADF IG", "ADF DP"), ("NumPy ADF IG", "NumPy ADF DP"), ("ADF IG merges", "ADF IG")]
    pairs += [(f"EP x{k} {p}", f"ADF {p}") for p, _ in PRIORS for k in ep_passes]
    pairs += [(f"EP x{max(ep_passes)} IG", f"EP x{max(ep_passes)} DP")] if ep_passes else []
    return pairs + list(extra)


# ============================================================================ data sets
def bench_reuters(args, hyper):
    try:
        import lda.datasets
    except ImportError:
        print("\n== Reuters: skipped (pip install lda)")
        return
    docs = np.asarray(lda.datasets.load_reuters())
    perm = np.random.default_rng(0).permutation(len(docs))
    num_test = len(docs) // 5
    test, train = docs[perm[:num_test]], docs[perm[num_test:]]
    rows = reference_rows(train, test, hyper)
    rows += engine_rows(train, test, hyper, ep_passes=args.ep_passes)
    print_tables(
        f"Reuters ({len(train)} train / {len(test)} test documents, vocabulary {docs.shape[1]:,};"
        f" a={hyper.mass:g}, τ={TAU:g}, λ0={hyper.concentration:g}, ε={hyper.threshold:g})",
        rows,
        standard_pairs(args.ep_passes),
    )


def bench_digits(args, hyper):
    import sklearn.datasets
    from scipy.stats import poisson
    from sklearn.mixture import BayesianGaussianMixture
    from sklearn.model_selection import train_test_split

    digits = sklearn.datasets.load_digits()
    counts = digits.data.astype(np.int64)
    train, test, y_train, _ = train_test_split(counts, digits.target, test_size=0.2, random_state=0)
    evaluate = (train, y_train)
    rows = reference_rows(train, test, hyper, evaluate)
    rows += engine_rows(train, test, hyper, evaluate, ep_passes=args.ep_passes)

    # what users use today: truncated DP mixtures of Gaussians on the dequantised pixels
    rng = np.random.default_rng(0)
    train_c, test_c = train + rng.random(train.shape), test + rng.random(test.shape)
    for cov in ("full", "diag"):
        bgm = BayesianGaussianMixture(
            n_components=args.bgm_components,
            weight_concentration_prior_type="dirichlet_process",
            covariance_type=cov,
            max_iter=1000,
            random_state=0,
        )
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bgm.fit(train_c)
        seconds = time.perf_counter() - t0
        rows.append(
            dict(
                label=f"sklearn BGM {cov}",
                n=len(train),
                docs_s=len(train) / seconds,
                seconds=seconds,
                lp=bgm.score_samples(test_c),
                K=int(np.sum(bgm.weights_ * len(train) >= 1.0)),
                measure="gaussian",
                note=f"{args.bgm_components} components, {bgm.n_iter_} VB iterations"
                + ("" if bgm.converged_ else ", not converged"),
                **clustering(bgm.predict(train_c), y_train),
            )
        )
    if _library()[0] is not None and gaussian_model() is not None:
        name = gaussian_model()[0]
        for prior, sigma in PRIORS:
            ng_prior, scale, _ = gaussian_prior(train_c, sigma, hyper)
            run = run_adf_gaussian(train_c, sigma, hyper, ng_prior)
            row = engine_row(
                f"ADF {prior} Gaussian", run, len(train), test_c, (train_c, y_train), counts=False
            )
            note = f"; models.{name}, data-scaled prior, s = {scale:g} (validation)"
            row.update(measure="gaussian", note=row["note"] + note)
            rows.append(row)
    else:
        print("digits: no NGGP Gaussian mixture model in numpyro_bnp.models: its rows skipped")
    length_lp = poisson.logpmf(test.sum(1), train.sum(1).mean()).mean()
    print_tables(
        f"digits as 64-word documents ({len(train)} train / {len(test)} test, labels 0-9;"
        f" a={hyper.mass:g}, τ={TAU:g}, λ0={hyper.concentration:g}, ε={hyper.threshold:g})",
        rows,
        [
            *standard_pairs(args.ep_passes),
            ("ADF DP", "sklearn BGM diag"),
            ("ADF DP Gaussian", "sklearn BGM diag"),
            ("ADF IG Gaussian", "ADF DP Gaussian"),
        ],
        measure_note=(
            "Gaussian rows: log density of the pixels plus U(0, 1) noise (dequantised), a lower"
            " bound on log p(x) of the 64 integer pixels, length included; the multinomial rows"
            " are log p(x | N_x): a Poisson length model fitted to the training lengths would add"
            f" {length_lp:.2f} nats per document to them. Δ log pred only between like rows."
        ),
    )


def bench_synthetic(args, hyper):
    sizes = args.sizes or ((1_000, 5_000) if args.quick else (1_000, 5_000, 20_000, 100_000))
    num_test = args.num_test or (500 if args.quick else 2_000)
    ref_docs = args.ref_docs or (5_000 if 5_000 in sizes and not args.quick else min(sizes))
    t0 = time.perf_counter()
    corpus, labels = synthetic_corpus(max(max(sizes), ref_docs) + num_test, seed=args.seed)
    gen_s = time.perf_counter() - t0
    perm = np.random.default_rng(args.seed + 1).permutation(corpus.shape[0])
    test = corpus[perm[:num_test]]
    train, y_train = corpus[perm[num_test:]], labels[perm[num_test:]]
    distinct = np.diff(corpus.indptr).mean()
    print(
        f"\nsynthetic corpus: {corpus.shape[0]:,} documents in {gen_s:.1f} s, vocabulary"
        f" {corpus.shape[1]:,}, {labels.max() + 1:,} clusters, mean length"
        f" {corpus.sum() / corpus.shape[0]:.1f}, {distinct:.1f} distinct words per document,"
        f" {corpus.data.nbytes / 2**20:.0f} MiB of counts"
    )
    rows = []
    for n in sorted({*sizes, ref_docs}):
        train_n, y_n = train[:n], y_train[:n]
        m = min(n, args.nmi_docs)
        evaluate = (train_n[:m], y_n[:m])
        rows.append(oracle_row(train_n, y_n, test, hyper.concentration))
        if n == ref_docs:
            rows += reference_rows(train_n, test, hyper, evaluate)
        if n in sizes:
            small = n <= args.ep_max_n  # EP and merge rounds (O(K^2) pairs) up to this n
            passes = args.ep_passes if small else ()
            rows += engine_rows(train_n, test, hyper, evaluate, ep_passes=passes, merges=small)
    print_tables(
        f"synthetic PY(0.75, 1) Dirichlet(0.05)-multinomial mixture ({num_test:,} test documents;"
        f" a={hyper.mass:g}, τ={TAU:g}, λ0={hyper.concentration:g}, ε={hyper.threshold:g},"
        f" max_clusters={hyper.max_clusters}; NMI/ARI on up to {args.nmi_docs:,} training docs)",
        rows,
        [
            *standard_pairs(args.ep_passes),
            *[(f"ADF {p}", "oracle (true partition)") for p, _ in PRIORS],
            *[(f"NumPy ADF {p}", "oracle (true partition)") for p, _ in PRIORS],
            *[
                (f"EP x{k} {p}", "oracle (true partition)")
                for p, _ in PRIORS
                for k in args.ep_passes
            ],
        ],
    )
    print_curve(rows)


def print_curve(rows):
    """Held-out log predictive per document of each method across n (does more data help?)."""
    ns = sorted({r["n"] for r in rows})
    labels = list(dict.fromkeys(r["label"] for r in rows))
    by_key = {(r["n"], r["label"]): r for r in rows}
    print("\nlog pred/doc (K) vs n")
    print(f"{'method':<24}" + "".join(f"{n:>18,}" for n in ns))
    for label in labels:
        cells = []
        for n in ns:
            r = by_key.get((n, label))
            cells.append(f"{'-':>18}" if r is None else f"{r['lp'].mean():>10.1f} ({r['K']:>5})")
        print(f"{label:<24}" + "".join(cells))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="synthetic: 5,000 docs, n in {1k, 5k}")
    parser.add_argument("--selfcheck", action="store_true", help="only the reference's checks")
    parser.add_argument(
        "--data",
        nargs="+",
        choices=("reuters", "digits", "synthetic"),
        default=("reuters", "digits", "synthetic"),
    )
    parser.add_argument("--sizes", nargs="+", type=int, help="synthetic training sizes n")
    parser.add_argument("--num-test", type=int, help="synthetic test docs (2,000; quick 500)")
    parser.add_argument(
        "--ref-docs", type=int, help="n of the NumPy reference (5,000; quick: the smallest n)"
    )
    parser.add_argument("--nmi-docs", type=int, default=2_000, help="training docs for NMI/ARI")
    parser.add_argument("--ep-max-n", type=int, default=5_000, help="EP, merge rows up to this n")
    parser.add_argument(
        "--ep-passes", nargs="+", type=int, default=EP_PASSES, help="EP sweeps, one row each"
    )
    parser.add_argument("--mass", type=float, default=Hyper().mass, help="GGP mass a")
    parser.add_argument(
        "--concentration", type=float, help=f"Dirichlet λ0 (default per data set {CONCENTRATION})"
    )
    parser.add_argument("--threshold", type=float, default=Hyper().threshold, help="ε (≥ σ)")
    parser.add_argument("--max-clusters", type=int, default=Hyper().max_clusters)
    parser.add_argument("--bgm-components", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--x64", action="store_true", help="jax_enable_x64 for the engines")
    args = parser.parse_args()
    if args.selfcheck:
        raise SystemExit(selfcheck() > 0)
    if args.x64:
        import jax

        jax.config.update("jax_enable_x64", True)
    hyper = Hyper(args.mass, SYN_TOPIC_CONCENTRATION, args.threshold, args.max_clusters)
    adf, ep, _ = _library()
    if adf is None:
        print(
            "numpyro_bnp.infer.ADFNRM (or models.nggp_multinomial_mixture) is not importable yet:"
            " the engine rows are skipped; the reference, oracle and scikit-learn rows still run."
        )
    elif ep is None:
        print("numpyro_bnp.infer.EPNRM is not importable yet: the EP rows are skipped.")
    for name in args.data:
        lam0 = CONCENTRATION[name] if args.concentration is None else args.concentration
        bench = {"reuters": bench_reuters, "digits": bench_digits, "synthetic": bench_synthetic}
        bench[name](args, hyper._replace(concentration=lam0))


if __name__ == "__main__":
    main()
