"""ArviZ export and label-invariant summaries of latent feature allocations, for MCMC diagnostics.

Feature labels are not identified (any permutation of the columns gives the same model), so ESS and
R-hat of the raw site values (``Z``, ``A``) mix label switching into every number. :func:`summary`
computes them on functions that do not depend on the labels: the number of active features
(:func:`~numpyro_bnp.distributions.num_active_features`), the log-likelihood of the data, the
parity test function used by the slice sampler for general CRMs (Section 5 of that paper), which
is 1 when the count matrix has an even number of non-zero entries, and whether a few fixed pairs
of rows share a feature. :func:`from_mcmc` exports a run with named dimensions: ``row`` (the ``N``
rows of the data), ``dim`` (its ``D`` columns) and ``feature`` (the ``K`` atoms or slots). The rows
are not called ``obs``: xarray turns a variable named like a dimension into that dimension's
coordinate, and the ready models' observed site is ``obs``.
"""

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.infer import log_likelihood as _numpyro_log_likelihood

from numpyro_bnp import arviz_compat

__all__ = ["count_parity", "feature_dims", "from_mcmc", "label_invariants", "summary"]


def count_parity(counts):
    """1 if ``counts`` (``(..., N, K)``) has an even number of non-zero entries, else 0 (int32)."""
    nonzero = jnp.count_nonzero(counts, axis=(-2, -1))
    return (1 - nonzero % 2).astype(jnp.int32)


def _trace(model, model_args, model_kwargs):
    with jax.ensure_compile_time_eval():
        tr = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(
            *model_args, **(model_kwargs or {})
        )
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


def feature_dims(model, model_args=(), model_kwargs=None):
    """Named dimensions of a feature model's sites, for ``arviz.from_numpyro(..., dims=...)``.

    The observed site ``(N, D)`` gets ``["row", "dim"]``; a latent ``(K,)`` site ``["feature"]``;
    a latent 2-D discrete site (the allocation ``Z`` or counts ``X``) and a 2-D site whose first
    axis has the ``N`` rows and whose last axis is not ``D`` (weights, document rates)
    ``["row", "feature"]``; any other latent 2-D site whose last axis is ``D`` (features ``A``,
    traits ``ψ``, topics) ``["feature", "dim"]``. Sites that fit none of these are left to
    ArviZ's defaults.
    """
    sites = _trace(model, model_args, model_kwargs)
    obs = _observed(sites)
    num_rows, dim = jnp.shape(obs["value"])
    dims = {obs["name"]: ["row", "dim"]}
    for name, site in sites.items():
        if site is obs:
            continue
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
    named = feature_dims(mcmc.sampler.model, mcmc._args, mcmc._kwargs)
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


def label_invariants(samples, model, model_args=(), model_kwargs=None, *, pairs=None):
    """Label-invariant functions of draws ``samples`` (``{site: (chain, draw, ...)}``).

    :return: ``{"num_active": (C, S), "log_lik": (C, S), "parity": (C, S),
        "cooccurrence": (C, S, P)}`` as NumPy arrays: the number of non-zero columns of the
        allocation site, ``log p(data | draw)`` through the model's own observed site, the parity
        of the allocation's non-zero entries, and for each pair ``(i, j)`` of ``pairs`` (default:
        three fixed pairs) ``1`` if rows ``i`` and ``j`` share a feature (``Z_i · Z_j > 0``).
    """
    sites = _trace(model, model_args, model_kwargs)
    obs = _observed(sites)
    z_name = _allocation(sites, samples)
    z = np.asarray(samples[z_name])
    chains, draws = z.shape[:2]
    used = z != 0
    pairs = _default_pairs(z.shape[2]) if pairs is None else [tuple(p) for p in pairs]
    flat = {k: jnp.reshape(v, (chains * draws, *jnp.shape(v)[2:])) for k, v in samples.items()}
    loglik = _numpyro_log_likelihood(model, flat, *model_args, **(model_kwargs or {}))
    loglik = np.asarray(loglik[obs["name"]]).reshape(chains, draws, -1).sum(-1)
    cooc = np.stack([(used[:, :, i] & used[:, :, j]).any(-1) for i, j in pairs], axis=-1)
    return {
        "num_active": used.any(axis=2).sum(-1).astype(np.int64),
        "log_lik": loglik,
        "parity": np.asarray(count_parity(z)).astype(np.int64),
        "cooccurrence": cooc.astype(np.int64),
    }, pairs


def summary(mcmc_or_samples, *, model=None, model_args=(), model_kwargs=None, pairs=None, **kwargs):
    """The ArviZ summary (a pandas ``DataFrame``) of label-invariant quantities of a run.

    :param mcmc_or_samples: a ``numpyro.infer.MCMC`` after ``run`` (any kernel whose samples hold
        the model's allocation site, e.g. :class:`~numpyro_bnp.infer.CRMSlice`,
        :class:`~numpyro_bnp.infer.AcceleratedIBPGibbs`, ``DiscreteHMCGibbs``), or a dict of
        draws ``{site: (chain, draw, ...)}`` with ``model``, ``model_args`` and ``model_kwargs``.
    :param pairs: pairs of row indices for the co-occurrence rows (default: three fixed pairs).
    :param kwargs: passed to ``arviz.summary`` (e.g. ``kind="diagnostics"``).
    :return: one row per quantity of :func:`label_invariants`: ``num_active``,
        ``log_lik``, ``parity`` and ``cooccurrence[i-j]`` per pair. A quantity constant
        over all draws has R-hat NaN (ArviZ's convention).
    """
    if isinstance(mcmc_or_samples, dict):
        if model is None:
            raise ValueError("summary of a dict of draws needs the model (model=...)")
        samples = mcmc_or_samples
    else:
        mcmc = mcmc_or_samples
        samples = mcmc.get_samples(group_by_chain=True)
        model = mcmc.sampler.model
        model_args, model_kwargs = mcmc._args, mcmc._kwargs
    values, pairs = label_invariants(samples, model, model_args, model_kwargs, pairs=pairs)
    labels = [f"{i}-{j}" for i, j in pairs]
    data = arviz_compat.from_dict(
        {"posterior": values},
        dims={"cooccurrence": ["pair"]},
        coords={"pair": labels},
    )
    return arviz_compat.arviz().summary(data, **kwargs)
