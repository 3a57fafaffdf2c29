r"""The collapsed ("marginal") Gibbs sampler for NGGP mixtures, as a NumPyro ``MCMCKernel``.

Favaro & Teh, *MCMC for normalized random measure mixture models*, Stat. Sci. 2013 (the
marginal sampler of their Section 3; ``docs/nrm.md``, "The marginal Gibbs sampler"). The model
is a mixture whose partition has an :class:`~numpyro_bnp.distributions.NGGP` prior (mass ``a``,
discount ``σ``, tilt ``τ``) and whose components are conjugate to the likelihood
(:mod:`numpyro_bnp.families`):

.. math::
    z \sim \mathrm{NGGP}(a, σ, τ), \quad θ_k \sim H_0, \quad x_n \mid z, θ \sim F(θ_{z_n}).

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
   ...; :class:`NGGPMarginalGibbs`), each in turn given ``z``, ``U`` and the others, exactly. The
   joint above depends on the mass ``a`` through ``a^K e^{-ψ(u)}`` with ``ψ`` linear in ``a``
   (:func:`numpyro_bnp._math.ggp_laplace_exponent`), so a ``Gamma(α, β)`` prior on the mass is
   conjugate:

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
4. ``split_merge`` merge–split moves at the same ``U`` (:mod:`numpyro_bnp.infer._split_merge`:
   Dahl's sequentially-allocated proposals, 2005, accepted by Metropolis–Hastings; uniform,
   split and merge pairs), which move whole clusters where single labels move one row at a
   time. On galaxies (``docs/engines.md``) five moves per sweep raise the effective sample size
   per sweep of the number of clusters from 0.13 to 0.40 (DP) and from 0.21 to 0.25 (σ = ½) at
   about the same time per sweep; on digits as counts (about 115 clusters) the split and merge
   pairs are what lets the chains climb to the posterior (``docs/nrm.md``).

The components in the sample are draws from their conjugate posteriors given the partition
(empty slots: prior draws); they are output, not part of the chain. Labels are canonical
(clusters numbered in order of first appearance), so the sample is a valid value of the model's
NGGP site.

**Capacity.** The clusters live in the model's clusters plate (``K`` slots, the
``max_clusters`` of the ready models; each row costs ``K`` predictives). A sweep that finds all
slots occupied when a row could open a new cluster runs on the truncated model: its
``saturated`` field is True and a ``RuntimeWarning`` says so; rebuild the model with a larger
``max_clusters``.

**First state.** Without ``init_params`` a chain starts from one sequential pass in which row
``n`` joins a cluster with the exact predictive of the first ``n - 1`` rows' partition,
``(n_k - σ) V_{n,K}`` against ``V_{n,K+1}`` (Gibbs-type EPPF weights), times the conjugate
predictive: a draw of the sequential (particle) approximation of the posterior. Hyper-parameter
sites start at the values in ``init_params``, else at the reader's fixed point of their support
(as a block of ``numpyro.infer.Gibbs``: the composite's prior draws).
"""

import copy
import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import gammaln, logsumexp
from numpyro import handlers
from numpyro.distributions.transforms import biject_to
from numpyro.infer.gibbs import GIBBS_SITES_KWARG, conditioned
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import identity

from numpyro_bnp._checks import FixedOptions, is_concrete, model_function, nonnegative_int
from numpyro_bnp._math import (
    ggp_laplace_exponent,
    nggp_log_u_density,
    nggp_log_v,
    nggp_sample_log_u,
)
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.families import SparseCounts
from numpyro_bnp.infer import streaming
from numpyro_bnp.infer._mcmc import chains_batched, over_chains, slice_sample, with_deterministic
from numpyro_bnp.infer._mixture_model import read_mixture_model
from numpyro_bnp.infer._model import trace_model, unwrap
from numpyro_bnp.infer._nrm_rows import check_documents
from numpyro_bnp.infer._split_merge import row_sketch, split_merge

__all__ = ["NGGPMarginalGibbs", "NGGPMarginalGibbsState"]

_ENGINE = "NGGPMarginalGibbs"
_SLICE_WIDTH = 1.0  # slice width of a hyper-parameter site on its unconstrained line


