r"""Power-prior streaming VB for DP mixtures on two drifting streams (docs/power_prior.md).

    python -m numpyro_bnp bench power_prior                  # both streams, 20 batches each
    python -m numpyro_bnp bench power_prior --quick          # smoke run: synthetic, 8 batches
    python -m numpyro_bnp bench power_prior --quick --stream both   # ... and digits (+45 s)
    python -m numpyro_bnp bench power_prior --stream digits --figures docs/figures

Engine: :class:`numpyro_bnp.infer.PowerPriorSVB` (Casado & Pérez, ICDM 2022; each batch fitted
by collapsed variational inference, Kurihara, Welling & Teh 2007, against a power prior of the
previous batch's posterior) on :func:`numpyro_bnp.models.dp_mixture` with Normal–Wishart
components (``truncation`` T, ``mass`` α), with the forgetting ``ρ = 0`` (every batch on its
own), ``ρ = 0.5``, ``ρ = 1`` (streaming VB), ``"hpp"`` (one learned ρ per batch) and ``"mhpp"``
(one per component), γ = 0.1, the engine's defaults otherwise (``max_iter`` 100, ``tol`` 1e-5).
Against scikit-learn's ``BayesianGaussianMixture`` (truncated DP, full covariances) with the
same prior, three ways: refit per batch (a fresh fit of each batch), warm-started
(``warm_start=True``, fitted on each new batch from the last solution) and refit on all the data
so far (cumulative: its time per batch grows with the stream).

Streams (20 batches each; ``--quick``: 8 batches of 200 train / 100 test points, the events at
the same relative places, i.e. batch ``1 + round((b - 1) · 8 / 20)`` for the full run's ``b``, and
only the synthetic stream unless ``--stream`` is given: about a minute, most of it the five
engines' compilations; the digits stream adds about 45 s, mostly compilation too):

* ``synthetic``: 2-D Gaussians, 1,000 train / 500 test points per batch, T = 10, α = 2 (the
  paper's synthetic settings). Four clusters sit on a circle of radius 4 (weights 0.3, 0.25,
  0.25, 0.2, fixed full covariances of standard deviations 0.5–0.8) that turns by 3° per batch
  (gradual drift); from batch 5 a fifth cluster appears near the centre (weight 0.2 before
  renormalising, drifting right by 0.15 per batch); at batch 11 every mean jumps: the circle's
  radius goes from 4 to 6 and every mean moves by (2, −2) (the means move by 1.5, 2.5, 4.2, 4.7
  and 2.8, i.e. at least 1.8 of their largest standard deviation); from batch 15 cluster 2 (of
  the circle) is gone.
  Changes: batches 5, 11, 15.
* ``digits``: scikit-learn's digits (``load_digits``, 1,797 8×8 images, bundled), pixels / 16,
  projected on 20 principal components fitted once on all 1,797 clean images. The images are
  split once (per class, seed 0) into a training pool (2/3) and a test pool (1/3); each batch
  draws a random subset of 6–10 classes and samples 1,000 train images from the training pool and
  500 test images from the test pool of those classes, uniformly with replacement (the pools
  hold about 120 and 60 images per class). From batch 11 on, Gaussian noise of standard
  deviation 0.25 (pixel scale [0, 1]) is added to every pixel before the projection (fresh
  noise per drawn image). T = 30, α = 3 (the paper's real-data settings). Changes: every batch
  (its classes), batch 11 (the noise).

Prior, from the first training batch only (streaming: nothing later is looked at): the
Normal–Wishart ``Λ ~ Wishart(ν0, W0)``, ``μ | Λ ~ N(m0, (κ0 Λ)^{-1})`` with ``m0`` = the batch's
mean, ``κ0 = 1``, ``ν0 = D + 2`` and ``E[Λ] = ν0 W0 = (S1 / 4)^{-1}``, ``S1`` the batch's
covariance (a cluster is a priori a quarter of the whole batch's spread; ``--prior-fraction``
changes the quarter): ``W0 = (S1 / 4)^{-1} / ν0``. scikit-learn's ``BayesianGaussianMixture``
parameterises the same Wishart by
``degrees_of_freedom_prior = ν0`` and ``covariance_prior = W0^{-1}`` (the inverse scale: its
M-step is ``W_k^{-1} = W0^{-1} + N_k S_k + …``), here ``ν0 S1 / 4``; ``mean_prior = m0``,
``mean_precision_prior = κ0``, ``weight_concentration_prior = α`` with
``weight_concentration_prior_type="dirichlet_process"``, ``n_components = T``, ``max_iter`` 100,
``random_state = 0`` (k-means initialisation, one init).

Scores of batch t: the model after absorbing batch t on batch t's test points (drawn from batch
t's distribution), and the *next-batch* score: the model after batch t − 1 on batch t's test
points (the predictive before seeing the batch, which is where forgetting shows; batches 2–20).
Held-out log-likelihood per point: ``engine.log_predictive(state, test).mean()`` (the
variational predictive: a mixture of Student-t's) and scikit-learn's
``score_samples(test).mean()`` (its plug-in mixture of Gaussians at the variational means), in
nats. Clustering: ``engine.predict`` / ``predict`` of the test points against their true labels
(ARI, NMI). Clusters: components of predictive weight above 1 % (the engine's
``info.num_clusters``; scikit-learn's ``weights_ > 0.01``). Time per batch: the wall time of
``engine.update`` (block until the result is on the host) and of scikit-learn's ``fit``; each
engine compiles its update on batch 1 (that call is timed as *compile*, then batch 1 is
absorbed again and timed like the others).

Printed per stream: one summary row per method (mean held-out LL over the batches, mean
next-batch LL, mean ARI and NMI, mean clusters, mean time per batch, the mean time of the last 5
batches over that of the first 5 (growth), compile time, warnings), the held-out LL, next-batch
LL and ARI per batch and method, E[ρ] per batch for HPP and MHPP (MHPP: the mean over the
components, the mean weighted by the batch's expected counts, and the least over the components
holding at least 1 % of the batch), the scores around each change, and the issue's targets with
PASS / FAIL. Figures (with ``--figures DIR``; the committed ones are in ``docs/figures``):
``power_prior_forgetting_<stream>.png`` (:func:`numpyro_bnp.plots.plot_forgetting` of HPP and
MHPP, dotted lines at the changes), ``power_prior_heldout_<stream>.png`` (held-out and
next-batch LL per batch, all methods) and, with both streams, ``power_prior_forgetting.png``
(both side by side).

Targets (the issue's): HPP and MHPP at or above the best scikit-learn variant in mean held-out
LL on both streams; no batch after a change stuck on the old clusters (here: at a change batch
and the one after, held-out LL within 0.25 nats per point and ARI within 0.1 of the better of
the two fresh per-batch fits, ρ = 0 and scikit-learn's refit, or better: a model that forgot
nothing it should have would do no worse than a fit of the batch alone); ARI above every
scikit-learn variant on the digits
stream; a time per batch that does not grow (last-5 / first-5 below 1.5, while the cumulative
refit's grows). Deterministic: every random draw is seeded (``--seed``, default 0).
"""

