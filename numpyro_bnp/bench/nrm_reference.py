"""The naive reference of ``bench nrm``: the ADF-NRM step for Dirichlet–multinomial documents
written independently in NumPy/SciPy (Tank, Foti & Fox 2015, Section 3; ``docs/nrm.md``), its
brute-force check, the scoring helpers both sides share, and ``--selfcheck`` (:func:`selfcheck`).
"""

import time

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln, logsumexp

from numpyro_bnp._report import Column, Table
from numpyro_bnp.bench.nrm_corpus import SYN_CONCENTRATION, SYN_DISCOUNT, pitman_yor_labels

TAU = 1.0


def dm_log_marginals(test, stats, lam0):
    """log ∫ Mult(x_j | N_j, θ) Dir(θ | λ0 + stats_k) dθ, docs j, clusters k (docs/nrm.md §5.1).

    ``test``: (M, V) integer counts (dense or sparse); ``stats``: (K, V) non-negative (soft)
    counts of each cluster beyond the symmetric prior λ0. Returns (M, K + 1); the last column is
    the prior predictive (an empty cluster). Multinomial coefficient included.

    Sparse in both arguments: lgamma(λ + x) − lgamma(λ) = Σ_{t<x} log(λ + t), so the words a
    document shares with a cluster add Σ_t [x_v > t] log1p(c_kv / (λ0 + t)), one sparse product
    per t, to the document's prior predictive.
    """
    test = sp.csr_matrix(test, dtype=np.float64)
    stats = sp.csr_matrix(stats, dtype=np.float64)
    if np.any(test.data != np.round(test.data)):
        raise ValueError("test documents must hold integer counts")
    num_docs, vocab = test.shape
    num_clusters = stats.shape[0]
    length = np.asarray(test.sum(axis=1)).ravel()
    rows = np.repeat(np.arange(num_docs), np.diff(test.indptr))
    per_word = gammaln(lam0 + test.data) - gammaln(lam0) - gammaln(test.data + 1.0)
    base = gammaln(length + 1.0) + np.bincount(rows, per_word, minlength=num_docs)
    total0 = vocab * lam0
    totals = total0 + np.asarray(stats.sum(axis=1)).ravel()
    out = np.empty((num_docs, num_clusters + 1))
    out[:, -1] = base + gammaln(total0) - gammaln(total0 + length)
    out[:, :-1] = base[:, None] + gammaln(totals) - gammaln(totals + length[:, None])
    stats_t = stats.T.tocsr()  # (V, K)
    for t in range(int(test.data.max(initial=0))):
        active = test.copy()
        active.data = (active.data > t).astype(np.float64)
        active.eliminate_zeros()
        words = np.unique(active.indices)
        sub = stats_t[words]
        sub.data = np.log1p(sub.data / (lam0 + t))
        shared = (active[:, words] @ sub).tocoo()
        out[shared.row, shared.col] += shared.data
    return out


def mixture_log_predictive(log_marginals, log_weights):
    """log Σ_k w_k p_k(x_j) with w ∝ exp(log_weights) (K + 1,): (M,) from (M, K + 1)."""
    log_weights = log_weights - logsumexp(log_weights)
    return logsumexp(log_marginals + log_weights, axis=1)


def mixture_proba(log_marginals, log_weights):
    """Posterior cluster probabilities (M, K + 1) of each document, the last column new."""
    joint = log_marginals + log_weights
    return np.exp(joint - logsumexp(joint, axis=1, keepdims=True))


def log_mode_u(m, k_bar, mass, sigma, tau, s0=0.0, tol=1e-12, max_iter=200):
    """Û = exp(s*), s* the root of h'(s) = 0 (paper §3.3; docs/nrm.md §3.4), the mode of log U.

    h(s) = m s + (K̄σ − m) log(e^s + τ) − (a/σ)(e^s + τ)^σ is the log density of s = log U under
    q(U) after ``m`` documents with ``k_bar`` = E[K_m] expected clusters; it is strictly concave
    for K̄σ ≤ m. Newton from ``s0`` (a warm start), falling back to bisection whenever a step
    leaves the current bracket (initially [−50, 50]). Returns s*.
    """
    lo, hi = -50.0, 50.0
    s = min(max(s0, lo), hi)
    for _ in range(max_iter):
        u = np.exp(s)
        w = u / (u + tau)
        new = mass * (u + tau) ** sigma
        d1 = m - (m - k_bar * sigma) * w - w * new
        if d1 > 0:
            lo = s
        else:
            hi = s
        d2 = -(m - k_bar * sigma) * w * (1.0 - w) - w * new * ((1.0 - w) + sigma * w)
        step = s - d1 / d2
        s_next = step if lo < step < hi else 0.5 * (lo + hi)
        if abs(s_next - s) < tol:
            return s_next
        s = s_next
    return s


