"""Ready NumPyro models with Bayesian-nonparametric priors.

Plain model functions (the feature models in :mod:`numpyro_bnp.models.features`, the mixtures in
:mod:`numpyro_bnp.models.mixtures`): copy one and edit it, run it under NumPyro's own engines
(``Predictive``, ``MCMC``) or hand it to an engine of :mod:`numpyro_bnp.infer`, which reads it
once through handlers (``docs/model_contract.md`` says what an engine expects to find).

* :func:`linear_gaussian` — the linear-Gaussian latent feature model (Griffiths & Ghahramani 2011;
  Schaeffer et al. 2022, App. B.2);
* :func:`factor_analysis` — the same with a Gaussian weight per used feature (Schaeffer et al. 2022,
  App. B.3);
* :func:`binary_features` — binary observations (black-and-white pixels) from latent features
  through a logistic link, ``Bernoulli(logits=Z @ A + b)``;
* :func:`beta_bernoulli_linear_gaussian` — the linear-Gaussian model written with a beta-process
  CRM and Bernoulli counts (Zhu, Bouchard-Côté & Campbell 2020, §4.1);
* :func:`gamma_poisson_linear_gaussian` — the same with a gamma process and Poisson counts (each
  row uses a feature any number of times);
* :func:`bnb_combinatorial_clustering` — beta–negative-binomial topic model for word counts
  (Broderick et al. 2015; Zhu et al. 2020, §4.2);
* :func:`restricted_linear_gaussian` — the linear-Gaussian model with a restricted IBP prior: a
  chosen law for the number of features per row (Doshi-Velez & Williamson 2017);
* the NGGP mixture models (Tank, Foti & Fox 2015), in :mod:`numpyro_bnp.models.mixtures`:
  :func:`nggp_multinomial_mixture` (documents), :func:`nggp_gaussian_mixture` (Normal–Wishart),
  :func:`nggp_diagonal_gaussian_mixture` (Normal–Gamma), :func:`nggp_normal_mixture` (known
  noise), :func:`nggp_poisson_mixture` and :func:`nggp_bernoulli_mixture`;
* :func:`dp_mixture` — a Dirichlet-process mixture by truncated stick-breaking (Ishwaran & James
  2001) with the components of any dense NGGP mixture, also in
  :mod:`numpyro_bnp.models.mixtures`; NumPyro's NUTS and ``TraceEnum_ELBO`` sum out its labels.

The observation means are written as ``Z @ A`` (resp. ``(Z * W) @ A``) so that the number of rows
follows the rows of ``Z``: the streaming engines evaluate the likelihood one row at a time by
substituting a single row. The observed rows are conditionally independent given the latent sites
and sit in a ``numpyro.plate("row", N)`` (its size follows the rows of ``Z``), with the ``D``
columns as one event: ``numpyro.infer.log_likelihood`` and ArviZ (``loo``, ``waic``) get one
log-likelihood term per row.

The arguments have the same names in every model (``docs/vocabulary.md``): ``mass`` and
``concentration`` (``rate`` for the gamma process) for the feature prior, ``sigma_a`` for the
prior standard deviation of the features or traits, ``sigma_o`` for the observation noise,
``sigma_w`` for the factor weights and ``max_features`` for the number of features (atoms) of a
prior draw. The distributions keep their paper's names (``RecursiveIBP(alpha, beta)``,
``BetaProcess(mass, concentration, truncation=...)``); each docstring says which symbol each
argument is. The names used before (``alpha``, ``beta``, ``sigma``, ``sigma0``, ``truncation``)
still work, with a ``FutureWarning``.
"""

from numpyro_bnp.models.features import (
    beta_bernoulli_linear_gaussian,
    binary_features,
    bnb_combinatorial_clustering,
    factor_analysis,
    gamma_poisson_linear_gaussian,
    linear_gaussian,
    restricted_linear_gaussian,
)
from numpyro_bnp.models.mixtures import (
    dp_mixture,
    nggp_bernoulli_mixture,
    nggp_diagonal_gaussian_mixture,
    nggp_gaussian_mixture,
    nggp_multinomial_mixture,
    nggp_normal_mixture,
    nggp_poisson_mixture,
)

__all__ = [
    "beta_bernoulli_linear_gaussian",
    "binary_features",
    "bnb_combinatorial_clustering",
    "dp_mixture",
    "factor_analysis",
    "gamma_poisson_linear_gaussian",
    "linear_gaussian",
    "nggp_bernoulli_mixture",
    "nggp_diagonal_gaussian_mixture",
    "nggp_gaussian_mixture",
    "nggp_multinomial_mixture",
    "nggp_normal_mixture",
    "nggp_poisson_mixture",
    "restricted_linear_gaussian",
]
