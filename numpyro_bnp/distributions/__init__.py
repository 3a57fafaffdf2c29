"""NumPyro distributions for Bayesian-nonparametric priors."""

from numpyro_bnp.distributions.ibp import (
    RecursiveIBP,
    buffet_matrix,
    ibp_capacity,
    num_active_features,
)

__all__ = ["RecursiveIBP", "buffet_matrix", "ibp_capacity", "num_active_features"]
