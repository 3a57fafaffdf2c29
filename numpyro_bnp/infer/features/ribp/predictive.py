"""Read-outs of the R-IBP filter: predictive scores, feature use and posterior draws.

Pure functions of the filter's :class:`~numpyro_bnp.infer.features.ribp.update.RIBPConstants`
``const``
(and, for the model-shaped draws, the read model ``spec``: its site names and weight prior) and a
state; :meth:`RIBPFilter.log_predictive`, :meth:`RIBPFilter.feature_use` and
:meth:`RIBPFilter.posterior_draws` validate their arguments and call them. The jitted functions
built by :func:`log_predictive_fn` and :func:`feature_use_fn` bake in ``const``; the filter
caches them.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import logsumexp

from numpyro_bnp._math import logit
from numpyro_bnp.infer.features.ribp.update import (
    at_state,
    clipped_prior,
    fit,
    fit_closed_form,
    prior,
)

POLISH_STEPS = 16  # greedy flip steps that improve the log-predictive proposal's mode


def _active_features(key, state, num):
    """``(slots, draws)``: the active slots' indices and ``num`` draws ``(num, K+, D)`` of q(A)."""
    active = np.asarray(state.existence > 0.5)
    mean, var = np.asarray(state.mean)[active], np.asarray(state.var)[active]
    eps = np.asarray(random.normal(key, (num, *mean.shape), mean.dtype))
    return np.flatnonzero(active), mean + np.sqrt(var) * eps


def _rows_given(key, use, num, slots):
    """``(num, M, K+)`` draws of ``Bernoulli(b)``, ``b = use[:, slots]`` the rows' feature use."""
    b = np.asarray(use)[:, slots]
    return (np.asarray(random.uniform(key, (num, *b.shape), b.dtype)) < b).astype(b.dtype)


def _hyper_draws(spec, state, num):
    """The hyper-parameter sites' learned values (a point estimate), repeated ``num`` times."""
    if spec.hyper is None:
        return {}
    values = spec.hyper.unflatten(np.asarray(state.hyper))
    return {k: np.broadcast_to(np.asarray(v), (num, *np.shape(v))) for k, v in values.items()}


def posterior_draws(spec, rng_key, state, num_draws, use=None):
    """``(draws, dims, coords)`` for ArviZ; see :meth:`RIBPFilter.posterior_draws`.

    ``use``: ``(M, K)`` feature use of the given rows (:func:`feature_use`), or ``None``.
    """
    key_a, key_n, key_z = random.split(rng_key, 3)
    slots, feats = _active_features(key_a, state, num_draws)
    exists = np.asarray(state.existence)
    created = np.asarray(random.uniform(key_n, (num_draws, exists.shape[0]), exists.dtype))
    name = spec.feature_site
    draws = {name: feats, "num_features": np.sum(created < exists, axis=1)}
    draws.update(_hyper_draws(spec, state, num_draws))
    dims = {name: ["feature", "dim"]}
    if use is not None:
        draws[spec.ibp_site] = _rows_given(key_z, use, num_draws, slots)
        dims[spec.ibp_site] = ["row", "feature"]
    return draws, dims, {"feature": slots}


def posterior_samples(spec, const, rng_key, state, num_samples, num_obs, use=None):
    """Model-shaped samples for ``Predictive``; see :meth:`RIBPFilter.posterior_samples`.

    ``use``: ``(num_obs, K)`` feature use of given rows (:func:`feature_use`), or ``None``
    (rows drawn from the filtering prior).
    """
    key_a, key_z, key_w = random.split(rng_key, 3)
    slots, feats = _active_features(key_a, state, num_samples)
    if use is None:
        probs = np.asarray(prior(at_state(const, state), state))[slots]
        u = np.asarray(random.uniform(key_z, (num_samples, num_obs, slots.size), probs.dtype))
        z = (u < probs).astype(probs.dtype)
    else:
        z = _rows_given(key_z, use, num_samples, slots)
    samples = {spec.feature_site: feats, spec.ibp_site: z, **_hyper_draws(spec, state, num_samples)}
    if spec.weight_site is not None:
        shape = (num_samples, num_obs, slots.size)
        w = random.normal(key_w, shape, const.dtype) * np.sqrt(spec.weight_var)
        samples[spec.weight_site] = np.asarray(w + spec.weight_loc, const.dtype)
    return {k: jnp.asarray(v) for k, v in samples.items()}


