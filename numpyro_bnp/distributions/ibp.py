"""The two-parameter Indian buffet process with its recursive, exact marginals.

References:

* T. L. Griffiths and Z. Ghahramani, *The Indian Buffet Process: An Introduction and Review*,
  JMLR 12, 2011 (the pmf of a buffet-ordered matrix).
* R. Schaeffer, Y. Du, G. K. Liu and I. R. Fiete, *Streaming Inference for Infinite Feature
  Models*, ICML 2022 (the R-IBP recursion, Eq. 4, and the filtering prior, Eq. 5).
"""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special
from jax import lax, random
from jax.scipy.special import gammaln
from numpyro.distributions import Distribution, constraints
from numpyro.distributions.util import validate_sample

from numpyro_bnp._checks import (
    broadcast_parameters,
    event_shaped,
    is_concrete,
    positive_int,
    unit_interval,
)
from numpyro_bnp._math import generalized_harmonic, poisson_interval_probs
from numpyro_bnp.distributions.crm import BetaProcess, _check

__all__ = ["RecursiveIBP", "buffet_matrix", "ibp_capacity", "num_active_features"]

_MAX_UINT32_FLOAT32 = float(np.nextafter(np.float32(2.0**32), np.float32(0.0)))


class _BuffetMatrix(constraints.ParameterFreeConstraint):
    """Binary ``(..., N, K)`` matrices in buffet order.

    The non-zero columns are packed to the left (no all-zero column before a used one) and are
    ordered by the row of their first 1, which is the order in which the buffet process creates
    dishes. All-zero rows are allowed.
    """

    is_discrete = True
    event_dim = 2

    @staticmethod
    @jax.jit  # one compiled program per shape, not one per operation
    def __call__(x):
        x = jnp.asarray(x)
        binary = jnp.all((x == 0) | (x == 1), axis=(-2, -1))
        active = jnp.any(x != 0, axis=-2)
        packed = jnp.all(active[..., 1:] <= active[..., :-1], axis=-1)
        first_row = jnp.where(active, jnp.argmax(x != 0, axis=-2), x.shape[-2])
        ordered = jnp.all(first_row[..., 1:] >= first_row[..., :-1], axis=-1)
        return binary & packed & ordered

    def feasible_like(self, prototype):
        return jnp.zeros_like(prototype)


buffet_matrix = _BuffetMatrix()


def num_active_features(z):
    """Number of non-zero columns of a feature matrix ``z`` of shape ``(..., N, K)`` → ``(...)``."""
    return jnp.sum(jnp.any(jnp.asarray(z) != 0, axis=-2), axis=-1)


def ibp_capacity(alpha, beta=1.0, *, num_rows, tail_prob=1e-6):
    """The smallest ``max_features`` that truncates IBP(α, β) with probability ``<= tail_prob``.

    The total number of dishes after ``num_rows`` customers is Poisson with mean
    ``alpha * H^beta_{num_rows}``; this returns the smallest ``K`` with ``P(Λ_N > K) <= tail_prob``
    (for array parameters, the largest such ``K`` over them). A host-side helper for choosing
    fixed capacities: its parameters must be concrete numbers, and it may be called inside a
    model that an engine traces under ``jit`` (it computes at trace time).
    """
    num_rows = positive_int(num_rows, "num_rows")
    if not is_concrete(alpha, beta):
        raise TypeError(
            "ibp_capacity needs concrete alpha and beta (numbers, not traced values): a capacity "
            "is a static size; pass the hyper-parameters as Python numbers or compute the "
            "capacity outside the traced function"
        )
    tail_prob = unit_interval(tail_prob, "tail_prob")
    _check(lambda a: a > 0, "alpha", "finite and > 0", alpha)
    _check(lambda b: b > 0, "beta", "finite and > 0", beta)
    alpha, beta = np.asarray(alpha, dtype=np.float64), np.asarray(beta, dtype=np.float64)
    with jax.ensure_compile_time_eval(), jax.enable_x64(True):
        rate = float(jnp.max(alpha * generalized_harmonic(beta, num_rows)))
    # on the host (SciPy): a jnp tail of a new length would be a new compilation at every call
    upper = int(rate + 12 * np.sqrt(rate) + 60)
    while True:
        # P(Poisson(rate) > K) = P(Poisson(rate) >= K + 1) = gammainc(K + 1, rate)
        tail = scipy.special.gammainc(np.arange(1, upper + 1, dtype=np.float64), rate)
        if np.any(tail <= tail_prob):
            return max(int(np.argmax(tail <= tail_prob)), 1)
        upper *= 2


