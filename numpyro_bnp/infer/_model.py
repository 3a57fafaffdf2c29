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

Restricted-IBP feature models (:func:`read_restricted_feature_model`) need

* exactly one sample site whose distribution is a
  :class:`~numpyro_bnp.distributions.RestrictedBernoulliProcess` with value shape ``(N, K)`` (the
  rows ``Z``; one law ``f`` for all rows or one per row);
* the **weight site**: a ``Beta`` site of shape ``(K,)`` whose value is the ``probs`` of every row
  (the truncated beta process ``π``);
* an **observed** ``(N, D)`` site, ``Normal`` with mean ``Z @ A`` and one variance;
* a ``Normal`` ``(K, D)`` feature site with mean 0 and one variance;
* no other latent sample site.

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

The beta–negative-binomial topic model (Zhu et al. 2020, §4.2;
:func:`numpyro_bnp.models.bnb_combinatorial_clustering`) is read as such a model with latent
counts: instead of a count site it has

* a **rate site** ``(N, K)``: ``Gamma(r_n, scale θ_k/(1-θ_k))`` with one shape ``r_n`` per row
  and a ``BetaProcess`` CRM site (checked numerically on the trace), so that the Poisson counts of
  a rate are ``NegativeBinomialProbs(r_n, θ_k)``;
* a **topic site** ``(K, V)``: ``Dirichlet(β)`` with the same ``β`` for every atom;
* the observed site ``(N, V)``: ``Poisson`` word counts with mean ``rates @ topics``.

