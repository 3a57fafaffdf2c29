"""Read a user's NumPyro mixture model once: the sites a mixture engine needs.

Part of the model contract of :mod:`numpyro_bnp.infer.core.model` (``docs/model_contract.md``,
section "Mixture models"): sites are found by the type of their distribution and checked
numerically on one trace (:class:`~numpyro_bnp.infer.core.model.TracedSites`), never by their names.
A mixture model needs

* the **partition site** (an NGGP, or the truncated stick-breaking of a Dirichlet process),
  read with its parameters by :mod:`numpyro_bnp.infer.mixtures.partition`;
* the **component sites**: every other latent sample site, in a ``numpyro.plate`` over the ``K``
  clusters (batch shape ``(K,)``; declare the other axes an event with ``.to_event``), one prior
  for all clusters;
* the **observed site**: the one observed site, or, traced without data, the last sample site;
  its value is ``(N, D)`` and its distribution's parameter is the component of each row's
  cluster, e.g. ``Multinomial(lengths, theta[z])`` or ``Normal(mu[z], s).to_event(1)``, with or
  without a plate over the rows.

The components and the likelihood must be one of the conjugate pairs of
:mod:`numpyro_bnp.families` (``docs/families.md``), unless the engine reads with
``conjugate=False`` (the marginal Gibbs sampler, which samples other components with auxiliary
ones: :func:`_any_components` checks them); the reader builds the family of ONE cluster's prior
with the family's ``from_prior``:

* ``theta ~ Dirichlet(λ)``, observations ``Multinomial(n_i, theta[z])`` (word-count documents
  of any lengths ``n_i``): :class:`~numpyro_bnp.families.DirichletMultinomial`;
* ``mu ~ Normal(m0, s0).expand([D]).to_event(1)`` or ``MultivariateNormal(m0, S0)``,
  observations ``Normal(mu[z], s).to_event(1)`` or ``MultivariateNormal(mu[z], Σ)`` with known
  noise ``s`` / ``Σ``: :class:`~numpyro_bnp.families.NormalNormal`;
* ``lam ~ Gamma(a0, b0).expand([D]).to_event(1)``, ``mu ~ Normal(m0, 1 / sqrt(κ0 lam))
  .to_event(1)``, observations ``Normal(mu[z], 1 / sqrt(lam[z])).to_event(1)``:
  :class:`~numpyro_bnp.families.NormalGamma`;
* ``Lambda ~ Wishart(ν0, scale_matrix=W0)``, ``mu ~ MultivariateNormal(m0, precision_matrix=κ0
  Lambda)``, observations ``MultivariateNormal(mu[z], precision_matrix=Lambda[z])``:
  :class:`~numpyro_bnp.families.NormalWishart`;
* ``rate ~ Gamma(a, b).expand([D]).to_event(1)``, observations ``Poisson(rate[z]).to_event(1)``:
  :class:`~numpyro_bnp.families.GammaPoisson`;
* ``p ~ Beta(a, b).expand([D]).to_event(1)``, observations ``Bernoulli(p[z]).to_event(1)``:
  :class:`~numpyro_bnp.families.BetaBernoulli`.

The Gaussian parameters may be given in any of NumPyro's equivalent forms (``precision_matrix``,
``covariance_matrix``, ``scale_tril``): they are compared numerically. Multinomial documents may
have different lengths (each document's total count is its own; ``obs_kind = "documents"``).

The reader does not draw from the model's priors (NumPyro's urn and samplers would compile for
every shape): the partition site is traced at fixed stand-in labels, first all 0 (to find
``K``: the components' plate for an NGGP, the labels' number of categories for stick-breaking),
then ``(K - 1 - n) mod K`` for row ``n``, which give neighbouring rows different clusters and
row 0 the last one, so that an observed parameter that does not follow the labels (``theta[0]``
for every row, ``mu[z] + 1``) differs from the component indexed by the labels and is refused;
the components and the sticks take fixed points of their supports.

As a block of :class:`numpyro.infer.Gibbs` the model is conditioned on the sites of the other
blocks (``model_kwargs["_gibbs_sites"]``): those sites are set aside, and the components' prior,
the noise and the NGGP's parameters may depend on them (:meth:`MixtureModel.numbers` reads them
at any values, inside a compiled step).
"""

from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to
from numpyro.infer.gibbs import GIBBS_SITES_KWARG

