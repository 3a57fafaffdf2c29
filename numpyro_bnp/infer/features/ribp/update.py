r"""The R-IBP filter as pure functions: state, constants, the per-observation update.

Every function takes the filter's :class:`RIBPConstants` (what
:class:`~numpyro_bnp.infer.RIBPFilter` read from the model and its options, frozen) and a
:class:`RIBPState`. :func:`update` fits the
observation with :func:`fit`, scores it with :func:`elbo`, freezes the fitted ``b_n`` into the
running statistics with :func:`absorb` and then calls :func:`retire_holes`; the read-outs
(:mod:`numpyro_bnp.infer.features.ribp.predictive`) fit rows with :func:`fit` with the features held
fixed. The coordinate-ascent sweep has one slot function per Gaussian likelihood
(:func:`linear_gaussian_slot`, :func:`factor_analysis_slot`); the generic likelihood has its
own Newton sweep (:func:`fit_generic`); a ``Bernoulli`` with logits ``z @ A + offset`` under the
memoized update is fitted through its quadratic lower bound as a linear-Gaussian row
(:func:`fit_bernoulli`). Equations refer to Schaeffer, Du, Liu & Fiete,
*Streaming Inference for Infinite Feature Models*, ICML 2022.

**Existence probabilities (a correction to the paper).** Eq. 5 needs the number of features
created so far, ``Λ_{n-1} ≈ Poisson(ρ_{n-1})`` with ``ρ = Σ_k e_k``. The paper (App. A) takes
``e_k = 1 - Π_{n'} (1 - b_{n'k})``, as if the ``z_{n'k}`` were independent; they are not (a dish is
taken again only once it exists), and with no data this ``ρ_n`` differs from ``E[Λ_n] = α H^β_n``,
so the filter's prior drifts from the exact IBP marginals (by 0.22 at α = 10.78, β = 5.6, n = 5).
The prior ``q_{nk} = S_{n-1,k}/(β+n-1) + c_{nk}`` is a sum of two exclusive events, taking an
existing dish or creating dish ``k`` now (``c_{nk}``, the Poisson-CDF term), so the filter adds to
``e_k`` the posterior probability that observation ``n`` *created* dish ``k``,
``b_{nk} c_{nk} / q_{nk}`` (capped at 1). With no data this is exact: ``e_k = P(Λ_n >= k)``,
``ρ_n = E[Λ_n]`` and the filter reproduces :meth:`RecursiveIBP.marginals` to rounding.

**Coordinate ascent.** Each coordinate-ascent step is one sweep over the slots (forward on even
steps, backward on odd steps, as in the authors' code) that updates feature ``l`` — Eqs. 10-11
against the prior frozen at the start of the observation, then the *ossification* average with
weights ``b_nl`` (new) and ``S_{n-1,l}`` (old) — and then ``b_nl``, carrying only the D-vector
residual ``o_n - Σ_{k≠l} b_k E[w_k] μ_k`` from slot to slot. Factor analysis then updates the
weights. Everything that does not depend on the residual (the feature's mean is affine in it,
``μ_l = a_l + g_l ⊙ r_l``) is computed for all slots before the sequential loop, which emits one
array per slot, ``(b_l, [ϕ_l, Φ_l,] μ_l)``: with XLA on CPU a scalar and a vector output would
copy the whole ``(K, D)`` output buffer at every slot.

**Feature update.** ``feature_update="paper"`` (default) is the paper's Eqs. 10-11: each
feature moves by ``b`` times its data term and ``b`` is scored against that feature. For an unborn
slot that feature is the prior ``N(μ⁰, Σ⁰)``, whose expected log-likelihood carries the penalty
``tr(ΛΣ⁰)/2`` (100 nats at D = 50, σ_A = 1, σ_o = 0.5), so births need a large prior ``b`` and
stop once the creation mass ``αβ/(β+n-1)`` falls below about 0.1-0.3: the count stalls after a
few dozen observations whatever the data say. ``"birth"`` (experimental, a change to the paper)
scores the unborn slots (existence below ``retire_threshold``) with their feature *given*
``z_l = 1`` minus its KL from the prior — for a Gaussian likelihood the exact log Bayes factor of
a new feature with the feature integrated out — and commits the moments of
``b N(μ¹, Σ¹) + (1 - b) N(μ⁰, Σ⁰)``; born features follow the paper's update. It keeps the count
growing and improves the held-out predictive, but over-counts when rows hold many features (the
greedy features are blends that rarely recur, see ``docs/ribp.md``). For the Gaussian
likelihoods the memoized update (:mod:`numpyro_bnp.infer.features.ribp.memoized`) supersedes it.

**Newton safeguard** (the generic path, :func:`fit_generic`). A full Newton step can overshoot
far when the likelihood's curvature grows along the step: for counts ``~ Poisson(200)`` under a
log link (``D = 5``, ``α = 3``, ``σ_A = 1``) the first step from the prior (rate ``e⁰ = 1``,
gradient ``≈ 199`` per entry) lands near a log-rate of 97, ``e^97`` is infinite in float32, and
the unguarded filter's whole state was NaN from the first row on, without a warning. So each step
is safeguarded: a gradient or curvature entry that is not finite counts as zero, the curvature is
floored at 0 (the step's variance never exceeds the prior's), and the step is halved, at most
``MAX_HALVINGS`` times and else dropped, until the slot's objective (its weighted log-likelihood
plus the log prior of its feature) does not decrease, up to rounding. On those counts the filter
then fits (the plug-in rate is within 1 % of the data mean); on a linear-Gaussian model the full
step lands on the maximum, is always taken, and the path still equals the closed form.

**Retiring features.** A slot whose existence probability is below ``retire_threshold`` while a
later slot's is above it is a *hole*: the prior indexes features by creation order, so a hole
would keep absorbing creation mass meant for the next new feature and waste capacity. After each
observation holes are reset to the prior and moved behind the live slots (the live slots keep
their order). Slots beyond the frontier stay in reserve for new features.
"""

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from numpyro_bnp._math import bernoulli_kl, logit, normal_kl, poisson_interval_probs
from numpyro_bnp.distributions import RecursiveIBP

