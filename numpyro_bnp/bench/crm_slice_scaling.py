"""Scaling of the CRM slice sampler against the accelerated collapsed Gibbs sampler.

The scaling experiment of the slice sampler for general CRMs (Zhu, Bouchard-Côté & Campbell
2020, Section 5) at reduced size: data from a truncated beta-Bernoulli linear-Gaussian model
with noise σ = 0.2, feature scale σ_0 = 0.5 and mass c = 1 (θ_k = exp(-Γ_k / c), the Bondesson /
inverse-Lévy series of the beta process with concentration 1, truncated at K = 2⌈log N⌉ atoms;
X_nk ~ Bernoulli(θ_k), ψ_k ~ N(0, σ_0² I_D), y_n ~ N(X_n ψ, σ² I_D)), with D = 2⌈N log N / (N -
log N)⌉ (:func:`synthetic`).

Both engines run ``numpyro.infer.MCMC(engine(models.linear_gaussian), ...)`` on the same model
(IBP(α = c, β = 1) prior, σ_A = σ_0, σ_o = σ, the model's default capacity, which is the
baseline's fixed buffer; ``--max-features`` changes it, but the baseline's time per iteration
grows steeply with it: 28 ms at 22 slots, 382 ms at 48 slots for N = 500), ``--chains``
sequential chains each. For each N it times the sampling phase (after a separate warm-up call;
the wall time minus the time JAX spent compiling, measured with ``jax.monitoring``,
:class:`CompileClock`), computes with ``arviz.ess`` and ``arviz.rhat`` over the chains the ESS
and R-hat of the parity test function (1 if Z has an even number of non-zero entries) and of the
number of active features K, and prints ESS/s, per-iteration time, the fitted log-log slopes in
N and the ratio ESS/s CRMSlice / accelerated Gibbs at each N.

A run whose number of active features reaches the capacity of ``Z`` (the model's
``max_features``) is marked *saturated*: that chain is truncated and its ESS is not comparable.
``--max-seconds`` caps the predicted sampling time of one (engine, N) run: from the measured
per-iteration times at smaller N, extrapolated with the fitted slope (at least linear), a size
whose prediction exceeds the budget is skipped and reported as such.

``--model bnb`` runs the beta–negative-binomial topic model of the paper's §4.2 instead
(:func:`numpyro_bnp.models.bnb_combinatorial_clustering` with (α, λ, β) = (1, 1.1, 0.1), Δ_ξ =
3, (n_Γ, Δ_V) = (10, 0.3)) on documents drawn from that model (``BNB_WORDS`` words on average, a
vocabulary of ``BNB_VOCAB``); "N" is then the number of documents. Only ``CRMTopicSlice`` runs
it: the library has no other sampler for this model (the paper's peer, the superposition slice
sampler of Broderick et al., is not implemented), so the table reports the scaling in N, not a
ratio.
"""

import math
import time

import jax
import numpy as np
from jax import random

from numpyro_bnp._report import Column, Table, print_table
from numpyro_bnp.bench import _common
from numpyro_bnp.bench._common import ess_rhat, pyplot, save_figure
from numpyro_bnp.models import linear_gaussian

SIGMA, SIGMA0, MASS = 0.2, 0.5, 1.0
SIZES = (500, 1000, 2000, 5000, 10000)
QUICK_SIZES = (200, 400, 800)
BNB_WORDS, BNB_VOCAB = 50, 100


def paper_sizes(num_rows):
    """Generator truncation ``K = 2⌈log N⌉`` and dimension ``D = 2⌈N log N / (N - log N)⌉``."""
    log_n = math.log(num_rows)
    return 2 * math.ceil(log_n), 2 * math.ceil(num_rows * log_n / (num_rows - log_n))


def synthetic(num_rows, seed=0):
    """Truncated beta-Bernoulli linear-Gaussian data ``(N, D)`` float32 and the true ``X``."""
    truncation, dim = paper_sizes(num_rows)
    rng = np.random.default_rng(seed)
    theta = np.exp(-np.cumsum(rng.exponential(size=truncation)) / MASS)
    counts = (rng.random((num_rows, truncation)) < theta).astype(np.float32)
    features = SIGMA0 * rng.normal(size=(truncation, dim))
    obs = counts @ features + SIGMA * rng.normal(size=(num_rows, dim))
    return obs.astype(np.float32), counts


