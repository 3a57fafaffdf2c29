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
``family.log_predictive(params, x)``
    ``log ∫ p(x | θ) q(θ | params) dθ``, a normalised log density or mass of ``x``.
``family.expected_log_likelihood(params, x)``
    ``E_{q(θ | params)}[log p(x | θ)]``, the term of mean-field variational Bayes.
``family.kl(params_q, params_p)``
    ``KL(q(θ | params_q) || q(θ | params_p))``, e.g. posterior against prior.
``family.interpolate(params, base, rho)``
    the member ∝ ``q(θ | params)^ρ q(θ | base)^(1−ρ)`` (natural parameters
    ``ρ η + (1 − ρ) η_base``): the power prior of streaming variational Bayes.
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

import abc
import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.linalg import solve_triangular
from jax.scipy.special import digamma, gammaln, multigammaln
from numpyro import distributions as dist
from numpyro.distributions import ExpandedDistribution, Independent
from numpyro.distributions.util import cholesky_of_inverse

from numpyro_bnp._checks import finite_in_dtype, is_concrete, positive_int
from numpyro_bnp._math import normal_kl

__all__ = [
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

_LOG_2PI = float(np.log(2 * np.pi))


class SparseCounts(NamedTuple):
    """A document (or a batch of them) as distinct word ids and their counts.

    ``ids`` (``(..., L)``, integers in ``[0, V)``) and ``counts`` (``(..., L)``, non-negative
    integers). The ids of one document with a non-zero count must be distinct; padding entries
    have count 0 (and any valid id), so documents of different lengths share one ``L``.
    """

    ids: jax.Array
    counts: jax.Array


class DirichletParams(NamedTuple):
    """Dirichlet(λ): ``concentration`` λ (``(..., V)``) and its sum ``total`` Λ (``(...)``),
    kept alongside so that a predictive never sums over the vocabulary."""

    concentration: jax.Array
    total: jax.Array


class NormalParams(NamedTuple):
    """Independent Gaussians N(``loc``, 1 / ``precision``), both ``(..., D)``."""

    loc: jax.Array
    precision: jax.Array


class NormalWishartParams(NamedTuple):
    """NW(m, κ, W, ν): Λ ~ Wishart(ν, W), μ | Λ ~ N(m, (κΛ)⁻¹).

    ``kappa`` κ (``(...)``), ``loc`` m (``(..., D)``), ``dof`` ν (``(...)``) and ``scale_tril``,
    the lower Cholesky factor L of Ψ = W⁻¹ (``(..., D, D)``), so E[Λ] = ν (L Lᵀ)⁻¹.
    """

    kappa: jax.Array
    loc: jax.Array
    dof: jax.Array
    scale_tril: jax.Array


class NormalGammaParams(NamedTuple):
    """Independent Normal–Gamma per dimension: λ_d ~ Gamma(a_d, rate b_d),
    μ_d | λ_d ~ N(m_d, 1 / (κ_d λ_d)). ``kappa``, ``loc``, ``concentration`` a, ``rate`` b are
    all ``(..., D)``."""

    kappa: jax.Array
    loc: jax.Array
    concentration: jax.Array
    rate: jax.Array


class GammaParams(NamedTuple):
    """Independent Gamma(``concentration``, ``rate``) per element of the event."""

    concentration: jax.Array
    rate: jax.Array


class BetaParams(NamedTuple):
    """Independent Beta(``concentration1``, ``concentration0``) per element of the event
    (``concentration1`` counts ones, as in ``numpyro.distributions.Beta``)."""

    concentration1: jax.Array
    concentration0: jax.Array


class MeanPrecision(NamedTuple):
    """A Gaussian component θ = (μ, Λ): ``loc`` (``(..., D)``) and ``precision`` (``(..., D, D)``
    for :class:`NormalWishart`, the diagonal ``(..., D)`` for :class:`NormalGamma`)."""

    loc: jax.Array
    precision: jax.Array


# ----------------------------------------------------------------------------- shared pieces


# Stirling series of log Γ(x) − [(x − ½) log x − x + ½ log 2π]: B_2k / (2k (2k − 1) x^(2k−1));
# seven terms reach double precision for x >= 8.
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156)


def _stirling_correction(x):
    t = 1 / x**2
    series = _STIRLING[-1]
    for c in reversed(_STIRLING[:-1]):
        series = c + t * series
    return series / x


def _log_rising(a, n):
    """``log Γ(a + n) − log Γ(a)`` (``n >= 0``), keeping its digits when ``a`` is large.

    For ``a >= 8`` it is ``(a − ½) log1p(n/a) + n (log(a + n) − 1) + δ(a + n) − δ(a)`` with
    ``δ`` the Stirling correction, free of the cancellation between two large ``gammaln`` (in
    float32 all digits are lost once ``a`` passes about 1e7); below, the plain difference.
    """
    large = a >= 8
    safe = jnp.where(large, a, 8)
    stirling = (
        (safe - 0.5) * jnp.log1p(n / safe)
        + n * (jnp.log(safe + n) - 1)
        + _stirling_correction(safe + n)
        - _stirling_correction(safe)
    )
    return jnp.where(large, stirling, gammaln(a + n) - gammaln(a))


def _gamma_kl(a_q, b_q, a_p, b_p):
    """Elementwise KL(Gamma(a_q, rate b_q) || Gamma(a_p, rate b_p)) (Penny 2001)."""
    return (
        (a_q - a_p) * digamma(a_q)
        - gammaln(a_q)
        + gammaln(a_p)
        + a_p * (jnp.log(b_q) - jnp.log(b_p))
        + a_q * (b_p - b_q) / b_q
    )


def _lift(value, dtype, ndim):
    """``value`` (a weight or ρ of the batch shape) cast to ``dtype`` with ``ndim`` trailing
    axes of length one, to broadcast against parameters with ``ndim`` event axes."""
    value = jnp.asarray(value, dtype)
    return value.reshape(value.shape + (1,) * ndim)