MAX_HALVINGS = 30  # step halvings of a generic-path Newton step before it is dropped


class RIBPState(NamedTuple):
    """Filter state after ``num_seen`` observations, for ``K`` slots and dimension ``D``.

    :ivar mean: ``(K, D)`` feature means ``μ_k``.
    :ivar var: ``(K, D)`` diagonal feature covariances ``Σ_k``.
    :ivar running_sum: ``(K,)`` ``S_k = Σ_{n'} b_{n'k}``.
    :ivar existence: ``(K,)`` probability that feature ``k`` has been created (see the module
        docstring and :func:`absorb`).
    :ivar num_seen: ``()`` int32, observations absorbed.
    :ivar truncation: ``()`` the largest prior mass beyond the capacity seen so far.
    """

    mean: jnp.ndarray
    var: jnp.ndarray
    running_sum: jnp.ndarray
    existence: jnp.ndarray
    num_seen: jnp.ndarray
    truncation: jnp.ndarray


class RIBPInfo(NamedTuple):
    """Per-observation diagnostics.

    :ivar num_features: ``ρ_n = Σ_k e_k``, the expected number of features created so far.
    :ivar num_active: number of slots with existence probability above 1/2.
    :ivar num_used: ``Σ_k b_nk``, the expected number of features in this observation.
    :ivar elbo: evidence lower bound on the log predictive ``log q(o_n | o_<n)`` of the new
        observation before it was absorbed (for the generic path, its plug-in approximation).
    :ivar truncation: prior mass of features beyond the capacity at this step.
    """

    num_features: jnp.ndarray
    num_active: jnp.ndarray
    num_used: jnp.ndarray
    elbo: jnp.ndarray
    truncation: jnp.ndarray


class RIBPConstants(NamedTuple):
    """What the filter's functions need from the model and the filter's options, frozen.

    :ivar str kind: ``"linear_gaussian"``, ``"factor_analysis"``, ``"generic"`` or
        ``"bernoulli"`` (a ``Bernoulli`` with logits ``z @ A + logit_offset``, memoized update).
    :ivar dtype: the floating dtype of the state.
    :ivar ibp: the :class:`~numpyro_bnp.distributions.RecursiveIBP` of the model's ``α, β``
        (its filtering prior, Eq. 5).
    :ivar feature_loc, feature_var: ``(D,)`` prior mean and variance of each feature entry.
    :ivar noise_prec: ``(D,)`` noise precision ``Λ`` (Gaussian kinds), else ``None``.
    :ivar float weight_loc, weight_var: prior of the weights (factor analysis).
    :ivar row_log_likelihood: ``(z (K,), A (K, D), o (D,)) -> log p(o | z, A)``, the model's
        own (generic and Bernoulli kinds), else ``None``.
    :ivar int num_steps: coordinate-ascent sweeps per observation.
    :ivar int newton_steps: Newton steps per slot and sweep (generic kind).
    :ivar str feature_update: ``"paper"``, ``"birth"`` (module docstring) or
        ``"memoized"`` (:mod:`numpyro_bnp.infer.features.ribp.memoized`, which fits rows with the
        features held fixed here).
    :ivar bool ossify: apply the ossification average (paper App. B.2).
    :ivar float retire_threshold: existence probability below which a hole is retired.
    :ivar hyper: the model's :class:`~numpyro_bnp.infer.features.feature_model.HyperSites` (learned
    by the
        memoized update, whose state holds their values), else ``None``; ``noise_prec`` and
        ``ibp`` then hold their values at the traced model and :func:`at_state` gives the
        constants at a state's values.
    :ivar logit_offset: ``(D,)`` the logits' offset (Bernoulli kind), else ``None``.
    """

    kind: str
    dtype: Any
    ibp: Any
    feature_loc: jnp.ndarray
    feature_var: jnp.ndarray
    noise_prec: jnp.ndarray | None
    weight_loc: float
    weight_var: float
    row_log_likelihood: Any
    num_steps: int
    newton_steps: int
    feature_update: str
    ossify: bool
    retire_threshold: float
    hyper: Any = None
    logit_offset: jnp.ndarray | None = None