def synthetic_documents(num_docs, seed=0):
    """Word counts ``(num_docs, BNB_VOCAB)`` drawn from the BNB topic model (paper's setting)."""
    from numpyro.infer import Predictive

    from numpyro_bnp.models import bnb_combinatorial_clustering

    lengths = np.full(num_docs, float(BNB_WORDS))
    draw = Predictive(bnb_combinatorial_clustering, num_samples=1)(
        random.PRNGKey(seed), doc_lengths=lengths, vocab_size=BNB_VOCAB
    )
    return np.asarray(draw["counts"][0]).astype(np.int64), lengths


def make_kernel(engine, model):
    from numpyro_bnp.infer import AcceleratedIBPGibbs, CRMSlice, CRMTopicSlice

    if engine == "crm_slice_rows":
        return CRMSlice(model, collapsed_rows=True)
    if engine == "crm_slice":
        if model is linear_gaussian:
            return CRMSlice(model)
        # the topic model, with the paper's BNB setting
        return CRMTopicSlice(model, xi_scale=3.0, n_gamma=10, mark_step=0.3)
    if engine == "accelerated_gibbs":
        return AcceleratedIBPGibbs(model)
    raise ValueError(f"unknown engine {engine!r}")


class CompileClock:
    """Total wall time (union of spans) that JAX spends tracing, lowering and compiling."""

    def __init__(self):
        self.spans = []
        jax.monitoring.register_event_time_span_listener(self._record)

    def _record(self, event, start, end, **kwargs):
        if event.startswith("/jax/core/compile/"):
            self.spans.append((start, end))

    def seconds_between(self, t0, t1):
        spans = sorted((max(s, t0), min(e, t1)) for s, e in self.spans if e > t0 and s < t1)
        total, current_end = 0.0, -np.inf
        for s, e in spans:
            if e > current_end:
                total += e - max(s, current_end)
                current_end = e
        return total


def per_chain_ess(draws):
    """``(C,)`` each chain's own ``arviz.ess`` (NaN for a chain that never moved)."""
    return np.array([ess_rhat(chain[None])[0] for chain in np.asarray(draws, float)])


def run_one(kernel, data, kwargs, num_warmup, num_samples, num_chains, clock, seed=0):
    """Warm up, then time the sampling phase of ``num_chains`` sequential chains of ``kernel``
    on ``data``; a row of the table from the ``parity`` and ``num_active`` extra fields."""
    mcmc = _common.mcmc(kernel, num_warmup, num_samples, num_chains)
    t0 = time.time()
    fields = ("parity", "num_active", "saturated")
    mcmc.warmup(random.PRNGKey(seed), data, extra_fields=fields, **kwargs)
    jax.block_until_ready(mcmc.post_warmup_state)
    warmup_s = time.time() - t0
    t0 = time.time()
    mcmc.run(random.PRNGKey(seed + 1), data, extra_fields=fields, **kwargs)
    extra = jax.block_until_ready(mcmc.get_extra_fields(group_by_chain=True))
    t1 = time.time()
    compile_s = clock.seconds_between(t0, t1)
    sample_s = t1 - t0 - compile_s
    samples = mcmc.get_samples()
    capacity = int(samples["Z" if "Z" in samples else "theta"].shape[-1])
    num_active = np.asarray(extra["num_active"])
    saturated = bool(np.asarray(extra["saturated"]).any())
    (ess_parity, rhat_parity), (ess_k, rhat_k) = map(ess_rhat, (extra["parity"], num_active))
    chain_s = sample_s / num_chains  # sequential chains: each its share of the time
    chain_esss = {
        name: per_chain_ess(draws) / chain_s
        for name, draws in (("parity", extra["parity"]), ("k", num_active))
    }
    return dict(
        N=data.shape[0],
        D=data.shape[1],
        K_mean=float(num_active.mean()),
        K_max=capacity if saturated else int(num_active.max()),
        capacity=capacity,
        ess_parity=ess_parity,
        ess_k=ess_k,
        rhat_parity=rhat_parity,
        rhat_k=rhat_k,
        esss_parity=ess_parity / sample_s,
        esss_k=ess_k / sample_s,
        chain_esss_parity=chain_esss["parity"],
        chain_esss_k=chain_esss["k"],
        chain_k=num_active.mean(1),
        iter_ms=1e3 * sample_s / (num_samples * num_chains),
        sample_s=sample_s,
        warmup_s=warmup_s,
        compile_s=compile_s,
    )


