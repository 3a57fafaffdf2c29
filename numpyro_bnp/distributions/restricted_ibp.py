r"""The restricted Indian buffet process: feature matrices with a chosen law for the row counts.

The R-IBP keeps the beta-process directing measure ``μ = Σ_i π_i δ_{θ_i}`` of the IBP but replaces
each row's Bernoulli process by a *restricted* one: the number of features of a row is drawn from
a user-chosen distribution ``f`` (exactly ``J``, Poisson, any distribution on ``0, 1, 2, …``) and
the features themselves from the Bernoulli process conditioned on that count,

.. math::
    P(Z_n \mid μ, f) = f(|Z_n|)\,
        \frac{\prod_i π_i^{z_{ni}} (1 - π_i)^{1 - z_{ni}}}{\mathrm{PB}_μ(|Z_n|)},

where ``PB_μ`` is the Poisson-binomial pmf of ``Σ_i z_i`` under the unrestricted process (the
"f-mixture", paper B Eq. 5). Rows are i.i.d. given ``μ``, hence exchangeable, and the row count
is *exactly* ``f``.

This module gives:

* :class:`RestrictedBernoulliProcess` — the law of one row given finitely many probabilities
  ``π``, with an exact ``log_prob`` (log-space Poisson-binomial dynamic programme) and exact
  sampling (``J ~ f`` then a conditional-Bernoulli draw);
* :class:`RestrictedIBP` — the prior over ``num_rows x max_features`` matrices with the five prior
  samplers compared in paper B, each reporting its rejections (:class:`RestrictedIBPInfo`);
* :func:`exactly` (a point mass for ``f``) and :func:`left_ordered_form` (the canonical column
  order of every sampled matrix).

**Design decision (ours; ``docs/restricted_ibp.md``, "What we changed relative to the
paper").** Paper B's collapsed sampler accepts each IBP
proposal with probability ``f(|Z*|)``. For a non-degenerate ``f`` that yields rows with law
``∝ f(|Z|) BeP(Z | μ)``, whose count law is ``∝ f(J) PB_μ(J)`` — not the f-mixture above and not
``f``. Every sampler here draws ``J_n ~ f`` first and then samples conditionally on ``J_n``; for
``f = δ_J`` the two readings coincide.

**Samplers.** The five prior samplers, the truncated beta process they use and their row loops
live in :mod:`numpyro_bnp.distributions._restricted_samplers`; this module holds the
distributions, the argument checks and the dispatch to a jitted sampler (:func:`_sampler`).

References:

* F. Doshi-Velez and S. A. Williamson, *Restricted Indian Buffet Processes*, Statistics and
  Computing 27, 2017 (paper B; Eqs. 4–5, 13–14 and §5).
* S. A. Williamson, S. N. MacEachern and E. P. Xing, *Restricting exchangeable nonparametric
  distributions*, NeurIPS 2013.
* Y. W. Teh, D. Görür and Z. Ghahramani, *Stick-breaking construction for the Indian buffet
  process*, AISTATS 2007 (the size-ordered stick-breaking, ``c = 1``).
* X.-H. Chen, A. P. Dempster and J. S. Liu, *Weighted finite population sampling to maximize
  entropy*, Biometrika 81, 1994 (conditional-Bernoulli sampling, draw by draw).
"""

import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import logsumexp, xlog1py, xlogy
from numpyro.distributions import Categorical, Distribution, constraints
from numpyro.distributions.util import validate_sample

from numpyro_bnp._checks import (
    broadcast_parameters,
    event_shaped,
    is_concrete,
    nonnegative_int,
    positive_int,
)
from numpyro_bnp._math import poisson_binomial_log_pmf
from numpyro_bnp.distributions._conditional_bernoulli import (
    conditional_bernoulli_sequential,
    inclusion_log_probs,
    suffix_log_pmf,
)
from numpyro_bnp.distributions._restricted_samplers import (
    _collapsed,
    _retrospective,
    _uncollapsed,
)

__all__ = [
    "RestrictedBernoulliProcess",
    "RestrictedIBP",
    "RestrictedIBPInfo",
    "exactly",
    "left_ordered_form",
    "left_ordered_matrix",
]

