"""Read a CRM latent trait model: the sites a CRM engine needs.

Part of the model contract of :mod:`numpyro_bnp.infer.core.model`: sites are found by distribution
type through :class:`~numpyro_bnp.infer.core.model.TracedSites`, never by name. Latent trait models
with a completely random measure prior (:func:`read_crm_trait_model`, the model of Zhu,
Bouchard-Côté & Campbell 2020, Eq. 11) need

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

A CRM site (or a ``RecursiveIBP`` site, through its ``alpha``) may take its mass from a latent
scalar **mass site** (``alpha ~ Gamma(a, b)``, then ``BetaProcess(alpha, ...)``): the mass is the
site's value, and nothing else in the model depends on it (checked on two more traces); the
kernel updates it given the atoms.

As a block of :class:`numpyro.infer.Gibbs` the model is conditioned on the sites of the other
blocks (``model_kwargs["_gibbs_sites"]``): those sites are set aside, the trait prior and the
noise may depend on them (:meth:`CRMTraitModel.numbers` reads them at any values), the
CRM, its mass site and the count law may not.
"""

import functools
from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.infer.gibbs import GIBBS_SITES_KWARG

from numpyro_bnp._checks import is_concrete, observed_array
from numpyro_bnp.distributions import BetaProcess, CompletelyRandomMeasure, RecursiveIBP
from numpyro_bnp.infer.core.model import (
    TracedSites,
    normal_params,
    observed_site,
    sites_of,
    trace_model,
    unwrap,
)
from numpyro_bnp.infer.features.crm.atoms import with_mass
from numpyro_bnp.infer.features.feature_model import linear_gaussian_noise_var

__all__ = ["CRMTraitModel", "CRMTraitNumbers", "read_crm_trait_model"]


class CRMTraitNumbers(NamedTuple):
    """The data and Gaussian parameters of a CRM latent trait model at given site values.

    :ivar obs: ``(N, D)`` observations (topic model: ``(N, V)`` word counts), or ``None``
        (prior-only).
    :ivar noise_var: ``(D,)`` observation noise variance (``None`` for topics).
    :ivar trait_loc, trait_var: ``(D,)`` prior mean and variance of each trait entry (``None``
        for topics).
    :ivar num_rows: ``N``, the rows of the model at these arguments (a Python int; ``None``
        in the numbers a kernel hands its compiled sweep, which takes arrays only).
    """

    obs: jnp.ndarray | None
    noise_var: jnp.ndarray | None
    trait_loc: jnp.ndarray | None
    trait_var: jnp.ndarray | None
    num_rows: int


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
    :ivar mass_site: the latent scalar site whose value is the CRM's mass, or ``None``.
    :ivar mass_prior: the distribution of the mass site (``None`` without one).
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
    mass_site: str | None = None
    mass_prior: object = None
    site_summary: tuple = field(default=())
    engine: str = "this engine"

    def numbers(self, values, model_args=(), model_kwargs=None):
        """The data and Gaussian parameters of the model with its CRM, count (or rate) and trait
        sites, and its mass site, set to ``values``: a :class:`CRMTraitNumbers`.

        Pure and traceable, so an engine reads them inside its compiled step; as a block of
        :class:`numpyro.infer.Gibbs` they follow the values of the other blocks' sites, which
        arrive conditioned through ``model_kwargs``; a run continued on new arguments reads the
        new data.
        """
        model = handlers.substitute(self.model, data=values)
        tr = trace_model(model, model_args, model_kwargs, f"{self.engine} (reading its numbers)")
        obs = tr[self.obs_site]
        data = jnp.asarray(obs["value"]) if obs["is_observed"] else None
        rows_of = self.rate_site if self.observation == "topics" else self.count_site
        num_rows = int(tr[rows_of]["fn"].shape()[-2])
        if self.observation == "topics":
            return CRMTraitNumbers(data, None, None, None, num_rows)
        k = jnp.shape(values[self.trait_site])[0]
        trait = unwrap(tr[self.trait_site]["fn"])
        noise = unwrap(obs["fn"])

        def row(x, shape):  # the (D,) parameters of the first row (all rows agree, read_...)
            return jnp.broadcast_to(x, shape)[0]

        return CRMTraitNumbers(
            obs=data,
            noise_var=row(noise.scale, (num_rows, self.dim)) ** 2,
            trait_loc=row(trait.loc, (k, self.dim)),
            trait_var=row(trait.scale, (k, self.dim)) ** 2,
            num_rows=num_rows,
        )