class NGGPMarginalGibbsState(NamedTuple):
    """State of :class:`NGGPMarginalGibbs` (one chain; vectorized chains add a leading axis).

    :ivar i: number of sweeps done (int32).
    :ivar z: the sample, ``{partition site: (N,) int32 canonical labels, component sites: one
        conjugate-posterior draw per cluster (K, ...), hyper-parameter sites: scalars}``.
    :ivar log_u: ``log U_N`` drawn at the start of the sweep.
    :ivar num_clusters: the number of clusters ``K_N`` (int32).
    :ivar log_joint: ``log p(h) + log p(z | h) + log p(X | z)``, the components integrated out
        (the target; ``p(z | h)`` the exact EPPF at the hyper-parameter sites' values ``h``,
        ``p(h)`` their prior; without such sites ``log p(z) + log p(X | z)``).
    :ivar log_likelihood: ``log p(X | z)``, the components integrated out.
    :ivar co_clustered: ``(P,)`` bool, whether each of the kernel's ``pairs`` of rows share a
        cluster (label-invariant functions for ESS and R-hat).
    :ivar saturated: True when the capacity was full in the sweep (module docstring).
    :ivar rng_key: PRNG key.
    """

    i: jnp.ndarray
    z: dict
    log_u: jnp.ndarray
    num_clusters: jnp.ndarray
    log_joint: jnp.ndarray
    log_likelihood: jnp.ndarray
    co_clustered: jnp.ndarray
    saturated: jnp.ndarray
    rng_key: jnp.ndarray


class _Config(NamedTuple):
    """The model's constants the sweep needs (hashable host values). The NGGP's parameters are
    not among them: they are read from the model at each sweep (``numbers``, a function of the
    hyper-parameter sites' values giving a
    :class:`~numpyro_bnp.infer._mixture_model.MixtureNumbers`)."""

    num_rows: int
    capacity: int
    pairs: tuple
    partition_site: str
    doc_width: int  # distinct words per document kept (documents only; 0 otherwise)
    hyper_sites: tuple = ()  # the NGGP's hyper-parameter sites, in trace order
    conjugate_mass: str | None = None  # the one updated by its conjugate Gamma draw
    split_merge: int = 0  # merge-split moves per sweep (none for fewer than two rows)


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


def _canonical(labels, capacity):
    """The labels with clusters renumbered in order of first appearance."""
    num_rows = labels.shape[0]
    first = (
        jnp.full(capacity, num_rows, jnp.int32)
        .at[labels]
        .min(jnp.arange(num_rows, dtype=jnp.int32))
    )
    order = jnp.argsort(first, stable=True)  # the old slot of each new one, empty slots last
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


def _assign(family, rows, cfg, labels, counts, params, key, log_new_fn):
    """One pass over the rows in order, each label drawn from its full conditional (module
    docstring, step 2): ``(labels, counts, params, saturated)``. ``log_new_fn(n, counts)``
    gives the log prior weights of a new cluster (a scalar) and of the occupied slots ``(K,)``
    (``counts`` without row ``n``); a label ``-1`` is a row not yet assigned."""
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


