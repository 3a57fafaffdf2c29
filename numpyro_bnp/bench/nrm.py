"""ADF / EP for NGGP mixtures of multinomials against a NumPy reference (Tank, Foti & Fox 2015).

    python -m numpyro_bnp bench nrm              # Reuters, digits, synthetic corpus of 100,000 docs
    python -m numpyro_bnp bench nrm --quick      # synthetic corpus of 5,000 docs, n in {1k, 5k}
    python -m numpyro_bnp bench nrm --data reuters digits
    python -m numpyro_bnp bench nrm --selfcheck  # only the checks of the NumPy reference (seconds)
    python -m numpyro_bnp bench nrm --nggp       # the NGGP prior's EPPF, urn and CRM series

Engines (:mod:`numpyro_bnp.bench.nrm_rows`): :class:`numpyro_bnp.infer.ADFNRM` (one pass, the
paper's Algorithm 1, see docs/nrm.md) and :class:`numpyro_bnp.infer.EPNRM` (expectation
propagation after ADF) on :func:`numpyro_bnp.models.nggp_multinomial_mixture`, with the DP (σ =
0) and the normalized inverse-Gaussian ("IG", σ = 1/2) priors, τ = 1.

The naive reference (:class:`numpyro_bnp.bench.nrm_reference.NumpyADF`) is an independent
NumPy/SciPy implementation of the same ADF step for Dirichlet–multinomial components, one
document at a time in Python: the predictive weights of the paper's Eq. (23) (max(E[n_k] − σ, 0)
and a(Û + τ)^σ, Û the mode of log U, the root of h'(s) = 0, by safeguarded Newton), the
Dirichlet–multinomial predictive summed over the document's distinct words, log-sum-exp
responsibilities, the new-cluster threshold ε, soft counts and the recursion E[K_n] = E[K_{n-1}]
+ Σ_k r_k exp(ℓ_k), ℓ_k = Σ_i log1p(−r_ik). ``--selfcheck`` checks it against a brute-force
recomputation from the full history (for σ = 0 this is Lin's 2013 sequential variational DP) and
checks the held-out scoring.
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
* A synthetic corpus at NYT-like scale (:mod:`numpyro_bnp.bench.nrm_corpus`): cluster labels from a
  Pitman–Yor(0.75, 1) Chinese restaurant process, topics θ_k ~ Dirichlet(0.05) over 8,000 words,
  lengths ~ Poisson(150) (about 127 distinct words per document), held as scipy.sparse CSR; a random
  2,000 held out (exchangeable with the training documents). At each training size n (a curve over
  n) the ADF/EP rows (EP and ADF with merges up to n = 5,000; one timed run from n = 20,000), the
  NumPy reference (at n = 5,000 only: it is slow), and the oracle: the true partition of the n
  training documents with its Dirichlet posteriors and the generating Pitman–Yor urn weights, i.e.
  ground-truth-labelled cluster parameters. Topics this sparse over 8,000 words barely overlap, so
  the partition is recovered almost exactly (NMI ≈ 1) and the priors differ through the predictive
  weights, chiefly that of a new cluster.

Hyper-parameters (all options): GGP mass a = 1, τ = 1, threshold ε = 0.5 (≥ σ for both priors),
Dirichlet λ0 = 0.05 (Reuters, synthetic) and 0.2 (digits), ``max_clusters`` = 4,096.

Held-out scores are log p(x | N_x) of each test document under the full predictive mixture
(instantiated clusters and a new one), multinomial coefficient included, in nats per document.

``--nggp`` (:mod:`numpyro_bnp.bench.nggp`) times the NGGP prior itself instead: the EPPF,
partition sampling and the CRM series against SciPy/NumPy, in float64.
"""

import time
import warnings

import numpy as np

