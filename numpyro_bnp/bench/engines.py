"""One model, many engines: the mixture and feature engines side by side on the same data.

    python -m numpyro_bnp bench engines [--quick] [--data NAME ...] [--figure PATH]

Each data set is fitted with one model function under every engine that runs it, and printed as
one table per family (columns: seconds of the compiled work, of the first run with compilation,
held-out log predictive per row, the number of clusters or features, and for the samplers its
posterior sd, ESS per second and R-hat over the chains from ArviZ):

* mixtures (:mod:`numpyro_bnp.bench.mixtures`): ``galaxies`` (82 velocities, Roeder 1990,
  shipped with the package), ``digits`` (scikit-learn's digits as 64-word count documents),
  ``reuters`` (``pip install lda``) under ``ADFNRM``, ``EPNRM``, ``NGGPMarginalGibbs`` and, on
  galaxies, NumPyro's NUTS on the truncated twin ``infer.truncated_twin(model)`` and (full run
  only) the posterior of the number of clusters on all 82 galaxies against the R package
  BNPdensity's own fits (:func:`numpyro_bnp.bench.mixtures.bench_galaxies_published`);
* features (:mod:`numpyro_bnp.bench.features`): ``features`` (scikit-learn's digits, pixels / 16,
  under ``models.linear_gaussian``) with ``RIBPFilter``, ``RIBPFilter.refine``, ``CRMSlice``,
  ``AcceleratedIBPGibbs`` and NumPyro's ``DiscreteHMCGibbs`` on the truncated model.

The full run takes an hour or more on 2 CPU cores (most of it the Gibbs sampler on digits
documents); ``--quick`` is the small version (see ``QUICK``).
"""

from numpyro_bnp.bench import features, mixtures

DATA = ("galaxies", "digits", "reuters", "features")

FULL = {
    "galaxies": dict(
        sweeps=(1000, 4000), nuts_draws=(500, 1000), priors=("DP", "NIG"),
        published_sweeps=((1000, 4000), (500, 2000)),
    ),
    "digits": dict(sweeps=(200, 400), fraction=1.0, split_merge=20),
    "reuters": dict(sweeps=(200, 400), fraction=1.0, split_merge=20),
    "features": dict(
        num_train=300, num_test=200, capacity=32, refine_passes=100, sweeps=(200, 800),
        hmc_iterations=(100, 100), hmc_chains=2, truncation=24, num_draws=20, num_samples=1000,
    ),
}  # fmt: skip

QUICK = {
    "galaxies": dict(sweeps=(100, 200), nuts_draws=(100, 100), priors=("DP",)),
    "digits": dict(sweeps=(100, 200), fraction=1 / 3, split_merge=20),
    "reuters": dict(sweeps=(100, 200), fraction=1 / 3, split_merge=20),
    "features": dict(
        num_train=100, num_test=100, capacity=24, refine_passes=30, sweeps=(30, 70),
        hmc_iterations=(10, 10), hmc_chains=2, truncation=12, num_draws=6, num_samples=300,
    ),
}  # fmt: skip

QUICK_DATA = ("galaxies", "features")

HELP = (
    "The full run (default data: all four) takes an hour or more on 2 CPU cores. --quick runs "
    "the small version (default data: galaxies and features; 3 minutes on 2 shared CPU cores, "
    "176 s of CPU time, most of it compiling the nine engines): galaxies under the DP only "
    "(ADF, EP, the Gibbs sampler 4 x (100 + 200) sweeps, NUTS on the twin 4 x (100 + 100)), "
    "and the feature model on 100 digits (filter, 30 refine passes, CRMSlice and "
    "AcceleratedIBPGibbs 4 x (30 + 70), DiscreteHMCGibbs 2 x (10 + 10) with 12 features); "
    "digits and reuters documents with --quick use a third of the documents and "
    "4 x (100 + 200) sweeps."
)


QUICK_HELP = "the small version (see below)"
CPU_LOOP_KERNELS = True


def add_arguments(parser):
    """The options of ``bench engines`` besides ``--quick``."""
    parser.add_argument(
        "--data", nargs="+", choices=DATA, metavar="NAME",
        help=f"data sets to run, from {', '.join(DATA)} (default: all; with --quick: "
        f"{' and '.join(QUICK_DATA)})",
    )  # fmt: skip
    parser.add_argument(
        "--figure", metavar="PATH",
        help="where the galaxies figure goes (docs/figures/engines_galaxies.png; default none)",
    )  # fmt: skip
    parser.add_argument(
        "--features-figure", metavar="PATH",
        help="where the features figure goes (docs/figures/engines_features.png; default none)",
    )  # fmt: skip


def run(args):
    """Run the families ``args.data`` (``None``: the default of ``args.quick``)."""
    settings = QUICK if args.quick else FULL
    data = args.data or (QUICK_DATA if args.quick else DATA)
    if "galaxies" in data:
        mixtures.bench_galaxies(settings["galaxies"], figure=args.figure)
        if "published_sweeps" in settings["galaxies"]:
            mixtures.bench_galaxies_published(settings["galaxies"])
    if "digits" in data:
        mixtures.bench_documents(settings["digits"], "digits", 0.2, 192)
    if "reuters" in data:
        mixtures.bench_documents(settings["reuters"], "reuters", 0.05, 192)
    if "features" in data:
        features.bench_features(settings["features"], figure=args.features_figure)
    return 0