class NumpyADF:
    """ADF-NRM for Dirichlet–multinomial components in plain NumPy, one document at a time.

    The paper's §3.1–3.3 (docs/nrm.md Algorithm 1), written independently of the library. State
    after n documents, for the K instantiated clusters: ``stats`` (K, V) Σ_i r_ik x_i,
    ``totals`` (K,) its row sums, ``sizes`` (K,) E[n_k] = Σ_i r_ik, ``log_empty`` (K,)
    ℓ_k = Σ_i log1p(−r_ik), ``expected_k`` E[K_n], ``log_u`` log Û. ``trace`` holds E[K_n].
    """

    def __init__(self, vocab, mass, sigma, tau, concentration, threshold, capacity=64):
        self.vocab, self.mass, self.sigma, self.tau = vocab, mass, sigma, tau
        self.lam0, self.threshold = concentration, threshold
        self.stats = np.zeros((capacity, vocab))
        self.totals = np.zeros(capacity)
        self.sizes = np.zeros(capacity)
        self.log_empty = np.zeros(capacity)
        self.num_clusters, self.n, self.expected_k, self.log_u = 0, 0, 0.0, 0.0
        self.trace, self.seconds = [], 0.0

    def log_weights(self):
        """Unnormalised log predictive weights (K + 1,) of Eq. (23) after the n documents seen."""
        k = self.num_clusters
        with np.errstate(divide="ignore"):
            old = np.log(np.maximum(self.sizes[:k] - self.sigma, 0.0))
        new = np.log(self.mass)
        if self.sigma > 0:
            self.log_u = log_mode_u(
                self.n, self.expected_k, self.mass, self.sigma, self.tau, self.log_u
            )
            new += self.sigma * np.log(np.exp(self.log_u) + self.tau)
        return np.append(old, new)

    def _grow(self):
        if self.num_clusters == len(self.sizes):
            for name in ("stats", "totals", "sizes", "log_empty"):
                arr = getattr(self, name)
                setattr(self, name, np.concatenate([arr, np.zeros_like(arr)]))
        self.num_clusters += 1

    def step(self, words, counts):
        """One ADF step on a document given by its distinct ``words`` and their ``counts``.

        Returns its responsibilities r (K,) over the clusters after the step (a new cluster is
        kept iff its responsibility exceeds ε; otherwise its mass is renormalised away).
        """
        k = self.num_clusters
        length = counts.sum()
        if k == 0:
            r = np.ones(1)
        else:
            lam = self.lam0 + self.stats[:k, words]  # (K, W)
            tot = self.totals[:k] + self.vocab * self.lam0
            like = gammaln(tot) - gammaln(tot + length)
            like += (gammaln(lam + counts) - gammaln(lam)).sum(axis=1)
            total0 = self.vocab * self.lam0
            like0 = gammaln(total0) - gammaln(total0 + length)
            like0 += (gammaln(self.lam0 + counts) - gammaln(self.lam0)).sum()
            logits = self.log_weights() + np.append(like, like0)
            r = np.exp(logits - logsumexp(logits))
        if r[-1] > self.threshold:
            self._grow()
            k += 1
        else:
            r = r[:-1] / r[:-1].sum()
        self.expected_k += float(r @ np.exp(self.log_empty[:k]))
        self.log_empty[:k] += np.log1p(-np.minimum(r, 1.0 - 1e-12))
        self.sizes[:k] += r
        self.stats[:k, words] += r[:, None] * counts
        self.totals[:k] += r * length
        self.n += 1
        self.trace.append(self.expected_k)
        return r

    def fit(self, docs):
        """Stream the rows of ``docs`` ((N, V) counts, dense or sparse) in order; returns self."""
        docs = sp.csr_matrix(docs, dtype=np.float64)
        t0 = time.perf_counter()
        for i in range(docs.shape[0]):
            lo, hi = docs.indptr[i], docs.indptr[i + 1]
            self.step(docs.indices[lo:hi], docs.data[lo:hi])
        self.seconds += time.perf_counter() - t0
        return self

    def log_marginals(self, test):
        return dm_log_marginals(test, self.stats[: self.num_clusters], self.lam0)

    def log_predictive(self, test):
        """Held-out log p(x_j | N_j) (M,) under the predictive mixture after the n documents."""
        return mixture_log_predictive(self.log_marginals(test), self.log_weights())

    def predict_proba(self, test):
        """(M, K + 1) cluster probabilities of each document, the last column a new cluster."""
        return mixture_proba(self.log_marginals(test), self.log_weights())


