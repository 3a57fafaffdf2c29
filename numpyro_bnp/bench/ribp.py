"""The R-IBP streaming filter: speed, held-out quality and binary data (``docs/ribp.md``).

    python -m numpyro_bnp bench ribp [--quick]        # sections 1 to 3 (a few minutes)
    python -m numpyro_bnp bench ribp --quality        # only section 3
    python -m numpyro_bnp bench ribp --proposal       # only section 4
    python -m numpyro_bnp bench ribp --throughput --xla-default   # section 1, XLA's loops
    python -m numpyro_bnp bench ribp --binary [--mnist DIR]       # the binary benchmark

On synthetic linear-Gaussian data (``Z ~ IBP(α = 10, β = 1)``, ``A_k ~ N(0, I_50)``, ``o_n =
z_n A + N(0, 0.5² I)``): 1. throughput with 64 and 128 fixed slots against a plain NumPy step,
2. time and state memory against N (:mod:`numpyro_bnp.bench.ribp_speed`), 3. held-out negative
log predictive per observation against the oracle, NumPyro's DiscreteHMCGibbs and scikit-learn's
factor models, 4. the bias of ``log_predictive`` on a state holding the true features
(:mod:`numpyro_bnp.bench.ribp_quality`). ``--binary``: Bernoulli pixels with logits ``Z @ A +
b`` on bars, binarized digits and, with ``--mnist DIR``, binarized MNIST
(:mod:`numpyro_bnp.bench.ribp_binary`).
"""

from numpyro_bnp.bench import ribp_binary, ribp_quality, ribp_speed

HELP = (
    "The full run (sections 1 to 3) takes a few minutes on 2 cores, --quality alone about 5 "
    "minutes of CPU time. --quick: N in {1,000, 10,000} for section 2, N = 200 and 200 test "
    "rows for section 3 (MCMC reference 60 + 60 iterations), N = 200 for section 4, and for "
    "--binary fewer bars and digits images and no MCMC reference."
)
QUICK_HELP = "smaller N, fewer MCMC samples (see below)"
CPU_LOOP_KERNELS = True


def add_arguments(parser):
    """The options of ``bench ribp`` besides ``--quick``."""
    parser.add_argument("--quality", action="store_true", help="run only section 3 (held-out NLL)")
    parser.add_argument("--throughput", action="store_true", help="run only section 1")
    parser.add_argument(
        "--proposal", action="store_true",
        help="only the bias of the filter's log_predictive on a state with the true features",
    )  # fmt: skip
    parser.add_argument(
        "--hmc-iters", type=int, help="warm-up (= sampling) iterations of the MCMC reference"
    )
    parser.add_argument(
        "--sizes", type=int, nargs="+",
        help=f"training sizes of section 3 (default {ribp_quality.QUALITY_SIZES})",
    )  # fmt: skip
    parser.add_argument("--no-hmc", action="store_true", help="skip the MCMC reference")
    parser.add_argument(
        "--binary", action="store_true",
        help="the binary benchmark (bars, binarized digits, throughput) instead",
    )  # fmt: skip
    parser.add_argument(
        "--mnist", metavar="DIR",
        help="--binary with binarized MNIST too: DIR holds t10k-images-idx3-ubyte.gz and "
        "t10k-labels-idx1-ubyte.gz",
    )  # fmt: skip
    parser.add_argument(
        "--mnist-images", type=int, default=5000, help="MNIST training images (default 5,000)"
    )


def run(args):
    """The sections ``args`` asks for (module docstring)."""
    if args.binary or args.mnist:
        ribp_binary.binary_sections(args.quick, args.mnist, args.mnist_images)
        return 0
    sizes = ribp_quality.QUALITY_SIZES
    if args.proposal:
        ribp_quality.proposal_bias(sizes=sizes[:1] if args.quick else sizes)
        return 0
    if not args.quality:
        ribp_speed.speed_sections(args.quick, throughput_only=args.throughput)
        if args.throughput:
            return 0
    ribp_quality.quality(args.quick, args.hmc_iters, args.sizes, hmc=not args.no_hmc)
    return 0
