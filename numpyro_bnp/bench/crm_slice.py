"""The CRM slice sampler: scaling, real data and tempering (docs/crm_slice.md).

    python -m numpyro_bnp bench crm_slice                         # both engines, the scaling
    python -m numpyro_bnp bench crm_slice --engines accelerated_gibbs --quick
    python -m numpyro_bnp bench crm_slice --max-seconds 120 --sizes 500 1000 2000
    python -m numpyro_bnp bench crm_slice --model bnb             # the BNB topic model
    python -m numpyro_bnp bench crm_slice --data digits --digits-rows 300 1597   # real data
    python -m numpyro_bnp bench crm_slice --data digits --digits-rows 1597 --match "start='prior'"
    python -m numpyro_bnp bench crm_slice --tempering --rows 1000 --seconds 240 --temperatures 4 8

* the scaling experiment of Zhu, Bouchard-Côté & Campbell (2020), Section 5, at reduced size
  (:mod:`numpyro_bnp.bench.crm_slice_scaling`): ESS/s of the parity and of the number of features,
  time per iteration, log-log slopes in N and the ratio CRMSlice / AcceleratedIBPGibbs;
* ``--data digits`` (:mod:`numpyro_bnp.bench.crm_slice_digits`): held-out score against compiled
  seconds of CRMSlice's variants and the baseline on scikit-learn's digits;
* ``--tempering`` (:mod:`numpyro_bnp.bench.crm_tempering`): tempered replicas against plain
  chains at the same wall time.

Engines: ``crm_slice`` = :class:`numpyro_bnp.infer.CRMSlice` (topic model:
:class:`numpyro_bnp.infer.CRMTopicSlice`), ``crm_slice_rows`` = ``CRMSlice(collapsed_rows=True)``
(not run by default), ``accelerated_gibbs`` = :class:`numpyro_bnp.infer.AcceleratedIBPGibbs`.
"""

from numpyro_bnp.bench import crm_slice_digits, crm_slice_scaling, crm_tempering

HELP = (
    "The full scaling run: N from 500 to 10,000, 100 + 500 iterations of 2 sequential chains "
    "(--max-seconds skips the sizes predicted to take longer); --quick: N in {200, 400, 800}, "
    "50 + 150 iterations. With --data digits, "
    "--quick runs 3 segments instead of --segments; with --tempering, 20 s per setting instead of "
    "--seconds. The committed figures are docs/figures/crm_slice_scaling.png, "
    "crm_slice_bnb_scaling.png and crm_slice_digits.png (--figure PATH)."
)
QUICK_HELP = "N in {200, 400, 800}, short chains (see below)"
CPU_LOOP_KERNELS = False
ENGINES = ("crm_slice", "crm_slice_rows", "accelerated_gibbs")


def add_arguments(parser):
    """The options of ``bench crm_slice`` besides ``--quick``."""
    parser.add_argument(
        "--engines", nargs="+", default=["crm_slice", "accelerated_gibbs"], choices=ENGINES
    )
    parser.add_argument("--sizes", nargs="+", type=int, help="override the list of N")
    parser.add_argument("--warmup", type=int, help="warm-up iterations (default 100, quick 50)")
    parser.add_argument("--samples", type=int, help="kept iterations (default 500, quick 150)")
    parser.add_argument(
        "--max-seconds", type=float, default=600.0,
        help="skip an (engine, N) whose predicted sampling time exceeds this",
    )  # fmt: skip
    parser.add_argument(
        "--chains", type=int,
        help="chains (default: 2 sequential; --tempering: 4 vectorized; digits: always 4)",
    )  # fmt: skip
    parser.add_argument(
        "--max-features", type=int,
        help="capacity of Z in the model, the baseline's fixed buffer (default: the model's; "
        "digits: 40)",
    )  # fmt: skip
    parser.add_argument("--figure", metavar="PATH", help="where the figure goes (default none)")
    parser.add_argument(
        "--model", default="beta_bernoulli", choices=["beta_bernoulli", "bnb"],
        help="bnb: the topic model of §4.2, N documents, CRMTopicSlice only",
    )  # fmt: skip
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
    parser.add_argument(
        "--tempering", action="store_true",
        help="tempered replicas against plain chains at the same wall time instead",
    )  # fmt: skip
    parser.add_argument("--rows", type=int, default=500, help="tempering: N (default 500)")
    parser.add_argument(
        "--seconds", type=float, default=120.0, help="tempering: seconds per setting (120)"
    )
    parser.add_argument("--block", type=int, default=100, help="tempering: sweeps per call")
    parser.add_argument("--seed", type=int, default=0, help="tempering: the first key")
    parser.add_argument(
        "--temperatures", nargs="+", default=["4"],
        help="tempering: settings after 'none', each replicas (4) or a ladder (1,0.5,0.25)",
    )  # fmt: skip


def run(args):
    """The section ``args`` asks for (module docstring)."""
    if args.tempering:
        crm_tempering.tempering(
            args.rows, 20.0 if args.quick else args.seconds, args.block, args.chains or 4,
            args.seed, args.temperatures,
        )  # fmt: skip
    elif args.data == "digits":
        crm_slice_digits.digits_curves(
            args.digits_rows, args.segment, 3 if args.quick else args.segments,
            args.max_features or 40, args.figure, args.tempered, args.match,
        )  # fmt: skip
    else:
        crm_slice_scaling.scaling(args)
    return 0