def brute_force_adf(docs, mass, sigma, tau, lam0, threshold):
    """Algorithm 1 recomputed from the whole history at every step, in probability space.

    Prior weights from the stored responsibilities R (n, K): Σ_i r_ik − σ (clipped at 0) and
    a(Û + τ)^σ with Û maximising the log density of log U by bounded scalar search (σ = 0: a,
    Lin's 2013 sequential variational DP); SciPy's Dirichlet–multinomial pmf with parameters
    λ0 + Σ_i r_ik x_i. Returns R (N, K_final) and E[K_N] = Σ_k (1 − Π_i (1 − r_ik)).
    """
    from scipy.optimize import minimize_scalar
    from scipy.stats import dirichlet_multinomial

    docs = np.asarray(docs, np.float64)
    vocab = docs.shape[1]
    rows = []
    for n, x in enumerate(docs):
        k = len(rows[-1]) if rows else 0
        hist = np.array([np.pad(r, (0, k - len(r))) for r in rows]).reshape(n, k)
        if k == 0:
            p = np.ones(1)
        else:
            if sigma == 0:
                new = mass
            else:
                k_bar = np.sum(1.0 - np.prod(1.0 - hist, axis=0))

                def neg_h(s, k_bar=k_bar, m=n):
                    return -(
                        m * s
                        + (k_bar * sigma - m) * np.log(np.exp(s) + tau)
                        - mass / sigma * (np.exp(s) + tau) ** sigma
                    )

                s = minimize_scalar(
                    neg_h, bounds=(-30, 30), method="bounded", options={"xatol": 1e-10}
                )
                new = mass * (np.exp(s.x) + tau) ** sigma
            prior = np.append(np.maximum(hist.sum(0) - sigma, 0.0), new)
            lam = lam0 + hist.T @ docs[:n]
            like = [dirichlet_multinomial.pmf(x, a, x.sum()) for a in lam]
            like.append(dirichlet_multinomial.pmf(x, np.full(vocab, lam0), x.sum()))
            p = prior * np.array(like)
            p /= p.sum()
        if p[-1] <= threshold:
            p = p[:-1] / p[:-1].sum()
        rows.append(p)
    k = len(rows[-1])
    hist = np.array([np.pad(r, (0, k - len(r))) for r in rows])
    return hist, float(np.sum(1.0 - np.prod(1.0 - hist, axis=0)))


def _tiny_corpus(seed, num_docs=14, vocab=6):
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(vocab, 0.3), size=3)
    z = rng.integers(0, 3, num_docs)
    return np.array([rng.multinomial(rng.integers(2, 7), topics[k]) for k in z])


def selfcheck():
    """Brute-force checks of the reference and of the scoring; returns the number of failures."""
    from scipy.stats import dirichlet_multinomial

    failures = 0
    lines = Table(
        (Column("", 4, align="<"), Column("check", 72, align="<"), Column("error", 8, ".2e"),
         Column("", align="<"))
    )  # fmt: skip

    def report(name, err, tol):
        nonlocal failures
        ok = err <= tol
        failures += not ok
        lines.row("ok" if ok else "FAIL", name, err, f"(tol {tol:g})")

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
