"""Scaling of the CRM slice sampler vs the accelerated collapsed Gibbs sampler (reduced size).

    python benchmarks/bench_crm_slice.py                                  # both engines
    python benchmarks/bench_crm_slice.py --engines accelerated_gibbs --quick
    python benchmarks/bench_crm_slice.py --max-seconds 120 --sizes 500 1000 2000
    python benchmarks/bench_crm_slice.py --data digits --digits-rows 300 1597   # real data
    python benchmarks/bench_crm_slice.py --data digits --digits-rows 1597 --match "start='prior'"

The scaling experiment of the slice sampler for general CRMs (Section 5 of that paper) at reduced
size: data from a truncated beta-Bernoulli linear-Gaussian model with noise σ = 0.2, feature scale
σ_0 = 0.5 and mass c = 1 (θ_k = exp(-Γ_k / c), the Bondesson / inverse-Lévy series of the beta
process with concentration 1, truncated at K = 2⌈log N⌉ atoms; X_nk ~ Bernoulli(θ_k),
ψ_k ~ N(0, σ_0² I_D), y_n ~ N(X_n ψ, σ² I_D)), with D = 2⌈N log N / (N - log N)⌉.

Both engines run ``numpyro.infer.MCMC(engine(models.linear_gaussian), ...)`` on the same model
(IBP(α = c, β = 1) prior, σ_A = σ_0, σ_o = σ, the model's default capacity, which is the
baseline's fixed buffer; ``--max-features`` changes it, but the baseline's time per iteration
grows steeply with it: 28 ms at 22 slots, 382 ms at 48 slots for N = 500), ``--chains``
sequential chains each. For each N the script times the sampling phase (after a separate warm-up
call; the wall time minus the time JAX spent compiling, measured with ``jax.monitoring``),
computes with ``arviz.ess`` and ``arviz.rhat`` over the chains the ESS and R-hat of the parity
test function (1 if Z has an even number of non-zero entries) and of the number of active
features K, and prints ESS/s, per-iteration time, the fitted log-log slopes in N and the ratio
ESS/s CRMSlice / accelerated Gibbs at each N. The plot goes to
``docs/figures/crm_slice_scaling.png``.

A run whose number of active features reaches the capacity of ``Z`` (the model's
``max_features``) is marked *saturated*: that chain is truncated and its ESS is not comparable.

``--max-seconds`` caps the predicted sampling time of one (engine, N) run: from the measured
per-iteration times at smaller N, extrapolated with the fitted slope (at least linear), a size
whose prediction exceeds the budget is skipped and reported as such.

``--data digits`` runs both engines on real data instead: scikit-learn's digits (pixels / 16,
D = 64, shuffled with a fixed seed), the first ``N`` images fitted and the last 200 held out,
under ``linear_gaussian`` with α = 3, σ_A = 0.5, σ_o = 0.15 (``DIGITS``); ``CRMSlice`` with the
settings ``docs/crm_slice.md`` recommends at high dimension (``n_collapsed=5, xi_scale=3``),
and the same with the collapsed row moves (``collapsed_rows=True``), each also started from a
prior draw (``start="prior"``); ``--tempered R`` adds it with ``R`` tempered replicas.
Four vectorized chains of each engine start from their first state and advance by compiled
sweeps, ``--segments`` segments of ``--segment`` sweeps; after each the held-out log
predictive per image of that segment's draws (20 draws,
:func:`numpyro_bnp.bench.features.held_out_curve`) is printed with the compiled seconds so far,
and the table ends with the seconds each engine needed to reach the baseline's best score
(within 1 nat). The figure is ``docs/figures/crm_slice_digits.png``.

Engines: ``crm_slice`` = :class:`numpyro_bnp.infer.CRMSlice` (topic model:
:class:`numpyro_bnp.infer.CRMTopicSlice`),
``crm_slice_rows`` = ``CRMSlice(collapsed_rows=True)`` (not run by default),
``accelerated_gibbs`` = :class:`numpyro_bnp.infer.AcceleratedIBPGibbs`.

``--model bnb`` runs the beta–negative-binomial topic model of the paper's §4.2 instead
(:func:`numpyro_bnp.models.bnb_combinatorial_clustering` with (α, λ, β) = (1, 1.1, 0.1),
Δ_ξ = 3, (n_Γ, Δ_V) = (10, 0.3)) on documents drawn from that model (``BNB_WORDS`` words on average,
a vocabulary of ``BNB_VOCAB``); "N" is then the number of documents. Only ``CRMTopicSlice`` runs
it: the library has no other sampler for this model (the paper's peer, the superposition slice
sampler of Broderick et al., is not implemented), so the table reports the scaling in N, not a
ratio.
"""

