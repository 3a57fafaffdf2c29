r"""Truncated twins: the user's model in a form NumPyro's own engines run.

NumPyro's engines (``NUTS``, ``SVI``, ``DiscreteHMCGibbs``) cannot move an
:class:`~numpyro_bnp.distributions.NGGP` partition site (a discrete site with ``N``-dimensional
support, no enumeration), a :class:`~numpyro_bnp.distributions.RecursiveIBP` matrix or the
decreasing atoms of a :class:`~numpyro_bnp.distributions.BetaProcess`. :func:`truncated_twin`
derives, from the user's own model function, a model that they can run on the same arguments and
data, so that the library's engines and NumPyro's can be compared on one model:

* **mixtures** — the NGGP partition becomes a truncated stick-breaking (Ishwaran & James,
  *Gibbs sampling methods for stick-breaking priors*, JASA 2001) with labels NumPyro sums out:
  the Dirichlet process (σ = 0) by ``Beta(1, a)`` sticks, the normalized σ-stable process
  (τ = 0, σ > 0), which is the Pitman–Yor process ``PY(σ, 0)`` whatever the mass ``a``, by
  ``Beta(1 - σ, kσ)`` sticks (Pitman & Yor, Ann. Probab. 1997). The model is read by the
  mixture reader of the model contract (``docs/model_contract.md``) to find the clusters plate
  and the rows of the observed site;
* **features** — the finite beta–Bernoulli approximation with ``K`` atoms
  ``π_k ~ Beta(γλ/K, λ - γλ/K)``, ``Z_nk ~ Bernoulli(π_k)`` of the beta process of mass ``γ``
  and concentration ``λ`` (the two-parameter IBP(γ, λ) is its Bernoulli-process marginal;
  Griffiths & Ghahramani, JMLR 2011; Paisley & Carin, ICML 2009), which
  ``DiscreteHMCGibbs`` runs entry by entry.

``docs/engines.md``, section "Truncated twins", shows both.
"""

import functools
from typing import NamedTuple

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.primitives import Messenger

from numpyro_bnp._checks import is_concrete, model_function, positive_int
from numpyro_bnp.distributions import NGGP, BetaProcess, RecursiveIBP
from numpyro_bnp.distributions.crm import CompletelyRandomMeasure
from numpyro_bnp.infer.core.model import model_cache_key, trace_model, unwrap
from numpyro_bnp.infer.mixtures.model import read_mixture_model
from numpyro_bnp.models.mixtures import stick_breaking_sites

__all__ = ["finite_beta_params", "pitman_yor_of_nggp", "truncated_twin"]

_ENGINE = "truncated_twin"


def pitman_yor_of_nggp(mass, sigma, tau):
    r"""The Pitman–Yor ``(discount d, strength θ)`` whose partition law is ``NGGP(a, σ, τ)``.

    * ``σ = 0``: the Dirichlet process of concentration ``a`` whatever ``τ``: ``(0, a)``;
    * ``τ = 0``, ``σ > 0``: the normalized σ-stable process, ``PY(σ, 0)`` whatever ``a``:
      ``(σ, 0)`` (its EPPF ``V_{n,k} = σ^{k-1} Γ(k) / Γ(n)``, Pitman 2006, Section 3.2);
    * ``σ > 0`` and ``τ > 0`` (the normalized inverse-Gaussian, σ = 1/2, among them): no
      Pitman–Yor process has this partition law, and the size-biased weights are not
      independent sticks (Favaro, Lijoi & Prünster, Ann. Appl. Probab. 2012): ``ValueError``.

    :param mass, sigma, tau: the NGGP's ``a > 0``, ``σ ∈ [0, 1)``, ``τ >= 0`` (numbers).
    :return: ``(discount, strength)`` as floats.
    """
    mass, sigma, tau = (float(np.asarray(v)) for v in (mass, sigma, tau))
    if sigma == 0:
        return 0.0, mass
    if tau == 0:
        return sigma, 0.0
    raise ValueError(
        f"NGGP(mass={mass:g}, sigma={sigma:g}, tau={tau:g}) has sigma > 0 and tau > 0 (e.g. the "
        "normalized inverse-Gaussian, sigma = 1/2): its partition is neither a Dirichlet nor a "
        "Pitman-Yor process, and its size-biased weights are not independent sticks, so there "
        "is no truncated stick-breaking twin. Use the library's engines on the model itself "
        "(NGGPMarginalGibbs, ADFNRM, EPNRM), or compare with NUTS on a Dirichlet-process "
        "(sigma = 0) or Pitman-Yor (tau = 0) version of it"
    )


