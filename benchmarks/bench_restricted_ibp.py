"""Benchmark: the five restricted-IBP prior samplers of paper B §5.4 (Figs. 1-4).

Setting: α = 5, c = 1, f = δ_J with J ∈ {2, 5, 8}; 25 runs of 100 rows per sampler.

* Rejections per 100 rows and time to 100 accepted rows, per run (median and 10%/90% quantiles:
  the rejection counts are heavy-tailed, with infinite mean for J >= α, so means are not shown).
  The approximate samplers (uncollapsed, tilted, inclusion) use a weak-limit beta process with
  ``--truncation`` atoms (default 50); the retrospective sampler starts from 20 stick-breaking
  atoms and grows as needed.
* Features instantiated by the exact samplers: all IBP dishes of the collapsed sampler (including
  those used only by rejected proposals), atoms of the retrospective sampler, and the features
  used by the 100 accepted rows.
* Mean sorted empirical feature probabilities (column means, sorted in decreasing order,
  averaged over the runs) of the approximate samplers at truncations I ∈ {10, 20, 50} against
  the exact collapsed sampler, for J = 5 and J = 8 (paper Figs. 3-4).

Each run is one jitted call (compiled once per sampler and J, compilation excluded from the
times), float32, one CPU thread of XLA's choosing. Figures go to ``docs/figures/``.

Run: ``python benchmarks/bench_restricted_ibp.py [--runs R] [--truncation I] [--max-rejections M]
[--no-figures]``; runs that hit ``M`` rejections are counted and reported (at J = 8 > α the
expected cost is infinite and a single run can need far more than 10^7 proposals).
"""

import argparse
import pathlib
import time

import jax
import numpy as np
from jax import random

from numpyro_bnp.distributions import RestrictedIBP, exactly

ALPHA = 5.0
ROWS = 100
CAPACITY = 160
METHODS = {
    "collapsed_rejection": "exact collapsed (S1)",
    "uncollapsed_rejection": "uncollapsed rejection (S2)",
    "tilted_rejection": "tilted rejection (S3)",
    "inclusion": "inclusion (S4)",
    "retrospective": "retrospective (S5)",
}
FIGURES = pathlib.Path(__file__).resolve().parents[1] / "docs" / "figures"


def prior(count, method, truncation, max_rejections):
    return RestrictedIBP(
        ALPHA,
        exactly(count),
        num_rows=ROWS,
        max_features=CAPACITY,
        method=method,
        truncation=20 if method == "retrospective" else truncation,
        max_rejections=max_rejections,
    )


def run_sampler(count, method, truncation, runs, seed, max_rejections):
    """``runs`` timed draws of a 100-row matrix: (z, rejections, seconds, instantiated).

    Runs that hit ``max_rejections`` are kept (their rejection count is the bound, a lower
    bound on the truth) and reported by the caller through the returned flags.
    """
    d = prior(count, method, truncation, max_rejections)
    d.sample_with_info(random.PRNGKey(10_000 + seed))[0].block_until_ready()  # compile
    zs, rejections, seconds, instantiated, capped = [], [], [], [], 0
    for r in range(runs):
        start = time.perf_counter()
        z, info = d.sample_with_info(random.PRNGKey(seed * 1000 + r))
        z.block_until_ready()
        seconds.append(time.perf_counter() - start)
        assert not bool(info.overflow), (method, count, info)
        capped += bool(info.exhausted)
        zs.append(np.asarray(z))
        rejections.append(int(info.num_rejections))
        instantiated.append(int(info.num_instantiated))
    if capped:
        print(f"    ({method}, J = {count}: {capped} run(s) hit max_rejections={max_rejections})")
    return np.stack(zs), np.array(rejections), np.array(seconds), np.array(instantiated)


