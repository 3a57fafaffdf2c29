r"""The memoized one-pass update of the R-IBP filter (Gaussian likelihoods, Bernoulli pixels).

The paper's update (:mod:`numpyro_bnp.infer.features.ribp.update`, ``feature_update="paper"``)
moves each
feature once per observation and then *ossifies* it, averaging the move with the feature's old
value, weights ``b_nk`` and ``S_{n-1,k}``; the rows' ``b`` are frozen as they are absorbed. On
data drawn from the model (``python -m numpyro_bnp bench ribp``, ``D = 50``, ``α = 10``) the early
features are blends of the ~10 true features of every row and never change again: the held-out
score is the same after 200 and 10,000 rows. This module keeps the filtering prior (Eq. 5) and
the existence bookkeeping of the paper's update, and changes three things:

* **features from accumulated statistics.** Every absorbed row adds its expected sufficient
  statistics, ``G = Σ_n E[c_n c_nᵀ]`` ``(K, K)`` and ``R = Σ_n E[c_n] o_nᵀ`` ``(K, D)`` with
  ``c_nk = z_nk w_nk`` (``w = 1`` without weights), and the features are the exact Gaussian
  posterior given them, column by column ``(Λ_d G + I/σ²_{A,d}) A_d = Λ_d R_d + μ⁰_d/σ²_{A,d}``
  (:func:`solve_features`; marginal variances from the same factorisation). A feature blended
  early is re-solved as later rows sort out which features they use.
* **a buffer of recent rows, revisited.** The last ``buffer_size`` rows are kept with the
  filtering prior they were fitted against; every ``refresh_every`` rows their ``b`` is fitted
  again under the current features, and their old contribution to ``G, R, S`` replaced by the
  new one (memoized variational inference, Hughes & Sudderth, NIPS 2013). Rows that leave the
  buffer keep their last contribution.
* **births, deletes.** At each refresh, candidate features are grown from the residuals of the
  buffer's rows (:func:`propose_birth`) and the best is born into a free slot when it raises
  the buffer's collapsed marginal likelihood (the exact log Bayes factor of a new feature with
  the feature integrated out) by more than the IBP's prior cost of a new column; a born
  feature whose expected use ``S_k`` falls below ``min_use`` is deleted.

**Bernoulli pixels** (``const.kind == "bernoulli"``: ``o_nd ~ Bernoulli(logits=ψ_nd)``,
``ψ_n = c_n A + b``). Each row's log-likelihood is replaced by its Jaakkola–Jordan lower bound,
a quadratic in ``ψ`` with curvature ``P_nd = 2λ(ξ_nd)`` fitted per row and column
(:func:`~numpyro_bnp.infer.features.ribp.update.bernoulli_row`): the rows are fitted as
linear-Gaussian rows of pseudo-observations, and the statistics become per column,
``G_d = Σ_n P_nd E[c̃_n c̃_nᵀ]`` ``(D, K+1, K+1)`` and ``R = Σ_n E[c̃_n] (o_n - ½)ᵀ``
``(K+1, D)``, with ``c̃_n = (c_n, 1)``: the constant last term carries the offset ``b``.
Rows leaving the buffer keep the curvature they were last fitted with.

**Hyper-parameters.** When the model gives the noise scale or the IBP's mass a prior (a
hyper-parameter site, see :class:`~numpyro_bnp.infer.features.feature_model.HyperSites`), they
start on the
side of more features (a small noise, a large mass: ``HyperSites.init``) and, once the buffer
has been filled, each refresh ends with their MAP given the statistics (an M-step of
variational EM, :func:`~numpyro_bnp.infer.features.ribp.hyper.learn_hyper`); the rows that follow
are fitted at the new values. A Bernoulli's bias (the offset of its logits) is learned from the
first refresh on, before its births.

With no information in the data (``σ_o → ∞``) every ``b`` equals the filtering prior, no
birth is accepted (their Bayes factor is not positive) and nothing is deleted (only born
features are): the filter reproduces :meth:`RecursiveIBP.marginals`, as the paper's update does.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammaln, logsumexp

from numpyro_bnp._math import logit
from numpyro_bnp.infer.features.ribp.hyper import learn_hyper
from numpyro_bnp.infer.features.ribp.update import (
    absorb,
    at_state,
    bernoulli_row,
    clipped_prior,
    elbo,
    fit_closed_form,
    holes,
    info,
)

NUM_GROWTH_STEPS = 4  # k-means-like re-estimations of a birth candidate from its rows
REVISIT_BATCH = 16  # rows one sequential revisit fits at once (lax.map batches)
# coordinate-ascent sweeps of a linear-Gaussian row in a sequential revisit (the filter's own fit
# of a new row makes three): on the benchmark's data (α = 10, D = 50, four seeds) one sweep
# scored better held-out at N = 1,000 and 4,000 in all eight runs (by 0.5 to 3.5 nats per row)
# with fewer spurious features (117-149 against 147-166 at N = 4,000), and halves the revisit
REVISIT_SWEEPS = 1
NUM_PARALLEL_STEPS = 6  # damped parallel mean-field steps of a buffer revisit
PARALLEL_DAMPING = 0.5
BIRTH_NEWTON_STEPS = 12  # safeguarded Newton steps to a Bernoulli birth's feature mode
BIRTH_QUADRATURE_NODES = 16  # Gauss-Hermite nodes of a Bernoulli birth's Bayes factor


class RIBPMemoState(NamedTuple):
    """State of the memoized filter after ``num_seen`` rows (``K`` slots, ``D``, buffer ``B``).

    The first six fields mean what they mean in
    :class:`~numpyro_bnp.infer.features.ribp.update.RIBPState`.

    :ivar gram: ``(K, K)`` ``Σ_n E[c_n c_nᵀ]``, ``c_nk = z_nk w_nk``; Bernoulli:
        ``(D, K+1, K+1)`` ``Σ_n P_nd E[c̃_n c̃_nᵀ]`` (module docstring).
    :ivar cross: ``(K, D)`` ``Σ_n E[c_n] o_nᵀ``; Bernoulli: ``(K+1, D)``
        ``Σ_n E[c̃_n] (o_n - ½)ᵀ``.
    :ivar born: ``(K,)`` bool, slots whose feature a birth move created (only they are deleted).
    :ivar buffer: ``(B, D)`` the last ``B`` rows (row ``n`` at ``(n - 1) % B``).
    :ivar buffer_logit: ``(B, K)`` the logit of the filtering prior each row was fitted against.
    :ivar buffer_use: ``(B, K)`` the rows' ``b`` (their share of ``running_sum``).
    :ivar buffer_coef: ``(B, K)`` the rows' ``E[c]`` (their share of ``gram`` and ``cross``).
    :ivar buffer_moment: ``(B, K)`` the rows' ``E[c²]``.
    :ivar buffer_prec: ``(B, D)`` Bernoulli: the curvature ``P`` of each row's bound (its share
        of ``gram``); ``(B, 0)`` otherwise.
    :ivar obs_moment: ``(D,)`` ``Σ_n o_n²``.
    :ivar hyper: ``(P,)`` the hyper-parameter sites' values, flat (``P = 0`` without them).
    """

    mean: jnp.ndarray
    var: jnp.ndarray
    running_sum: jnp.ndarray
    existence: jnp.ndarray
    num_seen: jnp.ndarray
    truncation: jnp.ndarray
    gram: jnp.ndarray
    cross: jnp.ndarray
    born: jnp.ndarray
    buffer: jnp.ndarray
    buffer_logit: jnp.ndarray
    buffer_use: jnp.ndarray
    buffer_coef: jnp.ndarray
    buffer_moment: jnp.ndarray
    buffer_prec: jnp.ndarray
    obs_moment: jnp.ndarray
    hyper: jnp.ndarray


class MemoOptions(NamedTuple):
    """The memoized update's options (see :class:`~numpyro_bnp.infer.RIBPFilter`)."""

    buffer_size: int
    refresh_every: int
    max_births: int
    num_seeds: int
    min_use: float


