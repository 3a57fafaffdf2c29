r"""Sequentially-allocated merge–split moves for conjugate NGGP mixtures, given ``U``.

Dahl, *Sequentially-allocated merge-split sampler for conjugate and nonconjugate Dirichlet
process mixture models*, 2005 (after Jain & Neal 2004), for the Gibbs-type partition of an
NGGP given its auxiliary variable ``U`` (``docs/nrm.md``, "The marginal Gibbs sampler"). Given
``U`` the partition's law is a product over clusters,

.. math::
    p(z \mid U) \propto \prod_{k=1}^{K} a (U + τ)^{σ} \frac{Γ(n_k - σ)}{Γ(1 - σ)}

(the joint of ``(z, U)`` of the Gibbs sampler's sweep, :mod:`numpyro_bnp.infer._nggp_sweep`),
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

If ``i`` and ``j`` share a cluster ``c``, the move proposes to split ``c``: ``i`` seeds one
part and ``j`` the other, and the other rows of ``c``, in a random order, join part ``b`` with
probability ``∝ (n_b − σ) p(x | X_b)`` against ``(n_a − σ) p(x | X_a)`` (their sizes and
posteriors so far), the product of these choices being the proposal's probability ``q``. If
they are in different clusters, it proposes to merge them; ``q`` is then the probability that
the same sequential allocation (same order) recreates the two clusters. Metropolis–Hastings
accepts a split with probability ``min(1, p(split) / (p(merge) q))`` and a merge with
``min(1, p(merge) q / p(split))``; the moves leave ``p(z | U, X)`` invariant, so they combine
with the sampler's exact ``U`` draw and label sweep.

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


def split_merge(family, rows, labels, log_u, mass, sigma, tau, capacity, key, sketch=None):
    """One merge–split move (module docstring) on the labels ``(N,)`` int32.

    :param family: the conjugate family of the components (:mod:`numpyro_bnp.families`).
    :param rows: the data, ``(N, D)`` or :class:`~numpyro_bnp.families.SparseCounts`; ``None``
        for a prior-only chain.
    :param sketch: ``(N, r)`` :func:`row_sketch` of the rows, which weighs merge pairs
        (module docstring); ``None``: all weights 1.
    :param log_u: ``log U`` of the current state; ``mass``, ``sigma``, ``tau``: the NGGP's.
    :param int capacity: the number of cluster slots ``K``.
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
    uniforms = random.uniform(key_alloc, (num_rows,), dtype)
    seeds = jnp.eye(2, dtype=dtype)

    if rows is None:
        params = None
    else:
        params = family.init_clusters(2)
        params = family.update(params, family.stats(_row(rows, i)), seeds[0])
        params = family.update(params, family.stats(_row(rows, j)), seeds[1])

    def allocate(t, carry):
        params, sizes, log_q, to_b = carry
        n = order[t]
        active = others[n]
        log_w = jnp.log(sizes - sigma)
        if rows is not None:
            x = _row(rows, n)
            log_w = log_w + family.log_predictive(params, x)
        margin = log_w[1] - log_w[0]
        # a split draws the part; a merge replays the two clusters it would undo
        choose_b = jnp.where(split, uniforms[n] < jax.nn.sigmoid(margin), labels[n] == c_j)
        log_q = log_q + jnp.where(
            active, jax.nn.log_sigmoid(jnp.where(choose_b, margin, -margin)), 0.0
        )
        weights = jnp.where(active, seeds[choose_b.astype(jnp.int32)], 0.0)
        if rows is not None:
            params = family.update(params, family.stats(x), weights)
        return params, sizes + weights, log_q, to_b.at[n].set(active & choose_b)

    carry = (params, jnp.ones(2, dtype), jnp.zeros((), dtype), jnp.zeros(num_rows, bool))
    params, sizes, log_q, to_b = lax.fori_loop(0, num_rows, allocate, carry)

    log_ratio = _log_split_prior(sizes[0], sizes[1], log_u, mass, sigma, tau, dtype)
    if rows is not None:
        merged = family.absorb(family.init_clusters(1), rows, members.astype(dtype)[:, None])
        a0 = family.log_normalizer(family.prior)
        log_ratio = (
            log_ratio + family.log_normalizer(params).sum() - a0 - family.log_normalizer(merged)[0]
        )  # log p(split) − log p(merge), the marginal likelihoods' part
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
