"""The five restricted-IBP prior samplers of paper B §5.4, Figs. 1-4 (docs/restricted_ibp.md).

Paper B: Doshi-Velez & Williamson 2017, *Restricted Indian buffet processes*.

Setting: α = 5, c = 1, f = δ_J with J ∈ {2, 5, 8}; 25 runs of 100 rows per sampler.

1. Cost (paper Figs. 1-2): rejections per 100 rows and time to 100 accepted rows, median and
   10%/90% quantiles over the runs (rejection counts are heavy-tailed, with infinite mean for
   J >= α, so means are not shown). The approximate samplers (uncollapsed S2, tilted S3,
   inclusion S4) use a weak-limit beta process with ``--truncation`` atoms (default 50); the
   retrospective sampler (S5) starts from 20 stick-breaking atoms and grows as needed. A run stops
   after ``--max-rejections`` rejections (default 10^6 per matrix): such *capped* runs are counted
   in the table, their rejection count is the bound (a lower bound on the truth), and they are
   left out of the feature statistics (their rows after the last accepted one are zero).
2. Instantiated features: what each sampler represents — all IBP dishes of the collapsed sampler
   (including those used only by rejected proposals), all atoms of the retrospective sampler,
   the truncation I of the others — and the features used by the 100 accepted rows, against
   paper B's "30-40 (J = 5) and 35-45 (J = 8) instantiated features" of the exact samplers.
3. Truncation sweep (paper Figs. 3-4): the mean over runs of the sorted empirical feature
   probabilities (column means of a 100-row matrix in decreasing order) of S2-S4 at truncations
   I ∈ {10, 20, 50} against the exact collapsed sampler S1, for J = 5 and J = 8, summarised by the
   total-variation distance between the mean profiles divided by J (each profile sums to J), with a
   bootstrap standard error over runs. The exact retrospective sampler S5 gives the distance two
   exact samplers show at this number of runs (the noise floor). Figures (``--figures DIR``; the
   committed ones are ``docs/figures/restricted_ibp_*.png``): :func:`save_figures`.

Each run is one jitted call (compiled once per sampler, J and I; compilation is excluded from the
times), float32, CPU. ``--ibp-prior`` runs :mod:`numpyro_bnp.bench.ibp_prior` instead (the
unrestricted R-IBP prior's marginals and sampling against NumPy/SciPy peers).
"""

import os
import time
import warnings

import jax
import numpy as np
from jax import random

from numpyro_bnp._report import Column, Table
from numpyro_bnp.bench import ibp_prior
from numpyro_bnp.bench._common import pyplot, save_figure
from numpyro_bnp.distributions import RestrictedIBP, exactly

HELP = (
    "The full run (25 runs, M = 10^6, J in {2, 5, 8}, sweep I in {10, 20, 50}) gives the tables "
    "of docs/restricted_ibp.md; --quick (5 runs, M = 10^5, J in {5, 8}, sweep I in {10, 50}; "
    "mostly compilation) checks that everything runs. With --ibp-prior, --quick draws 2,000 "
    "matrices (50 for the one-draw-at-a-time peer) instead of 10,000 (200)."
)
QUICK_HELP = "5 runs, M = 10^5, J ∈ {5, 8}, I ∈ {10, 50} (see below)"
CPU_LOOP_KERNELS = False

ALPHA = 5.0
ROWS = 100
CAPACITY = 160
RETRO_START = 20  # initial stick-breaking atoms of the retrospective sampler
METHODS = {
    "collapsed_rejection": "exact collapsed (S1)",
    "uncollapsed_rejection": "uncollapsed rejection (S2)",
    "tilted_rejection": "tilted rejection (S3)",
    "inclusion": "inclusion (S4)",
    "retrospective": "retrospective (S5)",
}
APPROXIMATE = ("uncollapsed_rejection", "tilted_rejection", "inclusion")
# the sweep's control: the inclusion sampler on a truncated stick-breaking beta process, whose
# truncation error vanishes as I grows (π_I ≈ e^{-I/α}), unlike the weak limit's
STICK = "inclusion (S4), stick-breaking"
PAPER_INSTANTIATED = {5: "30-40", 8: "35-45"}


