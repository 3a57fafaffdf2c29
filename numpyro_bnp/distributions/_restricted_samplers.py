r"""The five prior samplers of the restricted IBP, used by :class:`RestrictedIBP`.

Doshi-Velez & Williamson, *Restricted Indian Buffet Processes*, Statistics and Computing 2017
("paper B"), §5; the samplers are labelled S1–S5 as in :class:`RestrictedIBP`.

Each sampler builder takes static sizes and returns ``one(key, alpha, concentration, log_f)``,
one draw of an ``N x K`` matrix (not yet in left-ordered form) and its diagnostics
``(num_rejections, exhausted, overflow, num_instantiated)``:

* :func:`_collapsed` — S1, exact collapsed rejection through an IBP subsequence (§5.1);
* :func:`_uncollapsed` — S2–S4 given a truncated beta process: plain rejection, Esscher-tilted
  rejection and draw-by-draw inclusion sampling (§5.2; rows by :func:`_rows_given_probs`);
* :func:`_retrospective` — S5, exact uncollapsed rejection with a lazily instantiated tail (§5.3,
  corrected; see its docstring).

The building blocks are the truncated beta process (:func:`_weak_limit_probs`, paper B Eq. 13,
and :func:`_stick_breaking_log_probs`, Eq. 14) and the bounded row-by-row rejection loop
(:func:`_rejection_rows`). Every sampler draws ``J_n ~ f`` first and then samples conditionally
on ``J_n`` (the f-mixture; see :mod:`numpyro_bnp.distributions.restricted_ibp`).
"""

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.scipy.special import logsumexp

from numpyro_bnp._math import logit, poisson_binomial_log_pmf
from numpyro_bnp.distributions._conditional_bernoulli import (
    conditional_bernoulli_draw_by_draw,
    tilts,
)


# ---------------------------------------------------------------------------- truncated BP
def _weak_limit_probs(key, alpha, concentration, num_atoms):
    """Weak-limit beta process: ``π_i ~ Beta(cα/I, c - cα/I)`` i.i.d. (paper B Eq. 13; needs I > α).

    Private stand-in for the shared beta-process class (to be swapped when it exists).
    """
    a = concentration * alpha / num_atoms
    return random.beta(key, a, concentration - a, (num_atoms,), jnp.result_type(alpha))


def _stick_breaking_log_probs(key, alpha, num_atoms):
    """Size-ordered stick-breaking, ``c = 1``: ``log π_i = Σ_{j<=i} log u_j``, ``u_j ~ Beta(α, 1)``.

    Paper B Eq. 14 prints ``u_i`` inside the product; the product runs over ``u_j`` (Teh, Görür &
    Ghahramani 2007). ``Beta(α, 1) = U^{1/α}``, so ``log u_j = log U_j / α`` exactly. Private
    stand-in for the shared beta-process class (to be swapped when it exists).
    """
    log_u = jnp.log(random.uniform(key, (num_atoms,), jnp.result_type(alpha))) / alpha
    return jnp.cumsum(log_u)


# ---------------------------------------------------------------------------- row loops
def _rejection_rows(key, num_rows, width, count_logits, propose, state, max_rejections):
    """Rows by rejection: per row draw ``J_n ~ f`` once, then propose until ``propose`` accepts.

    ``propose(state, key, J) -> (state, z, accepted)`` may carry state across proposals and rows
    (the collapsed and retrospective samplers do); it is not called for rows with ``J_n = 0``, which
    are zero. The total number of rejections of the matrix is
    bounded by ``max_rejections``; when the bound is hit the loop stops, the remaining rows are
    zero and ``exhausted`` is True. Returns ``(z (N, width), state, num_rejections, exhausted)``.
    """

    def row(carry, key_n):
        state, rejections = carry
        key_j, key_p = random.split(key_n)
        count = random.categorical(key_j, count_logits)

        def cond(loop):
            return ~loop[3] & (loop[4] < max_rejections)

        def body(loop):
            key, state, _, _, rejections = loop
            key, sub = random.split(key)
            state, z, accepted = propose(state, sub, count)
            return key, state, z, accepted, rejections + (~accepted).astype(jnp.int32)

        # J_n = 0: the zero row is the only vector with that count, whatever μ is, so it is
        # accepted without proposals (exact, and it removes the infinite expected number of
        # rejections that P(|Z*| = 0) = Π(1 - π_i) causes when an atom is close to 1)
        loop = (key_p, state, jnp.zeros(width, jnp.int32), count == 0, rejections)
        _, state, z, accepted, rejections = lax.while_loop(cond, body, loop)
        return (state, rejections), (jnp.where(accepted, z, 0), accepted)

    keys = random.split(key, num_rows)
    (state, rejections), (z, accepted) = lax.scan(row, (state, jnp.int32(0)), keys)
    return z, state, rejections, ~jnp.all(accepted)


