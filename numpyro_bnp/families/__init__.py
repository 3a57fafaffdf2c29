r"""Conjugate exponential families: the component math every mixture engine shares.

A mixture engine keeps, for each of ``K`` clusters (a fixed capacity), the parameters of the
posterior of that cluster's component parameter θ_k in the conjugate family of the likelihood,
and needs only a few operations on them. For a likelihood
``p(x | θ) = h(x) exp(<η(θ), t(x)> − a(θ))`` and its conjugate prior
``H_0(θ) ∝ exp(<η(θ), ξ_0> − ν_0 a(θ))``, observing ``x`` with weight (responsibility)
``w ∈ [0, 1]`` multiplies the density by ``p(x | θ)^w``, which stays in the family:

    ξ ← ξ + w t(x),    ν ← ν + w,

and removing it (an EP cavity) is the exact subtraction. The posterior predictive is
``h(x) exp(B(ξ + t(x), ν + 1) − B(ξ, ν))`` with ``B`` the prior's log-normaliser (Tank, Foti and
Fox 2015, Section 3; Bishop 2006, Section 2.4). Each family below stores these parameters in the
coordinates that are cheapest and most stable for it, never as raw second moments.

Interface
---------

A family is a frozen dataclass registered as a JAX pytree; its fields are the prior's parameters
(``prior``) and the likelihood's fixed constants, so it can be a field of an engine's constants
and pass through ``jit``. Its parameters are a small ``NamedTuple`` of arrays. Every method is a
pure JAX function:

``Family.from_prior(prior, ...)``
    builds the family from the user's NumPyro prior of θ (and the likelihood's fixed constants);
    a prior that is not the conjugate one, or shapes that do not match, raise ``TypeError`` or
    ``ValueError`` naming what was expected and what was found. The prior is one distribution for
    all clusters: an outer ``.expand`` (a plate over clusters) is dropped, parameters with batch
    axes of their own are refused.
``family.init_clusters(K)``
    the prior's parameters stacked along a leading cluster axis of size ``K``.
``family.stats(x)``
    sufficient statistics of one observation ``x`` (cast to the family's dtype).
``family.update(params, stats, weight)`` / ``family.remove(params, stats, weight)``
    the tempered update and its exact inverse: ``remove(update(p, s, w), s, w) == p`` up to
    rounding, and ``update(update(p, s, a), s, b) == update(p, s, a + b)``.
``family.absorb(params, xs, weights)``
    :meth:`update` by every row of ``xs`` ``(N, D)`` with ``weights`` ``(N, *batch)`` in one
    step (a batch of variational Bayes; documents as :class:`SparseCounts` ``(N, L)``).
``family.log_predictive(params, x)``
    ``log ∫ p(x | θ) q(θ | params) dθ``, a normalised log density or mass of ``x``.
``family.expected_log_likelihood(params, x)``
    ``E_{q(θ | params)}[log p(x | θ)]``, the term of mean-field variational Bayes.
``family.kl(params_q, params_p)``
    ``KL(q(θ | params_q) || q(θ | params_p))``, e.g. posterior against prior.
``family.interpolate(params, base, rho)``
    the member ∝ ``q(θ | params)^ρ q(θ | base)^(1−ρ)`` (natural parameters
    ``ρ η + (1 − ρ) η_base``): the power prior of streaming variational Bayes.
``family.log_normalizer(params)``
    ``A(η) = log ∫ exp(<η, T(θ)>) dθ``: the log marginal likelihood of the absorbed data is
    ``A(params) − A(prior)`` plus their ``Σ w log h(x)``.
``family.merge(params_a, params_b)`` / ``family.log_merge_ratio(params_a, params_b)``
    the posterior of the data of two members (natural parameters ``η_a + η_b − η_0``), and
    ``log p(D_a ∪ D_b) − log p(D_a) − log p(D_b)``: the data term of a merge move.
``family.sample(key, params)`` / ``family.mean(params)``
    one draw of θ per cluster, and the posterior mean of θ (same structure).

Shapes: ``params`` may carry leading batch axes (typically ``(K,)``); ``x``, ``stats`` are one
observation (use ``jax.vmap`` for many); ``weight`` and ``rho`` are scalars or arrays of the
batch shape. ``log_predictive``, ``expected_log_likelihood`` and ``kl`` return arrays of the
batch shape (``kl`` broadcasts ``params_q`` against ``params_p``). The dtype is the prior's:
float32 unless the prior's parameters are float64; updates keep it fixed.

Families
--------

* :class:`DirichletMultinomial` — word-count documents (Dirichlet–multinomial). Documents are
  :class:`SparseCounts` (distinct word ids and their counts, padded with zero counts), so the
  predictive costs O(distinct words), not O(vocabulary); :func:`sparse_counts` converts dense
  counts.
* :class:`NormalNormal` — Gaussian likelihood with known (diagonal or full) covariance Σ and a
  Gaussian prior on the mean (Bishop 2006, Section 2.3.6; Murphy 2007).
* :class:`NormalWishart` — Gaussian likelihood with unknown mean and precision, Normal–Wishart
  prior (Murphy 2007; Bishop 2006, Section 10.2); Student-t predictive.
* :class:`NormalGamma` — its diagonal version: independent Normal–Gamma priors per dimension
  (Murphy 2007).
* :class:`GammaPoisson` — Poisson counts, Gamma prior on the rates; negative-binomial predictive.
* :class:`BetaBernoulli` — binary data, Beta prior on the probabilities.

The count families live in :mod:`numpyro_bnp.families.counts`, the Gaussian ones in
:mod:`numpyro_bnp.families.gaussian`; every public name is re-exported here.

Example (documents would use :class:`DirichletMultinomial` and :func:`sparse_counts` the same way):

>>> import jax.numpy as jnp
>>> import numpy as np
>>> import numpyro.distributions as dist
>>> from numpyro_bnp.families import BetaBernoulli
>>> family = BetaBernoulli.from_prior(dist.Beta(1.0, 1.0))
>>> params = family.init_clusters(3)
>>> params = family.update(params, family.stats(1.0), jnp.array([1.0, 0.5, 0.0]))
>>> print(np.round(np.exp(family.log_predictive(params, 1.0)), 4))  # (1 + w) / (2 + w)
[0.6667 0.6    0.5   ]

References:

* A. Tank, N. Foti and E. Fox, *Streaming variational inference for Bayesian nonparametric
  mixture models*, AISTATS 2015, Section 3 (weighted conjugate updates, EP removal).
* K. P. Murphy, *Conjugate Bayesian analysis of the Gaussian distribution*, technical note, 2007.
* C. M. Bishop, *Pattern Recognition and Machine Learning*, Springer 2006, Sections 2.3.6, 2.4
  and 10.2.
* W. D. Penny, *KL-divergences of Normal, Gamma, Dirichlet and Wishart densities*, technical
  report, Wellcome Department of Cognitive Neurology, 2001.
* G. H. Golub and C. F. Van Loan, *Matrix Computations*, 4th ed., 2013, Section 6.5.4 (rank-one
  updates and downdates of a Cholesky factor).
"""

from numpyro_bnp.families._common import ConjugateFamily
from numpyro_bnp.families.counts import (
    SMALL_COUNT,
    BetaBernoulli,
    BetaParams,
    DirichletMultinomial,
    DirichletParams,
    GammaParams,
    GammaPoisson,
    SparseCounts,
    sparse_counts,
)
from numpyro_bnp.families.gaussian import (
    MeanPrecision,
    NormalGamma,
    NormalGammaParams,
    NormalNormal,
    NormalParams,
    NormalWishart,
    NormalWishartParams,
)

__all__ = [
    "SMALL_COUNT",
    "BetaBernoulli",
    "BetaParams",
    "ConjugateFamily",
    "DirichletMultinomial",
    "DirichletParams",
    "GammaParams",
    "GammaPoisson",
    "MeanPrecision",
    "NormalGamma",
    "NormalGammaParams",
    "NormalNormal",
    "NormalParams",
    "NormalWishart",
    "NormalWishartParams",
    "SparseCounts",
    "sparse_counts",
]