from numpyro_bnp._checks import is_concrete, observed_array
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.families import (
    BetaBernoulli,
    ConjugateFamily,
    DirichletMultinomial,
    GammaPoisson,
    MeanPrecision,
    NormalGamma,
    NormalNormal,
    NormalWishart,
)
from numpyro_bnp.infer.core.model import TracedSites, site_named, sites_of, trace_model, unwrap
from numpyro_bnp.infer.mixtures.partition import (
    _CATEGORICAL,
    PARTITIONS,
    _first_bad_row,
    _hyper_sites,
    _nggp_params,
    _partition_kinds,
    _roles,
    _same_for_all,
    _stick_breaking,
    _values,
)

__all__ = [
    "PARTITIONS",
    "SUPPORTED_PAIRS",
    "MixtureModel",
    "MixtureNumbers",
    "read_mixture_model",
]

#: the conjugate pairs a mixture engine takes (components; observations -> family)
SUPPORTED_PAIRS = (
    "Dirichlet components with Multinomial observations (DirichletMultinomial)",
    "Normal or MultivariateNormal means with Normal or MultivariateNormal observations of known "
    "noise (NormalNormal)",
    "Gamma precisions and Normal means of scale 1/sqrt(kappa0 * precision) with Normal "
    "observations of scale 1/sqrt(precision) (NormalGamma)",
    "Wishart precision matrices and MultivariateNormal means of precision kappa0 * precision "
    "with MultivariateNormal observations of that precision (NormalWishart)",
    "Gamma rates with Poisson observations (GammaPoisson)",
    "Beta probabilities with Bernoulli observations (BetaBernoulli)",
)

_MULTINOMIAL = (dist.MultinomialProbs, dist.MultinomialLogits)
_BERNOULLI = (dist.BernoulliProbs, dist.BernoulliLogits)
_GAUSSIAN = (dist.Normal, dist.MultivariateNormal)