def finite_beta_params(mass, concentration, num_atoms):
    r"""``(a, b)`` of the finite beta–Bernoulli approximation ``π_k ~ Beta(a, b)``, ``k ≤ K``, of
    the beta process of mass ``γ`` and concentration ``λ`` (Lévy density
    ``γλ θ^{-1} (1-θ)^{λ-1}``): ``a = γλ/K``, ``b = λ - γλ/K`` (Paisley & Carin 2009; the weak
    limit of Doshi-Velez & Williamson 2017, Eq. 13). ``K Beta(θ; a, b)`` tends to the Lévy
    density as ``K → ∞`` and ``E[Σ_k π_k] = γ`` exactly, so a row uses ``γ`` features on average
    as under the IBP(γ, λ). Needs ``K > γ``."""
    a = mass * concentration / num_atoms
    if is_concrete(mass) and not np.all(np.asarray(mass) < num_atoms):
        raise ValueError(
            f"truncation must be > the mass {mass!r}: the finite beta-Bernoulli twin gives each "
            f"of its K = {num_atoms} atoms Beta(mass c/K, c - mass c/K), which needs K > mass; "
            "raise the model's max_features (or the twin's truncation)"
        )
    return a, concentration - a


class _MixturePlan(NamedTuple):
    """What the twin of a mixture model needs, read once per distinct call."""

    discount: float
    strength: float
    truncation: int
    rows: tuple  # (name, size, dim) of the observed site's plate over the rows


def _mixture_plan(model, args, kwargs, truncation):
    """Read the mixture model (the model contract's reader) at the call's arguments: the
    Pitman–Yor twin of its NGGP, the truncation and the observed site's plate over the rows."""
    # eagerly, with the engine's handlers blocked: the engine may trace the twin under jit
    with handlers.block(), jax.ensure_compile_time_eval():
        read = read_mixture_model(model, args, kwargs, _ENGINE)
        traced = trace_model(handlers.substitute(model, data=read.held), args, kwargs, _ENGINE)
    discount, strength = pitman_yor_of_nggp(read.mass, read.sigma, read.tau)
    k = read.max_clusters
    t = k if truncation is None else truncation
    if t > k:
        raise ValueError(
            f"truncation must be at most the {k} clusters of the model's components plate (the "
            f"twin's labels index the components), got {t}; raise the model's capacity "
            "(max_clusters) or lower truncation"
        )
    frames = traced[read.obs_site]["cond_indep_stack"]
    rows = [f for f in frames if f.size == read.num_rows]
    if len(rows) != 1:
        raise ValueError(
            f"{_ENGINE} expected the observed site {read.obs_site!r} in one numpyro.plate over "
            f"its N={read.num_rows} rows (NumPyro sums the labels out row by row in that plate); "
            f"found the plates {[(f.name, f.size) for f in frames] or 'none'}"
        )
    (row,) = rows
    return _MixturePlan(discount, strength, t, (row.name, row.size, row.dim))