def _finish(family, rows, cfg, to_sites, labels, log_u, i, saturated, key, hyper, nggp):
    """Canonical labels, the component draws and the diagnostics: the state after a sweep
    (``hyper``: the hyper-parameter sites' values, ``nggp`` the numbers at them)."""
    dtype = family.dtype
    labels = _canonical(labels, cfg.capacity)
    counts = _slot_sizes(labels, cfg.capacity)
    params = _cluster_params(family, rows, labels, cfg.capacity)
    key, key_theta = random.split(key)
    log_lik = _log_likelihood(family, rows, params, counts)
    pairs = np.asarray(cfg.pairs, np.int32).reshape(-1, 2)
    log_joint = nggp.log_prior.astype(dtype) + _log_eppf(counts, cfg, nggp, dtype) + log_lik
    return NGGPMarginalGibbsState(
        i=jnp.asarray(i, jnp.int32),
        z=to_sites(labels, family.sample(key_theta, params), hyper),
        log_u=jnp.asarray(log_u, dtype),
        num_clusters=jnp.sum(counts > 0).astype(jnp.int32),
        log_joint=log_joint,
        log_likelihood=log_lik,
        co_clustered=labels[pairs[:, 0]] == labels[pairs[:, 1]],
        saturated=jnp.asarray(saturated, bool),
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


def _sweep(family, rows, cfg, labels, hyper, numbers, key):
    """Steps 1-3 of the module docstring: ``(labels, log U, saturated, hyper, numbers)``."""
    dtype = family.dtype
    key_u, key_z = random.split(key)
    key_h = random.fold_in(key_u, 1)  # (the streams of fixed hyper-parameters as they were)
    counts = _slot_sizes(labels, cfg.capacity)
    nggp = numbers(hyper)
    log_u = _sample_log_u(key_u, cfg, counts, nggp, dtype)
    if cfg.hyper_sites:
        hyper, nggp = _update_hyper(key_h, cfg, counts, log_u, hyper, numbers, dtype)
    mass, sigma, tau = (jnp.asarray(v, dtype) for v in (nggp.mass, nggp.sigma, nggp.tau))
    # a (U + τ)^σ; σ = 0 (the Dirichlet process): a, whatever U
    log_new = jnp.log(mass) + sigma * jnp.logaddexp(log_u, jnp.log(tau))
    log_new = jnp.where(sigma == 0, jnp.log(mass), log_new).astype(dtype)
    params = _cluster_params(family, rows, labels, cfg.capacity)

    def weights(n, counts):
        return log_new, _log_old(counts, sigma, dtype)

    labels, _, _, saturated = _assign(family, rows, cfg, labels, counts, params, key_z, weights)

    sketch = None if rows is None or not cfg.split_merge else row_sketch(rows)

    def merge_split(t, carry):
        labels, full = carry
        key = random.fold_in(key_z, t + 1)
        labels, _, refused = split_merge(
            family, rows, labels, log_u, mass, sigma, tau, cfg.capacity, key, sketch
        )
        return labels, full | refused

    # a split refused for want of a free slot is a truncated move: saturated too
    labels, saturated = lax.fori_loop(0, cfg.split_merge, merge_split, (labels, saturated))
    return labels, log_u, saturated, hyper, nggp


def _sequential(family, rows, cfg, nggp, key):
    """The first state's labels: one sequential pass with the exact EPPF predictive weights."""
    dtype = family.dtype
    capacity = cfg.capacity

    def weights(n, counts):  # row n joins the partition of the n rows before it
        log_new = _log_new_weight(n + 1, jnp.sum(counts > 0), nggp, dtype)
        return log_new, _log_old(counts, nggp.sigma, dtype)

    labels = jnp.full(cfg.num_rows, -1, jnp.int32)
    counts = jnp.zeros(capacity, jnp.int32)
    params = family.init_clusters(capacity)
    labels, _, _, saturated = _assign(family, rows, cfg, labels, counts, params, key, weights)
    return labels, saturated


def _init_chain(key, rows, labels, hyper, family, cfg, to_sites, numbers):
    """The first state: the hyper-parameter sites at ``hyper`` ``{site: value}`` (every one of
    ``cfg.hyper_sites``), then the sequential pass, or the given ``labels`` ``(N,)``."""
    key, key_z, key_u = random.split(key, 3)
    dtype = family.dtype
    nggp = numbers(hyper)
    if labels is None:
        labels, saturated = _sequential(family, rows, cfg, nggp, key_z)
    else:
        saturated = jnp.zeros((), bool)
    counts = _slot_sizes(labels, cfg.capacity)
    log_u = _sample_log_u(key_u, cfg, counts, nggp, dtype)
    return _finish(family, rows, cfg, to_sites, labels, log_u, 0, saturated, key, hyper, nggp)


def _step(state, rows, family, cfg, to_sites, numbers):
    """One MCMC iteration: a sweep (module docstring), then :func:`_finish`."""
    key, key_sweep = random.split(state.rng_key)
    labels = state.z[cfg.partition_site]
    hyper = {name: state.z[name] for name in cfg.hyper_sites}
    labels, log_u, saturated, hyper, nggp = _sweep(
        family, rows, cfg, labels, hyper, numbers, key_sweep
    )
    return _finish(
        family, rows, cfg, to_sites, labels, log_u, state.i + 1, saturated, key, hyper, nggp
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
    """``(S, M)`` ``log p(x*_m | z_s, X)`` (:meth:`NGGPMarginalGibbs.log_predictive`); the
    draws' scalar sites ``given`` (``{site: (S,)}``) set each draw's NGGP and family
    (``numbers(given)``)."""

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


def _check_width(most, width):
    if most > width:
        raise ValueError(
            f"{_ENGINE}: a document has {int(most)} distinct words, more than the {width} of "
            "the data the chain was started on; start a new chain (MCMC.run without "
            "post_warmup_state) on these documents"
        )


def _warn_saturated(saturated, capacity):
    if np.any(saturated):
        warnings.warn(
            f"{_ENGINE}: every one of the model's {capacity} cluster slots was occupied in a "
            f"sweep ({int(np.sum(saturated))} of {np.size(saturated)} chains), so rows could "
            "not open a new cluster and the chain ran on a truncated model; rebuild the model "
            "with a larger max_clusters (the size of its clusters plate)",
            RuntimeWarning,
            stacklevel=2,
        )


def _default_pairs(num_rows, num_pairs):
    """``num_pairs`` distinct pairs of distinct rows, fixed (NumPy seed 0)."""
    if num_rows < 2:
        return ()
    rng = np.random.default_rng(0)
    total = num_rows * (num_rows - 1) // 2
    picks = rng.choice(total, size=min(num_pairs, total), replace=False)
    first = np.floor((1 + np.sqrt(1 + 8 * picks)) / 2).astype(int)  # pick -> (first, second)
    second = picks - first * (first - 1) // 2
    return tuple((int(a), int(b)) for a, b in zip(second, first, strict=True))


class NGGPMarginalGibbs(FixedOptions, MCMCKernel):
    r"""Collapsed Gibbs sampling of NGGP mixtures (Favaro & Teh 2013), a NumPyro ``MCMCKernel``.

    See the module docstring for the algorithm. The model is read through the mixture-model
    contract (``docs/model_contract.md``, "Mixture models"): an
    :class:`~numpyro_bnp.distributions.NGGP` partition site, component sites in a clusters
    plate of ``K`` slots with a prior conjugate to the likelihood, and one observed site, e.g.
    :func:`numpyro_bnp.models.nggp_gaussian_mixture`. Traced without data (``obs=None``) the
    chain samples the partition prior.

    **Hyper-parameters.** The NGGP's ``mass``, ``sigma`` and ``tau`` are numbers, or set by
    scalar latent sites of the model (its *hyper-parameter sites*), e.g.
    ``mass = numpyro.sample("mass", dist.Gamma(2.0, 2.0))``, ``sigma ~ Beta``, ``tau ~
    Gamma``, which the kernel updates exactly in each sweep (module docstring, step 2): a site
    that is the mass itself with a ``Gamma(α, β)`` prior by its conjugate draw
    ``a | z, U ~ Gamma(α + K, β + ψ(U)/a)``; any other (any prior, any function of the site)
    by slice sampling on its unconstrained line. A hyper-parameter site may set only the
    NGGP's parameters (or another such site's prior), and over its whole support they must be
    valid (``mass > 0``, ``0 <= sigma < 1``, ``tau >= 0``); otherwise a ``ValueError`` names
    it. Its values are in the sample, beside the labels and the components.

    **As a block of** :class:`numpyro.infer.Gibbs` the kernel updates the partition, the
    components and its hyper-parameter sites given the sites of the other blocks (e.g. a noise
    scale ``sigma_o ~ HalfNormal`` of a known-noise family, or the mass, sampled by
    ``NUTS``): each sweep reads the family (the components' prior and the noise) and the
    NGGP's parameters from the model conditioned on the other blocks' values, and
    :meth:`refresh` recomputes ``log_likelihood`` and ``log_joint`` after they moved. The block
    starts from its sequential pass (the labels ``Gibbs`` hands it are prior draws; its
    hyper-parameter sites start at theirs); ``Gibbs`` runs one chain per key
    (``chain_method="sequential"`` for several).

    Each MCMC iteration is one sweep. The sample (``sample_field``) is the dict of the model's
    site values: the canonical labels ``(N,)`` and one draw of the components ``(K, ...)``
    from their posterior given the labels, so ``arviz.from_numpyro`` computes the
    log-likelihood and ``numpyro.infer.Predictive`` runs on the samples. Diagnostics for
    ``extra_fields``: ``num_clusters``, ``log_u``, ``log_joint``, ``log_likelihood``,
    ``co_clustered`` and ``saturated`` (:class:`NGGPMarginalGibbsState`). Chains start from a
    sequential pass (module docstring) or from ``init_params={partition site: labels (N,)}``
    (any integer labels in ``[0, K)``; hyper-parameter sites may be given too, the others
    start at a fixed point of their supports). Held-out rows: :meth:`log_predictive`.

    :param model: a NumPyro mixture model function of the form above.
    :param int num_pairs: how many fixed pairs of rows (NumPy seed 0) the ``co_clustered``
        diagnostic follows; or give them as ``pairs``.
    :param pairs: ``(P, 2)`` row indices, instead of ``num_pairs`` random ones.
    :param int split_merge: merge–split moves per sweep, after the labels (module docstring,
        step 4; ``0``: none). Each is a pass over the rows with two predictives per row (the
        label sweep: ``K`` per row).

    **Example**

    .. code-block:: python

        >>> from jax import random
        >>> from numpyro.infer import MCMC
        >>> from numpyro_bnp.infer import NGGPMarginalGibbs
        >>> from numpyro_bnp.models import nggp_normal_mixture
        >>> x = random.normal(random.PRNGKey(0), (30, 2))
        >>> mcmc = MCMC(NGGPMarginalGibbs(nggp_normal_mixture), num_warmup=20, num_samples=50,
        ...             progress_bar=False)
        >>> mcmc.run(random.PRNGKey(1), x, num_obs=30, dim=2, mass=1.0, sigma=0.25,
        ...          sigma_o=1.0, max_clusters=16, extra_fields=("num_clusters",))
        >>> mcmc.get_samples()["z"].shape, mcmc.get_extra_fields()["num_clusters"].shape
        ((50, 30), (50,))
    """

    sample_field = "z"

    fixed_options = ("num_pairs", "pairs", "split_merge")

    def __init__(self, model, *, num_pairs=8, pairs=None, split_merge=5):
        self._model = model_function(model)
        self.num_pairs = nonnegative_int(num_pairs, "num_pairs")
        self.split_merge = nonnegative_int(split_merge, "split_merge")
        if pairs is not None:
            arr = np.asarray(pairs)
            if arr.ndim != 2 or arr.shape[1] != 2 or arr.dtype.kind not in "iu":
                raise ValueError(f"pairs must be integer row indices of shape (P, 2), got {arr}")
            pairs = tuple(map(tuple, arr.tolist()))
        self.pairs = pairs
        self.spec = None
        self._cfg = None
        self._batched = False

    @property
    def model(self):
        return self._model

    @property
    def default_fields(self):
        return ("z", "num_clusters", "log_joint", "saturated")

    # ------------------------------------------------------------------ reading the model
    def _read(self, model_args, model_kwargs):
        spec = read_mixture_model(self._model, model_args, model_kwargs, _ENGINE, hyper=True)
        dtype = jnp.result_type(float)
        family = jax.tree.map(lambda a: jnp.asarray(a, dtype), spec.family)
        self.spec, self._family = spec, family
        self._gibbs = bool(spec.given)
        x = self._observed(model_args, model_kwargs)
        width = spec.dim if spec.obs_kind == "documents" else 0
        if x is not None and is_concrete(x):
            spec.check_observed(x, f"the data of the observed site {spec.obs_site!r}")
            if spec.obs_kind == "documents":
                width = max(int(np.max(np.sum(np.asarray(x) != 0, axis=-1))), 1)
        pairs = self.pairs
        if pairs is None:
            pairs = _default_pairs(spec.num_rows, self.num_pairs)
        if not all(0 <= i < spec.num_rows and 0 <= j < spec.num_rows for i, j in pairs):
            raise ValueError(f"pairs must index rows 0..{spec.num_rows - 1}, got {pairs}")
        self._cfg = _Config(
            num_rows=spec.num_rows,
            capacity=spec.max_clusters,
            pairs=tuple(pairs),
            partition_site=spec.partition_site,
            doc_width=width,
            hyper_sites=spec.hyper_sites,
            conjugate_mass=spec.conjugate_mass,
            split_merge=self.split_merge if spec.num_rows >= 2 else 0,
        )

    def _numbers(self, model_args, model_kwargs):
        """``values -> MixtureNumbers``: the model read at the hyper-parameter sites' values
        (and, in a Gibbs composite, the other blocks' values in ``model_kwargs``)."""
        return functools.partial(
            self.spec.numbers, model_args=model_args, model_kwargs=model_kwargs
        )

    def _family_at(self, numbers):
        """The family of the model as ``numbers`` reads it, in the kernel's dtype."""
        dtype = self._family.dtype
        return jax.tree.map(lambda a: jnp.asarray(a, dtype), numbers({}).family)

    def _observed(self, model_args, model_kwargs):
        """The observed value ``(N, D)`` as the model gives it (traceable), None without data."""
        spec, family = self.spec, self._family
        stand_in = dict(spec.component_values(family.mean(family.init_clusters(spec.max_clusters))))
        stand_in[spec.partition_site] = jnp.zeros(spec.num_rows, jnp.int32)
        model = handlers.substitute(self._model, data=stand_in)
        site = trace_model(model, model_args, model_kwargs, _ENGINE)[spec.obs_site]
        return site["value"] if site["is_observed"] else None

    def _rows(self, model_args, model_kwargs):
        """The rows the sweep reads: dense ``(N, D)``, documents as :class:`SparseCounts`."""
        x = self._observed(model_args, model_kwargs)
        if x is None:
            return None
        x = jnp.asarray(x, self._family.dtype)
        if self.spec.obs_kind != "documents":
            return x
        width = self._cfg.doc_width
        if is_concrete(x):
            _check_width(int(np.max(np.sum(np.asarray(x) != 0, axis=-1))), width)
        else:
            # counts that are a constant of the compiled program (numpyro's sample loop): the
            # barrier keeps XLA from constant-folding their sort, for seconds per compile
            x = lax.optimization_barrier(x)
            jax.debug.callback(_check_width, jnp.max(jnp.sum(x != 0, axis=-1)), width)
        return _documents(x, width)

    def _to_sites(self, labels, theta, hyper=None):
        """The model's site values: the labels, the components ``theta`` (a family draw) and
        the hyper-parameter sites' values ``hyper``."""
        return {
            self.spec.partition_site: labels,
            **self.spec.component_values(theta),
            **(hyper or {}),
        }

    # ------------------------------------------------------------------ numpyro protocol
    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        """A chain (or a batch of chains) at its first state (class docstring)."""
        self._read(model_args, model_kwargs)
        cfg = self._cfg
        self._batched = chains_batched(rng_key, _ENGINE)
        labels, hyper = self._init_values(init_params, len(rng_key) if self._batched else None)
        rows = self._rows(model_args, model_kwargs)
        numbers = self._numbers(model_args, model_kwargs)
        family = self._family_at(numbers)
        init = functools.partial(
            _init_chain, family=family, cfg=cfg, to_sites=self._to_sites, numbers=numbers
        )
        axes = (0, None, None if labels is None else 0, 0)
        # one compiled program: run eagerly, the first state costs a compilation per operation
        state = jax.jit(over_chains(init, self._batched, axes))(rng_key, rows, labels, hyper)
        _warn_saturated(np.asarray(state.saturated), cfg.capacity)
        return state

    def _init_values(self, init_params, num_chains):
        """``(labels or None, {hyper-parameter site: value})`` of ``init_params``, checked.

        As a block of ``numpyro.infer.Gibbs`` the labels handed in are the composite's prior
        draws: the chain starts from its sequential pass instead (class docstring)."""
        cfg, spec = self._cfg, self.spec
        if init_params is None or (self._gibbs and not init_params):
            return None, self._start(num_chains)
        site = cfg.partition_site
        known = {site, *cfg.hyper_sites, *spec.component_sites}
        if not isinstance(init_params, dict) or not (site in init_params or self._gibbs):
            raise ValueError(f"init_params must be a dict with the partition site {site!r}")
        unknown = sorted(set(init_params) - known)
        if unknown:
            raise ValueError(
                f"init_params has sites {unknown} that are not {_ENGINE}'s; it takes the "
                f"partition site {site!r} and the hyper-parameter sites {list(cfg.hyper_sites)}"
            )
        batch = () if num_chains is None else (num_chains,)
        hyper = self._start(num_chains)
        for name in cfg.hyper_sites:
            if name in init_params:
                value = np.asarray(init_params[name])
                if value.shape != batch or not np.all(np.isfinite(value)):
                    raise ValueError(
                        f"init_params[{name!r}] must be finite of shape {batch}, got {value!r}"
                    )
                hyper[name] = jnp.asarray(value, self._family.dtype)
        if self._gibbs or site not in init_params:
            return None, hyper
        labels = np.asarray(init_params[site])
        expected = (*batch, cfg.num_rows)
        if labels.shape != expected or labels.dtype.kind not in "iu":
            raise ValueError(
                f"init_params[{site!r}] must be integer labels of shape {expected}, got "
                f"{labels.dtype} {labels.shape}"
            )
        if labels.min() < 0 or labels.max() >= cfg.capacity:
            raise ValueError(
                f"init_params[{site!r}] must lie in [0, {cfg.capacity}) (the model's "
                f"clusters plate), got labels from {labels.min()} to {labels.max()}"
            )
        return jnp.asarray(labels, jnp.int32), hyper

    def _start(self, num_chains):
        """The hyper-parameter sites' first values: the reader's fixed points of their
        supports (a standard normal draw of NumPy's seed 0 on the unconstrained line), one
        per chain."""
        batch = () if num_chains is None else (num_chains,)
        dtype = self._family.dtype
        return {
            name: jnp.broadcast_to(jnp.asarray(self.spec.held[name], dtype), batch)
            for name in self._cfg.hyper_sites
        }

    def sample(self, state, model_args, model_kwargs):
        if self._cfg is None:
            raise RuntimeError(f"{_ENGINE}.init must run before sample")
        rows = self._rows(model_args, model_kwargs)
        numbers = self._numbers(model_args, model_kwargs)
        step = functools.partial(
            _step,
            rows=rows,
            family=self._family_at(numbers),
            cfg=self._cfg,
            to_sites=self._to_sites,
            numbers=numbers,
        )
        state = over_chains(step, self._batched)(state)
        jax.debug.callback(_warn_saturated, state.saturated, self._cfg.capacity)
        return state

    # ------------------------------------------------------------------ block of numpyro Gibbs
    def refresh(self, state, model_args, model_kwargs):
        """The other Gibbs blocks moved: ``log_likelihood`` and ``log_joint`` recomputed at the
        family and the NGGP of the model conditioned on their values (the sample is kept)."""
        if not self._gibbs:
            return state
        numbers = self._numbers(model_args, model_kwargs)
        rows = self._rows(model_args, model_kwargs)
        refresh = functools.partial(
            _refresh, rows=rows, family=self._family_at(numbers), cfg=self._cfg, numbers=numbers
        )
        return over_chains(refresh, self._batched)(state)

    def wrap_model(self, wrapper):
        """A copy on ``wrapper(model)`` (``numpyro.infer.Gibbs`` conditions the model this way)."""
        kernel = copy.copy(self)
        kernel._model = wrapper(self._model)
        kernel.spec = kernel._cfg = None
        return kernel

    def get_constrain_fn(self, model_args, model_kwargs):
        """Identity: the sample field holds the model's (constrained) site values."""
        return identity

    def postprocess_fn(self, model_args, model_kwargs):
        """The sampled site values plus the model's deterministic sites at them."""
        return with_deterministic(self._model, model_args, model_kwargs, engine=_ENGINE)

    # ------------------------------------------------------------------ held-out rows
    def log_predictive(self, samples, new_rows, *model_args, **model_kwargs):
        r"""``(M,)`` Monte-Carlo estimate of the posterior predictive ``log p(x* | X)`` of each
        new row: the average over the draws of the partition of its exact predictive given the
        partition,

        .. math::
            p(x^* \mid z, X) = \sum_k (n_k - σ) \frac{V_{N+1,K}}{V_{N,K}}\, p(x^* \mid X_k)
            + \frac{V_{N+1,K+1}}{V_{N,K}}\, p(x^* \mid H_0)

        (the ratio of the EPPFs with and without the new row, Gibbs-type priors; the conjugate
        predictives of the family; the weights sum to one by ``V_{N,K} = (N - Kσ) V_{N+1,K} +
        V_{N+1,K+1}``).

        :param samples: the run's samples (``mcmc.get_samples()``), or the labels ``(S, N)``
            when the model has no other latent scalar sites. Every scalar site of the model in
            ``samples`` (hyper-parameters, or a noise scale sampled by another block of
            ``numpyro.infer.Gibbs``) sets its draw's NGGP and components' family.
        :param new_rows: held-out rows ``(M, D)`` (documents: word counts, dense or
            ``scipy.sparse``), checked as the model's observed site.
        :param model_args, model_kwargs: the model's arguments of the run (its training data).
        """
        if isinstance(samples, dict):
            labels = samples[self._partition_site(samples, model_args, model_kwargs)]
        else:
            labels = samples
        labels = jnp.asarray(labels, jnp.int32)
        labels = labels.reshape(-1, labels.shape[-1])
        given = {}
        if isinstance(samples, dict):
            given = self._scalar_draws(samples, labels.shape[0], model_args, model_kwargs)
        kernel = self
        if given:  # read the model conditioned on them, as a block of numpyro.infer.Gibbs
            kernel = self.wrap_model(conditioned)
            model_kwargs = {**model_kwargs, GIBBS_SITES_KWARG: {n: v[0] for n, v in given.items()}}
        kernel._read(model_args, model_kwargs)
        cfg, spec, family = kernel._cfg, kernel.spec, kernel._family
        if labels.shape[-1] != cfg.num_rows:
            raise ValueError(
                f"the labels in samples must have {cfg.num_rows} columns (the model's rows), "
                f"got shape {tuple(labels.shape)}"
            )
        if cfg.hyper_sites:
            raise ValueError(
                f"samples must be the run's samples with the hyper-parameter sites "
                f"{list(cfg.hyper_sites)} (mcmc.get_samples())"
            )
        rows = kernel._rows(model_args, model_kwargs)
        if rows is None:
            raise ValueError(f"{_ENGINE}.log_predictive needs the training data in the model")
        if spec.obs_kind == "documents":
            new = check_documents(new_rows, vocab=spec.dim, dtype=family.dtype, name="new_rows")
        else:
            new = streaming.check_batch(new_rows, dim=spec.dim, dtype=family.dtype, name="new_rows")
            spec.check_observed(new, "new_rows")

        def numbers(values):
            kwargs = {**model_kwargs, GIBBS_SITES_KWARG: values} if values else model_kwargs
            return spec.numbers({}, model_args, kwargs)

        draws_fn = functools.partial(
            _log_predictive_draws, dtype=family.dtype, cfg=cfg, numbers=numbers
        )
        new = jax.tree.map(jnp.asarray, new)
        scores = jax.jit(draws_fn)(labels, given, rows, new)
        return np.asarray(logsumexp(scores, axis=0) - np.log(labels.shape[0]))

    def _partition_site(self, samples, model_args, model_kwargs):
        """The name of the model's NGGP site (a trace at the first draw of ``samples``)."""
        first = {n: jnp.asarray(v)[0] for n, v in samples.items()}
        model = handlers.substitute(self._model, data=first)
        for name, site in trace_model(model, model_args, model_kwargs, _ENGINE).items():
            if site["type"] == "sample" and isinstance(unwrap(site["fn"]), NGGP):
                return name
        raise ValueError(f"{_ENGINE} needs a model with an NGGP partition site")

    def _scalar_draws(self, draws, num_draws, model_args, model_kwargs):
        """``{site: (S,)}``: the draws of the model's latent scalar sites in ``draws``."""
        first = {n: jnp.asarray(v).reshape(num_draws, -1)[0] for n, v in draws.items()}
        model = handlers.substitute(self._model, data=first)
        out = {}
        for name, site in trace_model(model, model_args, model_kwargs, _ENGINE).items():
            scalar = site["type"] == "sample" and not site["is_observed"]
            if scalar and name in draws and site["fn"].shape() == ():
                value = jnp.asarray(draws[name], jnp.result_type(float))
                if value.size != num_draws:
                    raise ValueError(
                        f"samples[{name!r}] must hold one value per draw ({num_draws}), got "
                        f"shape {tuple(value.shape)}"
                    )
                out[name] = value.reshape(num_draws)
        return out

    def get_diagnostics_str(self, state):
        sat = ", SATURATED" if bool(np.any(state.saturated)) else ""
        return f"{int(state.num_clusters)} clusters, log U {float(state.log_u):.3g}{sat}"