def at_state(const, state):
    """``const`` with the noise precision, the IBP's mass, the logits' offset and the model's
    likelihood at the hyper-parameter values ``state.hyper`` (``const`` itself when the model
    has no hyper-parameter sites)."""
    if const.hyper is None:
        return const
    terms = const.hyper.terms(state.hyper)
    ibp = RecursiveIBP(terms.alpha.astype(const.dtype), const.ibp.beta, num_rows=1, max_features=1)
    const = const._replace(ibp=ibp)
    if terms.noise_var is not None:
        const = const._replace(noise_prec=(1.0 / terms.noise_var).astype(const.dtype))
    if terms.offset is not None:
        const = const._replace(logit_offset=terms.offset.astype(const.dtype))
    if const.row_log_likelihood is not None:
        rll = functools.partial(const.row_log_likelihood, hyper=state.hyper)
        const = const._replace(row_log_likelihood=rll)
    return const


def empty(const, capacity):
    """The state of no observations with ``capacity`` slots (every feature at its prior)."""
    dim = const.feature_loc.shape[0]
    return RIBPState(
        mean=jnp.broadcast_to(const.feature_loc, (capacity, dim)),
        var=jnp.broadcast_to(const.feature_var, (capacity, dim)),
        running_sum=jnp.zeros(capacity, const.dtype),
        existence=jnp.zeros(capacity, const.dtype),
        num_seen=jnp.zeros((), jnp.int32),
        truncation=jnp.zeros((), const.dtype),
    )


def prior(const, state):
    """``(K,)`` filtering prior ``q(z_{n+1,k} = 1 | o_{<=n})`` of the next row (Eq. 5)."""
    log_absent = jnp.log1p(-state.existence)
    return const.ibp.filtering_prior(state.running_sum, log_absent, state.num_seen)


def clipped_prior(const, state):
    """:func:`prior` clipped to ``[eps, 1 - eps]`` and its logit: ``(q, logit q)``."""
    eps = jnp.finfo(const.dtype).eps
    q = jnp.clip(prior(const, state), eps, 1.0 - eps)
    return q, logit(q)


def update(const, state, obs):
    """Absorb one observation ``obs`` ``(D,)``: pure and jittable. Returns ``(state, info)``."""
    obs = jnp.asarray(obs, const.dtype)
    q, prior_logit = clipped_prior(const, state)
    b, mean, var, local = fit(const, state, obs, q, prior_logit, update_features=True)
    score = elbo(const, state, obs, q, b, local)
    *statistics, beyond = absorb(const, state, q, b)
    new = retire_holes(const, RIBPState(mean, var, *statistics))
    return new, info(const, new, jnp.sum(b), score, beyond)


def info(const, state, num_used, score, beyond):
    """The :class:`RIBPInfo` of a step that left ``state``: ``num_used = Σ_k b_k`` of the row,
    its ELBO ``score`` and the prior mass ``beyond`` the capacity."""
    exists = state.existence
    return RIBPInfo(
        num_features=jnp.sum(exists),
        num_active=jnp.sum(exists > 0.5).astype(jnp.int32),
        num_used=num_used,
        elbo=score,
        truncation=beyond.astype(const.dtype),
    )


def ossify(b, running_sum, new, old, keep=True):
    """The ossification average (paper App. B.2): ``(b new + S old) / (b + S)``.

    ``b`` is the observation's probability of using the slot, ``S`` the slot's running sum
    ``Σ_{n'} b_{n'}``, ``new`` the slot's update from this observation and ``old`` its value
    before; where ``b + S = 0`` or ``keep`` is False, ``new`` is returned. Broadcasts.
    """
    total = b + running_sum
    keep = keep & (total > 0)
    share = jnp.where(keep, b / jnp.where(keep, total, 1.0), 1.0)
    return old + share * (new - old)