def _cholesky_rank1(tril, vec, coef):
    """The lower Cholesky factor of ``tril trilᵀ + coef vec vecᵀ`` in O(D²) (Golub and Van Loan
    2013, Section 6.5.4); ``coef < 0`` is a downdate.

    A downdate that rounding would push out of the positive-definite cone keeps each new
    diagonal entry at least ``sqrt(eps)`` times the old one. ``tril`` ``(D, D)``, ``vec``
    ``(D,)``, ``coef`` a scalar.
    """
    sign = jnp.sign(coef)
    work = jnp.sqrt(jnp.abs(coef)) * vec
    rows = jnp.arange(tril.shape[-1])
    eps = jnp.finfo(tril.dtype).eps

    def column(carry, k):
        factor, work = carry
        diag, wk = factor[k, k], work[k]
        new_diag = jnp.sqrt(jnp.maximum(diag**2 + sign * wk**2, eps * diag**2))
        c, s = new_diag / diag, wk / diag
        below = rows > k
        col = jnp.where(below, (factor[:, k] + sign * s * work) / c, factor[:, k])
        col = col.at[k].set(new_diag)
        work = jnp.where(below, c * work - s * col, work)
        return (factor.at[:, k].set(col), work), None

    (factor, _), _ = lax.scan(column, (tril, work), rows)
    return factor


# The family functions run batched over clusters inside an engine's compiled step. jax 0.10's
# batched CPU LAPACK kernels split a batch over XLA's intra-op thread pool and wait for the
# pieces, so two of them running at once can hold every worker of a small pool (two cores) and
# deadlock. The few triangular solves and factorisations below are therefore plain JAX loops
# over the D rows (O(D²) per row-sweep), and only the constructors call LAPACK.


def _solve_lower(tril, rhs):
    """``tril⁻¹ rhs`` by forward substitution (``tril`` ``(D, D)`` lower, ``rhs`` ``(D,)`` or
    ``(D, M)``), O(D² M)."""

    def row(sol, i):
        return sol.at[i].set((rhs[i] - tril[i] @ sol) / tril[i, i]), None

    sol, _ = lax.scan(row, jnp.zeros_like(rhs), jnp.arange(tril.shape[-1]))
    return sol


def _solve_upper(triu, rhs):
    """``triu⁻¹ rhs`` for an upper-triangular ``triu``: :func:`_solve_lower` with the order of
    the unknowns reversed."""
    return _solve_lower(triu[::-1, ::-1], rhs[::-1])[::-1]


def _cholesky(matrix):
    """The lower Cholesky factor of a ``(D, D)`` positive-definite ``matrix``, column by column
    (Cholesky–Banachiewicz), O(D³)."""
    rows = jnp.arange(matrix.shape[-1])

    def column(tril, j):
        col = matrix[:, j] - tril @ tril[j]
        diag = jnp.sqrt(col[j])
        return tril.at[:, j].set(
            jnp.where(rows > j, col / diag, jnp.where(rows == j, diag, 0))
        ), None

    tril, _ = lax.scan(column, jnp.zeros_like(matrix), rows)
    return tril


def _describe(prior):
    return (
        f"{type(prior).__name__} with batch shape {tuple(prior.batch_shape)} and event shape "
        f"{tuple(prior.event_shape)}"
    )


def _core(prior, name, expected, why):
    """The distribution under ``prior``'s ``.expand``/``.to_event`` wrappers, checked to be an
    instance of one of the classes ``expected``; else a ``TypeError`` naming ``name``, the
    expectation and ``why``."""
    core = prior
    while isinstance(core, ExpandedDistribution | Independent):
        core = core.base_dist
    if not isinstance(core, expected):
        found = _describe(prior) if isinstance(prior, dist.Distribution) else type(prior).__name__
        names = " or ".join(cls.__name__ for cls in expected)
        raise TypeError(f"{name} must be a {names} distribution ({why}), got {found}")
    return core


def _event_shape(prior, name, ndim, hint):
    shape = tuple(prior.event_shape)
    if len(shape) != ndim:
        raise ValueError(f"{name} must have {ndim} event axes ({hint}), got {_describe(prior)}")
    return shape


def _fixed(value, name, shape, dtype, positive=False, why=""):
    """``value`` broadcast to ``shape`` in ``dtype``, checked finite (and positive) on the host;
    else a ``ValueError`` naming ``name`` (and saying ``why``)."""
    value = jnp.asarray(value)
    try:
        fits = jnp.broadcast_shapes(value.shape, shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name} must have a shape broadcasting to {shape}{why}, got {value.shape}"
        )
    value = finite_in_dtype(value, name, dtype=dtype, positive=positive)
    return jnp.broadcast_to(jnp.asarray(value, dtype), shape)


def _shared(value, shape, name, what, prior, dtype, positive=False):
    """A parameter (``what``) of the prior ``name``, broadcast to ``shape``: it may not carry
    batch axes of its own, the prior is one distribution shared by all clusters."""
    why = f" (one prior for all clusters: batch shape (); the prior is {_describe(prior)})"
    return _fixed(value, f"{name}: its {what}", shape, dtype, positive, why)


def _dtype(*values):
    return jnp.result_type(*[jnp.asarray(v) for v in values], float)


def _chol_spd(matrix, name, dim, dtype):
    """The lower Cholesky factor of a ``(dim, dim)`` symmetric positive-definite ``matrix``."""
    matrix = jnp.asarray(matrix, dtype)
    if matrix.shape != (dim, dim):
        raise ValueError(f"{name} must have shape {(dim, dim)}, got {matrix.shape}")
    tril = jnp.linalg.cholesky(matrix)
    if is_concrete(matrix) and not (
        np.allclose(matrix, matrix.T) and np.isfinite(np.asarray(tril)).all()
    ):
        raise ValueError(f"{name} must be symmetric positive definite")
    return tril


