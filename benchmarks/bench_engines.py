"""One model, many engines: the mixture and feature engines side by side on the same data.

    python benchmarks/bench_engines.py            # galaxies, digits, Reuters, features (an hour)
    python benchmarks/bench_engines.py --quick    # the small version (galaxies and features)
    python benchmarks/bench_engines.py --data galaxies features

The same as ``python -m numpyro_bnp bench engines`` (the code is
:mod:`numpyro_bnp.bench.engines`, which documents the families, engines and columns), except
that the figures go to ``docs/figures/engines_galaxies.png`` and
``docs/figures/engines_features.png`` by default (``--figure ''`` and ``--features-figure ''``
for none). Calls :func:`numpyro_bnp.enable_cpu_loop_kernels` first, as the command line does.
"""

import pathlib
import sys

FIGURES = pathlib.Path(__file__).resolve().parents[1] / "docs" / "figures"


def main(argv=None):
    from numpyro_bnp import enable_cpu_loop_kernels

    enable_cpu_loop_kernels()  # before JAX starts: loops compiled into single CPU kernels
    from numpyro_bnp.bench import engines

    return engines.main(
        argv,
        figure_default=str(FIGURES / "engines_galaxies.png"),
        features_figure_default=str(FIGURES / "engines_features.png"),
    )


if __name__ == "__main__":
    sys.exit(main())
