r"""The marginal Gibbs sampler for NGGP mixtures whose components are not conjugate.

Neal, *Markov chain sampling methods for Dirichlet process mixture models*, JCGS 2000,
Algorithm 8 (auxiliary components), for the NGGP's urn given ``U`` as Favaro & Teh, *MCMC for
normalized random measure mixture models*, Stat. Sci. 2013, Section 3, write it (``docs/nrm.md``,
"Components that are not conjugate"). The chain's state is the partition ``z``, the auxiliary
variable ``U`` and the components ``θ_k`` of the occupied clusters (``K`` slots of the model's
clusters plate). One MCMC iteration is one sweep of four steps:

1. ``log U | z`` and 2. the NGGP's hyper-parameter sites: as in the collapsed sampler
   (:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.sweep`, steps 1 and 2; they read the partition
   only);
3. each label in turn given the others, ``U`` and ``θ``, with ``M`` auxiliary components
   (Neal's Algorithm 8):

   .. math::
       p(z_n = k) \propto (n_{k,-n} - σ)\, f(x_n \mid θ_k), \qquad
       p(z_n = \mathrm{aux}_j) \propto \frac{a (U + τ)^σ}{M}\, f(x_n \mid φ_j),
       \quad φ_j \sim H_0,

   where, when row ``n`` was alone in its cluster, ``φ_1`` is that cluster's ``θ`` and the
   other ``M - 1`` are fresh draws; a row that picks ``aux_j`` opens a cluster with ``θ = φ_j``.
   The auxiliary draws of the sweep are drawn before it, ``M`` per row (independent of the
   state, so drawing them early changes nothing), and ``f(x_n | θ_k)`` of every row and slot is
   computed once (a cluster opened in the pass gets its column then);
4. each occupied cluster's components given its rows, ``∝ H_0(θ_k) ∏_{n: z_n = k} f(x_n | θ_k)``,
   by slice sampling (Neal 2003) each coordinate of ``θ_k`` on its unconstrained line in turn, all
   clusters at once (given the labels they are independent: one evaluation of the model gives
   every cluster's target). A coordinate's slice width is its spread under the prior (the
   standard deviation of prior draws, fresh each sweep), so the step adapts to the units of the
   model; the shrinkage closes in on a narrow posterior in a few halvings.

With tempered replicas (``beta``) replica ``r`` targets ``p(h) p(z, U | h) p(θ) f(X | z, θ)^β``:
the likelihood terms of steps 3 and 4 are raised to ``β``. The state's ``log_likelihood`` is
``log f(X | z, θ)`` at the state's components (not integrated out, unlike the collapsed
sampler's), which is what the replicas' exchange reads
(:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.tempering`).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import logsumexp
from numpyro.distributions.transforms import biject_to

from numpyro_bnp.infer.core.mcmc import slice_sample
from numpyro_bnp.infer.mixtures.nggp_gibbs.sweep import (
    _canonical_order,
    _chain_state,
    _log_eppf,
    _log_new_weight,
    _log_old,
    _partition_steps,
    _sample_log_u,
    _sequential_weights,
    _slot_sizes,
)

__all__ = ["Components"]

_WIDTH_DRAWS = 4  # prior draws per slot that set the slice widths of step 4
PREDICTIVE_DRAWS = 4096  # prior draws (at least) that estimate ∫ f(x* | θ) H_0(dθ)


class Components(NamedTuple):
    """What the sweep knows of a mixture's components (read from the model:
    :meth:`~numpyro_bnp.infer.mixtures.model.MixtureModel.component_terms` and
    ``draw_components`` at the run's arguments).

    :ivar dtype: the float dtype of the chain.
    :ivar sites: the component sites' names; :ivar supports: their supports (step 4 moves
        each on the unconstrained line of ``biject_to(support)``).
    :ivar terms: ``(values, labels, rows) -> (log H_0 (K,), log f(x_n | θ_{labels_n}) (N,))``,
        ``values`` ``{site: (K, ...)}``, ``rows`` ``(N, D)`` or ``None`` (the model's data).
    :ivar draw: ``key -> values``, one prior draw per slot.
    :ivar num_auxiliary: ``M``, the auxiliary components per row in step 3.
    """

    dtype: object
    sites: tuple
    supports: tuple
    terms: object
    draw: object
    num_auxiliary: int


def _where_slots(mask, a, b):
    """``a`` where ``mask`` ``(K,)``, else ``b`` (leaves ``(K, ...)``)."""
    return jax.tree.map(lambda x, y: jnp.where(mask.reshape(-1, *(1,) * (x.ndim - 1)), x, y), a, b)


def _to_line(comp, values):
    """``(u, back)``: the components' coordinates on the unconstrained line ``(K, P)``, and
    ``back(u) -> (values, log |det J| (K,))``."""
    layout, parts = [], []
    for name, support in zip(comp.sites, comp.supports, strict=True):
        transform = biject_to(support)
        u = transform.inv(values[name])
        layout.append((name, transform, u.shape[1:]))
        parts.append(u.reshape(u.shape[0], -1))
    num_slots = parts[0].shape[0]

    def back(flat):
        out, log_det, start = {}, jnp.zeros(num_slots, comp.dtype), 0
        for name, transform, shape in layout:
            size = int(np.prod(shape, dtype=int))
            u = flat[:, start : start + size].reshape(num_slots, *shape)
            out[name] = transform(u)
            jac = transform.log_abs_det_jacobian(u, out[name])
            log_det = log_det + jnp.reshape(jac, (num_slots, -1)).sum(-1)
            start += size
        return out, log_det

    return jnp.concatenate(parts, axis=-1), back


def _widths(comp, key):
    """``(P,)`` slice widths of step 4: each coordinate's standard deviation over
    ``_WIDTH_DRAWS`` prior draws per slot (1 where it is not positive and finite)."""
    draws = jax.vmap(comp.draw)(random.split(key, _WIDTH_DRAWS))
    flat = jax.vmap(lambda values: _to_line(comp, values)[0])(draws)
    spread = jnp.std(flat.reshape(-1, flat.shape[-1]), axis=0)
    return jnp.where(jnp.isfinite(spread) & (spread > 0), spread, 1.0).astype(comp.dtype)


def _log_lik_matrix(comp, theta, rows, capacity):
    """``(N, K)`` ``log f(x_n | θ_k)`` of every row and slot."""
    num_rows = rows.shape[0]

    def slot(k):
        return comp.terms(theta, jnp.full(num_rows, k, jnp.int32), rows)[1]

    return jax.vmap(slot)(jnp.arange(capacity, dtype=jnp.int32)).T


def _log_lik_per_row(comp, phi, rows, capacity):
    """``(N,)`` ``log f(x_n | φ_n)`` for one component per row, ``phi`` leaves ``(B K, ...)``
    with ``B = ⌈N / K⌉`` (row ``n``'s at index ``n``): block ``c`` of ``K`` rows is evaluated
    with the rows rolled to the front and labels ``0..K-1``."""
    num_rows = rows.shape[0]
    blocks = phi[comp.sites[0]].shape[0] // capacity
    used = min(num_rows, capacity)
    labels = (jnp.arange(num_rows) % capacity).astype(jnp.int32)

    def block(c):
        values = jax.tree.map(lambda a: lax.dynamic_slice_in_dim(a, c * capacity, capacity), phi)
        shifted = jnp.roll(rows, -c * capacity, axis=0)
        return comp.terms(values, labels, shifted)[1][:used]

    return jax.vmap(block)(jnp.arange(blocks)).reshape(-1)[:num_rows]


def _assign(comp, rows, cfg, labels, counts, theta, key, log_new_fn, beta):
    """Step 3 (module docstring): one pass over the rows in order; ``(labels, counts, theta,
    saturated)``. ``log_new_fn(n, counts)`` gives the log prior weights of a new cluster
    (before dividing among the ``M`` auxiliaries) and of the occupied slots ``(K,)``; a label
    ``-1`` is a row not yet assigned (the sequential pass)."""
    capacity, num_rows, num_aux = cfg.capacity, cfg.num_rows, comp.num_auxiliary
    dtype = comp.dtype
    key_aux, key_pick = random.split(key)
    blocks = -(-num_rows // capacity)
    draws = jax.vmap(comp.draw)(random.split(key_aux, num_aux * blocks))
    # row n's j-th auxiliary at [j, n]
    aux = jax.tree.map(lambda a: a.reshape(num_aux, blocks * capacity, *a.shape[2:]), draws)
    if rows is None:
        lik = jnp.zeros((num_rows, capacity), dtype)
        lik_aux = jnp.zeros((num_aux, num_rows), dtype)
    else:
        lik = _log_lik_matrix(comp, theta, rows, capacity)
        lik_aux = jax.vmap(lambda phi: _log_lik_per_row(comp, phi, rows, capacity))(aux)
    gumbel = random.gumbel(key_pick, (num_rows, capacity + num_aux), dtype)
    power = 1.0 if beta is None else beta
    log_m = jnp.log(jnp.asarray(num_aux, dtype))

    def column(theta, slot):
        return comp.terms(theta, jnp.full(num_rows, slot, jnp.int32), rows)[1]

    def step(n, carry):
        labels, counts, theta, lik, saturated = carry
        old = labels[n]
        own = jnp.maximum(old, 0)
        counts = counts - jax.nn.one_hot(old, capacity, dtype=counts.dtype)  # zeros for -1
        alone = (old >= 0) & (counts[own] == 0)
        empty = counts == 0
        new_slot = jnp.argmax(empty)
        full = ~empty[new_slot]
        log_new, log_old = log_new_fn(n, counts)
        # the auxiliaries: a row alone in its cluster keeps that cluster's θ as the first
        phi = jax.tree.map(lambda a: a[:, n], aux)
        phi = jax.tree.map(lambda p, t: p.at[0].set(jnp.where(alone, t[own], p[0])), phi, theta)
        lik_phi = lik_aux[:, n].at[0].set(jnp.where(alone, lik[n, own], lik_aux[0, n]))
        logits = jnp.concatenate(
            [
                jnp.where(empty, -jnp.inf, log_old + power * lik[n]),
                jnp.where(full, -jnp.inf, log_new - log_m + power * lik_phi),
            ]
        )
        pick = jnp.argmax(logits + gumbel[n])
        opened = pick >= capacity
        k = jnp.where(opened, new_slot, pick).astype(jnp.int32)
        chosen = jax.tree.map(lambda p: p[jnp.maximum(pick - capacity, 0)], phi)
        theta = jax.tree.map(
            lambda t, c: t.at[new_slot].set(jnp.where(opened, c, t[new_slot])), theta, chosen
        )
        if rows is not None:  # the opened cluster's column, for the rows after n
            lik = lax.cond(
                opened, lambda a: a.at[:, new_slot].set(column(theta, new_slot)), lambda a: a, lik
            )
        counts = counts + jax.nn.one_hot(k, capacity, dtype=counts.dtype)
        return labels.at[n].set(k), counts, theta, lik, saturated | full

    carry = (labels, counts, theta, lik, jnp.zeros((), bool))
    labels, counts, theta, _, saturated = lax.fori_loop(0, num_rows, step, carry)
    return labels, counts, theta, saturated


def _update_components(comp, key, rows, labels, theta, capacity, beta):
    """Step 4 (module docstring): every slot's components by coordinate-wise slice sampling on
    the unconstrained line (the empty slots' targets are their prior)."""
    key_width, key_slice = random.split(key)
    width = _widths(comp, key_width)
    u, back = _to_line(comp, theta)
    power = 1.0 if beta is None else beta

    def log_target(u):
        values, log_det = back(u)
        log_prior, log_lik = comp.terms(values, labels, rows)
        return log_prior + log_det + power * jax.ops.segment_sum(log_lik, labels, capacity)

    def coordinate(p, carry):
        u, key = carry
        key, sub = random.split(key)
        new = slice_sample(sub, u[:, p], lambda col: log_target(u.at[:, p].set(col)), width[p])
        return u.at[:, p].set(new), key

    u, _ = lax.fori_loop(0, u.shape[1], coordinate, (u, key_slice))
    return back(u)[0]


def _finish(
    comp,
    rows,
    cfg,
    to_sites,
    labels,
    theta,
    log_u,
    i,
    saturated,
    num_saturated,
    key,
    hyper,
    nggp,
    beta,
):
    """Canonical labels (the components follow their clusters), fresh prior draws in the
    empty slots and the diagnostics: the state after a sweep."""
    dtype = comp.dtype
    order = _canonical_order(labels, cfg.capacity)
    labels = jnp.argsort(order)[labels].astype(jnp.int32)
    theta = jax.tree.map(lambda t: t[order], theta)
    counts = _slot_sizes(labels, cfg.capacity)
    occupied = counts > 0
    key, key_empty = random.split(key)
    theta = _where_slots(occupied, theta, comp.draw(key_empty))
    log_prior, log_lik = comp.terms(theta, labels, rows)
    log_lik = log_lik.sum() if rows is not None else jnp.zeros((), dtype)
    tempered = log_lik if beta is None else beta * log_lik
    log_joint = (
        nggp.log_prior.astype(dtype)
        + _log_eppf(counts, cfg, nggp, dtype)
        + jnp.where(occupied, log_prior, 0.0).sum()
        + tempered
    )
    return _chain_state(
        cfg,
        i,
        to_sites(labels, theta, hyper),
        labels,
        counts,
        log_u,
        log_joint.astype(dtype),
        log_lik.astype(dtype),
        saturated,
        num_saturated,
        key,
        dtype,
    )


def init_chain(key, rows, labels, hyper, family, cfg, to_sites, numbers, beta=None):
    """The first state (``family``: the :class:`Components`): prior draws of the components,
    then a sequential pass of step 3 with the exact EPPF predictive weights (or the given
    ``labels``), then step 4."""
    comp = family
    key, key_z, key_u, key_theta, key_c = random.split(key, 5)
    dtype = comp.dtype
    nggp = numbers(hyper)
    theta = comp.draw(key_theta)
    if labels is None:
        weights = _sequential_weights(nggp, dtype)
        start = jnp.full(cfg.num_rows, -1, jnp.int32)
        counts = jnp.zeros(cfg.capacity, jnp.int32)
        labels, _, theta, saturated = _assign(
            comp, rows, cfg, start, counts, theta, key_z, weights, beta
        )
    else:
        saturated = jnp.zeros((), bool)
    theta = _update_components(comp, key_c, rows, labels, theta, cfg.capacity, beta)
    counts = _slot_sizes(labels, cfg.capacity)
    log_u = _sample_log_u(key_u, cfg, counts, nggp, dtype)
    return _finish(
        comp, rows, cfg, to_sites, labels, theta, log_u, 0, saturated, 0, key, hyper, nggp, beta
    )


def step(state, rows, family, cfg, to_sites, numbers, beta=None):
    """One MCMC iteration: steps 1-4 of the module docstring, then the state."""
    comp = family
    dtype = comp.dtype
    key, key_sweep = random.split(state.rng_key)
    key_u, key_z, key_c = random.split(key_sweep, 3)
    labels = state.z[cfg.partition_site]
    theta = {name: state.z[name] for name in comp.sites}
    hyper = {name: state.z[name] for name in cfg.hyper_sites}
    counts = _slot_sizes(labels, cfg.capacity)
    log_u, hyper, nggp, log_new = _partition_steps(key_u, cfg, counts, hyper, numbers, dtype)
    sigma = nggp.sigma

    def weights(n, counts):
        return log_new, _log_old(counts, sigma, dtype)

    labels, _, theta, saturated = _assign(
        comp, rows, cfg, labels, counts, theta, key_z, weights, beta
    )
    theta = _update_components(comp, key_c, rows, labels, theta, cfg.capacity, beta)
    return _finish(
        comp,
        rows,
        cfg,
        to_sites,
        labels,
        theta,
        log_u,
        state.i + 1,
        saturated,
        state.num_saturated,
        key,
        hyper,
        nggp,
        beta,
    )


def refresh(state, rows, family, cfg, numbers):
    """``log_likelihood`` and ``log_joint`` of ``state`` recomputed (the other blocks of a
    ``numpyro.infer.Gibbs`` moved: the components' prior and the likelihood may have
    changed)."""
    comp = family
    dtype = comp.dtype
    labels = state.z[cfg.partition_site]
    theta = {name: state.z[name] for name in comp.sites}
    counts = _slot_sizes(labels, cfg.capacity)
    nggp = numbers({name: state.z[name] for name in cfg.hyper_sites})
    log_prior, log_lik = comp.terms(theta, labels, rows)
    log_lik = log_lik.sum() if rows is not None else jnp.zeros((), dtype)
    log_joint = (
        nggp.log_prior.astype(dtype)
        + _log_eppf(counts, cfg, nggp, dtype)
        + jnp.where(counts > 0, log_prior, 0.0).sum()
        + log_lik
    )
    return state._replace(log_likelihood=log_lik.astype(dtype), log_joint=log_joint.astype(dtype))


def log_predictive_draws(labels, theta, given, new, comp, cfg, numbers, key):
    r"""``(S, M)`` ``log p(x*_m | z_s, θ_s, U)`` of each draw ``s`` (labels ``(S, N)``,
    components ``{site: (S, K, ...)}``, the scalar sites ``given`` ``{site: (S,)}``): the
    mixture of the occupied clusters' ``f(x* | θ_k)`` with weights ``(n_k − σ)`` and of a new
    cluster with the EPPF ratio's weight (as the collapsed sampler's predictive), the new
    cluster's ``∫ f(x* | θ) H_0(dθ)`` estimated by the average over :data:`PREDICTIVE_DRAWS`
    prior draws (rounded up to whole sets of ``K``; one set, ``key``, for every draw).
    ``new`` ``(M, D)``."""
    capacity, num_rows = cfg.capacity, cfg.num_rows
    chunks = -(-new.shape[0] // num_rows)
    padded = jnp.concatenate(
        [new, jnp.broadcast_to(new[:1], (chunks * num_rows - new.shape[0], new.shape[1]))]
    )
    padded = padded.reshape(chunks, num_rows, new.shape[1])

    def at(values):  # (K, M) log f(x*_m | values_k)
        mat = jax.vmap(lambda x: _log_lik_matrix(comp, values, x, capacity))(padded)
        return jnp.moveaxis(mat, -1, 0).reshape(capacity, -1)[:, : new.shape[0]]

    prior = jax.vmap(comp.draw)(random.split(key, -(-PREDICTIVE_DRAWS // capacity)))
    base = jax.vmap(at)(prior).reshape(-1, new.shape[0])
    log_base = logsumexp(base, axis=0) - jnp.log(base.shape[0])  # (M,)

    def one(draw):
        labels, theta, given = draw
        nggp = numbers(given)
        counts = _slot_sizes(labels, capacity)
        log_new = _log_new_weight(num_rows + 1, jnp.sum(counts > 0), nggp, comp.dtype)
        log_w = jnp.where(counts > 0, _log_old(counts, nggp.sigma, comp.dtype), -jnp.inf)
        scores = jnp.concatenate([at(theta), log_base[None]]) + jnp.append(log_w, log_new)[:, None]
        return logsumexp(scores, axis=0) - logsumexp(jnp.append(log_w, log_new))

    return lax.map(one, (labels, theta, given))