class ConjugateFamily(abc.ABC):
    """A conjugate prior–likelihood pair (see the module docstring for the interface)."""

    prior: NamedTuple

    @classmethod
    @abc.abstractmethod
    def from_prior(cls, prior, **constants):
        """The family of the NumPyro ``prior`` of θ and the likelihood's fixed ``constants``."""

    @property
    def dtype(self):
        """The floating dtype of the parameters."""
        return jax.tree_util.tree_leaves(self.prior)[0].dtype

    def init_clusters(self, num_clusters):
        """The prior's parameters stacked along a leading cluster axis of size ``num_clusters``."""
        k = positive_int(num_clusters, "num_clusters")
        return jax.tree.map(lambda a: jnp.broadcast_to(a, (k, *a.shape)), self.prior)

    @abc.abstractmethod
    def stats(self, x):
        """Sufficient statistics of one observation ``x``."""

    @abc.abstractmethod
    def update(self, params, stats, weight):
        """``params`` after observing ``stats`` with ``weight`` (multiplies q by p(x|θ)^weight)."""

    def remove(self, params, stats, weight):
        """The exact inverse of :meth:`update` (the EP cavity): ``update`` with ``-weight``."""
        return self.update(params, stats, -jnp.asarray(weight))

    @abc.abstractmethod
    def log_predictive(self, params, x):
        """``log ∫ p(x | θ) q(θ | params) dθ``, one value per batch element of ``params``."""

    @abc.abstractmethod
    def expected_log_likelihood(self, params, x):
        """``E_{q(θ | params)}[log p(x | θ)]``, one value per batch element of ``params``."""

    @abc.abstractmethod
    def kl(self, params_q, params_p):
        """``KL(q(θ | params_q) || q(θ | params_p))``."""

    @abc.abstractmethod
    def interpolate(self, params, base, rho):
        """The member ∝ ``q(θ | params)^rho q(θ | base)^(1 - rho)``, ``rho ∈ [0, 1]``."""

    @abc.abstractmethod
    def sample(self, key, params):
        """One draw of θ from ``q(θ | params)`` per batch element."""

    @abc.abstractmethod
    def mean(self, params):
        """The mean of θ under ``q(θ | params)``, with the structure of :meth:`sample`."""


def _family(cls):
    return jax.tree_util.register_dataclass(dataclasses.dataclass(frozen=True, eq=False)(cls))


# ------------------------------------------------------------------------- Dirichlet–multinomial


def sparse_counts(counts, max_words=None):
    """Dense word counts ``(..., V)`` as :class:`SparseCounts` ``(..., L)``, on the host.

    ``L`` is the largest number of distinct words in one document, or ``max_words`` when given
    (a fixed ``L`` keeps compiled shapes fixed across batches); shorter documents are padded
    with count-0 entries. Raises ``ValueError`` when the counts are not non-negative integers or
    a document has more than ``max_words`` distinct words.
    """
    arr = np.asarray(counts)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"counts must hold non-negative integers, got dtype {arr.dtype}")
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"counts must have shape (..., V) with V >= 1, got {arr.shape}")
    if not (np.isfinite(arr).all() and (arr >= 0).all() and (arr == np.round(arr)).all()):
        raise ValueError("counts must hold non-negative integers (finite, whole numbers)")
    nonzero = arr != 0
    need = int(nonzero.sum(-1).max(initial=0))
    width = need if max_words is None else positive_int(max_words, "max_words")
    if width < need:
        raise ValueError(
            f"max_words must be at least the largest number of distinct words in one "
            f"document, {need}, got {width}"
        )
    order = np.argsort(~nonzero, axis=-1, kind="stable")[..., : min(width, arr.shape[-1])]
    values = np.take_along_axis(arr, order, axis=-1)
    pad = [(0, 0)] * (arr.ndim - 1) + [(0, width - order.shape[-1])]
    ids, values = np.pad(order, pad), np.pad(values, pad)
    if values.dtype.kind in "bu":
        values = values.astype(np.int64)
    return SparseCounts(jnp.asarray(ids, jnp.int32), jnp.asarray(values))


@_family
class DirichletMultinomial(ConjugateFamily):
    r"""Multinomial word counts with a Dirichlet prior on the word probabilities θ (``V`` words).

    Observation: a document ``x`` as :class:`SparseCounts` (``(L,)`` ids and counts, ``N = Σ
    counts``). Parameters :class:`DirichletParams` λ, Λ = Σ_v λ_v. Update: λ_v ← λ_v + w x_v.
    Predictive (the Dirichlet–multinomial pmf, multinomial coefficient included), in O(L):

    .. math::
        \log Γ(N+1) − \sum_v \log Γ(x_v+1) + \log Γ(Λ) − \log Γ(Λ+N)
        + \sum_{v: x_v>0} [\log Γ(λ_v + x_v) − \log Γ(λ_v)].
    """

    prior: DirichletParams

    @classmethod
    def from_prior(cls, prior):
        """``prior``: ``numpyro.distributions.Dirichlet`` with event shape ``(V,)``."""
        core = _core(prior, "prior", (dist.Dirichlet,), "the conjugate prior of multinomial counts")
        shape = _event_shape(prior, "prior", 1, "(V,): one probability per word")
        conc = _shared(
            core.concentration, shape, "prior", "concentration", prior, _dtype(core.concentration)
        )
        return cls(DirichletParams(conc, conc.sum(-1)))

    def stats(self, x):
        """``x`` (:class:`SparseCounts`) with its counts cast to the family's dtype."""
        return SparseCounts(jnp.asarray(x.ids, jnp.int32), jnp.asarray(x.counts, self.dtype))

    def update(self, params, stats, weight):
        """λ_v ← λ_v + w x_v on the document's words only, Λ ← Λ + w N."""
        w = jnp.asarray(weight, self.dtype)
        counts = jnp.asarray(stats.counts, self.dtype)
        conc = params.concentration.at[..., stats.ids].add(w[..., None] * counts)
        return DirichletParams(conc, params.total + w * counts.sum(-1))

    def log_predictive(self, params, x):
        """The Dirichlet–multinomial log pmf of the document ``x`` (O(L) per cluster)."""
        counts = jnp.asarray(x.counts, self.dtype)
        n = counts.sum(-1)
        lam = params.concentration[..., x.ids]
        coef = gammaln(n + 1) - gammaln(counts + 1).sum(-1)
        return coef - _log_rising(params.total, n) + _log_rising(lam, counts).sum(-1)

    def expected_log_likelihood(self, params, x):
        """``log(N! / Π x_v!) + Σ_v x_v (ψ(λ_v) − ψ(Λ))``, O(L) per cluster."""
        counts = jnp.asarray(x.counts, self.dtype)
        n = counts.sum(-1)
        coef = gammaln(n + 1) - gammaln(counts + 1).sum(-1)
        lam = params.concentration[..., x.ids]
        return coef + (counts * digamma(lam)).sum(-1) - n * digamma(params.total)

    def kl(self, params_q, params_p):
        """KL of two Dirichlets (O(V))."""
        a, b = params_q.concentration, params_p.concentration
        a0, b0 = params_q.total, params_p.total
        return (
            gammaln(a0)
            - gammaln(b0)
            - (gammaln(a) - gammaln(b)).sum(-1)
            + ((a - b) * (digamma(a) - digamma(a0)[..., None])).sum(-1)
        )

    def interpolate(self, params, base, rho):
        """λ = ρ λ_params + (1 − ρ) λ_base."""
        r = jnp.asarray(rho, self.dtype)
        conc = r[..., None] * params.concentration + (1 - r[..., None]) * base.concentration
        return DirichletParams(conc, r * params.total + (1 - r) * base.total)

    def sample(self, key, params):
        """Word probabilities θ ``(..., V)``."""
        return random.dirichlet(key, params.concentration, dtype=self.dtype)

    def mean(self, params):
        """λ / Λ ``(..., V)``."""
        return params.concentration / params.total[..., None]