def slope(rows, key):
    pts = [(r["N"], r[key]) for r in rows if np.isfinite(r[key]) and r[key] > 0]
    if len(pts) < 2:
        return float("nan")
    n, y = np.log(np.array(pts)).T
    return float(np.polyfit(n, y, 1)[0])


def predicted_seconds(rows, num_rows, num_iters):
    """Sampling time of ``num_iters`` iterations at ``num_rows``, extrapolated from ``rows``."""
    if not rows:
        return 0.0
    power = max(slope(rows, "iter_ms"), 1.0) if len(rows) > 1 else 1.0
    last = rows[-1]
    return last["iter_ms"] / 1e3 * (num_rows / last["N"]) ** power * num_iters


def plot(results, engines, path):
    """ESS/s of the parity and of K and the time per iteration against N, log-log, one line per
    engine (red x: a saturated, truncated chain)."""
    fig, axes = pyplot().subplots(1, 3, figsize=(12, 3.6))
    titles = ["ESS/s, parity", "ESS/s, number of features", "time per iteration (ms)"]
    for engine in engines:
        rows = [r for r in results if r["engine"] == engine]
        if not rows:
            continue
        n = [r["N"] for r in rows]
        for ax, key in zip(axes, ("esss_parity", "esss_k", "iter_ms"), strict=True):
            ax.loglog(
                n, [r[key] for r in rows], "o-", label=f"{engine} (slope {slope(rows, key):.2f})"
            )
            sat = [r for r in rows if r["K_max"] >= r["capacity"]]
            ax.loglog([r["N"] for r in sat], [r[key] for r in sat], "rx", ms=10)
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title)
        ax.set_xlabel("N (red x: saturated, truncated chain)")
        ax.legend(fontsize=7)
    save_figure(fig, path, dpi=80)


def _data(bnb, num_rows, max_features):
    """``(model, data, model kwargs, true K)`` of the scaling run at ``num_rows``."""
    if bnb:
        from numpyro_bnp.models import bnb_combinatorial_clustering

        data, lengths = synthetic_documents(num_rows)
        kwargs = dict(doc_lengths=lengths, vocab_size=data.shape[1])
        return bnb_combinatorial_clustering, data, kwargs, "-"
    data, counts = synthetic(num_rows)
    kwargs = dict(
        num_obs=num_rows, dim=data.shape[1], mass=MASS, concentration=1.0, sigma_a=SIGMA0,
        sigma_o=SIGMA, max_features=max_features,
    )  # fmt: skip
    return linear_gaussian, data, kwargs, int((counts.sum(0) > 0).sum())  # generator atoms used


def _spread(values):
    """``median [min, max]`` of the finite ``values``, or ``nan``."""
    if not np.isfinite(values).any():
        return "nan"
    return f"{np.nanmedian(values):.3g} [{np.nanmin(values):.3g}, {np.nanmax(values):.3g}]"


