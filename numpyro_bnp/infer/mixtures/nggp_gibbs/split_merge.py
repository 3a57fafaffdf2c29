r"""Merge–split moves for conjugate NGGP mixtures, given ``U``: sequentially-allocated
proposals (Dahl 2005), optionally refined by restricted Gibbs scans (Jain & Neal 2004).

Dahl, *Sequentially-allocated merge-split sampler for conjugate and nonconjugate Dirichlet
process mixture models*, 2005; Jain & Neal, *A split-merge Markov chain Monte Carlo procedure
for the Dirichlet process mixture model*, JCGS 2004; for the Gibbs-type partition of an NGGP
given its auxiliary variable ``U`` (``docs/nrm.md``, "The marginal Gibbs sampler"). Given ``U``
the partition's law is a product over clusters,

.. math::
    p(z \mid U) \propto \prod_{k=1}^{K} a (U + τ)^{σ} \frac{Γ(n_k - σ)}{Γ(1 - σ)}

(the joint of ``(z, U)`` of the Gibbs sampler's sweep,
:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.sweep`),
and the components are integrated out: a cluster ``C`` contributes its marginal likelihood
``exp(A(H_0 + x_C) − A(H_0)) Π_{n∈C} h(x_n)`` (:mod:`numpyro_bnp.families`; the ``h`` terms are
the same on both sides of a move and cancel).

One move picks a row ``i`` uniformly, then its partner ``j ≠ i`` by one of three rules, each
chosen with a fixed probability: uniformly over the other rows (probability ½); uniformly over
``i``'s cluster-mates (¼; a *split pair*); or among the rows outside ``i``'s cluster, row ``l``
with weight ``w_il = exp(−c ‖s_i − s_l‖² / mean_l ‖s_i − s_l‖²)`` (¼; a *merge pair*: rows
like ``i``, with ``s`` a fixed random projection of the data, :func:`row_sketch`; all weights
1 without data). Among about 90 clusters a uniform pair shares a cluster about once in 90
tries and rarely lies in two clusters worth merging; split and merge pairs propose those
moves every time. The last two rules depend on the labels, so the probability of choosing the
pair enters the Metropolis–Hastings ratio: a split of ``c`` from a split pair is undone by a
merge from the merge pair ``(i, j)`` in the split state, and the reverse, so the ratio gains
``P(reverse pair) / P(forward pair)`` with ``P(split pair) = 1 / (n_c − 1)`` and ``P(merge
pair) = w_ij / Σ_{l ∉ a} w_il`` (``a`` the cluster of ``i`` in the state with two clusters).

If ``i`` and ``j`` share a cluster ``c``, the move proposes to split ``c``; if not, to merge
their clusters. Either way ``S`` is the set of the other rows of the two clusters, ``i`` seeds
part ``a`` and ``j`` part ``b``, and the rows of ``S`` are visited in one random order. Row
``n`` joins part ``b`` with probability

.. math::
    π_b(n) = \frac{(n_b - σ)\, p(x_n \mid X_b)}
        {(n_a - σ)\, p(x_n \mid X_a) + (n_b - σ)\, p(x_n \mid X_b)}

(``π_a = 1 − π_b``), the sizes and posteriors those of the rows placed so far. With ``scans =
0`` this *sequential allocation* is the proposal: a split draws it, and its probability ``q``
is the product of the choices' probabilities; for a merge, ``q`` is the probability that the
same allocation (same order) recreates the two clusters.

**Restricted Gibbs scans** (``scans = t ≥ 1``; Jain & Neal's split–merge with a launch
state). The first rows of a sequential allocation choose on little evidence, so a big cluster
is rarely split well. Here the allocation, always drawn, is followed by ``t − 1`` intermediate
*restricted Gibbs scans*: each row of ``S`` in turn (same order) leaves its part and rejoins
``b`` with ``π_b(n)`` computed from all the other rows' current parts (``i`` and ``j`` stay
fixed). Their result is the *launch state* ``L``; it depends on the rows of the two clusters,
the seeds and the random numbers, never on how the rows are split now. One last restricted
scan from ``L`` is the proposal, with

.. math::
    q(s \mid L) = \prod_{n \in S} π_{s_n}(n)

evaluated along the scan (the rows before ``n`` at their new parts, the rows after it at
their launch parts): a split draws ``s``, a merge evaluates ``q`` at the current split ``s``.
The launch state is an auxiliary variable with the same law for both moves, so this ``q``
alone in the ratio leaves the target invariant (Jain & Neal 2004). Each scan is one
more pass over ``S`` with two predictives per row; the passes visit the rows of ``S`` only.

Metropolis–Hastings accepts a split with probability ``min(1, p(split) / (p(merge) q))`` and
a merge with ``min(1, p(merge) q / p(split))`` (times the pairs' ratio above); the moves leave
``p(z | U, X)`` invariant, so they combine with the sampler's exact ``U`` draw and label sweep.

A split needs a free slot of the fixed capacity; without one it is rejected and reported.
"""

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.scipy.special import gammaln, logsumexp