# ---------------------------------------------------------------------- Gaussian, known covariance


def _noise_tril(noise_scale, noise_covariance, dim, dtype):
    """The noise's lower Cholesky factor, or ``None`` with the diagonal precision 1/σ²."""
    if (noise_scale is None) == (noise_covariance is None):
        raise TypeError(
            "noise_scale or noise_covariance: give exactly one (the likelihood's standard "
            "deviations, shape () or (D,), or its covariance matrix, shape (D, D))"
        )
    if noise_covariance is not None:
        return _chol_spd(noise_covariance, "noise_covariance", dim, dtype), None
    return None, _fixed(noise_scale, "noise_scale", (dim,), dtype, positive=True)


@_family
class NormalNormal(ConjugateFamily):
    r"""Gaussian likelihood x ~ N(θ, Σ) with known Σ and a Gaussian prior θ ~ N(m_0, S_0).

    Posterior: precision P = S_0⁻¹ + (Σ w) Σ⁻¹, mean P⁻¹(S_0⁻¹ m_0 + Σ⁻¹ Σ w x); predictive
    N(x; m, Σ + P⁻¹) (Bishop 2006, Eqs. 2.113–2.117; Murphy 2007).

    When both S_0 and Σ are diagonal the parameters are those diagonals. Otherwise the family
    works in the coordinates z = Uᵀ L⁻¹ x, where Σ = L Lᵀ and U diagonalises the whitened prior
    covariance L⁻¹ S_0 L⁻ᵀ = U diag(s) Uᵀ: there the noise is the identity and every cluster's
    posterior is diagonal (P only depends on Σ w), so an update or a predictive costs O(D) per
    cluster after the O(D²) change of coordinates of x. :class:`NormalParams` are in these
    coordinates; :meth:`mean` and :meth:`sample` return θ in the data's coordinates, and the
    predictive carries the Jacobian ``−log|L|``.

    Fields: ``prior`` (:class:`NormalParams`), ``noise_precision`` (``(D,)``: 1/σ², or ones in
    the rotated coordinates), ``noise_tril`` L and ``rotation`` U (``(D, D)``, ``None`` when
    diagonal).
    """

    prior: NormalParams
    noise_precision: jax.Array
    noise_tril: jax.Array | None
    rotation: jax.Array | None

    @classmethod
    def from_prior(cls, prior, *, noise_scale=None, noise_covariance=None):
        """The family of a Gaussian prior of θ and the known noise.

        :param prior: ``Normal(m0, s0).expand([D]).to_event(1)`` (diagonal) or
            ``MultivariateNormal(m0, ...)``, event shape ``(D,)``.
        :param noise_scale: the likelihood's standard deviations, shape ``()`` or ``(D,)``.
        :param noise_covariance: or its covariance matrix ``(D, D)``.
        """
        core = _core(
            prior,
            "prior",
            (dist.Normal, dist.MultivariateNormal),
            "the conjugate prior of a Gaussian mean; use .expand([D]).to_event(1) for Normal",
        )
        (dim,) = _event_shape(prior, "prior", 1, "(D,): use Normal(...).expand([D]).to_event(1)")
        if isinstance(core, dist.Normal):
            dtype = _dtype(core.loc, core.scale)
            loc = _shared(core.loc, (dim,), "prior", "loc", prior, dtype)
            scale = _shared(core.scale, (dim,), "prior", "scale", prior, dtype, positive=True)
            prior_tril = None
        else:
            dtype = _dtype(core.loc, core.scale_tril)
            loc = _shared(core.loc, (dim,), "prior", "loc", prior, dtype)
            prior_tril = _shared(core.scale_tril, (dim, dim), "prior", "scale_tril", prior, dtype)
        tril, noise_sd = _noise_tril(noise_scale, noise_covariance, dim, dtype)
        if prior_tril is None and tril is None:
            return cls(NormalParams(loc, scale**-2), noise_sd**-2, None, None)
        prior_tril = jnp.diag(scale) if prior_tril is None else prior_tril
        tril = jnp.diag(noise_sd) if tril is None else tril
        whitened = solve_triangular(tril, prior_tril, lower=True)
        rotation, sv, _ = jnp.linalg.svd(whitened)
        params = NormalParams(solve_triangular(tril, loc, lower=True) @ rotation, sv**-2)
        return cls(params, jnp.ones(dim, dtype), tril, rotation)

    def _to_working(self, x):
        x = jnp.asarray(x, self.dtype)
        if self.noise_tril is None:
            return x
        flat = x.reshape(-1, x.shape[-1]).T
        return _solve_lower(self.noise_tril, flat).T.reshape(x.shape) @ self.rotation

    def _from_working(self, z):
        if self.noise_tril is None:
            return z
        return z @ self.rotation.T @ self.noise_tril.T

    def _log_jacobian(self):
        if self.noise_tril is None:
            return 0.0
        return -jnp.log(jnp.diagonal(self.noise_tril)).sum()

    def stats(self, x):
        """``x`` ``(D,)`` in the family's coordinates (``Uᵀ L⁻¹ x``, or ``x`` when diagonal)."""
        return self._to_working(x)

    def update(self, params, stats, weight):
        """P ← P + w λ, m ← m + (w λ / P)(z − m) per coordinate (λ: noise precision)."""
        gain = _lift(weight, self.dtype, 1) * self.noise_precision
        precision = params.precision + gain
        loc = params.loc + gain / precision * (jnp.asarray(stats, self.dtype) - params.loc)
        return NormalParams(loc, precision)

    def log_predictive(self, params, x):
        """log N(x; m, Σ + P⁻¹)."""
        z = self._to_working(x)
        var = 1 / params.precision + 1 / self.noise_precision
        terms = _LOG_2PI + jnp.log(var) + (z - params.loc) ** 2 / var
        return -0.5 * terms.sum(-1) + self._log_jacobian()

    def expected_log_likelihood(self, params, x):
        """log N(x; m, Σ) − ½ tr(Σ⁻¹ P⁻¹)."""
        z = self._to_working(x)
        lam = self.noise_precision
        terms = _LOG_2PI - jnp.log(lam) + lam * ((z - params.loc) ** 2 + 1 / params.precision)
        return -0.5 * terms.sum(-1) + self._log_jacobian()

    def kl(self, params_q, params_p):
        """KL of two Gaussians (invariant under the change of coordinates)."""
        q_var, p_var = 1 / params_q.precision, 1 / params_p.precision
        return normal_kl(params_q.loc, q_var, params_p.loc, p_var).sum(-1)

    def interpolate(self, params, base, rho):
        """P = ρ P_params + (1 − ρ) P_base, P m = ρ (P m)_params + (1 − ρ) (P m)_base."""
        r = _lift(rho, self.dtype, 1)
        a, b = r * params.precision, (1 - r) * base.precision
        return NormalParams((a * params.loc + b * base.loc) / (a + b), a + b)

    def sample(self, key, params):
        """θ ``(..., D)`` in the data's coordinates."""
        noise = random.normal(key, jnp.shape(params.loc), self.dtype)
        return self._from_working(params.loc + noise / jnp.sqrt(params.precision))

    def mean(self, params):
        """E[θ] ``(..., D)`` in the data's coordinates."""
        return self._from_working(params.loc)


