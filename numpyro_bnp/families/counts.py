"""Count and binary families: :class:`DirichletMultinomial` for word-count documents (read as
:class:`SparseCounts`, see :func:`sparse_counts`), :class:`GammaPoisson` and
:class:`BetaBernoulli` (see :mod:`numpyro_bnp.families` for the interface)."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from jax.scipy.special import digamma, gammaln
from numpyro import distributions as dist

from numpyro_bnp._checks import positive_int
from numpyro_bnp.families._common import (
    ConjugateFamily,
    _core,
    _dtype,
    _event_shape,
    _family,
    _gamma_kl,
    _lift,
    _log_rising,
    _mix,
    _shared,
)

__all__ = [
    "SMALL_COUNT",
    "BetaBernoulli",
    "BetaParams",
    "DirichletMultinomial",
    "DirichletParams",
    "GammaParams",
    "GammaPoisson",
    "SparseCounts",
    "sparse_counts",
]


SMALL_COUNT = 8  # the largest count of the first block of a split document


class SparseCounts(NamedTuple):
    """A document (or a batch of them) as distinct word ids and their counts.

    ``ids`` (``(..., L)``, integers in ``[0, V)``) and ``counts`` (``(..., L)``, non-negative
    integers). The ids of one document with a non-zero count must be distinct; padding entries
    have count 0 (and any valid id), so documents of different lengths share one ``L``.

    A *split* document also has ``large_ids`` and ``large_counts`` (``(..., L')``): then the
    first block holds only counts up to :data:`SMALL_COUNT` and the second the larger ones
    (its padding count 0 too). Most counts of a document are small (most words occur once), and
    for those the predictive needs no log-gamma function (see
    :meth:`DirichletMultinomial.log_predictive`): about five times cheaper per entry.
    """

    ids: jax.Array
    counts: jax.Array
    large_ids: jax.Array | None = None
    large_counts: jax.Array | None = None


def _log_rising_small(a, n):
    """``log Γ(a + n) − log Γ(a)`` for whole ``0 <= n <= SMALL_COUNT`` and ``a > 0``, as
    ``n log a + log Π_{0<i<n} (1 + i/a)`` (two partial products, so no overflow for
    ``a >= 1e-8`` in float32): two or three logarithms instead of two log-gamma functions."""
    inv = 1 / a
    first, second = jnp.ones_like(inv), jnp.ones_like(inv)
    for i in range(1, SMALL_COUNT):
        factor = jnp.where(n > i, 1 + i * inv, 1.0)
        if i < SMALL_COUNT // 2:
            first = first * factor
        else:
            second = second * factor
    return n * jnp.log(a) + jnp.log(first) + jnp.log(second)


def _blocks(x, dtype):
    """``[(ids, counts, small)]`` of a document: one block, or the two of a split one."""
    blocks = [(x.ids, jnp.asarray(x.counts, dtype), x.large_ids is not None)]
    if x.large_ids is not None:
        blocks.append((x.large_ids, jnp.asarray(x.large_counts, dtype), False))
    return blocks


class DirichletParams(NamedTuple):
    """Dirichlet(λ): ``concentration`` λ (``(..., V)``) and its sum ``total`` Λ (``(...)``),
    kept alongside so that a predictive never sums over the vocabulary."""

    concentration: jax.Array
    total: jax.Array


class GammaParams(NamedTuple):
    """Independent Gamma(``concentration``, ``rate``) per element of the event."""

    concentration: jax.Array
    rate: jax.Array


class BetaParams(NamedTuple):
    """Independent Beta(``concentration1``, ``concentration0``) per element of the event
    (``concentration1`` counts ones, as in ``numpyro.distributions.Beta``)."""

    concentration1: jax.Array
    concentration0: jax.Array


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
        """``x`` (:class:`SparseCounts`, split or not) with its counts in the family's dtype."""
        large = None if x.large_ids is None else jnp.asarray(x.large_counts, self.dtype)
        large_ids = None if x.large_ids is None else jnp.asarray(x.large_ids, jnp.int32)
        return SparseCounts(
            jnp.asarray(x.ids, jnp.int32), jnp.asarray(x.counts, self.dtype), large_ids, large
        )

    def absorb(self, params, xs, weights):
        """λ_v ← λ_v + Σ_n w_n x_nv and Λ ← Λ + Σ_n w_n N_n for documents ``xs``
        (:class:`SparseCounts` ``(N, L)``) with ``weights`` ``(N, *batch)``: one scatter of the
        ``N L`` entries, never a dense ``(N, V)`` array."""
        w = jnp.asarray(weights, self.dtype)
        batch = w.shape[1:]
        flat = w.reshape(w.shape[0], -1)  # (N, B)
        conc = params.concentration.reshape(-1, params.concentration.shape[-1])  # (B, V)
        total = params.total.reshape(-1)
        for ids, counts, _ in _blocks(xs, self.dtype):
            entries = counts[:, :, None] * flat[:, None, :]  # (N, L, B)
            delta = jnp.zeros((conc.shape[-1], flat.shape[1]), self.dtype)  # (V, B)
            delta = delta.at[jnp.asarray(ids, jnp.int32).reshape(-1)].add(
                entries.reshape(-1, flat.shape[1])
            )
            conc = conc + delta.T
            total = total + flat.T @ counts.sum(-1)
        out = jnp.broadcast_shapes(params.total.shape, batch)
        return DirichletParams(conc.reshape(*out, conc.shape[-1]), total.reshape(out))

    def update(self, params, stats, weight):
        """λ_v ← λ_v + w x_v on the document's words only, Λ ← Λ + w N."""
        w = jnp.asarray(weight, self.dtype)
        conc, total = params.concentration, params.total
        for ids, counts, _ in _blocks(stats, self.dtype):
            conc = conc.at[..., ids].add(w[..., None] * counts)
            total = total + w * counts.sum(-1)
        return DirichletParams(conc, total)

    def log_predictive(self, params, x):
        """The Dirichlet–multinomial log pmf of the document ``x`` (O(L) per cluster; the
        small counts of a split document by :func:`_log_rising_small`)."""
        log_pmf, n = 0.0, 0.0
        for ids, counts, small in _blocks(x, self.dtype):
            lam = params.concentration[..., ids]
            rising = _log_rising_small(lam, counts) if small else _log_rising(lam, counts)
            log_pmf = log_pmf + rising.sum(-1) - gammaln(counts + 1).sum(-1)
            n = n + counts.sum(-1)
        return log_pmf + gammaln(n + 1) - _log_rising(params.total, n)

    def expected_log_likelihood(self, params, x):
        """``log(N! / Π x_v!) + Σ_v x_v (ψ(λ_v) − ψ(Λ))``, O(L) per cluster."""
        value, n = 0.0, 0.0
        for ids, counts, _ in _blocks(x, self.dtype):
            lam = params.concentration[..., ids]
            value = value + (counts * digamma(lam)).sum(-1) - gammaln(counts + 1).sum(-1)
            n = n + counts.sum(-1)
        return value + gammaln(n + 1) - n * digamma(params.total)

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

    def log_normalizer(self, params):
        """``Σ_v log Γ(λ_v) − log Γ(Λ)`` (O(V))."""
        return gammaln(params.concentration).sum(-1) - gammaln(params.total)

    def sample(self, key, params):
        """Word probabilities θ ``(..., V)``."""
        return random.dirichlet(key, params.concentration, dtype=self.dtype)

    def mean(self, params):
        """λ / Λ ``(..., V)``."""
        return params.concentration / params.total[..., None]


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
        return _mix(params, base, rho, self.dtype, self._ndim())

    def log_normalizer(self, params):
        """``Σ log Γ(a) − a log b`` over the event."""
        a, b = params.concentration, params.rate
        return _event_sum(gammaln(a) - a * jnp.log(b), self._ndim())

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
        return _mix(params, base, rho, self.dtype, self._ndim())

    def log_normalizer(self, params):
        """``Σ log B(a, b)`` over the event."""
        a, b = params.concentration1, params.concentration0
        return _event_sum(gammaln(a) + gammaln(b) - gammaln(a + b), self._ndim())

    def sample(self, key, params):
        """Probabilities θ (the batch and event shape): the first coordinate of a
        Dirichlet(a, b) draw (one log-gamma sampler, stable for small a and b)."""
        conc = jnp.stack([params.concentration1, params.concentration0], axis=-1)
        return random.dirichlet(key, conc, dtype=self.dtype)[..., 0]

    def mean(self, params):
        """a / (a + b)."""
        return params.concentration1 / (params.concentration1 + params.concentration0)