from numpyro_bnp.families import SparseCounts

__all__ = ["row_sketch", "split_merge"]


def _row(rows, n):
    return jax.tree.map(lambda a: a[n], rows)


def _log_split_prior(n_a, n_b, log_u, mass, sigma, tau, dtype):
    """``log p(split) − log p(merge)`` of the partition given ``U`` (module docstring): one
    more cluster's ``a (U + τ)^σ / Γ(1 − σ)`` and ``Γ(n_a − σ) Γ(n_b − σ) / Γ(n_a + n_b − σ)``."""
    n_a, n_b = n_a.astype(dtype), n_b.astype(dtype)
    tilt = jnp.where(sigma == 0, 0.0, sigma * jnp.logaddexp(log_u, jnp.log(tau)))
    return (
        jnp.log(mass)
        + tilt
        - gammaln(1.0 - sigma)
        + gammaln(n_a - sigma)
        + gammaln(n_b - sigma)
        - gammaln(n_a + n_b - sigma)
    )


NEAR_SHARPNESS = 10.0  # c of the module docstring: neighbours at a tenth of the mean distance
SKETCH_DIM = 16


def row_sketch(rows):
    """``(N, r)`` a fixed random projection (``r = 16``, Gaussian, a constant key) of the rows
    for weighing merge pairs (module docstring): of the square roots of the word frequencies for
    documents (:class:`~numpyro_bnp.families.SparseCounts`; Euclidean distances between them
    are Hellinger distances), of the standardized columns of dense rows ``(N, D)``."""
    if isinstance(rows, SparseCounts):
        blocks = [(rows.ids, rows.counts)]
        if rows.large_ids is not None:
            blocks.append((rows.large_ids, rows.large_counts))
        dtype = jnp.result_type(float)
        total = sum(jnp.sum(c, axis=-1, keepdims=True) for _, c in blocks).astype(dtype)

        def project(ids, counts):  # a word's direction drawn from its id: no (V, r) matrix
            keys = jax.vmap(jax.vmap(lambda w: random.fold_in(random.PRNGKey(0), w)))(ids)
            directions = jax.vmap(jax.vmap(lambda k: random.normal(k, (SKETCH_DIM,), dtype)))(keys)
            weight = jnp.sqrt(counts.astype(dtype) / jnp.maximum(total, 1))
            return jnp.einsum("nl,nlr->nr", weight, directions)

        return sum(project(ids, counts) for ids, counts in blocks)
    x = jnp.asarray(rows)
    x = (x - x.mean(0)) / jnp.where(x.std(0) > 0, x.std(0), 1.0)
    directions = random.normal(random.PRNGKey(0), (x.shape[-1], SKETCH_DIM), x.dtype)
    return x @ directions