# ------------------------------------------------------ Gaussian, unknown mean and precision


def _multi_digamma(a, dim):
    """ψ_D(a) = Σ_{i=1}^{D} ψ(a + (1 − i)/2)."""
    return digamma(a[..., None] - jnp.arange(dim) / 2).sum(-1)


def _log_det(tril):
    return 2 * jnp.log(jnp.diagonal(tril, axis1=-2, axis2=-1)).sum(-1)


def _nw_update(kappa, loc, dof, tril, x, w):
    kappa_new = kappa + w
    diff = x - loc
    scale_tril = _cholesky_rank1(tril, diff, kappa * w / kappa_new)
    return kappa_new, loc + w / kappa_new * diff, dof + w, scale_tril


def _nw_log_predictive(kappa, loc, dof, tril, x):
    dim = x.shape[-1]
    nu = dof - dim + 1
    y = _solve_lower(tril, x - loc)
    return (
        _log_rising(nu / 2, dim / 2)
        - dim / 2 * jnp.log(jnp.pi * (kappa + 1) / kappa)
        - _log_det(tril) / 2
        - (nu + dim) / 2 * jnp.log1p(kappa / (kappa + 1) * (y @ y))
    )


def _nw_expected_log_likelihood(kappa, loc, dof, tril, x):
    dim = x.shape[-1]
    y = _solve_lower(tril, x - loc)
    e_log_det = _multi_digamma(dof / 2, dim) + dim * np.log(2.0) - _log_det(tril)
    return 0.5 * (e_log_det - dim * _LOG_2PI - dim / kappa - dof * (y @ y))


def _nw_kl(kappa_q, loc_q, dof_q, tril_q, kappa_p, loc_p, dof_p, tril_p):
    dim = loc_q.shape[-1]
    ratio = kappa_p / kappa_q
    solved = _solve_lower(tril_q, jnp.concatenate([(loc_q - loc_p)[:, None], tril_p], axis=1))
    y, trace = solved[:, 0], jnp.sum(solved[:, 1:] ** 2)
    mean_part = 0.5 * (dim * (ratio - 1 - jnp.log(ratio)) + kappa_p * dof_q * (y @ y))
    wishart_part = (
        (dof_q - dof_p) / 2 * _multi_digamma(dof_q / 2, dim)
        + dof_p / 2 * (_log_det(tril_q) - _log_det(tril_p))
        + dof_q / 2 * (trace - dim)
        - multigammaln(dof_q / 2, dim)
        + multigammaln(dof_p / 2, dim)
    )
    return mean_part + wishart_part


def _nw_interpolate(kappa_a, loc_a, dof_a, tril_a, kappa_b, loc_b, dof_b, tril_b, rho):
    a, b = rho * kappa_a, (1 - rho) * kappa_b
    kappa = a + b
    diff = loc_a - loc_b
    scale = (
        rho * tril_a @ tril_a.T
        + (1 - rho) * tril_b @ tril_b.T
        + (a * b / kappa) * jnp.outer(diff, diff)
    )
    return (
        kappa,
        (a * loc_a + b * loc_b) / kappa,
        rho * dof_a + (1 - rho) * dof_b,
        _cholesky(scale),
    )


def _nw_draw(kappa, loc, tril, chi2, normal, eps):
    # Bartlett: Λ = F Fᵀ with F = L⁻ᵀ A ~ chol-like factor of Wishart(ν, (L Lᵀ)⁻¹);
    # μ = m + κ^(-1/2) F⁻ᵀ ε with F⁻ᵀ = L A⁻ᵀ.
    bartlett = jnp.tril(normal, -1) + jnp.diag(jnp.sqrt(chi2))
    factor = _solve_upper(tril.T, bartlett)
    u = _solve_upper(bartlett.T, eps)
    return loc + tril @ u / jnp.sqrt(kappa), factor @ factor.T


_NW = "(),(d),(),(d,d)"