def empty(const, options, capacity):
    """The state of no rows with ``capacity`` slots (every feature at its prior)."""
    dim, dt = const.feature_loc.shape[0], const.dtype
    size = options.buffer_size
    bernoulli = const.kind == "bernoulli"
    terms = capacity + bernoulli  # Bernoulli: the constant term c̃_{K+1} = 1
    return RIBPMemoState(
        mean=jnp.broadcast_to(const.feature_loc, (capacity, dim)),
        var=jnp.broadcast_to(const.feature_var, (capacity, dim)),
        running_sum=jnp.zeros(capacity, dt),
        existence=jnp.zeros(capacity, dt),
        num_seen=jnp.zeros((), jnp.int32),
        truncation=jnp.zeros((), dt),
        gram=jnp.zeros((dim, terms, terms) if bernoulli else (capacity, capacity), dt),
        cross=jnp.zeros((terms, dim), dt),
        born=jnp.zeros(capacity, bool),
        buffer=jnp.zeros((size, dim), dt),
        buffer_logit=jnp.zeros((size, capacity), dt),
        buffer_use=jnp.zeros((size, capacity), dt),
        buffer_coef=jnp.zeros((size, capacity), dt),
        buffer_moment=jnp.zeros((size, capacity), dt),
        buffer_prec=jnp.zeros((size, dim if bernoulli else 0), dt),
        obs_moment=jnp.zeros(dim, dt),
        hyper=jnp.asarray([] if const.hyper is None else const.hyper.init, dt),
    )


def _insert_slots(x, at, extra, axis):
    """``x`` with ``extra`` zeros inserted before index ``at`` of ``axis``."""
    shape = list(x.shape)
    shape[axis] = extra
    head, tail = jnp.split(x, [at], axis=axis)
    return jnp.concatenate([head, jnp.zeros(shape, x.dtype), tail], axis=axis)


