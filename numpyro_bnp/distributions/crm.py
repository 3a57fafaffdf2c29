"""Completely random measures (CRMs): Lévy densities, series representations, truncation bounds.

A CRM ``G = Σ_k θ_k δ_{ψ_k}`` is a Poisson process of atoms ``θ`` with Lévy (rate) density ``ν``.
Every class here offers ``levy_log_density``, ``tail_mass`` ``N(x) = ν([x, ∞))``, draws of the
atoms by a *series representation* ``θ_k = τ(V_k, Γ_k)`` over the arrivals ``Γ_1 < Γ_2 < …`` of a
unit-rate Poisson process, and the truncation error bound of keeping ``K`` atoms.

As a NumPyro distribution, a CRM with ``truncation=K`` is the law of its ``K`` largest atoms in
decreasing order, ``J_1 > … > J_K``, with the exact density
``p(J) = Π_i ν(J_i) · exp(-N(J_K))`` (the inverse-Lévy / Ferguson–Klass representation).

References:

* T. Campbell, J. H. Huggins, J. P. How and T. Broderick, *Truncated random measures*,
  Bernoulli 25, 2019 (the representations and the truncation bounds).
* T. S. Ferguson and M. J. Klass, *A representation of independent increment processes without
  Gaussian components*, Ann. Math. Stat. 43, 1972 (inverse Lévy).
* L. Bondesson, *On simulation from infinitely divisible distributions*, Adv. Appl. Prob. 14,
  1982; J. Rosiński, *Series representations of Lévy processes*, 2001 (rejection).
* C. Zhu, A. Bouchard-Côté and T. Campbell, *Slice sampling for general completely random
  measures*, UAI 2020 (series representations in a latent trait model, their Eq. 11).
* Y. W. Teh and D. Görür, *Indian buffet processes with power-law behavior*, NeurIPS 2009 (the
  three-parameter beta process).
* T. Broderick, L. Mackey, J. Paisley and M. I. Jordan, *Combinatorial clustering and the beta
  negative binomial process*, IEEE TPAMI 37, 2015 (the beta-prime process).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from jax.scipy.special import betainc, gammainc, gammaln
from numpyro.distributions import Distribution, constraints
from numpyro.distributions.transforms import ParameterFreeTransform, biject_to
from numpyro.distributions.util import validate_sample

from numpyro_bnp._checks import broadcast_parameters, event_shaped, is_concrete, positive_int
from numpyro_bnp._math import _decreasing_root, log_beta_levy_tail, log_upper_gamma_neg, logit

__all__ = [
    "BetaPrimeProcess",
    "BetaProcess",
    "CompletelyRandomMeasure",
    "GammaProcess",
    "GeneralizedGammaProcess",
    "check_ggp_params",
]

REPRESENTATIONS = ("inverse_levy", "bondesson", "rejection")
_BOUND_PANELS, _BOUND_NODES = 60, 32  # composite Gauss–Legendre rule of the truncation bounds
_TABLE_SIZE = 256  # cells of the log-tail table that brackets the inverse-Lévy roots
_NEWTON_ITERS = 20  # safeguarded Newton steps inside a cell
LIKELIHOODS = ("bernoulli", "poisson")


def _composite_rule():
    """Composite Gauss–Legendre nodes and weights on [0, 1] (60 panels of 32 nodes, host)."""
    nodes, weights = np.polynomial.legendre.leggauss(_BOUND_NODES)
    left = np.arange(_BOUND_PANELS)[:, None] / _BOUND_PANELS
    t = (left + 0.5 * (nodes + 1.0) / _BOUND_PANELS).ravel()
    w = np.tile(0.5 * weights / _BOUND_PANELS, _BOUND_PANELS)
    return t, w


# ---------------------------------------------------------------------------------------------
# validation helpers (shared with nrm.py)
# ---------------------------------------------------------------------------------------------


def _check(condition, name, expected, value):
    """Raise ``ValueError`` naming ``name`` unless ``condition(value)`` holds (concrete values)."""
    if not is_concrete(value):
        return
    array = np.asarray(value, dtype=np.float64)
    if not (np.all(np.isfinite(array)) and np.all(condition(array))):
        raise ValueError(f"{name} must be {expected}, got {value!r}")


def check_ggp_params(mass, sigma, tau):
    """Check generalized-gamma parameters: ``mass > 0``, ``0 <= sigma < 1``, ``tau >= 0``.

    ``tau = 0`` needs ``sigma > 0`` (the total mass of the gamma process with τ = 0 is infinite).
    Only concrete values are checked (inside ``jit`` NumPyro's ``validate_args`` applies).
    """
    _check(lambda m: m > 0, "mass", "finite and > 0", mass)
    _check(lambda s: (s >= 0) & (s < 1), "sigma", "in [0, 1)", sigma)
    _check(lambda t: t >= 0, "tau", "finite and >= 0", tau)
    if is_concrete(sigma, tau):
        s, t = np.broadcast_arrays(np.asarray(sigma, float), np.asarray(tau, float))
        if np.any((s == 0) & (t == 0)):
            raise ValueError(
                "tau must be > 0 when sigma = 0 (the process would have infinite mass)"
            )


class _DecreasingAtoms(constraints.ParameterFreeConstraint):
    """Strictly decreasing positive vectors (the largest atoms of a CRM in order), optionally
    followed by zeros: empty slots of a fixed-size buffer (``J_1 > … > J_m > 0 = … = 0``)."""

    event_dim = 1
    upper = jnp.inf

    def __call__(self, x):
        x = jnp.asarray(x)
        present = x > 0
        # no atom after an empty slot, and the atoms strictly decreasing
        packed = jnp.all(present[..., 1:] <= present[..., :-1], axis=-1)
        ordered = jnp.all((x[..., 1:] < x[..., :-1]) | ~present[..., 1:], axis=-1)
        return packed & ordered & jnp.all((x >= 0) & (x <= self.upper), axis=-1)

    def feasible_like(self, prototype):
        k = prototype.shape[-1]
        return jnp.broadcast_to(0.5 ** jnp.arange(1, k + 1, dtype=prototype.dtype), prototype.shape)


class _DecreasingUnitAtoms(_DecreasingAtoms):
    """Strictly decreasing vectors in ``(0, 1]`` (beta-process atoms)."""

    upper = 1.0


decreasing_atoms = _DecreasingAtoms()
decreasing_unit_atoms = _DecreasingUnitAtoms()


class _DecreasingTransform(ParameterFreeTransform):
    """``R^K`` → strictly decreasing positive vectors: ``y_1 = e^{x_1}``, ``y_k = y_{k-1} σ(x_k)``.

    The bijection NumPyro needs to initialise or reparametrise a CRM site (``biject_to``), e.g.
    ArviZ's ``from_numpyro`` (initial values) or NUTS on a truncated CRM.
    """

    domain = constraints.real_vector
    codomain = decreasing_atoms

    def _log_first(self, x):
        return x

    def _inverse_first(self, y):
        return jnp.log(y)

    def __call__(self, x):
        log_first = self._log_first(x[..., :1])
        return jnp.exp(
            jnp.cumsum(jnp.concatenate([log_first, jax.nn.log_sigmoid(x[..., 1:])], -1), -1)
        )

    def _inverse(self, y):
        log_y = jnp.log(y)
        first = self._inverse_first(y[..., :1])
        log_ratio = log_y[..., 1:] - log_y[..., :-1]  # log σ(x_k)
        rest = log_ratio - jnp.log(-jnp.expm1(log_ratio))  # logit
        return jnp.concatenate([first, rest], -1)

    def log_abs_det_jacobian(self, x, y, intermediates=None):
        # triangular Jacobian: dy_k/dx_k = y_k (1 - σ(x_k)) for k >= 2; y_1 (or y_1 (1 - σ(x_1)))
        log_diag = jnp.log(y) + jnp.concatenate(
            [self._log_first_slope(x[..., :1]), jax.nn.log_sigmoid(-x[..., 1:])], -1
        )
        return jnp.sum(log_diag, -1)

    def _log_first_slope(self, x):
        return jnp.zeros_like(x)


class _DecreasingUnitTransform(_DecreasingTransform):
    """Like :class:`_DecreasingTransform` into ``(0, 1]`` vectors: ``y_1 = σ(x_1)``."""

    codomain = decreasing_unit_atoms

    def _log_first(self, x):
        return jax.nn.log_sigmoid(x)

    def _inverse_first(self, y):
        return logit(y)

    def _log_first_slope(self, x):
        return jax.nn.log_sigmoid(-x)


biject_to.register(_DecreasingAtoms, lambda constraint: _DecreasingTransform())
biject_to.register(_DecreasingUnitAtoms, lambda constraint: _DecreasingUnitTransform())


# ---------------------------------------------------------------------------------------------
# base class
# ---------------------------------------------------------------------------------------------
class CompletelyRandomMeasure(Distribution):
    r"""Base class: the ``truncation`` largest atoms of a CRM, in decreasing order.

    Subclasses give the Lévy density (:meth:`levy_log_density`), the log tail mass
    (:meth:`_log_tail`), the expected mass below a level (:meth:`expected_mass_below`), and the
    Bondesson / rejection maps where they exist. The inverse-Lévy series is generic: it inverts
    ``N`` by safeguarded Newton in ``log θ``.

    ``sample`` returns ``sample_shape + batch_shape + (truncation,)`` atoms, decreasing.
    ``log_prob(J) = Σ_i log ν(J_i) - N(J_K)`` (the density of the ``K`` largest points of a
    Poisson process with intensity ``ν``); ``-inf`` unless ``J`` is strictly decreasing in the
    support of ``ν``.
    """

    pytree_aux_fields = ("truncation",)
    support = decreasing_atoms
    upper = jnp.inf  # largest possible atom

    def _init(self, params, truncation, validate_args):
        self.truncation = positive_int(truncation, "truncation")
        batch_shape, values = broadcast_parameters(*params.values())
        for name, value in zip(params, values, strict=True):
            setattr(self, name, value)
        super().__init__(
            batch_shape=batch_shape, event_shape=(self.truncation,), validate_args=validate_args
        )

    @classmethod
    def infer_shapes(cls, *args, **kwargs):
        raise NotImplementedError("the event shape of a CRM depends on its truncation")

    @property
    def _dtype(self):
        return jnp.result_type(self.mass)

    # ---------------------------------------------------------------- Lévy measure
    def levy_log_density(self, x):
        """``log ν(x)``; ``x`` broadcasts against ``batch_shape`` (``-inf`` outside the support)."""
        raise NotImplementedError

    def _log_tail(self, x):
        raise NotImplementedError

    def tail_mass(self, x):
        """``N(x) = ν([x, ∞))``: the expected number of atoms ``>= x`` (``x > 0``; broadcasts)."""
        return jnp.exp(self._log_tail(jnp.asarray(x, self._dtype)))

    def expected_mass_below(self, x):
        r"""``∫_0^x θ ν(dθ)``: the expected sum of the atoms below ``x`` (truncation remainder)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- series representations
    def _representations(self):
        """Representations that exist for the (concrete) parameters: ``{name: reason or None}``."""
        return {"inverse_levy": None, "bondesson": "not available", "rejection": "not available"}

    def _check_representation(self, representation):
        if representation not in REPRESENTATIONS:
            raise ValueError(
                f"representation must be one of {REPRESENTATIONS}, got {representation!r}"
            )
        reason = self._representations()[representation]
        if reason is not None:
            raise ValueError(
                f"representation={representation!r} does not exist for "
                f"{type(self).__name__}: {reason}"
            )

    def _inverse_tail(self, log_gamma):
        """``N^{-1}(Γ)`` from ``log Γ`` (any shape broadcasting with ``batch_shape``)."""
        return _inverse_tail_jit(self, log_gamma)

    def _inverse_tail_last(self, log_gamma):
        """:meth:`_inverse_tail` for ``log Γ`` of shape ``(..., batch_shape, K)`` (atoms last)."""
        return jnp.moveaxis(self._inverse_tail(jnp.moveaxis(log_gamma, -1, 0)), 0, -1)

    def _inverse_tail_impl(self, log_gamma):
        # Root of log N(θ(s)) = log Γ in s = log θ (unbounded atoms) or s = logit θ (atoms in
        # (0, 1): log N is then close to linear at both ends). A table of log N on 256 cells
        # (shared by all atoms) brackets each root; safeguarded Newton with the exact tail
        # finishes it.
        dtype = self._dtype
        finfo = jnp.finfo(dtype)
        bounded = bool(np.isfinite(self.upper))
        hi = -np.log(finfo.eps) + 10.0 if bounded else 0.5 * np.log(finfo.max)
        grid = jnp.linspace(np.log(finfo.tiny), hi, _TABLE_SIZE + 1, dtype=dtype)
        grid = grid.reshape((-1,) + (1,) * len(self.batch_shape))

        def atom(s):
            return jax.nn.sigmoid(s) if bounded else jnp.exp(s)

        def log_jacobian(s):  # log dθ/ds
            return jax.nn.log_sigmoid(s) + jax.nn.log_sigmoid(-s) if bounded else s

        table = self._log_tail(atom(grid))  # (cells + 1, *batch), decreasing
        log_gamma = jnp.asarray(log_gamma, dtype)
        count = jnp.sum(jnp.moveaxis(table, 0, -1) > jnp.expand_dims(log_gamma, -1), axis=-1)
        index = jnp.clip(count, 1, _TABLE_SIZE)
        step = grid[1] - grid[0]
        lo = grid[0] + (index - 1) * step

        def fun(s):
            x = atom(s)
            log_tail = self._log_tail(x)
            slope = -jnp.exp(log_jacobian(s) + self.levy_log_density(x) - log_tail)
            return log_tail - log_gamma, slope

        return atom(_decreasing_root(fun, lo, lo + step, _NEWTON_ITERS))

    def _arrivals(self, key, truncation):
        shape = (*self.batch_shape, truncation)
        return jnp.cumsum(random.exponential(key, shape, self._dtype), axis=-1)

    def series(self, key, truncation, representation="inverse_levy"):
        r"""The first ``truncation`` atoms ``θ_k = τ(V_k, Γ_k)`` of a series representation.

        * ``"inverse_levy"``: ``θ_k = N^{-1}(Γ_k)``, the atoms in decreasing order (Ferguson–Klass).
        * ``"bondesson"``: ``θ_k = V_k e^{-Γ_k / c}`` for Lévy densities ``c θ^{-1} P(V > θ)``.
        * ``"rejection"``: ``θ_k = ν̃^{-1}(Γ_k)`` kept with probability ``dν/dν̃`` and set to 0
          otherwise (Rosiński; ``ν̃ >= ν`` with a closed-form inverse tail).

        Atoms are in representation order (``Γ_k`` increasing); shape ``batch_shape +
        (truncation,)``. A representation that does not exist for this measure raises
        ``ValueError`` saying why.
        """
        truncation = positive_int(truncation, "truncation")
        self._check_representation(representation)
        key_gamma, key_v = random.split(key)
        gammas = self._arrivals(key_gamma, truncation)
        if representation == "inverse_levy":
            return self._inverse_tail_last(jnp.log(gammas))
        if representation == "bondesson":
            return self._bondesson(key_v, gammas)
        return self._rejection_atoms(gammas, random.uniform(key_v, gammas.shape, gammas.dtype))

    def _bondesson(self, key, gammas):
        r"""Bondesson map ``θ_k = V_k e^{-Γ_k / c}``, ``V_k = F_V^{-1}(P_k)``, ``P_k ~ Unif(0, 1)``.

        ``gammas`` has shape ``batch_shape + (K,)``; ``c`` and the quantile ``F_V^{-1}`` come from
        the measure's :meth:`_bondesson_constant_and_quantile`, which takes the uniforms with the
        atoms first (``(K,) + batch_shape``, as the truncation bound does).
        """
        p = random.uniform(key, gammas.shape, gammas.dtype)
        c, v = self._bondesson_constant_and_quantile(jnp.moveaxis(p, -1, 0))
        return jnp.moveaxis(v, 0, -1) * jnp.exp(-gammas / c[..., None])

    def _rejection_atoms(self, gammas, uniforms):
        """Rejection map ``τ(V, Γ) = ν̃^{-1}(Γ) 1[V <= dν/dν̃ (ν̃^{-1}(Γ))]``, ``V ~ Unif(0, 1)``.

        ``gammas`` and ``uniforms`` have shape ``(..., batch_shape, K)`` (atoms last); rejected
        atoms are 0.
        """
        raise NotImplementedError

    # ---------------------------------------------------------------- distribution interface
    def sample(self, key, sample_shape=()):
        """The ``truncation`` largest atoms (decreasing), by the inverse-Lévy series."""
        shape = tuple(sample_shape) + self.batch_shape + (self.truncation,)
        gammas = jnp.cumsum(random.exponential(key, shape, self._dtype), axis=-1)
        return self._inverse_tail_last(jnp.log(gammas))

    @validate_sample
    def log_prob(self, value):
        r"""``Σ_i log ν(J_i) - N(J_K)`` for decreasing atoms ``J`` (``-inf`` off the support).

        A value may end in zeros, the empty slots of a fixed-size buffer (samplers such as
        :class:`~numpyro_bnp.infer.CRMSlice` return the instantiated atoms that way): the density
        is then that of its ``m`` nonzero atoms as the ``m`` largest atoms,
        ``Σ_{i<=m} log ν(J_i) - N(J_m)`` (0 for no atom), so that a model conditioned on such a
        value has a finite log density. A value whose last axis is not ``(truncation,)`` is a
        ``ValueError``.
        """
        value = jnp.asarray(event_shaped(value, self.event_shape), self._dtype)
        ok = self.support(value)
        feasible = self.support.feasible_like(value)
        present = value > 0
        safe = jnp.where(ok[..., None] & present, value, feasible)
        log_nu = jnp.moveaxis(self.levy_log_density(jnp.moveaxis(safe, -1, 0)), 0, -1)
        log_density = jnp.where(present, log_nu, 0.0)
        smallest = jnp.min(jnp.where(present, safe, jnp.inf), axis=-1)
        any_atom = jnp.any(present, axis=-1)
        tail = self.tail_mass(jnp.where(any_atom, smallest, feasible[..., 0]))
        lp = log_density.sum(-1) - jnp.where(any_atom, tail, 0.0)
        return jnp.where(ok, lp, -jnp.inf)

    # ---------------------------------------------------------------- truncation error
    def _log_dominating_tail(self, x):
        """``log Ñ(x)`` of the rejection representation's dominating measure."""
        raise NotImplementedError

    def _bondesson_constant_and_quantile(self, p):
        """``(c, F_V^{-1}(p))`` of the Bondesson representation: ``c`` of shape ``batch_shape``,
        ``p`` (and the quantile) of shape ``(K,) + batch_shape``, atoms first."""
        raise NotImplementedError

    def truncation_error_bound(
        self, truncation, num_obs, representation="inverse_levy", likelihood="bernoulli"
    ):
        r"""Upper bound on the error of keeping the first ``truncation`` atoms of a series.

        Campbell et al. (2019), series-representation bound: with ``N`` observations
        ``X_n | θ ~ h(· | θ)`` per atom, the total-variation distance between the data marginals
        under the full and the truncated CRM is at most

        .. math::
            1 - \exp\Big(-\int_0^\infty P(Γ_K \le u)\,
                E_V\big[1 - h(0 \mid τ(V, u))^N\big]\,du\Big),
            \qquad Γ_K \sim \mathrm{Gamma}(K, 1),

        which is also a bound on the probability that some observation uses an atom beyond ``K``:
        that probability is ``1 - E[exp(-Λ(Γ_K))]`` with
        ``Λ(s) = ∫_s^∞ E_V[1 - h(0 | τ(V, u))^N] du``, and Jensen's inequality gives
        ``1 - E[exp(-Λ(Γ_K))] <= 1 - exp(-E[Λ(Γ_K)])``, the display above. For inverse-Lévy and
        rejection the integral is taken over ``θ`` (``u = N(θ)`` resp. ``Ñ(θ)``):
        ``∫ P(Γ_K <= M(θ)) (1 - h(0|θ)^N) ν(dθ)``; atoms below ``e^{-40}`` of the range are bounded
        by ``N ∫_0^x θ ν(dθ)`` so the result stays an upper bound.

        :param likelihood: ``"bernoulli"`` (``h(0|θ) = 1 - θ``; beta process only) or
            ``"poisson"`` (``h(0|θ) = e^{-θ}``).
        :return: the bound, shape ``batch_shape`` (host-side helper; float64 recommended).
        """
        truncation = positive_int(truncation, "truncation")
        num_obs = positive_int(num_obs, "num_obs")
        self._check_representation(representation)
        if likelihood not in LIKELIHOODS:
            raise ValueError(f"likelihood must be one of {LIKELIHOODS}, got {likelihood!r}")
        if likelihood == "bernoulli" and not np.isfinite(self.upper):
            raise ValueError(
                "likelihood='bernoulli' needs atoms in [0, 1] (a beta process); "
                f"{type(self).__name__} has unbounded atoms, use likelihood='poisson'"
            )
        return _bound_jit(self, truncation, num_obs, representation, likelihood)

    def _bound_impl(self, truncation, num_obs, representation, likelihood):
        dtype = self._dtype
        k = jnp.asarray(truncation, dtype)
        num_obs = jnp.asarray(num_obs, dtype)

        def miss(theta):  # 1 - h(0|θ)^N
            if likelihood == "bernoulli":
                return -jnp.expm1(num_obs * jnp.log1p(-jnp.minimum(theta, 1.0)))
            return -jnp.expm1(-num_obs * theta)

        if representation == "bondesson":
            return self._bondesson_bound(k, num_obs, miss)
        log_tail = self._log_tail if representation == "inverse_levy" else self._log_dominating_tail
        # range in s = log θ: from where ν has mass e^{-46} above, down 300 units (or to tiny)
        s_hi = jnp.log(self._inverse_tail_impl(jnp.asarray(-46.0, dtype)))
        s_lo = jnp.maximum(s_hi - 300.0, np.log(jnp.finfo(dtype).tiny) + 50.0)

        def integrand(s):
            theta = jnp.exp(s)
            log_m = log_tail(theta)
            return (
                gammainc(k, jnp.exp(log_m))
                * miss(theta)
                * jnp.exp(s + self.levy_log_density(theta))
            )

        t, w = (
            jnp.asarray(v, dtype).reshape((-1,) + (1,) * len(self.batch_shape))
            for v in _composite_rule()
        )
        total = (s_hi - s_lo) * jnp.sum(w * integrand(s_lo + (s_hi - s_lo) * t), axis=0)
        total = total + num_obs * self.expected_mass_below(jnp.exp(s_lo))
        return -jnp.expm1(-total)

    def _bondesson_bound(self, k, num_obs, miss):
        dtype = self._dtype
        nodes, weights = np.polynomial.legendre.leggauss(64)
        p = jnp.asarray(0.5 * (nodes + 1.0), dtype)
        w = jnp.asarray(0.5 * weights, dtype)
        c, v = self._bondesson_constant_and_quantile(
            p.reshape((64,) + (1,) * len(self.batch_shape))
        )
        mean_v = jnp.sum(w.reshape(v.shape[:1] + (1,) * (v.ndim - 1)) * v, axis=0)
        u_max = c * (jnp.log1p(num_obs * jnp.max(v, axis=0)) + 46.0)

        def integrand(u):
            theta = v[:, None] * jnp.exp(-u / c)
            expect = jnp.tensordot(w, miss(theta), axes=(0, 0))
            return gammainc(k, u) * expect

        t_u, w_u = (
            jnp.asarray(x, dtype).reshape((-1,) + (1,) * len(self.batch_shape))
            for x in _composite_rule()
        )
        total = u_max * jnp.sum(w_u * integrand(u_max * t_u), axis=0)
        total = total + c * num_obs * mean_v * jnp.exp(-u_max / c)
        return -jnp.expm1(-total)


_inverse_tail_jit = jax.jit(lambda crm, log_gamma: crm._inverse_tail_impl(log_gamma))
_bound_jit = jax.jit(
    lambda crm, k, num_obs, rep, likelihood: crm._bound_impl(k, num_obs, rep, likelihood),
    static_argnums=(3, 4),
)


# ---------------------------------------------------------------------------------------------
# the measures
# ---------------------------------------------------------------------------------------------
class GeneralizedGammaProcess(CompletelyRandomMeasure):
    r"""Generalized gamma process: :math:`ν(θ) = \frac{a}{Γ(1-σ)} θ^{-1-σ} e^{-τθ}`, θ > 0.

    Mass ``a > 0``, discount ``σ ∈ [0, 1)``, tilting ``τ >= 0`` (τ > 0 when σ = 0); normalizing
    it gives the :class:`~numpyro_bnp.distributions.NGGP` (Tank, Foti & Fox 2015, Eq. 4).
    Tail ``N(x) = a τ^σ Γ(-σ, τx) / Γ(1-σ)`` (``a x^{-σ} / (σ Γ(1-σ))`` at τ = 0).

    Representations: inverse-Lévy; rejection from the stable measure
    ``a θ^{-1-σ}/Γ(1-σ)`` accepted with ``e^{-τθ}`` (σ > 0), or, for σ = 0, Rosiński's
    ``a θ^{-1}(1+τθ)^{-1}`` accepted with ``(1+τθ) e^{-τθ}``; Bondesson only for σ = 0 (the
    gamma process, ``V ~ Exp(τ)``, ``c = a``).

    **Example**

    .. code-block:: python

        >>> from jax import random
        >>> from numpyro_bnp.distributions import GeneralizedGammaProcess
        >>> ggp = GeneralizedGammaProcess(2.0, 0.5, 1.0, truncation=50)
        >>> atoms = ggp.series(random.PRNGKey(0), 50, "rejection")   # (50,), zeros = rejected
        >>> float(ggp.tail_mass(0.1))  # expected number of atoms >= 0.1
        3.83...
    """

    arg_constraints = {
        "mass": constraints.positive,
        "sigma": constraints.interval(0.0, 1.0),
        "tau": constraints.nonnegative,
    }
    pytree_data_fields = ("mass", "sigma", "tau")

    def __init__(self, mass, sigma, tau=1.0, *, truncation=100, validate_args=None):
        check_ggp_params(mass, sigma, tau)
        self._init({"mass": mass, "sigma": sigma, "tau": tau}, truncation, validate_args)

    def _safe(self):
        positive_sigma = jnp.where(self.sigma > 0, self.sigma, 0.5)
        positive_tau = jnp.where(self.tau > 0, self.tau, 1.0)
        return positive_sigma, positive_tau

    def levy_log_density(self, x):
        x = jnp.asarray(x, self._dtype)
        return (
            jnp.log(self.mass)
            - gammaln(1.0 - self.sigma)
            - (1.0 + self.sigma) * jnp.log(x)
            - self.tau * x
        )

    def _log_stable_tail(self, x):
        sigma, _ = self._safe()
        return jnp.log(self.mass) - sigma * jnp.log(x) - jnp.log(sigma) - gammaln(1.0 - sigma)

    def _log_tail(self, x):
        _, tau = self._safe()
        tilted = (
            jnp.log(self.mass)
            + self.sigma * jnp.log(tau)
            + log_upper_gamma_neg(self.sigma, tau * x)
            - gammaln(1.0 - self.sigma)
        )
        return jnp.where(self.tau > 0, tilted, self._log_stable_tail(x))

    def expected_mass_below(self, x):
        """``∫_0^x θ ν(θ) dθ = a τ^{σ-1} P(1-σ, τx)`` (``a x^{1-σ} / Γ(2-σ)`` at τ = 0)."""
        x = jnp.asarray(x, self._dtype)
        _, tau = self._safe()
        tilted = self.mass * tau ** (self.sigma - 1.0) * gammainc(1.0 - self.sigma, tau * x)
        stable = self.mass * jnp.exp((1.0 - self.sigma) * jnp.log(x) - gammaln(2.0 - self.sigma))
        return jnp.where(self.tau > 0, tilted, stable)

    def _representations(self):
        gamma = is_concrete(self.sigma) and bool(np.all(np.asarray(self.sigma) == 0))
        return {
            "inverse_levy": None,
            "bondesson": None if gamma else "it exists only for sigma = 0 (the gamma process)",
            "rejection": None,
        }

    def _bondesson_constant_and_quantile(self, p):
        _, tau = self._safe()
        return self.mass, -jnp.log1p(-p) / tau

    def _log_dominating_tail(self, x):
        _, tau = self._safe()
        rosinski = jnp.log(self.mass) + jnp.log(jnp.log1p(1.0 / (tau * x)))
        return jnp.where(self.sigma > 0, self._log_stable_tail(x), rosinski)

    def _rejection_atoms(self, gammas, uniforms):
        sigma, tau = self._safe()
        mass, s, t = self.mass[..., None], sigma[..., None], tau[..., None]
        # stable dominating measure: Ñ(x) = a x^{-σ} / (σ Γ(1-σ))
        stable = jnp.exp(-(jnp.log(s) + gammaln(1.0 - s) + jnp.log(gammas) - jnp.log(mass)) / s)
        rosinski = 1.0 / (t * jnp.expm1(gammas / mass))
        is_stable = self.sigma[..., None] > 0
        theta = jnp.where(is_stable, stable, rosinski)
        log_accept = jnp.where(
            is_stable, -self.tau[..., None] * theta, jnp.log1p(t * theta) - t * theta
        )
        keep = jnp.log(uniforms) < log_accept
        return jnp.where(keep, theta, 0.0)


class GammaProcess(GeneralizedGammaProcess):
    r"""Gamma process :math:`ν(θ) = γ θ^{-1} e^{-λθ}` (mass γ, rate λ): the σ = 0 generalized gamma.

    Total mass ``~ Gamma(γ, rate λ)``; normalizing gives the Dirichlet process with concentration
    γ. Tail ``N(x) = γ E_1(λx)``. All three representations exist (Bondesson: ``V ~ Exp(λ)``,
    ``c = γ``; rejection: Rosiński's dominating measure ``γ θ^{-1} (1 + λθ)^{-1}``).
    """

    arg_constraints = {"mass": constraints.positive, "rate": constraints.positive}
    pytree_data_fields = ("mass", "sigma", "tau")

    def __init__(self, mass, rate=1.0, *, truncation=100, validate_args=None):
        _check(lambda r: r > 0, "rate", "finite and > 0", rate)
        _check(lambda m: m > 0, "mass", "finite and > 0", mass)
        zero = jnp.zeros_like(jnp.asarray(mass, jnp.result_type(mass, float)))
        self._init({"mass": mass, "sigma": zero, "tau": rate}, truncation, validate_args)

    @property
    def rate(self):
        return self.tau


class BetaProcess(CompletelyRandomMeasure):
    r"""Three-parameter beta process on ``(0, 1]``.

    .. math::
        ν(θ) = γ \frac{Γ(λ+1)}{Γ(1-d)Γ(λ+d)} θ^{-1-d} (1-θ)^{λ+d-1}

    with mass γ > 0 (``∫ θ ν(dθ) = γ``), concentration λ > -d and discount ``d ∈ [0, 1)`` (Teh &
    Görür 2009; this parametrisation as in Campbell et al. 2019). Composed with a Bernoulli process
    it is the (stable) IBP; :meth:`RecursiveIBP.as_beta_process` maps IBP(α, β) to
    ``BetaProcess(α, β)``.

    Representations: inverse-Lévy (tail by :func:`numpyro_bnp._math.log_beta_levy_tail`);
    Bondesson for d = 0 and λ >= 1 (``V ~ Beta(1, λ-1)``, ``c = γλ``; at λ = 1, ``V = 1`` and
    ``θ_k = e^{-Γ_k/γ}``, the IBP stick-breaking); rejection for ``λ + d >= 1`` from
    ``γ C θ^{-1-d}`` accepted with ``(1-θ)^{λ+d-1}``.
    """

    arg_constraints = {
        "mass": constraints.positive,
        "concentration": constraints.real,
        "discount": constraints.interval(0.0, 1.0),
    }
    pytree_data_fields = ("mass", "concentration", "discount")
    support = decreasing_unit_atoms
    upper = 1.0

    def __init__(
        self, mass, concentration=1.0, discount=0.0, *, truncation=100, validate_args=None
    ):
        _check(lambda m: m > 0, "mass", "finite and > 0", mass)
        _check(lambda d: (d >= 0) & (d < 1), "discount", "in [0, 1)", discount)
        if is_concrete(concentration, discount):
            lam, d = np.broadcast_arrays(
                np.asarray(concentration, float), np.asarray(discount, float)
            )
            if not (np.all(np.isfinite(lam)) and np.all(lam > -d)):
                raise ValueError(
                    f"concentration must be finite and > -discount, got {concentration!r}"
                )
        self._init(
            {"mass": mass, "concentration": concentration, "discount": discount},
            truncation,
            validate_args,
        )

    def _log_c(self):
        lam, d = self.concentration, self.discount
        return gammaln(lam + 1.0) - gammaln(1.0 - d) - gammaln(lam + d)

    def levy_log_density(self, x):
        x = jnp.asarray(x, self._dtype)
        lam, d = self.concentration, self.discount
        inside = (x > 0) & (x < 1)
        safe = jnp.where(inside, x, 0.5)
        value = (
            jnp.log(self.mass)
            + self._log_c()
            - (1.0 + d) * jnp.log(safe)
            + (lam + d - 1.0) * jnp.log1p(-safe)
        )
        return jnp.where(inside, value, -jnp.inf)

    def _log_tail(self, x):
        inside = x < 1
        safe = jnp.where(inside, x, 0.5)
        lam, d = self.concentration, self.discount
        value = jnp.log(self.mass) + self._log_c() + log_beta_levy_tail(safe, d, lam + d)
        return jnp.where(inside, value, -jnp.inf)

    def expected_mass_below(self, x):
        """``γ I_x(1-d, λ+d)`` (regularized incomplete beta; the constants cancel)."""
        x = jnp.clip(jnp.asarray(x, self._dtype), 0.0, 1.0)
        return self.mass * betainc(1.0 - self.discount, self.concentration + self.discount, x)

    def _representations(self):
        reasons = {"inverse_levy": None, "bondesson": None, "rejection": None}
        if is_concrete(self.concentration, self.discount):
            lam, d = np.asarray(self.concentration), np.asarray(self.discount)
            if not (np.all(d == 0) and np.all(lam >= 1)):
                reasons["bondesson"] = "it needs discount = 0 and concentration >= 1"
            if not np.all(lam + d >= 1):
                reasons["rejection"] = "it needs concentration + discount >= 1"
        return reasons

    def _bondesson_constant_and_quantile(self, p):
        lam = self.concentration
        safe = jnp.where(lam > 1, lam - 1.0, 1.0)
        v = jnp.where(lam > 1, -jnp.expm1(jnp.log1p(-p) / safe), 1.0)  # Beta(1, λ-1) quantile
        return self.mass * lam, v

    def _log_dominating_tail(self, x):
        d = self.discount
        safe_d = jnp.where(d > 0, d, 1.0)
        log_x = jnp.log(jnp.minimum(x, 1.0))
        shape = jnp.where(d > 0, jnp.expm1(-d * log_x) / safe_d, -log_x)
        return jnp.log(self.mass) + self._log_c() + jnp.log(shape)

    def _rejection_atoms(self, gammas, uniforms):
        d, lam = self.discount[..., None], self.concentration[..., None]
        scale = self.mass[..., None] * jnp.exp(self._log_c()[..., None])  # γ C
        safe_d = jnp.where(d > 0, d, 1.0)
        theta = jnp.where(
            d > 0, jnp.exp(-jnp.log1p(safe_d * gammas / scale) / safe_d), jnp.exp(-gammas / scale)
        )
        log_accept = (lam + d - 1.0) * jnp.log1p(-jnp.minimum(theta, 1.0))
        keep = jnp.log(uniforms) <= log_accept
        return jnp.where(keep, theta, 0.0)


class BetaPrimeProcess(CompletelyRandomMeasure):
    r"""Beta-prime process: :math:`ν(θ) = γλ θ^{-1} (1+θ)^{-λ}`, θ > 0 (mass γ, concentration λ).

    The image of ``BetaProcess(γ, λ)`` under ``θ ↦ θ/(1-θ)`` (Broderick et al. 2015); the
    beta-negative-binomial process uses it. Tail ``N(x)`` = the beta-process tail at
    ``x/(1+x)``. Representations: inverse-Lévy and Bondesson (``V ~ Lomax(λ)``, i.e.
    ``P(V > θ) = (1+θ)^{-λ}``, ``c = γλ``). No rejection representation is provided: a dominating
    measure with a closed-form inverse tail that covers both the ``θ^{-1}`` pole at 0 and the
    polynomial tail would itself be a beta-prime measure.
    """

    arg_constraints = {"mass": constraints.positive, "concentration": constraints.positive}
    pytree_data_fields = ("mass", "concentration")

    def __init__(self, mass, concentration=1.0, *, truncation=100, validate_args=None):
        _check(lambda m: m > 0, "mass", "finite and > 0", mass)
        _check(lambda c: c > 0, "concentration", "finite and > 0", concentration)
        self._init({"mass": mass, "concentration": concentration}, truncation, validate_args)

    def levy_log_density(self, x):
        x = jnp.asarray(x, self._dtype)
        lam = self.concentration
        return jnp.log(self.mass * lam) - jnp.log(x) - lam * jnp.log1p(x)

    def _log_tail(self, x):
        lam = self.concentration
        pi = jnp.exp(jnp.log(x) - jnp.logaddexp(0.0, jnp.log(x)))  # x / (1 + x)
        return jnp.log(self.mass * lam) + log_beta_levy_tail(pi, 0.0, lam)

    def expected_mass_below(self, x):
        """``γλ ∫_0^x (1+θ)^{-λ} dθ`` (``γ log(1+x)`` at λ = 1)."""
        log1p_x = jnp.log1p(jnp.asarray(x, self._dtype))
        lam = self.concentration
        safe = jnp.where(lam != 1, lam - 1.0, 1.0)
        integral = jnp.where(lam != 1, -jnp.expm1(-safe * log1p_x) / safe, log1p_x)
        return self.mass * lam * integral

    def _inverse_tail_impl(self, log_gamma):
        # the atoms are the images θ/(1-θ) of the BetaProcess(γ, λ) atoms for the same Γ
        beta = BetaProcess(self.mass, self.concentration, truncation=self.truncation)
        pi = beta._inverse_tail_impl(log_gamma)
        return pi / (1.0 - pi)

    def _representations(self):
        return {
            "inverse_levy": None,
            "bondesson": None,
            "rejection": "no dominating measure with a closed-form inverse tail is implemented",
        }

    def _bondesson_constant_and_quantile(self, p):
        lam = self.concentration
        return self.mass * lam, jnp.expm1(-jnp.log1p(-p) / lam)  # Lomax(λ) quantile
