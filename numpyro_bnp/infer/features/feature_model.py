"""Read a latent feature model: the sites the feature engines (R-IBP filter, accelerated Gibbs)
need.

Engines never look at site *names*: they trace the model once (``handlers.seed`` +
``handlers.trace``) and find sites by the type and shape of their distributions. A model that does
not fit gets a ``ValueError`` that names what was expected and lists what was found.

Latent feature models (:func:`read_feature_model`) need

* exactly one sample site whose distribution is a
  :class:`~numpyro_bnp.distributions.RecursiveIBP` (the binary ``N x K`` matrix ``Z``);
* the **observed site**: the one observed site, or, when the model is traced without data
  (``obs=None``), the last sample site of the trace; its value has shape ``(N, D)`` and its
  distribution factorises over the ``D`` columns given ``Z`` and ``A``: once its ``Independent`` /
  ``ExpandedDistribution`` wrappers are removed it is univariate (event shape ``()``), so
  ``Poisson(...).to_event(2)`` is fine and ``MultivariateNormal``, ``Dirichlet`` or
  ``Multinomial`` over ``D`` are not (the engines' per-column updates assume the factorisation);
  new data are checked against its support (:meth:`FeatureModel.check_observed`);
* the **feature site**: a ``Normal`` ``(K, D)`` site, i.i.d. over the ``K`` rows (its mean and
  variance may vary over the ``D`` columns);
* optionally a **weight site**: a ``Normal`` ``(N, K)`` site with one mean and variance for all
  entries (factor analysis);
* no other latent sample site (deterministic sites are fine), except, for an engine that learns
  them (``hyper=True``), **hyper-parameter sites**: latent sites whose value sets only the
  observed ``Normal``'s scale (the noise, e.g. ``sigma_o ~ HalfNormal``, one for all columns or
  one per column), the IBP's mass ``alpha``, the offset of a ``Bernoulli``'s logits (a bias,
  ``Bernoulli(logits=Z @ A + b)`` or ``b + Z @ A``, one for all pixels or one per pixel with
  ``b`` of shape ``(D,)``: the same for every row), or the prior of another
  hyper-parameter site. What a site sets is found by tracing the model again with the site at
  another value and every other latent site held (:class:`HyperSites`).

When the observed site is ``Normal`` with mean ``Z @ A`` (linear-Gaussian) or ``(Z * W) @ A``
(factor analysis) at the traced values, the engines can use closed-form updates; when it is a
``Bernoulli`` with logits ``Z @ A + offset`` (the same offset for every row, at two different
values of ``Z`` and ``A``), :attr:`FeatureModel.logit_offset` holds the offset. Both are checked
numerically on the trace, not assumed from names.

The sites are found with the shared site finder of :mod:`numpyro_bnp.infer.core.model`
(:class:`~numpyro_bnp.infer.core.model.TracedSites`).
"""

from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.distributions import constraints

from numpyro_bnp.distributions import RecursiveIBP
from numpyro_bnp.infer.core.model import (
    TracedSites,
    normal_params,
    observed_site,
    sites_of,
    trace_model,
    unwrap,
)

__all__ = [
    "FeatureModel",
    "HyperSites",
    "HyperTerms",
    "feature_site",
    "linear_gaussian_noise_var",
    "logit_offset",
    "read_feature_model",
    "row_log_density",
]


def feature_site(latent, max_features, dim, fail):
    """The one ``Normal`` latent site of shape ``(K, D)`` among ``latent``."""
    features = sites_of(latent, dist.Normal, (max_features, dim))
    if len(features) != 1:
        fail(f"exactly one Normal feature site of shape (K={max_features}, D={dim})")
    return features[0]


def linear_gaussian_noise_var(obs, z, a):
    """``(D,)`` noise variance if ``obs`` is ``Normal`` with mean ``z @ a`` (checked numerically at
    the traced values) and one variance per column, else ``None``."""
    if not isinstance(unwrap(obs["fn"]), dist.Normal):
        return None
    z, a = np.asarray(z, np.float64), np.asarray(a, np.float64)
    loc, var = normal_params(obs, tuple(jnp.shape(obs["value"])))
    scale = np.sqrt(np.abs(z) @ np.abs(a)) + 1.0
    if np.all(np.abs(loc - z @ a) <= 1e-4 * scale) and np.all(var == var[:1]):
        return var[0].copy()
    return None