@_family
class NormalWishart(ConjugateFamily):
    r"""Gaussian likelihood x ~ N(μ, Λ⁻¹), Normal–Wishart prior: Λ ~ Wishart(ν_0, W_0),
    μ | Λ ~ N(m_0, (κ_0 Λ)⁻¹) (Murphy 2007; Bishop 2006, Eqs. 10.60–10.63).

    Parameters :class:`NormalWishartParams` (κ, m, ν, L with L Lᵀ = Ψ = W⁻¹). A weighted
    observation is a rank-one change of the centred scatter, applied to the Cholesky factor:

    .. math::
        κ' = κ + w,\quad m' = m + \tfrac{w}{κ'}(x − m),\quad ν' = ν + w,\quad
        Ψ' = Ψ + \tfrac{κ w}{κ'} (x − m)(x − m)ᵀ,

    which is stable in float32 (no raw second moments) and exactly inverted by ``w → −w``.
    Predictive: multivariate Student-t with ν − D + 1 degrees of freedom, location m and scale
    matrix (κ + 1) Ψ / (κ (ν − D + 1)) (Murphy 2007).
    """

    prior: NormalWishartParams

    @classmethod
    def from_prior(cls, precision_prior, *, loc, kappa):
        """The family of Λ ~ ``precision_prior`` and μ | Λ ~ N(``loc``, (``kappa`` Λ)⁻¹).

        :param precision_prior: ``numpyro.distributions.Wishart(ν0, scale_matrix=W0)`` (event
            shape ``(D, D)``, ν0 > D − 1), so that E[Λ] = ν0 W0.
        :param loc: m0, shape ``(D,)`` (or broadcasting to it).
        :param kappa: κ0 > 0, a scalar.
        """
        core = _core(
            precision_prior,
            "precision_prior",
            (dist.Wishart,),
            "the conjugate prior of a Gaussian precision matrix",
        )
        dim, _ = _event_shape(precision_prior, "precision_prior", 2, "(D, D)")
        dtype = _dtype(core.concentration, core.scale_tril, loc, kappa)
        name = "precision_prior"
        dof = _shared(core.concentration, (), name, "concentration", precision_prior, dtype, True)
        w_tril = _shared(core.scale_tril, (dim, dim), name, "scale_tril", precision_prior, dtype)
        if is_concrete(dof) and not dof > dim - 1:
            raise ValueError(
                f"precision_prior: its concentration (degrees of freedom) must exceed "
                f"D - 1 = {dim - 1}, got {float(dof)}"
            )
        loc = _fixed(loc, "loc", (dim,), dtype)
        kappa = _fixed(kappa, "kappa", (), dtype, positive=True)
        scale_tril = cholesky_of_inverse(w_tril @ w_tril.T).astype(dtype)  # of Ψ0 = W0⁻¹
        return cls(NormalWishartParams(kappa, loc, dof, scale_tril))

    def stats(self, x):
        """``x`` ``(D,)`` cast to the family's dtype."""
        return jnp.asarray(x, self.dtype)

    def update(self, params, stats, weight):
        """The rank-one update above, vectorised over the batch axes."""
        fn = jnp.vectorize(_nw_update, signature=f"{_NW},(d),()->{_NW}")
        w = jnp.asarray(weight, self.dtype)
        return NormalWishartParams(*fn(*params, jnp.asarray(stats, self.dtype), w))

    def log_predictive(self, params, x):
        """The multivariate Student-t log density of ``x`` ``(D,)``."""
        fn = jnp.vectorize(_nw_log_predictive, signature=f"{_NW},(d)->()")
        return fn(*params, jnp.asarray(x, self.dtype))

    def expected_log_likelihood(self, params, x):
        """½ E[log|Λ|] − (D/2) log 2π − D/(2κ) − (ν/2)(x − m)ᵀ Ψ⁻¹ (x − m) (Bishop 2006,
        Eqs. 10.64–10.65)."""
        fn = jnp.vectorize(_nw_expected_log_likelihood, signature=f"{_NW},(d)->()")
        return fn(*params, jnp.asarray(x, self.dtype))

    def kl(self, params_q, params_p):
        """KL of two Normal–Wisharts: the Wishart KL plus the expected Gaussian KL of μ given
        Λ (Penny 2001)."""
        return jnp.vectorize(_nw_kl, signature=f"{_NW},{_NW}->()")(*params_q, *params_p)

    def interpolate(self, params, base, rho):
        """Linear in (κ, κm, ν, Ψ + κ m mᵀ): Ψ = ρ Ψ_a + (1 − ρ) Ψ_b + (ab/κ)(m_a − m_b)(…)ᵀ
        with a = ρ κ_a, b = (1 − ρ) κ_b."""
        fn = jnp.vectorize(_nw_interpolate, signature=f"{_NW},{_NW},()->{_NW}")
        return NormalWishartParams(*fn(*params, *base, jnp.asarray(rho, self.dtype)))

    def sample(self, key, params):
        """θ = :class:`MeanPrecision` (μ ``(..., D)``, Λ ``(..., D, D)``), by Bartlett's
        decomposition of the Wishart."""
        batch, dim = params.loc.shape[:-1], params.loc.shape[-1]
        k_chi2, k_normal, k_eps = random.split(key, 3)
        shape = (params.dof[..., None] - jnp.arange(dim)) / 2
        chi2 = 2 * random.gamma(k_chi2, shape, dtype=self.dtype)
        normal = random.normal(k_normal, (*batch, dim, dim), self.dtype)
        eps = random.normal(k_eps, (*batch, dim), self.dtype)
        fn = jnp.vectorize(_nw_draw, signature="(),(d),(d,d),(d),(d,d),(d)->(d),(d,d)")
        return MeanPrecision(*fn(params.kappa, params.loc, params.scale_tril, chi2, normal, eps))

    def mean(self, params):
        """:class:`MeanPrecision` (m, ν Ψ⁻¹)."""
        dim = params.loc.shape[-1]
        inverse = jnp.vectorize(
            lambda t: _solve_lower(t, jnp.eye(dim, dtype=t.dtype)), signature="(d,d)->(d,d)"
        )
        tril_inv = inverse(params.scale_tril)  # Ψ⁻¹ = L⁻ᵀ L⁻¹
        precision = jnp.swapaxes(tril_inv, -1, -2) @ tril_inv
        return MeanPrecision(params.loc, params.dof[..., None, None] * precision)


