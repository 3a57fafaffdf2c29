"""Read a user's NumPyro model once and find the sites an engine needs.

Engines never look at site *names*: they trace the model once (``handlers.seed`` +
``handlers.trace``) and find sites by the type and shape of their distributions. A model that does
not fit gets a ``ValueError`` that names what was expected and lists what was found.

Latent feature models (:func:`read_feature_model`) need

* exactly one sample site whose distribution is a
  :class:`~numpyro_bnp.distributions.RecursiveIBP` (the binary ``N x K`` matrix ``Z``);
* the **observed site**: the one observed site, or, when the model is traced without data
  (``obs=None``), the last sample site of the trace; its value has shape ``(N, D)``;
* the **feature site**: a ``Normal`` ``(K, D)`` site, i.i.d. over the ``K`` rows (its mean and
  variance may vary over the ``D`` columns);
* optionally a **weight site**: a ``Normal`` ``(N, K)`` site with one mean and variance for all
  entries (factor analysis);
* no other latent sample site (deterministic sites are fine).

When the observed site is ``Normal`` with mean ``Z @ A`` (linear-Gaussian) or ``(Z * W) @ A``
(factor analysis) at the traced values, the engines can use closed-form updates; this is checked
numerically on the trace, not assumed from names.

Latent trait models with a completely random measure prior (:func:`read_crm_trait_model`, the
model of Zhu, Bouchard-Côté & Campbell 2020, Eq. 11) need

* a **CRM site** whose distribution is a
  :class:`~numpyro_bnp.distributions.CompletelyRandomMeasure` (the rates ``θ``, ``(K,)``) and a
  **count site** ``(N, K)`` whose distribution is ``Bernoulli(θ)`` / ``NegativeBinomialProbs(r,
  θ)`` (beta process) or ``Poisson(θ)`` (any CRM) with the CRM's atoms as parameter (checked
  numerically on the trace); or one ``RecursiveIBP`` site, read as Bernoulli counts of its beta
  process (``RecursiveIBP.as_beta_process``);
* a Normal **trait site** ``(K, D)`` with the same prior for every atom;
* the observed site, Normal with mean ``X @ ψ`` and one variance per column; traced without data
  (``obs=None``) the model is read as prior-only (no likelihood).
"""

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers

from numpyro_bnp.distributions.crm import BetaProcess, CompletelyRandomMeasure
from numpyro_bnp.distributions.ibp import RecursiveIBP

__all__ = ["CRMTraitModel", "FeatureModel", "read_crm_trait_model", "read_feature_model"]


def _unwrap(fn):
    """Strip ``Independent`` / ``ExpandedDistribution`` wrappers: the base distribution."""
    while isinstance(fn, dist.Independent | dist.ExpandedDistribution):
        fn = fn.base_dist
    return fn


def _describe(site):
    fn = site["fn"]
    inner = _unwrap(fn)
    kind = type(inner).__name__
    if inner is not fn:
        kind += f" (in {type(fn).__name__})"
    observed = ", observed" if site["is_observed"] else ""
    return f"{site['name']}: {kind}, shape {tuple(jnp.shape(site['value']))}{observed}"


def _normal_params(site, shape):
    """Mean and variance of a (wrapped) ``Normal`` site, broadcast to ``shape``, as float64."""
    base = _unwrap(site["fn"])
    loc = np.broadcast_to(np.asarray(base.loc, np.float64), shape)
    var = np.broadcast_to(np.asarray(base.scale, np.float64) ** 2, shape)
    return loc, var


