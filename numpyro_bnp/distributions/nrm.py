"""The normalized generalized gamma process (NGGP) as a distribution over partitions.

References:

* A. Lijoi, R. H. Mena and I. Prünster, *Controlling the reinforcement in Bayesian
  non-parametric mixture models*, JRSS-B 69, 2007 (the NGGP EPPF).
* L. F. James, A. Lijoi and I. Prünster, *Posterior analysis for normalized random measures with
  independent increments*, Scand. J. Stat. 36, 2009 (the auxiliary variable ``U_n``).
* S. Favaro and Y. W. Teh, *MCMC for normalized random measure mixture models*, Stat. Sci. 28,
  2013 (the (a, σ, τ) parametrisation and the urn).
* A. Tank, N. Foti and E. Fox, *Streaming variational inference for Bayesian nonparametric
  mixture models*, AISTATS 2015 (paper Eqs. 4–6 and 23; the pieces ADF-NRM needs).
* J. Pitman, *Combinatorial stochastic processes*, Lecture Notes in Mathematics 1875, 2006
  (Gibbs-type partitions and the generalized Stirling numbers ``S_σ(n, k)``).

How each quantity is computed: ``docs/distributions.md``, section "NGGP".
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import gammaln
from numpyro.distributions import Distribution, constraints
from numpyro.distributions.util import validate_sample

from numpyro_bnp._checks import broadcast_parameters, event_shaped, is_concrete, positive_int
from numpyro_bnp._math import (
    _nggp_log_v_mode,
    ggp_laplace_exponent,
    nggp_log_v,
    nggp_sample_log_u,
)
from numpyro_bnp.distributions.crm import (
    GeneralizedGammaProcess,
    check_ggp_params,
)

__all__ = ["NGGP", "canonical_partition", "cluster_sizes", "num_clusters"]


class _CanonicalPartition(constraints.ParameterFreeConstraint):
    """Integer label vectors ``(..., n)`` in canonical form: labels appear in the order 0, 1, 2, …

    ``z_0 = 0`` and every label is at most one more than the largest label before it.
    """

    is_discrete = True
    event_dim = 1

    @staticmethod
    @jax.jit  # one compiled program per shape, not one per operation
    def __call__(x):
        x = jnp.asarray(x)
        integer = jnp.all(x == jnp.floor(x), axis=-1)
        previous_max = lax.cummax(x, axis=x.ndim - 1)
        previous_max = jnp.concatenate(
            [jnp.full_like(x[..., :1], -1), previous_max[..., :-1]], axis=-1
        )
        return integer & jnp.all((x >= 0) & (x <= previous_max + 1), axis=-1)

    def feasible_like(self, prototype):
        return jnp.zeros_like(prototype)


canonical_partition = _CanonicalPartition()


@jax.jit
def cluster_sizes(labels):
    """Block sizes ``n_k`` of canonical label vectors: ``(..., n)`` → ``(..., n)`` (zero-padded).

    Labels outside ``0..n-1`` are dropped. One scatter-add per vector, ``O(n)``.
    """
    labels = jnp.asarray(labels)
    n = labels.shape[-1]
    flat = labels.reshape(-1, n)
    sizes = jax.vmap(lambda z: jnp.zeros(n, jnp.int32).at[z].add(1, mode="drop"))(flat)
    return sizes.reshape(labels.shape)


@jax.jit
def num_clusters(labels):
    """Number of blocks ``K`` of canonical label vectors ``(..., n)`` → ``(...)``."""
    return jnp.max(jnp.asarray(labels), axis=-1) + 1


def _urn(key, mass, sigma, tau, num):
    """One partition for scalar parameters: labels ``(N,)`` int32 and ``log U_N``."""
    dtype = jnp.result_type(mass)
    two = jnp.arange(2, dtype=dtype)

    def item(carry, inputs):
        joined, k, modes = carry
        i, key_i = inputs
        kf = k.astype(dtype)
        # V_{i+1,K} and V_{i+1,K+1}, warm-started from the modes of the previous item
        log_v, _, new_modes = _nggp_log_v_mode(
            i + 1.0, kf + two, mass, sigma, tau, num_nodes=32, mode_guess=modes
        )
        old_total = jnp.log(jnp.maximum(i - kf * sigma, 1e-30)) + log_v[0]
        p_new = jnp.where(k == 0, 1.0, jax.nn.sigmoid(log_v[1] - old_total))
        u_new, u_mix, u_pick = random.uniform(key_i, (3,), dtype)
        # an old block with probability ∝ n_k - σ = (1 - σ) + (n_k - 1): a uniform block
        # (mass K (1 - σ)) or the block of a uniform "joining" item (mass i - K)
        num_joined = i.astype(jnp.int32) - k
        uniform_block = jnp.minimum(jnp.floor(u_pick * kf).astype(jnp.int32), k - 1)
        joined_item = jnp.minimum(
            jnp.floor(u_pick * num_joined).astype(jnp.int32), jnp.maximum(num_joined - 1, 0)
        )
        pick_uniform = u_mix * (i - kf * sigma) < kf * (1.0 - sigma)
        old = jnp.where(pick_uniform, uniform_block, joined[joined_item])
        is_new = u_new < p_new
        label = jnp.where(is_new, k, old)
        slot = jnp.minimum(num_joined, num - 1)
        # slot = first free position: a new block writes there harmlessly (never read)
        joined = joined.at[slot].set(label)
        shifted = jnp.stack([new_modes[1], 2.0 * new_modes[1] - new_modes[0]])
        modes = jnp.where(is_new, shifted, new_modes)
        return (joined, k + is_new.astype(jnp.int32), modes), label

    key_urn, key_u = random.split(key)
    # cold start: the modes for (n, k) = (1, 0) and (1, 1) on the full bracket
    modes = _nggp_log_v_mode(1.0, two, mass, sigma, tau, num_nodes=32)[2]
    init = (jnp.zeros(num, jnp.int32), jnp.int32(0), modes)
    steps = (jnp.arange(num, dtype=dtype), random.split(key_urn, num))
    (_, k, _), labels = lax.scan(item, init, steps)
    log_u = nggp_sample_log_u(key_u, num, k, mass, sigma, tau)
    return labels, log_u


_urn_batch = jax.jit(jax.vmap(_urn, in_axes=(0, 0, 0, 0, None)), static_argnums=4)


def _num_clusters_path(mass, sigma, tau, num):
    """Scalar parameters: ``(E[K_n] for n = 1..N, log P(K_N = k) for k = 1..N)``."""
    dtype = jnp.result_type(mass)
    ks = jnp.arange(1, num + 1, dtype=dtype)

    def step(log_s, n):
        # log_s[k-1] = log S_σ(n, k): generalized Stirling numbers (Pitman 2006)
        log_v = nggp_log_v(n, jnp.minimum(ks, n), mass, sigma, tau)[0]
        log_pk = jnp.where(ks <= n, log_v + log_s, -jnp.inf)
        mean = jnp.sum(ks * jnp.exp(log_pk))
        grow = jnp.log(jnp.maximum(n - ks * sigma, 1e-30)) + log_s
        shifted = jnp.concatenate([jnp.full((1,), -jnp.inf, dtype), log_s[:-1]])
        log_s = jnp.where(ks <= n + 1, jnp.logaddexp(grow, shifted), -jnp.inf)
        return log_s, (mean, log_pk)

    log_s1 = jnp.where(ks == 1, 0.0, -jnp.inf)
    _, (means, log_pk) = lax.scan(step, log_s1, jnp.arange(1, num + 1, dtype=dtype))
    return means, log_pk[-1]


_path_batch = jax.jit(jax.vmap(_num_clusters_path, in_axes=(0, 0, 0, None)), static_argnums=3)


class NGGP(Distribution):
    r"""Partition of ``num_points`` items drawn from a normalized generalized gamma process.

    The NGGP normalizes the completely random measure with Lévy density
    :math:`ρ(π) = \frac{a}{Γ(1-σ)} π^{-1-σ} e^{-τπ}` (Tank et al. 2015, Eq. 4; mass ``a``,
    discount ``σ ∈ [0, 1)``, tilting ``τ >= 0``). Special cases: σ = 0 is the Dirichlet process
    with concentration ``a`` (the CRP); σ = 1/2 the normalized inverse-Gaussian; τ = 0 (σ > 0) the
    normalized σ-stable process, i.e. Pitman–Yor(σ, 0). The partition depends on ``(a, τ)`` only
    through ``β = a τ^σ / σ`` (σ > 0).

    A value is an ``int32`` label vector of shape ``(num_points,)`` in canonical form (blocks
    numbered 0, 1, … in order of first appearance, :data:`canonical_partition`).

    * :meth:`log_prob` is the exact EPPF :math:`V_{n,K} \prod_k (1-σ)_{n_k-1}` (Lijoi et al. 2007)
      with :math:`V_{n,K}` in closed form for σ = 0 and τ = 0 and by quadrature in ``log U``
      otherwise (:func:`numpyro_bnp._math.nggp_log_v`, :meth:`log_v` gives the error estimate).
    * :meth:`sample` runs the urn in one ``lax.scan``: item ``i+1`` joins block ``k`` with
      probability :math:`(n_k - σ) V_{i+1,K} / V_{i,K}` and opens a new block with probability
      :math:`V_{i+1,K+1} / V_{i,K}`. This is the urn of paper Eq. (5),
      ``∝ (n_k - σ, a (U+τ)^σ)``, with the auxiliary ``U_{i+1} | z_{1:i}`` integrated out exactly
      (the mixture weights of ``p(U_{i+1} | z_{1:i})`` are exactly these probabilities), so the
      draw is exact, not an MCMC approximation. ``U_n | z`` is then drawn *exactly* (rejection
      from a log-concave envelope) and returned by :meth:`sample_with_intermediates`.
    * :meth:`log_posterior_u` and :meth:`predictive` are paper Eq. (6) and the next-item urn.

    :param mass: ``a > 0``; any batch shape.
    :param sigma: ``σ ∈ [0, 1)``; broadcast against ``mass``.
    :param tau: ``τ >= 0`` (``τ > 0`` when ``σ = 0``); broadcast against ``mass``.
    :param int num_points: number of items ``n`` (static).

    **Example**

    .. code-block:: python

        >>> from jax import random
        >>> from numpyro_bnp.distributions import NGGP, num_clusters
        >>> d = NGGP(1.0, 0.5, 1.0, num_points=8)
        >>> z = d.sample(random.PRNGKey(0), (4000,))  # (4000, 8) canonical labels
        >>> float(d.expected_num_clusters()[-1])  # exact E[K_8]; num_clusters(z).mean() ≈ it
        4.83...
    """

    arg_constraints = {
        "mass": constraints.positive,
        "sigma": constraints.interval(0.0, 1.0),
        "tau": constraints.nonnegative,
    }
    pytree_data_fields = ("mass", "sigma", "tau")
    pytree_aux_fields = ("num_points",)
    support = canonical_partition

    def __init__(self, mass, sigma, tau=1.0, *, num_points, validate_args=None):
        self.num_points = positive_int(num_points, "num_points")
        check_ggp_params(mass, sigma, tau)
        batch_shape, (self.mass, self.sigma, self.tau) = broadcast_parameters(mass, sigma, tau)
        super().__init__(
            batch_shape=batch_shape, event_shape=(self.num_points,), validate_args=validate_args
        )

    @classmethod
    def infer_shapes(cls, *args, **kwargs):
        raise NotImplementedError("NGGP event shape depends on num_points")

    # ------------------------------------------------------------------ EPPF
    def log_v(self, n, k):
        r"""``(log V_{n,k}, error estimate)`` broadcast against the batch shape."""
        return nggp_log_v(n, k, self.mass, self.sigma, self.tau)

    def _check_labels(self, labels, name="labels"):
        labels = jnp.asarray(labels)
        if not jnp.issubdtype(labels.dtype, jnp.integer):
            raise TypeError(f"{name} must be an integer array of block labels, got {labels.dtype}")
        if labels.ndim < 1 or labels.shape[-1] < 1:
            raise ValueError(f"{name} must have shape (..., n) with n >= 1, got {labels.shape}")
        if is_concrete(labels) and not bool(jnp.all(canonical_partition(labels))):
            raise ValueError(
                f"{name} must be canonical partitions (labels 0, 1, ... in order of first "
                "appearance); see numpyro_bnp.distributions.nrm.canonical_partition"
            )
        return labels

    def _log_eppf(self, labels):
        sizes = cluster_sizes(labels)
        n = labels.shape[-1]
        k = num_clusters(labels)
        sigma = self.sigma[..., None]
        dtype = self.mass.dtype
        sizes = sizes.astype(dtype)
        factors = jnp.where(sizes > 0, gammaln(sizes - sigma) - gammaln(1.0 - sigma), 0.0)
        return self.log_v(n, k)[0] + factors.sum(-1)

    @validate_sample
    def log_prob(self, value):
        r"""Exact log EPPF :math:`\log V_{n,K} + \sum_k \log (1-σ)_{n_k-1}`; ``-inf`` off support.

        ``value``: integer labels ``(..., num_points)``; result: broadcast of ``value.shape[:-1]``
        and ``batch_shape``. Non-canonical label vectors get ``-inf``.
        """
        value = event_shaped(value, self.event_shape)
        safe = jnp.where(canonical_partition(value)[..., None], value, 0)
        lp = self._log_eppf(safe)
        return jnp.where(canonical_partition(value), lp, -jnp.inf)

    def log_posterior_u(self, u, labels):
        r"""``log p(U_n = u | z)``, the normalized density of the auxiliary variable (paper Eq. 6).

        .. math::
            p(U_n = u \mid z) = \frac{a^K u^{n-1} (u+τ)^{Kσ-n} e^{-ψ(u)}}{Γ(n)\, V_{n,K}}

        It depends on ``labels`` (shape ``(..., n)``, any ``n``) only through ``(n, K)``. ``u > 0``
        broadcasts against ``labels.shape[:-1]`` and ``batch_shape``.
        """
        labels = self._check_labels(labels)
        n = labels.shape[-1]
        k = num_clusters(labels).astype(self.mass.dtype)
        u = jnp.asarray(u, self.mass.dtype)
        log_joint = (
            k * jnp.log(self.mass)
            + (n - 1.0) * jnp.log(u)
            + (k * self.sigma - n) * jnp.log(u + self.tau)
            - ggp_laplace_exponent(u, self.mass, self.sigma, self.tau)
            - gammaln(jnp.asarray(n, u.dtype))
        )
        return log_joint - self.log_v(n, k)[0]

    def predictive(self, labels, u=None):
        r"""Probabilities of the next item's block given ``labels`` (shape ``(..., m)``).

        Returns shape ``(..., m + 1)``: entry ``k < K`` is existing block ``k``, entry ``K`` a new
        block, entries beyond are 0.

        * ``u=None``: the exact predictive :math:`p(z_{m+1} = k \mid z_{1:m})
          = (n_k - σ) V_{m+1,K} / V_{m,K}` and :math:`V_{m+1,K+1} / V_{m,K}` (the ratio of the
          EPPFs of ``z_{1:m+1}`` and ``z_{1:m}``, as ``(1-σ)_{n_k} / (1-σ)_{n_k-1} = n_k - σ``);
          the denominator is taken as :math:`(m - Kσ) V_{m+1,K} + V_{m+1,K+1}` (Gibbs recursion) so
          the probabilities sum to one exactly.
        * ``u`` given: the urn of paper Eq. (5)/(23), ``∝ (n_k - σ)`` and ``a (u + τ)^σ`` — the
          plug-in form ADF-NRM uses with ``u = Û``.
        """
        labels = self._check_labels(labels)
        m = labels.shape[-1]
        dtype = self.mass.dtype
        sizes = jnp.concatenate(
            [cluster_sizes(labels), jnp.zeros((*labels.shape[:-1], 1), jnp.int32)], -1
        ).astype(dtype)
        k = num_clusters(labels).astype(dtype)
        sigma = self.sigma[..., None]
        slots = jnp.arange(m + 1)
        k_ = k[..., None]
        log_old = jnp.log(jnp.maximum(sizes - sigma, 1e-30))
        if u is None:
            log_v_old = self.log_v(m + 1, k)[0]
            log_v_new = self.log_v(m + 1, k + 1)[0]
            log_norm = jnp.logaddexp(jnp.log(m - k * self.sigma) + log_v_old, log_v_new)
            log_old = log_old + (log_v_old - log_norm)[..., None]
            log_new = (log_v_new - log_norm)[..., None]
        else:
            u = jnp.asarray(u, dtype)
            log_new = (jnp.log(self.mass) + self.sigma * jnp.log(u + self.tau))[..., None]
            log_old, log_new = jnp.broadcast_arrays(log_old, log_new)
            log_norm = jnp.logaddexp(
                jax.nn.logsumexp(jnp.where(slots < k_, log_old, -jnp.inf), -1, keepdims=True),
                log_new[..., :1],
            )
            log_old, log_new = log_old - log_norm, log_new - log_norm
        logits = jnp.where(slots < k_, log_old, jnp.where(slots == k_, log_new, -jnp.inf))
        return jnp.exp(logits)

    # ------------------------------------------------------------------ sampling
    def _sample(self, key, sample_shape):
        shape = tuple(sample_shape) + self.batch_shape
        size = int(np.prod(shape))
        params = [
            jnp.broadcast_to(p, shape).reshape(size) for p in (self.mass, self.sigma, self.tau)
        ]
        labels, log_u = _urn_batch(random.split(key, size), *params, self.num_points)
        return labels.reshape(shape + self.event_shape), log_u.reshape(shape)

    def sample(self, key, sample_shape=()):
        """Exact draws by the urn: ``sample_shape + batch_shape + (num_points,)`` int32 labels."""
        return self._sample(key, sample_shape)[0]

    def sample_with_intermediates(self, key, sample_shape=()):
        """Like :meth:`sample`, plus ``[log U_n]``: an exact draw of ``log U_n | z`` per draw."""
        labels, log_u = self._sample(key, sample_shape)
        return labels, [log_u]

    # ------------------------------------------------------------------ number of blocks
    def _path(self):
        shape = self.batch_shape
        size = int(np.prod(shape))
        params = [p.reshape(size) for p in (self.mass, self.sigma, self.tau)]
        means, log_pk = _path_batch(*params, self.num_points)
        return means.reshape((*shape, -1)), log_pk.reshape((*shape, -1))

    def expected_num_clusters(self):
        r"""Exact :math:`E[K_n] = \sum_k k\, V_{n,k} S_σ(n,k)` for n = 1..N; ``batch_shape + (N,)``.

        ``S_σ(n,k)`` are the generalized factorial coefficients, by the positive recursion
        ``S_σ(n+1,k) = (n - kσ) S_σ(n,k) + S_σ(n,k-1)`` in log space (Pitman 2006). Cost
        ``O(N^2)`` quadratures: meant for ``N`` up to a few thousand.
        """
        return self._path()[0]

    def num_clusters_pmf(self):
        """Exact ``P(K_N = k)`` for ``k = 1..N``; shape ``batch_shape + (N,)``. Cost as above."""
        return jnp.exp(self._path()[1])

    # ------------------------------------------------------------------ weights
    def weights(self, key, truncation):
        r"""A draw of the NGGP weights by the Ferguson–Klass (inverse-Lévy) series.

        Returns ``(weights, left_out)``: ``weights`` (``batch_shape + (truncation,)``) are the
        ``truncation`` largest jumps :math:`J_1 > J_2 > \dots` of the generalized gamma CRM
        (:meth:`GeneralizedGammaProcess.series`) divided by their sum plus the expected mass
        below :math:`J_K`, :math:`E[\sum_{j>K} J_j \mid J_K] = a τ^{σ-1} P(1-σ, τ J_K)` (the
        integral :math:`\int_0^{J_K} θ ρ(θ)\,dθ` of the Lévy density); ``left_out`` is that
        expected share of the total left out, so
        ``weights.sum(-1) + left_out = 1``.
        """
        crm = GeneralizedGammaProcess(self.mass, self.sigma, self.tau, truncation=truncation)
        jumps = crm.series(key, truncation, "inverse_levy")
        rest = crm.expected_mass_below(jumps[..., -1])
        total = jumps.sum(-1) + rest
        return jumps / total[..., None], rest / total