class RecursiveIBP(Distribution):
    r"""Two-parameter Indian buffet process IBP(α, β) over ``num_rows x max_features`` matrices.

    Customer ``n`` (of ``N = num_rows``) takes each existing dish ``k`` with probability
    ``m_k / (β + n - 1)`` where ``m_k`` counts earlier takers, then ``Poisson(αβ / (β + n - 1))``
    new dishes. A value is the matrix ``Z`` with columns in order of creation (buffet order), padded
    with zero columns up to the fixed capacity ``max_features``; the number of dishes used is
    :func:`num_active_features`. ``β = 1`` is the one-parameter IBP; the de Finetti measure is the
    beta process with mass ``α`` and concentration ``β``.

    Beyond ``sample`` and ``log_prob`` it gives the exact marginals ``p(z_nk = 1 | α, β)`` of the
    R-IBP recursion (Schaeffer et al. 2022, Eq. 4), the exact expected number of dishes and the
    approximate filtering prior of Eq. 5 used by the streaming filter.

    **Capacity.** If a draw needs more than ``max_features`` dishes, the extra dishes are dropped
    and the draw is *flagged*: ``sample_with_intermediates`` returns the per-draw flag (it lands in
    ``trace[site]["intermediates"]``) and, outside ``jit``, ``sample`` warns. Use
    :func:`ibp_capacity` to choose a capacity with a negligible truncation probability.

    :param alpha: mass α > 0 (expected number of dishes per customer); any batch shape. Concrete
        values must be finite and positive (checked always, not only with ``validate_args``).
    :param beta: concentration β > 0; broadcast against ``alpha`` (checked as ``alpha``).
    :param int num_rows: number of customers ``N`` (static).
    :param int max_features: column capacity ``K`` (static).

    **Example**

    .. code-block:: python

        >>> from jax import random
        >>> from numpyro_bnp.distributions import RecursiveIBP, num_active_features
        >>> ibp = RecursiveIBP(3.0, 2.0, num_rows=20, max_features=64)
        >>> z = ibp.sample(random.PRNGKey(0), (1000,))            # (1000, 20, 64) in {0, 1}
        >>> float(abs(z.mean(0) - ibp.marginals()).max()) < 0.07  # exact marginals vs simulation
        True
        >>> ibp.expected_num_features()[-1]                         # E[number of dishes], N = 20
        Array(15.87..., dtype=float32)
    """

    arg_constraints = {"alpha": constraints.positive, "beta": constraints.positive}
    pytree_data_fields = ("alpha", "beta")
    pytree_aux_fields = ("num_rows", "max_features")
    support = buffet_matrix

    def __init__(self, alpha, beta=1.0, *, num_rows, max_features, validate_args=None):
        self.num_rows = positive_int(num_rows, "num_rows")
        self.max_features = positive_int(max_features, "max_features")
        _check(lambda a: a > 0, "alpha", "finite and > 0", alpha)
        _check(lambda b: b > 0, "beta", "finite and > 0", beta)
        batch_shape, (self.alpha, self.beta) = broadcast_parameters(alpha, beta)
        super().__init__(
            batch_shape=batch_shape,
            event_shape=(self.num_rows, self.max_features),
            validate_args=validate_args,
        )

    @classmethod
    def infer_shapes(cls, *args, **kwargs):
        # The event shape depends on the static sizes, not on parameter shapes.
        raise NotImplementedError("RecursiveIBP event shape depends on num_rows and max_features")

    # ------------------------------------------------------------------ sampling
    def _buffet(self, key, alpha, beta):
        """One buffet-process draw for scalar (α, β): ``(N, K)`` int32 matrix, overflow flag.

        The new-dish counts ``λ_n ~ Poisson(αβ / (β + n - 1))`` do not depend on earlier rows, so
        they are drawn up front; the scan over customers carries only the dish counts ``m_k``.
        Old dish ``k`` is taken when 32 uniform random bits fall below ``p_k 2^32`` with
        ``p_k = m_k / (β + n - 1)``: a Bernoulli(``p_k``) draw that skips the float conversion of
        a uniform (the threshold is capped at the largest float32 below ``2^32``, which changes
        ``p_k`` by at most ``6e-8``, below float32 resolution).
        """
        num_cols = self.max_features
        cols = jnp.arange(num_cols)
        dtype = jnp.result_type(alpha)
        key_new, key_old = random.split(key)
        denoms = beta + jnp.arange(self.num_rows, dtype=dtype)  # β + n - 1
        num_new = random.poisson(key_new, alpha * beta / denoms, dtype=jnp.int32)
        dishes_after = jnp.cumsum(num_new)
        dishes_before = dishes_after - num_new

        def customer(counts, inputs):
            denom, before, after, key_n = inputs
            threshold = jnp.minimum(counts / denom * 2.0**32, _MAX_UINT32_FLOAT32)
            take_old = random.bits(key_n, (num_cols,), jnp.uint32) < threshold.astype(jnp.uint32)
            row = take_old | ((cols >= before) & (cols < after))
            return counts + row, row

        inputs = (denoms, dishes_before, dishes_after, random.split(key_old, self.num_rows))
        _, z = lax.scan(customer, jnp.zeros(num_cols, jnp.int32), inputs)
        return z.astype(jnp.int32), dishes_after[-1] > num_cols

    def _sample(self, key, sample_shape):
        shape = tuple(sample_shape) + self.batch_shape
        z, overflow = _draw_buffets(self, key, shape)
        if not isinstance(overflow, jax.core.Tracer) and bool(jnp.any(overflow)):
            warnings.warn(
                f"RecursiveIBP: {int(jnp.sum(overflow))} of {overflow.size} draws needed more "
                f"than max_features={self.max_features} dishes and were truncated; "
                "choose a larger capacity (see numpyro_bnp.distributions.ibp_capacity).",
                RuntimeWarning,
                stacklevel=3,
            )
        return z, overflow

    def sample(self, key, sample_shape=()):
        """Draw matrices by the buffet process: shape ``sample_shape + batch_shape + (N, K)``."""
        return self._sample(key, sample_shape)[0]

    def sample_with_intermediates(self, key, sample_shape=()):
        """Like :meth:`sample`, plus ``[overflow]``: True where a draw exceeded the capacity."""
        z, overflow = self._sample(key, sample_shape)
        return z, [overflow]

    # ------------------------------------------------------------------ densities
    @validate_sample
    def log_prob(self, value):
        r"""Exact log pmf of a buffet-ordered matrix (Griffiths & Ghahramani 2011).

        .. math::
            \log P(Z) = K_+ \log(αβ) - \sum_i \log K^{(i)}_1! - α H^β_N
                + \sum_{k \le K_+} \log \frac{Γ(m_k)\,Γ(N - m_k + β)}{Γ(N + β)}

        where ``K_1^{(i)}`` is the number of dishes first taken by customer ``i`` and ``m_k`` the
        column sums. Matrices outside :data:`buffet_matrix` (non-binary, columns not in order of
        first appearance, gaps) get ``-inf``. Shape: broadcast of ``value.shape[:-2]`` and
        ``batch_shape``; a value whose last two axes are not ``(num_rows, max_features)`` is a
        ``ValueError`` (the pmf of an ``N``-row buffet is not defined for other matrices).
        """
        return _buffet_log_pmf(self, event_shaped(value, self.event_shape))

    # ------------------------------------------------------------------ R-IBP quantities
    def _dish_creation_probs(self):
        """``D[n, k] = P(customer n creates dish k) = P(Λ_{n-1} < k <= Λ_n)``, shape (..., N, K)."""
        dtype = jnp.result_type(self.alpha)
        n = jnp.arange(self.num_rows + 1, dtype=dtype)
        rates = self.alpha[..., None] * generalized_harmonic(self.beta[..., None], n)
        return poisson_interval_probs(rates[..., :-1], rates[..., 1:], self.max_features)

    def marginals(self):
        r"""Exact marginals ``p(z_nk = 1 | α, β)``, shape ``batch_shape + (N, K)``.

        The R-IBP recursion (Schaeffer et al. 2022, Eq. 4),

        .. math::
            p_{nk} = \frac{\sum_{n'<n} p_{n'k}}{β + n - 1}
                + P(Λ_{n-1} \le k - 1) - P(Λ_n \le k - 1),
            \qquad Λ_n \sim \mathrm{Poisson}(α H^β_n),

        with the Poisson CDFs evaluated at ``k - 1`` (evaluating them at ``k`` is an off-by-one
        error), unrolled into the vectorised closed form
        ``p_nk = D_nk + sum_{m<n} D_mk / (β + m)`` where ``D_nk`` is the probability that
        customer ``m`` creates dish ``k``: a dish created by customer ``m`` is taken by each later
        customer with probability ``1 / (β + m)``.
        """
        creation = self._dish_creation_probs()
        rows = jnp.arange(1, self.num_rows + 1, dtype=creation.dtype)
        later_takes = creation / (self.beta[..., None, None] + rows[:, None])
        earlier = jnp.cumsum(later_takes, axis=-2)
        earlier = jnp.concatenate([jnp.zeros_like(earlier[..., :1, :]), earlier[..., :-1, :]], -2)
        return creation + earlier

    @property
    def mean(self):
        """``E[Z] = marginals()`` (columns beyond the capacity are not represented)."""
        return self.marginals()

    @property
    def variance(self):
        p = self.marginals()
        return p * (1.0 - p)

    def expected_num_features(self):
        r"""Exact ``E[Λ_n] = αβ (ψ(β + n) - ψ(β))`` for ``n = 1..N``; shape ``batch_shape + (N,)``.

        Untruncated: this is the expectation under the IBP, whatever the capacity.
        """
        n = jnp.arange(1, self.num_rows + 1, dtype=jnp.result_type(self.alpha))
        return self.alpha[..., None] * generalized_harmonic(self.beta[..., None], n)

    def filtering_prior(self, running_sum, log_running_complement, num_seen):
        r"""The R-IBP approximate filtering prior ``q(z_nk = 1 | o_<n)`` (Schaeffer et al., Eq. 5).

        Past observations ``n' < n`` are summarised by their filtered posteriors
        ``b_{n'k} = q(z_{n'k} = 1 | o_{<=n'})`` through two running statistics per feature:

        * ``running_sum[..., k]``: :math:`S_{n-1,k} = \sum_{n'<n} b_{n'k}`;
        * ``log_running_complement[..., k]``: :math:`\log \prod_{n'<n} (1 - b_{n'k})`, the log
          probability that feature ``k`` has not been used yet.

        The number of existing features is approximately ``Poisson(ρ_{n-1})`` with
        :math:`ρ_{n-1} = \sum_k (1 - \prod_{n'<n} (1 - b_{n'k}))` (Le Cam; paper Section 3.5), and
        the new dishes of customer ``n`` add an independent ``Poisson(αβ / (β + n - 1))``:

        .. math::
            q(z_{nk} = 1 \mid o_{<n}) = \frac{S_{n-1,k}}{β + n - 1}
                + P(\mathrm{Pois}(ρ_{n-1}) \le k - 1)
                - P(\mathrm{Pois}(ρ_{n-1} + \tfrac{αβ}{β + n - 1}) \le k - 1).

        The two terms are not exclusive under the approximation, so the result is clipped to
        ``[0, 1]``. With ``num_seen = 0`` and empty statistics this is the first row of
        :meth:`marginals`.

        :param running_sum: ``(..., K)``; ``K`` is the caller's capacity (any size).
        :param log_running_complement: ``(..., K)``, ``<= 0``.
        :param num_seen: ``n - 1``, the number of observations already absorbed; scalar or
            batch-shaped.
        :return: ``q`` of shape broadcast of ``batch_shape`` and the statistics' leading shape,
            plus ``(K,)``.
        """
        running_sum = jnp.asarray(running_sum)
        dtype = jnp.result_type(self.alpha, running_sum)
        num_seen = jnp.asarray(num_seen, dtype)
        denom = self.beta + num_seen  # β + n - 1
        rate_existing = jnp.sum(-jnp.expm1(log_running_complement), axis=-1)
        rate_new = self.alpha * self.beta / denom
        num_cols = running_sum.shape[-1]
        created_now = poisson_interval_probs(rate_existing, rate_existing + rate_new, num_cols)
        return jnp.clip(running_sum / denom[..., None] + created_now, 0.0, 1.0)

    def as_beta_process(self, truncation=None):
        r"""The de Finetti measure of IBP(α, β): ``BetaProcess(mass=α, concentration=β)``.

        The two-parameter IBP is a Bernoulli process driven by a beta process with Lévy density
        :math:`αβ θ^{-1} (1-θ)^{β-1}` (Thibaux & Jordan 2007); a slice sampler or any series
        representation can then run on a model written with ``RecursiveIBP``. ``truncation``
        (default ``max_features``) is the number of atoms of the returned distribution.
        """
        truncation = self.max_features if truncation is None else truncation
        return BetaProcess(self.alpha, self.beta, truncation=truncation)