@_family
class NormalGamma(ConjugateFamily):
    r"""Gaussian likelihood with diagonal precision, x_d ~ N(μ_d, 1/λ_d), and independent
    Normal–Gamma priors λ_d ~ Gamma(a_0, rate b_0), μ_d | λ_d ~ N(m_0, 1/(κ_0 λ_d)) (Murphy
    2007): :class:`NormalWishart` with D = 1 in every dimension (ν = 2a, Ψ = 2b).

    .. math::
        κ' = κ + w,\quad m' = m + \tfrac{w}{κ'}(x − m),\quad a' = a + \tfrac{w}{2},\quad
        b' = b + \tfrac{κ w}{2κ'}(x − m)^2,

    (b' is kept at least ``eps`` times b when a removal rounds below). Predictive: a product of
    Student-t densities with 2a degrees of freedom, location m and scale² b(κ + 1)/(aκ).
    """

    prior: NormalGammaParams

    @classmethod
    def from_prior(cls, precision_prior, *, loc, kappa):
        """The family of λ ~ ``precision_prior`` and μ | λ ~ N(``loc``, 1/(``kappa`` λ)).

        :param precision_prior: ``Gamma(a0, b0).expand([D]).to_event(1)`` (rate b0).
        :param loc: m0, shape ``(D,)`` (or broadcasting to it).
        :param kappa: κ0 > 0, shape ``()`` or ``(D,)``.
        """
        core = _core(
            precision_prior,
            "precision_prior",
            (dist.Gamma,),
            "the conjugate prior of Gaussian precisions; use .expand([D]).to_event(1)",
        )
        hint = "(D,): use Gamma(a, b).expand([D]).to_event(1)"
        shape = _event_shape(precision_prior, "precision_prior", 1, hint)
        dtype = _dtype(core.concentration, core.rate, loc, kappa)
        name = "precision_prior"
        a = _shared(core.concentration, shape, name, "concentration", precision_prior, dtype, True)
        b = _shared(core.rate, shape, name, "rate", precision_prior, dtype, True)
        loc = _fixed(loc, "loc", shape, dtype)
        kappa = _fixed(kappa, "kappa", shape, dtype, positive=True)
        return cls(NormalGammaParams(kappa, loc, a, b))

    def stats(self, x):
        """``x`` ``(D,)`` cast to the family's dtype."""
        return jnp.asarray(x, self.dtype)

    def update(self, params, stats, weight):
        """The elementwise update above."""
        w = _lift(weight, self.dtype, 1)
        kappa = params.kappa + w
        diff = jnp.asarray(stats, self.dtype) - params.loc
        rate = params.rate + params.kappa * w / (2 * kappa) * diff**2
        rate = jnp.maximum(rate, jnp.finfo(self.dtype).eps * params.rate)
        return NormalGammaParams(
            kappa, params.loc + w / kappa * diff, params.concentration + w / 2, rate
        )

    def log_predictive(self, params, x):
        """Σ_d log St(x_d; 2a, m, b(κ + 1)/(aκ))."""
        kappa, a, b = params.kappa, params.concentration, params.rate
        diff = jnp.asarray(x, self.dtype) - params.loc
        terms = (
            _log_rising(a, 0.5)
            - 0.5 * jnp.log(2 * jnp.pi * b * (kappa + 1) / kappa)
            - (a + 0.5) * jnp.log1p(kappa * diff**2 / (2 * b * (kappa + 1)))
        )
        return terms.sum(-1)

    def expected_log_likelihood(self, params, x):
        """Σ_d ½(ψ(a) − log b − log 2π − 1/κ − (a/b)(x − m)²)."""
        kappa, a, b = params.kappa, params.concentration, params.rate
        diff = jnp.asarray(x, self.dtype) - params.loc
        terms = digamma(a) - jnp.log(b) - _LOG_2PI - 1 / kappa - a / b * diff**2
        return 0.5 * terms.sum(-1)

    def kl(self, params_q, params_p):
        """Σ_d Gamma KL + ½(κ_p/κ_q − 1 − log(κ_p/κ_q) + κ_p (a_q/b_q)(m_q − m_p)²)."""
        q, p = params_q, params_p
        ratio = p.kappa / q.kappa
        mean_part = 0.5 * (
            ratio - 1 - jnp.log(ratio) + p.kappa * q.concentration / q.rate * (q.loc - p.loc) ** 2
        )
        gamma_part = _gamma_kl(q.concentration, q.rate, p.concentration, p.rate)
        return (mean_part + gamma_part).sum(-1)

    def interpolate(self, params, base, rho):
        """Linear in (κ, κm, a, b + κm²/2), per dimension."""
        r = _lift(rho, self.dtype, 1)
        a, b = r * params.kappa, (1 - r) * base.kappa
        kappa = a + b
        rate = (
            r * params.rate
            + (1 - r) * base.rate
            + a * b / (2 * kappa) * (params.loc - base.loc) ** 2
        )
        conc = r * params.concentration + (1 - r) * base.concentration
        return NormalGammaParams(kappa, (a * params.loc + b * base.loc) / kappa, conc, rate)

    def sample(self, key, params):
        """θ = :class:`MeanPrecision` (μ, λ), both ``(..., D)``."""
        k_gamma, k_normal = random.split(key)
        precision = random.gamma(k_gamma, params.concentration, dtype=self.dtype) / params.rate
        noise = random.normal(k_normal, jnp.shape(params.loc), self.dtype)
        return MeanPrecision(params.loc + noise / jnp.sqrt(params.kappa * precision), precision)

    def mean(self, params):
        """:class:`MeanPrecision` (m, a/b)."""
        return MeanPrecision(params.loc, params.concentration / params.rate)


# ----------------------------------------------------------------------- Poisson and Bernoulli


def _event_sum(values, ndim):
    return values.sum(axis=tuple(range(-ndim, 0))) if ndim else values