class Runs:
    """``runs`` timed draws of one sampler: matrices, rejections, seconds, instantiated, capped."""

    def __init__(
        self, count, method, truncation, runs, seed, max_rejections, directing="weak_limit"
    ):
        d = RestrictedIBP(
            ALPHA,
            exactly(count),
            num_rows=ROWS,
            max_features=CAPACITY,
            method=method,
            truncation=RETRO_START if method == "retrospective" else truncation,
            max_rejections=max_rejections,
            directing=directing,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # capped runs are counted, not warned about
            d.sample_with_info(random.PRNGKey(10_000 + seed))[0].block_until_ready()  # compile
            out = []
            for r in range(runs):
                start = time.perf_counter()
                z, info = d.sample_with_info(random.PRNGKey(seed * 1000 + r))
                z.block_until_ready()
                out.append((np.asarray(z), info, time.perf_counter() - start))
        assert not any(bool(info.overflow) for _, info, _ in out), (method, count)
        self.z = np.stack([z for z, _, _ in out])
        self.rejections = np.array([int(info.num_rejections) for _, info, _ in out])
        self.seconds = np.array([s for _, _, s in out])
        self.instantiated = np.array([int(info.num_instantiated) for _, info, _ in out])
        self.capped = np.array([bool(info.exhausted) for _, info, _ in out])

    @property
    def complete(self):
        """Matrices of the runs that were not capped: ``(runs', N, K)``."""
        return self.z[~self.capped]

    @property
    def used(self):
        """Features used by the accepted rows, per complete run."""
        return (self.complete.sum(1) > 0).sum(-1)


def spread(x, fmt="{:.0f}"):
    if len(x) == 0:
        return "-"
    lo, med, hi = np.quantile(x, [0.1, 0.5, 0.9])
    return f"{fmt.format(med)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def sorted_probs(z):
    """Per run: the column means sorted in decreasing order, ``(runs, CAPACITY)``."""
    return np.sort(z.mean(1), axis=-1)[:, ::-1]


def tv_to(profiles, reference, count, rng, boot=400):
    """TV distance / J between mean sorted profiles, and its bootstrap s.e. over runs."""

    def tv(a, b):
        return 0.5 * np.abs(a.mean(0) - b.mean(0)).sum() / count

    draws = [
        tv(
            profiles[rng.integers(0, len(profiles), len(profiles))],
            reference[rng.integers(0, len(reference), len(reference))],
        )
        for _ in range(boot)
    ]
    return tv(profiles, reference), float(np.std(draws))


def sampler_table(width, *columns):
    """A table of the samplers (its header printed): ``J``, the sampler's label in ``width``
    characters, then ``columns``."""
    table = Table((Column("J", 2), Column("sampler", width, align="<", gap="  "), *columns), True)
    table.header()
    return table


def cost_table(args):
    """Part 1: every sampler at J ∈ {2, 5, 8} (approximate ones: weak limit, I = 50)."""
    results = {}
    print(f"\n1. cost, median [10%, 90%] over {args.runs} runs (approximate: weak limit, I = 50)")
    table = sampler_table(
        27, Column("rejections / 100 rows", 24), Column("ms / 100 rows", 22), Column("capped", 7)
    )
    for count in args.counts:
        for seed, (method, label) in enumerate(METHODS.items()):
            res = Runs(count, method, 50, args.runs, seed + 10 * count, args.max_rejections)
            results[count, method, 50, "weak_limit"] = res
            table.row(
                count, label, spread(res.rejections), spread(1e3 * res.seconds, "{:.1f}"),
                f"{res.capped.sum()}/{args.runs}",
            )  # fmt: skip
    return results


def feature_table(results, args):
    """Part 2: instantiated and used features per sampler."""
    print("\n2. features, median [10%, 90%] over the complete runs")
    table = sampler_table(
        27, Column("instantiated", 16), Column("used by 100 rows", 17), Column("paper (exact)", 14)
    )
    for count in args.counts:
        for method, label in METHODS.items():
            res = results[count, method, 50, "weak_limit"]
            exact = method in ("collapsed_rejection", "retrospective")
            paper = PAPER_INSTANTIATED.get(count, "") if exact else ""
            inst = res.instantiated[~res.capped]
            table.row(count, label, spread(inst), spread(res.used), paper)


def sweep(results, args):
    """Part 3: sorted feature probabilities vs truncation, ``{(J, label, I): (runs, K)}``."""
    rng = np.random.default_rng(0)
    print(
        "\n3. truncation sweep: TV distance / J between the mean sorted feature probabilities and "
        "those of the exact collapsed sampler (± bootstrap s.e.); p(k): mean k-th largest "
        "feature probability"
    )
    columns = (
        Column("I", 4), Column("TV/J to S1", 14), Column("p(1)", 6, ".3f"),
        Column("p(10)", 6, ".3f"), Column("p(20)", 6, ".3f"), Column("runs", 5),
    )  # fmt: skip
    table = sampler_table(31, *columns)
    exact = ("collapsed_rejection", "retrospective")
    profiles = {}
    for count in (5, 8):
        reference = sorted_probs(results[count, "collapsed_rejection", 50, "weak_limit"].complete)
        rows = [(METHODS[m], m, None, "weak_limit") for m in exact]
        for truncation in args.sweep:
            rows += [(METHODS[m], m, truncation, "weak_limit") for m in APPROXIMATE]
            rows.append((STICK, "inclusion", truncation, "stick_breaking"))
        for seed, (label, method, truncation, directing) in enumerate(rows):
            key = (count, method, truncation or 50, directing)
            if key not in results:
                seed = 100 + 10 * count + seed
                results[key] = Runs(
                    count, method, truncation, args.runs, seed, args.max_rejections, directing
                )
            p = sorted_probs(results[key].complete)
            profiles[count, label, truncation] = p
            if method == "collapsed_rejection":
                tv, se = 0.0, 0.0
            else:
                tv, se = tv_to(p, reference, count, rng)
            m = p.mean(0)
            table.row(
                count, label, truncation or "-", f"{tv:.3f} ± {se:.3f}", m[0], m[9], m[19], len(p)
            )
    return profiles


def add_arguments(parser):
    """The options of ``bench restricted_ibp`` besides ``--quick``."""
    parser.add_argument("--runs", type=int, default=None, help="runs per sampler (25; quick 5)")
    parser.add_argument(
        "--max-rejections", type=int, default=None, help="per matrix (10^6; quick 10^5)"
    )
    parser.add_argument(
        "--figures", metavar="DIR", help="save the figures in DIR (docs/figures; default none)"
    )
    parser.add_argument(
        "--ibp-prior", action="store_true",
        help="the R-IBP prior's marginals and sampling against NumPy/SciPy instead",
    )  # fmt: skip
    ibp_prior.add_arguments(parser)


def run(args):
    """The three parts (module docstring), or the R-IBP prior with ``--ibp-prior``."""
    if args.ibp_prior:
        ibp_prior.bench_ibp_prior(args)
        return 0
    args.runs = args.runs or (5 if args.quick else 25)
    args.max_rejections = args.max_rejections or (10**5 if args.quick else 10**6)
    args.counts = (5, 8) if args.quick else (2, 5, 8)
    args.sweep = (10, 50) if args.quick else (10, 20, 50)
    print(
        f"jax {jax.__version__}, backend {jax.default_backend()}, α = {ALPHA}, {ROWS} rows, "
        f"{args.runs} runs, max_rejections = {args.max_rejections:,} per matrix"
    )
    start = time.perf_counter()
    results = cost_table(args)
    feature_table(results, args)
    profiles = sweep(results, args)
    if args.figures:
        save_figures(results, profiles, args)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    return 0


def save_figures(results, profiles, args):
    """In ``args.figures``: ``restricted_ibp_sampler_cost.png`` (rejections and seconds of every
    run, paper Figs. 1-2) and ``restricted_ibp_sorted_probs_J{5,8}.png`` (the sweep's mean
    sorted feature probabilities, Figs. 3-4)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, field, ylabel in (
        (axes[0], "rejections", "rejections per 100 rows"),
        (axes[1], "seconds", "seconds to 100 accepted rows"),
    ):
        for j, count in enumerate(args.counts):
            for m, method in enumerate(METHODS):
                res = results[count, method, 50, "weak_limit"]
                values = getattr(res, field)
                if field == "rejections":
                    values = np.maximum(values, 0.5)  # inclusion: 0 rejections, drawn at 0.5
                x = j * (len(METHODS) + 1) + m
                x = x + np.random.default_rng(m).uniform(-0.25, 0.25, len(values))
                label = METHODS[method] if j == 0 else None
                ax.scatter(x[~res.capped], values[~res.capped], s=5, color=f"C{m}", label=label)
                ax.scatter(x[res.capped], values[res.capped], s=14, color=f"C{m}", marker="^")
        ax.set_yscale("log")
        ticks = [2 + j * (len(METHODS) + 1) for j in range(len(args.counts))]
        ax.set_xticks(ticks, [f"J = {count}" for count in args.counts])
        ax.set_ylabel(ylabel)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=5, fontsize=7)
    fig.suptitle(
        f"R-IBP prior samplers, α = 5, {args.runs} runs of 100 rows; ▲ = capped at "
        f"{args.max_rejections:.0e} rejections (paper B Figs. 1-2)",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save_figure(fig, os.path.join(args.figures, "restricted_ibp_sampler_cost.png"), 90, False)

    ranks = np.arange(1, 51)
    styles = {"uncollapsed_rejection": ":", "tilted_rejection": "--", "inclusion": "-"}
    for count in (5, 8):
        fig, axes = plt.subplots(1, len(args.sweep), figsize=(10, 3.4), sharey=True)
        for ax, truncation in zip(axes, args.sweep, strict=True):
            for method, color, lw in (
                ("collapsed_rejection", "k", 2.5),
                ("retrospective", "0.6", 2),
            ):
                label = METHODS[method]
                mean = profiles[count, label, None].mean(0)[:50]
                ax.plot(ranks, mean, color=color, lw=lw, label=label)
            for m, method in enumerate(APPROXIMATE):
                mean = profiles[count, METHODS[method], truncation].mean(0)[:50]
                label = METHODS[method] + ", weak limit"
                ax.plot(ranks, mean, styles[method], color=f"C{m + 1}", lw=1.2, label=label)
            mean = profiles[count, STICK, truncation].mean(0)[:50]
            ax.plot(ranks, mean, "-.", color="C4", lw=1.2, label=STICK)
            ax.set_title(f"truncation I = {truncation}", fontsize=9)
            ax.set_xlabel("feature rank")
        axes[0].set_ylabel("mean sorted feature probability")
        axes[-1].legend(fontsize=7)
        fig.suptitle(
            f"R-IBP, α = 5, J = {count}, {args.runs} runs of 100 rows: approximate samplers at "
            f"truncation I vs exact (paper B Fig. {3 if count == 5 else 4})",
            fontsize=9,
        )
        path = os.path.join(args.figures, f"restricted_ibp_sorted_probs_J{count}.png")
        save_figure(fig, path, dpi=90)
