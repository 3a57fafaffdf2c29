"""The rows of ``bench nrm``'s tables: the engines, the NumPy reference, the oracle, and the
tables themselves.

Engines: :class:`numpyro_bnp.infer.ADFNRM` (assumed density filtering, one pass, the paper's
Algorithm 1, see docs/nrm.md) and :class:`numpyro_bnp.infer.EPNRM` (expectation propagation after
ADF) on :func:`numpyro_bnp.models.nggp_multinomial_mixture`, with the DP (σ = 0) and the
normalized inverse-Gaussian ("IG", σ = 1/2) priors, τ = 1 (:func:`run_adf`, :func:`run_ep`,
:func:`run_adf_gaussian`). Held-out scores are log p(x | N_x) of each test document under the
full predictive mixture (instantiated clusters and a new one), multinomial coefficient included,
in nats per document.
"""

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from numpyro_bnp._report import Column, median_seconds, print_table, timed
from numpyro_bnp.bench.nrm_corpus import SYN_CONCENTRATION, SYN_DISCOUNT, SYN_TOPIC_CONCENTRATION
from numpyro_bnp.bench.nrm_reference import (
    TAU,
    NumpyADF,
    dm_log_marginals,
    mixture_log_predictive,
)

PRIORS = (("DP", 0.0), ("IG", 0.5))
CHUNK = 256  # engine chunk size
EP_PASSES = (1, 5, 20)
MERGE_EVERY = 100  # documents between the merge rounds of the "ADF IG merges" rows
SINGLE_RUN_DOCS = 20_000  # from this training size on, each engine runs once (see _timed_run)
# default Dirichlet λ0 per data set (synthetic: the generator's; the others: the best of
# {0.01, 0.05, 0.2, 1} for the NumPy reference's held-out log predictive, both priors)
CONCENTRATION = {"reuters": 0.05, "digits": 0.2, "synthetic": SYN_TOPIC_CONCENTRATION}


class Hyper(NamedTuple):
    """Hyper-parameters shared by the engines and the reference (GGP mass a, Dirichlet λ0, ε)."""

    mass: float = 1.0
    concentration: float = SYN_TOPIC_CONCENTRATION
    threshold: float = 0.5
    max_clusters: int = 4096


def _engine_kwargs(sigma, hyper, **sizes):
    """The model's arguments for a streaming engine: the model is traced for one row (its
    ``num_obs`` and ``max_clusters`` size that trace only); the engine's capacity grows."""
    return dict(
        mass=hyper.mass, sigma=sigma, tau=TAU, chunk_size=CHUNK, progress_bar=False, **sizes
    )


def _timed_run(engine, data, kwargs, seed):
    """``(result, s, cold s)`` of ``engine`` on ``data``. The first (cold) run compiles the
    engine's chunk scan once per capacity it grows through (a few seconds each); a second
    reuses them, and its time is the one per document in the tables (one repeat:
    :func:`numpyro_bnp._report.timed`). From ``SINGLE_RUN_DOCS`` documents on there is one run
    (the compilations are then a small part of it): its time is both."""
    from jax import random

    def run(_):
        result = engine.run(random.PRNGKey(seed), data, **kwargs)
        return result, result.cluster_sizes

    if data.shape[0] >= SINGLE_RUN_DOCS:
        seconds, (result, _) = median_seconds(lambda: run(0))
        return result, seconds, seconds
    (result, _), seconds, cold = timed(run, repeats=1)
    return result, seconds, cold


def run_adf(train, sigma, hyper, seed=0, merge_every=None):
    """``ADFNRM`` on ``train`` ((N, V) dense counts or CSR): ``(result, seconds, cold s)``."""
    from numpyro_bnp.infer import ADFNRM
    from numpyro_bnp.models import nggp_multinomial_mixture

    engine = ADFNRM(
        nggp_multinomial_mixture,
        new_cluster_threshold=hyper.threshold,
        u_estimate="log_mode",
        merge_every=merge_every,
    )
    kwargs = _engine_kwargs(
        sigma, hyper, vocab_size=train.shape[1], concentration=hyper.concentration
    )
    return _timed_run(engine, train, kwargs, seed)


def run_ep(train, sigma, hyper, num_passes, seed=0):
    """``EPNRM`` (ADF then ``num_passes`` EP sweeps) on ``train``: ``(result, s, cold s)``."""
    from numpyro_bnp.infer import EPNRM
    from numpyro_bnp.models import nggp_multinomial_mixture

    engine = EPNRM(
        nggp_multinomial_mixture,
        num_passes=num_passes,
        new_cluster_threshold=hyper.threshold,
        u_estimate="log_mode",
    )
    kwargs = _engine_kwargs(
        sigma, hyper, vocab_size=train.shape[1], concentration=hyper.concentration
    )
    del kwargs["chunk_size"]  # EP holds the data set: no chunks
    return _timed_run(engine, train, kwargs, seed)


def _gaussian_engine(train, sigma, hyper, prior):
    """``ADFNRM`` on ``models.nggp_diagonal_gaussian_mixture`` and its keyword arguments for
    ``train``."""
    from numpyro_bnp.infer import ADFNRM
    from numpyro_bnp.models import nggp_diagonal_gaussian_mixture

    engine = ADFNRM(
        nggp_diagonal_gaussian_mixture, new_cluster_threshold=hyper.threshold,
        u_estimate="log_mode",
    )  # fmt: skip
    kwargs = _engine_kwargs(sigma, hyper, dim=train.shape[1], **prior)
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