@dataclass(frozen=True, eq=False)
class MixtureModel:
    """What a mixture engine needs to know about a mixture model (module docstring).

    :ivar partition_site: name of the partition site (labels ``(N,)``): the NGGP site, or the
        ``Categorical`` labels site of a stick-breaking model.
    :ivar mass, sigma, tau: the NGGP's parameters as host floats (Tank, Foti & Fox 2015,
        Eq. 4: mass ``a``, discount ``σ``, tilting ``τ``; ``σ = 0`` is the Dirichlet process);
        for stick-breaking the Dirichlet process's: ``mass = α`` of the sticks' ``Beta(1, α)``,
        ``sigma = 0``, ``tau = 1``.
    :ivar num_rows: ``N`` of the trace; :ivar max_clusters: ``K``, the clusters plate's size
        (the truncation ``T`` for stick-breaking).
    :ivar component_sites: the component sites; for the Normal–Gamma and Normal–Wishart pairs
        ``(precision site, mean site)``, e.g. ``("Lambda", "mu")``; else one site.
    :ivar family: ONE cluster's conjugate prior (a :class:`~numpyro_bnp.families.ConjugateFamily`
        in the traced dtype; engines cast it with ``jax.tree.map``); ``None`` for components
        that are not a conjugate pair (``read_mixture_model(conjugate=False)``).
    :ivar obs_kind: ``"documents"`` (Multinomial word counts, rows ``(V,)`` count vectors, each
        document's total count its own) or ``"dense"``.
    :ivar dim: ``D`` (the vocabulary size ``V`` for documents).
    :ivar obs_support: the support of the observed distribution (as traced).
    :ivar partition_kind: ``"nggp"`` or ``"stick_breaking"`` (:data:`PARTITIONS`).
    :ivar sticks_site: the name of the sticks site ``(T - 1,)`` of a stick-breaking model, else
        ``None``.
    :ivar hyper_sites: the NGGP's hyper-parameter sites (``read_mixture_model(hyper=True)``):
        scalar latent sites that set only the NGGP's mass, sigma or tau, or the prior of another
        such site; their values at the trace are in ``held``.
    :ivar conjugate_mass: the hyper-parameter site that is the NGGP's mass itself, has a
        ``Gamma`` prior and sets nothing else (its update is conjugate), else ``None``.
    :ivar held: the traced value of every latent site (the stand-ins of the reader), which
        :meth:`numbers` holds while it reads the model at other values.
    :ivar given: the sites conditioned by the other blocks of a ``numpyro.infer.Gibbs``.
    :ivar component_supports: ``{component site: its support}``.
    """

    model: object
    model_args: tuple
    model_kwargs: dict
    partition_site: str
    mass: float
    sigma: float
    tau: float
    num_rows: int
    max_clusters: int
    component_sites: tuple
    obs_site: str
    family: ConjugateFamily
    obs_kind: str
    dim: int
    site_summary: tuple = field(default=())
    obs_support: object = None
    engine: str = "this engine"
    partition_kind: str = "nggp"
    sticks_site: str | None = None
    hyper_sites: tuple = ()
    conjugate_mass: str | None = None
    held: dict | None = None
    given: tuple = ()
    component_supports: dict | None = None

    def numbers(self, values=None, model_args=None, model_kwargs=None):
        """The NGGP's parameters, the hyper-parameter sites' priors and the family of the model
        with its hyper-parameter sites at ``values`` (``{site: scalar}``, the rest of
        :attr:`hyper_sites` at their traced values) and every other latent site held
        (:attr:`held`): a :class:`MixtureNumbers`.

        ``model_args`` / ``model_kwargs`` default to those of the read; as a block of
        :class:`numpyro.infer.Gibbs` they carry the other blocks' values, on which the NGGP's
        parameters, the components' prior and the noise may depend. Pure and traceable.
        """
        args = self.model_args if model_args is None else model_args
        kwargs = self.model_kwargs if model_kwargs is None else model_kwargs
        data = {**self.held, **(values or {})}
        model = handlers.substitute(self.model, data=data)
        # values that do not depend on the arguments' tracers are numbers, as when read (a
        # model may check them on the host, e.g. its labels against its capacity)
        with jax.ensure_compile_time_eval():
            tr = trace_model(model, args, kwargs, f"{self.engine} (reading its numbers)")
        nggp = unwrap(tr[self.partition_site]["fn"])
        priors = {name: tr[name]["fn"] for name in self.hyper_sites}
        dtype = jnp.result_type(nggp.mass)
        log_prior = jnp.zeros((), dtype)
        for name, prior in priors.items():
            log_prior = log_prior + jnp.sum(prior.log_prob(data[name]))
        family = None
        if self.family is not None:
            components = [tr[name] for name in self.component_sites]
            obs_fn = unwrap(tr[self.obs_site]["fn"])
            family = _family_of(
                type(self.family), components, obs_fn, self.num_rows, self.family.dtype
            )
        return MixtureNumbers(nggp.mass, nggp.sigma, nggp.tau, log_prior, priors, family)

    def check_observed(self, values, name):
        """Raise ``ValueError`` naming ``name`` unless ``values`` ``(n, D)`` are finite rows in
        the observed distribution's support: non-negative whole counts for documents (of any
        length) and Poisson, 0 and 1 for Bernoulli; the message names the first bad row.
        Host-side."""
        arr = observed_array(values, name, dtype=np.float64, dim=self.dim)
        support = self.obs_support
        if self.obs_kind == "documents":
            support = constraints.nonnegative_integer  # any length: each document's own
        if support is None or constraints.is_dependent(support):
            return
        with jax.ensure_compile_time_eval():
            ok = np.asarray(support.check(arr))
        ok = np.broadcast_to(ok if ok.ndim == 2 else ok[:, None], arr.shape)  # (n, D)
        if not ok.all():
            row = int(np.argmin(ok.all(axis=1)))
            col = int(np.argmin(ok[row]))
            what = "non-negative integer word counts" if self.obs_kind == "documents" else support
            value = float(arr[row, col])
            raise ValueError(
                f"{name} holds values outside the support of the observed site "
                f"{self.obs_site!r} ({what}) (first bad row: {row}, value {value!r} in column "
                f"{col})"
            )

    def component_values(self, values):
        """The model's component sites set to ``values``, a structure of the family's ``sample``
        or ``mean`` (leading axes ``(..., K)``): ``{site: array}``, e.g. for
        ``numpyro.infer.Predictive(model, posterior_samples=...)`` together with the labels.

        :class:`~numpyro_bnp.families.MeanPrecision` goes to the precision and mean sites; an
        array to the one component site.
        """
        if isinstance(values, dict):  # already by site (components that are not conjugate)
            return dict(values)
        if isinstance(values, MeanPrecision):
            precision_site, mean_site = self.component_sites
            return {precision_site: values.precision, mean_site: values.loc}
        (site,) = self.component_sites
        return {site: values}

    def component_terms(self, values, labels, rows=None, model_args=None, model_kwargs=None):
        """``(log_prior (K,), log_lik (N,))`` of components that need not be conjugate: the
        log prior ``log H_0`` of each slot's components at ``values`` (``{component site:
        (K, ...)}``) and each row's ``log f(x_n | θ_{labels_n})`` at ``rows`` ``(N, D)`` (by
        default the model's data; without data, zeros), ``labels`` ``(N,)`` int32.

        The model is traced with the components, the labels and the other latent sites held
        (:attr:`held`); ``model_args`` / ``model_kwargs`` as for :meth:`numbers`. Pure and
        traceable."""
        args = self.model_args if model_args is None else model_args
        kwargs = self.model_kwargs if model_kwargs is None else model_kwargs
        data = {**self.held, **values, self.partition_site: labels}
        model = handlers.substitute(self.model, data=data)
        with jax.ensure_compile_time_eval():
            tr = trace_model(model, args, kwargs, f"{self.engine} (reading its components)")
        log_prior = sum(tr[name]["fn"].log_prob(tr[name]["value"]) for name in self.component_sites)
        obs = tr[self.obs_site]
        if rows is None and not obs["is_observed"]:
            return log_prior, jnp.zeros(self.num_rows, log_prior.dtype)
        x = obs["value"] if rows is None else rows
        return log_prior, _row_log_density(obs["fn"], x, self.num_rows)

    def draw_components(self, key, model_args=None, model_kwargs=None):
        """``{component site: (K, ...)}``: each slot's components drawn from their prior
        ``H_0`` (ancestrally, in the model's order), the other latent sites held."""
        args = self.model_args if model_args is None else model_args
        kwargs = self.model_kwargs if model_kwargs is None else model_kwargs
        held = {k: v for k, v in self.held.items() if k not in self.component_sites}
        model = handlers.seed(handlers.substitute(self.model, data=held), key)
        with jax.ensure_compile_time_eval():  # (as in numbers: a model's host-side checks)
            tr = trace_model(model, args, kwargs, f"{self.engine} (drawing components)", seed=False)
        return {name: tr[name]["value"] for name in self.component_sites}