As a block of :class:`numpyro.infer.Gibbs` the model is conditioned on the sites of the other
blocks (``model_kwargs["_gibbs_sites"]``): those sites are set aside, the trait prior and the
noise may depend on them (:meth:`CRMTraitModel.gaussian_params` reads them at any values), the
CRM and the count law may not.
"""

from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import gammaln, logsumexp
from numpyro import handlers
from numpyro.infer.gibbs import GIBBS_SITES_KWARG

from numpyro_bnp.distributions import (
    BetaProcess,
    CompletelyRandomMeasure,
    RecursiveIBP,
    RestrictedBernoulliProcess,
)

__all__ = [
    "CRMTraitModel",
    "CRMTraitNumbers",
    "FeatureModel",
    "RestrictedFeatureModel",
    "RestrictedNumbers",
    "read_crm_trait_model",
    "read_feature_model",
    "read_restricted_feature_model",
]


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


def _observed_site(rest, num_rows, prior, fail):
    """The observed site among ``rest`` (the sites after the prior's): the one observed site, or
    the last site when the model is traced without data; its value must be ``(num_rows, D)``."""
    observed = [s for s in rest if s["is_observed"]]
    if len(observed) > 1:
        fail("at most one observed site")
    if not rest:
        fail(f"an observed site after the {prior} site")
    obs = observed[0] if observed else rest[-1]
    obs_shape = tuple(jnp.shape(obs["value"]))
    if len(obs_shape) != 2 or obs_shape[0] != num_rows:
        fail(f"an observed site of shape (num_rows={num_rows}, D), got {obs_shape}")
    return obs


def _feature_site(latent, max_features, dim, fail):
    """The one ``Normal`` latent site of shape ``(K, D)`` among ``latent``."""
    features = [
        s
        for s in latent
        if isinstance(_unwrap(s["fn"]), dist.Normal)
        and tuple(jnp.shape(s["value"])) == (max_features, dim)
    ]
    if len(features) != 1:
        fail(f"exactly one Normal feature site of shape (K={max_features}, D={dim})")
    return features[0]


def _linear_gaussian_noise_var(obs, z, a):
    """``(D,)`` noise variance if ``obs`` is ``Normal`` with mean ``z @ a`` (checked numerically at
    the traced values) and one variance per column, else ``None``."""
    if not isinstance(_unwrap(obs["fn"]), dist.Normal):
        return None
    z, a = np.asarray(z, np.float64), np.asarray(a, np.float64)
    loc, var = _normal_params(obs, tuple(jnp.shape(obs["value"])))
    scale = np.sqrt(np.abs(z) @ np.abs(a)) + 1.0
    if np.all(np.abs(loc - z @ a) <= 1e-4 * scale) and np.all(var == var[:1]):
        return var[0].copy()
    return None


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
    obs = _observed_site(rest, num_rows, "RecursiveIBP", fail)
    obs_shape = tuple(jnp.shape(obs["value"]))
    dim = obs_shape[1]

    latent = [s for s in rest if s is not obs]
    features = _feature_site(latent, max_features, dim, fail)
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
    z = np.asarray(ibp["value"], np.float64)
    if weights is not None:
        z = z * np.asarray(weights["value"], np.float64)
    noise_var = _linear_gaussian_noise_var(obs, z, features["value"])
    likelihood = "generic"
    if noise_var is not None:
        likelihood = "linear_gaussian" if weights is None else "factor_analysis"
        spec["noise_var"] = noise_var
    spec["likelihood"] = likelihood
    return FeatureModel(**spec)


# ---------------------------------------------------------------------------- restricted IBP
class RestrictedNumbers(NamedTuple):
    """The numbers of a restricted-IBP linear-Gaussian model at given argument values.

    :ivar obs: ``(N, D)`` observations.
    :ivar beta_a, beta_b: ``(K,)`` parameters of the ``Beta`` prior of each ``π_k``.
    :ivar count_log_pmf: ``(N, max_count + 1)`` ``log f̃_n(J)``: row ``n``'s count law as its
        :class:`~numpyro_bnp.distributions.RestrictedBernoulliProcess` defines it (cut to
        ``0..K`` and renormalised), ``-inf`` off its support.
    :ivar feature_var: prior variance ``σ_A²`` of every feature entry (scalar).
    :ivar noise_var: observation noise variance ``σ_o²`` (scalar).
    """

    obs: jnp.ndarray
    beta_a: jnp.ndarray
    beta_b: jnp.ndarray
    count_log_pmf: jnp.ndarray
    feature_var: jnp.ndarray
    noise_var: jnp.ndarray


def _scalar_param(x, shape):
    return jnp.reshape(jnp.broadcast_to(x, shape), (-1,))[0]


def _count_log_pmf(rows_fn, num_rows, max_features, max_count):
    """``log f̃_n(J)``, ``(N, max_count + 1)``, through the rows' own distribution.

    With all probabilities 1/2 the vector ``z_J`` (``J`` leading ones) has
    ``log P(z_J) = log f̃(J) - log C(K, J)`` (the Bernoulli factors cancel against the
    Poisson-binomial normaliser ``C(K, J) 2^{-K}``), so the count law is read exactly as the
    distribution defines it, renormalisation and support included.
    """
    half = RestrictedBernoulliProcess(jnp.full((max_features,), 0.5), rows_fn.count_dist)
    counts = jnp.arange(max_count + 1)
    z = (jnp.arange(max_features)[None, :] < counts[:, None]).astype(jnp.int32)
    lp = half.log_prob(z.reshape((max_count + 1,) + (1,) * len(half.batch_shape) + (-1,)))
    log_binom = gammaln(max_features + 1.0) - gammaln(counts + 1.0)
    log_binom = log_binom - gammaln(max_features - counts + 1.0)
    lp = jnp.moveaxis(lp + log_binom.reshape((-1,) + (1,) * len(half.batch_shape)), 0, -1)
    lp = lp - logsumexp(lp, axis=-1, keepdims=True)  # exact normalisation (rounding only)
    return jnp.broadcast_to(lp, (num_rows, max_count + 1))


@dataclass(frozen=True, eq=False)
class RestrictedFeatureModel:
    """The sites and static sizes of a restricted-IBP linear-Gaussian model (see the module
    docstring); :meth:`numbers` reads the numeric parameters, traceably, at any argument values.

    :ivar max_count: the largest row count any row's ``f`` allows (at most ``K``).
    :ivar fixed_count: every row's ``f`` is a point mass (the row counts never change).
    :ivar count_support: ``(N, max_count + 1)`` bool, ``f_n(J) > 0``.
    """

    model: object
    weight_site: str
    rows_site: str
    feature_site: str
    obs_site: str
    num_rows: int
    max_features: int
    dim: int
    max_count: int
    fixed_count: bool
    count_support: np.ndarray
    site_summary: tuple = field(default=())

    def numbers(self, values, model_args=(), model_kwargs=None):
        """:class:`RestrictedNumbers` of the model run with the latent sites set to ``values``.

        Pure and traceable (under ``jit`` the arguments may be tracers), so an engine can read the
        data and hyperparameters inside its compiled step. ``values`` maps the weight, rows and
        feature site names to values of their shapes.
        """
        model = handlers.substitute(handlers.seed(self.model, rng_seed=0), data=values)
        tr = handlers.trace(model).get_trace(*model_args, **(model_kwargs or {}))
        k, d = self.max_features, self.dim
        beta = _unwrap(tr[self.weight_site]["fn"])
        rows = _unwrap(tr[self.rows_site]["fn"])
        feature = _unwrap(tr[self.feature_site]["fn"])
        noise = _unwrap(tr[self.obs_site]["fn"])
        return RestrictedNumbers(
            obs=jnp.asarray(tr[self.obs_site]["value"]),
            beta_a=jnp.broadcast_to(beta.concentration1, (k,)),
            beta_b=jnp.broadcast_to(beta.concentration0, (k,)),
            count_log_pmf=_count_log_pmf(rows, self.num_rows, k, self.max_count),
            feature_var=_scalar_param(feature.scale, (k, d)) ** 2,
            noise_var=_scalar_param(noise.scale, (self.num_rows, d)) ** 2,
        )


def read_restricted_feature_model(model, model_args=(), model_kwargs=None, *, engine="this engine"):
    """Trace ``model(*model_args, **model_kwargs)`` once and locate its restricted-IBP sites.

    :param model: a NumPyro model function (e.g.
        :func:`numpyro_bnp.models.restricted_linear_gaussian` with data).
    :param str engine: the engine's name, used in error messages.
    :return: a :class:`RestrictedFeatureModel`.
    :raises ValueError: naming the expected site and listing the sites found.
    """
    model_kwargs = dict(model_kwargs or {})
    user_model = model
    noise = np.random.default_rng(0)

    def stand_in(site):
        # Fixed random values instead of (slow, eager) draws of the rows, weights and features:
        # only the shapes, the weights-are-probs check and the linear-Gaussian check need values,
        # and any value in the support serves.
        fn, base = site["fn"], _unwrap(site["fn"])
        if site["value"] is not None:
            return None
        if isinstance(base, RestrictedBernoulliProcess):
            return jnp.asarray(noise.integers(0, 2, fn.shape()), jnp.int32)
        if isinstance(base, dist.Beta):
            return jnp.asarray(noise.uniform(0.05, 0.95, fn.shape()), jnp.result_type(float))
        if isinstance(base, dist.Normal):
            return jnp.asarray(noise.normal(size=fn.shape()), jnp.result_type(float))
        return None

    model = handlers.substitute(model, substitute_fn=stand_in)
    with jax.ensure_compile_time_eval():
        tr = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(*model_args, **model_kwargs)
    sites = [s for s in tr.values() if s["type"] == "sample"]
    summary = tuple(_describe(s) for s in sites)
    found = "; ".join(summary) or "no sample sites"

    def fail(expected):
        raise ValueError(f"{engine} expected {expected}; the model has: {found}")

    rows = [s for s in sites if isinstance(_unwrap(s["fn"]), RestrictedBernoulliProcess)]
    if len(rows) != 1:
        fail(
            "exactly one sample site with a RestrictedBernoulliProcess distribution, "
            f"found {len(rows)}"
        )
    rows = rows[0]
    shape = tuple(jnp.shape(rows["value"]))
    if len(shape) != 2:
        fail(f"a RestrictedBernoulliProcess site {rows['name']!r} of shape (N, K), got {shape}")
    num_rows, max_features = shape
    rows_fn = _unwrap(rows["fn"])
    if rows_fn.batch_shape not in ((), (num_rows,)):
        fail(
            f"one count law for all rows or one per row at {rows['name']!r} (batch shape () or "
            f"({num_rows},)), got batch shape {rows_fn.batch_shape}"
        )

    weights = [
        s
        for s in sites
        if isinstance(_unwrap(s["fn"]), dist.Beta)
        and tuple(jnp.shape(s["value"])) == (max_features,)
        and not s["is_observed"]
    ]
    if len(weights) != 1:
        fail(f"exactly one Beta weight site of shape (K={max_features},), found {len(weights)}")
    weights = weights[0]
    probs = np.broadcast_to(np.asarray(rows_fn.probs), shape)
    if not np.array_equal(probs, np.broadcast_to(np.asarray(weights["value"]), shape)):
        fail(
            f"the probabilities of {rows['name']!r} to be the value of the Beta site "
            f"{weights['name']!r} for every row"
        )

    rest = [s for s in sites if s is not rows and s is not weights]
    obs = _observed_site(rest, num_rows, "RestrictedBernoulliProcess", fail)
    if not obs["is_observed"]:
        fail(f"data at the observed site {obs['name']!r} (pass the observations)")
    dim = tuple(jnp.shape(obs["value"]))[1]
    latent = [s for s in rest if s is not obs]
    features = _feature_site(latent, max_features, dim, fail)
    others = [s["name"] for s in latent if s is not features]
    if others:
        fail(
            "only the Beta weight, RestrictedBernoulliProcess, feature and observed sites "
            f"(unexpected latent sites: {others})"
        )
    loc, var = _normal_params(features, (max_features, dim))
    if not (np.all(loc == 0.0) and np.all(var == var.flat[0])):
        fail(f"a feature site {features['name']!r} with prior mean 0 and one variance")
    noise_var = _linear_gaussian_noise_var(obs, rows["value"], features["value"])
    if noise_var is None or not np.all(noise_var == noise_var[0]):
        fail(
            f"a linear-Gaussian observed site {obs['name']!r}: Normal with mean "
            f"{rows['name']} @ {features['name']} and one noise variance"
        )

    read_counts = jax.jit(_count_log_pmf, static_argnums=(1, 2, 3))  # one compile, not per op
    log_f = np.asarray(read_counts(rows_fn, num_rows, max_features, max_features))
    support = np.isfinite(log_f)
    if not support.any(axis=1).all():
        fail(f"a count law with mass on 0..K={max_features} for every row of {rows['name']!r}")
    max_count = int(np.flatnonzero(support.any(axis=0)).max())
    return RestrictedFeatureModel(
        model=user_model,
        weight_site=weights["name"],
        rows_site=rows["name"],
        feature_site=features["name"],
        obs_site=obs["name"],
        num_rows=num_rows,
        max_features=max_features,
        dim=dim,
        max_count=max_count,
        fixed_count=bool((support.sum(axis=1) == 1).all()),
        count_support=support[:, : max_count + 1],
        site_summary=summary,
    )


# ---------------------------------------------------------------------------------------------
# latent trait models with a CRM prior
# ---------------------------------------------------------------------------------------------
COUNT_LIKELIHOODS = ("bernoulli", "poisson", "negative_binomial")


class CRMTraitNumbers(NamedTuple):
    """The data and Gaussian parameters of a CRM latent trait model at given site values.

    :ivar obs: ``(N, D)`` observations, or ``None`` (prior-only).
    :ivar noise_var: ``(D,)`` observation noise variance.
    :ivar trait_loc, trait_var: ``(D,)`` prior mean and variance of each trait entry.
    """

    obs: jnp.ndarray | None
    noise_var: jnp.ndarray
    trait_loc: jnp.ndarray
    trait_var: jnp.ndarray


@dataclass(frozen=True, eq=False)
class CRMTraitModel:
    """What :class:`~numpyro_bnp.infer.CRMSlice` needs to know about a CRM latent trait model.

    :ivar crm: the CRM distribution (scalar parameters) whose atoms are the count rates ``θ``.
    :ivar crm_site: name of the CRM site, or ``None`` for a ``RecursiveIBP`` model.
    :ivar count_site: name of the ``(N, K)`` count site (the ``RecursiveIBP`` site for IBP models;
        ``None`` for the topic model, whose counts are latent).
    :ivar likelihood: ``"bernoulli"``, ``"poisson"`` or ``"negative_binomial"`` (counts given θ).
    :ivar total_count: ``(N,)`` negative-binomial ``r_n`` (``None`` otherwise).
    :ivar observation: ``"linear_gaussian"`` (Normal with mean ``X @ ψ``) or ``"topics"``
        (Poisson word counts with mean ``rates @ topics``).
    :ivar trait_loc, trait_var: ``(D,)`` prior mean and variance of each trait entry (Normal
        traits; ``None`` for topics).
    :ivar obs_value: ``(N, D)`` observations, or ``None`` when traced without data (prior-only).
    :ivar noise_var: ``(D,)`` observation noise variance (``None`` for topics).
    :ivar rate_site: the ``(N, K)`` Gamma rate site of the topic model.
    :ivar topic_concentration: ``(V,)`` Dirichlet ``β`` of every topic.
    """

    model: object
    crm: CompletelyRandomMeasure
    crm_site: str | None
    count_site: str | None
    likelihood: str
    total_count: np.ndarray | None
    num_rows: int
    truncation: int
    trait_site: str
    trait_loc: np.ndarray | None
    trait_var: np.ndarray | None
    obs_site: str
    obs_value: np.ndarray | None
    noise_var: np.ndarray | None
    dim: int
    observation: str = "linear_gaussian"
    rate_site: str | None = None
    topic_concentration: np.ndarray | None = None
    site_summary: tuple = field(default=())

    def numbers(self, values, model_args=(), model_kwargs=None):
        """The data and Gaussian parameters of the model with its CRM, count and trait sites set
        to ``values``: a :class:`CRMTraitNumbers`.

        Pure and traceable, so an engine reads them inside its compiled step; as a block of
        :class:`numpyro.infer.Gibbs` they follow the values of the other blocks' sites, which
        arrive conditioned through ``model_kwargs``.
        """
        model = handlers.substitute(handlers.seed(self.model, rng_seed=0), data=values)
        tr = handlers.trace(model).get_trace(*model_args, **(model_kwargs or {}))
        k = jnp.shape(values[self.trait_site])[0]
        trait = _unwrap(tr[self.trait_site]["fn"])
        noise = _unwrap(tr[self.obs_site]["fn"])

        def row(x, shape):  # the (D,) parameters of the first row (all rows agree, read_...)
            return jnp.broadcast_to(x, shape)[0]

        obs = tr[self.obs_site]
        return CRMTraitNumbers(
            obs=jnp.asarray(obs["value"]) if obs["is_observed"] else None,
            noise_var=row(noise.scale, (self.num_rows, self.dim)) ** 2,
            trait_loc=row(trait.loc, (k, self.dim)),
            trait_var=row(trait.scale, (k, self.dim)) ** 2,
        )


def _depends_on_conditioning(model, model_args, model_kwargs, names):
    """Names among ``names`` whose distribution depends on the values conditioned by a
    :class:`numpyro.infer.Gibbs` composite (``model_kwargs[GIBBS_SITES_KWARG]``).

    The conditioned values enter as tracers of ``jax.eval_shape`` while everything else is
    evaluated eagerly (``ensure_compile_time_eval``): a parameter that is a tracer depends on them.
    """
    conditioned = model_kwargs[GIBBS_SITES_KWARG]
    found = []

    def probe(values):
        kwargs = {**model_kwargs, GIBBS_SITES_KWARG: values}
        with jax.ensure_compile_time_eval():
            tr = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(*model_args, **kwargs)
        for name in names:
            leaves = jax.tree.leaves(_unwrap(tr[name]["fn"]))
            if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
                found.append(name)
        return jnp.zeros(())

    jax.eval_shape(probe, conditioned)
    return found


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
    noise = np.random.default_rng(0)
    dtype = jnp.result_type(float)

    def stand_in(site):
        # Fixed values in the support instead of (slow, eager) draws of the atoms, topics and
        # rates: the checks below need shapes and some values, any values in the support serve.
        base = _unwrap(site["fn"])
        if site["value"] is not None:
            return None
        shape = site["fn"].shape()
        if isinstance(base, CompletelyRandomMeasure):
            return jnp.asarray(-np.sort(-noise.uniform(0.05, 0.95, shape)), dtype)
        if isinstance(base, dist.Gamma):
            return jnp.asarray(noise.uniform(0.5, 1.5, shape), dtype)
        if isinstance(base, dist.Dirichlet):
            value = noise.uniform(0.5, 1.5, shape)
            return jnp.asarray(value / value.sum(-1, keepdims=True), dtype)
        return None

    traced = handlers.substitute(model, substitute_fn=stand_in)
    with jax.ensure_compile_time_eval():
        tr = handlers.trace(handlers.seed(traced, rng_seed=0)).get_trace(
            *model_args, **model_kwargs
        )
    # sites of the other blocks of a Gibbs composite arrive conditioned: they are parameters here
    given = set(model_kwargs.get(GIBBS_SITES_KWARG, {}))
    sites = [s for s in tr.values() if s["type"] == "sample" and s["name"] not in given]
    summary = tuple(_describe(s) for s in sites)
    found = "; ".join(summary) or "no sample sites"
    if given:
        found += f" (given by other Gibbs blocks: {sorted(given)})"

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
        per_atom = [
            s
            for s in sites
            if s is not crm_node
            and not s["is_observed"]
            and jnp.ndim(s["value"]) == 2
            and jnp.shape(s["value"])[1] == truncation
            and isinstance(_unwrap(s["fn"]), dist.Distribution)
        ]
        rate_sites = [s for s in per_atom if isinstance(_unwrap(s["fn"]), dist.Gamma)]
        if len(rate_sites) == 1:
            return _read_topic_model(model, crm_node, rate_sites[0], sites, summary, engine)
        candidates = [s for s in per_atom if _unwrap(s["fn"]).is_discrete]
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
        others = [s["name"] for s in latent if len(traits) != 1 or s is not traits[0]]
        fail(
            f"exactly one other latent site: a Normal trait site of shape (K={truncation}, "
            f"D={dim}) (unexpected latent sites: {others}; sample continuous hyper-parameters "
            "in another block of numpyro.infer.Gibbs)"
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
    if given:
        names = [u["name"] for u in used]
        moving = _depends_on_conditioning(model, model_args, model_kwargs, names)
        if moving:
            raise ValueError(
                f"{engine}: the distributions of {moving} depend on sites of other Gibbs blocks "
                f"({sorted(given)}); only the trait prior and the observation noise may (the CRM "
                "and the count law must be fixed)"
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


def _read_topic_model(model, crm_node, rate_node, sites, summary, engine):
    """The sites of the beta–negative-binomial topic model (module docstring): ``θ`` at
    ``crm_node``, gamma rates at ``rate_node``, Dirichlet topics, Poisson word counts."""
    found = "; ".join(summary)

    def fail(expected):
        raise ValueError(f"{engine} expected {expected}; the model has: {found}")

    crm, crm_site, rate_site = _unwrap(crm_node["fn"]), crm_node["name"], rate_node["name"]
    if not isinstance(crm, BetaProcess):
        raise ValueError(
            f"{engine}: the rate site {rate_site!r} is Gamma with scale θ/(1-θ) and needs atoms in "
            f"[0, 1]: a BetaProcess prior, but {crm_site!r} is {type(crm).__name__}"
        )
    truncation = crm.truncation
    num_rows = int(jnp.shape(rate_node["value"])[0])
    shape = (num_rows, truncation)
    fn = _unwrap(rate_node["fn"])
    theta = np.asarray(crm_node["value"], np.float64)
    rate = np.broadcast_to(np.asarray(fn.rate, np.float64), shape)
    # scale θ/(1-θ) <=> rate (1-θ)/θ <=> θ = 1/(1 + rate) (also at θ = 0, rate = inf)
    if not np.allclose(1.0 / (1.0 + rate), theta[None], rtol=1e-6, atol=1e-12):
        fail(
            f"the Gamma rate site {rate_site!r} with scale θ/(1-θ) for the atoms θ of "
            f"{crm_site!r} (so that its Poisson counts are NegativeBinomialProbs(r, θ))"
        )
    r = np.broadcast_to(np.asarray(fn.concentration, np.float64), shape)
    if not np.all(r == r[:, :1]):
        fail(f"a Gamma rate site {rate_site!r} whose shape r is one per row")
    if not np.all(np.isfinite(r) & (r > 0)):
        fail(f"a Gamma rate site {rate_site!r} with finite shapes r > 0 (positive doc lengths)")

    rest = [s for s in sites if s is not crm_node and s is not rate_node]
    obs = _observed_site(rest, num_rows, "Gamma rate", fail)
    obs_shape = tuple(jnp.shape(obs["value"]))
    vocab = obs_shape[1]
    latent = [s for s in rest if s is not obs]
    topics = [
        s
        for s in latent
        if isinstance(_unwrap(s["fn"]), dist.Dirichlet)
        and tuple(jnp.shape(s["value"])) == (truncation, vocab)
    ]
    if len(topics) != 1 or len(latent) != 1:
        fail(
            f"exactly one other latent site: a Dirichlet topic site of shape (K={truncation}, "
            f"V={vocab}) (other latent sites: {[s['name'] for s in latent]})"
        )
    topic = topics[0]
    beta = np.broadcast_to(
        np.asarray(_unwrap(topic["fn"]).concentration, np.float64), (truncation, vocab)
    )
    if not np.all(beta == beta[:1]):
        fail(f"a topic site {topic['name']!r} whose Dirichlet prior is the same for every atom")
    base = _unwrap(obs["fn"])
    if type(base) is not dist.Poisson:
        raise ValueError(
            f"{engine} supports Poisson word counts with mean {rate_site} @ {topic['name']}; "
            f"site {obs['name']!r} is {type(base).__name__} (sites: {found})"
        )
    mean = np.asarray(rate_node["value"], np.float64) @ np.asarray(topic["value"], np.float64)
    obs_rate = np.broadcast_to(np.asarray(base.rate, np.float64), obs_shape)
    if not np.allclose(obs_rate, mean, rtol=1e-5, atol=1e-8):
        fail(f"the Poisson site {obs['name']!r} with mean {rate_site} @ {topic['name']}")
    value = None
    if obs["is_observed"]:
        value = np.asarray(obs["value"])
        if not (
            np.all(np.isfinite(value)) and np.all(value >= 0) and np.all(value == np.round(value))
        ):
            raise ValueError(
                f"{engine}: the word counts at site {obs['name']!r} must be non-negative integers"
            )
        value = value.astype(np.int64)
    return CRMTraitModel(
        model=model,
        crm=crm,
        crm_site=crm_site,
        count_site=None,
        likelihood="negative_binomial",
        total_count=r[:, 0].copy(),
        num_rows=num_rows,
        truncation=int(truncation),
        trait_site=topic["name"],
        trait_loc=None,
        trait_var=None,
        obs_site=obs["name"],
        obs_value=value,
        noise_var=None,
        dim=int(vocab),
        observation="topics",
        rate_site=rate_site,
        topic_concentration=beta[0].copy(),
        site_summary=summary,
    )
