"""What every conjugate family shares: the abstract interface :class:`ConjugateFamily`, the
frozen-dataclass pytree registration of the families, the checks of their constructors and the
special functions of several predictives (see :mod:`numpyro_bnp.families` for the interface)."""

import abc
import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import digamma, gammaln
from numpyro import distributions as dist
from numpyro.distributions import ExpandedDistribution, Independent

from numpyro_bnp._checks import finite_in_dtype, positive_int

_LOG_2PI = float(np.log(2 * np.pi))


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


def _safe(total):
    """``total`` with its zeros replaced by ones (a divisor: zero total weight, zero sums)."""
    return jnp.where(total > 0, total, 1)


def _mix(params, base, rho, dtype, ndim):
    """``ρ params + (1 − ρ) base`` leaf by leaf: tempering of a family whose parameters are
    natural parameters with ``ndim`` event axes (``q^ρ base^(1−ρ)`` is linear in them)."""
    r = _lift(rho, dtype, ndim)
    return jax.tree.map(lambda u, v: r * u + (1 - r) * v, params, base)


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


class ConjugateFamily(abc.ABC):
    """A conjugate prior–likelihood pair (see :mod:`numpyro_bnp.families` for the interface)."""

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

    def absorb(self, params, xs, weights):
        """``params`` after observing every row of ``xs`` ``(N, D)`` with ``weights``
        ``(N, *batch)``: :meth:`update` row by row, in one step (a batch of variational
        Bayes). This default makes one :meth:`update` with the weighted mean of the statistics
        and their total weight, exact for the families whose update is affine in ``w`` and
        ``w t(x)``; families with a scatter term override it."""
        weights = jnp.asarray(weights, self.dtype)
        stats = jax.vmap(self.stats)(xs)
        total = weights.sum(0)
        mean = jnp.einsum("n...,nd->...d", weights, stats) / _lift(_safe(total), self.dtype, 1)
        return self.update(params, mean, total)

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
        """The member ∝ ``q(θ | params)^rho q(θ | base)^(1 - rho)``: natural parameters
        ``rho η + (1 - rho) η_base``, for ``rho ∈ [0, 1]`` and for any other ``rho`` that gives a
        valid member (:meth:`merge` uses ``rho = 2``)."""

    @abc.abstractmethod
    def log_normalizer(self, params):
        """``A(η) = log ∫ exp(<η, T(θ)>) dθ``, the log-normaliser of ``q(θ | params)`` written
        as an exponential family in its natural parameters ``η`` (one value per batch element).
        The log marginal likelihood of the data a posterior has absorbed is
        ``A(params) − A(prior)`` plus their ``Σ w log h(x)``."""

    def merge(self, params_a, params_b):
        """The member ∝ ``q(θ | params_a) q(θ | params_b) / H_0(θ)`` (natural parameters
        ``η_a + η_b − η_0``): the posterior of the data of both, each absorbed once."""
        middle = self.interpolate(params_a, params_b, 0.5)
        return self.interpolate(middle, self.prior, 2.0)

    def log_merge_ratio(self, params_a, params_b):
        """``log p(D_a ∪ D_b) − log p(D_a) − log p(D_b)``: how much more probable the data of two
        posteriors are under one component than under two (their ``h(x)`` cancel):
        ``A(merge) − A(a) − A(b) + A(prior)``. Positive when one component explains both."""
        return (
            self.log_normalizer(self.merge(params_a, params_b))
            - self.log_normalizer(params_a)
            - self.log_normalizer(params_b)
            + self.log_normalizer(self.prior)
        )

    @abc.abstractmethod
    def sample(self, key, params):
        """One draw of θ from ``q(θ | params)`` per batch element."""

    @abc.abstractmethod
    def mean(self, params):
        """The mean of θ under ``q(θ | params)``, with the structure of :meth:`sample`."""


def _family(cls):
    """``cls`` as a frozen dataclass registered as a JAX pytree (its fields are leaves)."""
    return jax.tree_util.register_dataclass(dataclasses.dataclass(frozen=True, eq=False)(cls))