def fit(const, state, obs, q, prior_logit, *, update_features):
    """Fit one observation ``obs`` ``(D,)`` against the clipped prior ``q`` ``(K,)``.

    :func:`fit_generic` for the generic kind, else :func:`fit_closed_form`; ``prior_logit`` is
    ``logit(q)``. With ``update_features`` False the features are held fixed (the read-outs).

    :return: ``(b, mean, var, local)``: ``b`` ``(K,)``, the features' means and variances
        ``(K, D)``, and for factor analysis the weights' ``(ϕ, Φ)`` given ``z = 1`` (``None``
        otherwise).
    """
    fit_kind = {"generic": fit_generic, "bernoulli": fit_bernoulli}.get(const.kind, fit_closed_form)
    return fit_kind(const, state, obs, q, prior_logit, update_features=update_features)


def absorb(const, state, q, b):
    """Freeze the fitted ``b`` ``(K,)`` of observation ``n`` into the running statistics.

    ``q`` ``(K,)`` is the clipped filtering prior the observation was fitted against. The
    existence probabilities get the posterior probability that observation ``n`` created each
    feature (see the module docstring).

    :return: ``(running_sum, existence, num_seen, truncation, beyond)``: the state's fields after
        the observation (``truncation`` is the largest ``beyond`` so far) and ``beyond``, the prior
        mass of features beyond the capacity ``K`` at this step.
    """
    dt = const.dtype
    eps = jnp.finfo(dt).eps
    # existence: add the posterior probability that THIS observation created feature k, b
    # times the creation share of its prior, q = S/(β+n-1) [take] + P(created now) [create]
    denom = const.ibp.beta + state.num_seen.astype(dt)
    created_share = jnp.clip(1.0 - state.running_sum / denom / q, 0.0, 1.0)
    existence = jnp.minimum(state.existence + b * created_share, 1.0 - eps)
    running_sum = state.running_sum + b
    num_seen = state.num_seen + 1
    rate = jnp.sum(state.existence)
    new_rate = const.ibp.alpha * const.ibp.beta / denom
    capacity = state.mean.shape[0]
    # P(Pois(ρ_{n-1} + αβ/(β+n-1)) > K): prior mass of features the slots cannot hold
    beyond = poisson_interval_probs(jnp.zeros_like(rate), rate + new_rate, capacity + 1)[-1]
    truncation = jnp.maximum(state.truncation, beyond).astype(dt)
    return running_sum, existence, num_seen, truncation, beyond


def retire_holes(const, state):
    """``state`` with its holes reset to the prior and moved behind the live slots.

    A hole is a slot whose existence probability is below ``retire_threshold`` while a later
    slot's is above it (see the module docstring); the live slots keep their order.
    """
    hole, order = holes(const, state.existence)

    def compact(state):
        moved = hole[order][:, None]
        fresh = empty(const, hole.shape[0])
        mean, var, running_sum, existence = (
            jnp.where(moved if f.ndim == 2 else moved[:, 0], z, f[order])
            for f, z in zip(state[:4], fresh[:4], strict=True)
        )
        return state._replace(mean=mean, var=var, running_sum=running_sum, existence=existence)

    return lax.cond(jnp.any(hole), compact, lambda s: s, state)


def holes(const, existence):
    """``(hole, order)``: the ``(K,)`` mask of holes (existence below ``retire_threshold`` while a
    later slot's is above it) and the permutation that moves them behind the live slots, the
    live slots keeping their order (``new[i] = old[order[i]]``)."""
    later = lax.cummax(existence[::-1])[::-1]
    later = jnp.concatenate([later[1:], jnp.zeros_like(later[:1])])
    hole = (existence < const.retire_threshold) & (later >= const.retire_threshold)
    # the stable partition live-then-holes, without a sort: a sort keeps XLA from compiling
    # the whole chunk loop into one CPU kernel (see numpyro_bnp.xla_cpu)
    live = ~hole
    slot = jnp.arange(hole.shape[0])
    target = jnp.where(live, jnp.cumsum(live), jnp.sum(live) + jnp.cumsum(hole)) - 1
    return hole, jnp.sum(jnp.where(target == slot[:, None], slot, 0), axis=1)