import os
import time
import warnings
from typing import NamedTuple

import numpy as np

from numpyro_bnp import datasets
from numpyro_bnp._report import Column, Table, median_seconds, print_table
from numpyro_bnp.bench._common import pyplot, save_figure

HELP = (
    "The full run (both streams, 20 batches of 1,000 train / 500 test points) takes about 13 "
    "minutes on 2 cores; --quick: 8 batches of 200 / 100 points, the events at the same relative "
    "places, only the synthetic stream unless --stream is given (about a minute, most of it the "
    "five engines' compilations; the digits stream adds about 45 s)."
)
QUICK_HELP = "8 batches of 200 / 100 points (see below)"
CPU_LOOP_KERNELS = False
NUM_BATCHES, QUICK_BATCHES = 20, 8
GAMMA = 0.1  # the truncated-exponential prior of ρ (E[ρ | γ] = 0.508)
PRIOR_FRACTION = 0.25  # E[Λ]^{-1}: this fraction of the first batch's covariance
SKLEARN_MAX_ITER = 100
CLUSTER_WEIGHT = 0.01  # a cluster counts above this predictive weight (the engine's threshold)
STUCK_LL, STUCK_ARI = 0.25, 0.1  # "stuck": this far below a fresh fit of the batch at a change
FRESH = ("ρ=0", "skl refit")  # the fresh per-batch fits (the "stuck" reference: their best)
GROWTH_LIMIT = 1.5  # last-5 / first-5 time per batch that counts as growing
ENGINES = (("ρ=0", 0.0), ("ρ=0.5", 0.5), ("ρ=1", 1.0), ("HPP", "hpp"), ("MHPP", "mhpp"))
SKLEARN = (("skl refit", "refit"), ("skl warm", "warm"), ("skl cumul.", "cumulative"))
LEARNED = ("HPP", "MHPP")