@_family
class GammaPoisson(ConjugateFamily):
    r"""Poisson counts x ~ Poisson(θ) per element of the event, Gamma(a, rate b) prior on θ.

    Update: a ← a + w x, b ← b + w. Predictive: the negative binomial
    ``Γ(a + x)/(Γ(a) x!) (b/(b+1))^a (b+1)^(−x)`` (numpyro's ``GammaPoisson``).
    """

    prior: GammaParams

    @classmethod
    def from_prior(cls, prior):
        """``prior``: ``numpyro.distributions.Gamma(a, b)`` of any event shape (``.to_event``)."""
        core = _core(prior, "prior", (dist.Gamma,), "the conjugate prior of Poisson rates")
        shape = tuple(prior.event_shape)
        dtype = _dtype(core.concentration, core.rate)
        a = _shared(core.concentration, shape, "prior", "concentration", prior, dtype, True)
        b = _shared(core.rate, shape, "prior", "rate", prior, dtype, True)
        return cls(GammaParams(a, b))

    def _ndim(self):
        return self.prior.concentration.ndim

    def stats(self, x):
        """``x`` (the event shape) cast to the family's dtype."""
        return jnp.asarray(x, self.dtype)

    def update(self, params, stats, weight):
        """a ← a + w x, b ← b + w."""
        w = _lift(weight, self.dtype, self._ndim())
        x = jnp.asarray(stats, self.dtype)
        return GammaParams(params.concentration + w * x, params.rate + w)

    def log_predictive(self, params, x):
        """The negative-binomial log pmf, summed over the event."""
        a, b = params.concentration, params.rate
        x = jnp.asarray(x, self.dtype)
        terms = _log_rising(a, x) - gammaln(x + 1) - a * jnp.log1p(1 / b) - x * jnp.log1p(b)
        return _event_sum(terms, self._ndim())

    def expected_log_likelihood(self, params, x):
        """Σ x (ψ(a) − log b) − a/b − log x!."""
        a, b = params.concentration, params.rate
        x = jnp.asarray(x, self.dtype)
        terms = x * (digamma(a) - jnp.log(b)) - a / b - gammaln(x + 1)
        return _event_sum(terms, self._ndim())

    def kl(self, params_q, params_p):
        """Σ KL of Gammas."""
        q, p = params_q, params_p
        return _event_sum(_gamma_kl(q.concentration, q.rate, p.concentration, p.rate), self._ndim())

    def interpolate(self, params, base, rho):
        """(a, b) = ρ (a, b)_params + (1 − ρ) (a, b)_base."""
        r = _lift(rho, self.dtype, self._ndim())
        return jax.tree.map(lambda u, v: r * u + (1 - r) * v, params, base)

    def sample(self, key, params):
        """Rates θ (the batch and event shape)."""
        return random.gamma(key, params.concentration, dtype=self.dtype) / params.rate

    def mean(self, params):
        """a / b."""
        return params.concentration / params.rate


@_family
class BetaBernoulli(ConjugateFamily):
    r"""Binary data x ~ Bernoulli(θ) per element of the event, Beta(a, b) prior on θ.

    Update: a ← a + w x, b ← b + w (1 − x). Predictive: ``p(x = 1) = a / (a + b)`` per element.
    """

    prior: BetaParams

    @classmethod
    def from_prior(cls, prior):
        """``prior``: ``numpyro.distributions.Beta(a, b)`` of any event shape (``.to_event``)."""
        core = _core(prior, "prior", (dist.Beta,), "the conjugate prior of Bernoulli probabilities")
        shape = tuple(prior.event_shape)
        dtype = _dtype(core.concentration1, core.concentration0)
        a = _shared(core.concentration1, shape, "prior", "concentration1", prior, dtype, True)
        b = _shared(core.concentration0, shape, "prior", "concentration0", prior, dtype, True)
        return cls(BetaParams(a, b))

    def _ndim(self):
        return self.prior.concentration1.ndim

    def stats(self, x):
        """``x`` (0 or 1, the event shape) cast to the family's dtype."""
        return jnp.asarray(x, self.dtype)

    def update(self, params, stats, weight):
        """a ← a + w x, b ← b + w (1 − x)."""
        w = _lift(weight, self.dtype, self._ndim())
        x = jnp.asarray(stats, self.dtype)
        return BetaParams(params.concentration1 + w * x, params.concentration0 + w * (1 - x))

    def log_predictive(self, params, x):
        """Σ x log a + (1 − x) log b − log(a + b)."""
        a, b = params.concentration1, params.concentration0
        x = jnp.asarray(x, self.dtype)
        terms = x * jnp.log(a) + (1 - x) * jnp.log(b) - jnp.log(a + b)
        return _event_sum(terms, self._ndim())

    def expected_log_likelihood(self, params, x):
        """Σ x ψ(a) + (1 − x) ψ(b) − ψ(a + b)."""
        a, b = params.concentration1, params.concentration0
        x = jnp.asarray(x, self.dtype)
        terms = x * digamma(a) + (1 - x) * digamma(b) - digamma(a + b)
        return _event_sum(terms, self._ndim())

    def kl(self, params_q, params_p):
        """Σ KL of Betas."""
        aq, bq = params_q.concentration1, params_q.concentration0
        ap, bp = params_p.concentration1, params_p.concentration0
        terms = (
            gammaln(ap)
            + gammaln(bp)
            - gammaln(ap + bp)
            - gammaln(aq)
            - gammaln(bq)
            + gammaln(aq + bq)
            + (aq - ap) * digamma(aq)
            + (bq - bp) * digamma(bq)
            + (ap - aq + bp - bq) * digamma(aq + bq)
        )
        return _event_sum(terms, self._ndim())

    def interpolate(self, params, base, rho):
        """(a, b) = ρ (a, b)_params + (1 − ρ) (a, b)_base."""
        r = _lift(rho, self.dtype, self._ndim())
        return jax.tree.map(lambda u, v: r * u + (1 - r) * v, params, base)

    def sample(self, key, params):
        """Probabilities θ (the batch and event shape): the first coordinate of a
        Dirichlet(a, b) draw (one log-gamma sampler, stable for small a and b)."""
        conc = jnp.stack([params.concentration1, params.concentration0], axis=-1)
        return random.dirichlet(key, conc, dtype=self.dtype)[..., 0]

    def mean(self, params):
        """a / (a + b)."""
        return params.concentration1 / (params.concentration1 + params.concentration0)