def logit_offset(obs, z, a):
    """``(N, D)`` ``logits - z @ a`` if ``obs`` is a ``Bernoulli`` given by its logits, else
    ``None``. Traceable."""
    fn = unwrap(obs["fn"])
    if not isinstance(fn, dist.BernoulliLogits):
        return None
    shape = jnp.shape(obs["value"])
    return jnp.broadcast_to(fn.logits, shape) - jnp.asarray(z) @ jnp.asarray(a)


class HyperTerms(NamedTuple):
    """What the hyper-parameter sites set, at some values (:meth:`HyperSites.terms`).

    :ivar noise_var: ``(D,)`` the observed ``Normal``'s variance per column (``None`` when the
        likelihood is not ``Normal``).
    :ivar alpha: the IBP's mass.
    :ivar log_prior: the log prior density of the hyper-parameter sites.
    :ivar offset: ``(D,)`` the ``Bernoulli``'s logits minus ``Z @ A`` (``None`` when the
        likelihood is not a ``Bernoulli`` given by its logits).
    """

    noise_var: jnp.ndarray | None
    alpha: jnp.ndarray
    log_prior: jnp.ndarray
    offset: jnp.ndarray | None


START_QUANTILE = 0.1  # of the prior where a hyper-parameter site starts (see HyperSites.init)


class HyperSites:
    """The hyper-parameter sites of a feature model that an engine learns (see the module
    docstring): the observed ``Normal``'s noise scale, the IBP's mass ``alpha``, the offset of
    a ``Bernoulli``'s logits, and sites that only set their priors.

    Their values travel as one flat vector ``(P,)`` (the sites' values raveled in trace order);
    :meth:`terms` reads, by tracing the model at those values with every other latent site held
    at its traced value, what the engine needs. Traceable under ``jit``.

    :ivar names: the sites' names, in trace order.
    :ivar shapes: their value shapes.
    :ivar init: ``(P,)`` float64 starting values: quantiles of 1,001 draws of each site from its
        prior (at the traced values of the other sites), on the side where the model explains
        more with features, :data:`START_QUANTILE` towards a small noise and a large mass (a
        site's direction read from the model), the median for a site that sets neither.
    :ivar sets_noise, sets_mass: whether some site sets the noise scale, the IBP's mass.
    :ivar offset_mask: ``(P,)`` bool, the coordinates of the sites that set the logits' offset.
    """

    def __init__(self, model, model_args, model_kwargs, sites, held, obs, ibp, features, engine):
        self.names = tuple(s["name"] for s in sites)
        self.shapes = tuple(tuple(jnp.shape(s["value"])) for s in sites)
        self.transforms = tuple(dist.biject_to(s["fn"].support) for s in sites)
        self._draws = [np.asarray(s["fn"].sample(jax.random.PRNGKey(0), (1001,))) for s in sites]
        self.init = np.concatenate([np.median(d, axis=0).reshape(-1) for d in self._draws])
        self.init = self.init.astype(np.float64)
        self.sets_noise = self.sets_mass = False
        self.offset_mask = np.zeros(self.init.size, bool)
        self._model, self._args, self._kwargs = model, tuple(model_args), dict(model_kwargs)
        self._held, self._obs, self._ibp, self._engine = held, obs, ibp, engine
        self._features = features

    def _coordinates(self, name):
        index = self.names.index(name)
        start = sum(int(np.prod(shape, dtype=int)) for shape in self.shapes[:index])
        return slice(start, start + int(np.prod(self.shapes[index], dtype=int)))

    def start_at(self, name, quantile):
        """Start the site ``name`` at the elementwise ``quantile`` of its prior draws."""
        value = np.quantile(self._draws[self.names.index(name)], quantile, axis=0).reshape(-1)
        self.init[self._coordinates(name)] = value

    def trace(self, values):
        """The model's trace with the hyper-parameter sites at ``values`` (a dict) and the other
        latent sites at their traced values."""
        model = handlers.substitute(self._model, data={**self._held, **values})
        return trace_model(model, self._args, self._kwargs, self._engine)

    def unflatten(self, flat):
        """``{name: value}`` from the flat vector ``flat`` ``(P,)``."""
        values, start = {}, 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            size = int(np.prod(shape, dtype=int))
            values[name] = jnp.reshape(flat[start : start + size], shape)
            start += size
        return values

    def to_unconstrained(self, flat):
        """``(P,)`` the sites' values mapped to the real line (``biject_to(support).inv``)."""
        values = self.unflatten(flat)
        return jnp.concatenate(
            [
                jnp.reshape(t.inv(values[n]), -1)
                for n, t in zip(self.names, self.transforms, strict=True)
            ]
        )

    def from_unconstrained(self, free):
        """The inverse of :meth:`to_unconstrained`."""
        values = self.unflatten(free)
        return jnp.concatenate(
            [
                jnp.reshape(t(values[n]), -1)
                for n, t in zip(self.names, self.transforms, strict=True)
            ]
        )

    def terms(self, flat):
        """The :class:`HyperTerms` at the values ``flat`` ``(P,)``."""
        values = self.unflatten(flat)
        tr = self.trace(values)
        obs = tr[self._obs]
        noise_var = None
        if isinstance(unwrap(obs["fn"]), dist.Normal):
            noise_var = jnp.broadcast_to(unwrap(obs["fn"]).scale ** 2, jnp.shape(obs["value"]))[0]
        offset = logit_offset(obs, self._held[self._ibp], self._held[self._features])
        alpha = unwrap(tr[self._ibp]["fn"]).alpha
        log_prior = sum(jnp.sum(tr[n]["fn"].log_prob(values[n])) for n in self.names)
        return HyperTerms(noise_var, alpha, log_prior, None if offset is None else offset[0])