def _depends_on_conditioning(model, model_args, model_kwargs, names, engine):
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
            tr = trace_model(model, model_args, kwargs, f"{engine} (reading the model)")
        for name in names:
            leaves = jax.tree.leaves(unwrap(tr[name]["fn"]))
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


def _observed_and_atom_sites(read, rest, num_rows, after, truncation, kind, role):
    """The observed ``(N, D)`` site among ``rest`` (the sites after the counts' or rates', named
    by ``after``) and the one other latent site: a ``kind`` site of shape ``(K, D)`` (``role``: the
    traits or the topics), one row per atom."""
    obs = observed_site(rest, num_rows, after, read.fail)
    dim = jnp.shape(obs["value"])[1]
    latent = [s for s in rest if s is not obs]
    atoms = sites_of(latent, kind, (truncation, dim))
    if len(atoms) != 1 or len(latent) != 1:
        others = [s["name"] for s in latent if len(atoms) != 1 or s is not atoms[0]]
        read.fail(
            f"exactly one other latent site: a {kind.__name__} {role} site of shape "
            f"(K={truncation}, D={dim}) (unexpected latent sites: {others}; a scalar site "
            "whose value is the CRM's mass is updated by the kernel; sample other continuous "
            "hyper-parameters in another block of numpyro.infer.Gibbs)"
        )
    return obs, atoms[0]


def _observed_value(obs, dim):
    """The data of the observed site ``obs`` (``None`` when traced without data), checked on the
    host by :func:`numpyro_bnp._checks.observed_array`: real, ``(N, dim)``, finite in the working
    dtype."""
    if not obs["is_observed"]:
        return None
    value = obs["value"]
    if is_concrete(value):
        name = f"the data of the observed site {obs['name']!r}"
        observed_array(value, name, dtype=jnp.result_type(float), dim=dim)
    return np.asarray(value)


