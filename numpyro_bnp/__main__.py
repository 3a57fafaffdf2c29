"""Command line of numpyro_bnp.

python -m numpyro_bnp demo [--out-dir DIR] [--only NAME ...]
python -m numpyro_bnp bench engines [--quick] [--data NAME ...] [--figure PATH]
"""

import argparse
import os
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m numpyro_bnp",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the demo and save its figures")
    demo.add_argument("--out-dir", default="numpyro_bnp_demo", help="where figures are saved")
    demo.add_argument("--only", nargs="+", help="run only these parts of the demo")
    bench = commands.add_parser("bench", help="run a benchmark and print its tables")
    benches = bench.add_subparsers(dest="bench", required=True)
    from numpyro_bnp.bench import engines

    engines_parser = benches.add_parser(
        "engines",
        help="the engines side by side on the same data (docs/engines.md)",
        description=engines.__doc__.splitlines()[0],
        epilog=engines.HELP,
    )
    engines.add_arguments(engines_parser)
    args = parser.parse_args(argv)
    if args.command == "bench":
        return engines.run(args)

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
    paths = []
    for name in names:
        print(f"\n== {name}")
        paths += DEMOS[name](args.out_dir)
    print("\nfigures saved:")
    for path in paths:
        print(f"  {os.path.abspath(path)}")
    return 0


if __name__ == "__main__":
    from numpyro_bnp.xla_cpu import enable_cpu_loop_kernels

    enable_cpu_loop_kernels()  # before JAX starts: loops compiled into single CPU kernels
    sys.exit(main())