def _read_hyper_sites(read, model, model_args, model_kwargs, candidates, held, ibp, obs, features):
    """The :class:`HyperSites` of ``candidates`` (latent sites other than the IBP, feature and
    weight sites ``held``: their traced values); fails naming a site that sets anything else
    than the noise scale, the IBP's mass or another candidate's prior."""
    names = {s["name"] for s in candidates}
    hyper = HyperSites(
        model,
        model_args,
        model_kwargs,
        candidates,
        held,
        obs["name"],
        ibp["name"],
        features["name"],
        f"{read.engine} (reading the model)",
    )

    def readings(tr):
        ibp_fn, obs_fn = unwrap(tr[ibp["name"]]["fn"]), unwrap(tr[obs["name"]]["fn"])
        feat_fn = unwrap(tr[features["name"]]["fn"])
        shape = tuple(jnp.shape(obs["value"]))
        out = {
            "alpha": ibp_fn.alpha,
            "the IBP's beta": ibp_fn.beta,
            "the feature prior": (feat_fn.loc, feat_fn.scale),
            "the observed site's distribution": jnp.sum(obs_fn.log_prob(obs["value"])),
        }
        if isinstance(obs_fn, dist.Normal):
            out["the observed site's distribution"] = jnp.broadcast_to(obs_fn.loc, shape)
            out["noise"] = jnp.broadcast_to(obs_fn.scale, shape)
        offset = logit_offset(tr[obs["name"]], held[ibp["name"]], held[features["name"]])
        if offset is not None:  # a Bernoulli is its logits: their offset is all there is
            del out["the observed site's distribution"]
            out["offset"] = offset
        for name in held:
            if name not in (ibp["name"], features["name"]):
                out[f"the prior of {name!r}"] = tr[name]["fn"].log_prob(held[name])
        for other in names:
            out[f"the prior of {other!r}"] = tr[other]["fn"].log_prob(tr[other]["value"])
        return jax.tree.map(np.asarray, out)

    with jax.ensure_compile_time_eval():
        base = readings(hyper.trace({s["name"]: s["value"] for s in candidates}))
        for site in candidates:
            if site["fn"].support.is_discrete:
                read.reject(f"the hyper-parameter site {site['name']!r} must be continuous")
            if jnp.shape(hyper.transforms[hyper.names.index(site["name"])].inv(site["value"])) != (
                jnp.shape(site["value"])
            ):
                read.reject(
                    f"the hyper-parameter site {site['name']!r} must be elementwise "
                    "constrained (e.g. positive), not a simplex or matrix"
                )
            other = site["fn"].sample(jax.random.PRNGKey(1))
            values = {s["name"]: s["value"] for s in candidates} | {site["name"]: other}
            moved = readings(hyper.trace(values))
            changed = [
                what
                for what in base
                if what != f"the prior of {site['name']!r}"
                and not all(
                    np.allclose(a, b, rtol=1e-12, atol=0.0, equal_nan=True)
                    for a, b in zip(
                        jax.tree.leaves(base[what]), jax.tree.leaves(moved[what]), strict=True
                    )
                )
            ]
            bad = [
                w
                for w in changed
                if w not in ("alpha", "noise", "offset")
                and w not in {f"the prior of {n!r}" for n in names}
            ]
            if bad:
                read.reject(
                    f"the latent site {site['name']!r} sets {', '.join(bad)}; an engine of "
                    "feature models learns hyper-parameter sites that set only the observed "
                    "Normal's scale, the IBP's alpha, the offset of a Bernoulli's logits "
                    "(a bias) or another such site's prior"
                )
            for what, thing in (("noise", "noise scale"), ("offset", "logits' offset")):
                if what in changed and not _same_for_every_row(moved[what], held, ibp, features):
                    read.reject(
                        f"the {thing} set by {site['name']!r} must be the same for every row"
                    )
            hyper.sets_noise |= "noise" in changed
            hyper.sets_mass |= "alpha" in changed
            if "offset" in changed:
                hyper.offset_mask[hyper._coordinates(site["name"])] = True
            # start where features explain more (small noise, large mass): from there the
            # M-steps raise the noise to what the features leave; from the other side they stop
            # at the first level the few features born by then explain (D = 10, σ_o = 0.3: 0.86
            # and 7 of 21 features from the prior's median, 0.44 and 18 from its 10 % quantile)
            step = np.sum(np.asarray(other) - np.asarray(site["value"]))
            for what, small in (("noise", True), ("alpha", False)):
                if what in changed:
                    rises = np.sum(moved[what] - base[what]) * step > 0
                    low = rises == small
                    hyper.start_at(site["name"], START_QUANTILE if low else 1.0 - START_QUANTILE)
    return hyper


