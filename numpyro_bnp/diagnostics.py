"""ArviZ export and label-invariant summaries of latent feature allocations, for MCMC diagnostics.

Feature labels are not identified (any permutation of the columns gives the same model), so ESS and
R-hat of the raw site values (``Z``, ``A``) mix label switching into every number. :func:`summary`
computes them on functions that do not depend on the labels: the number of active features
(:func:`~numpyro_bnp.distributions.num_active_features`), the log-likelihood of the data, the
parity test function used by the slice sampler for general CRMs (Section 5 of that paper), which
is 1 when the count matrix has an even number of non-zero entries, whether a few fixed pairs
of rows share a feature, and, for held-out rows, the log predictive density of each row given the
draw (:func:`log_predictive`, the new row's features summed out). It reads MCMC runs (any kernel,
NumPyro's own included), dicts of draws, and streaming results (independent draws of the
variational posterior for rows the user passes). :func:`from_mcmc` exports a run with named
dimensions: ``row`` (the ``N`` rows of the data), ``dim`` (its ``D`` columns) and ``feature`` (the
``K`` atoms or slots). The rows are not called ``obs``: xarray turns a variable named like a
dimension into that dimension's coordinate, and the ready models' observed site is ``obs``.

Every trace of the user's model goes through :func:`~numpyro_bnp.infer.core.model.trace_model`: an
error inside the model surfaces as itself, with a note naming this module and the last site the
model finished.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax import lax, random
from jax.scipy.special import logsumexp, xlog1py, xlogy
from numpyro import handlers

from numpyro_bnp import arviz_compat
from numpyro_bnp._checks import nonnegative_int, positive_int, prng_key
from numpyro_bnp._math import count_parity
from numpyro_bnp.distributions import RecursiveIBP
from numpyro_bnp.infer.core.model import trace_model, unwrap
from numpyro_bnp.infer.core.streaming import StreamingResult
from numpyro_bnp.infer.features.feature_model import row_log_density

__all__ = [
    "count_parity",
    "feature_dims",
    "from_mcmc",
    "label_invariants",
    "log_predictive",
    "new_row_probs",
    "summary",
]

_ENGINE = "numpyro_bnp.diagnostics"


def _trace(model, model_args, model_kwargs, values=None):
    """The sample sites of one trace of ``model``, its latent sites substituted by ``values`` (one
    draw) where given and drawn with seed 0 otherwise; an error inside the model is re-raised as
    itself with a note (:func:`~numpyro_bnp.infer.core.model.trace_model`)."""
    if values is not None:
        model = handlers.substitute(model, data=values)
    with jax.ensure_compile_time_eval():
        tr = trace_model(model, model_args, model_kwargs, _ENGINE)
    return {name: s for name, s in tr.items() if s["type"] == "sample"}


def _observed(sites):
    observed = [s for s in sites.values() if s["is_observed"]]
    if len(observed) != 1:
        raise ValueError(
            f"expected one observed site, found {[s['name'] for s in observed] or 'none'}"
        )
    obs = observed[0]
    if jnp.ndim(obs["value"]) != 2:
        raise ValueError(
            f"expected an observed site of shape (N, D), got {obs['name']!r} "
            f"{tuple(jnp.shape(obs['value']))}"
        )
    return obs


def _is_discrete(site):
    return bool(getattr(site["fn"].support, "is_discrete", False))


def feature_dims(model, model_args=(), model_kwargs=None, *, values=None):
    """Named dimensions of a feature or mixture model's sites, for
    ``arviz.from_numpyro(..., dims=...)``.

    The observed site ``(N, D)`` gets ``["row", "dim"]``. In a mixture model (a latent discrete
    site of shape ``(N,)``, the labels) the labels get ``["row"]`` and every other latent site
    ``["cluster"]``, ``["cluster", "dim"]`` or ``["cluster", "dim", "dim2"]`` by its number of
    axes. In a feature model a latent ``(K,)`` site gets ``["feature"]``; a latent 2-D discrete
    site (the allocation ``Z`` or counts ``X``) and a 2-D site whose first axis has the ``N`` rows
    and whose last axis is not ``D`` (weights, document rates) ``["row", "feature"]``; any other
    latent 2-D site whose last axis is ``D`` (features ``A``, traits ``ψ``, topics)
    ``["feature", "dim"]``. Sites that fit none of these are left to ArviZ's defaults.

    :param values: one draw of the latent sites to trace the model at (default: a draw of the
        prior with seed 0).
    """
    sites = _trace(model, model_args, model_kwargs, values)
    obs = _observed(sites)
    num_rows, dim = jnp.shape(obs["value"])
    dims = {obs["name"]: ["row", "dim"]}
    latent = {name: s for name, s in sites.items() if s is not obs}
    labels = [
        name
        for name, s in latent.items()
        if _is_discrete(s) and tuple(jnp.shape(s["value"])) == (num_rows,)
    ]
    if len(labels) == 1:
        for name, site in latent.items():
            ndim = jnp.ndim(site["value"])
            dims[name] = ["row"] if name == labels[0] else ["cluster", "dim", "dim2"][:ndim]
        return {name: axes for name, axes in dims.items() if axes}
    for name, site in latent.items():
        shape = tuple(jnp.shape(site["value"]))
        if len(shape) == 1:
            dims[name] = ["feature"]
        elif len(shape) == 2 and (_is_discrete(site) or (shape[0] == num_rows and shape[1] != dim)):
            dims[name] = ["row", "feature"]
        elif len(shape) == 2 and shape[1] == dim:
            dims[name] = ["feature", "dim"]
    return dims


def from_mcmc(mcmc, *, dims=None, **kwargs):
    """ArviZ data of a ``numpyro.infer.MCMC`` run with dimensions named by :func:`feature_dims`.

    ``dims`` entries replace the inferred ones; other keyword arguments go to
    :func:`numpyro_bnp.arviz_compat.from_numpyro` (log-likelihood on by default).
    """
    draw = {name: value[0] for name, value in mcmc.get_samples().items()}
    named = feature_dims(mcmc.sampler.model, mcmc._args, mcmc._kwargs, values=draw)
    named.update(dims or {})
    return arviz_compat.from_numpyro(mcmc, dims=named, **kwargs)


def _allocation(sites, samples):
    """The name of the latent discrete ``(N, K)`` site (``Z``, ``X``) present in ``samples``."""
    found = [
        name
        for name, s in sites.items()
        if not s["is_observed"] and _is_discrete(s) and jnp.ndim(s["value"]) == 2
    ]
    found = [name for name in found if name in samples]
    if len(found) != 1:
        raise ValueError(f"expected one discrete (N, K) latent site in the samples, got {found}")
    return found[0]


def _default_pairs(num_rows):
    pairs = [(0, 1), (0, num_rows // 2), (num_rows // 2, num_rows - 1)]
    return sorted({p for p in pairs if p[0] != p[1]})


def _flat(samples):
    """``{site: (C * S, ...)}`` of draws ``{site: (C, S, ...)}`` (chains one after another)."""
    return {k: jnp.reshape(v, (-1, *jnp.shape(v)[2:])) for k, v in samples.items()}


def _first_draw(samples):
    return {k: v[0, 0] for k, v in samples.items()}


def _log_likelihood(model, model_args, model_kwargs, obs_name, draws):
    """``(S,)`` ``log p(data | draw)``: the observed site's log density, the model's latent sites
    substituted by each of the draws ``{site: (S, ...)}`` (the data are the model's own)."""

    def one(draw):
        tr = trace_model(handlers.substitute(model, data=draw), model_args, model_kwargs, _ENGINE)
        site = tr[obs_name]
        return jnp.sum(site["fn"].log_prob(site["value"]))

    return np.asarray(jax.vmap(one)(draws))


def label_invariants(samples, model, model_args=(), model_kwargs=None, *, pairs=None):
    """Label-invariant functions of draws ``samples`` (``{site: (chain, draw, ...)}``).

    :return: ``({"num_active": (C, S), "log_likelihood": (C, S), "parity": (C, S), "cooccurrence":
        (C, S, P)}, pairs)``, NumPy arrays: the number of non-zero columns of the allocation
        site, ``log p(data | draw)`` through the model's own observed site, the parity of the
        allocation's non-zero entries, and for each pair ``(i, j)`` of ``pairs`` (default: three
        fixed pairs) ``1`` if rows ``i`` and ``j`` share a feature (``Z_i · Z_j > 0``).
    """
    sites = _trace(model, model_args, model_kwargs, _first_draw(samples))
    obs = _observed(sites)
    z_name = _allocation(sites, samples)
    z = np.asarray(samples[z_name])
    chains, draws = z.shape[:2]
    used = z != 0
    pairs = _default_pairs(z.shape[2]) if pairs is None else [tuple(p) for p in pairs]
    loglik = _log_likelihood(model, model_args, model_kwargs, obs["name"], _flat(samples))
    cooc = np.stack([(used[:, :, i] & used[:, :, j]).any(-1) for i, j in pairs], axis=-1)
    return {
        "num_active": used.any(axis=2).sum(-1).astype(np.int64),
        "log_likelihood": loglik.reshape(chains, draws),
        "parity": np.asarray(count_parity(z)).astype(np.int64),
        "cooccurrence": cooc.astype(np.int64),
    }, pairs


def new_row_probs(samples, model, model_args=(), model_kwargs=None):
    r"""``(C, S, K)`` probabilities ``p_k`` that a new row takes feature ``k``, for each draw.

    Read from the distribution of the model's allocation site (``Z``) with the draw substituted:

    * a :class:`~numpyro_bnp.distributions.RecursiveIBP` (the IBP with ``Z`` marginal, e.g.
      :func:`~numpyro_bnp.models.linear_gaussian`): the buffet's next customer takes an existing
      dish with probability ``p_k = m_k / (β + N)``, ``m_k`` the column sums of the draw's
      ``N`` rows (0 for unused columns). Its ``Poisson(αβ / (β + N))`` new dishes are left out:
      what the rows use is then ``p(z^* | Z, \text{no new feature})``, which misses a share
      ``1 - e^{-αβ/(β+N)}`` of the prior;
    * a ``Bernoulli`` whose probabilities are the same for every row (a truncated beta-Bernoulli
      model, ``π`` a latent site): ``p_k`` = those probabilities of the draw.

    :raises ValueError: for any other allocation law (counts, the restricted IBP), or Bernoulli
        probabilities that differ between rows (a new row's law is then not defined).
    """
    sites = _trace(model, model_args, model_kwargs, _first_draw(samples))
    z_name = _allocation(sites, samples)

    def one(draw):
        tr = trace_model(handlers.substitute(model, data=draw), model_args, model_kwargs, _ENGINE)
        fn, z = unwrap(tr[z_name]["fn"]), jnp.asarray(draw[z_name])
        if isinstance(fn, RecursiveIBP):
            return jnp.broadcast_to(jnp.sum(z, -2) / (fn.beta + z.shape[-2]), z.shape)
        if isinstance(fn, dist.BernoulliProbs | dist.BernoulliLogits):
            return jnp.broadcast_to(fn.probs, z.shape)
        raise ValueError(
            f"the held-out predictive needs a binary allocation whose new row has independent "
            f"columns (a RecursiveIBP, or a Bernoulli with the same probabilities for every "
            f"row); the site {z_name!r} has a {type(fn).__name__} distribution"
        )

    probs = np.asarray(jax.vmap(one)(_flat(samples)))  # (C * S, N, K)
    if not np.all(probs == probs[:, :1]):
        raise ValueError(
            f"the Bernoulli probabilities of {z_name!r} differ between rows: a new row's law "
            "is not defined"
        )
    chains, draws = np.shape(samples[z_name])[:2]
    return probs[:, 0].reshape(chains, draws, -1)


def log_predictive(
    samples,
    model,
    model_args=(),
    model_kwargs=None,
    *,
    test_obs,
    probs=None,
    rng_key=None,
    max_enumerate=10,
    num_mc_samples=1000,
):
    r"""``(C, S, M)`` log predictive density ``log p(x^*_m | draw)`` of held-out rows, per draw.

    For each draw (``samples``: ``{site: (C, S, ...)}``) and each row ``x^*`` of ``test_obs``
    ``(M, D)``, the new row's allocation ``z^*`` is summed out over the draw's features:

    .. math::
        p(x^* \mid \text{draw}) = \sum_{z^*} \prod_k p_k^{z^*_k} (1 - p_k)^{1 - z^*_k}\,
            p(x^* \mid z^*, \text{draw}),

    ``p_k`` from ``probs`` (``(C, S, K)``, default :func:`new_row_probs`; ``z^*_k = 0`` where
    ``p_k = 0``), ``p(x^* \mid z^*, \text{draw})`` the model's own observed site with the draw's
    latent sites substituted, its allocation set to the one row ``z^*``
    (:func:`~numpyro_bnp.infer.features.feature_model.row_log_density`). This does not depend on
    the feature
    labels: a quantity for convergence diagnostics, and ``log`` of the mean of its exponential
    over the draws estimates the posterior predictive ``log p(x^* | data)``.

    The sum is exact (all ``2^J`` configurations of the ``J`` features with ``p_k > 0``, ``J``
    the largest over the draws) when ``J <= max_enumerate``; otherwise it is the Monte Carlo
    mean over ``num_mc_samples`` draws ``z^* ~ Bernoulli(p)`` per draw and row (a consistent
    estimate of ``p``, whose log is biased low by about half its relative variance), seeded by
    ``rng_key``, with a ``UserWarning``.

    Models whose observed rows depend on other per-row latent sites (the weights ``W`` of
    :func:`~numpyro_bnp.models.factor_analysis`) would need those integrated too: they are
    refused (``ValueError``), as are allocation laws :func:`new_row_probs` does not read.
    """
    test_obs = np.asarray(test_obs)
    max_enumerate = nonnegative_int(max_enumerate, "max_enumerate")
    sites = _trace(model, model_args, model_kwargs, _first_draw(samples))
    obs, z_name = _observed(sites), _allocation(sites, samples)
    if test_obs.ndim != 2 or test_obs.shape[1] != jnp.shape(obs["value"])[1]:
        raise ValueError(
            f"test_obs must have shape (M, {jnp.shape(obs['value'])[1]}) like the rows of the "
            f"observed site {obs['name']!r}, got {test_obs.shape}"
        )
    if probs is None:
        probs = new_row_probs(samples, model, model_args, model_kwargs)
    chains, draws, num_features = np.shape(probs)
    probs = np.asarray(probs).reshape(chains * draws, num_features)
    supported = probs > 0
    width = int(supported.sum(-1).max())
    z_dtype = jnp.asarray(samples[z_name]).dtype
    if width <= max_enumerate:
        bits = (np.arange(2**width)[:, None] >> np.arange(width)) & 1  # (2^J, J)
        # the J first columns with p_k > 0 (then columns with p_k = 0: weight 0 where set)
        columns = np.argsort(~supported, axis=-1, kind="stable")[:, :width]

        def configurations(p, cols):
            z = jnp.zeros((bits.shape[0], num_features), p.dtype).at[:, cols].set(bits)
            return z, jnp.sum(xlogy(z, p) + xlog1py(1.0 - z, -p), -1)

        extra = jnp.asarray(columns)
    else:
        prng_key(rng_key, "rng_key (the held-out predictive is a Monte Carlo estimate here)")
        num_mc_samples = positive_int(num_mc_samples, "num_mc_samples")
        warnings.warn(
            f"log_predictive: the draws use up to {width} features, more than "
            f"max_enumerate={max_enumerate}: the sum over a new row's features is a Monte Carlo "
            f"estimate from {num_mc_samples} draws of it per draw and row",
            UserWarning,
            stacklevel=2,
        )

        def configurations(p, key):
            z = (random.uniform(key, (num_mc_samples, num_features), p.dtype) < p).astype(p.dtype)
            return z, jnp.full(num_mc_samples, -np.log(num_mc_samples), p.dtype)

        extra = random.split(rng_key, chains * draws)

    def one(inputs):
        draw, p, e = inputs
        z, log_weight = configurations(p, e)

        def density(z_row, x):
            values = {**draw, z_name: z_row[None].astype(z_dtype)}
            return row_log_density(
                model,
                model_args,
                model_kwargs,
                values,
                obs_site=obs["name"],
                obs=x,
                rows_site=z_name,
                engine=_ENGINE,
                hint=(
                    f"; log_predictive sums out a new row's {z_name!r} only, not other per-row "
                    "latent sites (such as the weights of factor analysis)"
                ),
            )

        rows = jax.vmap(lambda z_row: jax.vmap(lambda x: density(z_row, x))(test_obs))(z)
        return logsumexp(log_weight[:, None] + rows, axis=0)  # (M,)

    out = lax.map(one, (_flat(samples), jnp.asarray(probs), extra))
    return np.asarray(out).reshape(chains, draws, -1)


def _streaming_draws(result, rng_key, obs, num_draws, num_chains):
    """``(samples, model, model_args, model_kwargs)`` of a streaming result for rows ``obs``.

    ``num_chains * num_draws`` independent draws of :meth:`StreamingResult.posterior_samples`
    for the given rows, laid out ``(chain, draw)``; the model is the engine's, its observed site
    conditioned on ``obs``."""
    if obs is None:
        raise TypeError(
            "summary of a streaming result needs the rows obs=(M, D): the engine keeps no "
            "per-row latent values of the stream, their allocation is drawn for these rows"
        )
    num_draws = positive_int(num_draws, "num_draws")
    num_chains = positive_int(num_chains, "num_chains")
    engine = result.engine
    obs = engine.check_batch(obs, name="obs")
    flat = result.posterior_samples(rng_key, num_chains * num_draws, obs=obs)
    samples = {
        k: np.asarray(v).reshape(num_chains, num_draws, *np.shape(v)[1:]) for k, v in flat.items()
    }
    model = handlers.condition(engine.model, data={engine.spec.obs_site: obs})
    return samples, model, engine.model_args, engine.model_kwargs


def summary(
    source,
    *,
    rng_key=None,
    obs=None,
    num_draws=250,
    num_chains=4,
    test_obs=None,
    model=None,
    model_args=(),
    model_kwargs=None,
    pairs=None,
    max_enumerate=10,
    num_mc_samples=1000,
    **kwargs,
):
    """The ArviZ summary (a pandas ``DataFrame``) of label-invariant quantities of a run.

    :param source: one of

        * a ``numpyro.infer.MCMC`` after ``run`` (any kernel whose samples hold the model's
          allocation site, e.g. :class:`~numpyro_bnp.infer.CRMSlice`,
          :class:`~numpyro_bnp.infer.AcceleratedIBPGibbs`, or NumPyro's ``DiscreteHMCGibbs``
          on a model with a Bernoulli allocation);
        * a dict of draws ``{site: (chain, draw, ...)}`` with ``model``, ``model_args`` and
          ``model_kwargs``;
        * a :class:`~numpyro_bnp.infer.StreamingResult` (:class:`~numpyro_bnp.infer.RIBPResult`)
          with ``rng_key`` and the rows ``obs`` ``(N, D)``: the engine keeps no per-row latent
          values of the stream, so ``num_chains * num_draws`` independent draws of
          :meth:`~numpyro_bnp.infer.StreamingResult.posterior_samples` give the features and the
          allocation of these rows, and the data of ``log_likelihood`` are ``obs``. The draws are
          laid out as ``num_chains`` chains of ``num_draws`` (as in
          :meth:`~numpyro_bnp.infer.StreamingResult.to_arviz`): for independent draws ``r_hat``
          is about 1 and ``ess_bulk`` about ``num_chains * num_draws``, so these columns measure
          the Monte Carlo error of the summary only, not the filter's approximation.
    :param rng_key: a JAX PRNG key: required for a streaming result (split between the draws and
        the held-out predictive) and for a held-out predictive that is a Monte Carlo estimate.
    :param test_obs: held-out rows ``(M, D)``: adds ``log_predictive[m]`` =
        ``log p(test_obs[m] | draw)``, a new row's allocation summed out over the draw's
        features (:func:`log_predictive`; exact up to ``max_enumerate`` features, else Monte
        Carlo with ``num_mc_samples`` draws per draw and row, with a warning). A streaming
        result's new row takes feature ``k`` with the filter's probability for the next
        observation (:attr:`~numpyro_bnp.infer.RIBPResult.feature_probs`); an MCMC draw's as
        :func:`new_row_probs` says.
    :param pairs: pairs of row indices for the co-occurrence rows (default: three fixed pairs).
    :param kwargs: passed to ``arviz.summary`` (e.g. ``kind="diagnostics"``).
    :return: one row per quantity of :func:`label_invariants`: ``num_active``, ``log_likelihood``,
        ``parity`` and ``cooccurrence[i-j]`` per pair, then ``log_predictive[m]`` per held-out
        row. A quantity constant over all draws (often ``parity`` or a co-occurrence) has R-hat
        NaN (ArviZ's convention; its ESS is the number of draws); the divisions by its zero
        variance do not warn.
    """
    key_predictive = rng_key
    probs = None
    if isinstance(source, StreamingResult):
        weights = source.engine.spec.weight_site
        if test_obs is not None and weights is not None:
            raise ValueError(
                f"test_obs: log_predictive sums out a new row's allocation only, not the "
                f"per-row weight site {weights!r} of the model (factor analysis)"
            )
        key_draws, key_predictive = random.split(prng_key(rng_key))
        samples, model, model_args, model_kwargs = _streaming_draws(
            source, key_draws, obs, num_draws, num_chains
        )
        if test_obs is not None:
            probs = np.broadcast_to(
                np.asarray(source.feature_probs), (num_chains, num_draws, source.num_active)
            )
    elif isinstance(source, dict):
        if model is None:
            raise ValueError("summary of a dict of draws needs the model (model=...)")
        samples = source
    else:
        mcmc = source
        samples = mcmc.get_samples(group_by_chain=True)
        model = mcmc.sampler.model
        model_args, model_kwargs = mcmc._args, mcmc._kwargs
    values, pairs = label_invariants(samples, model, model_args, model_kwargs, pairs=pairs)
    dims, coords = {"cooccurrence": ["pair"]}, {"pair": [f"{i}-{j}" for i, j in pairs]}
    if test_obs is not None:
        values["log_predictive"] = log_predictive(
            samples,
            model,
            model_args,
            model_kwargs,
            test_obs=test_obs,
            probs=probs,
            rng_key=key_predictive,
            max_enumerate=max_enumerate,
            num_mc_samples=num_mc_samples,
        )
        dims["log_predictive"] = ["test_row"]
        coords["test_row"] = np.arange(values["log_predictive"].shape[-1])
    with warnings.catch_warnings():
        # the log_likelihood row is a summary of the draws, not ArviZ's pointwise group
        warnings.filterwarnings("ignore", "log_likelihood variable found in posterior")
        data = arviz_compat.from_dict({"posterior": values}, dims=dims, coords=coords)
    with np.errstate(invalid="ignore", divide="ignore"):  # zero variance of a constant quantity
        return arviz_compat.arviz().summary(data, **kwargs)