def grow(const, state, grown, extra):
    """The memoized fields of ``state`` padded with ``extra`` fresh slots, into ``grown`` (its
    feature fields already padded): no statistics for them (before a Bernoulli's constant
    term), and the smallest prior for them in the buffer's rows (they did not exist when the
    rows were fitted)."""
    size = state.mean.shape[0]
    floor = logit(jnp.finfo(const.dtype).eps)
    rows = state.buffer.shape[0]
    gram = _insert_slots(_insert_slots(state.gram, size, extra, -1), size, extra, -2)
    return grown._replace(
        gram=gram,
        cross=_insert_slots(state.cross, size, extra, 0),
        born=jnp.concatenate([state.born, jnp.zeros(extra, bool)]),
        buffer_logit=jnp.concatenate(
            [state.buffer_logit, jnp.full((rows, extra), floor, const.dtype)], axis=1
        ),
        **{
            f: _insert_slots(getattr(state, f), size, extra, 1)
            for f in ("buffer_use", "buffer_coef", "buffer_moment")
        },
    )


def coefficients(b, local):
    """``(E[c], E[c²])`` of ``c_k = z_k w_k`` from ``b`` and the weights' ``(ϕ, Φ)`` given
    ``z = 1`` (``local``; ``None`` without weights: ``c = z``)."""
    if local is None:
        return b, b
    phi, w_var = local
    return b * phi, b * (phi * phi + w_var)


def statistics(coef, moment, obs, weight, prec=None):
    """``(Σ_n w_n E[c_n c_nᵀ], Σ_n w_n E[c_n] o_nᵀ)`` of rows ``obs`` ``(B, D)`` with
    coefficients ``coef``, ``moment`` ``(B, K)`` and row weights ``weight`` ``(B,)``.

    With the Bernoulli rows' curvatures ``prec`` ``(B, D)``: ``(Σ_n w_n P_nd E[c̃_n c̃_nᵀ]``
    ``(D, K+1, K+1)``, ``Σ_n w_n E[c̃_n] (o_n - ½)ᵀ`` ``(K+1, D))``, ``c̃_n = (c_n, 1)``."""
    if prec is None:
        weighted = coef * weight[:, None]
        gram = weighted.T @ coef + jnp.diag(weight @ (moment - coef * coef))
        return gram, weighted.T @ obs
    ones = jnp.ones_like(coef[:, :1])
    coef, moment = jnp.concatenate([coef, ones], 1), jnp.concatenate([moment, ones], 1)
    scaled = prec * weight[:, None]
    gram = jnp.einsum("nd,nk,nl->dkl", scaled, coef, coef)
    spread = jnp.einsum("nd,nk->dk", scaled, moment - coef * coef)
    gram = gram + jax.vmap(jnp.diag)(spread)
    return gram, (coef * weight[:, None]).T @ (obs - 0.5)


def row_prec(state):
    """The buffer rows' curvatures ``(B, D)`` (Bernoulli), else ``None``."""
    return state.buffer_prec if state.buffer_prec.shape[1] else None


def solve_features(const, gram, cross):
    """Posterior means and marginal variances ``(K, D)`` of the features given the statistics.

    Column ``d`` solves ``(Λ_d G + I/σ²_{A,d}) A_d = Λ_d R_d + μ⁰_d/σ²_{A,d}``, i.e.
    ``(G + r_d I) A_d = R_d + r_d μ⁰_d`` with ``r_d = 1/(Λ_d σ²_{A,d})``, variances
    ``diag((G + r_d I)⁻¹)/Λ_d``. When ``r_d`` is the same for every column (one noise scale and
    one prior scale) one Cholesky factor serves them all, else one per column. Should rounding
    in the accumulated ``G`` make a factor fail (NaN), one eigendecomposition ``G = U diag(s)
    Uᵀ`` with ``s`` clipped at 0 serves every column instead. (The eigendecomposition is not
    the first choice: on CPU it took 100 ms at 65-255 slots, against 0.15 ms for a factor.)
    """
    lam, loc, var0 = const.noise_prec, const.feature_loc, const.feature_var
    ratio = 1.0 / (lam * var0)  # (D,)
    eye = jnp.eye(gram.shape[0], dtype=gram.dtype)

    def factored(r, rhs):  # (G + r I)⁻¹ rhs and diag((G + r I)⁻¹) for one r
        factor = jnp.linalg.cholesky(gram + r * eye)
        solved = jax.scipy.linalg.cho_solve((factor, True), jnp.concatenate([rhs, eye], 1))
        return solved[:, : rhs.shape[1]], jnp.diag(solved[:, rhs.shape[1] :])

    def by_cholesky(_):
        rhs = cross + loc * ratio

        def shared(_):
            mean, inverse = factored(ratio[0], rhs)
            return mean, inverse[:, None] / lam

        def per_column(_):
            mean, inverse = jax.vmap(factored, in_axes=(0, 1), out_axes=1)(ratio, rhs[:, :, None])
            return mean[:, :, 0], inverse / lam

        return lax.cond(jnp.all(ratio == ratio[0]), shared, per_column, None)

    def by_eigh(_):
        s, u = jnp.linalg.eigh(gram)
        precision = lam * jnp.maximum(s, 0.0)[:, None] + 1.0 / var0  # (K, D)
        rhs = lam * cross + loc / var0
        return u @ ((u.T @ rhs) / precision), (u * u) @ (1.0 / precision)

    mean, var = by_cholesky(None)
    failed = ~(jnp.all(jnp.isfinite(mean)) & jnp.all(jnp.isfinite(var)))
    return lax.cond(failed, by_eigh, lambda _: (mean, var), None)