def engine_row(label, run, n, test, evaluate=None, note=""):
    """A table row from an engine run ``(result, s, cold s)``.

    ``evaluate``: ``(docs, labels)`` whose hard assignments (argmax of ``predict_proba``) are
    scored against ``labels`` by NMI / ARI.
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
    if evaluate is not None:
        docs, labels = evaluate
        row.update(clustering(np.argmax(np.asarray(result.predict_proba(docs)), axis=1), labels))
    return row


def engine_rows(train, test, hyper, evaluate=None, ep_passes=EP_PASSES, seed=0, merges=True):
    """ADF (and EP for each number of sweeps in ``ep_passes``) rows for both priors, and ADF IG
    with merges if ``merges``."""
    rows = []
    n = train.shape[0]
    for prior, sigma in PRIORS:
        rows.append(
            engine_row(f"ADF {prior}", run_adf(train, sigma, hyper, seed), n, test, evaluate)
        )
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


def clustering(assigned, labels):
    """NMI and ARI of hard assignments (n,) against true labels (n,)."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    return dict(
        nmi=normalized_mutual_info_score(labels, assigned),
        ari=adjusted_rand_score(labels, assigned),
    )


def reference_row(label, ref, test, evaluate=None):
    """A table row from a fitted :class:`~numpyro_bnp.bench.nrm_reference.NumpyADF`."""
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
    """The NumPy reference's rows, both priors, fitted on ``train``."""
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


FIGURES = (
    Column("n", 7, ","), Column("method", 22, align="<", gap="  "), Column("docs/s", 9, ",.0f"),
    Column("fit s", 7, ".1f"), Column("log pred/doc", 13, ".2f"), Column("± s.e.", 6, ".2f"),
    Column("K", 5, "d"), Column("E[K_n]", 7, ".1f"), Column("NMI", 5, ".3f"),
    Column("ARI", 5, ".3f"), Column("note", align="<", gap="  "),
)  # fmt: skip
RATIOS = (
    Column("n", 7, ","), Column("ratio", 40, align="<", gap="  "), Column("speed x", 9, ".1f"),
    Column("Δ log pred", 13, "+.2f"), Column("± s.e.", 6, ".2f"), Column("K x", 7, ".2f"),
)  # fmt: skip


def _mean_se(values):
    """``(mean, standard error)`` of ``values`` (``(None, None)`` for none)."""
    if values is None:
        return None, None
    return values.mean(), values.std(ddof=1) / np.sqrt(len(values))


def print_tables(title, rows, pairs, measure_note=None):
    """One table of figures per row and one of ratios for the ``(A, B)`` label pairs at each n."""
    print(f"\n== {title}")
    print_table(
        FIGURES,
        [
            (
                r["n"], r["label"], r.get("docs_s"), r.get("seconds"), *_mean_se(r.get("lp")),
                r.get("K"), r.get("EK"), r.get("nmi"), r.get("ari"), r.get("note", ""),
            )
            for r in rows
        ],
    )  # fmt: skip
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
                delta, se = _mean_se(ra["lp"] - rb["lp"])
            k_ratio = ra["K"] / rb["K"] if ra.get("K") and rb.get("K") else None
            lines.append((n, f"{a} vs {b}", speed, delta, se, k_ratio))
    if lines:
        print_table(RATIOS, lines)
    print(
        "log pred/doc: held-out log p(x | N_x) per document (nats; multinomial coefficient"
        " included); Δ log pred = A − B on the same test documents (paired s.e.), the log of the"
        " per-document likelihood ratio; speed x: documents/s of A over B; K: instantiated"
        " clusters; NMI/ARI: argmax of predict_proba on the training documents vs the labels."
    )
    if measure_note:
        print(measure_note)


def standard_pairs(ep_passes=EP_PASSES, extra=()):
    """The ``(A, B)`` pairs of every data set's ratio table, then ``extra``."""
    pairs = [(f"ADF {p}", f"NumPy ADF {p}") for p, _ in PRIORS]
    pairs += [("ADF IG", "ADF DP"), ("NumPy ADF IG", "NumPy ADF DP"), ("ADF IG merges", "ADF IG")]
    pairs += [(f"EP x{k} {p}", f"ADF {p}") for p, _ in PRIORS for k in ep_passes]
    pairs += [(f"EP x{max(ep_passes)} IG", f"EP x{max(ep_passes)} DP")] if ep_passes else []
    return pairs + list(extra)


def print_curve(rows):
    """Held-out log predictive per document of each method across n (does more data help?)."""
    ns = sorted({r["n"] for r in rows})
    by_key = {(r["n"], r["label"]): r for r in rows}
    print("\nlog pred/doc (K) vs n")
    cells = []
    for label in dict.fromkeys(r["label"] for r in rows):
        found = [by_key.get((n, label)) for n in ns]
        means = [None if r is None else f"{r['lp'].mean():>10.1f} ({r['K']:>5})" for r in found]
        cells.append((label, *means))
    columns = (Column("method", 24, align="<"), *(Column(f"{n:,}", 18, gap="") for n in ns))
    print_table(columns, cells)