def fit_closed_form(const, state, obs, q, prior_logit, *, update_features):
    """Coordinate ascent for the Gaussian likelihoods (paper App. B.2-B.3).

    Returns ``b``, the features' means and variances, and for factor analysis the weights'
    means ``ϕ`` and variances ``Φ`` given ``z = 1`` (``None`` otherwise).
    """
    mu0, var0 = state.mean, state.var
    capacity = mu0.shape[0]
    if const.kind == "factor_analysis":
        # weights start one prior standard deviation above their mean: this breaks the sign
        # symmetry between w and A for a new feature (the authors' code draws them at random)
        w_var = jnp.full(capacity, const.weight_var, const.dtype)
        phi = const.weight_loc + jnp.sqrt(w_var)
    else:
        w_var, phi = jnp.zeros(capacity, const.dtype), jnp.ones(capacity, const.dtype)
    carry = (q, mu0, var0, phi, w_var)
    for step in range(const.num_steps):
        carry = sweep(const, state, obs, prior_logit, carry, step % 2 == 1, update_features)
    b, mean, var, phi, w_var = carry
    born = born_slots(const, state)
    if update_features and born is not None:
        mean1, var1 = commit(const, state, b, mean, var)
        mean, var = jnp.where(born, mean1, mean), jnp.where(born, var1, var)
    local = (phi, w_var) if const.kind == "factor_analysis" else None
    return b, mean, var, local


def born_slots(const, state):
    """``(K, 1)`` mask of the slots scored with the feature integrated out, or ``None``.

    ``"birth"``: the unborn slots, whose existence probability is below ``retire_threshold``
    (see the module docstring). ``"paper"`` and ``"memoized"``: none.
    """
    if const.feature_update != "birth":
        return None
    return (state.existence < const.retire_threshold)[:, None]


def commit(const, state, b, mean1, var1):
    """``"birth"``: moments of ``b N(μ¹, Σ¹) + (1 - b) N(μ⁰, Σ⁰)`` of an unborn slot, then
    ossified."""
    mu0, var0, S = state.mean, state.var, state.running_sum
    bc = b[:, None]
    step = mean1 - mu0
    mean = mu0 + bc * step
    var = bc * var1 + (1.0 - bc) * var0 + bc * (1.0 - bc) * step * step
    if const.ossify:
        Sc = S[:, None]
        mean, var = ossify(bc, Sc, mean, mu0), ossify(bc, Sc, var, var0)
    return mean, var


class SlotInputs(NamedTuple):
    """What one slot of a sweep reads (one row per slot; see :func:`sweep`).

    :ivar next_old: ``(D,)`` the next slot's contribution before this sweep, added back to the
        residual when the slot is left.
    :ivar offset, gain: ``(D,)`` the slot's feature mean as an affine map of the residual
        ``r``, ``μ = offset + gain ⊙ r`` (Eq. 11, ossified).
    :ivar trace_var: ``tr(Λ Σ_l)``.
    :ivar prior_logit: ``logit q_l``.
    :ivar integrated: for the slots scored with the feature integrated out (``None`` when no
        slot is): ``(kl_const, born, mu0, var0)``, the part of ``KL(q(A_l) || prior)`` that does
        not depend on ``r``, the slot's mask, and the slot's prior-to-this-observation moments.
    """

    next_old: jnp.ndarray
    offset: jnp.ndarray
    gain: jnp.ndarray
    trace_var: jnp.ndarray
    prior_logit: jnp.ndarray
    integrated: tuple | None


def linear_gaussian_slot(const, r, mu, logit, trace_var):
    """``b_l`` of a linear-Gaussian slot with feature mean ``mu`` and residual ``r``.

    ``logit b_l = logit q_l + μᵀΛr - (μᵀΛμ + tr ΛΣ_l) / 2`` (paper App. B.2), one reduction.

    :return: ``(scalars, coef)``: ``[b_l]`` and ``E[z_l w_l] = b_l``.
    """
    logit = logit + jnp.sum(const.noise_prec * mu * (r - 0.5 * mu)) - 0.5 * trace_var
    b = jax.nn.sigmoid(logit)
    return [b], b


def factor_analysis_slot(const, r, mu, logit, trace_var):
    """``b_l`` and the weight ``q(w_l | z_l = 1) = N(ϕ_l, Φ_l)`` of a factor-analysis slot.

    Eq. 12 restricted to slot ``l`` given ``z_l = 1``; the logit gets the weight's expected
    fit minus its KL from the prior (paper App. B.3).

    :return: ``(scalars, coef)``: ``[b_l, ϕ_l, Φ_l]`` and ``E[z_l w_l] = b_l ϕ_l``.
    """
    lam_mu = const.noise_prec * mu
    data = jnp.sum(lam_mu * r)
    second = jnp.sum(lam_mu * mu) + trace_var  # E[A_l Λ A_lᵀ]
    m0, v0 = const.weight_loc, const.weight_var
    w_var = 1.0 / (1.0 / v0 + second)
    phi = w_var * (m0 / v0 + data)
    kl_w = normal_kl(phi, w_var, m0, v0)
    logit = logit - kl_w + phi * data - 0.5 * (phi * phi + w_var) * second
    b = jax.nn.sigmoid(logit)
    return [b, phi, w_var], b * phi


