r"""The sweep of the collapsed Gibbs sampler for NGGP mixtures: the chain's state and its steps.

The pure functions of :class:`~numpyro_bnp.infer.NGGPMarginalGibbs`: its state, one sweep, the
first state and the held-out predictive (the kernel, its reading of the model and its checks:
:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.kernel`).

The components are integrated out; the chain's state is the partition ``z`` and the auxiliary
variable ``U = U_N`` (``U | T ~ Gamma(N, T)``, ``T`` the CRM's total mass), whose joint law
with the partition is (James, Lijoi & Prünster 2009; Tank, Foti & Fox 2015, Eq. 6)

.. math::
    p(z, U = u) = \frac{u^{N-1}}{Γ(N)} e^{-ψ(u)} \prod_{k=1}^{K} κ(n_k, u), \qquad
    κ(m, u) = a \frac{Γ(m - σ)}{Γ(1 - σ)} (u + τ)^{σ - m}.

One MCMC iteration is one sweep:

1. ``log U | z``, an exact draw (:func:`numpyro_bnp._math.nggp_sample_log_u`: the density
   depends on ``z`` only through ``(N, K)`` and is log-concave in ``log U``; Favaro & Teh
   slice-sample it, an exact draw is the better Gibbs step);
2. the NGGP's hyper-parameter sites, if the model has some (``mass ~ Gamma``, ``σ ~ Beta``,
   ...; :class:`~numpyro_bnp.infer.NGGPMarginalGibbs`), each in turn given ``z``, ``U`` and the
   others, exactly. The joint above depends on the mass ``a`` through ``a^K e^{-ψ(u)}`` with
   ``ψ`` linear in ``a`` (:func:`numpyro_bnp._math.ggp_laplace_exponent`), so a ``Gamma(α, β)``
   prior on the mass is conjugate:

   .. math::
       a \mid z, U \sim \mathrm{Gamma}\big(α + K,\ β + ψ(U)/a\big), \qquad
       ψ(u)/a = \frac{(u + τ)^σ - τ^σ}{σ} \ (σ > 0), \quad \log(1 + u/τ) \ (σ = 0);

   any other site (σ, τ, a mass with another prior or set through a function) is updated by
   slice sampling (Neal 2003) of its prior times the joint above on its unconstrained line;
3. each label in turn, ``z_n | z_{-n}, U, X`` (the ratios ``κ(n_k + 1, U) / κ(n_k, U)`` and
   ``κ(1, U)`` of the joint above, the paper's urn Eq. 5 of Tank et al.):

   .. math::
       p(z_n = k) \propto (n_{k,-n} - σ)\, p(x_n \mid X_{k,-n}), \qquad
       p(z_n = \mathrm{new}) \propto a (U + τ)^σ\, p(x_n \mid H_0),

   with the conjugate posterior predictives of the family; a cluster's posterior loses and
   gains row ``n`` by the family's exact ``update`` (recomputed from all rows at the start of
   each sweep, against round-off);
4. ``split_merge`` merge–split moves at the same ``U``
(:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.split_merge`:
   Dahl's sequentially-allocated proposals, 2005, refined by ``split_merge_scans`` restricted
   Gibbs scans, Jain & Neal 2004, accepted by Metropolis–Hastings; uniform, split and merge
   pairs), which move whole clusters where single labels move one row at a
   time. On galaxies (``docs/engines.md``) five moves per sweep raise the effective sample size
   per sweep of the number of clusters from 0.13 to 0.40 (DP) and from 0.21 to 0.25 (σ = ½) at
   about the same time per sweep; on digits as counts (about 115 clusters) the split and merge
   pairs are what lets the chains climb to the posterior (``docs/nrm.md``).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import gammaln, logsumexp
from numpyro.distributions.transforms import biject_to

from numpyro_bnp._checks import is_concrete
from numpyro_bnp._math import (
    ggp_laplace_exponent,
    nggp_log_u_density,
    nggp_log_v,
    nggp_sample_log_u,
)
from numpyro_bnp.families import SparseCounts
from numpyro_bnp.infer.core.mcmc import slice_sample
from numpyro_bnp.infer.mixtures.nggp_gibbs.split_merge import row_sketch, split_merge

__all__ = ["NGGPMarginalGibbsState"]

_SLICE_WIDTH = 1.0  # slice width of a hyper-parameter site on its unconstrained line


class NGGPMarginalGibbsState(NamedTuple):
    """State of :class:`~numpyro_bnp.infer.NGGPMarginalGibbs` (one chain; vectorized chains
    add a leading axis).

    :ivar i: number of sweeps done (int32).
    :ivar z: the sample, ``{partition site: (N,) int32 canonical labels, component sites: one
        conjugate-posterior draw per cluster (K, ...), hyper-parameter sites: scalars}``
        (components that are not conjugate: the chain's own, :mod:`numpyro_bnp.infer.mixtures.
        nggp_gibbs.auxiliary`).
    :ivar log_u: ``log U_N`` drawn at the start of the sweep.
    :ivar num_clusters: the number of clusters ``K_N`` (int32).
    :ivar log_joint: ``log p(h) + log p(z | h) + log p(X | z)``, the components integrated out
        (the target; ``p(z | h)`` the exact EPPF at the hyper-parameter sites' values ``h``,
        ``p(h)`` their prior; without such sites ``log p(z) + log p(X | z)``).
    :ivar log_likelihood: ``log p(X | z)``, the components integrated out (components that are
        not conjugate: ``log f(X | z, θ)`` at the chain's components, and ``log_joint`` adds
        their prior ``log H_0``).
    :ivar co_clustered: ``(P,)`` bool, whether each of the kernel's ``pairs`` of rows share a
        cluster (label-invariant functions for ESS and R-hat).
    :ivar saturated: True when the capacity was full in the sweep
        (:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.kernel`, "Capacity").
    :ivar num_saturated: the sweeps so far with ``saturated`` (int32; the first state counts).
    :ivar rng_key: PRNG key.
    :ivar replicas: with tempered replicas (``NGGPMarginalGibbs(..., temperatures=)``,
        :mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.tempering`), the ``R - 1`` hot replicas: an
        ``NGGPMarginalGibbsState`` with a leading axis ``R - 1`` (replica ``r`` at index
        ``r - 1``; their ``log_joint`` is their tempered target, ``log p(h) + log p(z | h) +
        β_r log p(X | z)``, their ``log_likelihood`` untempered). The fields above are those of
        the untempered replica (``β_0 = 1``), except ``saturated`` / ``num_saturated``, which
        count a sweep in which any replica saturated. ``None`` without tempering.
    :ivar swap_rate: ``(R - 1,)`` the probability ``min(1, exp(Δ_r))`` that replicas ``r`` and
        ``r + 1`` exchange their states, at the swept states, proposed or not (its mean over
        draws is the pair's swap acceptance rate; ``None`` without tempering).
    :ivar swapped: ``(R - 1,)`` bool, the pairs exchanged in this sweep (``None`` without
        tempering).
    """

    i: jnp.ndarray
    z: dict
    log_u: jnp.ndarray
    num_clusters: jnp.ndarray
    log_joint: jnp.ndarray
    log_likelihood: jnp.ndarray
    co_clustered: jnp.ndarray
    saturated: jnp.ndarray
    num_saturated: jnp.ndarray
    rng_key: jnp.ndarray
    replicas: object = None
    swap_rate: jnp.ndarray | None = None
    swapped: jnp.ndarray | None = None


class _Config(NamedTuple):
    """The model's constants the sweep needs (hashable host values). The NGGP's parameters are
    not among them: they are read from the model at each sweep (``numbers``, a function of the
    hyper-parameter sites' values giving a
    :class:`~numpyro_bnp.infer.mixtures.model.MixtureNumbers`)."""

    num_rows: int
    capacity: int
    pairs: tuple
    partition_site: str
    doc_width: int  # distinct words per document kept (documents only; 0 otherwise)
    hyper_sites: tuple = ()  # the NGGP's hyper-parameter sites, in trace order
    conjugate_mass: str | None = None  # the one updated by its conjugate Gamma draw
    split_merge: int = 0  # merge-split moves per sweep (none for fewer than two rows)
    split_merge_scans: int = 0  # restricted Gibbs scans of each move (split_merge)


def _row(rows, n):
    """Row ``n`` of dense rows ``(N, D)`` or of documents (:class:`SparseCounts` ``(N, L)``)."""
    return jax.tree.map(lambda a: a[n], rows)


def _documents(x, width):
    """Dense word counts ``(N, V)`` as :class:`SparseCounts` ``(N, width)``: the non-zero
    counts first, in vocabulary order (concrete counts on the host)."""
    xp = np if is_concrete(x) else jnp
    x = xp.asarray(x)
    order = xp.argsort(x == 0, axis=-1, stable=True)[:, :width].astype(np.int32)
    return SparseCounts(jnp.asarray(order), jnp.asarray(xp.take_along_axis(x, order, axis=-1)))


def _canonical_order(labels, capacity):
    """``(K,)`` the old slot of each canonical one: clusters in order of first appearance,
    empty slots last."""
    num_rows = labels.shape[0]
    first = (
        jnp.full(capacity, num_rows, jnp.int32)
        .at[labels]
        .min(jnp.arange(num_rows, dtype=jnp.int32))
    )
    return jnp.argsort(first, stable=True)


def _canonical(labels, capacity):
    """The labels with clusters renumbered in order of first appearance."""
    order = _canonical_order(labels, capacity)
    return jnp.argsort(order)[labels].astype(jnp.int32)


def _slot_sizes(labels, capacity):
    """``(K,)`` int32: the number of rows in each of the ``capacity`` slots."""
    return jnp.zeros(capacity, jnp.int32).at[labels].add(1)


def _log_new_weight(num_rows, num_clusters, nggp, dtype):
    """``log V_{n,K+1} − log V_{n,K}``: the weight of a new cluster against the factor
    ``(n_k − σ)`` of an existing one when an item joins ``K`` clusters of ``n − 1`` items (the
    ratio of the EPPFs with and without it; Gibbs-type priors). ``K = 0``: any value.
    ``nggp``: the NGGP's parameters (a ``MixtureNumbers``)."""
    ks = jnp.stack([jnp.maximum(num_clusters, 1), num_clusters + 1]).astype(dtype)
    log_v = nggp_log_v(jnp.asarray(num_rows, dtype), ks, nggp.mass, nggp.sigma, nggp.tau)[0]
    return (log_v[1] - log_v[0]).astype(dtype)


def _cluster_params(family, rows, labels, capacity):
    """Each slot's conjugate posterior given its rows (prior-only chains: the prior)."""
    prior = family.init_clusters(capacity)
    if rows is None:
        return prior
    return family.absorb(prior, rows, jax.nn.one_hot(labels, capacity, dtype=family.dtype))


def _log_factors(counts, sigma, dtype):
    """``Σ_k log (1 - σ)_{n_k - 1}`` of slot sizes ``counts`` ``(K,)`` (empty slots: 0)."""
    sizes = counts.astype(dtype)
    return jnp.where(sizes > 0, gammaln(sizes - sigma) - gammaln(1.0 - sigma), 0.0).sum()


def _log_eppf(counts, cfg, nggp, dtype):
    """``log V_{N,K} + Σ_k log (1 - σ)_{n_k - 1}`` of slot sizes ``counts`` ``(K,)``."""
    k = jnp.sum(counts > 0)
    log_v = nggp_log_v(cfg.num_rows, jnp.maximum(k, 1), nggp.mass, nggp.sigma, nggp.tau)[0]
    return log_v.astype(dtype) + _log_factors(counts, nggp.sigma, dtype)


def _log_joint_u(counts, cfg, log_u, nggp, dtype):
    r"""``log p(z, log U = log_u | a, σ, τ)``, the joint of the module docstring with the
    Jacobian ``u`` of ``log U``:

    .. math::
        K \log a - \log Γ(N) + N \log u + (Kσ - N) \log(u + τ) - ψ(u)
        + \sum_k \log (1 - σ)_{n_k - 1}

    (:func:`numpyro_bnp._math.nggp_log_u_density` is the part in ``u``)."""
    k = jnp.sum(counts > 0).astype(dtype)
    mass, sigma, tau = (jnp.asarray(v, dtype) for v in (nggp.mass, nggp.sigma, nggp.tau))
    g = nggp_log_u_density(
        log_u, jnp.asarray(cfg.num_rows, dtype), k, jnp.log(mass), sigma, jnp.log(tau)
    )[0]
    return (
        k * jnp.log(mass)
        - gammaln(jnp.asarray(cfg.num_rows, dtype))
        + g
        + _log_factors(counts, sigma, dtype)
    )


def _log_likelihood(family, rows, params, counts):
    """``log p(X | z) = Σ_k [A(post_k) − A(prior)] + Σ_n log h(x_n)``, where
    ``log h(x) = log p(x | H_0) − [A(H_0 + x) − A(H_0)]`` (the exponential-family identity of
    :mod:`numpyro_bnp.families`: a conjugate posterior's normaliser gives the marginal
    likelihood of what it absorbed, up to the base measure)."""
    if rows is None:
        return jnp.zeros((), family.dtype)
    prior = family.prior
    a0 = family.log_normalizer(prior)

    def log_base(x):
        post = family.update(prior, family.stats(x), 1.0)
        return family.log_predictive(prior, x) - family.log_normalizer(post) + a0

    gains = jnp.where(counts > 0, family.log_normalizer(params) - a0, 0.0)
    return gains.sum() + jax.vmap(log_base)(rows).sum()


def _assign(family, rows, cfg, labels, counts, params, key, log_new_fn, beta=None):
    """One pass over the rows in order, each label drawn from its full conditional (module
    docstring, step 3): ``(labels, counts, params, saturated)``. ``log_new_fn(n, counts)``
    gives the log prior weights of a new cluster (a scalar) and of the occupied slots ``(K,)``
    (``counts`` without row ``n``); a label ``-1`` is a row not yet assigned. ``beta``: the
    inverse temperature of a tempered replica (the predictives raised to it), ``None`` for
    the untempered chain."""
    capacity = cfg.capacity
    dtype = family.dtype
    gumbel = random.gumbel(key, (cfg.num_rows, capacity), dtype)
    prior = family.init_clusters(capacity)

    def step(n, carry):
        labels, counts, params, saturated = carry
        old = jax.nn.one_hot(labels[n], capacity, dtype=dtype)  # zeros for -1
        counts = counts - old.astype(counts.dtype)
        empty = counts == 0
        if rows is None:
            log_pred = jnp.zeros(capacity, dtype)
        else:
            x = _row(rows, n)
            stats = family.stats(x)
            params = family.update(params, stats, -old)
            # a slot that lost its last row is the prior again, exactly
            params = jax.tree.map(
                lambda p, q: jnp.where(empty.reshape(empty.shape + (1,) * (p.ndim - 1)), q, p),
                params,
                prior,
            )
            log_pred = family.log_predictive(params, x)
            if beta is not None:  # a tempered replica: the ratio of tempered marginals
                log_pred = beta * log_pred
        log_new, log_old = log_new_fn(n, counts)
        new_slot = jnp.argmax(empty)
        full = ~empty[new_slot]
        logits = jnp.where(empty, -jnp.inf, log_old + log_pred)
        logits = logits.at[new_slot].set(
            jnp.where(full, logits[new_slot], log_new + log_pred[new_slot])
        )
        k = jnp.argmax(logits + gumbel[n]).astype(jnp.int32)
        new = jax.nn.one_hot(k, capacity, dtype=dtype)
        if rows is not None:
            params = family.update(params, stats, new)
        return labels.at[n].set(k), counts + new.astype(counts.dtype), params, saturated | full

    carry = (labels, counts, params, jnp.zeros((), bool))
    return lax.fori_loop(0, cfg.num_rows, step, carry)


def _finish(
    family,
    rows,
    cfg,
    to_sites,
    labels,
    log_u,
    i,
    saturated,
    num_saturated,
    key,
    hyper,
    nggp,
    beta=None,
):
    """Canonical labels, the component draws and the diagnostics: the state after a sweep
    (``hyper``: the hyper-parameter sites' values, ``nggp`` the numbers at them;
    ``num_saturated`` the saturated sweeps before this one; ``beta``: a tempered replica's
    inverse temperature, whose ``log_joint`` is its tempered target)."""
    dtype = family.dtype
    labels = _canonical(labels, cfg.capacity)
    counts = _slot_sizes(labels, cfg.capacity)
    params = _cluster_params(family, rows, labels, cfg.capacity)
    key, key_theta = random.split(key)
    log_lik = _log_likelihood(family, rows, params, counts)
    tempered = log_lik if beta is None else beta * log_lik
    log_joint = nggp.log_prior.astype(dtype) + _log_eppf(counts, cfg, nggp, dtype) + tempered
    z = to_sites(labels, family.sample(key_theta, params), hyper)
    return _chain_state(
        cfg, i, z, labels, counts, log_u, log_joint, log_lik, saturated, num_saturated, key, dtype
    )


def _chain_state(
    cfg, i, z, labels, counts, log_u, log_joint, log_lik, saturated, num_saturated, key, dtype
):
    """The :class:`NGGPMarginalGibbsState` of the sample ``z`` with canonical ``labels`` ``(N,)``
    and slot sizes ``counts`` ``(capacity,)``: the number of clusters, the co-clustering of the
    ``cfg.pairs`` and the saturated sweeps (``num_saturated`` before this one, plus this one's
    ``saturated``) are read from them."""
    pairs = np.asarray(cfg.pairs, np.int32).reshape(-1, 2)
    return NGGPMarginalGibbsState(
        i=jnp.asarray(i, jnp.int32),
        z=z,
        log_u=jnp.asarray(log_u, dtype),
        num_clusters=jnp.sum(counts > 0).astype(jnp.int32),
        log_joint=log_joint,
        log_likelihood=log_lik,
        co_clustered=labels[pairs[:, 0]] == labels[pairs[:, 1]],
        saturated=jnp.asarray(saturated, bool),
        num_saturated=jnp.asarray(num_saturated + saturated, jnp.int32),
        rng_key=key,
    )


def _log_old(counts, sigma, dtype):
    """``log(n_k − σ)`` of the slot sizes (any value for the empty slots)."""
    return jnp.log(jnp.maximum(counts.astype(dtype) - jnp.asarray(sigma, dtype), 1e-30))


def _sample_log_u(key, cfg, counts, nggp, dtype):
    """Step 1: an exact draw of ``log U | z`` (:func:`numpyro_bnp._math.nggp_sample_log_u`)."""
    num = jnp.sum(counts > 0)
    return nggp_sample_log_u(key, cfg.num_rows, num, nggp.mass, nggp.sigma, nggp.tau).astype(dtype)


def _update_hyper(key, cfg, counts, log_u, hyper, numbers, dtype):
    """Step 2 (module docstring): each hyper-parameter site in turn given the partition, ``U``
    and the others, exactly: the conjugate Gamma draw of the mass, a slice-sampling update on
    the unconstrained line otherwise. ``numbers(values)`` reads the model at the values."""
    num = jnp.sum(counts > 0).astype(dtype)
    for name, sub in zip(cfg.hyper_sites, random.split(key, len(cfg.hyper_sites)), strict=True):
        now = numbers(hyper)
        prior = now.priors[name]
        if name == cfg.conjugate_mass:
            # a | z, U ~ Gamma(α + K, β + ψ(U)/a), ψ/a the Laplace exponent at unit mass
            psi_1 = ggp_laplace_exponent(jnp.exp(log_u), 1.0, now.sigma, now.tau)
            shape = jnp.asarray(prior.concentration, dtype) + num
            draw = random.gamma(sub, shape, dtype=dtype) / (prior.rate + psi_1)
            hyper = {**hyper, name: jnp.asarray(draw, dtype)}
            continue
        transform = biject_to(prior.support)

        def log_density(x, name=name, transform=transform, hyper=hyper):
            value = transform(x)
            at = numbers({**hyper, name: value})
            jacobian = transform.log_abs_det_jacobian(x, value)
            return at.log_prior + jacobian + _log_joint_u(counts, cfg, log_u, at, dtype)

        x0 = jnp.asarray(transform.inv(hyper[name]), dtype)
        x = slice_sample(sub, x0, log_density, jnp.asarray(_SLICE_WIDTH, dtype))
        hyper = {**hyper, name: jnp.asarray(transform(x), dtype)}
    return hyper, numbers(hyper)


def _partition_steps(key, cfg, counts, hyper, numbers, dtype):
    """Steps 1 and 2 of the module docstring, which read the partition only (slot sizes
    ``counts``): ``(log U, hyper, numbers, log_new)``, ``log_new = log a (U + τ)^σ`` the log
    prior weight of a new cluster in the label step (``log a`` for ``σ = 0``)."""
    key_h = random.fold_in(key, 1)  # (the streams of fixed hyper-parameters as they were)
    nggp = numbers(hyper)
    log_u = _sample_log_u(key, cfg, counts, nggp, dtype)
    if cfg.hyper_sites:
        hyper, nggp = _update_hyper(key_h, cfg, counts, log_u, hyper, numbers, dtype)
    mass, sigma, tau = (jnp.asarray(v, dtype) for v in (nggp.mass, nggp.sigma, nggp.tau))
    # a (U + τ)^σ; σ = 0 (the Dirichlet process): a, whatever U
    log_new = jnp.log(mass) + sigma * jnp.logaddexp(log_u, jnp.log(tau))
    log_new = jnp.where(sigma == 0, jnp.log(mass), log_new).astype(dtype)
    return log_u, hyper, nggp, log_new


def _sweep(family, rows, cfg, labels, hyper, numbers, key, beta=None):
    """Steps 1-4 of the module docstring: ``(labels, log U, saturated, hyper, numbers)``;
    ``beta``: a tempered replica's inverse temperature (the label step and the merge–split
    moves on ``p(h) p(z, U | h) p(X | z)^β``; steps 1 and 2 do not read the likelihood)."""
    dtype = family.dtype
    key_u, key_z = random.split(key)
    counts = _slot_sizes(labels, cfg.capacity)
    log_u, hyper, nggp, log_new = _partition_steps(key_u, cfg, counts, hyper, numbers, dtype)
    mass, sigma, tau = (jnp.asarray(v, dtype) for v in (nggp.mass, nggp.sigma, nggp.tau))
    params = _cluster_params(family, rows, labels, cfg.capacity)

    def weights(n, counts):
        return log_new, _log_old(counts, sigma, dtype)

    labels, _, _, saturated = _assign(
        family, rows, cfg, labels, counts, params, key_z, weights, beta
    )

    sketch = None if rows is None or not cfg.split_merge else row_sketch(rows)
    scans = cfg.split_merge_scans  # restricted Gibbs scans of each move

    def merge_split(t, carry):
        labels, full = carry
        key = random.fold_in(key_z, t + 1)
        labels, _, refused = split_merge(
            family, rows, labels, log_u, mass, sigma, tau, cfg.capacity, key, sketch, scans, beta
        )
        return labels, full | refused

    # a split refused for want of a free slot is a truncated move: saturated too
    labels, saturated = lax.fori_loop(0, cfg.split_merge, merge_split, (labels, saturated))
    return labels, log_u, saturated, hyper, nggp


def _sequential(family, rows, cfg, nggp, key, beta=None):
    """The first state's labels: one sequential pass with the exact EPPF predictive weights
    (a tempered replica's: the predictives raised to ``beta``)."""
    capacity = cfg.capacity
    weights = _sequential_weights(nggp, family.dtype)
    labels = jnp.full(cfg.num_rows, -1, jnp.int32)
    counts = jnp.zeros(capacity, jnp.int32)
    params = family.init_clusters(capacity)
    labels, _, _, saturated = _assign(family, rows, cfg, labels, counts, params, key, weights, beta)
    return labels, saturated


def _sequential_weights(nggp, dtype):
    """The label step's prior weights of the sequential pass: row ``n`` joins the partition of
    the ``n`` rows before it (the exact EPPF predictive, ``(n_k − σ)`` against
    ``V_{n+1,K+1} / V_{n+1,K}``)."""

    def weights(n, counts):
        log_new = _log_new_weight(n + 1, jnp.sum(counts > 0), nggp, dtype)
        return log_new, _log_old(counts, nggp.sigma, dtype)

    return weights


def _init_chain(key, rows, labels, hyper, family, cfg, to_sites, numbers, beta=None):
    """The first state: the hyper-parameter sites at ``hyper`` ``{site: value}`` (every one of
    ``cfg.hyper_sites``), then the sequential pass, or the given ``labels`` ``(N,)``
    (``beta``: a tempered replica's inverse temperature)."""
    key, key_z, key_u = random.split(key, 3)
    dtype = family.dtype
    nggp = numbers(hyper)
    if labels is None:
        labels, saturated = _sequential(family, rows, cfg, nggp, key_z, beta)
    else:
        saturated = jnp.zeros((), bool)
    counts = _slot_sizes(labels, cfg.capacity)
    log_u = _sample_log_u(key_u, cfg, counts, nggp, dtype)
    return _finish(
        family, rows, cfg, to_sites, labels, log_u, 0, saturated, 0, key, hyper, nggp, beta
    )


def _step(state, rows, family, cfg, to_sites, numbers, beta=None):
    """One MCMC iteration: a sweep (module docstring), then :func:`_finish` (``beta``: a
    tempered replica's inverse temperature)."""
    key, key_sweep = random.split(state.rng_key)
    labels = state.z[cfg.partition_site]
    hyper = {name: state.z[name] for name in cfg.hyper_sites}
    labels, log_u, saturated, hyper, nggp = _sweep(
        family, rows, cfg, labels, hyper, numbers, key_sweep, beta
    )
    i, num_saturated = state.i + 1, state.num_saturated
    return _finish(
        family,
        rows,
        cfg,
        to_sites,
        labels,
        log_u,
        i,
        saturated,
        num_saturated,
        key,
        hyper,
        nggp,
        beta,
    )


def _refresh(state, rows, family, cfg, numbers):
    """``log_likelihood`` and ``log_joint`` of ``state`` recomputed (the other blocks of a
    ``numpyro.infer.Gibbs`` moved: the family and the NGGP may have changed)."""
    dtype = family.dtype
    labels = state.z[cfg.partition_site]
    counts = _slot_sizes(labels, cfg.capacity)
    params = _cluster_params(family, rows, labels, cfg.capacity)
    nggp = numbers({name: state.z[name] for name in cfg.hyper_sites})
    log_lik = _log_likelihood(family, rows, params, counts)
    log_joint = nggp.log_prior.astype(dtype) + _log_eppf(counts, cfg, nggp, dtype) + log_lik
    return state._replace(log_likelihood=log_lik, log_joint=log_joint)


def _log_predictive_draws(labels, given, rows, new, dtype, cfg, numbers):
    """``(S, M)`` ``log p(x*_m | z_s, X)``
    (:meth:`~numpyro_bnp.infer.NGGPMarginalGibbs.log_predictive`); the draws' scalar sites
    ``given`` (``{site: (S,)}``) set each draw's NGGP and family (``numbers(given)``)."""

    def one(draw):
        labels, given = draw
        nggp = numbers(given)
        family = jax.tree.map(lambda a: jnp.asarray(a, dtype), nggp.family)
        counts = _slot_sizes(labels, cfg.capacity)
        log_new = _log_new_weight(cfg.num_rows + 1, jnp.sum(counts > 0), nggp, dtype)
        params = _cluster_params(family, rows, labels, cfg.capacity)
        # the occupied clusters, then a new one (which needs no free slot)
        log_w = jnp.where(counts > 0, _log_old(counts, nggp.sigma, dtype), -jnp.inf)
        log_w = jnp.append(log_w, log_new)

        def row(x):
            return jnp.append(
                family.log_predictive(params, x), family.log_predictive(family.prior, x)
            )

        return logsumexp(jax.vmap(row)(new) + log_w, axis=-1) - logsumexp(log_w)

    return lax.map(one, (labels, given))