def read_crm_trait_model(model, model_args=(), model_kwargs=None, *, engine="this engine"):
    """Trace ``model`` once and locate the sites of a CRM latent trait model (module docstring).

    :return: a :class:`CRMTraitModel`.
    :raises ValueError: naming the site that does not fit and listing the sites found.
    """
    model_kwargs = dict(model_kwargs or {})
    noise = np.random.default_rng(0)
    dtype = jnp.result_type(float)
    stand_ins = {}  # one value per site: a second trace (the mass check) sees the same ones

    def stand_in(site):
        # Fixed values in the support instead of (slow, eager) draws of the atoms, topics and
        # rates: the checks below need shapes and some values, any values in the support serve.
        base = unwrap(site["fn"])
        shape = site["fn"].shape()
        key = (site["name"], tuple(shape))
        if key not in stand_ins:
            value = None
            if isinstance(base, CompletelyRandomMeasure):
                value = jnp.asarray(-np.sort(-noise.uniform(0.05, 0.95, shape)), dtype)
            elif isinstance(base, dist.Gamma):
                value = jnp.asarray(noise.uniform(0.5, 1.5, shape), dtype)
            elif isinstance(base, dist.Dirichlet):
                value = noise.uniform(0.5, 1.5, shape)
                value = jnp.asarray(value / value.sum(-1, keepdims=True), dtype)
            stand_ins[key] = value
        return stand_ins[key]

    # sites of the other blocks of a Gibbs composite arrive conditioned: they are parameters here
    given = set(model_kwargs.get(GIBBS_SITES_KWARG, {}))
    read = TracedSites(model, model_args, model_kwargs, engine, substitute_fn=stand_in, given=given)
    sites, fail = read.sites, read.fail
    crms, ibps = sites_of(sites, CompletelyRandomMeasure), sites_of(sites, RecursiveIBP)
    if len(crms) + len(ibps) != 1:
        fail(
            "exactly one sample site with a CompletelyRandomMeasure (BetaProcess, GammaProcess, "
            f"...) or RecursiveIBP distribution, found {len(crms) + len(ibps)}"
        )
    total_count = None
    if ibps:
        count = ibps[0]
        fn = unwrap(count["fn"])
        if fn.batch_shape != ():
            fail(f"a RecursiveIBP site with scalar alpha and beta (got {fn.batch_shape})")
        crm, crm_site, likelihood = fn.as_beta_process(), None, "bernoulli"
        num_rows, truncation = fn.num_rows, fn.max_features
        used = [count]
    else:
        crm_node = crms[0]
        crm = unwrap(crm_node["fn"])
        if crm.batch_shape != ():
            fail(f"a CRM site {crm_node['name']!r} with scalar parameters (got {crm.batch_shape})")
        crm_site, truncation = crm_node["name"], crm.truncation
        theta = np.asarray(crm_node["value"], np.float64)
        per_atom = [
            s
            for s in sites_of(sites, dist.Distribution)
            if s is not crm_node
            and not s["is_observed"]
            and jnp.ndim(s["value"]) == 2
            and jnp.shape(s["value"])[1] == truncation
        ]
        rate_sites = sites_of(per_atom, dist.Gamma)
        if len(rate_sites) == 1:
            return _read_topic_model(model, read, crm_node, rate_sites[0])
        candidates = [s for s in per_atom if unwrap(s["fn"]).is_discrete]
        if len(candidates) != 1:
            fail(
                f"exactly one discrete (N, K={truncation}) count site driven by the atoms of "
                f"{crm_site!r}, found {len(candidates)}"
            )
        count = candidates[0]
        num_rows = jnp.shape(count["value"])[0]
        family = _count_family(unwrap(count["fn"]))
        if family is None:
            read.reject(
                f"the count likelihood of site {count['name']!r} "
                f"({type(unwrap(count['fn'])).__name__}) is not supported; supported: "
                "Bernoulli(θ) and NegativeBinomialProbs(r, θ) with a BetaProcess, Poisson(θ) with "
                "any CRM"
            )
        likelihood, param, r = family
        if likelihood != "poisson" and not isinstance(crm, BetaProcess):
            read.reject(
                f"the count site {count['name']!r} is {likelihood} and needs rates in [0, 1]: a "
                f"BetaProcess prior, but {crm_site!r} is {type(crm).__name__}"
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
    retrace = functools.partial(TracedSites, model, model_args, model_kwargs, engine, given=given)
    mass_node = _mass_site(read, retrace, stand_in, count if ibps else crm_node, rest)
    rest = [s for s in rest if s is not mass_node]
    if mass_node is not None:
        used = [*used, mass_node]
    after = f"the count site {count['name']!r}"
    obs, trait = _observed_and_atom_sites(
        read, rest, num_rows, after, truncation, dist.Normal, "trait"
    )
    dim = jnp.shape(obs["value"])[1]
    loc, var = normal_params(trait, (truncation, dim))
    if not (np.all(loc == loc[:1]) and np.all(var == var[:1])):
        fail(f"a trait site {trait['name']!r} whose prior is the same for every atom")
    base = unwrap(obs["fn"])
    if not isinstance(base, dist.Normal):
        fail(
            f"a Normal observed site with mean {count['name']} @ {trait['name']}; site "
            f"{obs['name']!r} is {type(base).__name__}"
        )
    noise_var = linear_gaussian_noise_var(obs, count["value"], trait["value"])
    if noise_var is None:
        fail(
            f"the observed site {obs['name']!r} to be Normal with mean {count['name']} @ "
            f"{trait['name']} and one variance per column"
        )
    if given:
        names = [u["name"] for u in used]
        moving = _depends_on_conditioning(model, model_args, model_kwargs, names, engine)
        if moving:
            read.reject(
                f"the distributions of {moving} depend on sites of other Gibbs blocks "
                f"({sorted(given)}); only the trait prior and the observation noise may (the CRM "
                "and the count law must be fixed; a scalar site that is the CRM's mass belongs "
                "in the CRMSlice block, which updates it)"
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
        obs_value=_observed_value(obs, dim),
        noise_var=noise_var,
        dim=int(dim),
        mass_site=None if mass_node is None else mass_node["name"],
        mass_prior=None if mass_node is None else unwrap(mass_node["fn"]),
        site_summary=read.summary,
        engine=engine,
    )


def _params_equal(a, b):
    """The array leaves of the pytrees ``a`` and ``b`` agree (shapes and values)."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.shape(x) == np.shape(y) and np.allclose(np.asarray(x), np.asarray(y), equal_nan=True)
        for x, y in zip(la, lb, strict=True)
    )


def _mass_site(read, retrace, stand_in, crm_node, rest):
    """The latent scalar site among ``rest`` whose value is the mass of the CRM at ``crm_node``
    (the ``alpha`` of a ``RecursiveIBP`` site), or ``None``.

    A candidate (scalar, continuous, equal to the mass) is checked on two more traces
    (``retrace(substitute_fn=...)``, the same stand-ins ``stand_in`` and the candidate set to its
    value, then to another): the mass must follow it and no other distribution of the model may
    change.
    """
    crm = unwrap(crm_node["fn"])
    param = "alpha" if isinstance(crm, RecursiveIBP) else "mass"
    mass = np.asarray(getattr(crm, param), np.float64)
    candidates = [
        s
        for s in rest
        if not s["is_observed"]
        and jnp.ndim(s["value"]) == 0
        and not unwrap(s["fn"]).is_discrete
        and np.allclose(np.asarray(s["value"], np.float64), mass, rtol=1e-6)
    ]
    if len(candidates) != 1:
        return None
    site = candidates[0]
    name, value = site["name"], float(site["value"])
    moved = 1.7 * value + 0.1

    def traced_at(mass):  # the candidate set, the CRM (or IBP) site at its first value
        def fn(s):
            if s["name"] == name:
                return jnp.asarray(mass, jnp.result_type(float))
            return crm_node["value"] if s["name"] == crm_node["name"] else stand_in(s)

        return {s["name"]: s for s in retrace(substitute_fn=fn).sites}

    first, again = traced_at(value), traced_at(moved)
    problem = None
    for s in first.values():
        other = again.get(s["name"])
        before, after = unwrap(s["fn"]), None if other is None else unwrap(other["fn"])
        if s["name"] == crm_node["name"]:
            if not np.allclose(np.asarray(getattr(after, param), np.float64), moved, rtol=1e-6):
                problem = "the CRM's mass must be the site's value"
                break
            after = with_mass(after, getattr(before, param), param)
        if s["name"] != name and (after is None or not _params_equal(before, after)):
            problem = f"the site {s['name']!r} changes with it (or the model's shapes do)"
            break
    if problem is not None:
        read.reject(
            f"the latent scalar site {name!r} is the mass of the CRM site "
            f"{crm_node['name']!r}, but {problem}: only the CRM's mass may depend on it (give "
            "the CRM a fixed truncation, e.g. max_features=...)"
        )
    return site


def _read_topic_model(model, read, crm_node, rate_node):
    """The sites of the beta–negative-binomial topic model (module docstring) among the
    :class:`~numpyro_bnp.infer.core.model.TracedSites` ``read``: ``θ`` at ``crm_node``, gamma rates
    at ``rate_node``, Dirichlet topics, Poisson word counts."""
    fail = read.fail
    crm, crm_site, rate_site = unwrap(crm_node["fn"]), crm_node["name"], rate_node["name"]
    if not isinstance(crm, BetaProcess):
        read.reject(
            f"the rate site {rate_site!r} is Gamma with scale θ/(1-θ) and needs atoms in [0, 1]: "
            f"a BetaProcess prior, but {crm_site!r} is {type(crm).__name__}"
        )
    truncation = crm.truncation
    num_rows = int(jnp.shape(rate_node["value"])[0])
    shape = (num_rows, truncation)
    fn = unwrap(rate_node["fn"])
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

    rest = [s for s in read.sites if s is not crm_node and s is not rate_node]
    after = f"the Gamma rate site {rate_site!r}"
    obs, topic = _observed_and_atom_sites(
        read, rest, num_rows, after, truncation, dist.Dirichlet, "topic"
    )
    obs_shape = tuple(jnp.shape(obs["value"]))
    vocab = obs_shape[1]
    beta = np.broadcast_to(
        np.asarray(unwrap(topic["fn"]).concentration, np.float64), (truncation, vocab)
    )
    if not np.all(beta == beta[:1]):
        fail(f"a topic site {topic['name']!r} whose Dirichlet prior is the same for every atom")
    base = unwrap(obs["fn"])
    if type(base) is not dist.Poisson:
        fail(
            f"Poisson word counts with mean {rate_site} @ {topic['name']}; site {obs['name']!r} "
            f"is {type(base).__name__}"
        )
    mean = np.asarray(rate_node["value"], np.float64) @ np.asarray(topic["value"], np.float64)
    obs_rate = np.broadcast_to(np.asarray(base.rate, np.float64), obs_shape)
    if not np.allclose(obs_rate, mean, rtol=1e-5, atol=1e-8):
        fail(f"the Poisson site {obs['name']!r} with mean {rate_site} @ {topic['name']}")
    value = _observed_value(obs, vocab)
    if value is not None:
        if not (
            np.all(np.isfinite(value)) and np.all(value >= 0) and np.all(value == np.round(value))
        ):
            read.reject(f"the word counts at site {obs['name']!r} must be non-negative integers")
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
        site_summary=read.summary,
        engine=read.engine,
    )
