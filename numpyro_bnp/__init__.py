"""numpyro_bnp: Bayesian-nonparametric priors and streaming inference for NumPyro."""

import numpyro  # first, as a whole: see numpyro_bnp.arviz_compat (ArviZ 1.x loads it lazily)

from numpyro_bnp import distributions
from numpyro_bnp.arviz_compat import repair_numpyro_packages
from numpyro_bnp.xla_cpu import enable_cpu_loop_kernels

repair_numpyro_packages()
del numpyro

__version__ = "0.1.0.dev0"

__all__ = ["__version__", "distributions", "enable_cpu_loop_kernels"]