import argparse
import math
import os
import time

import jax
import numpy as np
from jax import random

from numpyro_bnp.arviz_compat import arviz
from numpyro_bnp.models import linear_gaussian

SIGMA, SIGMA0, MASS = 0.2, 0.5, 1.0
SIZES = (500, 1000, 2000, 5000, 10000)
QUICK_SIZES = (200, 400, 800)
BNB_WORDS, BNB_VOCAB = 50, 100
FIGURE = os.path.normpath(
    os.path.join(os.path.dirname(__file__), "..", "docs", "figures", "crm_slice_scaling.png")
)


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


DIGITS = dict(mass=3.0, sigma_a=0.5, sigma_o=0.15)
DIGITS_TEST, DIGITS_DRAWS, DIGITS_IS = 200, 20, 1000


def digits_curves(rows_list, segment, num_segments, capacity, path, replicas=0, match=None):
    """The real-data section (module docstring): one held-out curve per (engine, N);
    ``replicas`` adds ``CRMSlice`` with that many tempered replicas; ``match`` keeps the
    baseline and the engines whose name contains it."""
    from numpyro_bnp.bench.features import DrawScorer, digits_pixels, held_out_curve
    from numpyro_bnp.infer import AcceleratedIBPGibbs, CRMSlice

    def crm_slice(**options):
        return lambda: CRMSlice(
            linear_gaussian, n_collapsed=5, xi_scale=3.0, max_features=2 * capacity, **options
        )

    engines = {"CRMSlice(n_collapsed=5, xi_scale=3)": crm_slice()}
    if replicas:
        engines[f"  same, temperatures={replicas}"] = crm_slice(temperatures=replicas)
    engines["  same, collapsed_rows=True"] = crm_slice(collapsed_rows=True)
    engines["  same, start='prior'"] = crm_slice(start="prior")
    engines["  same, collapsed_rows, start='prior'"] = crm_slice(collapsed_rows=True, start="prior")
    engines["AcceleratedIBPGibbs"] = lambda: AcceleratedIBPGibbs(linear_gaussian)
    if match is not None:
        engines = {k: v for k, v in engines.items() if match in k or k == "AcceleratedIBPGibbs"}
    curves = {}
    for num_rows in rows_list:
        train, test = digits_pixels(num_rows, DIGITS_TEST)
        kw = dict(num_obs=num_rows, dim=train.shape[1], max_features=capacity, **DIGITS)
        scorer = DrawScorer(kw, 2 * capacity, DIGITS_IS)
        print(f"\n== digits, N = {num_rows} fitted, {DIGITS_TEST} held out, {DIGITS}", flush=True)
        for name, make in engines.items():
            curve = held_out_curve(
                make(), train, test, kw, (segment,) * num_segments, scorer, DIGITS_DRAWS
            )
            curves[name, num_rows] = curve
            for point in curve:
                chains = " ".join(f"{k:4.1f}" for k in point["K_chains"])
                print(
                    f"  {name:<36} {point['sweeps']:>5} sweeps {point['seconds']:8.1f} s  "
                    f"held-out {point['lp']:7.2f}  features per chain {chains}",
                    flush=True,
                )
    print("\n== seconds to reach the baseline's best held-out score (within 1 nat)")
    for num_rows in rows_list:
        best = max(p["lp"] for p in curves["AcceleratedIBPGibbs", num_rows])
        for name in engines:
            hit = [p for p in curves[name, num_rows] if p["lp"] >= best - 1.0]
            last = curves[name, num_rows][-1]
            reached = f"{hit[0]['seconds']:8.1f} s" if hit else "     not"
            print(
                f"N = {num_rows:>5} {name:<36} {reached}   final {last['lp']:7.2f} "
                f"({last['K']:.1f} features, {last['seconds']:.0f} s)"
            )
    plot_curves(curves, path)
    print(f"\nfigure: {path}")
    return curves


def plot_curves(curves, path):
    """Held-out log predictive against compiled seconds, one line per (engine, N)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for (name, num_rows), curve in curves.items():
        ax.plot([p["seconds"] for p in curve], [p["lp"] for p in curve], "o-", ms=3,
                label=f"{name}, N = {num_rows}")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("seconds (compiled, 4 chains)")
    ax.set_ylabel("held-out log predictive per image")
    ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=80)


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


def ess_rhat(draws):
    """``arviz.ess`` and ``arviz.rhat`` of ``draws`` ``(chains, draws)``; NaN when no chain
    ever moved (both undefined)."""
    draws = np.asarray(draws, float)
    if not draws.std() > 0:
        return float("nan"), float("nan")
    rhat = float(arviz().rhat(draws)) if draws.shape[0] > 1 else float("nan")
    return float(arviz().ess(draws)), rhat


def per_chain_ess(draws):
    """``(C,)`` each chain's own ``arviz.ess`` (NaN for a chain that never moved)."""
    return np.array([ess_rhat(chain[None])[0] for chain in np.asarray(draws, float)])