def _same_for_every_row(values, held, ibp, features):
    """Whether ``values`` ``(N, D)`` (the noise scale, or the logits' offset ``logits - Z @ A``
    read at the held ``Z`` and ``A``) is the same for every row, to the rounding of ``Z @ A``:
    ``(Z @ A + b) - Z @ A`` differs from ``b`` by a few ulps of ``Z @ A``, so a bias ``b`` of
    shape ``(D,)`` leaves rows that differ in their last bits."""
    z, a = held[ibp["name"]], held[features["name"]]
    return bool(np.all(np.abs(values - values[:1]) <= _rounding_of(z, a, values)))


def _rounding_of(z, a, values):
    """``(N, D)`` how far ``values`` read through ``logits - Z @ A`` may stray by rounding."""
    z, a = np.abs(np.asarray(z, np.float64)), np.abs(np.asarray(a, np.float64))
    return 1e-6 * (1.0 + z @ a + np.abs(values))


@dataclass(frozen=True, eq=False)
class FeatureModel:
    """What an engine needs to know about a latent feature model (see the module docstring).

    Prior parameters are host ``float64`` NumPy arrays; engines cast them to their dtype.

    :ivar likelihood: ``"linear_gaussian"``, ``"factor_analysis"`` or ``"generic"`` (any other
        observation distribution).
    :ivar feature_loc, feature_var: ``(D,)`` prior mean and variance of each feature entry.
    :ivar weight_loc, weight_var: scalar prior mean and variance of the weights (factor analysis).
    :ivar noise_var: ``(D,)`` observation noise variance (Gaussian likelihoods only; at the
        traced values of the hyper-parameter sites when there are some).
    :ivar hyper: the model's :class:`HyperSites` (``read_feature_model(hyper=True)``), or
        ``None`` when it has none.
    :ivar logit_offset: ``(D,)`` when the observed site is a ``Bernoulli`` with logits
        ``Z @ A + offset`` (the same for every row): the offset at the traced values of the
        hyper-parameter sites; else ``None``.
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
    obs_support: object = None
    engine: str = "this engine"
    hyper: HyperSites | None = None
    logit_offset: np.ndarray | None = None

    def check_observed(self, values, name):
        """Raise ``ValueError`` unless every row of ``values`` ``(n, D)`` is in the support of the
        observed site's distribution (e.g. non-negative integers for a ``Poisson``, 0 and 1 for a
        ``Bernoulli``); the message names ``name`` and the first bad row. Host-side."""
        support = self.obs_support
        if support is None or constraints.is_dependent(support):
            return
        arr = np.asarray(values)
        # rows against the traced parameters of the support, e.g. integer_interval(0, n)
        with jax.ensure_compile_time_eval():
            ok = np.asarray(support.check(arr[:, None, :]))
        ok = np.broadcast_to(ok, np.broadcast_shapes(ok.shape, arr[:, None, :].shape))
        ok = ok.all(axis=1)  # (n, D)
        if not ok.all():
            row = int(np.argmin(ok.all(axis=1)))
            col = int(np.argmin(ok[row]))
            value = float(arr[row, col])
            raise ValueError(
                f"{name} holds values outside the support of the observed site "
                f"{self.obs_site!r} ({support}) (first bad row: {row}, value {value!r} in column "
                f"{col})"
            )

    def row_log_likelihood(self, z, a, obs, w=None, hyper=None):
        """``log p(o | z, A[, w])`` of ONE observation through the model's own observed site.

        :func:`row_log_density` with ``Z`` = ``z[None]``, ``A`` = ``a``, the weights =
        ``w[None]`` and the hyper-parameter sites at ``hyper`` (a flat ``(P,)`` vector, see
        :class:`HyperSites`). ``z`` may be real-valued (a relaxation). Pure and differentiable
        in ``a``; traceable under ``jit``.

        :param z: ``(K,)``; :param a: ``(K, D)``; :param obs: ``(D,)``; :param w: ``(K,)``.
        :return: scalar.
        """
        values = {self.ibp_site: z[None], self.feature_site: a}
        if self.weight_site is not None:
            values[self.weight_site] = w[None]
        if hyper is not None:
            values.update(self.hyper.unflatten(hyper))
        return row_log_density(
            self.model,
            self.model_args,
            self.model_kwargs,
            values,
            obs_site=self.obs_site,
            obs=obs,
            rows_site=self.ibp_site,
            engine=f"{self.engine} (one row's likelihood)",
        )


def row_log_density(
    model, model_args, model_kwargs, values, *, obs_site, obs, rows_site, engine, hint=""
):
    """``log p(o | values)`` of ONE observation ``obs`` ``(D,)`` through the model's observed site.

    The model runs under ``handlers.substitute(data=values)`` and ``handlers.condition`` (the
    observed site ``obs_site`` = ``obs[None]``), through :func:`trace_model` (an error inside the
    model is re-raised as itself, with a note naming ``engine``); the observed site's log density
    is summed. ``values`` maps latent site names to values, the per-row sites (``rows_site``, the
    allocation ``Z``, and any other) given for one row (leading axis 1). Traceable under ``jit``
    and ``vmap``.

    :return: scalar.
    :raises ValueError: when the observed site does not take its number of rows from the rows of
        ``rows_site`` (with one row substituted, its distribution must have shape ``(1, D)``);
        ``hint`` ends the message.
    """
    model = handlers.condition(handlers.substitute(model, data=values), data={obs_site: obs[None]})
    site = trace_model(model, model_args, model_kwargs, engine)[obs_site]
    shape = site["fn"].batch_shape + site["fn"].event_shape
    if shape != (1, *jnp.shape(obs)):
        raise ValueError(
            f"the observed site {obs_site!r} must take its number of rows from the rows of "
            f"{rows_site!r} (e.g. a mean written as Z @ A); with one row substituted its "
            f"distribution has shape {shape}, expected (1, {jnp.shape(obs)[0]}){hint}"
        )
    return jnp.sum(site["fn"].log_prob(site["value"]))


def read_feature_model(
    model, model_args=(), model_kwargs=None, *, engine="this engine", hyper=False
):
    """Trace ``model(*model_args, **model_kwargs)`` once and locate its feature-model sites.

    :param model: a NumPyro model function.
    :param str engine: the engine's name, used in error messages.
    :param bool hyper: accept hyper-parameter sites (the engine learns them; see
        :class:`HyperSites`), else refuse them.
    :return: a :class:`FeatureModel`.
    :raises ValueError: naming the expected site and listing the sites found.
    """
    model_kwargs = dict(model_kwargs or {})
    read = TracedSites(model, model_args, model_kwargs, engine)
    sites, fail = read.sites, read.fail
    ibp = read.the_one(RecursiveIBP)
    fn = unwrap(ibp["fn"])
    if fn.batch_shape != ():
        fail(f"a RecursiveIBP site with scalar alpha and beta (got batch shape {fn.batch_shape})")
    num_rows, max_features = fn.num_rows, fn.max_features

    rest = [s for s in sites if s is not ibp]
    obs = observed_site(rest, num_rows, "the RecursiveIBP site", fail)
    obs_shape = tuple(jnp.shape(obs["value"]))
    dim = obs_shape[1]
    obs_base = unwrap(obs["fn"])
    if obs_base.event_shape != ():
        read.reject(
            f"the observed site {obs['name']!r} must factorise over its last axis (the D={dim} "
            f"output dimensions) given the features, but its distribution "
            f"{type(obs_base).__name__} has event shape {obs_base.event_shape} and couples "
            "them; use a univariate distribution, wrapped with .to_event() if needed"
        )

    latent = [s for s in rest if s is not obs]
    features = feature_site(latent, max_features, dim, fail)
    weights = [
        s for s in sites_of(latent, dist.Normal, (num_rows, max_features)) if s is not features
    ]
    others = [s for s in latent if s is not features and all(s is not w for w in weights)]
    if (others and not hyper) or len(weights) > 1:
        fail(
            "only the IBP, feature, optional (N, K) Normal weight and observed sites "
            f"(unexpected latent sites: {[s['name'] for s in others + weights[1:]]}; "
            "hyper-parameters such as the noise scale, the IBP's mass or a Bernoulli's bias "
            "are learned by RIBPFilter(model, feature_update='memoized'); or make "
            "them model arguments with fixed values and compare values "
            "by the held-out score of a validation split, see "
            "numpyro_bnp.infer.core.streaming.learning_curve)"
        )
    weights = weights[0] if weights else None
    hyper_sites = None
    if others:
        held = {s["name"]: s["value"] for s in (ibp, features, weights) if s is not None}
        hyper_sites = _read_hyper_sites(
            read, model, model_args, model_kwargs, others, held, ibp, obs, features
        )

    feature_loc, feature_var = normal_params(features, (max_features, dim))
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
        site_summary=read.summary,
        obs_support=obs_base.support,
        engine=engine,
        hyper=hyper_sites,
    )
    if weights is not None:
        w_loc, w_var = normal_params(weights, (num_rows, max_features))
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
    noise_var = linear_gaussian_noise_var(obs, z, features["value"])
    likelihood = "generic"
    if noise_var is not None:
        likelihood = "linear_gaussian" if weights is None else "factor_analysis"
        spec["noise_var"] = noise_var
    elif weights is None:
        spec["logit_offset"] = _linear_logit_offset(
            model, model_args, model_kwargs, [*latent, ibp], obs, ibp, features, engine
        )
    spec["likelihood"] = likelihood
    return FeatureModel(**spec)


def _linear_logit_offset(model, model_args, model_kwargs, latent, obs, ibp, features, engine):
    """``(D,)`` the offset of a ``Bernoulli``'s logits ``Z @ A + offset``, or ``None``.

    The offset read at the traced ``Z, A`` must be the same for every row, and the same again
    at ``1 - Z`` and ``2 A + 1`` (every other latent site held): the logits are then taken to
    be linear in ``Z @ A``.
    """
    z, a = np.asarray(ibp["value"], np.float64), np.asarray(features["value"], np.float64)
    with jax.ensure_compile_time_eval():
        first = logit_offset(obs, z, a)
        if first is None:
            return None
        first = np.asarray(first, np.float64)
        held = {s["name"]: s["value"] for s in latent}
        moved = {ibp["name"]: 1.0 - z, features["name"]: 2.0 * a + 1.0}
        tr = trace_model(
            handlers.substitute(model, data={**held, **moved}),
            model_args,
            model_kwargs,
            f"{engine} (reading the model)",
        )
        second = logit_offset(tr[obs["name"]], 1.0 - z, 2.0 * a + 1.0)
    if second is None:
        return None
    second = np.asarray(second, np.float64)
    scale = _rounding_of(1.0 - z, 2.0 * a + 1.0, first)
    if np.all(np.abs(first - first[:1]) <= scale) and np.all(np.abs(second - first) <= scale):
        return first[0].copy()
    return None