class MixtureNumbers(NamedTuple):
    """The numbers of a mixture model at given site values (:meth:`MixtureModel.numbers`).

    :ivar mass, sigma, tau: the NGGP's parameters (scalars).
    :ivar log_prior: ``Σ log p(h)`` of the hyper-parameter sites at the values.
    :ivar priors: ``{hyper-parameter site: its distribution}`` at the values.
    :ivar family: the components' conjugate family (``None`` for components that are not a
        conjugate pair).
    """

    mass: jnp.ndarray
    sigma: jnp.ndarray
    tau: jnp.ndarray
    log_prior: jnp.ndarray
    priors: dict
    family: ConjugateFamily


def _stand_in(labels):
    """A ``substitute_fn`` for the reader's trace: every unobserved NGGP site and
    ``Categorical`` site of shape ``(N,)`` takes the labels ``labels(shape)``; every other
    unobserved continuous site a fixed point of its support (a standard normal draw of NumPy's
    seed 0, mapped by ``biject_to(support)``), which costs a few array operations instead of
    compiling NumPyro's samplers; other discrete sites are drawn."""
    noise = np.random.default_rng(0)

    def substitute(site):
        fn, base = site["fn"], unwrap(site["fn"])
        shape = tuple(fn.shape())
        if isinstance(base, NGGP) or (isinstance(base, _CATEGORICAL) and len(shape) == 1):
            return labels(shape)
        if fn.support.is_discrete:
            return None
        try:
            transform = biject_to(fn.support)
        except NotImplementedError:
            return None
        dtype = jnp.result_type(*jax.tree.leaves(fn), float)  # the parameters' float dtype
        # matrices (a Wishart's precisions) near the identity: a standard normal point of the
        # unconstrained space made precision matrices at D >= 10 too ill-conditioned for the
        # positive-definite check of a MultivariateNormal in float32
        spread = 0.1 if len(fn.event_shape) >= 2 else 1.0
        shape = transform.inverse_shape(shape)
        value = transform(jnp.asarray(spread * noise.normal(size=shape), dtype))
        if fn.support is constraints.simplex:
            # stick-breaking rounds: in float32 over a large vocabulary the sum drifts past the
            # simplex check of a Multinomial (1e-6); normalising brings it back to one rounding
            value = value / value.sum(-1, keepdims=True)
        return value

    return substitute


def _components(read, latent, num_clusters, learns_hyper=False):
    """Check every latent site is a component in the clusters plate (batch shape ``(K,)``)."""
    if not latent:
        read.fail(
            "component sites in a numpyro.plate over the clusters (batch shape (K,), K = "
            "max_clusters) besides the partition and the observed site"
        )
    for s in latent:
        batch = tuple(s["fn"].batch_shape)
        if batch != (num_clusters,):
            hint = (
                " (outside the clusters plate; a prior on the partition's parameters or a "
                "shared noise level is not supported)"
                if batch == ()
                else " (declare the axes after the clusters an event with .to_event)"
            )
            if learns_hyper:
                hint = (
                    " (outside the clusters plate: sample it in another block of "
                    "numpyro.infer.Gibbs, e.g. with NUTS)"
                    if batch == ()
                    else hint
                )
            read.fail(
                f"every latent site other than the partition to be a component in a "
                f"numpyro.plate over the K={num_clusters} clusters, of batch shape "
                f"({num_clusters},); {s['name']!r} has batch shape {batch}{hint}"
            )


