"""Read a restricted-IBP feature model (see :mod:`numpyro_bnp.infer.core.model` for the readers'
shared helpers and conventions).

Restricted-IBP feature models (:func:`read_restricted_feature_model`) need

* exactly one sample site whose distribution is a
  :class:`~numpyro_bnp.distributions.RestrictedBernoulliProcess` with value shape ``(N, K)`` (the
  rows ``Z``; one law ``f`` for all rows or one per row);
* the **weight site**: a ``Beta`` site of shape ``(K,)`` whose value is the ``probs`` of every row
  (the truncated beta process ``π``);
* an **observed** ``(N, D)`` site, ``Normal`` with mean ``Z @ A`` and one variance;
* a ``Normal`` ``(K, D)`` feature site with mean 0 and one variance;
* no other latent sample site.
"""

from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import gammaln, logsumexp
from numpyro import handlers

from numpyro_bnp._checks import is_concrete, observed_array
from numpyro_bnp.distributions import RestrictedBernoulliProcess
from numpyro_bnp.infer.core.model import (
    TracedSites,
    normal_params,
    observed_site,
    sites_of,
    trace_model,
    unwrap,
)
from numpyro_bnp.infer.features.feature_model import feature_site, linear_gaussian_noise_var

__all__ = ["RestrictedFeatureModel", "RestrictedNumbers", "read_restricted_feature_model"]


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
    engine: str = "this engine"

    def numbers(self, values, model_args=(), model_kwargs=None):
        """:class:`RestrictedNumbers` of the model run with the latent sites set to ``values``.

        Pure and traceable (under ``jit`` the arguments may be tracers), so an engine can read the
        data and hyperparameters inside its compiled step. ``values`` maps the weight, rows and
        feature site names to values of their shapes.
        """
        model = handlers.substitute(self.model, data=values)
        tr = trace_model(model, model_args, model_kwargs, f"{self.engine} (reading its numbers)")
        k, d = self.max_features, self.dim
        beta = unwrap(tr[self.weight_site]["fn"])
        rows = unwrap(tr[self.rows_site]["fn"])
        feature = unwrap(tr[self.feature_site]["fn"])
        noise = unwrap(tr[self.obs_site]["fn"])
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
    noise = np.random.default_rng(0)

    def stand_in(site):
        # Fixed random values instead of (slow, eager) draws of the rows, weights and features:
        # only the shapes, the weights-are-probs check and the linear-Gaussian check need values,
        # and any value in the support serves.
        fn, base = site["fn"], unwrap(site["fn"])
        if isinstance(base, RestrictedBernoulliProcess):
            return jnp.asarray(noise.integers(0, 2, fn.shape()), jnp.int32)
        if isinstance(base, dist.Beta):
            return jnp.asarray(noise.uniform(0.05, 0.95, fn.shape()), jnp.result_type(float))
        if isinstance(base, dist.Normal):
            return jnp.asarray(noise.normal(size=fn.shape()), jnp.result_type(float))
        return None

    read = TracedSites(model, model_args, dict(model_kwargs or {}), engine, substitute_fn=stand_in)
    sites, fail = read.sites, read.fail
    rows = read.the_one(RestrictedBernoulliProcess)
    shape = tuple(jnp.shape(rows["value"]))
    if len(shape) != 2:
        fail(f"a RestrictedBernoulliProcess site {rows['name']!r} of shape (N, K), got {shape}")
    num_rows, max_features = shape
    rows_fn = unwrap(rows["fn"])
    if rows_fn.batch_shape not in ((), (num_rows,)):
        fail(
            f"one count law for all rows or one per row at {rows['name']!r} (batch shape () or "
            f"({num_rows},)), got batch shape {rows_fn.batch_shape}"
        )

    weights = [s for s in sites_of(sites, dist.Beta, (max_features,)) if not s["is_observed"]]
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
    obs = observed_site(
        rest, num_rows, f"the RestrictedBernoulliProcess site {rows['name']!r}", fail
    )
    if not obs["is_observed"]:
        fail(f"data at the observed site {obs['name']!r} (pass the observations)")
    dim = tuple(jnp.shape(obs["value"]))[1]
    if is_concrete(obs["value"]):
        name = f"the data of the observed site {obs['name']!r}"
        observed_array(obs["value"], name, dtype=jnp.result_type(float), dim=dim)
    latent = [s for s in rest if s is not obs]
    features = feature_site(latent, max_features, dim, fail)
    others = [s["name"] for s in latent if s is not features]
    if others:
        fail(
            "only the Beta weight, RestrictedBernoulliProcess, feature and observed sites "
            f"(unexpected latent sites: {others})"
        )
    loc, var = normal_params(features, (max_features, dim))
    if not (np.all(loc == 0.0) and np.all(var == var.flat[0])):
        fail(f"a feature site {features['name']!r} with prior mean 0 and one variance")
    noise_var = linear_gaussian_noise_var(obs, rows["value"], features["value"])
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
        model=model,
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
        site_summary=read.summary,
        engine=engine,
    )