# synthetic stream
SYN_RADIUS, SYN_JUMP_RADIUS, SYN_JUMP_SHIFT = 4.0, 6.0, np.array([2.0, -2.0])
SYN_TURN = np.deg2rad(3.0)  # gradual drift: the circle turns by this much per batch
SYN_WEIGHTS = np.array([0.3, 0.25, 0.25, 0.2, 0.2])  # the 5th: the cluster that appears
SYN_COVS = np.array(
    [
        [[0.50, 0.20], [0.20, 0.40]],
        [[0.40, -0.15], [-0.15, 0.60]],
        [[0.60, 0.00], [0.00, 0.30]],
        [[0.35, 0.10], [0.10, 0.50]],
        [[0.40, 0.00], [0.00, 0.40]],
    ]
)
SYN_APPEAR, SYN_JUMP, SYN_VANISH, SYN_GONE = 5, 11, 15, 2  # full-run batches; cluster 2 goes

# digits stream
DIG_DIM, DIG_NOISE, DIG_NOISE_FROM, DIG_CLASSES = 20, 0.25, 11, (6, 10)


def event(batch, num_batches):
    """The batch of a full-run event ``batch`` in a stream of ``num_batches``."""
    return 1 + round((batch - 1) * num_batches / NUM_BATCHES)


class Stream(NamedTuple):
    name: str
    train: list  # (n, D) per batch
    test: list  # (m, D) per batch
    test_labels: list  # (m,) per batch
    changes: list  # batch numbers (1-based) where the stream changes
    truncation: int
    mass: float


# ============================================================================ the streams
def synthetic_stream(num_batches, num_train, num_test, seed):
    """Four drifting 2-D Gaussians, a fifth that appears, a jump of every mean, one that goes."""
    rng = np.random.default_rng(seed)
    appear, jump, vanish = (event(b, num_batches) for b in (SYN_APPEAR, SYN_JUMP, SYN_VANISH))
    angles = np.deg2rad([45.0, 135.0, 225.0, 315.0])
    chol = np.linalg.cholesky(SYN_COVS)
    train, test, test_labels = [], [], []
    for t in range(1, num_batches + 1):
        turn = angles + SYN_TURN * (t - 1)
        radius, shift = (SYN_JUMP_RADIUS, SYN_JUMP_SHIFT) if t >= jump else (SYN_RADIUS, 0.0)
        means = np.zeros((5, 2))
        means[:4] = radius * np.stack([np.cos(turn), np.sin(turn)], 1)
        means[4] = [0.15 * (t - appear), 0.0]
        means = means + shift
        present = np.array([True, True, True, True, t >= appear])
        if t >= vanish:
            present[SYN_GONE] = False
        weights = np.where(present, SYN_WEIGHTS, 0.0)
        weights = weights / weights.sum()
        draws = []
        for size in (num_train, num_test):
            labels = rng.choice(5, size=size, p=weights)
            noise = np.einsum("nij,nj->ni", chol[labels], rng.normal(size=(size, 2)))
            draws.append((means[labels] + noise, labels))
        train.append(draws[0][0])
        test.append(draws[1][0])
        test_labels.append(draws[1][1])
    return Stream("synthetic", train, test, test_labels, [appear, jump, vanish], 10, 2.0)


