"""NumPyro distributions for Bayesian-nonparametric priors."""

from numpyro_bnp.distributions.ibp import (
    RecursiveIBP,
    buffet_matrix,
    ibp_capacity,
    num_active_features,
)
from numpyro_bnp.distributions.restricted_ibp import (
    RestrictedBernoulliProcess,
    RestrictedIBP,
    RestrictedIBPInfo,
    exactly,
    left_ordered_form,
    left_ordered_matrix,
)

__all__ = [
    "RecursiveIBP",
    "RestrictedBernoulliProcess",
    "RestrictedIBP",
    "RestrictedIBPInfo",
    "buffet_matrix",
    "exactly",
    "ibp_capacity",
    "left_ordered_form",
    "left_ordered_matrix",
    "num_active_features",
]
