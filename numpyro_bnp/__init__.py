"""numpyro_bnp: Bayesian-nonparametric priors and streaming inference for NumPyro."""

from numpyro_bnp import distributions
from numpyro_bnp.xla_cpu import enable_cpu_loop_kernels

__version__ = "0.1.0.dev0"

__all__ = ["__version__", "distributions", "enable_cpu_loop_kernels"]