def split_merge(
    family, rows, labels, log_u, mass, sigma, tau, capacity, key, sketch=None, scans=0, beta=None
):
    """One merge–split move (module docstring) on the labels ``(N,)`` int32.

    :param family: the conjugate family of the components (:mod:`numpyro_bnp.families`).
    :param rows: the data, ``(N, D)`` or :class:`~numpyro_bnp.families.SparseCounts`; ``None``
        for a prior-only chain.
    :param log_u: ``log U`` of the current state; ``mass``, ``sigma``, ``tau``: the NGGP's.
    :param int capacity: the number of cluster slots ``K``.
    :param key: PRNG key.
    :param sketch: ``(N, r)`` :func:`row_sketch` of the rows, which weighs merge pairs
        (module docstring); ``None``: all weights 1.
    :param int scans: the restricted Gibbs scans ``t`` after the sequential allocation
        (module docstring): ``0``, the allocation is the proposal (Dahl 2005); ``t ≥ 1``, the
        allocation and ``t − 1`` scans build the launch state and the last scan is the
        proposal (Jain & Neal 2004).
    :param beta: ``None``, or the inverse temperature ``β`` of a tempered replica
        (:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.tempering`), whose target has the marginal
        likelihood raised to ``β``: the allocation's predictives ``p(x_n | X_b)`` become ``p(x_n |
        X_b)^β`` (the ratio of tempered marginals), in the forward draw and in the reverse
        move's ``q`` alike, and the marginal likelihoods' part of the ratio is multiplied by
        ``β`` (the move is then exact for the tempered target).
    :return: ``(labels, accepted, full)``: the new labels (not canonical: a split's second
        part takes the first free slot), whether the move was accepted, and whether a split
        was refused for want of a free slot.
    """
    dtype = family.dtype
    num_rows = labels.shape[0]
    key_i, key_j, key_order, key_alloc, key_accept, key_rule = random.split(key, 6)
    index = jnp.arange(num_rows)
    i = random.randint(key_i, (), 0, num_rows)
    mates = (labels == labels[i]) & (index != i)
    outside = labels != labels[i]
    if sketch is None:
        log_near = jnp.zeros(num_rows, dtype)
    else:
        distance = jnp.sum((sketch - sketch[i]) ** 2, axis=-1)
        log_near = -NEAR_SHARPNESS * distance / jnp.maximum(distance.mean(), jnp.finfo(dtype).tiny)
    # the rule: 0 a uniform pair, 1 a split pair, 2 a merge pair (module docstring)
    rule = random.choice(key_rule, 3, p=jnp.array([0.5, 0.25, 0.25]))
    logits = jnp.stack(
        [
            jnp.where(index == i, -jnp.inf, 0.0),
            jnp.where(mates, 0.0, -jnp.inf),
            jnp.where(outside, log_near, -jnp.inf),
        ]
    )[rule]
    usable = jnp.any(logits > -jnp.inf)  # a split pair needs a cluster-mate, a merge pair
    j = random.categorical(key_j, jnp.where(usable, logits, 0.0))  # another cluster
    c_i, c_j = labels[i], labels[j]
    split = c_i == c_j
    members = (labels == c_i) | (labels == c_j)
    others = members & (index != i) & (index != j)
    order = random.permutation(key_order, num_rows)
    # the rows to allocate, in the random order, first: the passes visit only them
    visit = order[jnp.argsort(jnp.where(others[order], 0, 1), stable=True)]
    num_visit = jnp.sum(others)
    seeds = jnp.eye(2, dtype=dtype)
    current_b = labels == c_j  # a merge's current split: part b is j's cluster

    if rows is None:
        params = None
    else:
        params = family.init_clusters(2)
        params = family.update(params, family.stats(_row(rows, i)), seeds[0])
        params = family.update(params, family.stats(_row(rows, j)), seeds[1])

    def allocation(carry, key, replay, rescan):
        """One pass over the rows to allocate: part ``b`` with probability ``∝ (n_b − σ)
        p(x | X_b)`` given the others' parts (a sequential allocation given the rows before,
        a restricted Gibbs scan, ``rescan``, given all the others), drawn or, ``replay``, the
        current split's; ``log q`` gains the choices' log probabilities."""
        uniforms = random.uniform(key, (num_rows,), dtype)

        def visit_row(t, carry):
            params, sizes, log_q, to_b = carry
            n = visit[t]
            if rows is not None:
                x = _row(rows, n)
                stats = family.stats(x)
            if rescan:  # the row leaves its part first
                old = seeds[to_b[n].astype(jnp.int32)]
                sizes = sizes - old
                if rows is not None:
                    params = family.update(params, stats, -old)
            log_w = jnp.log(sizes - sigma)
            if rows is not None:
                log_pred = family.log_predictive(params, x)
                if beta is not None:  # a tempered replica (docstring)
                    log_pred = beta * log_pred
                log_w = log_w + log_pred
            margin = log_w[1] - log_w[0]
            choose_b = jnp.where(replay, current_b[n], uniforms[n] < jax.nn.sigmoid(margin))
            log_q = log_q + jax.nn.log_sigmoid(jnp.where(choose_b, margin, -margin))
            weights = seeds[choose_b.astype(jnp.int32)]
            if rows is not None:
                params = family.update(params, stats, weights)
            return params, sizes + weights, log_q, to_b.at[n].set(choose_b)

        return lax.fori_loop(0, num_visit, visit_row, carry)

    carry = (params, jnp.ones(2, dtype), jnp.zeros((), dtype), jnp.zeros(num_rows, bool))
    if scans == 0:  # the sequential allocation is the proposal (a merge replays it)
        params, sizes, log_q, to_b = allocation(carry, key_alloc, ~split, False)
    else:  # the launch state: the allocation and t − 1 scans, drawn for both moves
        carry = allocation(carry, key_alloc, False, False)
        carry = lax.fori_loop(
            1,
            scans,
            lambda s, c: allocation(c, random.fold_in(key_alloc, s), False, True),
            carry,
        )
        params, sizes, _, to_b = carry  # the last scan is the proposal (a merge replays it)
        carry = (params, sizes, jnp.zeros((), dtype), to_b)
        params, sizes, log_q, to_b = allocation(
            carry, random.fold_in(key_alloc, scans), ~split, True
        )
        if rows is not None:  # the parts' posteriors afresh, without the scans' round-off
            parts = jnp.stack([members & ~to_b & (index != j), to_b | (index == j)], -1)
            params = family.absorb(family.init_clusters(2), rows, parts.astype(dtype))

    log_ratio = _log_split_prior(sizes[0], sizes[1], log_u, mass, sigma, tau, dtype)
    if rows is not None:
        merged = family.absorb(family.init_clusters(1), rows, members.astype(dtype)[:, None])
        a0 = family.log_normalizer(family.prior)
        if beta is None:
            log_ratio = (
                log_ratio
                + family.log_normalizer(params).sum()
                - a0
                - family.log_normalizer(merged)[0]
            )  # log p(split) − log p(merge), the marginal likelihoods' part
        else:  # a tempered replica: the marginal likelihoods raised to β
            log_ratio = log_ratio + beta * (
                family.log_normalizer(params).sum() - a0 - family.log_normalizer(merged)[0]
            )
    log_accept = jnp.where(split, log_ratio - log_q, log_q - log_ratio)
    # a split pair's split is undone by the merge pair (i, j) and the reverse: the pairs'
    # probabilities of choice (module docstring); part a is i's cluster after a split, and
    # the merged cluster after a merge has n_a + n_b rows
    part_a = members & ~to_b & (index != j)
    merge_pair = log_near[j] - logsumexp(
        jnp.where(jnp.where(split, ~part_a, outside), log_near, -jnp.inf)
    )
    split_pair = -jnp.log(members.sum().astype(dtype) - 1.0)
    log_accept = log_accept + jnp.where(
        rule == 0, 0.0, jnp.where(split, merge_pair - split_pair, split_pair - merge_pair)
    )

    counts = jnp.zeros(capacity, jnp.int32).at[labels].add(1)
    free = jnp.argmax(counts == 0)
    full = split & usable & (counts[free] > 0)
    accepted = (jnp.log(random.uniform(key_accept, (), dtype)) < log_accept) & ~full & usable
    split_labels = jnp.where(to_b | (index == j), free, labels)
    merge_labels = jnp.where(labels == c_j, c_i, labels)
    proposal = jnp.where(split, split_labels, merge_labels).astype(labels.dtype)
    return jnp.where(accepted, proposal, labels), accepted, full