def _rows_given_probs(key, probs, count_logits, num_rows, method, max_rejections):
    """``num_rows`` i.i.d. rows of the restricted Bernoulli process given finite ``probs``.

    ``method`` is one of ``uncollapsed_rejection`` (propose ``Bernoulli(π)``, accept iff the count
    is ``J_n``), ``tilted_rejection`` (the same from the Esscher-tilted ``π`` whose mean count is
    ``J_n``) and ``inclusion`` (draw by draw, no rejections). ``count_logits``
    (``M + 1``) is ``log f`` on ``0..M`` masked to the counts feasible under ``probs``, where
    ``M`` (static) is the largest count ``f`` can take; the tables of the tilted and draw-by-draw
    samplers have ``M + 1`` columns. Returns ``(z (N, I) int32, num_rejections, exhausted)``.
    """
    max_count = count_logits.shape[-1] - 1
    if method == "inclusion":

        def row(_, key_n):
            key_j, key_z = random.split(key_n)
            count = random.categorical(key_j, count_logits)
            return None, conditional_bernoulli_draw_by_draw(key_z, probs, count, max_count)

        _, z = lax.scan(row, None, random.split(key, num_rows))
        return z, jnp.int32(0), jnp.array(False)

    if method == "tilted_rejection":
        logits = logit(probs)
        tilted = jax.nn.sigmoid(logits[None, :] + tilts(probs, max_count)[:, None])  # (M+1, I)
    else:
        tilted = jnp.broadcast_to(probs, (max_count + 1, *probs.shape))

    def propose(state, key_p, count):
        z = (random.uniform(key_p, probs.shape, probs.dtype) < tilted[count]).astype(jnp.int32)
        return state, z, z.sum() == count

    z, _, rejections, exhausted = _rejection_rows(
        key, num_rows, probs.shape[-1], count_logits, propose, None, max_rejections
    )
    return z, rejections, exhausted


# ---------------------------------------------------------------------------- the samplers
def _collapsed(num_rows, max_features, _truncation, max_rejections):
    r"""S1: exact collapsed rejection through an IBP(c, α) subsequence (paper B §5.1).

    Proposal ``t`` (counting *all* proposals, accepted or not) is the IBP predictive row of
    customer ``t``: old dish ``k`` with probability ``m_k / (c + t - 1)``, then
    ``Poisson(cα / (c + t - 1))`` new dishes; every proposal enters the counts ``m``. By
    exchangeability of the IBP sequence, the first proposal of each block whose count equals
    ``J_n ~ f`` is an exact draw of the next R-IBP row.
    """
    cols = jnp.arange(max_features)

    def one(key, alpha, concentration, log_f):
        def propose(state, key, count):
            counts, dishes, proposals, overflow = state
            key_old, key_new = random.split(key)
            denom = concentration + proposals
            old = random.uniform(key_old, (max_features,), denom.dtype) * denom < counts
            new = random.poisson(key_new, concentration * alpha / denom, dtype=jnp.int32)
            z = (old | ((cols >= dishes) & (cols < dishes + new))).astype(jnp.int32)
            state = (
                counts + z,
                jnp.minimum(dishes + new, max_features),
                proposals + 1.0,
                overflow | (dishes + new > max_features),
            )
            return state, z, z.sum() == count

        state = (jnp.zeros(max_features, alpha.dtype), jnp.int32(0), jnp.zeros((), alpha.dtype))
        state = (*state, jnp.array(False))
        z, state, rejections, exhausted = _rejection_rows(
            key, num_rows, max_features, log_f, propose, state, max_rejections
        )
        return z, (rejections, exhausted, state[3], state[1])

    return one