METHODS = (
    "collapsed_rejection",
    "uncollapsed_rejection",
    "tilted_rejection",
    "inclusion",
    "retrospective",
)
DIRECTING = ("weak_limit", "stick_breaking")


# ---------------------------------------------------------------------------- helpers


def exactly(count):
    """The point mass ``δ_J`` at ``J = count`` as a NumPyro distribution (for ``count_dist``).

    A :class:`numpyro.distributions.Categorical` on ``0..count`` with all mass on ``count``, so its
    support is the non-negative integers up to ``count`` and ``log_prob`` is ``-inf`` elsewhere.
    """
    count = nonnegative_int(count, "count")
    return Categorical(probs=jnp.zeros(count + 1).at[count].set(1.0))


def _count_support_bounds(count_dist):
    """``(lower, upper)`` of the integer support of ``count_dist`` (``upper`` None if unbounded).

    Raises ``TypeError``/``ValueError`` naming ``count_dist`` unless it is a scalar NumPyro
    distribution whose support lies in the non-negative integers.
    """
    if not isinstance(count_dist, Distribution):
        raise TypeError(
            "count_dist must be a numpyro distribution over the row count (e.g. dist.Poisson(3.0), "
            f"dist.Categorical(probs), exactly(J)), got {type(count_dist).__name__}"
        )
    support = count_dist.support
    if count_dist.event_shape != ():
        raise ValueError(
            f"count_dist must be a scalar distribution, got event_shape {count_dist.event_shape}"
        )
    if isinstance(support, constraints._Boolean):
        lower, upper = 0, 1
    elif isinstance(support, constraints._IntegerInterval):
        lower, upper = support.lower_bound, support.upper_bound
    elif isinstance(support, constraints._IntegerGreaterThan):
        lower, upper = support.lower_bound, None
    else:
        raise ValueError(
            "count_dist must have its support on the non-negative integers (a count of features "
            f"per row); {type(count_dist).__name__} has support {support}"
        )
    if is_concrete(lower) and np.min(np.asarray(lower)) < 0:
        raise ValueError(
            f"count_dist must have its support on the non-negative integers; {support} allows "
            "negative counts"
        )
    if upper is not None and is_concrete(upper):
        upper = int(np.max(np.asarray(upper)))
    return lower, upper


def _check_count_dist(count_dist, max_count, what):
    """Validate ``count_dist`` and that it puts no mass on counts above ``max_count``.

    Only distributions with bounded support can be checked (and must pass); an unbounded one (e.g.
    Poisson) is truncated to ``0..max_count`` and renormalised by :func:`_count_log_pmf`.
    """
    _, upper = _count_support_bounds(count_dist)
    if isinstance(upper, int) and upper > max_count and is_concrete(count_dist):
        above = jnp.arange(max_count + 1, upper + 1)
        above = above.reshape((-1,) + (1,) * len(count_dist.batch_shape))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # values outside a batch member's own support
            mass = jnp.exp(count_dist.log_prob(above)).sum(0)
        if bool(jnp.any(mass > 0)):
            raise ValueError(
                f"count_dist puts probability {float(jnp.max(mass)):.3g} on row counts above "
                f"{what} = {max_count}: such rows cannot be represented"
            )


@functools.partial(jax.jit, static_argnums=(1, 2, 3))  # one compiled program per count law and size
def _count_log_pmf(count_dist, max_count, batch_shape, dtype):
    """``log f(J)`` for ``J = 0..max_count``, renormalised on that range: ``batch_shape + (M+1,)``.

    Values outside the support of ``count_dist`` get ``-inf`` (they are clipped into the support
    before ``log_prob`` is called, so no distribution sees an out-of-range value).
    """
    lower, upper = _count_support_bounds(count_dist)
    grid = jnp.arange(max_count + 1).reshape((-1,) + (1,) * len(count_dist.batch_shape))
    inside = grid >= jnp.asarray(lower)
    clipped = jnp.maximum(grid, jnp.asarray(lower))
    if upper is not None:
        inside = inside & (grid <= jnp.asarray(upper))
        clipped = jnp.minimum(clipped, jnp.asarray(upper))
    log_f = jnp.where(inside, count_dist.log_prob(clipped), -jnp.inf).astype(dtype)
    log_f = jnp.broadcast_to(jnp.moveaxis(log_f, 0, -1), (*tuple(batch_shape), max_count + 1))
    return log_f - logsumexp(log_f, axis=-1, keepdims=True)


