"""Gaussian families: :class:`NormalNormal` (known covariance), :class:`NormalWishart` (unknown
mean and precision matrix) and its diagonal version :class:`NormalGamma` (see
:mod:`numpyro_bnp.families` for the interface)."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from jax.scipy.linalg import solve_triangular
from jax.scipy.special import digamma, gammaln, multigammaln
from numpyro import distributions as dist
from numpyro.distributions.util import cholesky_of_inverse

from numpyro_bnp._checks import is_concrete
from numpyro_bnp._math import normal_kl
from numpyro_bnp.families._common import (
    _LOG_2PI,
    ConjugateFamily,
    _core,
    _dtype,
    _event_shape,
    _family,
    _fixed,
    _gamma_kl,
    _lift,
    _log_rising,
    _safe,
    _shared,
)
from numpyro_bnp.families._linalg import (
    _chol_spd,
    _cholesky,
    _cholesky_rank1,
    _solve_lower,
    _solve_upper,
)

__all__ = [
    "MeanPrecision",
    "NormalGamma",
    "NormalGammaParams",
    "NormalNormal",
    "NormalParams",
    "NormalWishart",
    "NormalWishartParams",
]


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


class MeanPrecision(NamedTuple):
    """A Gaussian component θ = (μ, Λ): ``loc`` (``(..., D)``) and ``precision`` (``(..., D, D)``
    for :class:`NormalWishart`, the diagonal ``(..., D)`` for :class:`NormalGamma`)."""

    loc: jax.Array
    precision: jax.Array


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

    def log_normalizer(self, params):
        """``Σ_d ½ (P m² + log 2π − log P)`` in the family's coordinates."""
        p = params.precision
        return 0.5 * (p * params.loc**2 + _LOG_2PI - jnp.log(p)).sum(-1)

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

    def absorb(self, params, xs, weights):
        """The update by the weighted mean ``x̄`` and total weight ``W`` of the rows, plus their
        centred scatter ``Σ_n w_n (x_n − x̄)(x_n − x̄)ᵀ`` added to Ψ (Bishop 2006, Eq. 10.62):
        no raw second moments."""
        xs, weights = jnp.asarray(xs, self.dtype), jnp.asarray(weights, self.dtype)
        total = weights.sum(0)  # (*batch,)
        mean = jnp.einsum("n...,nd->...d", weights, xs) / _safe(total)[..., None]
        centred = xs[:, *([None] * total.ndim), :] - mean  # (N, *batch, D)
        scatter = jnp.einsum("n...,n...d,n...e->...de", weights, centred, centred)
        kappa, loc, dof, tril = self.update(params, mean, total)
        tril = jnp.linalg.cholesky(tril @ jnp.swapaxes(tril, -1, -2) + scatter)
        return NormalWishartParams(kappa, loc, dof, tril)

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

    def log_normalizer(self, params):
        """``(D/2) log(2π/κ) + (νD/2) log 2 − (ν/2) log|Ψ| + log Γ_D(ν/2)``."""
        dim = params.loc.shape[-1]
        nu = params.dof
        return (
            0.5 * dim * (_LOG_2PI - jnp.log(params.kappa) + nu * np.log(2.0))
            - 0.5 * nu * _log_det(params.scale_tril)
            + multigammaln(nu / 2, dim)
        )

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

    def absorb(self, params, xs, weights):
        """The update by the weighted mean and total weight of the rows, plus half their
        centred scatter ``Σ_n w_n (x_nd − x̄_d)²`` added to the rate."""
        xs, weights = jnp.asarray(xs, self.dtype), jnp.asarray(weights, self.dtype)
        total = weights.sum(0)
        mean = jnp.einsum("n...,nd->...d", weights, xs) / _safe(total)[..., None]
        centred = xs[:, *([None] * total.ndim), :] - mean
        scatter = jnp.einsum("n...,n...d->...d", weights, centred**2)
        updated = self.update(params, mean, total)
        return updated._replace(rate=updated.rate + 0.5 * scatter)

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

    def log_normalizer(self, params):
        """``Σ_d log Γ(a) − a log b + ½ log(2π/κ)``."""
        a, b = params.concentration, params.rate
        return (gammaln(a) - a * jnp.log(b) + 0.5 * (_LOG_2PI - jnp.log(params.kappa))).sum(-1)

    def sample(self, key, params):
        """θ = :class:`MeanPrecision` (μ, λ), both ``(..., D)``."""
        k_gamma, k_normal = random.split(key)
        precision = random.gamma(k_gamma, params.concentration, dtype=self.dtype) / params.rate
        noise = random.normal(k_normal, jnp.shape(params.loc), self.dtype)
        return MeanPrecision(params.loc + noise / jnp.sqrt(params.kappa * precision), precision)

    def mean(self, params):
        """:class:`MeanPrecision` (m, a/b)."""
        return MeanPrecision(params.loc, params.concentration / params.rate)