@dataclass(frozen=True, eq=False)
class FeatureModel:
    """What an engine needs to know about a latent feature model (see the module docstring).

    Prior parameters are host ``float64`` NumPy arrays; engines cast them to their dtype.

    :ivar likelihood: ``"linear_gaussian"``, ``"factor_analysis"`` or ``"generic"`` (any other
        observation distribution).
    :ivar feature_loc, feature_var: ``(D,)`` prior mean and variance of each feature entry.
    :ivar weight_loc, weight_var: scalar prior mean and variance of the weights (factor analysis).
    :ivar noise_var: ``(D,)`` observation noise variance (Gaussian likelihoods only).
    """

    model: object
    model_args: tuple
    model_kwargs: dict
    ibp_site: str
    alpha: float
    beta: float
    num_rows: int
    max_features: int
    feature_site: str
    feature_loc: np.ndarray
    feature_var: np.ndarray
    obs_site: str
    dim: int
    likelihood: str
    weight_site: str | None = None
    weight_loc: float = 0.0
    weight_var: float = 1.0
    noise_var: np.ndarray | None = None
    site_summary: tuple = field(default=())

    def row_log_likelihood(self, z, a, obs, w=None):
        """``log p(o | z, A[, w])`` of ONE observation through the model's own observed site.

        The model runs under ``handlers.substitute`` (``Z`` = ``z[None]``, ``A`` = ``a``, weights
        = ``w[None]``) and ``handlers.condition`` (the observed site = ``obs[None]``); the log
        density of the observed site is returned. ``z`` may be real-valued (a relaxation). Pure
        and differentiable in ``a``; traceable under ``jit``.

        :param z: ``(K,)``; :param a: ``(K, D)``; :param obs: ``(D,)``; :param w: ``(K,)``.
        :return: scalar.
        """
        values = {self.ibp_site: z[None], self.feature_site: a}
        if self.weight_site is not None:
            values[self.weight_site] = w[None]
        model = handlers.condition(
            handlers.substitute(self.model, data=values), data={self.obs_site: obs[None]}
        )
        tr = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(
            *self.model_args, **self.model_kwargs
        )
        site = tr[self.obs_site]
        shape = site["fn"].batch_shape + site["fn"].event_shape
        if shape != (1, *jnp.shape(obs)):
            raise ValueError(
                f"the observed site {self.obs_site!r} must take its number of rows from the rows "
                f"of {self.ibp_site!r} (e.g. a mean written as Z @ A); with one row substituted "
                f"its distribution has shape {shape}, expected (1, {jnp.shape(obs)[0]})"
            )
        return jnp.sum(site["fn"].log_prob(site["value"]))