def spread(x, fmt="{:.0f}"):
    lo, med, hi = np.quantile(x, [0.1, 0.5, 0.9])
    return f"{fmt.format(med)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def sorted_feature_probs(z):
    """Mean over runs of the column means sorted in decreasing order: (CAPACITY,)."""
    return np.sort(z.mean(1), axis=-1)[:, ::-1].mean(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--truncation", type=int, default=50)
    parser.add_argument("--max-rejections", type=int, default=10**8)
    parser.add_argument("--no-figures", action="store_true")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, α = {ALPHA}, {ROWS} rows")

    results = {}
    header = f"{'J':>2}  {'sampler':<27} {'rejections / 100 rows':>24} {'ms / 100 rows':>22}"
    print("\nmedian [10%, 90%] over", args.runs, "runs\n" + header + "\n" + "-" * len(header))
    for count in (2, 5, 8):
        for seed, (method, label) in enumerate(METHODS.items()):
            out = run_sampler(
                count, method, args.truncation, args.runs, seed + 10 * count, args.max_rejections
            )
            results[count, method] = out
            _, rejections, seconds, _ = out
            print(
                f"{count:>2}  {label:<27} {spread(rejections):>24} "
                f"{spread(1e3 * seconds, '{:.1f}'):>22}"
            )

    print("\nfeatures of the exact samplers, median [10%, 90%]")
    for count in (2, 5, 8):
        z1, _, _, inst1 = results[count, "collapsed_rejection"]
        z5, _, _, inst5 = results[count, "retrospective"]
        used1, used5 = (z1.sum(1) > 0).sum(-1), (z5.sum(1) > 0).sum(-1)
        print(
            f"J = {count}: collapsed instantiated {spread(inst1)}, used {spread(used1)}; "
            f"retrospective atoms {spread(inst5)}, used {spread(used5)}"
        )

    profiles = {}
    for count in (5, 8):
        profiles[count, "exact collapsed (S1)"] = sorted_feature_probs(
            results[count, "collapsed_rejection"][0]
        )
        profiles[count, "exact retrospective (S5)"] = sorted_feature_probs(
            results[count, "retrospective"][0]
        )
        for truncation in (10, 20, 50):
            for method in ("tilted_rejection", "inclusion"):
                z = run_sampler(
                    count, method, truncation, args.runs, 100 + truncation, args.max_rejections
                )[0]
                profiles[count, f"{METHODS[method]}, I = {truncation}"] = sorted_feature_probs(z)
    print("\nmean sorted feature probabilities, first 12 features")
    for (count, label), p in profiles.items():
        print(f"J = {count}  {label:<36} " + " ".join(f"{v:.3f}" for v in p[:12]))

    if not args.no_figures:
        save_figures(results, profiles)


def save_figures(results, profiles):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    FIGURES.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, index, ylabel in (
        (axes[0], 1, "rejections per 100 rows"),
        (axes[1], 2, "seconds to 100 accepted rows"),
    ):
        for j, count in enumerate((2, 5, 8)):
            for m, method in enumerate(METHODS):
                values = results[count, method][index]
                if index == 1:
                    values = np.maximum(values, 0.5)  # inclusion: 0 rejections, drawn at 0.5
                x = (
                    j * (len(METHODS) + 1)
                    + m
                    + np.random.default_rng(m).uniform(-0.2, 0.2, len(values))
                )
                ax.scatter(x, values, s=6, color=f"C{m}", label=METHODS[method] if j == 0 else None)
        ax.set_yscale("log")
        ax.set_xticks([2 + j * (len(METHODS) + 1) for j in range(3)], ["J = 2", "J = 5", "J = 8"])
        ax.set_ylabel(ylabel)
    axes[0].legend(fontsize=7)
    fig.suptitle("Restricted IBP prior samplers, α = 5, 25 runs of 100 rows (paper B Figs. 1-2)")
    fig.tight_layout()
    fig.savefig(FIGURES / "ribp_sampler_cost.png", dpi=110)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, count in zip(axes, (5, 8), strict=True):
        for i, ((c, label), p) in enumerate(profiles.items()):
            if c != count:
                continue
            style = "-" if "exact" in label else ":"
            width = 2.0 if "exact" in label else 1.0
            ax.plot(np.arange(1, 61), p[:60], style, lw=width, label=label, color=f"C{i % 10}")
        ax.set_title(f"J = {count}")
        ax.set_xlabel("feature rank")
        ax.set_ylabel("mean sorted feature probability")
        ax.set_yscale("log")
        ax.set_ylim(1e-3, 1)
    axes[0].legend(fontsize=6)
    fig.suptitle("Feature probabilities vs truncation I (weak limit), α = 5 (paper B Figs. 3-4)")
    fig.tight_layout()
    fig.savefig(FIGURES / "ribp_feature_probs.png", dpi=110)
    print(f"\nfigures saved to {FIGURES}")


if __name__ == "__main__":
    main()