# Module-level compiled cores of RecursiveIBP's methods: the distribution is a pytree (its static
# sizes are aux data), so each runs as one compiled program per shape when called eagerly, instead
# of operation by operation.
@functools.partial(jax.jit, static_argnums=2)
def _draw_buffets(ibp, key, shape):
    """``shape + (N, K)`` buffet draws of ``ibp`` (``shape`` ends with its batch shape) and their
    overflow flags ``shape``."""
    size = int(np.prod(shape))
    alpha = jnp.broadcast_to(ibp.alpha, shape).reshape(size)
    beta = jnp.broadcast_to(ibp.beta, shape).reshape(size)
    z, overflow = jax.vmap(ibp._buffet)(random.split(key, size), alpha, beta)
    return z.reshape(shape + ibp.event_shape), overflow.reshape(shape)


@jax.jit
def _buffet_log_pmf(ibp, value):
    """:meth:`RecursiveIBP.log_prob` of a ``(..., N, K)`` value."""
    num_rows = ibp.num_rows
    dtype = jnp.result_type(ibp.alpha)
    x = value.astype(dtype)
    m = x.sum(-2)
    active = m > 0
    first_row = jnp.argmax(value != 0, axis=-2)
    created = (first_row[..., None, :] == jnp.arange(num_rows)[:, None]) & active[..., None, :]
    new_dishes = created.sum(-1).astype(dtype)  # K_1^{(i)}, shape (..., N)
    beta = ibp.beta[..., None]
    per_column = gammaln(m) + gammaln(num_rows - m + beta) - gammaln(num_rows + beta)
    lp = (
        active.sum(-1) * jnp.log(ibp.alpha * ibp.beta)
        - gammaln(new_dishes + 1.0).sum(-1)
        - ibp.alpha * generalized_harmonic(ibp.beta, num_rows)
        + jnp.where(active, per_column, 0.0).sum(-1)
    )
    return jnp.where(ibp.support(value), lp, -jnp.inf)