def digits_stream(num_batches, num_train, num_test, seed):
    """scikit-learn's digits, PCA to 20 dims, 6–10 random classes per batch, noise later on."""
    from sklearn.decomposition import PCA

    counts, labels = datasets.digits()
    pixels = counts / 16.0
    pca = PCA(DIG_DIM, random_state=0).fit(pixels)  # fitted once on all the clean images
    split = np.random.default_rng(0)
    pools = {"train": {}, "test": {}}
    for c in range(10):
        idx = split.permutation(np.flatnonzero(labels == c))
        cut = (2 * len(idx)) // 3
        pools["train"][c], pools["test"][c] = idx[:cut], idx[cut:]
    rng = np.random.default_rng(seed)
    noise_from = event(DIG_NOISE_FROM, num_batches)
    train, test, test_labels = [], [], []
    for t in range(1, num_batches + 1):
        num_classes = rng.integers(DIG_CLASSES[0], DIG_CLASSES[1] + 1)
        classes = np.sort(rng.choice(10, size=num_classes, replace=False))
        out = []
        for pool, size in (("train", num_train), ("test", num_test)):
            idx = rng.choice(np.concatenate([pools[pool][c] for c in classes]), size=size)
            x = pixels[idx]
            if t >= noise_from:
                x = x + DIG_NOISE * rng.normal(size=x.shape)
            out.append((pca.transform(x), labels[idx]))
        train.append(out[0][0])
        test.append(out[1][0])
        test_labels.append(out[1][1])
    changes = [noise_from]
    return Stream("digits", train, test, test_labels, changes, 30, 3.0)


def priors(stream, fraction=PRIOR_FRACTION):
    """``(model kwargs, BayesianGaussianMixture kwargs)``: the same prior from batch 1."""
    first = stream.train[0]
    dim = first.shape[1]
    loc, cov = first.mean(0), np.cov(first.T)
    dof, kappa = dim + 2.0, 1.0
    mean_precision = np.linalg.inv(fraction * cov)  # E[Λ] = ν0 W0
    scale = mean_precision / dof
    scale = (scale + scale.T) / 2
    inverse_scale = np.linalg.inv(scale)
    inverse_scale = (inverse_scale + inverse_scale.T) / 2
    model = dict(
        dim=dim,
        mass=stream.mass,
        truncation=stream.truncation,
        components="gaussian",
        loc=loc,
        kappa=kappa,
        dof=dof,
        scale_matrix=scale,
    )
    bgm = dict(
        n_components=stream.truncation,
        weight_concentration_prior_type="dirichlet_process",
        weight_concentration_prior=stream.mass,
        covariance_type="full",
        mean_precision_prior=kappa,
        mean_prior=loc,
        degrees_of_freedom_prior=dof,
        covariance_prior=inverse_scale,
        max_iter=SKLEARN_MAX_ITER,
        random_state=0,
    )
    return model, bgm


# ============================================================================ the methods
class Record(NamedTuple):
    """One method on one stream: per-batch arrays (batch t at index t − 1)."""

    label: str
    ll: np.ndarray  # held-out LL per point of batch t after absorbing batch t
    ll_next: np.ndarray  # ... after absorbing batch t − 1 (NaN at t = 1)
    ari: np.ndarray
    nmi: np.ndarray
    clusters: np.ndarray
    seconds: np.ndarray  # per batch (without compilation)
    iters: np.ndarray  # engines: collapsed sweeps (all rounds, both starts); sklearn: n_iter_
    rounds: np.ndarray  # engines: fits alternated with the ω update (1 for a fixed ρ)
    compile_s: float  # engines: first update of batch 1 minus its second (NaN: scikit-learn)
    warnings: list  # (batch, message)
    rho: np.ndarray | None = None  # (B, T) E[ρ]
    counts: np.ndarray | None = None  # (B, T) the batch's expected counts
    result: object = None  # PowerPriorResult


FIELDS = ("ll", "ll_next", "ari", "nmi", "clusters", "s", "iters", "rounds")


def _clustering(labels, truth):
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    return adjusted_rand_score(truth, labels), normalized_mutual_info_score(truth, labels)


def _timed_update(engine, state, batch, caught):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        seconds, (new, info) = median_seconds(lambda: engine.update(state, batch))
    caught.extend(got)
    return new, info, seconds


