"""NumPyro distributions for Bayesian-nonparametric priors."""

from numpyro_bnp.distributions.crm import (
    BetaPrimeProcess,
    BetaProcess,
    CompletelyRandomMeasure,
    GammaProcess,
    GeneralizedGammaProcess,
)
from numpyro_bnp.distributions.ibp import (
    RecursiveIBP,
    buffet_matrix,
    ibp_capacity,
    num_active_features,
)
from numpyro_bnp.distributions.nrm import NGGP, canonical_partition, cluster_sizes, num_clusters
from numpyro_bnp.distributions.restricted_ibp import (
    RestrictedBernoulliProcess,
    RestrictedIBP,
    RestrictedIBPInfo,
    exactly,
    left_ordered_form,
    left_ordered_matrix,
)

__all__ = [
    "NGGP",
    "BetaPrimeProcess",
    "BetaProcess",
    "CompletelyRandomMeasure",
    "GammaProcess",
    "GeneralizedGammaProcess",
    "RecursiveIBP",
    "RestrictedBernoulliProcess",
    "RestrictedIBP",
    "RestrictedIBPInfo",
    "buffet_matrix",
    "canonical_partition",
    "cluster_sizes",
    "exactly",
    "ibp_capacity",
    "left_ordered_form",
    "left_ordered_matrix",
    "num_active_features",
    "num_clusters",
]
