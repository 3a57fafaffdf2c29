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

__all__ = [
    "NGGP",
    "BetaPrimeProcess",
    "BetaProcess",
    "CompletelyRandomMeasure",
    "GammaProcess",
    "GeneralizedGammaProcess",
    "RecursiveIBP",
    "buffet_matrix",
    "canonical_partition",
    "cluster_sizes",
    "ibp_capacity",
    "num_active_features",
    "num_clusters",
]
