"""Benchmark: the five restricted-IBP prior samplers of paper B §5.4 (Figs. 1-4).

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
   exact samplers show at this number of runs (the noise floor). Figures go to
   ``docs/figures/restricted_ibp_*.png``.

Each run is one jitted call (compiled once per sampler, J and I; compilation is excluded from the
times), float32, CPU.

Run: ``python benchmarks/bench_restricted_ibp.py [--quick] [--runs R] [--max-rejections M]
[--no-figures]``. ``--quick`` (5 runs, M = 10^5, J ∈ {5, 8}, sweep I ∈ {10, 50}; mostly
compilation) checks that everything runs; the full run gives the tables in
``docs/restricted_ibp.md``.
"""

import argparse
import pathlib
import time
import warnings

import jax
import numpy as np
from jax import random

from numpyro_bnp.distributions import RestrictedIBP, exactly

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
FIGURES = pathlib.Path(__file__).resolve().parents[1] / "docs" / "figures"


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


def cost_table(args):
    """Part 1: every sampler at J ∈ {2, 5, 8} (approximate ones: weak limit, I = 50)."""
    results = {}
    header = (
        f"{'J':>2}  {'sampler':<27} {'rejections / 100 rows':>24} {'ms / 100 rows':>22}"
        f" {'capped':>7}"
    )
    print(f"\n1. cost, median [10%, 90%] over {args.runs} runs (approximate: weak limit, I = 50)")
    print(header + "\n" + "-" * len(header))
    for count in args.counts:
        for seed, (method, label) in enumerate(METHODS.items()):
            res = Runs(count, method, 50, args.runs, seed + 10 * count, args.max_rejections)
            results[count, method, 50, "weak_limit"] = res
            print(
                f"{count:>2}  {label:<27} {spread(res.rejections):>24} "
                f"{spread(1e3 * res.seconds, '{:.1f}'):>22} {res.capped.sum():>4}/{args.runs}",
                flush=True,
            )
    return results


def feature_table(results, args):
    """Part 2: instantiated and used features per sampler."""
    print("\n2. features, median [10%, 90%] over the complete runs")
    header = (
        f"{'J':>2}  {'sampler':<27} {'instantiated':>16} {'used by 100 rows':>17} "
        f"{'paper (exact)':>14}"
    )
    print(header + "\n" + "-" * len(header))
    for count in args.counts:
        for method, label in METHODS.items():
            res = results[count, method, 50, "weak_limit"]
            exact = method in ("collapsed_rejection", "retrospective")
            paper = PAPER_INSTANTIATED.get(count, "") if exact else ""
            inst = res.instantiated[~res.capped]
            print(f"{count:>2}  {label:<27} {spread(inst):>16} {spread(res.used):>17} {paper:>14}")


def sweep(results, args):
    """Part 3: sorted feature probabilities vs truncation, ``{(J, label, I): (runs, K)}``."""
    rng = np.random.default_rng(0)
    print(
        "\n3. truncation sweep: TV distance / J between the mean sorted feature probabilities and "
        "those of the exact collapsed sampler (± bootstrap s.e.); p(k): mean k-th largest "
        "feature probability"
    )
    header = (
        f"{'J':>2}  {'sampler':<31} {'I':>4} {'TV/J to S1':>14} {'p(1)':>6} {'p(10)':>6} "
        f"{'p(20)':>6} {'runs':>5}"
    )
    print(header + "\n" + "-" * len(header))
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
            print(
                f"{count:>2}  {label:<31} {truncation or '-':>4} "
                f"{f'{tv:.3f} ± {se:.3f}':>14} {m[0]:>6.3f} {m[9]:>6.3f} {m[19]:>6.3f} "
                f"{len(p):>5}",
                flush=True,
            )
    return profiles


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="5 runs, M = 10^5, J ∈ {5, 8}, I ∈ {10, 50}"
    )
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--max-rejections", type=int, default=None)
    parser.add_argument("--no-figures", action="store_true")
    args = parser.parse_args()
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
    if not args.no_figures:
        save_figures(results, profiles, args)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


def save_figures(results, profiles, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    FIGURES.mkdir(parents=True, exist_ok=True)
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
    fig.savefig(FIGURES / "restricted_ibp_sampler_cost.png", dpi=90)
    plt.close(fig)

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
        fig.tight_layout()
        fig.savefig(FIGURES / f"restricted_ibp_sorted_probs_J{count}.png", dpi=90)
        plt.close(fig)
    print(f"\nfigures saved to {FIGURES.relative_to(FIGURES.parents[1])}")


if __name__ == "__main__":
    main()
