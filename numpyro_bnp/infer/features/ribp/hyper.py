"""The hyper-parameters' M-step of the memoized R-IBP update (variational EM).

:func:`learn_hyper` moves the values of a model's hyper-parameter sites (the noise scale, the
IBP's mass, a Bernoulli's bias; :class:`~numpyro_bnp.infer.features.feature_model.HyperSites`) to
the MAP of the expected log joint given the memoized update's accumulated statistics
(:class:`~numpyro_bnp.infer.features.ribp.memoized.RIBPMemoState`); the update calls it at each
refresh (``docs/ribp.md``, "Learning the noise scale and the IBP's mass").
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import digamma

HYPER_NEWTON_STEPS = 8  # Newton steps of the hyper-parameters' M-step per refresh


def expected_residual(state):
    """``(D,)`` ``Σ_n E‖o_nd - Σ_k c_nk A_kd‖²`` under the rows' ``q(c)`` (their statistics)
    and the features' ``q(A)``: ``Σo² - 2 Σ_k R_kd μ_kd + μ_dᵀ G μ_d + Σ_k G_kk v_kd``."""
    mean = state.mean
    return (
        state.obs_moment
        - 2.0 * jnp.sum(state.cross * mean, axis=0)
        + jnp.sum(mean * (state.gram @ mean), axis=0)
        + jnp.diag(state.gram) @ state.var
    )


def hyper_objective(const, state):
    """``free (P,) -> scalar``: the expected log joint of the hyper-parameter sites at their
    unconstrained values ``free`` (the terms of the variational lower bound that depend on them).

    ``-½ Σ_d [n log σ²_d + SSR_d / σ²_d]`` (:func:`expected_residual`; Bernoulli: the bound's
    ``Σ_d [b_d R_{K+1,d} - ½ b_d² G_{d,K+1,K+1} - b_d Σ_k G_{d,K+1,k} μ_kd]`` in the offset
    ``b``) ``+ ρ log α - α H_n`` (the two-parameter IBP's probability of ``ρ = Σ_k e_k``
    features after ``n`` rows: ``α^{K+} exp(-α Σ_{i≤n} β/(β+i-1))``,
    ``H_n = β (ψ(β+n) - ψ(β))``) ``+ log p(sites)``.
    """
    dt = const.dtype
    n = state.num_seen.astype(dt)
    beta = const.ibp.beta
    harmonic = beta * (digamma(beta + n) - digamma(beta))
    count = jnp.sum(state.existence)
    if const.kind == "bernoulli":
        size = state.mean.shape[0]
        centred_sum, prec_sum = state.cross[size], state.gram[:, size, size]
        linked = jnp.sum(state.gram[:, size, :size] * state.mean.T, axis=1)

        def fit(terms):
            b = terms.offset
            return jnp.sum(b * centred_sum - 0.5 * prec_sum * b * b - b * linked)

    else:
        residual = expected_residual(state)

        def fit(terms):
            return -0.5 * jnp.sum(n * jnp.log(terms.noise_var) + residual / terms.noise_var)

    def objective(free):
        terms = const.hyper.terms(const.hyper.from_unconstrained(free))
        alpha = terms.alpha
        return fit(terms) + count * jnp.log(alpha) - alpha * harmonic + terms.log_prior

    return objective


def learn_hyper(const, state, learn, num_steps=HYPER_NEWTON_STEPS):
    """``state`` with ``hyper`` at the MAP of :func:`hyper_objective` (the M-step) in the
    coordinates where ``learn`` (``(P,)`` bool, or a scalar) is true; the others keep their
    values.

    Newton's method in the sites' unconstrained coordinates, on the Hessian's diagonal (the
    noise term is separable over columns, a bias's over its entries, the mass term from both;
    all are concave in the log of a scale or mass or in the bias), each step at most 1 in
    every coordinate; where the diagonal is not negative the step follows the gradient's sign
    by 1/2.
    """
    objective = hyper_objective(const, state)
    grad = jax.grad(objective)
    learn = jnp.broadcast_to(learn, state.hyper.shape)

    def newton(_, free):
        g = grad(free)
        h = jnp.diag(jax.hessian(objective)(free))
        step = jnp.where(h < 0, -g / jnp.where(h < 0, h, -1.0), 0.5 * jnp.sign(g))
        return free + jnp.where(learn, jnp.clip(step, -1.0, 1.0), 0.0)

    free = lax.fori_loop(0, num_steps, newton, const.hyper.to_unconstrained(state.hyper))
    learned = const.hyper.from_unconstrained(free).astype(const.dtype)
    return state._replace(hyper=jnp.where(learn, learned, state.hyper))