class _Twin(Messenger):
    """The handler behind :func:`truncated_twin` (one per call of the twin: it reads the model
    at that call's arguments). Each replaced site is sampled again under its own name from the
    top of the handler stack (so that the engine's handlers record it), and the original message
    is stopped."""

    def __init__(self, fn, plan, truncation):
        super().__init__(fn)
        self.plan = plan  # () -> the _MixturePlan of the call (read when first needed)
        self.truncation = truncation
        self.crm_counts = False  # a BetaProcess site was replaced: its Bernoulli counts follow

    def process_message(self, msg):
        if msg["type"] != "sample":
            return
        fn = msg["fn"]
        base = unwrap(fn)
        if isinstance(base, NGGP | RecursiveIBP | CompletelyRandomMeasure) and msg["is_observed"]:
            raise ValueError(
                f"{_ENGINE}: the site {msg['name']!r} ({type(base).__name__}) is observed; the "
                "twin replaces latent partition and feature sites only"
            )
        if isinstance(base, NGGP):
            value = self._partition(msg)
        elif isinstance(base, RecursiveIBP):
            value = self._ibp(msg, base)
        elif isinstance(base, CompletelyRandomMeasure):
            value = self._crm(msg, base)
        else:
            self._counts(msg, fn, base)
            return
        msg["value"] = value
        msg["stop"] = True  # the twin's sites stand for it in the engine's trace

    def _partition(self, msg):
        plan = self.plan()
        weights = stick_breaking_sites(plan.strength, plan.discount, plan.truncation)
        name, size, dim = plan.rows
        with numpyro.plate(name, size, dim=dim):
            return numpyro.sample(
                msg["name"], dist.Categorical(weights), infer={"enumerate": "parallel"}
            )

    def _ibp(self, msg, ibp):
        k = ibp.max_features
        if self.truncation not in (None, k):
            raise ValueError(
                f"truncation must be None or the IBP's max_features={k} for the feature site "
                f"{msg['name']!r} (the model's other sites are sized by it), got "
                f"{self.truncation}; set the model's max_features instead"
            )
        a, b = finite_beta_params(ibp.alpha, ibp.beta, k)
        pi = numpyro.sample("pi", dist.Beta(a, b).expand([k]).to_event(1))
        # batch (N, K), no event: DiscreteHMCGibbs updates each entry (an event has no support
        # it can enumerate entry by entry)
        return numpyro.sample(msg["name"], dist.Bernoulli(pi).expand([ibp.num_rows, k]))

    def _crm(self, msg, crm):
        # a discount is checked when it is a number (not a tracer of the engine's jit)
        if not isinstance(crm, BetaProcess) or (
            is_concrete(crm.discount) and np.any(np.asarray(crm.discount) != 0)
        ):
            raise ValueError(
                f"{_ENGINE} has a finite beta-Bernoulli twin for a BetaProcess of discount 0 "
                f"only; the site {msg['name']!r} is a {type(crm).__name__}"
                + (f" of discount {crm.discount!r}" if isinstance(crm, BetaProcess) else "")
            )
        k = crm.truncation if self.truncation is None else self.truncation
        a, b = finite_beta_params(crm.mass, crm.concentration, k)
        self.crm_counts = True
        return numpyro.sample(msg["name"], dist.Beta(a, b).expand([k]).to_event(1))

    def _counts(self, msg, fn, base):
        """After a replaced beta process: a latent ``Bernoulli`` site declared an event outside
        any plate gets its batch axes back (the same log density) for ``DiscreteHMCGibbs``."""
        if (
            self.crm_counts
            and not msg["is_observed"]
            and not msg["cond_indep_stack"]
            and isinstance(fn, dist.Independent)
            and isinstance(base, dist.BernoulliProbs | dist.BernoulliLogits)
        ):
            msg["fn"] = fn.base_dist