def _follows(read, obs, what, param, expected, written, why):
    """Fail unless the observed site's parameter ``what`` equals ``expected`` at the traced
    values (``written``: the expected form, e.g. ``theta[z]``)."""
    row = _first_bad_row(param, expected)
    if row is None:
        return
    found = (
        f"found {what} of shape {np.shape(param)}, not {np.shape(expected)}"
        if row < 0
        else f"found {what} that differ from it in row {row}"
    )
    read.fail(f"the observed site {obs['name']!r} to have {what} = {written} ({why}), {found}")


def _from_prior(read, sites, build, *args, **kwargs):
    """``build(*args, **kwargs)``; the family's error becomes the reader's, naming the sites."""
    try:
        return build(*args, **kwargs)
    except (TypeError, ValueError) as err:
        read.reject(f"the prior of the component sites {sites} is not one cluster's prior: {err}")


def _pick(components, *kinds):
    """The component sites whose distributions are ``kinds`` (in that order), or ``None``."""
    if len(components) != len(kinds):
        return None
    order = []
    for kind in kinds:
        match = [s for s in sites_of(components, kind) if s not in order]
        if not match:
            return None
        order.append(match[0])
    return order


def _conjugate(read, partition, components, obs):
    """``(family, component_sites, obs_kind)`` of the conjugate pair of the model."""
    base = unwrap(obs["fn"])
    z = np.asarray(partition["value"])
    labels = partition["name"]
    dtype = np.asarray(components[0]["value"]).dtype

    def follows(what, param, site, expected=None, written=None):
        expected = _values(site)[z] if expected is None else expected
        written = written or f"{site['name']}[{labels}]"
        why = f"the component {site['name']!r} of each row's cluster, by the labels of {labels!r}"
        _follows(read, obs, what, param, expected, written, why)

    if isinstance(base, _MULTINOMIAL) and (found := _pick(components, dist.Dirichlet)):
        (theta,) = found
        follows("probs", base.probs, theta)
        family = _from_prior(read, [theta["name"]], DirichletMultinomial.from_prior, theta["fn"])
        return family, (theta["name"],), "documents"
    if isinstance(base, dist.Poisson) and (found := _pick(components, dist.Gamma)):
        (rate,) = found
        follows("rate", base.rate, rate)
        return (
            _from_prior(read, [rate["name"]], GammaPoisson.from_prior, rate["fn"]),
            (rate["name"],),
            "dense",
        )
    if isinstance(base, _BERNOULLI) and (found := _pick(components, dist.Beta)):
        (p,) = found
        follows("probs", base.probs, p)
        return (
            _from_prior(read, [p["name"]], BetaBernoulli.from_prior, p["fn"]),
            (p["name"],),
            "dense",
        )
    if isinstance(base, _GAUSSIAN) and (found := _pick(components, _GAUSSIAN)):
        (mu,) = found
        follows("loc", base.loc, mu)
        return _known_noise(read, obs, base, mu, dtype), (mu["name"],), "dense"
    if isinstance(base, dist.Normal) and (found := _pick(components, dist.Gamma, dist.Normal)):
        lam, mu = found
        follows("loc", base.loc, mu)
        written = f"1 / sqrt({lam['name']}[{labels}])"
        follows("scale", base.scale, lam, 1 / np.sqrt(_values(lam)[z]), written)
        return _normal_gamma(read, lam, mu, dtype), (lam["name"], mu["name"]), "dense"
    if isinstance(base, dist.MultivariateNormal) and (
        found := _pick(components, dist.Wishart, dist.MultivariateNormal)
    ):
        prec, mu = found
        follows("loc", base.loc, mu)
        follows("precision", base.precision_matrix, prec)
        return _normal_wishart(read, prec, mu, dtype), (prec["name"], mu["name"]), "dense"
    kinds = ", ".join(f"{s['name']}: {type(unwrap(s['fn'])).__name__}" for s in components)
    read.fail(
        "a conjugate pair of components and likelihood, one of: "
        + "; ".join(SUPPORTED_PAIRS)
        + f"; found the components {{{kinds}}} with {type(base).__name__} observations at "
        f"{obs['name']!r}"
    )