def read_feature_model(model, model_args=(), model_kwargs=None, *, engine="this engine"):
    """Trace ``model(*model_args, **model_kwargs)`` once and locate its feature-model sites.

    :param model: a NumPyro model function.
    :param str engine: the engine's name, used in error messages.
    :return: a :class:`FeatureModel`.
    :raises ValueError: naming the expected site and listing the sites found.
    """
    model_kwargs = dict(model_kwargs or {})
    with jax.ensure_compile_time_eval():
        tr = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(*model_args, **model_kwargs)
    sites = [s for s in tr.values() if s["type"] == "sample"]
    summary = tuple(_describe(s) for s in sites)
    found = "; ".join(summary) or "no sample sites"

    def fail(expected):
        raise ValueError(f"{engine} expected {expected}; the model has: {found}")

    ibp = [s for s in sites if isinstance(_unwrap(s["fn"]), RecursiveIBP)]
    if len(ibp) != 1:
        fail(f"exactly one sample site with a RecursiveIBP distribution, found {len(ibp)}")
    ibp = ibp[0]
    fn = _unwrap(ibp["fn"])
    if fn.batch_shape != ():
        fail(f"a RecursiveIBP site with scalar alpha and beta (got batch shape {fn.batch_shape})")
    num_rows, max_features = fn.num_rows, fn.max_features

    rest = [s for s in sites if s is not ibp]
    observed = [s for s in rest if s["is_observed"]]
    if len(observed) > 1:
        fail("at most one observed site")
    if not rest:
        fail("an observed site after the RecursiveIBP site")
    obs = observed[0] if observed else rest[-1]
    obs_shape = tuple(jnp.shape(obs["value"]))
    if len(obs_shape) != 2 or obs_shape[0] != num_rows:
        fail(f"an observed site of shape (num_rows={num_rows}, D), got {obs_shape}")
    dim = obs_shape[1]

    latent = [s for s in rest if s is not obs]
    features = [
        s
        for s in latent
        if isinstance(_unwrap(s["fn"]), dist.Normal)
        and tuple(jnp.shape(s["value"])) == (max_features, dim)
    ]
    if len(features) != 1:
        fail(f"exactly one Normal feature site of shape (K={max_features}, D={dim})")
    features = features[0]
    weights = [
        s
        for s in latent
        if s is not features
        and isinstance(_unwrap(s["fn"]), dist.Normal)
        and tuple(jnp.shape(s["value"])) == (num_rows, max_features)
    ]
    others = [s["name"] for s in latent if s is not features and s not in weights]
    if others or len(weights) > 1:
        fail(
            "only the IBP, feature, optional (N, K) Normal weight and observed sites "
            f"(unexpected latent sites: {others + [s['name'] for s in weights[1:]]})"
        )
    weights = weights[0] if weights else None

    feature_loc, feature_var = _normal_params(features, (max_features, dim))
    if not (np.all(feature_loc == feature_loc[:1]) and np.all(feature_var == feature_var[:1])):
        fail(f"a feature site {features['name']!r} whose prior is the same for every feature")
    spec = dict(
        model=model,
        model_args=tuple(model_args),
        model_kwargs=model_kwargs,
        ibp_site=ibp["name"],
        alpha=float(fn.alpha),
        beta=float(fn.beta),
        num_rows=num_rows,
        max_features=max_features,
        feature_site=features["name"],
        feature_loc=feature_loc[0].copy(),
        feature_var=feature_var[0].copy(),
        obs_site=obs["name"],
        dim=dim,
        site_summary=summary,
    )
    if weights is not None:
        w_loc, w_var = _normal_params(weights, (num_rows, max_features))
        if not (np.all(w_loc == w_loc.flat[0]) and np.all(w_var == w_var.flat[0])):
            fail(f"a weight site {weights['name']!r} with one prior mean and variance")
        spec.update(
            weight_site=weights["name"],
            weight_loc=float(w_loc.flat[0]),
            weight_var=float(w_var.flat[0]),
        )

    # Closed-form likelihood? Normal with mean Z @ A or (Z * W) @ A at the traced values.
    base = _unwrap(obs["fn"])
    likelihood = "generic"
    if isinstance(base, dist.Normal):
        z, a = np.asarray(ibp["value"], np.float64), np.asarray(features["value"], np.float64)
        if weights is not None:
            z = z * np.asarray(weights["value"], np.float64)
        loc, var = _normal_params(obs, obs_shape)
        scale = np.sqrt(np.abs(z) @ np.abs(a)) + 1.0
        if np.all(np.abs(loc - z @ a) <= 1e-4 * scale) and np.all(var == var[:1]):
            likelihood = "linear_gaussian" if weights is None else "factor_analysis"
            spec["noise_var"] = var[0].copy()
    spec["likelihood"] = likelihood
    return FeatureModel(**spec)


# ---------------------------------------------------------------------------------------------
# latent trait models with a CRM prior
# ---------------------------------------------------------------------------------------------
COUNT_LIKELIHOODS = ("bernoulli", "poisson", "negative_binomial")