def log_predictive(fn, state, obs, key, batch_size):
    """``(M,)`` importance-sampled ``log p(o | data)`` of validated rows ``obs`` ``(M, D)``.

    ``fn`` is :func:`log_predictive_fn`'s compiled function; see
    :meth:`RIBPFilter.log_predictive`; ``key`` seeds the per-row samplers.
    """
    keys = random.split(key, obs.shape[0])
    out = [
        fn(state, obs[i : i + batch_size], keys[i : i + batch_size])
        for i in range(0, obs.shape[0], batch_size)
    ]
    return jnp.concatenate(out)


def feature_use_fn(const):
    """The compiled ``(state, obs (M, D)) -> (M, K)`` fitted ``b``, features held fixed."""

    def fn(state, obs):
        at = at_state(const, state)
        return lax.map(lambda o: local_fit(at, state, o)[1], obs)

    return jax.jit(fn)


def feature_use(fn, state, obs, batch_size):
    """``(M, K)`` fitted ``b`` of validated rows ``obs`` ``(M, D)`` by :func:`feature_use_fn`'s
    compiled ``fn``, ``batch_size`` rows per call."""
    parts = [fn(state, obs[i : i + batch_size]) for i in range(0, obs.shape[0], batch_size)]
    return jnp.concatenate(parts)


def local_fit(const, state, obs):
    """Clipped prior ``π`` and fitted ``b`` of one row ``(D,)``, features held fixed."""
    probs, prior_logit = clipped_prior(const, state)
    return probs, fit(const, state, obs, probs, prior_logit, update_features=False)[0]


def proposal_mode(const, state, obs, prior, b):
    """Greedy single and pair flips of the rounded fit ``b`` of one row; ``(K,)`` 0/1.

    Coordinate ascent from the prior falls into a poor local optimum on a few rows in a
    hundred, e.g. when two features sum to roughly a third: it switches on the first two and
    no single flip then helps, while the mode (the third alone) can carry e^50 times the
    posterior mass, which a proposal centred on the wrong optimum almost never samples. Each
    of ``POLISH_STEPS`` steps takes the better of the best single flip and the best pair flip
    under the exact ``log π(z) + log p(o | z)`` (:func:`gaussian_log_marginal`), if it
    improves. Linear-Gaussian: every single flip is scored exactly (this also catches unborn
    slots, whose mean is the prior's but whose variance explains a large residual); the
    pair, and for factor analysis the single, is picked by the plug-in Gaussian gain
    (features at their means ``E[w] μ_k``, Schaeffer et al. 2022, App. B). The polish runs
    from two starts, the rounded fit and the empty ``z`` (a greedy forward selection, which
    reaches modes that need three or more flips from the fit), and the better end point is
    returned.
    Gaussian kinds.
    """
    lam = const.noise_prec
    w_loc = 1.0 if const.kind == "linear_gaussian" else const.weight_loc
    feats = w_loc * state.mean
    prior_logit = logit(prior)
    sq_norm = jnp.sum(lam * feats * feats, axis=-1)
    gram = (lam * feats) @ feats.T
    eye = jnp.eye(prior.shape[0], dtype=prior.dtype)
    off_diag = eye == 0

    def score(z):
        return z @ prior_logit + gaussian_log_marginal(const, state, obs, z)

    def step(_, carry):
        z, best = carry
        sign = 1.0 - 2.0 * z
        gain = sign * prior_logit + sign * ((lam * feats) @ (obs - z @ feats)) - 0.5 * sq_norm
        pair = gain[:, None] + gain[None] - jnp.outer(sign, sign) * gram
        pair = jnp.where(off_diag, pair, -jnp.inf)
        i, j = jnp.unravel_index(jnp.argmax(pair), pair.shape)
        both = jnp.abs(z - jnp.zeros_like(z).at[i].set(1.0).at[j].set(1.0))
        if const.kind == "linear_gaussian":  # all single flips scored exactly: O(K² D)
            singles = jnp.abs(z[None] - eye)
            single_scores = jax.vmap(score)(singles)
            k = jnp.argmax(single_scores)
            single, single_score = singles[k], single_scores[k]
        else:
            single = jnp.abs(z - eye[jnp.argmax(gain)])
            single_score = score(single)
        both_score = score(both)
        cand = jnp.where(single_score >= both_score, single, both)
        new = jnp.maximum(single_score, both_score)
        better = new > best
        return jnp.where(better, cand, z), jnp.where(better, new, best)

    starts = jnp.stack([(b > 0.5).astype(b.dtype), jnp.zeros_like(b)])
    z, best = jax.vmap(lambda z: lax.fori_loop(0, POLISH_STEPS, step, (z, score(z))))(starts)
    return z[jnp.argmax(best)]


