"""numpyro_bnp: Bayesian-nonparametric priors and streaming inference for NumPyro."""

import sys

import numpyro  # first, as a whole: see numpyro_bnp.arviz_compat (ArviZ 1.x loads it lazily)

from numpyro_bnp.xla_cpu import avoid_cpu_scheduler_hang, enable_cpu_loop_kernels

avoid_cpu_scheduler_hang()  # before anything computes: an XLA flag (see numpyro_bnp.xla_cpu)

from numpyro_bnp import distributions  # noqa: E402
from numpyro_bnp.arviz_compat import repair_numpyro_packages  # noqa: E402
from numpyro_bnp.models import mixtures as mixture_models  # noqa: E402

# the mixture models' module path before they joined numpyro_bnp.models (pickles name it)
sys.modules[f"{__name__}.mixture_models"] = mixture_models

repair_numpyro_packages()
del numpyro, sys, avoid_cpu_scheduler_hang

__version__ = "0.1.0.dev0"

__all__ = ["__version__", "distributions", "enable_cpu_loop_kernels"]