def run_engine(label, forgetting, stream, model_kwargs, seed):
    from jax import random

    from numpyro_bnp.infer import PowerPriorInfo, PowerPriorResult, PowerPriorSVB
    from numpyro_bnp.models import dp_mixture

    gamma = GAMMA if isinstance(forgetting, str) else None
    engine = PowerPriorSVB(dp_mixture, forgetting=forgetting, gamma=gamma)
    state = engine.init(random.PRNGKey(seed), **model_kwargs)
    num = len(stream.train)
    out = {k: np.full(num, np.nan) for k in FIELDS}
    infos, counts, notes, compile_s = [], [], [], np.nan
    for t in range(num):
        test = stream.test[t]
        if t > 0:
            out["ll_next"][t] = engine.log_predictive(state, test).mean()
        caught = []
        if t == 0:  # compile on batch 1, then absorb it again (same state and key: same fit)
            _, _, first_s = _timed_update(engine, state, stream.train[0], [])
        state, info, seconds = _timed_update(engine, state, stream.train[t], caught)
        if t == 0:
            compile_s = first_s - seconds
        notes += [(t + 1, str(w.message)) for w in caught]
        infos.append(info)
        counts.append(np.asarray(state.counts))  # the batch's expected counts E[N_k]
        out["s"][t] = seconds
        out["ll"][t] = engine.log_predictive(state, test).mean()
        out["ari"][t], out["nmi"][t] = _clustering(
            engine.predict(state, test), stream.test_labels[t]
        )
        out["clusters"][t] = float(info.num_clusters)
        out["iters"][t], out["rounds"][t] = int(info.num_iter), int(info.rounds)
    traces = {
        k: np.stack([np.asarray(getattr(i, k)) for i in infos]) for k in PowerPriorInfo._fields
    }
    result = PowerPriorResult(engine, state, traces, np.arange(1, num + 1))
    return Record(
        label,
        *(out[k] for k in FIELDS),
        compile_s,
        notes,
        rho=traces["expected_rho"],
        counts=np.stack(counts),
        result=result,
    )


def run_sklearn(label, mode, stream, bgm_kwargs):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import BayesianGaussianMixture

    num = len(stream.train)
    out = {k: np.full(num, np.nan) for k in FIELDS}
    notes, model = [], None
    for t in range(num):
        test = stream.test[t]
        if model is not None:
            out["ll_next"][t] = model.score_samples(test).mean()
        if mode == "warm" and model is not None:
            fresh = model  # fitted again from its last solution
        else:
            fresh = BayesianGaussianMixture(warm_start=mode == "warm", **bgm_kwargs)
        data = np.concatenate(stream.train[: t + 1]) if mode == "cumulative" else stream.train[t]
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always", ConvergenceWarning)
            out["s"][t] = median_seconds(lambda fresh=fresh, data=data: fresh.fit(data))[0]
        notes += [(t + 1, str(w.message)) for w in got if issubclass(w.category, Warning)]
        model = fresh
        out["ll"][t] = model.score_samples(test).mean()
        out["ari"][t], out["nmi"][t] = _clustering(model.predict(test), stream.test_labels[t])
        out["clusters"][t] = np.sum(model.weights_ > CLUSTER_WEIGHT)
        out["iters"][t] = model.n_iter_
    return Record(label, *(out[k] for k in FIELDS), np.nan, notes)