def print_results(results, engines, skipped):
    """The tables of the scaling run: ESS/s and time, per chain, slopes, ratios, skipped."""
    print("\n== ESS/s and time per iteration (sampling phase, compile time excluded)")
    print_table(
        (
            Column("engine", 18, align="<"), Column("N", 6), Column("D", 3), Column("true K", 6),
            Column("E[K]", 5, ".1f"), Column("ESS/s par", 10, ".3g"), Column("ESS/s K", 9, ".3g"),
            Column("ms/iter", 9, ".1f"), Column("ESS par", 8, ".1f"), Column("ESS K", 7, ".1f"),
            Column("R^ par", 7, ".3f"), Column("R^ K", 6, ".3f"), Column("max K/cap", 9),
            Column("", align="<", gap=""),
        ),
        [
            (
                r["engine"], r["N"], r["D"], r["K_true"], r["K_mean"], r["esss_parity"],
                r["esss_k"], r["iter_ms"], r["ess_parity"], r["ess_k"], r["rhat_parity"],
                r["rhat_k"], f"{r['K_max']}/{r['capacity']}",
                " saturated: truncated chain" if r["K_max"] >= r["capacity"] else "",
            )
            for r in results
        ],
    )  # fmt: skip
    print("(true K: atoms of the generator used by some row; ESS and R^ over all chains, nan: K")
    print(" was the same in every kept draw of every chain, so they are undefined; ms/iter: one")
    print(" iteration of one chain)")
    print("\n== per chain: ESS/s of one chain over its own time, median [min, max]; mean K of each")
    print_table(
        (
            Column("engine", 18, align="<"), Column("N", 6), Column("true K", 6),
            Column("ESS/s parity", 26), Column("ESS/s K", 26), Column("K per chain", align="<"),
        ),
        [
            (
                r["engine"], r["N"], r["K_true"], _spread(r["chain_esss_parity"]),
                _spread(r["chain_esss_k"]), " ".join(f"{k:5.1f}" for k in r["chain_k"]),
            )
            for r in results
        ],
    )  # fmt: skip
    print(
        "\n== fitted log-log slopes in N (paper: ESS/s ~ N^-0.6 slice, N^-1.34 accelerated Gibbs)"
    )
    print_table(
        (
            Column("engine", 18, align="<"), Column("ESS/s parity", 12, "+.2f"),
            Column("ESS/s K", 8, "+.2f"), Column("time/iter", 9, "+.2f"),
        ),
        [
            (engine, slope(rows, "esss_parity"), slope(rows, "esss_k"), slope(rows, "iter_ms"))
            for engine in engines
            if (rows := [r for r in results if r["engine"] == engine])
        ],
    )  # fmt: skip
    pairs = {r["N"]: r for r in results if r["engine"] == "accelerated_gibbs"}
    ratios = [
        (
            r["engine"], r["N"], r["esss_parity"] / pairs[r["N"]]["esss_parity"],
            r["esss_k"] / pairs[r["N"]]["esss_k"],
        )
        for r in results
        if r["engine"].startswith("crm_slice") and r["N"] in pairs
    ]  # fmt: skip
    if ratios:
        print("\n== ratio ESS/s CRMSlice / accelerated Gibbs (same process, same data)")
        print_table(
            (
                Column("engine", 18, align="<"), Column("N", 6), Column("parity", 8, ".2f"),
                Column("K", 8, ".2f"),
            ),
            ratios,
        )  # fmt: skip
    if skipped:
        print("\n== skipped")
        print_table((Column("engine", 18, align="<"), Column("N", 6), Column("why", align="<")),
                    skipped)  # fmt: skip


def scaling(args):
    """The scaling run of ``bench crm_slice`` (module docstring)."""
    bnb = args.model == "bnb"
    engines = ["crm_slice"] if bnb else args.engines
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    num_warmup = args.warmup or (50 if args.quick else 100)
    num_samples = args.samples or (150 if args.quick else 500)
    chains = args.chains or 2
    setting = (
        f"BNB topics, (α, λ, β) = (1, 1.1, 0.1), {BNB_WORDS} words/doc, V = {BNB_VOCAB}"
        if bnb
        else f"(σ, σ0, c) = ({SIGMA}, {SIGMA0}, {MASS})"
    )
    print(
        f"backend {jax.default_backend()}, float32, {setting}, "
        f"{num_warmup} warm-up + {num_samples} kept iterations, {chains} sequential chains"
    )
    clock = CompileClock()
    results, skipped = [], []
    columns = (
        Column("engine", 18, align="<", gap="  "), Column("N", 6), Column("D", 3),
        Column("E[K]", 5, ".1f"), Column("ESS parity", 10, ".1f"), Column("K", 7, ".1f"),
        Column("ms/iter", 8, ".1f", gap="  "), Column("compile s", 9, ".1f", gap="  "),
        Column("", align="<", gap="  "),
    )  # fmt: skip
    progress = Table(columns)
    progress.header()
    for engine in engines:
        rows = []
        for num_rows in sizes:
            guess = predicted_seconds(rows, num_rows, (num_warmup + num_samples) * chains)
            if guess > args.max_seconds:
                skipped.append((engine, num_rows, f"predicted {guess:.0f} s > --max-seconds"))
                continue
            model, data, kwargs, k_true = _data(bnb, num_rows, args.max_features)
            kernel = make_kernel(engine, model)
            row = run_one(kernel, data, kwargs, num_warmup, num_samples, chains, clock)
            row.update(engine=engine, K_true=k_true)
            rows.append(row)
            progress.row(
                engine, num_rows, row["D"], row["K_mean"], row["ess_parity"], row["ess_k"],
                row["iter_ms"], row["compile_s"],
                "SATURATED" if row["K_max"] >= row["capacity"] else "",
            )  # fmt: skip
        results += rows
    print_results(results, engines, skipped)
    if results and args.figure:
        plot(results, engines, args.figure)