@dataclass(frozen=True, eq=False)
class CRMTraitModel:
    """What :class:`~numpyro_bnp.infer.CRMSlice` needs to know about a CRM latent trait model.

    :ivar crm: the CRM distribution (scalar parameters) whose atoms are the count rates ``θ``.
    :ivar crm_site: name of the CRM site, or ``None`` for a ``RecursiveIBP`` model.
    :ivar count_site: name of the ``(N, K)`` count site (the ``RecursiveIBP`` site for IBP models).
    :ivar likelihood: ``"bernoulli"``, ``"poisson"`` or ``"negative_binomial"`` (counts given θ).
    :ivar total_count: ``(N,)`` negative-binomial ``r_n`` (``None`` otherwise).
    :ivar trait_loc, trait_var: ``(D,)`` prior mean and variance of each trait entry.
    :ivar obs_value: ``(N, D)`` observations, or ``None`` when traced without data (prior-only).
    :ivar noise_var: ``(D,)`` observation noise variance.
    """

    model: object
    crm: CompletelyRandomMeasure
    crm_site: str | None
    count_site: str
    likelihood: str
    total_count: np.ndarray | None
    num_rows: int
    truncation: int
    trait_site: str
    trait_loc: np.ndarray
    trait_var: np.ndarray
    obs_site: str
    obs_value: np.ndarray | None
    noise_var: np.ndarray
    dim: int
    site_summary: tuple = field(default=())


def _count_family(fn):
    """``(likelihood, rate parameter, total_count)`` of a count distribution, or ``None``."""
    if isinstance(fn, dist.BernoulliProbs):
        return "bernoulli", fn.probs, None
    if isinstance(fn, dist.NegativeBinomialProbs):
        return "negative_binomial", fn.probs, fn.total_count
    if type(fn) is dist.Poisson:
        return "poisson", fn.rate, None
    return None