def solve_bernoulli_features(const, gram, cross):
    """:func:`solve_features` for the Bernoulli statistics (module docstring): column ``d``
    solves ``(G_d + I/σ²_{A,d}) A_d = R_d - b_d g_d + μ⁰_d/σ²_{A,d}``, where ``G_d``, ``g_d``
    are the feature block and the constant term's column of ``gram[d]`` and ``b`` the logits'
    offset; a Cholesky factor per column (the clipped eigendecomposition where one fails)."""
    loc, var0, offset = const.feature_loc, const.feature_var, const.logit_offset
    size = gram.shape[-1] - 1
    block, link = gram[:, :size, :size], gram[:, :size, size]  # (D, K, K), (D, K)
    rhs = cross[:size].T - offset[:, None] * link + (loc / var0)[:, None]  # (D, K)
    eye = jnp.eye(size, dtype=gram.dtype)

    def by_cholesky(block_d, rhs_d, var0_d):
        factor = jnp.linalg.cholesky(block_d + eye / var0_d)
        solved = jax.scipy.linalg.cho_solve(
            (factor, True), jnp.concatenate([rhs_d[:, None], eye], 1)
        )
        return solved[:, 0], jnp.diag(solved[:, 1:])

    def by_eigh(block_d, rhs_d, var0_d):
        s, u = jnp.linalg.eigh(block_d)
        precision = jnp.maximum(s, 0.0) + 1.0 / var0_d
        return u @ ((u.T @ rhs_d) / precision), (u * u) @ (1.0 / precision)

    mean, var = jax.vmap(by_cholesky)(block, rhs, var0)
    failed = ~(jnp.all(jnp.isfinite(mean)) & jnp.all(jnp.isfinite(var)))
    mean, var = lax.cond(
        failed, lambda _: jax.vmap(by_eigh)(block, rhs, var0), lambda _: (mean, var), None
    )
    return mean.T, var.T


def solve(const, state):
    """``state`` with its features solved from its statistics."""
    by = solve_bernoulli_features if const.kind == "bernoulli" else solve_features
    mean, var = by(const, state.gram, state.cross)
    return state._replace(mean=mean, var=var)


def absorb_row(const, options, state, obs, take=True):
    """Absorb one row ``obs`` ``(D,)`` with the features held fixed (no refresh): its ``b``
    is fitted against the filtering prior and frozen into the existence bookkeeping (as in the
    paper's update), its statistics added, and the row put into the buffer.

    ``take``: a boolean scalar; where it is False the state comes back unchanged. The choice
    is made field by field (the buffers by their one row), not by a conditional on the whole
    state: a ``lax.cond`` per row copies the buffers on CPU (absorbing alone, 128 slots,
    D = 50, XLA's default runtime: 7,800 rows/s with it, 10,900 without). Returns
    ``(state, (b, score, beyond))``.
    """
    obs = jnp.asarray(obs, const.dtype)
    const = at_state(const, state)
    q, prior_logit = clipped_prior(const, state)
    local = prec = None
    if const.kind == "bernoulli":
        b, prec = bernoulli_row(const, state, obs, q, prior_logit)
    else:
        b, _, _, local = fit_closed_form(const, state, obs, q, prior_logit, update_features=False)
    score = elbo(const, state, obs, q, b, local)
    running_sum, existence, num_seen, truncation, beyond = absorb(const, state, q, b)
    coef, moment = coefficients(b, local)
    gram, cross = statistics(
        coef[None],
        moment[None],
        obs[None],
        jnp.ones(1, const.dtype),
        None if prec is None else prec[None],
    )

    def kept(new, old):
        return new if take is True else jnp.where(take, new, old)

    slot = state.num_seen % options.buffer_size

    def written(buffer, row):  # one row of a buffer, the old one where the row is not taken
        return buffer.at[slot].set(kept(row, buffer[slot]))

    new = state._replace(
        running_sum=kept(running_sum, state.running_sum),
        existence=kept(existence, state.existence),
        num_seen=kept(num_seen, state.num_seen),
        truncation=kept(truncation, state.truncation),
        gram=kept(state.gram + gram, state.gram),
        cross=kept(state.cross + cross, state.cross),
        obs_moment=kept(state.obs_moment + obs * obs, state.obs_moment),
        buffer=written(state.buffer, obs),
        buffer_logit=written(state.buffer_logit, prior_logit),
        buffer_use=written(state.buffer_use, b),
        buffer_coef=written(state.buffer_coef, coef),
        buffer_moment=written(state.buffer_moment, moment),
    )
    if prec is not None:
        new = new._replace(buffer_prec=written(state.buffer_prec, prec))
    return new, (b, score, beyond)


def _refresh_if_due(const, options, state):
    due = state.num_seen % options.refresh_every == 0
    return lax.cond(due, lambda s: refresh(const, options, s), lambda s: s, state)