def run_one(kernel, data, kwargs, num_warmup, num_samples, num_chains, clock, seed=0):
    """Warm up, then time the sampling phase of ``num_chains`` sequential chains of ``kernel``
    on ``data``; a row of the table from the ``parity`` and ``num_active`` extra fields."""
    from numpyro.infer import MCMC

    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="sequential",
        progress_bar=False,
    )
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
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
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=80)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N in {200, 400, 800}, short chains")
    parser.add_argument(
        "--engines",
        nargs="+",
        default=["crm_slice", "accelerated_gibbs"],
        choices=["crm_slice", "crm_slice_rows", "accelerated_gibbs"],
    )
    parser.add_argument("--sizes", nargs="+", type=int, help="override the list of N")
    parser.add_argument("--warmup", type=int, help="warm-up iterations (default 100, quick 50)")
    parser.add_argument("--samples", type=int, help="kept iterations (default 500, quick 150)")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=600.0,
        help="skip an (engine, N) whose predicted sampling time exceeds this",
    )
    parser.add_argument("--chains", type=int, default=2, help="sequential chains (default 2)")
    parser.add_argument(
        "--max-features",
        type=int,
        default=None,
        help="capacity of Z in the model, the baseline's fixed buffer (default: the model's)",
    )
    parser.add_argument("--plot", default=FIGURE, help="where to save the figure")
    parser.add_argument(
        "--model",
        default="beta_bernoulli",
        choices=["beta_bernoulli", "bnb"],
        help="bnb: the topic model of §4.2, N documents, CRMTopicSlice only",
    )
    parser.add_argument(
        "--data", default="synthetic", choices=["synthetic", "digits"], help="digits: real data"
    )
    parser.add_argument("--digits-rows", nargs="+", type=int, default=[300], help="fitted N")
    parser.add_argument("--segment", type=int, default=25, help="digits: sweeps per call")
    parser.add_argument("--segments", type=int, default=12, help="digits: calls per engine")
    parser.add_argument(
        "--tempered", type=int, default=0, help="digits: add CRMSlice with this many replicas"
    )
    parser.add_argument(
        "--match", help="digits: only the baseline and the engines whose name contains this"
    )
    args = parser.parse_args(argv)
    if args.data == "digits":
        capacity = args.max_features or 40
        path = FIGURE.replace("scaling", "digits") if args.plot == FIGURE else args.plot
        digits_curves(
            args.digits_rows, args.segment, args.segments, capacity, path, args.tempered, args.match
        )
        return
    bnb = args.model == "bnb"
    if bnb:
        args.engines = ["crm_slice"]
        if args.plot == FIGURE:
            args.plot = FIGURE.replace("scaling", "bnb_scaling")
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    num_warmup = args.warmup or (50 if args.quick else 100)
    num_samples = args.samples or (150 if args.quick else 500)

    setting = (
        f"BNB topics, (α, λ, β) = (1, 1.1, 0.1), {BNB_WORDS} words/doc, V = {BNB_VOCAB}"
        if bnb
        else f"(σ, σ0, c) = ({SIGMA}, {SIGMA0}, {MASS})"
    )
    print(
        f"backend {jax.default_backend()}, float32, {setting}, "
        f"{num_warmup} warm-up + {num_samples} kept iterations, {args.chains} sequential chains"
    )
    clock = CompileClock()
    results, skipped = [], []
    for engine in args.engines:
        rows = []
        for num_rows in sizes:
            guess = predicted_seconds(rows, num_rows, (num_warmup + num_samples) * args.chains)
            if guess > args.max_seconds:
                skipped.append((engine, num_rows, f"predicted {guess:.0f} s > --max-seconds"))
                continue
            if bnb:
                from numpyro_bnp.models import bnb_combinatorial_clustering as model

                data, lengths = synthetic_documents(num_rows)
                kwargs = dict(doc_lengths=lengths, vocab_size=data.shape[1])
                k_true = "-"
            else:
                model = linear_gaussian
                data, counts = synthetic(num_rows)
                kwargs = dict(
                    num_obs=num_rows,
                    dim=data.shape[1],
                    mass=MASS,
                    concentration=1.0,
                    sigma_a=SIGMA0,
                    sigma_o=SIGMA,
                    max_features=args.max_features,
                )
                k_true = int((counts.sum(0) > 0).sum())  # generator atoms in use
            kernel = make_kernel(engine, model)
            row = run_one(kernel, data, kwargs, num_warmup, num_samples, args.chains, clock)
            row.update(engine=engine, K_true=k_true)
            rows.append(row)
            print(
                f"  {engine:<18} N={num_rows:>6} D={row['D']:>3} E[K]={row['K_mean']:5.1f} "
                f"ESS parity {row['ess_parity']:7.1f} K {row['ess_k']:7.1f}  "
                f"{row['iter_ms']:8.1f} ms/iter  (compile {row['compile_s']:.1f} s)"
                + ("  SATURATED" if row["K_max"] >= row["capacity"] else ""),
                flush=True,
            )
        results += rows

    print("\n== ESS/s and time per iteration (sampling phase, compile time excluded)")
    header = f"{'engine':<18} {'N':>6} {'D':>3} {'true K':>6} {'E[K]':>5} {'ESS/s par':>10}"
    header += f" {'ESS/s K':>9} {'ms/iter':>9} {'ESS par':>8} {'ESS K':>7}"
    print(header + f" {'R^ par':>7} {'R^ K':>6} {'max K/cap':>9}")
    for r in results:
        print(
            f"{r['engine']:<18} {r['N']:>6} {r['D']:>3} {r['K_true']:>6} {r['K_mean']:>5.1f} "
            f"{r['esss_parity']:>10.3g} {r['esss_k']:>9.3g} {r['iter_ms']:>9.1f} "
            f"{r['ess_parity']:>8.1f} {r['ess_k']:>7.1f} {r['rhat_parity']:>7.3f} "
            f"{r['rhat_k']:>6.3f} {r['K_max']:>5}/{r['capacity']:<3}"
            + (" saturated: truncated chain" if r["K_max"] >= r["capacity"] else "")
        )
    print("(true K: atoms of the generator used by some row; ESS and R^ over all chains, nan: K")
    print(" was the same in every kept draw of every chain, so they are undefined; ms/iter: one")
    print(" iteration of one chain)")
    print("\n== per chain: ESS/s of one chain over its own time, median [min, max]; mean K of each")
    for r in results:
        spread = [
            f"{np.nanmedian(v):8.3g} [{np.nanmin(v):.3g}, {np.nanmax(v):.3g}]"
            if np.isfinite(v).any()
            else f"{'nan':>8}"
            for v in (r["chain_esss_parity"], r["chain_esss_k"])
        ]
        chains = " ".join(f"{k:5.1f}" for k in r["chain_k"])
        print(
            f"{r['engine']:<18} {r['N']:>6} true K {r['K_true']:>3}  ESS/s parity {spread[0]}"
            f"  K {spread[1]}  K per chain {chains}"
        )
    print(
        "\n== fitted log-log slopes in N (paper: ESS/s ~ N^-0.6 slice, N^-1.34 accelerated Gibbs)"
    )
    for engine in args.engines:
        rows = [r for r in results if r["engine"] == engine]
        if rows:
            print(
                f"{engine:<18} ESS/s parity {slope(rows, 'esss_parity'):+.2f}  "
                f"ESS/s K {slope(rows, 'esss_k'):+.2f}  time/iter {slope(rows, 'iter_ms'):+.2f}"
            )
    pairs = {r["N"]: r for r in results if r["engine"] == "accelerated_gibbs"}
    ratios = [
        (
            r["engine"],
            r["N"],
            r["esss_parity"] / pairs[r["N"]]["esss_parity"],
            r["esss_k"] / pairs[r["N"]]["esss_k"],
        )
        for r in results
        if r["engine"].startswith("crm_slice") and r["N"] in pairs
    ]
    if ratios:
        print("\n== ratio ESS/s CRMSlice / accelerated Gibbs (same process, same data)")
        print(f"{'engine':<18} {'N':>6} {'parity':>8} {'K':>8}")
        for engine, n, rp, rk in ratios:
            print(f"{engine:<18} {n:>6} {rp:>8.2f} {rk:>8.2f}")
    if skipped:
        print("\n== skipped")
        for engine, n, why in skipped:
            print(f"{engine:<18} N={n:>6}: {why}")
    if results:
        print(f"\nfigure: {plot(results, args.engines, args.plot)}")


if __name__ == "__main__":
    main()