def read_crm_trait_model(model, model_args=(), model_kwargs=None, *, engine="this engine"):
    """Trace ``model`` once and locate the sites of a CRM latent trait model (module docstring).

    :return: a :class:`CRMTraitModel`.
    :raises ValueError: naming the site that does not fit and listing the sites found.
    """
    model_kwargs = dict(model_kwargs or {})
    with jax.ensure_compile_time_eval():
        tr = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(*model_args, **model_kwargs)
    sites = [s for s in tr.values() if s["type"] == "sample"]
    summary = tuple(_describe(s) for s in sites)
    found = "; ".join(summary) or "no sample sites"

    def fail(expected):
        raise ValueError(f"{engine} expected {expected}; the model has: {found}")

    crms = [s for s in sites if isinstance(_unwrap(s["fn"]), CompletelyRandomMeasure)]
    ibps = [s for s in sites if isinstance(_unwrap(s["fn"]), RecursiveIBP)]
    if len(crms) + len(ibps) != 1:
        fail(
            "exactly one sample site with a CompletelyRandomMeasure (BetaProcess, GammaProcess, "
            f"...) or RecursiveIBP distribution, found {len(crms) + len(ibps)}"
        )
    total_count = None
    if ibps:
        count = ibps[0]
        fn = _unwrap(count["fn"])
        if fn.batch_shape != ():
            fail(f"a RecursiveIBP site with scalar alpha and beta (got {fn.batch_shape})")
        crm, crm_site, likelihood = fn.as_beta_process(), None, "bernoulli"
        num_rows, truncation = fn.num_rows, fn.max_features
        used = [count]
    else:
        crm_node = crms[0]
        crm = _unwrap(crm_node["fn"])
        if crm.batch_shape != ():
            fail(f"a CRM site {crm_node['name']!r} with scalar parameters (got {crm.batch_shape})")
        crm_site, truncation = crm_node["name"], crm.truncation
        theta = np.asarray(crm_node["value"], np.float64)
        candidates = [
            s
            for s in sites
            if s is not crm_node
            and not s["is_observed"]
            and jnp.ndim(s["value"]) == 2
            and jnp.shape(s["value"])[1] == truncation
            and isinstance(_unwrap(s["fn"]), dist.Distribution)
            and _unwrap(s["fn"]).is_discrete
        ]
        if len(candidates) != 1:
            fail(
                f"exactly one discrete (N, K={truncation}) count site driven by the atoms of "
                f"{crm_site!r}, found {len(candidates)}"
            )
        count = candidates[0]
        num_rows = jnp.shape(count["value"])[0]
        family = _count_family(_unwrap(count["fn"]))
        if family is None:
            raise ValueError(
                f"{engine} does not support the count likelihood of site {count['name']!r} "
                f"({type(_unwrap(count['fn'])).__name__}); supported: Bernoulli(θ) and "
                "NegativeBinomialProbs(r, θ) with a BetaProcess, Poisson(θ) with any CRM; the "
                f"model has: {found}"
            )
        likelihood, param, r = family
        if likelihood != "poisson" and not isinstance(crm, BetaProcess):
            raise ValueError(
                f"{engine}: the count site {count['name']!r} is {likelihood} and needs rates in "
                f"[0, 1]: a BetaProcess prior, but {crm_site!r} is {type(crm).__name__}"
            )
        shape = (num_rows, truncation)
        if not np.allclose(np.broadcast_to(np.asarray(param, np.float64), shape), theta[None]):
            fail(f"the count site {count['name']!r} with the atoms of {crm_site!r} as its rates")
        if r is not None:
            r = np.broadcast_to(np.asarray(r, np.float64), shape)
            if not np.all(r == r[:, :1]):
                fail(f"a negative-binomial total_count of {count['name']!r} that is one per row")
            total_count = r[:, 0].copy()
        used = [crm_node, count]

    rest = [s for s in sites if all(s is not u for u in used)]
    observed = [s for s in rest if s["is_observed"]]
    if len(observed) > 1:
        fail("at most one observed site")
    if not rest:
        fail(f"an observed site after the count site {count['name']!r}")
    obs = observed[0] if observed else rest[-1]
    obs_shape = tuple(jnp.shape(obs["value"]))
    if len(obs_shape) != 2 or obs_shape[0] != num_rows:
        fail(f"an observed site of shape (N={num_rows}, D), got {obs['name']!r} {obs_shape}")
    dim = obs_shape[1]
    latent = [s for s in rest if s is not obs]
    traits = [
        s
        for s in latent
        if isinstance(_unwrap(s["fn"]), dist.Normal)
        and tuple(jnp.shape(s["value"])) == (truncation, dim)
    ]
    if len(traits) != 1 or len(latent) != 1:
        fail(
            f"exactly one other latent site: a Normal trait site of shape (K={truncation}, "
            f"D={dim}) (other latent sites: {[s['name'] for s in latent]})"
        )
    trait = traits[0]
    loc, var = _normal_params(trait, (truncation, dim))
    if not (np.all(loc == loc[:1]) and np.all(var == var[:1])):
        fail(f"a trait site {trait['name']!r} whose prior is the same for every atom")
    base = _unwrap(obs["fn"])
    x = np.asarray(count["value"], np.float64)
    psi = np.asarray(trait["value"], np.float64)
    if not isinstance(base, dist.Normal):
        raise ValueError(
            f"{engine} supports a Normal observed site with mean {count['name']} @ "
            f"{trait['name']}; site {obs['name']!r} is {type(base).__name__} (sites: {found})"
        )
    obs_loc, obs_var = _normal_params(obs, obs_shape)
    scale = np.sqrt(np.abs(x) @ np.abs(psi)) + 1.0
    if not (np.all(np.abs(obs_loc - x @ psi) <= 1e-4 * scale) and np.all(obs_var == obs_var[:1])):
        raise ValueError(
            f"{engine} expected the observed site {obs['name']!r} to be Normal with mean "
            f"{count['name']} @ {trait['name']} and one variance per column; the model has: {found}"
        )
    return CRMTraitModel(
        model=model,
        crm=crm,
        crm_site=crm_site,
        count_site=count["name"],
        likelihood=likelihood,
        total_count=total_count,
        num_rows=int(num_rows),
        truncation=int(truncation),
        trait_site=trait["name"],
        trait_loc=loc[0].copy(),
        trait_var=var[0].copy(),
        obs_site=obs["name"],
        obs_value=np.asarray(obs["value"]) if obs["is_observed"] else None,
        noise_var=obs_var[0].copy(),
        dim=int(dim),
        site_summary=summary,
    )