def _known_noise(read, obs, base, mu, dtype):
    """:class:`NormalNormal` with the observed site's noise, one for all rows."""
    rows = np.shape(obs["value"])
    if isinstance(base, dist.Normal):
        noise = np.broadcast_to(np.asarray(base.scale, np.float64), rows)
        kind = "noise_scale"
    else:
        noise = np.broadcast_to(np.asarray(base.covariance_matrix, np.float64), (*rows, rows[1]))
        kind = "noise_covariance"
    if not _same_for_all(noise):
        read.fail(
            f"a known noise at the observed site {obs['name']!r}, the same for all rows (the "
            f"Normal-Normal pair of the component {mu['name']!r}); its {kind} varies over rows"
        )
    return _from_prior(read, [mu["name"]], _family_of, NormalNormal, [mu], base, rows[0], dtype)


def _mean_prior(read, mu, num_clusters, dim, form):
    """The prior mean ``m0`` ``(D,)`` of the mean site ``mu``, the same for all clusters."""
    loc = np.broadcast_to(np.asarray(unwrap(mu["fn"]).loc, np.float64), (num_clusters, dim))
    if not _same_for_all(loc):
        read.fail(f"the mean site {mu['name']!r} to have one prior mean for all clusters ({form})")
    return loc[0]


def _normal_gamma(read, lam, mu, dtype):
    """:class:`NormalGamma` of ``lam ~ Gamma`` and ``mu ~ Normal(m0, 1/sqrt(kappa0 lam))``."""
    precision = _values(lam)
    num_clusters, dim = precision.shape
    form = f"Normal(m0, 1 / sqrt(kappa0 * {lam['name']})), the Normal-Gamma prior"
    scale = np.broadcast_to(np.asarray(unwrap(mu["fn"]).scale, np.float64), precision.shape)
    kappa = 1 / (scale**2 * precision)
    if not (np.isfinite(kappa).all() and _same_for_all(kappa)):
        read.fail(f"the mean site {mu['name']!r} to be {form} with one kappa0 for all clusters")
    _mean_prior(read, mu, num_clusters, dim, form)
    sites = [lam["name"], mu["name"]]
    return _from_prior(read, sites, _family_of, NormalGamma, [lam, mu], None, None, dtype)


def _normal_wishart(read, prec, mu, dtype):
    """:class:`NormalWishart` of ``Lambda ~ Wishart`` and ``mu ~ MVN(m0, (kappa0 Lambda)⁻¹)``."""
    precision = _values(prec)
    num_clusters, dim, _ = precision.shape
    form = f"MultivariateNormal(m0, precision kappa0 * {prec['name']}), the Normal-Wishart prior"
    mean_precision = np.broadcast_to(
        np.asarray(unwrap(mu["fn"]).precision_matrix, np.float64), precision.shape
    )
    kappa = np.trace(mean_precision, axis1=-2, axis2=-1) / np.trace(precision, axis1=-2, axis2=-1)
    proportional = _first_bad_row(mean_precision, kappa[:, None, None] * precision) is None
    if not (proportional and _same_for_all(kappa) and kappa[0] > 0):
        read.fail(f"the mean site {mu['name']!r} to be {form} with one kappa0 > 0 for all clusters")
    _mean_prior(read, mu, num_clusters, dim, form)
    sites = [prec["name"], mu["name"]]
    return _from_prior(read, sites, _family_of, NormalWishart, [prec, mu], None, None, dtype)


def _family_of(kind, components, obs_fn, num_rows, dtype):
    """The conjugate family ``kind`` of the component sites ``components`` (site dicts: their
    distributions at their values) and the unwrapped observed distribution ``obs_fn`` of
    ``num_rows`` rows, in ``dtype``: the known noise of the first row, the Normal-Gamma and
    Normal-Wishart ``kappa0`` and ``m0`` of the first cluster (the reader checks first that all
    rows and clusters agree). On concrete values in float64 NumPy, then cast; traceable (a
    Gibbs block reads the family of the model conditioned on the other blocks' sites)."""
    leaves = [components[0]["value"], *jax.tree.leaves(unwrap(components[-1]["fn"]))]
    if obs_fn is not None:
        leaves += jax.tree.leaves(obs_fn)
    xp, real = (np, np.float64) if is_concrete(*leaves) else (jnp, dtype)

    def first(value, shape):  # the first row / cluster of a parameter broadcast to ``shape``
        return xp.asarray(xp.broadcast_to(xp.asarray(value, real), shape)[0], dtype)

    if kind in (DirichletMultinomial, GammaPoisson, BetaBernoulli):
        return kind.from_prior(components[0]["fn"])
    if kind is NormalNormal:
        (mu,) = components
        dim = mu["fn"].event_shape[-1]
        if isinstance(obs_fn, dist.Normal):
            return kind.from_prior(mu["fn"], noise_scale=first(obs_fn.scale, (num_rows, dim)))
        cov = first(obs_fn.covariance_matrix, (num_rows, dim, dim))
        return kind.from_prior(mu["fn"], noise_covariance=cov)
    prec, mu = components
    precision = xp.asarray(prec["value"], real)
    mean = unwrap(mu["fn"])
    loc = first(mean.loc, precision.shape[:2])
    if kind is NormalGamma:
        kappa = 1 / (
            xp.broadcast_to(xp.asarray(mean.scale, real), precision.shape) ** 2 * precision
        )
        return kind.from_prior(prec["fn"], loc=loc, kappa=xp.asarray(kappa[0], dtype))
    mean_precision = xp.broadcast_to(xp.asarray(mean.precision_matrix, real), precision.shape)
    kappa = xp.trace(mean_precision[0]) / xp.trace(precision[0])
    return kind.from_prior(prec["fn"], loc=loc, kappa=xp.asarray(kappa, dtype))