def update(const, options, state, obs):
    """Absorb one row ``obs`` ``(D,)`` (:func:`absorb_row`), then :func:`refresh` when the
    number of rows absorbed is a multiple of ``refresh_every``. Pure and jittable; returns
    ``(state, info)``. A stream runs through :func:`chunk_scanner` instead, which gives the
    same states faster."""
    new, (b, score, beyond) = absorb_row(const, options, state, obs)
    new = _refresh_if_due(const, options, new)
    return new, info(const, new, jnp.sum(b), score, beyond)


def chunk_scanner(const, options):
    """The compiled ``scan_chunk(state, chunk (C, D), valid (C,)) -> (state, infos)``.

    The same states as :func:`update` row after row, but the refresh's conditional (which
    copies the whole state, buffer included) is taken once per ``refresh_every`` rows, not
    per row: the chunk is shifted so that the groups of ``refresh_every`` rows end where the
    number of rows absorbed is a multiple of ``refresh_every``, each group is scanned row by
    row, and a group's end refreshes when it is due (a group cut short by the chunk's end
    leaves the refresh to the next chunk).
    """
    group = options.refresh_every

    def row(state, inputs):
        obs, ok = inputs
        new, (b, score, beyond) = absorb_row(const, options, state, obs, take=ok)
        out = info(const, new, jnp.sum(b), score, beyond)
        return new, jax.tree.map(lambda t: jnp.where(ok, t, jnp.zeros_like(t)), out)

    def one_group(state, inputs):
        state, infos = lax.scan(row, state, inputs)
        absorbed = jnp.any(inputs[1])
        state = lax.cond(
            absorbed & (state.num_seen % group == 0),
            lambda s: refresh(const, options, s),
            lambda s: s,
            state,
        )
        # a refresh changes the counts: the group's last row reports them after it
        last = info(const, state, infos.num_used[-1], infos.elbo[-1], infos.truncation[-1])
        infos = jax.tree.map(
            lambda trace, end: trace.at[-1].set(jnp.where(inputs[1][-1], end, trace[-1])),
            infos,
            last,
        )
        return state, infos

    @jax.jit
    def scan_chunk(state, chunk, valid):
        size = chunk.shape[0]
        padded = -(-(size + group - 1) // group) * group
        shift = state.num_seen % group
        rows = lax.dynamic_update_slice(
            jnp.zeros((padded, *chunk.shape[1:]), chunk.dtype),
            chunk,
            (shift, jnp.zeros_like(shift)),
        )
        ok = lax.dynamic_update_slice(jnp.zeros(padded, bool), valid, (shift,))
        grouped = (rows.reshape(-1, group, *chunk.shape[1:]), ok.reshape(-1, group))
        state, infos = lax.scan(one_group, state, grouped)
        infos = jax.tree.map(lambda t: lax.dynamic_slice_in_dim(t.reshape(-1), shift, size), infos)
        return state, infos

    return scan_chunk


def _valid_rows(options, state):
    return (jnp.arange(options.buffer_size) < state.num_seen).astype(state.gram.dtype)


def _replace_rows(state, weight, use, coef, moment, prec=None):
    """``state`` with the buffer rows' contributions replaced by ``use, coef, moment`` (and,
    Bernoulli, the curvatures ``prec``; by default the rows keep theirs)."""
    old_prec = row_prec(state)
    prec = old_prec if prec is None else prec
    gram_old, cross_old = statistics(
        state.buffer_coef, state.buffer_moment, state.buffer, weight, old_prec
    )
    gram_new, cross_new = statistics(coef, moment, state.buffer, weight, prec)
    running_sum = state.running_sum + weight @ (use - state.buffer_use)
    state = state._replace(
        gram=state.gram + gram_new - gram_old,
        cross=state.cross + cross_new - cross_old,
        running_sum=jnp.maximum(running_sum, 0.0),
        buffer_use=use,
        buffer_coef=coef,
        buffer_moment=moment,
    )
    return state if prec is None else state._replace(buffer_prec=prec)


def fit_rows(const, mean, var, obs, prior_logit, use):
    """Parallel mean-field fit of linear-Gaussian rows ``obs`` ``(B, D)`` to fixed features.

    Every slot of every row is updated at once from the others' current values (a damped
    Jacobi version of the sequential sweep of
    :func:`~numpyro_bnp.infer.features.ribp.update.fit_closed_form`, with the same slot equation,
    paper
    App. B.2), ``NUM_PARALLEL_STEPS`` times from ``use`` (``b`` ``(B, K)``, the rows' last fit):
    matrix products instead of a sequential loop over the slots (15 ms -> 2 ms for 256 rows and
    128 slots). ``prior_logit``: ``(B, K)``.

    :return: ``(B, K)`` ``b``.
    """
    lam_mean = mean * const.noise_prec
    quad = jnp.sum(lam_mean * mean, axis=1)  # μ_kᵀΛμ_k
    second = quad + var @ const.noise_prec  # E[A_k Λ A_kᵀ]
    projected = obs @ lam_mean.T  # (B, K) o_nᵀΛμ_k
    overlap = lam_mean @ mean.T  # (K, K) μ_kᵀΛμ_l
    for _ in range(NUM_PARALLEL_STEPS):
        data = projected - use @ overlap + use * quad  # r_kᵀΛμ_k, r_k without slot k
        fitted = jax.nn.sigmoid(prior_logit + data - 0.5 * second)
        use = use + PARALLEL_DAMPING * (fitted - use)
    return use


def revisit(const, options, state, sequential=True):
    """Fit the buffer's rows again under the current features, replace their contributions and
    re-solve the features.

    ``sequential``: each row from and against the prior it was first fitted against, by the
    filter's sequential coordinate ascent (features held fixed; linear-Gaussian rows with
    :data:`REVISIT_SWEEPS` sweeps); else (linear-Gaussian only)
    :func:`fit_rows`, damped parallel steps from the rows' last fit. :func:`refresh` uses the
    parallel fit before its births (their proposals only need the residuals) and the sequential
    one after them: parallel fits in both places read NLL 102.8 / 101.6 after 1,000 / 4,000 rows
    of the benchmark's data (α = 10, D = 50), sequential fits in both 98.8 / 93.3, this mix
    99.3 / 94.0 (16 parallel steps instead of 6: 102.6 / 101.0; parallel from the prior: 453
    features for 97), all with three sweeps per sequential fit. On 300 other held-out rows of
    the same generator the mix reads 101.0 / 97.1 with three sweeps and 99.7 / 93.6 with
    :data:`REVISIT_SWEEPS` = 1.
    """

    def fit_row(obs, prior_logit):
        q = jax.nn.sigmoid(prior_logit)
        if const.kind == "bernoulli":
            b, prec = bernoulli_row(const, state, obs, q, prior_logit)
            return b, b, b, prec
        fit_const = const
        if const.kind == "linear_gaussian":  # factor analysis keeps its sweeps (not measured)
            fit_const = const._replace(num_steps=REVISIT_SWEEPS)
        b, _, _, local = fit_closed_form(
            fit_const, state, obs, q, prior_logit, update_features=False
        )
        return (b, *coefficients(b, local), None)

    prec = None
    if sequential or const.kind != "linear_gaussian":  # factor analysis: a parallel fit of
        # the weights oscillated to NaN
        use, coef, moment, prec = lax.map(
            lambda x: fit_row(*x), (state.buffer, state.buffer_logit), batch_size=REVISIT_BATCH
        )
    else:
        use = fit_rows(
            const, state.mean, state.var, state.buffer, state.buffer_logit, state.buffer_use
        )
        coef = moment = use
    state = _replace_rows(state, _valid_rows(options, state), use, coef, moment, prec)
    return solve(const, state)


def propose_birth(const, options, state):
    """The best new feature grown from the residuals of the buffer's rows.

    Seeds are the ``num_seeds`` rows with the largest residual energy ``rᵀΛr``. From each, a
    candidate value ``a`` and its rows ``T`` are re-estimated ``NUM_GROWTH_STEPS`` times: ``T``
    are the rows whose residual ``a`` reduces, ``Λ``-weighted ``rᵀΛa > aᵀΛa / 2``, and ``a``
    the posterior mean of a feature used by exactly those rows. A candidate is scored by the
    exact log Bayes factor of the rows ``T`` using a new feature, with the feature integrated
    out (per dimension, ``log N(r_T; μ⁰1, σ²11ᵀ + Λ⁻¹I) - log N(r_T; 0, Λ⁻¹I)``), plus the
    log of the two-parameter IBP's factor for a new column used by ``m = |T|`` of the ``n``
    rows, ``αβ B(m, n - m + β)``.

    Bernoulli rows: the candidates grow and are ranked in the space of their bounds'
    pseudo-observations ``(o - ½)/P - b``, with precisions ``P`` ``(B, D)`` in place of
    ``Λ``, but the best one is scored and valued with the Bernoulli likelihood itself
    (:func:`bernoulli_birth`): the bound, tight only at the rows' current logits, put the best
    candidate's log Bayes factor on binarized digits at 47 where the likelihood gives 116 (by
    quadrature), below the IBP's cost of the column (69), and the stream stalled at 3
    features. (Scoring every candidate that way made a refresh 4 times slower.)

    :return: ``(score, log_bayes_factor, rows (B,), value (D,), variance (D,))`` of the best
        candidate (``variance``: its posterior variance); ``score`` is ``-inf`` when no
        candidate has two rows.
    """
    loc, var0 = const.feature_loc, const.feature_var
    prec = row_prec(state)
    bernoulli = prec is not None
    if bernoulli:
        logits = state.buffer_coef @ state.mean + const.logit_offset
        target = (state.buffer - 0.5) / prec - const.logit_offset
    else:
        target, prec = state.buffer, jnp.broadcast_to(const.noise_prec, state.buffer.shape)
    valid = _valid_rows(options, state) > 0
    resid = target - state.buffer_coef @ state.mean
    energy = jnp.where(valid, jnp.sum(prec * resid * resid, axis=1), -jnp.inf)
    seeds = lax.top_k(energy, options.num_seeds)[1]
    alpha, beta = const.ibp.alpha, const.ibp.beta
    num_seen = state.num_seen.astype(const.dtype)
    weighted = prec * resid

    def grow(seed):
        value = resid[seed]
        for _ in range(NUM_GROWTH_STEPS):
            gain = weighted @ value - 0.5 * prec @ (value * value)
            rows = ((gain > 0) & valid).astype(const.dtype)
            count = jnp.sum(rows)
            precision, total = rows @ prec, rows @ weighted  # (D,): Σ_T P, Σ_T P r
            value = (total + loc / var0) / (precision + 1.0 / var0)
        centred = total - precision * loc
        log_bf = jnp.sum(
            loc * total
            - 0.5 * precision * loc * loc
            + 0.5 * centred * centred / (precision + 1.0 / var0)
            - 0.5 * jnp.log1p(precision * var0)
        )
        m = jnp.maximum(count, 1.0)
        log_column = (
            jnp.log(alpha * beta)
            + gammaln(m)
            + gammaln(num_seen - m + beta)
            - gammaln(num_seen + beta)
        )
        score = jnp.where(count >= 2, log_bf + log_column, -jnp.inf)
        return score, log_bf, rows, value, 1.0 / (precision + 1.0 / var0), log_column

    candidates = jax.vmap(grow)(seeds)
    score, log_bf, rows, value, variance, log_column = (
        c[jnp.argmax(candidates[0])] for c in candidates
    )
    if bernoulli:
        log_bf, value, variance = bernoulli_birth(const, state.buffer, logits, rows)
        score = jnp.where(jnp.isfinite(score), log_bf + log_column, -jnp.inf)
    return score, log_bf, rows, value, variance


def bernoulli_birth(const, obs, logits, rows):
    """``(log_bayes_factor, mean (D,), variance (D,))`` of a new feature ``a`` used by the
    rows ``rows`` ``(B,)`` (0/1) of 0/1 ``obs`` ``(B, D)`` whose logits are ``logits`` without
    it: ``Σ_d log ∫ N(a_d; μ⁰_d, σ²_{A,d}) Π_{n ∈ rows} σ(s_nd (ψ_nd + a_d)) da_d`` minus the
    same without ``a`` (``s = 2o - 1``), by Gauss-Hermite quadrature centred at the mode of
    each integrand (``BIRTH_NEWTON_STEPS`` Newton steps; its curvature sets the width); the
    mode and the inverse curvature are the feature's Laplace moments."""
    loc, var0 = const.feature_loc, const.feature_var
    sign = 2.0 * obs - 1.0

    def log_integrand(a):  # (..., D)
        fit = jnp.einsum(
            "n,...nd->...d", rows, jax.nn.log_sigmoid(sign * (logits + a[..., None, :]))
        )
        return fit - 0.5 * (a - loc) ** 2 / var0 - 0.5 * jnp.log(2 * jnp.pi * var0)

    def curvature(a):
        p = jax.nn.sigmoid(sign * (logits + a))
        return rows @ (p * (1.0 - p)) + 1.0 / var0, rows @ (sign * (1.0 - p)) - (a - loc) / var0

    # Newton's step where it raises the (concave) integrand, else the step under Böhning's
    # bound on the curvature (1/4 per row: it always raises it); a plain Newton step from the
    # prior overshot to logits of ±1e4 where few rows' probabilities were not saturated
    bound = 0.25 * jnp.sum(rows) + 1.0 / var0
    mode = loc
    for _ in range(BIRTH_NEWTON_STEPS):
        h, g = curvature(mode)
        newton = mode + g / h
        better = log_integrand(newton) >= log_integrand(mode)
        mode = jnp.where(better, newton, mode + g / bound)
    h = curvature(mode)[0]
    x, w = np.polynomial.hermite.hermgauss(BIRTH_QUADRATURE_NODES)
    x, w = jnp.asarray(x, const.dtype), jnp.asarray(w, const.dtype)
    width = jnp.sqrt(2.0 / h)
    nodes = mode + width * x[:, None]  # (G, D)
    log_integral = logsumexp(jnp.log(w)[:, None] + x[:, None] ** 2 + log_integrand(nodes), axis=0)
    base = rows @ jax.nn.log_sigmoid(sign * logits)
    return jnp.sum(log_integral + jnp.log(width) - base), mode, 1.0 / h


def birth(const, options, state):
    """One birth move: :func:`propose_birth`, accepted into the first free slot when its score
    and its Bayes factor are positive. A wanted birth with no free slot sets ``truncation`` to
    1 (the stream then grows the capacity, or warns)."""
    # the candidate's variance: that of a feature used by exactly its rows (the rows are then
    # fitted to it before the features are solved again)
    score, log_bf, rows, value, variance = propose_birth(const, options, state)
    wanted = (score > 0) & (log_bf > 0)
    free = (state.existence < const.retire_threshold) & ~state.born
    slot = jnp.argmax(free)
    accept = wanted & jnp.any(free)

    def take(state):
        weight = _valid_rows(options, state)
        column = rows * weight
        use = state.buffer_use.at[:, slot].set(column)
        coef = state.buffer_coef.at[:, slot].set(column)
        moment = state.buffer_moment.at[:, slot].set(column)
        state = _replace_rows(state, weight, use, coef, moment)
        eps = jnp.finfo(const.dtype).eps
        if const.kind == "bernoulli":
            # the buffer's rows were fitted against the prior of creating this feature (logits
            # of -7 to -16 on binarized digits), too little for a Bernoulli row's evidence:
            # the revisit switched a born feature off in every row at once. They are revisited
            # against the IBP's prior of taking an existing dish used by the candidate's rows,
            # m / (B + β). For Gaussian rows the same change was mixed (held-out -12.7 instead
            # of -9.2 after 300 rows at D = 10, α = 3; NLL 87.8 instead of 90.2 after 10,000 at
            # D = 50): they keep theirs.
            taken = jnp.sum(column) / (jnp.sum(weight) + const.ibp.beta)
            taken = jnp.clip(taken, eps, 1.0 - eps)
            logit_taken = jnp.log(taken) - jnp.log1p(-taken)
            state = state._replace(buffer_logit=state.buffer_logit.at[:, slot].set(logit_taken))
        return state._replace(
            existence=state.existence.at[slot].set(1.0 - eps),
            born=state.born.at[slot].set(True),
            mean=state.mean.at[slot].set(value),
            var=state.var.at[slot].set(variance),
        )

    state = lax.cond(accept, take, lambda s: s, state)
    full = wanted & ~jnp.any(free)
    return state._replace(truncation=jnp.where(full, 1.0, state.truncation).astype(const.dtype))


def delete_unused(const, options, state):
    """Remove the born features whose expected use ``S_k`` is below ``min_use``: their
    statistics, buffer columns, existence and birth flag are zeroed (the slot is free again)."""
    keep = ~(state.born & (state.running_sum < options.min_use))
    keep_f = keep.astype(const.dtype)
    keep_terms = _with_constant_term(state, keep_f, jnp.ones(1, const.dtype))
    return state._replace(
        gram=state.gram * keep_terms[:, None] * keep_terms[None],
        cross=state.cross * keep_terms[:, None],
        running_sum=state.running_sum * keep_f,
        existence=state.existence * keep_f,
        born=state.born & keep,
        buffer_use=state.buffer_use * keep_f,
        buffer_coef=state.buffer_coef * keep_f,
        buffer_moment=state.buffer_moment * keep_f,
    )


def _with_constant_term(state, per_slot, constant):
    """``per_slot`` ``(K,)``, followed by ``constant`` when the statistics have a constant
    term (Bernoulli)."""
    if state.cross.shape[0] > per_slot.shape[0]:
        return jnp.concatenate([per_slot, constant])
    return per_slot


def retire_holes(const, state):
    """Move the holes (slots with existence below ``retire_threshold`` before a live slot) behind
    the live slots, keeping the live slots' order, with every slot-indexed field."""
    order = holes(const, state.existence)[1]
    terms = _with_constant_term(state, order, jnp.full(1, order.shape[0], order.dtype))
    return state._replace(
        mean=state.mean[order],
        var=state.var[order],
        running_sum=state.running_sum[order],
        existence=state.existence[order],
        gram=state.gram[..., terms, :][..., terms],
        cross=state.cross[terms],
        born=state.born[order],
        buffer_logit=state.buffer_logit[:, order],
        buffer_use=state.buffer_use[:, order],
        buffer_coef=state.buffer_coef[:, order],
        buffer_moment=state.buffer_moment[:, order],
    )


def refresh(const, options, state):
    """Revisit the buffer (parallel fit; not for Bernoulli rows), learn a Bernoulli's bias, try
    ``max_births`` births, revisit again (sequential fit), delete unused born features, retire
    holes and learn the hyper-parameters (if any); the features are then solved from the
    statistics."""
    model_const = const
    const = at_state(model_const, state)
    if const.kind != "bernoulli":  # Bernoulli: the births read the rows' last fits (a
        # second sequential revisit made a refresh twice as slow and scored no better)
        state = revisit(const, options, state, sequential=False)
    if const.hyper is not None and np.any(const.hyper.offset_mask):
        # a Bernoulli's bias before the births: else the first births, from rows whose
        # logits the bias (at its prior's median) leaves too high, include a feature that
        # every row uses in the bias's place
        state = learn_hyper(model_const, state, jnp.asarray(const.hyper.offset_mask))
        const = at_state(model_const, state)
    state = lax.fori_loop(0, options.max_births, lambda _, s: birth(const, options, s), state)
    state = revisit(const, options, state)
    state = retire_holes(const, delete_unused(const, options, state))
    if const.hyper is not None:
        # the noise and the mass are held at their start until the buffer is full: learned from
        # the first refreshes, the noise absorbs what the few features born by then leave, and
        # births stop (D = 50, from the prior's median: σ_o 2.0 and 9 features after 2,000
        # rows, 1.5 and 30 with the wait); a Bernoulli's bias is learned from the start
        full = state.num_seen >= options.buffer_size
        state = learn_hyper(model_const, state, full | jnp.asarray(const.hyper.offset_mask))
        const = at_state(model_const, state)
    return solve(const, state)