def spread_over_unborn(const, state, prior, b):
    """Share the fit's mass on unborn slots out over all of them in proportion to ``π``.

    Slots whose feature is still at the prior are exchangeable in ``p(o | z)``, so the
    target gives "one new feature" to every one of them in proportion to its ``π_k``; the
    fit (and the polished mode) switches on just one. A proposal centred on that one slot
    samples the others only through the 10 % prior share, which at 2,000 samples misses
    most of the mass (estimates ``log 10`` low on rows with a new feature). The total
    ``Σ b_k`` over unborn slots, the expected number of new features, is kept (each
    ``b_k ≤ 1``). ``prior``, ``b``: ``(K,)``.
    """
    unborn = jnp.all((state.mean == const.feature_loc) & (state.var == const.feature_var), axis=-1)
    share = jnp.where(unborn, prior, 0.0)
    total = jnp.sum(jnp.where(unborn, b, 0.0))
    spread = jnp.minimum(total * share / jnp.maximum(jnp.sum(share), jnp.finfo(b.dtype).tiny), 1.0)
    return jnp.where(unborn, spread, b)


def log_predictive_fn(const, num_samples):
    """The compiled ``(state, obs (M, D), keys (M, 2)) -> (M,)`` of :func:`log_predictive`."""

    def one(const, state, o, key):
        dt = const.dtype
        eps = jnp.finfo(dt).eps
        prior, b = local_fit(const, state, o)
        gaussian = const.kind in ("linear_gaussian", "factor_analysis")
        if gaussian:  # see proposal_mode
            z_hat = proposal_mode(const, state, o, prior, b)
            refit = fit_closed_form(const, state, o, z_hat, logit(prior), update_features=False)
            # coordinate ascent from z_hat can slide back to the plain fit's optimum (on 4 of
            # 500 rows at D = 50, and always off a new feature's unborn slot): keep half the
            # mass on the polished mode itself
            b = 0.5 * (refit[0] + z_hat)
        b = spread_over_unborn(const, state, prior, b)
        proposal = jnp.clip(0.9 * b + 0.1 * prior, eps, 1.0 - eps)
        key_z, key_a = random.split(key)
        z = (random.uniform(key_z, (num_samples, prior.shape[0]), dt) < proposal).astype(dt)
        log_ratio = z @ (jnp.log(prior) - jnp.log(proposal)) + (1 - z) @ (
            jnp.log1p(-prior) - jnp.log1p(-proposal)
        )
        if not gaussian:  # the model's own likelihood, features drawn from q(A)
            a = state.mean + jnp.sqrt(state.var) * random.normal(
                key_a, (num_samples, *state.mean.shape), dt
            )
            ll = jax.vmap(lambda zz, aa: const.row_log_likelihood(zz, aa, o))(z, a)
        else:
            ll = jax.vmap(lambda zz: gaussian_log_marginal(const, state, o, zz))(z)
        return logsumexp(ll + log_ratio) - jnp.log(num_samples)

    def fn(state, obs, keys):
        at = at_state(const, state)
        # rows one after another (lax.map): a vmapped sweep compiled for minutes
        return lax.map(lambda x: one(at, state, *x), (obs, keys))

    return jax.jit(fn)


def gaussian_log_marginal(const, state, o, z):
    """``log p(o | z)`` with the features (and weights) integrated out, Gaussian models."""
    noise = 1.0 / const.noise_prec
    if const.kind == "linear_gaussian":
        var = noise + z @ state.var
        return -0.5 * jnp.sum(jnp.log(2 * jnp.pi * var) + (o - z @ state.mean) ** 2 / var)
    # factor analysis: o = Aᵀ (z ⊙ w) + ε, cov = diag(d) + U Uᵀ, U = Mᵀ diag(z σ_w)
    w_var, w_loc = const.weight_var, const.weight_loc
    d = noise + (z * (w_loc**2 + w_var)) @ state.var
    u = state.mean.T * (z * jnp.sqrt(w_var))  # (D, K)
    resid = o - (z * w_loc) @ state.mean
    cap = jnp.eye(z.shape[0], dtype=z.dtype) + (u.T / d) @ u
    chol = jnp.linalg.cholesky(cap)
    t = jax.scipy.linalg.solve_triangular(chol, u.T @ (resid / d), lower=True)
    logdet = jnp.sum(jnp.log(d)) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol)))
    quad = jnp.sum(resid**2 / d) - jnp.sum(t**2)
    return -0.5 * (o.shape[0] * jnp.log(2 * jnp.pi) + logdet + quad)