def _row_log_density(fn, x, num_rows):
    """``(N,)`` the observed distribution ``fn``'s log density of each row of ``x`` (its axes
    after the rows summed)."""
    lp = fn.log_prob(x)
    return jnp.reshape(lp, (num_rows, -1)).sum(-1)


def _any_components(read, partition, latent, obs, trace, spread):
    """The component sites of a mixture whose components need not be conjugate: each has a
    continuous support with a bijection to the real line (the kernel moves them there), and
    the observed site's log density has one term per row that reads the row's own cluster
    only: at labels that move the odd rows to the next cluster, the even rows' terms are
    unchanged and some odd row's changes; renumbering the clusters together with their
    components changes no term."""
    names = tuple(s["name"] for s in latent)
    for s in latent:
        support = s["fn"].support
        try:
            ok = not support.is_discrete and biject_to(support) is not None
        except NotImplementedError:
            ok = False
        if not ok:
            read.fail(
                f"components with continuous supports that map to the real line; "
                f"{s['name']!r} has support {support}"
            )
    num_rows = np.shape(obs["value"])[0]
    lp = np.asarray(obs["fn"].log_prob(obs["value"]))
    if lp.ndim == 0 or lp.shape[0] != num_rows:
        read.fail(
            f"the observed site {obs['name']!r} to have one log-density term per row (batch "
            f"shape (N,) = ({num_rows},), the row's other axes an event or a batch after it); "
            f"its log density has shape {lp.shape}"
        )
    num_clusters = int(np.shape(latent[0]["value"])[0])
    if num_clusters < 2 or num_rows < 2:
        return names
    base = spread((num_rows,))
    moved = np.where(np.arange(num_rows) % 2 == 1, (base + 1) % num_clusters, base)
    again = trace(lambda shape: np.broadcast_to(moved, shape).astype(np.int32))
    at_base = np.asarray(_row_log_density(obs["fn"], obs["value"], num_rows))
    fn = site_named(again.sites, obs["name"])["fn"]
    at_moved = np.asarray(_row_log_density(fn, obs["value"], num_rows))
    even, odd = slice(0, None, 2), slice(1, None, 2)
    what = f"theta[{partition['name']}]"
    if not np.allclose(at_base[even], at_moved[even], rtol=1e-5, atol=1e-5):
        read.fail(
            f"the observed site {obs['name']!r} to read each row's own cluster only "
            f"({what}, one term per row): the log density of a row changed when other rows "
            "changed clusters"
        )
    if np.allclose(at_base[odd], at_moved[odd], rtol=0, atol=0):
        read.fail(
            f"the observed site {obs['name']!r} to read each row's component by its label "
            f"({what}): no row's log density changed when its label changed"
        )
    # relabelled: slot k's components moved to slot k + 1, every label with them
    shifted = {s["name"]: np.roll(np.asarray(s["value"]), 1, axis=0) for s in latent}
    again = trace(
        lambda shape: np.broadcast_to((base + 1) % num_clusters, shape).astype(np.int32), shifted
    )
    fn = site_named(again.sites, obs["name"])["fn"]
    at_shifted = np.asarray(_row_log_density(fn, obs["value"], num_rows))
    if not np.allclose(at_base, at_shifted, rtol=1e-5, atol=1e-5):
        read.fail(
            f"the observed site {obs['name']!r} to read each row's component by its label "
            f"({what}): the log density changed when the clusters were renumbered (a component "
            "read by a fixed index?)"
        )
    return names


