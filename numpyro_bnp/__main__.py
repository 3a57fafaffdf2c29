"""Command line of numpyro_bnp.

python -m numpyro_bnp demo [--out-dir DIR] [--only NAME ...]
python -m numpyro_bnp bench FAMILY [--quick] [its options]   (FAMILY --help: what it measures)
"""

import argparse
import os
import sys


def _add_bench(commands):
    """The ``bench`` command: one sub-command a family of :data:`numpyro_bnp.bench.FAMILIES`."""
    from numpyro_bnp.bench import FAMILIES

    bench = commands.add_parser(
        "bench",
        help="run a benchmark family and print its tables",
        description="Measured comparisons, one family a page of docs/.",
    )
    families = bench.add_subparsers(dest="family", required=True, metavar="FAMILY")
    for name, family in FAMILIES.items():
        summary = family.__doc__.splitlines()[0]
        parser = families.add_parser(name, help=summary, description=summary, epilog=family.HELP)
        parser.add_argument("--quick", action="store_true", help=family.QUICK_HELP)
        if family.CPU_LOOP_KERNELS:
            parser.add_argument(
                "--xla-default",
                action="store_true",
                help="keep XLA's default CPU loop compilation (no enable_cpu_loop_kernels)",
            )
        family.add_arguments(parser)
        parser.set_defaults(family_module=family)


def build_parser():
    """The parser of ``python -m numpyro_bnp``: ``demo`` and ``bench FAMILY``."""
    parser = argparse.ArgumentParser(
        prog="python -m numpyro_bnp",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the demo and save its figures")
    demo.add_argument("--out-dir", default="numpyro_bnp_demo", help="where figures are saved")
    demo.add_argument("--only", nargs="+", help="run only these parts of the demo")
    _add_bench(commands)
    return parser


def main(argv=None, loop_kernels=True):
    """Parse ``argv`` (default: the command line) and run the demo or a benchmark family;
    ``loop_kernels``: call :func:`numpyro_bnp.enable_cpu_loop_kernels` before the demo and the
    families that were measured with it (before JAX computes anything). Returns the exit
    status."""
    from numpyro_bnp.xla_cpu import enable_cpu_loop_kernels

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "bench":
        family = args.family_module
        if loop_kernels and family.CPU_LOOP_KERNELS and not args.xla_default:
            enable_cpu_loop_kernels()  # before JAX starts: loops compiled into single CPU kernels
        return family.run(args)

    from numpyro_bnp.demos import DEMOS

    names = args.only or list(DEMOS)
    unknown = sorted(set(names) - set(DEMOS))
    if unknown:
        parser.error(f"unknown demo part(s) {unknown}; choose from {sorted(DEMOS)}")
    try:
        os.makedirs(args.out_dir, exist_ok=True)
        if not os.access(args.out_dir, os.W_OK | os.X_OK):
            raise PermissionError(f"no permission to write in {args.out_dir!r}")
    except OSError as err:
        print(
            f"python -m numpyro_bnp demo: error: --out-dir {args.out_dir!r} cannot hold the "
            f"figures ({err.strerror or err}); choose a writable directory",
            file=sys.stderr,
        )
        return 2
    if loop_kernels:
        enable_cpu_loop_kernels()
    paths = []
    for name in names:
        print(f"\n== {name}")
        paths += DEMOS[name](args.out_dir)
    print("\nfigures saved:")
    for path in paths:
        print(f"  {os.path.abspath(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