def _retrospective(num_rows, max_features, truncation, max_rejections):
    r"""S5: exact uncollapsed rejection with a lazily instantiated tail (``c = 1``; paper B §5.3).

    ``π_1 > … > π_I`` come from stick-breaking (``I = truncation``). Below ``π_I`` the atoms form
    a Poisson process with intensity ``α π^{-1} dπ`` (the beta process with ``c = 1`` has Lévy
    intensity ``α π^{-1}`` on ``(0, 1)``, and its points below the ``I``-th largest are again a
    Poisson process with that intensity). Each proposal draws ``z_i ~
    Bernoulli(π_i)`` for every instantiated atom; if that count ``K*`` exceeds ``J_n`` it is
    rejected without looking at the tail. Otherwise the proposal's ones in the uninstantiated tail
    are drawn *from their conditional law given all earlier proposals*: if ``T`` earlier proposals
    observed the tail and saw none of its still-uninstantiated atoms, those atoms form a Poisson
    process with intensity ``α π^{-1} (1 - π)^T`` on ``(0, π_I)``, so the new proposal's ones
    there number ``m ~ Poisson(α (1 - (1 - π_I)^{T+1}) / (T + 1))`` with sizes i.i.d. with density
    ``∝ (1 - π)^T`` on ``(0, π_I)``. They are instantiated as atoms, ``T`` increases, and the
    proposal is accepted iff ``K* + m = J_n``.

    **Correction of the paper's procedure** (derived here; also in ``docs/restricted_ibp.md``,
    "What we changed relative to the paper"): paper B accepts with
    probability ``exp(-α π_I)`` and rejects with probability ``1 - Pois(J - K*; α π_I)`` — the
    ``T = 0`` case above — for *every* proposal, i.e. it treats the shared tail afresh each time,
    and on success extends the stick-breaking "until Σ z* = J", which is not the conditional law
    of the tail given its count. Both ignore what earlier proposals revealed about the tail, so
    the literal procedure is not exact; the version above is (and coincides with it for the first
    proposal that looks at the tail).
    """
    cols = jnp.arange(max_features)

    def one(key, alpha, _concentration, log_f):
        key_sticks, key_rows = random.split(key)
        log_pi = _stick_breaking_log_probs(key_sticks, alpha, truncation)
        probs = jnp.zeros(max_features, alpha.dtype).at[:truncation].set(jnp.exp(log_pi))
        log1m_last = jnp.log1p(-jnp.exp(log_pi[-1]))  # log(1 - π_I)

        def propose(state, key, count):
            probs, atoms, looks, overflow = state
            key_z, key_m, key_u = random.split(key, 3)
            z = random.uniform(key_z, (max_features,), probs.dtype) < probs
            seen = z.sum()
            look = seen <= count
            # 1 - (1 - π_I)^{T+1}, the tail mass of the density (1 - π)^T on (0, π_I), × (T+1)
            mass = -jnp.expm1((looks + 1.0) * log1m_last)
            rate = alpha * mass / (looks + 1.0)
            new = jnp.where(look, random.poisson(key_m, rate, dtype=jnp.int32), 0)
            u = random.uniform(key_u, (max_features,), probs.dtype)
            sizes = -jnp.expm1(jnp.log1p(-u * mass) / (looks + 1.0))  # inverse CDF
            slots = (cols >= atoms) & (cols < atoms + new)
            state = (
                jnp.where(slots, sizes, probs),
                jnp.minimum(atoms + new, max_features),
                looks + look,
                overflow | (atoms + new > max_features),
            )
            z = (z | slots).astype(jnp.int32)
            return state, z, look & (seen + new == count)

        state = (probs, jnp.int32(truncation), jnp.zeros((), alpha.dtype), jnp.array(False))
        z, state, rejections, exhausted = _rejection_rows(
            key_rows, num_rows, max_features, log_f, propose, state, max_rejections
        )
        return z, (rejections, exhausted, state[3], state[1])

    return one


def _uncollapsed(num_rows, max_features, truncation, max_rejections, method, directing, max_count):
    """S2–S4: draw ``π̃`` (``truncation`` atoms), then rows given ``π̃`` (:func:`_rows_given_probs`).

    ``f`` is restricted to the counts feasible under ``π̃`` (``PB_π̃(J) > 0``) and renormalised,
    i.e. the rows follow :class:`RestrictedBernoulliProcess` ``(π̃, f)`` exactly; the only
    approximation is the truncation of the beta process. ``max_count`` (static, ``<= truncation``)
    is the largest count ``f`` can take.
    """

    def one(key, alpha, concentration, log_f):
        key_pi, key_rows = random.split(key)
        if directing == "weak_limit":
            probs = _weak_limit_probs(key_pi, alpha, concentration, truncation)
        else:
            probs = jnp.exp(_stick_breaking_log_probs(key_pi, alpha, truncation))
        log_pb = poisson_binomial_log_pmf(probs, max_count)
        count_logits = jnp.where(jnp.isfinite(log_pb), log_f[: max_count + 1], -jnp.inf)
        z, rejections, exhausted = _rows_given_probs(
            key_rows, probs, count_logits, num_rows, method, max_rejections
        )
        z = jnp.pad(z, ((0, 0), (0, max_features - truncation)))
        # f has no mass on the counts that π̃ can produce: no row can be drawn
        exhausted = exhausted | ~jnp.isfinite(logsumexp(count_logits))
        return z, (rejections, exhausted, jnp.array(False), jnp.int32(truncation))

    return one