# ============================================================================ the tables
def _growth(seconds):
    k = min(5, len(seconds) // 2)
    return seconds[-k:].mean() / seconds[:k].mean()


def print_summary(stream, records):
    num = len(stream.train)
    k = min(5, num // 2)
    print(
        f"\n== {stream.name}: {num} batches of {len(stream.train[0]):,} train / "
        f"{len(stream.test[0]):,} test points, D = {stream.train[0].shape[1]}, "
        f"T = {stream.truncation}, α = {stream.mass:g}; changes at batches {stream.changes}"
    )
    columns = (
        Column("method", 11, align="<"), Column("LL", 8, ".3f"), Column("LL next", 8, ".3f"),
        Column("ARI", 6, ".3f"), Column("NMI", 6, ".3f"), Column("clusters", 8, ".1f"),
        Column("s/batch", 8, ".3f"), Column(f"first {k}", 8, ".3f"),
        Column(f"last {k}", 8, ".3f"), Column("growth", 7, ".2f"), Column("compile", 8, ".1f"),
        Column("iters", 6, ".1f"), Column("rounds", 6, ".1f"), Column("warn.", 5),
    )  # fmt: skip
    print_table(
        columns,
        [
            (
                r.label, r.ll.mean(), np.nanmean(r.ll_next), r.ari.mean(), r.nmi.mean(),
                r.clusters.mean(), r.seconds.mean(), r.seconds[:k].mean(), r.seconds[-k:].mean(),
                _growth(r.seconds), None if np.isnan(r.compile_s) else r.compile_s,
                r.iters.mean(), None if np.isnan(r.rounds).all() else r.rounds.mean(),
                len(r.warnings),
            )
            for r in records
        ],
    )  # fmt: skip
    print(
        "LL: held-out log-likelihood per test point of batch t after batch t, mean over the "
        f"batches (nats); LL next: of batch t after batch t − 1 (batches 2–{num}); ARI/NMI: "
        "test labels predicted vs true; clusters: weight > 1 %; s/batch: update / fit wall "
        f"time; growth: last {k} over first {k}; compile: the engine's first call on batch 1 "
        "minus the second (s); iters: the engine's collapsed sweeps per batch (all rounds, "
        "both starts) or scikit-learn's n_iter_; rounds: the engine's fits per batch (learned "
        "ρ: alternated with the ω update); warn.: warnings caught (listed below)."
    )


def _batch(stream, t):
    """Batch ``t + 1``, starred at a change of the stream."""
    return f"{t + 1}{'*' if t + 1 in stream.changes else ' '}"


def print_per_batch(stream, records, field, title, spec=".3f"):
    print(f"\n-- {stream.name}: {title} per batch")
    columns = (Column("batch", 5), *(Column(r.label, 10, spec) for r in records))
    rows = []
    for t in range(len(stream.train)):
        values = [getattr(r, field)[t] for r in records]
        rows.append((_batch(stream, t), *(None if np.isnan(v) else v for v in values)))
    print_table(columns, rows)
    print("(* a change of the stream)")


def print_rho(stream, records):
    by = {r.label: r for r in records}
    if not all(label in by for label in LEARNED):
        return
    hpp, mhpp = by["HPP"], by["MHPP"]
    print(f"\n-- {stream.name}: E[ρ] per batch (the ρ plot; bar: HPP's E[ρ], 0 to 1)")
    columns = (
        Column("batch", 5), Column("HPP", 6, ".3f"), Column("K", 3),
        Column("MHPP mean", 9, ".3f"), Column("weighted", 8, ".3f"),
        Column("min used", 8, ".3f"), Column("K", 3), Column("HPP E[ρ]", align="<", gap="  "),
    )  # fmt: skip
    table = Table(columns)
    table.header()
    for t in range(len(stream.train)):
        rho_h = float(hpp.rho[t].mean())
        rho_m = mhpp.rho[t]
        weights = mhpp.counts[t]
        weighted = float(np.sum(weights * rho_m) / weights.sum())
        used = weights >= CLUSTER_WEIGHT * weights.sum()
        bar = "#" * round(30 * rho_h)
        table.row(
            _batch(stream, t), rho_h, int(hpp.clusters[t]), rho_m.mean(), weighted,
            float(rho_m[used].min()), int(mhpp.clusters[t]), f"|{bar:<30}|",
        )  # fmt: skip
    print(
        "MHPP weighted: E[ρ_k] weighted by the batch's expected counts; min used: the least "
        "E[ρ_k] of the components holding >= 1 % of the batch; K: clusters (weight > 1 %)."
    )


def print_changes(stream, records):
    """Scores at each change and the batch after."""
    num = len(stream.train)
    batches = sorted({b for c in stream.changes for b in (c, c + 1) if b <= num})
    print(f"\n-- {stream.name}: held-out LL / ARI at the changes and the batch after")
    print_table(
        (Column("method", 11, align="<"), *(Column(f"batch {b}", 15) for b in batches)),
        [
            (r.label, *(f"{r.ll[b - 1]:>7.3f} / {r.ari[b - 1]:>5.3f}" for b in batches))
            for r in records
        ],
    )
    print(
        f"stuck: at one of these batches, LL more than {STUCK_LL} nats per point or ARI more "
        f"than {STUCK_ARI} below the better of the fresh per-batch fits {' and '.join(FRESH)}"
    )
    return batches


def stuck(record, fresh, batches):
    """Batches of ``batches`` where ``record`` is stuck on the old clusters: well below the
    better of the ``fresh`` records (per batch) in held-out LL or ARI."""
    best_ll = np.max([r.ll for r in fresh], axis=0)
    best_ari = np.max([r.ari for r in fresh], axis=0)
    out = []
    for b in batches:
        low_ll = record.ll[b - 1] < best_ll[b - 1] - STUCK_LL
        low_ari = record.ari[b - 1] < best_ari[b - 1] - STUCK_ARI
        if low_ll or low_ari:
            out.append(b)
    return out


def targets(stream, records, batches):
    """The issue's targets for this stream: lines of PASS / FAIL."""
    by = {r.label: r for r in records}
    skl = [by[label] for label, _ in SKLEARN if label in by]
    lines = []
    if skl and all(label in by for label in LEARNED):
        best = max(skl, key=lambda r: r.ll.mean())
        for label in LEARNED:
            r = by[label]
            ok = r.ll.mean() >= best.ll.mean()
            lines.append(
                f"{'PASS' if ok else 'FAIL'}  {label} mean held-out LL {r.ll.mean():.3f} >= best "
                f"scikit-learn ({best.label}) {best.ll.mean():.3f}"
            )
        if all(label in by for label in FRESH):
            for label in LEARNED:
                bad = stuck(by[label], [by[f] for f in FRESH], batches)
                lines.append(
                    f"{'PASS' if not bad else 'FAIL'}  {label} not stuck after a change "
                    f"(batches {batches}){'' if not bad else ': stuck at ' + str(bad)}"
                )
        if stream.name == "digits":
            best_ari = max(skl, key=lambda r: r.ari.mean())
            for label in LEARNED:
                r = by[label]
                ok = r.ari.mean() > best_ari.ari.mean()
                lines.append(
                    f"{'PASS' if ok else 'FAIL'}  {label} mean ARI {r.ari.mean():.3f} > every "
                    f"scikit-learn variant (best {best_ari.label} {best_ari.ari.mean():.3f})"
                )
        for label in LEARNED:
            g = _growth(by[label].seconds)
            lines.append(
                f"{'PASS' if g < GROWTH_LIMIT else 'FAIL'}  {label} time per batch does not grow "
                f"(last/first {g:.2f} < {GROWTH_LIMIT})"
            )
        if "skl cumul." in by:
            g = _growth(by["skl cumul."].seconds)
            lines.append(f"{'info':<4}  scikit-learn cumulative refit's growth: {g:.2f}")
    print(f"\n-- {stream.name}: targets")
    print("\n".join(lines))


def print_warnings(stream, records):
    lines = []
    for r in records:
        if not r.warnings:
            continue
        kinds = {}
        for batch, message in r.warnings:
            kinds.setdefault(message.split(":")[-1].strip()[:110], []).append(batch)
        for message, batches in kinds.items():
            lines.append(f"{r.label:<11} batches {batches}: {message}")
    if lines:
        print(f"\n-- {stream.name}: warnings (method, batches, message)")
        print("\n".join(lines))


# ============================================================================ the figures
def save_figures(stream, records, folder):
    """The stream's forgetting and held-out figures in ``folder`` (module docstring)."""
    from numpyro_bnp.plots import plot_forgetting

    by = {r.label: r for r in records}
    if all(label in by for label in LEARNED):
        fig = plot_forgetting(
            {label: by[label].result for label in LEARNED}, changes=stream.changes
        )
        fig.suptitle(f"power-prior SVB, {stream.name} stream", fontsize=9)
        path = os.path.join(folder, f"power_prior_forgetting_{stream.name}.png")
        save_figure(fig, path, dpi=100, tight=False)
    fig, axes = pyplot().subplots(1, 2, figsize=(11, 3.8), sharey=True, layout="constrained")
    batches = np.arange(1, len(stream.train) + 1)
    for ax, field, title in (
        (axes[0], "ll", "after absorbing batch t"),
        (axes[1], "ll_next", "before batch t (next-batch predictive)"),
    ):
        for i, r in enumerate(records):
            style = "-" if r.label in LEARNED else ("--" if r.label.startswith("ρ") else ":")
            ax.plot(batches, getattr(r, field), style, marker=".", color=f"C{i}", label=r.label)
        for c in stream.changes:
            ax.axvline(c, color="0.6", ls=":", lw=1)
        ax.set_title(f"held-out LL of batch t's test points, {title}", fontsize=9)
        ax.set_xlabel("batch t")
    axes[0].set_ylabel("nats per point")
    axes[1].legend(fontsize=7, ncol=2)
    path = os.path.join(folder, f"power_prior_heldout_{stream.name}.png")
    save_figure(fig, path, dpi=100, tight=False)


def save_combined(results, folder):
    """``power_prior_forgetting.png`` in ``folder``: both streams' forgetting plots side by
    side."""
    from numpyro_bnp.plots import plot_forgetting

    fig, axes = pyplot().subplots(
        2, len(results), figsize=(5.5 * len(results), 4.2), sharex="col", layout="constrained"
    )
    axes = np.asarray(axes).reshape(2, len(results))
    for j, (stream, records) in enumerate(results):
        by = {r.label: r for r in records}
        plot_forgetting(
            {label: by[label].result for label in LEARNED},
            axes=axes[:, j],
            changes=stream.changes,
        )
        axes[0, j].set_title(f"{stream.name} stream", fontsize=9)
    save_figure(fig, os.path.join(folder, "power_prior_forgetting.png"), dpi=100, tight=False)


# ============================================================================ main
def bench(stream, seed, fraction, figures):
    """Every method on ``stream``, its tables, and its figures in the folder ``figures``."""
    model_kwargs, bgm_kwargs = priors(stream, fraction)
    records = []
    for label, forgetting in ENGINES:
        start = time.perf_counter()
        records.append(run_engine(label, forgetting, stream, model_kwargs, seed))
        print(f"  {stream.name}: {label} done in {time.perf_counter() - start:.0f} s", flush=True)
    for label, mode in SKLEARN:
        start = time.perf_counter()
        records.append(run_sklearn(label, mode, stream, bgm_kwargs))
        print(f"  {stream.name}: {label} done in {time.perf_counter() - start:.0f} s", flush=True)
    print_summary(stream, records)
    print_per_batch(stream, records, "ll", "held-out LL (after the batch)")
    print_per_batch(stream, records, "ll_next", "next-batch LL (before the batch)")
    print_per_batch(stream, records, "ari", "ARI")
    print_per_batch(stream, records, "seconds", "time (s)")
    print_rho(stream, records)
    batches = print_changes(stream, records)
    print_warnings(stream, records)
    targets(stream, records, batches)
    if figures:
        save_figures(stream, records, figures)
    return records


def add_arguments(parser):
    """The options of ``bench power_prior`` besides ``--quick``."""
    parser.add_argument(
        "--stream", choices=("synthetic", "digits", "both"),
        help="default: both (--quick: synthetic)",
    )  # fmt: skip
    parser.add_argument(
        "--figures", metavar="DIR", help="save the figures in DIR (docs/figures; default none)"
    )
    parser.add_argument(
        "--prior-fraction", type=float, default=PRIOR_FRACTION,
        help="E[Λ]^{-1} as this fraction of batch 1's covariance (default 1/4)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)


def run(args):
    """The streams ``args.stream`` (module docstring)."""
    num, n_train, n_test = (QUICK_BATCHES, 200, 100) if args.quick else (NUM_BATCHES, 1000, 500)
    makers = {"synthetic": synthetic_stream, "digits": digits_stream}
    choice = args.stream or ("synthetic" if args.quick else "both")
    names = list(makers) if choice == "both" else [choice]
    start, results = time.perf_counter(), []
    for name in names:
        stream = makers[name](num, n_train, n_test, args.seed)
        records = bench(stream, args.seed, args.prior_fraction, args.figures)
        results.append((stream, records))
    if args.figures and len(results) > 1:
        save_combined(results, args.figures)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    return 0