# ---------------------------------------------------------------------------- left-ordered form
class _LeftOrderedMatrix(constraints.ParameterFreeConstraint):
    """Binary ``(..., N, K)`` matrices in left-ordered form (Griffiths & Ghahramani 2011).

    Columns are sorted in decreasing lexicographic order of their histories ``(z_1k, …, z_Nk)``
    (row 1 most significant), so used columns come first, in order of the row of their first 1,
    and all-zero columns last.
    """

    is_discrete = True
    event_dim = 2

    @staticmethod
    @jax.jit  # one compiled program per shape, not one per operation
    def __call__(x):
        x = jnp.asarray(x)
        binary = jnp.all((x == 0) | (x == 1), axis=(-2, -1))
        left, right = x[..., :-1], x[..., 1:]
        differs = left != right
        first = jnp.argmax(differs, axis=-2)[..., None, :]
        left_first = jnp.take_along_axis(left, first, axis=-2)[..., 0, :]
        ordered = jnp.all(~jnp.any(differs, axis=-2) | (left_first == 1), axis=-1)
        return binary & ordered

    def feasible_like(self, prototype):
        return jnp.zeros_like(prototype)


left_ordered_matrix = _LeftOrderedMatrix()


def left_ordered_form(z):
    """Sort the columns of ``z`` (shape ``(..., N, K)``) into left-ordered form.

    Columns are ordered by decreasing binary history with row 1 most significant; the result
    satisfies :data:`left_ordered_matrix`. Two matrices are equal up to a permutation of columns
    iff their left-ordered forms are equal, so this is the canonical form used by every sampler of
    :class:`RestrictedIBP`.
    """
    z = jnp.asarray(z)
    # Pack each column's history into uint32 words, 32 rows per word with the earlier row in the
    # more significant bit, and sort on the complemented words (descending histories); one sort
    # key per 32 rows keeps the sort small for many rows.
    num_rows = z.shape[-2]
    num_words = -(-num_rows // 32)
    bits = jnp.pad(
        (z != 0).astype(jnp.uint32),
        [(0, 0)] * (z.ndim - 2) + [(0, 32 * num_words - num_rows), (0, 0)],
    )
    bits = bits.reshape((*z.shape[:-2], num_words, 32, z.shape[-1]))
    shifts = jnp.arange(31, -1, -1, dtype=jnp.uint32)[:, None]
    words = jnp.sum(bits << shifts, axis=-2, dtype=jnp.uint32)  # (..., W, K), word 0 = rows 1-32
    keys = jnp.moveaxis(~words[..., ::-1, :], -2, 0)  # lexsort: the last key (word 0) is primary
    order = jnp.lexsort(keys, axis=-1)
    return jnp.take_along_axis(z, order[..., None, :], axis=-1)


class RestrictedIBPInfo(NamedTuple):
    """Diagnostics of one :class:`RestrictedIBP` draw (each field has the draw's batch shape).

    :ivar num_rejections: proposals rejected before the ``num_rows`` rows were accepted (0 for
        ``"inclusion"``).
    :ivar exhausted: the bound ``max_rejections`` was hit (or, for S2–S4, ``f`` has no mass on
        the counts the truncated ``π̃`` can produce); rows after the last accepted one are zero.
        Never silent: ``sample`` warns outside ``jit``.
    :ivar overflow: more than ``max_features`` features were needed and the extra ones were
        dropped (collapsed / retrospective samplers).
    :ivar num_instantiated: features the sampler represented: IBP dishes created by *all*
        proposals (collapsed), atoms instantiated (retrospective), the truncation (others).
    """

    num_rejections: jnp.ndarray
    exhausted: jnp.ndarray
    overflow: jnp.ndarray
    num_instantiated: jnp.ndarray


# ---------------------------------------------------------------------------- distributions
class RestrictedBernoulliProcess(Distribution):
    r"""A binary vector with a chosen law for its number of ones, given feature probabilities.

    Given ``probs`` ``π`` (last axis: ``I`` atoms) and a distribution ``f`` = ``count_dist`` on the
    number of ones,

    .. math::
        P(z) = \frac{f(|z|)}{Z_f}\;\frac{\prod_i π_i^{z_i} (1 - π_i)^{1 - z_i}}{\mathrm{PB}_π(|z|)},

    the f-mixture of Bernoulli processes conditioned on their total (paper B Eqs. 4–5).
    The count ``|z|`` has law exactly ``f``, and given the count the ones fall according to the
    conditional Bernoulli law, which depends on ``π`` only through ``π / (1 - π)`` up to scale
    (Esscher invariance). ``Z_f = Σ_{J feasible} f(J)`` renormalises ``f`` over the counts a vector
    of ``I`` atoms can have (``PB_π(J) > 0``); it is 1 whenever ``f`` has no mass above ``I`` and
    all ``π`` lie strictly inside ``(0, 1)``. A ``count_dist`` with *bounded* support reaching
    above ``I`` is an error; an unbounded one (Poisson) is truncated to ``0..I``. A ``count_dist``
    with no mass on the counts ``π`` can produce (``Z_f = 0``, e.g. :func:`exactly` ``(1)`` with
    every ``π_i = 0``) is an error when the parameters are concrete; traced parameters are not
    checked (``log_prob`` is then NaN).

    ``log_prob`` is exact, through the log-space Poisson-binomial DP
    :func:`numpyro_bnp._math.poisson_binomial_log_pmf` (``O(I²)``). ``sample`` is exact: ``J ~ f``,
    then one backward-table pass over the atoms (the sequential conditional-Bernoulli sampler).

    :param probs: feature probabilities in ``[0, 1]``, shape ``batch + (I,)``.
    :param count_dist: a scalar NumPyro distribution over ``0, 1, 2, …`` (``dist.Poisson(a)``,
        ``dist.Categorical(p)``, ``dist.Binomial``, :func:`exactly`); its batch shape broadcasts
        against ``probs.shape[:-1]``.

    **Example**

    .. code-block:: python

        >>> import numpyro.distributions as dist
        >>> from jax import random
        >>> from numpyro_bnp.distributions import RestrictedBernoulliProcess, exactly
        >>> d = RestrictedBernoulliProcess([0.9, 0.5, 0.1, 0.05], exactly(2))
        >>> z = d.sample(random.PRNGKey(0), (1000,))   # every row has exactly two ones
        >>> bool((z.sum(-1) == 2).all())
        True
    """

    arg_constraints = {"probs": constraints.independent(constraints.unit_interval, 1)}
    support = constraints.independent(constraints.boolean, 1)
    pytree_data_fields = ("probs", "count_dist")
    has_enumerate_support = False

    def __init__(self, probs, count_dist, *, validate_args=None):
        probs = jnp.asarray(probs)
        if probs.ndim < 1 or probs.shape[-1] < 1:
            raise ValueError(f"probs must have a last axis of atoms, got shape {probs.shape}")
        if is_concrete(probs) and not bool(jnp.all((probs >= 0) & (probs <= 1))):
            raise ValueError("probs must lie in [0, 1] (no NaN); got values outside")
        num_atoms = probs.shape[-1]
        _check_count_dist(count_dist, num_atoms, "the number of atoms probs.shape[-1]")
        batch_shape = jnp.broadcast_shapes(probs.shape[:-1], count_dist.batch_shape)
        dtype = jnp.result_type(probs, float)
        self.probs = jnp.broadcast_to(probs.astype(dtype), (*batch_shape, num_atoms))
        self.count_dist = count_dist
        super().__init__(
            batch_shape=batch_shape, event_shape=(num_atoms,), validate_args=validate_args
        )
        if is_concrete(self.probs, count_dist):
            self._check_reachable()

    def _check_reachable(self):
        """``f`` must put mass on a count the probabilities can produce, for every batch member.

        A vector with ``π`` has ``PB_π(J) > 0`` exactly for ``#{π_i = 1} <= J <= #{π_i > 0}``;
        when ``f`` has no mass there, the law ``f(J) PB_π(J)`` conditioned on ``J`` does not exist
        (``Z_f = 0``) and neither ``sample`` nor ``log_prob`` would mean anything.
        """
        num_atoms = self.event_shape[0]
        probs = np.asarray(self.probs)
        lower, upper = (probs == 1).sum(-1), (probs > 0).sum(-1)
        log_f = _count_log_pmf(self.count_dist, num_atoms, self.batch_shape, self.probs.dtype)
        counts = np.arange(num_atoms + 1)
        reachable = (counts >= lower[..., None]) & (counts <= upper[..., None])
        ok = (np.isfinite(np.asarray(log_f)) & reachable).any(-1)
        if not ok.all():
            first = np.unravel_index(np.argmin(ok), ok.shape) if ok.ndim else ()
            lo, hi = int(lower[first]), int(upper[first])
            raise ValueError(
                f"count_dist puts no probability on the row counts {lo}..{hi} that probs can "
                f"produce ({lo} atoms with probability 1, {hi} with probability > 0; batch index "
                f"{tuple(int(i) for i in first)}): give such counts mass, or atoms the "
                "probabilities to reach the counts of count_dist"
            )

    def _count_tables(self):
        """``(log f̃(J), log PB_π(J))`` for ``J = 0..I``, each ``batch_shape + (I + 1,)``.

        ``log f̃`` is ``log f`` restricted to the feasible counts and renormalised (``- log Z_f``).
        """
        num_atoms = self.event_shape[0]
        log_pb = poisson_binomial_log_pmf(self.probs, num_atoms)
        log_f = _count_log_pmf(self.count_dist, num_atoms, self.batch_shape, self.probs.dtype)
        log_f = jnp.where(jnp.isfinite(log_pb), log_f, -jnp.inf)
        return log_f - logsumexp(log_f, axis=-1, keepdims=True), log_pb

    @validate_sample
    def log_prob(self, value):
        """Exact log pmf; ``-inf`` for non-binary vectors. Shape: ``value.shape[:-1]`` ⊕ batch.

        A value whose last axis is not ``(I,)`` (one entry per atom) is a ``ValueError``.
        """
        value = event_shaped(value, self.event_shape)
        x = value.astype(self.probs.dtype)
        count = jnp.clip(jnp.sum(value, -1), 0, self.event_shape[0]).astype(jnp.int32)
        log_bep = jnp.sum(xlogy(x, self.probs) + xlog1py(1.0 - x, -self.probs), -1)
        log_f, log_pb = self._count_tables()
        per_count = jnp.where(jnp.isfinite(log_f), log_f - log_pb, -jnp.inf)
        shape = jnp.broadcast_shapes(count.shape, self.batch_shape)
        per_count = jnp.broadcast_to(per_count, shape + per_count.shape[-1:])
        lp = jnp.take_along_axis(per_count, jnp.broadcast_to(count, shape)[..., None], -1)[..., 0]
        return jnp.where(self.support(value), lp + log_bep, -jnp.inf)

    def sample(self, key, sample_shape=()):
        """Exact draws: ``J ~ f̃``, then the conditional law; ``(*sample, *batch, I)`` int32."""
        num_atoms = self.event_shape[0]
        batch = int(np.prod(self.batch_shape))
        draws = int(np.prod(sample_shape))
        log_f, _ = self._count_tables()
        log_f = log_f.reshape(batch, num_atoms + 1)
        probs = self.probs.reshape(batch, num_atoms)
        suffix = suffix_log_pmf(probs, num_atoms)

        def one(key, probs, suffix, log_f):
            key_j, key_z = random.split(key)
            count = random.categorical(key_j, log_f)
            return conditional_bernoulli_sequential(key_z, probs, suffix, count)

        many = jax.vmap(one, in_axes=(0, None, None, None))
        keys = random.split(key, draws * batch)
        keys = keys.reshape((batch, draws, *keys.shape[1:]))
        z = jax.vmap(many)(keys, probs, suffix, log_f)  # (batch, draws, I)
        z = jnp.moveaxis(z, 1, 0)
        return z.reshape(tuple(sample_shape) + self.batch_shape + (num_atoms,))

    @property
    def mean(self):
        r"""``P(z_i = 1) = Σ_J f̃(J) π_i^{(J)}`` with the conditional inclusion probabilities."""
        num_atoms = self.event_shape[0]
        log_f, _ = self._count_tables()
        incl = jnp.vectorize(lambda p: inclusion_log_probs(p, num_atoms), signature="(i)->(i,j)")(
            self.probs
        )
        return jnp.exp(logsumexp(incl + log_f[..., None, :], axis=-1))

    @property
    def variance(self):
        p = self.mean
        return p * (1.0 - p)


class RestrictedIBP(Distribution):
    r"""The restricted IBP ``R-IBP(α, c, f)`` over ``num_rows x max_features`` binary matrices.

    ``μ ~ BP(c, α)`` (beta process with mass ``α`` and concentration ``c``), then each row is
    drawn i.i.d. from the :class:`RestrictedBernoulliProcess` given ``μ`` with row-count law ``f``
    (``count_dist``): every row has exactly ``f``-distributed many features and the rows are
    exchangeable (paper B §3). A value is a binary matrix in **left-ordered form**
    (:func:`left_ordered_form`), padded with zero columns up to ``max_features``.

    **Samplers** (``method``; paper B §5; each reports its rejections, :meth:`sample_with_info`):

    * ``"collapsed_rejection"`` (S1, exact): an IBP(``c, α``) sequence of proposals whose counts
      include *every* proposal; row ``n`` is the first proposal after ``J_n ~ f`` whose count is
      ``J_n``. Exact for any ``c``. Counting only accepted rows would break exchangeability
      (paper B §3.2).
    * ``"uncollapsed_rejection"`` (S2, approximate): ``π̃`` from a truncated beta process
      (``directing="weak_limit"``, Eq. 13, or ``"stick_breaking"``, Eq. 14, ``c = 1``) with
      ``truncation`` atoms; rows by proposing ``Bernoulli(π̃)`` until the count is ``J_n``.
    * ``"tilted_rejection"`` (S3, approximate): as S2 but proposing from the Esscher tilt of ``π̃``
      whose mean count is ``J_n``; the accepted law is the same (tilt invariance), with far fewer
      rejections.
    * ``"inclusion"`` (S4, approximate): as S2 but each row by the exact draw-by-draw
      conditional-Bernoulli sampler from inclusion probabilities — no rejections.
    * ``"retrospective"`` (S5, exact for ``c = 1``): a stick-breaking prefix of ``truncation``
      atoms plus a lazily instantiated tail; see ``_restricted_samplers._retrospective`` for the
      corrected conditioning (the literal paper version is not exact).

    For the approximate samplers ``f`` is truncated to the counts feasible with ``truncation``
    atoms; for the exact ones to ``0..max_features``. In every sampler ``J_n ~ f`` is drawn first
    (see the module docstring for why the paper's "accept with probability f(|Z*|)" is not used).

    **Capacity and bounds.** Rejection loops stop after ``max_rejections`` rejections per matrix
    (``exhausted``); features beyond ``max_features`` are dropped (``overflow``). Both are flagged
    in :class:`RestrictedIBPInfo` and warned about outside ``jit`` — never silent.

    **Density.** ``log_prob`` is not available: the pmf of a matrix is
    ``E_μ[Π_n f(|Z_n|) BeP(Z_n | μ) / PB_μ(|Z_n|)]``, an expectation over the whole beta process
    with no closed form (the normaliser ``PB_μ`` couples all atoms). Given finite probabilities,
    :class:`RestrictedBernoulliProcess` has an exact density.

    :param alpha: mass ``α > 0``; any batch shape.
    :param count_dist: NumPyro distribution of the row count (see
        :class:`RestrictedBernoulliProcess`); batch shape broadcasts with ``alpha``.
    :param concentration: ``c > 0`` (``c = 1``: one-parameter; required by the stick-breaking
        samplers).
    :param int num_rows: ``N`` (static).
    :param int max_features: column capacity ``K`` (static).
    :param str method: default sampler for :meth:`sample` (handlers and ``Predictive`` use it).
    :param int truncation: atoms of the truncated beta process (S2–S4, default ``max_features``)
        or of the initial stick-breaking prefix (S5, default ``max_features // 2``).
    :param str directing: ``"weak_limit"`` or ``"stick_breaking"`` for S2–S4.
    :param int max_rejections: bound on the rejections per matrix (default ``10**6``).

    **Example**

    .. code-block:: python

        >>> from jax import random
        >>> from numpyro_bnp.distributions import RestrictedIBP, exactly
        >>> d = RestrictedIBP(5.0, exactly(5), num_rows=100, max_features=128)
        >>> z, info = d.sample_with_info(random.PRNGKey(0))
        >>> bool((z.sum(-1) == 5).all()), int(info.num_rejections) > 0
        (True, True)
    """

    arg_constraints = {"alpha": constraints.positive, "concentration": constraints.positive}
    pytree_data_fields = ("alpha", "concentration", "count_dist")
    pytree_aux_fields = (
        "num_rows",
        "max_features",
        "method",
        "truncation",
        "directing",
        "max_rejections",
    )
    support = left_ordered_matrix
    has_enumerate_support = False

    def __init__(
        self,
        alpha,
        count_dist,
        *,
        concentration=1.0,
        num_rows,
        max_features,
        method="collapsed_rejection",
        truncation=None,
        directing="weak_limit",
        max_rejections=1_000_000,
        validate_args=None,
    ):
        self.num_rows = positive_int(num_rows, "num_rows")
        self.max_features = positive_int(max_features, "max_features")
        self.method = _check_choice(method, METHODS, "method")
        self.directing = _check_choice(directing, DIRECTING, "directing")
        self.truncation = None if truncation is None else positive_int(truncation, "truncation")
        if self.truncation is not None and self.truncation > self.max_features:
            raise ValueError(
                f"truncation ({self.truncation}) must not exceed max_features ({self.max_features})"
            )
        self.max_rejections = positive_int(max_rejections, "max_rejections")
        _check_count_dist(count_dist, self.max_features, "max_features")
        batch_shape, (self.alpha, self.concentration) = broadcast_parameters(
            alpha, concentration, batch_shape=count_dist.batch_shape
        )
        self.count_dist = count_dist
        super().__init__(
            batch_shape=batch_shape,
            event_shape=(self.num_rows, self.max_features),
            validate_args=validate_args,
        )

    @classmethod
    def infer_shapes(cls, *args, **kwargs):
        raise NotImplementedError("RestrictedIBP event shape depends on num_rows and max_features")

    def _truncation_for(self, method):
        if method == "retrospective":
            return self.truncation or max(self.max_features // 2, 1)
        return self.truncation or self.max_features

    def _check_method(self, method):
        """Static checks of a sampler's requirements (concrete parameters only).

        Returns ``(method, truncation, max_count)``: ``max_count`` is the largest row count with
        ``f > 0`` (at most ``truncation``) for the approximate samplers, whose tables it sizes.
        """
        method = _check_choice(method, METHODS, "method")
        truncation = self._truncation_for(method)
        stick = method == "retrospective" or (
            method != "collapsed_rejection" and self.directing == "stick_breaking"
        )
        if (
            stick
            and is_concrete(self.concentration)
            and not bool(jnp.all(self.concentration == 1.0))
        ):
            raise ValueError(
                f"method={method!r} uses the stick-breaking beta process, which needs "
                "concentration == 1"
            )
        if method in ("uncollapsed_rejection", "tilted_rejection", "inclusion"):
            _check_count_dist(self.count_dist, truncation, "truncation")
            weak = self.directing == "weak_limit"
            if weak and is_concrete(self.alpha) and not bool(jnp.all(self.alpha < truncation)):
                raise ValueError(
                    f"the weak-limit beta process Beta(cα/I, c - cα/I) needs truncation I "
                    f"({truncation}) > alpha"
                )
        max_count = truncation
        if is_concrete(self.count_dist):
            log_f = _count_log_pmf(self.count_dist, truncation, self.batch_shape, self.alpha.dtype)
            finite = np.isfinite(np.asarray(log_f)).reshape(-1, truncation + 1).any(0)
            max_count = int(np.flatnonzero(finite).max()) if finite.any() else 0
        return method, truncation, max_count

    def sample_with_info(self, key, sample_shape=(), method=None):
        """Draw matrices with a given sampler; returns ``(z, RestrictedIBPInfo)``.

        ``z``: int32 ``sample_shape + batch_shape + (num_rows, max_features)`` in left-ordered
        form. ``method`` defaults to the constructor's.
        """
        method, truncation, max_count = self._check_method(
            self.method if method is None else method
        )
        shape = tuple(sample_shape) + self.batch_shape
        size = int(np.prod(shape))
        alpha = jnp.broadcast_to(self.alpha, shape).reshape(size)
        conc = jnp.broadcast_to(self.concentration, shape).reshape(size)
        log_f = _count_log_pmf(self.count_dist, self.max_features, self.batch_shape, alpha.dtype)
        log_f = jnp.broadcast_to(log_f, shape + log_f.shape[-1:]).reshape(size, -1)
        sizes = (self.num_rows, self.max_features, truncation, self.max_rejections)
        sampler = _sampler(method, sizes, self.directing, max_count)
        z, info = sampler(random.split(key, size), alpha, conc, log_f)
        z = z.reshape(shape + self.event_shape)
        info = RestrictedIBPInfo(*(x.reshape(shape) for x in info))
        _warn_if_flagged(info, method, self.max_features, self.max_rejections)
        return z, info

    def sample(self, key, sample_shape=(), method=None):
        """Draw matrices (see :meth:`sample_with_info`)."""
        return self.sample_with_info(key, sample_shape, method)[0]

    def sample_with_intermediates(self, key, sample_shape=()):
        """Like :meth:`sample` with the constructor's method, plus ``[RestrictedIBPInfo]``."""
        z, info = self.sample_with_info(key, sample_shape)
        return z, [info]

    def log_prob(self, value):
        event_shaped(value, self.event_shape)  # a wrong shape is the caller's first problem
        raise NotImplementedError(
            "RestrictedIBP has no tractable pmf: it is an expectation over the beta process of "
            "prod_n f(|Z_n|) BeP(Z_n | mu) / PB_mu(|Z_n|). Use RestrictedBernoulliProcess given "
            "explicit feature probabilities for an exact density."
        )


def _check_choice(value, choices, name):
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _warn_if_flagged(info, method, max_features, max_rejections):
    if not is_concrete(info):
        return
    exhausted, overflow = int(jnp.sum(info.exhausted)), int(jnp.sum(info.overflow))
    if exhausted:
        warnings.warn(
            f"RestrictedIBP ({method}): {exhausted} draw(s) hit max_rejections={max_rejections}; "
            "their rows after the last accepted one are zero.",
            RuntimeWarning,
            stacklevel=4,
        )
    if overflow:
        warnings.warn(
            f"RestrictedIBP ({method}): {overflow} draw(s) needed more than "
            f"max_features={max_features} features; the extra features were dropped.",
            RuntimeWarning,
            stacklevel=4,
        )


# ---------------------------------------------------------------------------- dispatch
@functools.lru_cache(maxsize=64)
def _sampler(method, sizes, directing, max_count):
    """The jitted sampler of many draws for static sizes (cached: repeated calls do not recompile).

    Rejection counts are heavy-tailed (the expected number of proposals per row,
    ``E[1 / PB_μ(J)]``, is infinite when ``J >= α``, since the largest atom is ``Beta(α, 1)``), so
    the rejection samplers make their draws one after another (``lax.map``): the cost is the
    *sum* of the draws' proposals, whereas under ``vmap`` every draw would run as long as the
    slowest. The rejection-free inclusion sampler is vectorised.

    Maps ``(keys (S,), alpha (S,), concentration (S,), log_f (S, max_features + 1))`` to
    ``(z (S, N, K) in left-ordered form, info tuple)``.
    """
    if method == "collapsed_rejection":
        one = _collapsed(*sizes)
    elif method == "retrospective":
        one = _retrospective(*sizes)
    else:
        one = _uncollapsed(*sizes, method, directing, max_count)

    def run(keys, alpha, concentration, log_f):
        args = (keys, alpha, concentration, log_f)
        if method == "inclusion":  # no rejection loop: vectorise over draws
            z, info = jax.vmap(one)(*args)
        else:  # one draw after another: under vmap every draw would run as long as the slowest
            z, info = lax.map(lambda a: one(*a), args)
        return left_ordered_form(z), info

    return jax.jit(run)