def truncated_twin(model, truncation=None):
    r"""The truncated twin of ``model``: a NumPyro model NumPyro's own engines run.

    ``truncated_twin(model)`` is a model function of the same arguments as ``model`` (data
    included) whose sites are those of ``model`` with

    * an :class:`~numpyro_bnp.distributions.NGGP` partition site ``z`` (a mixture model as the
      model contract reads it, ``docs/model_contract.md``) replaced by the truncated
      stick-breaking of Ishwaran & James (JASA 2001, Section 3):

      .. math::
          v_k \sim \mathrm{Beta}(1 - d,\; θ + k d) \ (k < T), \quad
          w_k = v_k \prod_{j<k} (1 - v_j), \quad w_T = \prod_{j<T} (1 - v_j), \quad
          z_n \sim \mathrm{Categorical}(w),

      with ``(d, θ) = (0, a)`` for σ = 0 (the Dirichlet process) and ``(σ, 0)`` for τ = 0 (the
      normalized σ-stable process is the Pitman–Yor process ``PY(σ, 0)``, whatever the mass
      ``a``; :func:`pitman_yor_of_nggp`). New sites: the sticks ``v`` ``(T - 1,)`` in a
      ``numpyro.plate("stick", T - 1)`` and the deterministic ``weights`` ``(T,)``; ``z`` ``(N,)``
      is a ``Categorical`` in the observed site's plate over the rows, marked
      ``infer={"enumerate": "parallel"}``, which NUTS and ``TraceEnum_ELBO`` sum out (they need
      ``funsor``). Labels ``k >= T`` never occur: the model's components ``k >= T`` (when its
      clusters plate is larger than ``T``) keep their prior;
    * a :class:`~numpyro_bnp.distributions.RecursiveIBP` ``(N, K)`` site ``Z`` replaced by the
      finite beta–Bernoulli model ``pi ~ Beta(αβ/K, β - αβ/K)`` ``(K,)`` (a new site ``pi``),
      ``Z_nk ~ Bernoulli(π_k)`` (batch shape ``(N, K)``), and a
      :class:`~numpyro_bnp.distributions.BetaProcess` site ``theta`` (discount 0) replaced by
      ``K`` independent atoms ``Beta(γλ/K, λ - γλ/K)`` (:func:`finite_beta_params`), its latent
      ``Bernoulli(theta)...to_event(2)`` counts given their batch axes back: both run under
      ``DiscreteHMCGibbs(NUTS(twin))``.

    Every other site (components, features, noise, observations) is the user's own, unchanged. A
    model with none of these sites is its own twin. A mixture twin reads the model once per
    distinct call (arguments compared by value; a few traces at stand-in values, with the
    engine's handlers blocked), with the mixture reader of the model contract, so the components
    must be one of its conjugate pairs. Posterior labels:
    ``numpyro.contrib.funsor.infer_discrete``.

    :param model: a NumPyro model function.
    :param int truncation: the number ``T`` of clusters, ``T - 1`` sticks (mixtures), or of
        atoms ``K`` (features). ``None`` (default): the model's own capacity, the size of its
        clusters plate (``max_clusters``) or the feature site's ``max_features`` /
        ``truncation``. A mixture's ``T`` may be below the clusters plate's size; a
        ``RecursiveIBP`` twin needs ``T = K``.
    :return: the twin model function.
    :raises TypeError: ``model`` not callable; :raises ValueError: ``truncation`` not a whole
        number ``>= 1``, and, when the twin runs, an NGGP with σ > 0 and τ > 0 (no
        stick-breaking twin), ``truncation`` above the clusters plate, an observed site outside
        a plate over the rows, or a beta process of discount > 0.

    >>> from jax import random
    >>> from numpyro.infer import Predictive
    >>> from numpyro_bnp.infer import truncated_twin
    >>> from numpyro_bnp.models import nggp_normal_mixture
    >>> twin = truncated_twin(nggp_normal_mixture)  # DP(mass) for sigma = 0
    >>> draws = Predictive(twin, num_samples=2)(
    ...     random.PRNGKey(0), num_obs=5, dim=1, mass=1.0, sigma=0.0, max_clusters=4
    ... )
    >>> {name: value.shape for name, value in sorted(draws.items())}
    {'mu': (2, 4, 1), 'obs': (2, 5, 1), 'v': (2, 3), 'weights': (2, 4), 'z': (2, 5)}

    ``MCMC(NUTS(twin), ...).run(key, x, num_obs=..., ...)`` then samples ``v`` and ``mu`` with
    ``z`` summed out (``docs/engines.md``, "Truncated twins").
    """
    model = model_function(model, "model")
    if truncation is not None:
        truncation = positive_int(truncation, "truncation")

    plans = {}  # model_cache_key -> _MixturePlan: read once per distinct call, eagerly

    def plan_of(args, kwargs):
        key = model_cache_key(model, args, kwargs)
        if key is not None and key in plans:
            return plans[key]
        plan = _mixture_plan(model, args, kwargs, truncation)
        if key is not None:
            if len(plans) >= 8:
                plans.pop(next(iter(plans)))
            plans[key] = plan
        return plan

    @functools.wraps(model)
    def twin(*args, **kwargs):
        with _Twin(None, functools.partial(plan_of, args, kwargs), truncation):
            return model(*args, **kwargs)

    return twin