SLOTS = {"linear_gaussian": linear_gaussian_slot, "factor_analysis": factor_analysis_slot}


def sweep(const, state, obs, prior_logit, carry, reverse, update):
    """One sweep over the slots, carrying only the D-vector residual; O(K D).

    For slot ``l``: feature, then (factor analysis) its weight given ``z_l = 1``, then
    ``b_l`` (:data:`SLOTS`, one function per likelihood). Everything that does not depend on
    the residual is computed for all slots at once before the sequential scan: the feature's
    mean is affine in the residual ``r_l``, ``μ_l = a_l + g_l ⊙ r_l``, with the weights
    ``b_l, ϕ_l`` of the previous sweep.

    * ``paper``: Eqs. 10-11 (weighted by ``b_l``) against the frozen prior, then ossified;
      the logit uses that feature.
    * ``birth`` (the unborn slots, :func:`born_slots`): the
      feature's posterior *given* ``z_l = 1`` (weight 1, not ossified); the logit gets its KL
      from the frozen prior, so for a Gaussian likelihood it is the exact log Bayes factor of
      ``z_l = 1`` with the feature integrated out.
    """
    lam = const.noise_prec
    likelihood_slot = SLOTS[const.kind]
    born = born_slots(const, state)
    b, mean, _, phi, w_var = carry
    mu0, var0, S = state.mean, state.var, state.running_sum
    if update or born is not None:
        weight = b[:, None] if born is None else jnp.where(born, 1.0, b[:, None])
        phic = phi[:, None]
        var_s = 1.0 / (1.0 / var0 + weight * (phic * phic + w_var[:, None]) * lam)  # Eq. 10
        a, g = var_s * mu0 / var0, var_s * (weight * phic) * lam  # Eq. 11: μ* = a + g ⊙ r
        if const.ossify:  # the average of affine maps r -> a + g r is affine (born: commit)
            bc, Sc, keep = b[:, None], S[:, None], True if born is None else ~born
            a, g = ossify(bc, Sc, a, mu0, keep), ossify(bc, Sc, g, 0.0, keep)
            var_s = ossify(bc, Sc, var_s, var0, keep)
    else:
        a, g, var_s = mu0, jnp.zeros_like(mu0), var0
    trace_var = var_s @ lam  # tr(Λ Σ_l)
    integrated = None
    if born is not None:  # the parts of KL(N(μ¹, Σ¹) || N(μ⁰, Σ⁰)) that do not depend on r
        kl_const = jnp.sum(normal_kl(mu0, var_s, mu0, var0), axis=-1)
        integrated = (kl_const, born[:, 0].astype(kl_const.dtype), mu0, var0)
    coef = b * phi  # E[z_k w_k] of the previous sweep
    old = coef[:, None] * mean
    # the carry is the residual r_l = o - Σ_{k≠l} b_k E[w_k] μ_k seen by the current slot; it
    # leaves the slot with the next slot's old contribution added back (`next_old`), so the
    # loop never materialises r and μ as separate kernels
    first = -1 if reverse else 0
    resid = obs - coef @ mean + old[first]
    zero = jnp.zeros_like(old[:1])
    next_old = jnp.concatenate([zero, old[:-1]] if reverse else [old[1:], zero])

    emit = update or born is not None  # the features change: the loop emits them

    def slot(r, x):
        mu = x.offset + x.gain * r
        logit = x.prior_logit
        if x.integrated is not None:
            kl_l, born_l, mu0_l, var0_l = x.integrated
            shift = mu - mu0_l
            logit = logit - born_l * (kl_l + 0.5 * jnp.sum(shift * shift / var0_l))
        scalars, coef_l = likelihood_slot(const, r, mu, logit, x.trace_var)
        # one output array per slot: with several, XLA on CPU copies the (K, D) one per slot
        out = jnp.stack(scalars) if not emit else jnp.concatenate([jnp.stack(scalars), mu])
        return r - coef_l * mu + x.next_old, out

    xs = SlotInputs(next_old, a, g, trace_var, prior_logit, integrated)
    out = lax.scan(slot, resid, xs, reverse=reverse)[1]
    num_scalars = 3 if const.kind == "factor_analysis" else 1
    b = out[:, 0]
    if num_scalars == 3:
        phi, w_var = out[:, 1], out[:, 2]
    features = out[:, num_scalars:] if emit else mu0
    return b, features, var_s, phi, w_var


