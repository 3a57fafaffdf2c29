r"""Sequentially-allocated merge–split moves for conjugate NGGP mixtures, given ``U``.

Dahl, *Sequentially-allocated merge-split sampler for conjugate and nonconjugate Dirichlet
process mixture models*, 2005 (after Jain & Neal 2004), for the Gibbs-type partition of an
NGGP given its auxiliary variable ``U`` (``docs/nrm.md``, "The marginal Gibbs sampler"). Given
``U`` the partition's law is a product over clusters,

.. math::
    p(z \mid U) \propto \prod_{k=1}^{K} a (U + τ)^{σ} \frac{Γ(n_k - σ)}{Γ(1 - σ)}
    \quad\text{(the joint of } (z, U) \text{ of the Gibbs sampler's module docstring),}

and the components are integrated out: a cluster ``C`` contributes its marginal likelihood
``exp(A(H_0 + x_C) − A(H_0)) Π_{n∈C} h(x_n)`` (:mod:`numpyro_bnp.families`; the ``h`` terms are
the same on both sides of a move and cancel).

One move picks two rows ``i ≠ j`` uniformly. If they share a cluster ``c``, it proposes to split
``c``: ``i`` seeds one part and ``j`` the other, and the other rows of ``c``, in a random order,
join part ``b`` with probability ``∝ (n_b − σ) p(x | X_b)`` against ``(n_a − σ) p(x | X_a)``
(their sizes and posteriors so far), the product of these choices being the proposal's
probability ``q``. If they are in different clusters, it proposes to merge them; ``q`` is then
the probability that the same sequential allocation (same order) recreates the two clusters.
Metropolis–Hastings accepts a split with probability ``min(1, p(split) / (p(merge) q))`` and a
merge with ``min(1, p(merge) q / p(split))``; the moves leave ``p(z | U, X)`` invariant, so
they combine with the sampler's exact ``U`` draw and label sweep.

A split needs a free slot of the fixed capacity; without one it is rejected and reported.
"""

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.scipy.special import gammaln

__all__ = ["split_merge"]


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


def split_merge(family, rows, labels, log_u, mass, sigma, tau, capacity, key):
    """One merge–split move (module docstring) on the labels ``(N,)`` int32.

    :param family: the conjugate family of the components (:mod:`numpyro_bnp.families`).
    :param rows: the data, ``(N, D)`` or :class:`~numpyro_bnp.families.SparseCounts`; ``None``
        for a prior-only chain.
    :param log_u: ``log U`` of the current state; ``mass``, ``sigma``, ``tau``: the NGGP's.
    :param int capacity: the number of cluster slots ``K``.
    :return: ``(labels, accepted, full)``: the new labels (not canonical: a split's second
        part takes the first free slot), whether the move was accepted, and whether a split
        was refused for want of a free slot.
    """
    dtype = family.dtype
    num_rows = labels.shape[0]
    key_i, key_j, key_order, key_alloc, key_accept = random.split(key, 5)
    i = random.randint(key_i, (), 0, num_rows)
    j = (i + random.randint(key_j, (), 1, num_rows)) % num_rows  # uniform over j ≠ i
    c_i, c_j = labels[i], labels[j]
    split = c_i == c_j
    index = jnp.arange(num_rows)
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

    counts = jnp.zeros(capacity, jnp.int32).at[labels].add(1)
    free = jnp.argmax(counts == 0)
    full = split & (counts[free] > 0)
    accepted = (jnp.log(random.uniform(key_accept, (), dtype)) < log_accept) & ~full
    split_labels = jnp.where(to_b | (index == j), free, labels)
    merge_labels = jnp.where(labels == c_j, c_i, labels)
    proposal = jnp.where(split, split_labels, merge_labels).astype(labels.dtype)
    return jnp.where(accepted, proposal, labels), accepted, full
