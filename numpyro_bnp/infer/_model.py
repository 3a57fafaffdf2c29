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
"""

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers

from numpyro_bnp.distributions.ibp import RecursiveIBP

__all__ = ["FeatureModel", "read_feature_model"]


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