from numpyro_bnp import datasets
from numpyro_bnp._report import median_seconds
from numpyro_bnp.bench import nggp, nrm_reference
from numpyro_bnp.bench.nrm_corpus import SYN_TOPIC_CONCENTRATION, synthetic_corpus
from numpyro_bnp.bench.nrm_reference import TAU
from numpyro_bnp.bench.nrm_rows import (
    CONCENTRATION,
    EP_PASSES,
    PRIORS,
    Hyper,
    clustering,
    engine_row,
    engine_rows,
    gaussian_prior,
    oracle_row,
    print_curve,
    print_tables,
    reference_rows,
    run_adf_gaussian,
    standard_pairs,
)

HELP = (
    "The full run (Reuters, digits, and the synthetic corpus up to n = 100,000) takes long on 2 "
    "cores, most of it the NumPy reference and EP at n = 5,000; --quick runs the synthetic corpus "
    "at n in {1,000, 5,000} with 500 test documents and the reference at n = 1,000 (Reuters and "
    "digits as in the full run). With --nggp, --quick stops at n = 10,000."
)
QUICK_HELP = "synthetic: 5,000 docs, n in {1k, 5k} (see below)"
CPU_LOOP_KERNELS = False
DATA = ("reuters", "digits", "synthetic")


def add_arguments(parser):
    """The options of ``bench nrm`` besides ``--quick``."""
    parser.add_argument("--selfcheck", action="store_true", help="only the reference's checks")
    parser.add_argument(
        "--nggp", action="store_true",
        help="only the NGGP prior: EPPF, partition sampling, CRM series against SciPy/NumPy",
    )  # fmt: skip
    parser.add_argument("--data", nargs="+", choices=DATA, default=DATA)
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


def bench_reuters(args, hyper):
    """The Reuters table (module docstring)."""
    try:
        docs = datasets.reuters()[0]
    except ImportError:
        print("\n== Reuters: skipped (pip install lda)")
        return
    train, test = datasets.shuffled_split(docs, len(docs) // 5)
    rows = reference_rows(train, test, hyper)
    rows += engine_rows(train, test, hyper, ep_passes=args.ep_passes)
    print_tables(
        f"Reuters ({len(train)} train / {len(test)} test documents, vocabulary {docs.shape[1]:,};"
        f" a={hyper.mass:g}, τ={TAU:g}, λ0={hyper.concentration:g}, ε={hyper.threshold:g})",
        rows,
        standard_pairs(args.ep_passes),
    )


def bench_digits(args, hyper):
    """The digits table (module docstring)."""
    from scipy.stats import poisson
    from sklearn.mixture import BayesianGaussianMixture
    from sklearn.model_selection import train_test_split

    counts, labels = datasets.digits()
    train, test, y_train, _ = train_test_split(counts, labels, test_size=0.2, random_state=0)
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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seconds, _ = median_seconds(lambda bgm=bgm: bgm.fit(train_c))
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
    for prior, sigma in PRIORS:
        ng_prior, scale, _ = gaussian_prior(train_c, sigma, hyper)
        run = run_adf_gaussian(train_c, sigma, hyper, ng_prior)
        row = engine_row(f"ADF {prior} Gaussian", run, len(train), test_c, (train_c, y_train))
        note = (
            f"; models.nggp_diagonal_gaussian_mixture, data-scaled prior, s = {scale:g}"
            " (validation)"
        )
        row.update(measure="gaussian", note=row["note"] + note)
        rows.append(row)
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
    """The synthetic corpus's tables (module docstring)."""
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


def run(args):
    """The data sets ``args.data`` (or only the self-checks, or only the NGGP prior)."""
    if args.selfcheck:
        return int(nrm_reference.selfcheck() > 0)
    if args.nggp:
        nggp.bench_nggp(args.quick)
        return 0
    if args.x64:
        import jax

        jax.config.update("jax_enable_x64", True)
    hyper = Hyper(args.mass, SYN_TOPIC_CONCENTRATION, args.threshold, args.max_clusters)
    bench = {"reuters": bench_reuters, "digits": bench_digits, "synthetic": bench_synthetic}
    for name in args.data:
        lam0 = CONCENTRATION[name] if args.concentration is None else args.concentration
        bench[name](args, hyper._replace(concentration=lam0))
    return 0