def fit_generic(const, state, obs, q, prior_logit, *, update_features):
    """Newton / delta-method coordinate ascent on the model's own log-likelihood.

    Each Newton step is safeguarded (see the module docstring): a gradient or curvature that
    is not finite counts as zero, and the step is halved until the slot's objective
    (weighted log-likelihood plus log prior) does not decrease, or dropped.
    """
    mu0, var0, S = state.mean, state.var, state.running_sum
    capacity = mu0.shape[0]

    def loglik(z, a, o):  # in the working dtype (a model's constants may promote it)
        return const.row_log_likelihood(z, a, o).astype(const.dtype)

    born = born_slots(const, state)  # slots scored with the feature integrated out (or None)
    # rounding allowance of the "does not decrease" test: an exact Newton step (Gaussian
    # likelihood) lands on the maximum, where the objective agrees to a few ulps
    slack = 16 * jnp.finfo(const.dtype).eps

    def slot(i, carry, reverse):
        b, mean, var = carry
        l = capacity - 1 - i if reverse else i
        z1 = b.at[l].set(1.0)

        def f(a_l):
            return loglik(z1, mean.at[l].set(a_l), obs)

        def grad_and_curv(a_l):
            g, hv = jax.jvp(jax.grad(f), (a_l,), (jnp.ones_like(a_l),))
            ok = jnp.isfinite(g) & jnp.isfinite(hv)
            # diagonal curvature (factorised likelihood), floored at 0: the step's variance
            # stays below the prior's; a non-finite entry contributes nothing
            return jnp.where(ok, g, 0.0), jnp.where(ok, jnp.maximum(-hv, 0.0), 0.0)

        mu_l, mu0_l, var0_l = mean[l], mu0[l], var0[l]
        born_l = jnp.zeros((), bool) if born is None else born[l, 0]
        weight = jnp.where(born_l, 1.0, b[l])

        def objective(a_l):  # the slot's share of the per-observation objective
            fit = jnp.where(weight > 0, weight * f(a_l), 0.0)
            return fit - 0.5 * jnp.sum((a_l - mu0_l) ** 2 / var0_l)

        def newton(mu_l):
            g, h = grad_and_curv(mu_l)
            var_l = 1.0 / (1.0 / var0_l + weight * h)
            step = var_l * (weight * g - (mu_l - mu0_l) / var0_l)
            start = objective(mu_l)
            floor = start - slack * (1.0 + jnp.abs(start))

            def worse(c):  # NaN and -inf are worse than anything
                return ~(c[2] >= floor) & (c[0] < MAX_HALVINGS)

            def halve(c):
                t = 0.5 * c[1]
                return c[0] + 1, t, objective(mu_l + t * step)

            one = jnp.ones((), step.dtype)
            _, t, value = lax.while_loop(worse, halve, (0, one, objective(mu_l + step)))
            return mu_l + jnp.where(value >= floor, t, 0.0) * step, var_l

        if update_features or born is not None:
            for _ in range(const.newton_steps):
                mu_l, var_l = newton(mu_l)
            if const.ossify:  # born: see commit
                mu_l = ossify(b[l], S[l], mu_l, mu0_l, ~born_l)
                var_l = ossify(b[l], S[l], var_l, var0_l, ~born_l)
            _, h = grad_and_curv(mu_l)
        else:
            var_l = var0_l
            _, h = grad_and_curv(mu_l)
        mean = mean.at[l].set(mu_l)
        f1 = f(mu_l) - 0.5 * jnp.sum(h * var_l)  # E_q(A_l) log p(o | z_l = 1) to 2nd order
        f0 = loglik(b.at[l].set(0.0), mean, obs)
        logit = prior_logit[l] + f1 - f0
        if born is not None:  # KL(N(μ¹, Σ¹) || N(μ⁰, Σ⁰))
            kl = jnp.sum(normal_kl(mu_l, var_l, mu0_l, var0_l))
            logit = logit - jnp.where(born_l, kl, 0.0)
        # both indicator values impossible (-inf - -inf): no evidence, keep the prior's
        logit = jnp.where(jnp.isnan(logit), prior_logit[l], logit)
        b = b.at[l].set(jax.nn.sigmoid(logit))
        return b, mean, var.at[l].set(var_l)

    carry = (q, mu0, var0)
    for step in range(const.num_steps):
        body = functools.partial(slot, reverse=step % 2 == 1)
        carry = lax.fori_loop(0, capacity, body, carry)
    b, mean, var = carry
    if update_features and born is not None:
        mean1, var1 = commit(const, state, b, mean, var)
        mean, var = jnp.where(born, mean1, mean), jnp.where(born, var1, var)
    return b, mean, var, None


JJ_ROUNDS = 3  # alternations of the rows' b and their bound's ξ (fit_bernoulli)