def read_mixture_model(
    model,
    model_args=(),
    model_kwargs=None,
    engine="this engine",
    *,
    partitions=("nggp",),
    hyper=False,
    conjugate=True,
):
    """Trace ``model(*model_args, **model_kwargs)`` and locate its mixture-model sites.

    :param model: a NumPyro model function (e.g.
        :func:`numpyro_bnp.models.nggp_gaussian_mixture`, or one of your own: module docstring).
    :param str engine: the engine's name, used in error messages.
    :param tuple partitions: the partition kinds the engine takes, keys of :data:`PARTITIONS`:
        ``("nggp",)`` (the NGGP engines) or ``("nggp", "stick_breaking")``.
    :param bool hyper: whether the engine learns the NGGP's hyper-parameter sites
        (:mod:`numpyro_bnp.infer.mixtures.partition`): scalar latent sites that set only the
        NGGP's mass, sigma or tau.
    :param bool conjugate: whether the components must be a conjugate pair (the default);
        ``False`` takes any components and likelihood that fit the roles of the module
        docstring (``family`` ``None`` unless they are a conjugate pair), checked by
        :func:`_any_components`.
    :return: a :class:`MixtureModel`.
    :raises ValueError: naming what was expected and listing the sites found (no partition site
        or two, a partition of a kind the engine does not take, labels whose probs are not the
        stick-breaking of a ``Beta(1, α)`` site of ``T - 1`` sticks, a prior on the partition's
        parameters, a component outside the clusters plate, a pair that is not conjugate, an
        observed parameter that is not the component indexed by the labels).
    """
    partitions = _partition_kinds(partitions)
    model_kwargs = dict(model_kwargs or {})
    # sites of the other blocks of a Gibbs composite arrive conditioned: they are parameters here
    given = tuple(sorted(model_kwargs.get(GIBBS_SITES_KWARG, {})))

    def trace(labels, data=None):
        traced = model if data is None else handlers.substitute(model, data=data)
        return TracedSites(
            traced, model_args, model_kwargs, engine, substitute_fn=_stand_in(labels), given=given
        )

    # first pass, every row in cluster 0: the capacity K of the components, the number of
    # categories of stick-breaking labels
    kind, partition, _, latent = _roles(trace(lambda shape: np.zeros(shape, np.int32)), partitions)
    if kind == "stick_breaking":
        num_clusters = np.shape(unwrap(partition["fn"]).probs)[-1]
    else:
        batches = [tuple(s["fn"].batch_shape) for s in latent if s["fn"].batch_shape]
        num_clusters = batches[0][0] if batches else 1

    def spread(shape):  # row n in cluster (K - 1 - n) mod K
        rows = (num_clusters - 1 - np.arange(shape[-1])) % num_clusters
        return np.broadcast_to(rows, shape).astype(np.int32)

    read = trace(spread)
    kind, partition, obs, latent = _roles(read, partitions)
    sticks, hyper_sites, conjugate_mass = None, (), None
    held = {s["name"]: s["value"] for s in read.sites if not s["is_observed"]}
    if kind == "nggp" and hyper:
        scalar = [s for s in latent if s["fn"].batch_shape == () and s["fn"].event_shape == ()]
        if scalar:
            hyper_sites, conjugate_mass = _hyper_sites(
                read, partition, obs, scalar, lambda data: trace(spread, {**held, **data}).sites
            )
        latent = [s for s in latent if s["name"] not in hyper_sites]
        params = _nggp_params(read, partition, latent, check_priors=False)
    elif kind == "nggp":
        params = _nggp_params(read, partition, latent)
    else:
        sticks, mass = _stick_breaking(read, partition, latent, num_clusters)
        latent = [s for s in latent if s is not sticks]
        params = dict(mass=mass, sigma=0.0, tau=1.0)
    _components(read, latent, num_clusters, learns_hyper=hyper)
    if conjugate:
        family, component_sites, obs_kind = _conjugate(read, partition, latent, obs)
    else:
        try:
            family, component_sites, obs_kind = _conjugate(read, partition, latent, obs)
        except ValueError:  # not a conjugate pair: any components that follow the labels
            family, obs_kind = None, "dense"
            component_sites = _any_components(read, partition, latent, obs, trace, spread)
    num_rows, dim = np.shape(obs["value"])
    return MixtureModel(
        model=model,
        model_args=tuple(model_args),
        model_kwargs=model_kwargs,
        partition_site=partition["name"],
        num_rows=int(num_rows),
        max_clusters=int(num_clusters),
        component_sites=component_sites,
        obs_site=obs["name"],
        family=family,
        obs_kind=obs_kind,
        dim=int(dim),
        site_summary=read.summary,
        obs_support=unwrap(obs["fn"]).support,
        engine=engine,
        partition_kind=kind,
        sticks_site=None if sticks is None else sticks["name"],
        hyper_sites=tuple(hyper_sites),
        conjugate_mass=conjugate_mass,
        held=held,
        given=given,
        component_supports={s["name"]: s["fn"].support for s in latent},
        **params,
    )