def logit_moments(const, state, b):
    """``(E ψ, E ψ²)`` ``(D,)`` of the logits ``ψ = z @ A + offset`` under ``q(z) = Bernoulli(b)``
    and the features' ``q(A)`` (both factorised)."""
    mu, var = state.mean, state.var
    mean = b @ mu + const.logit_offset
    spread = b @ (mu * mu + var) - (b * b) @ (mu * mu)
    return mean, mean * mean + spread


def bound_curvature(xi):
    """``2 λ(ξ) = tanh(ξ/2) / (2ξ)`` of the Jaakkola–Jordan bound ``log σ(x) ≥ log σ(ξ) +
    (x - ξ)/2 - λ(ξ)(x² - ξ²)`` (1/4 at ``ξ = 0``)."""
    small = jnp.abs(xi) < 1e-3
    safe = jnp.where(small, 1.0, xi)
    return jnp.where(small, 0.25 - xi * xi / 48.0, jnp.tanh(0.5 * safe) / (2.0 * safe))


def bernoulli_row(const, state, obs, q, prior_logit):
    """``(b (K,), prec (D,))``: one row of 0/1 ``obs`` ``(D,)`` fitted through the
    Jaakkola–Jordan bound, features held fixed (``const.kind == "bernoulli"``).

    The bound makes ``log p(o_d | ψ_d)`` the quadratic ``(o_d - ½) ψ_d - ½ P_d ψ_d²`` (up to a
    constant), ``P_d = 2λ(ξ_d)``: the log density of a Gaussian pseudo-observation
    ``y_d = (o_d - ½)/P_d`` of ``ψ_d`` with precision ``P_d``. So ``b`` is the linear-Gaussian
    fit (:func:`fit_closed_form`) of ``y - offset`` with noise precision ``P``, alternated
    ``JJ_ROUNDS`` times with the bound's optimum ``ξ_d² = E ψ_d²`` (from ``ξ = 0``,
    ``P = 1/4``). Jaakkola & Jordan, *Bayesian parameter estimation via variational methods*,
    Statistics and Computing 2000.
    """
    prec = jnp.full(obs.shape, 0.25, const.dtype)
    b = q
    for _ in range(JJ_ROUNDS):
        gaussian = const._replace(kind="linear_gaussian", noise_prec=prec)
        pseudo = (obs - 0.5) / prec - const.logit_offset
        b = fit_closed_form(gaussian, state, pseudo, q, prior_logit, update_features=False)[0]
        prec = bound_curvature(jnp.sqrt(logit_moments(const, state, b)[1]))
    return b, prec


def fit_bernoulli(const, state, obs, q, prior_logit, *, update_features):
    """:func:`bernoulli_row` in :func:`fit`'s form (features held fixed: the memoized update
    solves them from its statistics)."""
    if update_features:
        raise ValueError("the Bernoulli kind fits rows to fixed features (memoized update)")
    return bernoulli_row(const, state, obs, q, prior_logit)[0], state.mean, state.var, None


def bernoulli_bound(const, state, obs, b):
    """The Jaakkola–Jordan lower bound on ``E log p(o | z, A)`` of 0/1 ``obs`` ``(D,)`` at its
    optimal ``ξ² = E ψ²``: ``Σ_d log σ(ξ_d) + (o_d - ½) E ψ_d - ξ_d/2``."""
    mean, second = logit_moments(const, state, b)
    xi = jnp.sqrt(second)
    return jnp.sum(jax.nn.log_sigmoid(xi) + (obs - 0.5) * mean - 0.5 * xi)


def elbo(const, state, obs, q, b, local):
    """ELBO of ``o_n`` under the prior features ``q(A | o_<n)`` and the fitted ``b`` (, w)."""
    mu0, var0 = state.mean, state.var
    kl = jnp.sum(bernoulli_kl(b, q))
    if const.kind == "generic":
        return const.row_log_likelihood(b, mu0, obs) - kl
    if const.kind == "bernoulli":
        return bernoulli_bound(const, state, obs, b) - kl
    lam = const.noise_prec
    if local is None:
        phi, ew2 = jnp.ones_like(b), jnp.ones_like(b)
    else:
        phi, w_var = local
        ew2 = phi**2 + w_var
        kl_w = normal_kl(phi, w_var, const.weight_loc, const.weight_var)
        kl = kl + jnp.sum(b * kl_w)  # q(w_k | z_k = 0) is the prior
    mean = (b * phi) @ mu0
    spread = (b * ew2) @ (mu0**2 + var0) - (b * phi) ** 2 @ mu0**2
    quad = jnp.sum(lam * ((obs - mean) ** 2 + spread))
    ll = -0.5 * quad + 0.5 * jnp.sum(jnp.log(lam / (2 * jnp.pi)))
    return ll - kl
