r"""Ready NumPyro mixture models: a normalized generalized gamma process (NGGP) partition, or
the truncated stick-breaking of a Dirichlet process.

Every NGGP model draws a partition of the ``N`` rows from
:class:`~numpyro_bnp.distributions.NGGP` (mass ``a``, discount ``σ``, tilting ``τ``; ``σ = 0`` is
the Dirichlet process, ``σ = 1/2`` the normalized inverse-Gaussian), one component parameter per
cluster from a prior conjugate to the likelihood, and each row from the likelihood of its
cluster's component (Tank, Foti & Fox, *Streaming variational inference for Bayesian
nonparametric mixture models*, AISTATS 2015; Favaro & Teh, *MCMC for normalized random measure
mixture models*, Stat. Sci. 2013):

.. math::
    z \sim \mathrm{NGGP}(a, σ, τ), \quad θ_k \overset{iid}{\sim} H_0 \ (k < K), \quad
    x_n \mid z, θ \sim F(θ_{z_n}).

* :func:`nggp_multinomial_mixture` — word-count documents, Dirichlet–multinomial;
* :func:`nggp_gaussian_mixture` — full-covariance Gaussians, Normal–Wishart;
* :func:`nggp_diagonal_gaussian_mixture` — diagonal Gaussians, Normal–Gamma per dimension;
* :func:`nggp_normal_mixture` — Gaussians of known noise, a Gaussian prior on the means;
* :func:`nggp_poisson_mixture` — Poisson counts, Gamma rates;
* :func:`nggp_bernoulli_mixture` — binary data, Beta probabilities;
* :func:`dp_mixture` — a Dirichlet-process (or, with ``discount``, Pitman–Yor) mixture by
  truncated stick-breaking (Ishwaran & James 2001; Blei & Jordan 2006) with the components of any
  of the five dense models above: its labels are a ``Categorical`` site, which NumPyro's NUTS and
  ``TraceEnum_ELBO`` sum out. :func:`numpyro_bnp.infer.truncated_twin` derives the same from an
  NGGP model (σ = 0 or τ = 0) of your own.

Sites of the NGGP models: the labels ``z`` ``(N,)`` (canonical: clusters numbered in order of
appearance), the components in a ``numpyro.plate("cluster", K)`` and the observations ``obs``
``(N, D)`` in a ``numpyro.plate("row", N)`` (one log-likelihood term per row for
``numpyro.infer.log_likelihood`` and ArviZ). ``K = max_clusters`` is the number of components of
a draw; the default ``num_obs`` can never be exceeded (``N`` rows make at most ``N`` clusters).
With a smaller ``K``, a partition with more than ``K`` clusters is an error when the model runs
eagerly (``handlers.seed``) and gives its rows NaN parameters under ``jit`` (``Predictive``),
never those of another cluster.

Inference: the mixture engines of :mod:`numpyro_bnp.infer` (the streaming ADF-NRM and EP-NRM of
Tank et al. 2015) read these models, or your own written the same way, through the model
contract (``docs/model_contract.md``, "Mixture models"), which finds the sites by their
distributions and the conjugate family of the components. NumPyro's own samplers (NUTS,
``DiscreteHMCGibbs``) cannot run the NGGP partition directly: it is a discrete site with
``N``-dimensional support that NumPyro can neither enumerate nor update by Gibbs.
:func:`dp_mixture` is read by ``PowerPriorSVB`` (streaming) and runs under NumPyro's NUTS and SVI
(its docstring). Every model draws from the prior under ``handlers.seed`` or
``numpyro.infer.Predictive``.

The arguments share their names with the other ready models (``docs/vocabulary.md``): ``mass``,
``sigma``, ``tau`` for the NGGP (``mass`` the DP's ``α`` in :func:`dp_mixture`, whose
``truncation`` is the stick-breaking's ``T``), ``max_clusters`` for the capacity, ``sigma_o``
for a known noise standard deviation, and NumPyro's own names for the parameters of the
component priors.

>>> from jax import random
>>> from numpyro.infer import Predictive
>>> from numpyro_bnp.models import nggp_normal_mixture
>>> draws = Predictive(nggp_normal_mixture, num_samples=2)(
...     random.PRNGKey(0), num_obs=6, dim=2, mass=1.0, sigma=0.5
... )
>>> draws["z"].shape, draws["mu"].shape, draws["obs"].shape
((2, 6), (2, 6, 2), (2, 6, 2))
"""

import inspect

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from numpyro_bnp._checks import is_concrete, positive_int
from numpyro_bnp._math import stick_breaking_weights
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.distributions.crm import _check

__all__ = [
    "dp_mixture",
    "nggp_bernoulli_mixture",
    "nggp_diagonal_gaussian_mixture",
    "nggp_gaussian_mixture",
    "nggp_multinomial_mixture",
    "nggp_normal_mixture",
    "nggp_poisson_mixture",
]


def _positive(**params):
    """Check hyper-parameters that must be finite and ``> 0`` (concrete values only: a model may
    be traced with them as arguments of a compiled function)."""
    for name, value in params.items():
        _check(lambda x: x > 0, name, "finite and > 0", value)


def _partition(num_obs, dim, mass, sigma, tau, max_clusters):
    """The checked sizes ``(N, D, K)`` and the NGGP labels ``z`` ``(N,)``."""
    num_obs, dim = positive_int(num_obs, "num_obs"), positive_int(dim, "dim")
    k = num_obs if max_clusters is None else positive_int(max_clusters, "max_clusters")
    z = numpyro.sample("z", NGGP(mass, sigma, tau, num_points=num_obs))
    if is_concrete(z) and int(jnp.max(z)) >= k:
        raise ValueError(
            f"max_clusters={k} is less than the {int(jnp.max(z)) + 1} clusters of the partition "
            "drawn; increase max_clusters (None: num_obs, which no partition exceeds)"
        )
    return num_obs, dim, k, z


def _of_cluster(values, z):
    """``values[z]`` along the cluster axis; a label ``>= K`` gives NaN (not another cluster)."""
    return jnp.take(values, z, axis=0, mode="fill", fill_value=jnp.nan)


def _check_obs(obs, num_obs, dim, name="dim"):
    """Raise ``ValueError`` unless ``obs`` is ``None`` or ``(N, D)``."""
    if obs is not None and tuple(jnp.shape(obs)) != (num_obs, dim):
        want = f"(num_obs, {name}) = {(num_obs, dim)}"
        raise ValueError(f"obs must have shape {want}, got {tuple(jnp.shape(obs))}")


def _observe(fn, obs, num_obs, dim, name="dim"):
    """The observed site ``obs`` ``(N, D)``, its rows in a ``numpyro.plate("row", N)``."""
    _check_obs(obs, num_obs, dim, name)
    with numpyro.plate("row", num_obs):
        return numpyro.sample("obs", fn, obs=obs)


# The conjugate components of the dense mixtures, written once for the NGGP models and
# dp_mixture: each samples the components of K clusters in a numpyro.plate("cluster", K) and
# returns the likelihood of the rows given their labels, z -> F(θ_z) (z of any shape: (N,) for
# the NGGP's labels, (K, 1) when NumPyro enumerates the Categorical labels of dp_mixture).


def _normal_wishart(k, dim, loc=0.0, kappa=1.0, dof=None, scale_matrix=None):
    """``Lambda`` ``(K, D, D)`` and ``mu`` ``(K, D)`` (:func:`nggp_gaussian_mixture`)."""
    dof = dim + 2.0 if dof is None else dof
    _positive(kappa=kappa, dof=dof)
    scale_matrix = jnp.eye(dim) / dof if scale_matrix is None else jnp.asarray(scale_matrix)
    loc = jnp.broadcast_to(jnp.asarray(loc, jnp.result_type(float)), (dim,))
    with numpyro.plate("cluster", k):
        lam = numpyro.sample("Lambda", dist.Wishart(dof, scale_matrix=scale_matrix))
        mu = numpyro.sample("mu", dist.MultivariateNormal(loc, precision_matrix=kappa * lam))
    return lambda z: dist.MultivariateNormal(
        _of_cluster(mu, z), precision_matrix=_of_cluster(lam, z)
    )


def _normal_gamma(k, dim, loc=0.0, kappa=1.0, concentration=1.0, rate=1.0):
    """``lam`` ``(K, D)`` and ``mu`` ``(K, D)`` (:func:`nggp_diagonal_gaussian_mixture`)."""
    _positive(kappa=kappa, concentration=concentration, rate=rate)
    with numpyro.plate("cluster", k):
        lam = numpyro.sample("lam", dist.Gamma(concentration, rate).expand([dim]).to_event(1))
        mu = numpyro.sample("mu", dist.Normal(loc, 1 / jnp.sqrt(kappa * lam)).to_event(1))
    return lambda z: dist.Normal(_of_cluster(mu, z), 1 / jnp.sqrt(_of_cluster(lam, z))).to_event(1)


def _normal_normal(k, dim, loc=0.0, sigma_mu=1.0, sigma_o=0.1):
    """``mu`` ``(K, D)``, a known noise ``sigma_o`` (:func:`nggp_normal_mixture`)."""
    _positive(sigma_mu=sigma_mu, sigma_o=sigma_o)
    with numpyro.plate("cluster", k):
        mu = numpyro.sample("mu", dist.Normal(loc, sigma_mu).expand([dim]).to_event(1))
    return lambda z: dist.Normal(_of_cluster(mu, z), sigma_o).to_event(1)


def _gamma_poisson(k, dim, concentration=1.0, rate=1.0):
    """``theta`` ``(K, D)``, Poisson rates (:func:`nggp_poisson_mixture`)."""
    _positive(concentration=concentration, rate=rate)
    with numpyro.plate("cluster", k):
        theta = numpyro.sample("theta", dist.Gamma(concentration, rate).expand([dim]).to_event(1))
    return lambda z: dist.Poisson(_of_cluster(theta, z)).to_event(1)


def _beta_bernoulli(k, dim, concentration1=1.0, concentration0=1.0):
    """``theta`` ``(K, D)``, probabilities of a one (:func:`nggp_bernoulli_mixture`)."""
    _positive(concentration1=concentration1, concentration0=concentration0)
    with numpyro.plate("cluster", k):
        prior = dist.Beta(concentration1, concentration0).expand([dim]).to_event(1)
        theta = numpyro.sample("theta", prior)
    return lambda z: dist.Bernoulli(_of_cluster(theta, z)).to_event(1)


#: dp_mixture's ``components``: the component sites and likelihood of each dense NGGP model
_COMPONENTS = {
    "gaussian": _normal_wishart,
    "diagonal_gaussian": _normal_gamma,
    "normal": _normal_normal,
    "poisson": _gamma_poisson,
    "bernoulli": _beta_bernoulli,
}


def nggp_multinomial_mixture(
    obs=None,
    *,
    num_obs,
    vocab_size,
    doc_lengths=None,
    mass=1.0,
    sigma=0.0,
    tau=1.0,
    concentration=1.0,
    max_clusters=None,
):
    r"""NGGP mixture of multinomials: documents as word counts, a Dirichlet topic per cluster.

    .. math::
        z \sim \mathrm{NGGP}(a, σ, τ), \quad θ_k \sim \mathrm{Dirichlet}(λ_0 1_V), \quad
        x_n \mid z, θ \sim \mathrm{Multinomial}(L_n, θ_{z_n}),

    the document mixture of Tank, Foti & Fox (2015); a cluster's predictive is the
    Dirichlet–multinomial (:class:`~numpyro_bnp.families.DirichletMultinomial`).

    Sites: ``z`` ``(num_obs,)``, ``theta`` ``(K, vocab_size)``, ``obs`` ``(num_obs, vocab_size)``
    (counts; documents may have different lengths).

    :param obs: word counts ``(num_obs, vocab_size)`` or ``None`` (prior predictive).
    :param int num_obs: number of documents ``N``.
    :param int vocab_size: vocabulary size ``V``.
    :param doc_lengths: the documents' lengths ``L_n``, ``(num_obs,)`` or a scalar; ``None``: the
        row sums of ``obs``, or one word per document when ``obs`` is ``None`` too (enough to
        read the model; pass the lengths to draw realistic documents).
    :param mass: the NGGP's mass ``a > 0``; :param sigma: its discount ``σ ∈ [0, 1)``;
        :param tau: its tilting ``τ >= 0`` (``> 0`` when ``σ = 0``).
    :param concentration: the Dirichlet's ``λ_0 > 0`` (one for every word).
    :param max_clusters: the number ``K`` of topics of a draw (default ``num_obs``).
    """
    num_obs, vocab_size, k, z = _partition(num_obs, vocab_size, mass, sigma, tau, max_clusters)
    _positive(concentration=concentration)
    with numpyro.plate("cluster", k):
        theta = numpyro.sample("theta", dist.Dirichlet(jnp.full(vocab_size, concentration)))
    if doc_lengths is None:
        doc_lengths = 1 if obs is None else jnp.sum(jnp.asarray(obs), -1)
    # the longest document from the host values: under Predictive's vmap a jnp value of
    # concrete lengths is a tracer, and Multinomial cannot sample without total_count_max
    longest = int(np.max(doc_lengths)) if is_concrete(doc_lengths) else None
    lengths = jnp.broadcast_to(jnp.asarray(doc_lengths), (num_obs,))
    _check(lambda n: (n >= 0) & (n == np.round(n)), "doc_lengths", "whole numbers >= 0", lengths)
    fn = dist.Multinomial(lengths, _of_cluster(theta, z), total_count_max=longest)
    return _observe(fn, obs, num_obs, vocab_size, "vocab_size")


def nggp_gaussian_mixture(
    obs=None,
    *,
    num_obs,
    dim,
    mass=1.0,
    sigma=0.0,
    tau=1.0,
    loc=0.0,
    kappa=1.0,
    dof=None,
    scale_matrix=None,
    max_clusters=None,
):
    r"""NGGP mixture of full-covariance Gaussians with the Normal–Wishart prior.

    .. math::
        z \sim \mathrm{NGGP}(a, σ, τ), \quad Λ_k \sim \mathrm{Wishart}(ν_0, W_0), \quad
        μ_k \mid Λ_k \sim N(m_0, (κ_0 Λ_k)^{-1}), \quad x_n \sim N(μ_{z_n}, Λ_{z_n}^{-1})

    (``E[Λ_k] = ν_0 W_0``; Murphy 2007; Tank, Foti & Fox 2015). A cluster's predictive
    is a multivariate Student-t (:class:`~numpyro_bnp.families.NormalWishart`).

    Sites: ``z`` ``(num_obs,)``, ``Lambda`` ``(K, dim, dim)``, ``mu`` ``(K, dim)``, ``obs``
    ``(num_obs, dim)``.

    :param obs: observations ``(num_obs, dim)`` or ``None``.
    :param mass: the NGGP's parameters (:func:`nggp_multinomial_mixture`).
    :param sigma: the NGGP's parameters (:func:`nggp_multinomial_mixture`).
    :param tau: the NGGP's parameters (:func:`nggp_multinomial_mixture`).
    :param loc: ``m_0``, a scalar or ``(dim,)``.
    :param kappa: ``κ_0 > 0``.
    :param dof: the Wishart's degrees of freedom ``ν_0 > dim - 1`` (NumPyro's ``concentration``);
        default ``dim + 2``.
    :param scale_matrix: ``W_0`` ``(dim, dim)``; default ``I / ν_0`` (so that ``E[Λ_k] = I``).
    :param max_clusters: ``K`` (default ``num_obs``).
    """
    num_obs, dim, k, z = _partition(num_obs, dim, mass, sigma, tau, max_clusters)
    likelihood = _normal_wishart(k, dim, loc, kappa, dof, scale_matrix)
    return _observe(likelihood(z), obs, num_obs, dim)


def nggp_diagonal_gaussian_mixture(
    obs=None,
    *,
    num_obs,
    dim,
    mass=1.0,
    sigma=0.0,
    tau=1.0,
    loc=0.0,
    kappa=1.0,
    concentration=1.0,
    rate=1.0,
    max_clusters=None,
):
    r"""NGGP mixture of diagonal Gaussians with independent Normal–Gamma priors per dimension.

    .. math::
        z \sim \mathrm{NGGP}(a, σ, τ), \quad λ_{kd} \sim \mathrm{Gamma}(a_0, b_0), \quad
        μ_{kd} \mid λ_{kd} \sim N(m_0, 1/(κ_0 λ_{kd})), \quad
        x_{nd} \sim N(μ_{z_n d}, 1/λ_{z_n d})

    (Murphy 2007). A cluster's predictive is a product of Student-t densities
    (:class:`~numpyro_bnp.families.NormalGamma`).

    Sites: ``z`` ``(num_obs,)``, ``lam`` ``(K, dim)`` (precisions), ``mu`` ``(K, dim)``,
    ``obs`` ``(num_obs, dim)``.

    :param loc: ``m_0``, a scalar or ``(dim,)``; :param kappa: ``κ_0 > 0``, a scalar or
        ``(dim,)``.
    :param concentration: the Gamma's shape ``a_0 > 0``; :param rate: its rate ``b_0 > 0``, a
        scalar or ``(dim,)``.
    :param mass: as in :func:`nggp_gaussian_mixture`.
    :param sigma: as in :func:`nggp_gaussian_mixture`.
    :param tau: as in :func:`nggp_gaussian_mixture`.
    :param max_clusters: as in :func:`nggp_gaussian_mixture`.

    The defaults suit data of unit scale. Otherwise scale the prior to the data, e.g. ``loc`` the
    data's mean, ``kappa=0.1`` and ``rate`` a fraction ``s`` of each dimension's variance (with
    ``concentration=1`` a cluster's expected precision is that of the data divided by ``s``;
    pick ``s`` on held-out data): on pixel intensities the defaults give a handful of clusters
    (docs/nrm.md).
    """
    num_obs, dim, k, z = _partition(num_obs, dim, mass, sigma, tau, max_clusters)
    likelihood = _normal_gamma(k, dim, loc, kappa, concentration, rate)
    return _observe(likelihood(z), obs, num_obs, dim)


def nggp_normal_mixture(
    obs=None,
    *,
    num_obs,
    dim,
    mass=1.0,
    sigma=0.0,
    tau=1.0,
    loc=0.0,
    sigma_mu=1.0,
    sigma_o=0.1,
    max_clusters=None,
):
    r"""NGGP mixture of Gaussians with a known noise and a Gaussian prior on the means.

    .. math::
        z \sim \mathrm{NGGP}(a, σ, τ), \quad μ_k \sim N(m_0, σ_μ^2 I_D), \quad
        x_n \sim N(μ_{z_n}, σ_o^2 I_D)

    (Bishop 2006, Section 2.3.6). A cluster's predictive is ``N(m, σ_o^2 + s^2)`` per dimension
    (:class:`~numpyro_bnp.families.NormalNormal`).

    Sites: ``z`` ``(num_obs,)``, ``mu`` ``(K, dim)``, ``obs`` ``(num_obs, dim)``.

    :param loc: ``m_0``, a scalar or ``(dim,)``.
    :param sigma_mu: the prior standard deviation ``σ_μ`` of each mean entry (scalar or
        ``(dim,)``).
    :param sigma_o: the known observation noise standard deviation ``σ_o`` (scalar or
        ``(dim,)``).
    :param mass: as in :func:`nggp_gaussian_mixture`.
    :param sigma: as in :func:`nggp_gaussian_mixture`.
    :param tau: as in :func:`nggp_gaussian_mixture`.
    :param max_clusters: as in :func:`nggp_gaussian_mixture`.
    """
    num_obs, dim, k, z = _partition(num_obs, dim, mass, sigma, tau, max_clusters)
    likelihood = _normal_normal(k, dim, loc, sigma_mu, sigma_o)
    return _observe(likelihood(z), obs, num_obs, dim)


def nggp_poisson_mixture(
    obs=None,
    *,
    num_obs,
    dim,
    mass=1.0,
    sigma=0.0,
    tau=1.0,
    concentration=1.0,
    rate=1.0,
    max_clusters=None,
):
    r"""NGGP mixture of Poisson counts with Gamma rates.

    .. math::
        z \sim \mathrm{NGGP}(a, σ, τ), \quad θ_{kd} \sim \mathrm{Gamma}(a_0, b_0), \quad
        x_{nd} \sim \mathrm{Poisson}(θ_{z_n d});

    a cluster's predictive is negative binomial (:class:`~numpyro_bnp.families.GammaPoisson`).

    Sites: ``z`` ``(num_obs,)``, ``theta`` ``(K, dim)`` (rates), ``obs`` ``(num_obs, dim)``.

    :param concentration: the Gamma's shape ``a_0 > 0``; :param rate: its rate ``b_0 > 0``.
    :param mass: as in :func:`nggp_gaussian_mixture`.
    :param sigma: as in :func:`nggp_gaussian_mixture`.
    :param tau: as in :func:`nggp_gaussian_mixture`.
    :param max_clusters: as in :func:`nggp_gaussian_mixture`.
    """
    num_obs, dim, k, z = _partition(num_obs, dim, mass, sigma, tau, max_clusters)
    likelihood = _gamma_poisson(k, dim, concentration, rate)
    return _observe(likelihood(z), obs, num_obs, dim)


def nggp_bernoulli_mixture(
    obs=None,
    *,
    num_obs,
    dim,
    mass=1.0,
    sigma=0.0,
    tau=1.0,
    concentration1=1.0,
    concentration0=1.0,
    max_clusters=None,
):
    r"""NGGP mixture of independent Bernoulli vectors (binary data) with Beta probabilities.

    .. math::
        z \sim \mathrm{NGGP}(a, σ, τ), \quad θ_{kd} \sim \mathrm{Beta}(α_0, β_0), \quad
        x_{nd} \sim \mathrm{Bernoulli}(θ_{z_n d})

    (:class:`~numpyro_bnp.families.BetaBernoulli`).

    Sites: ``z`` ``(num_obs,)``, ``theta`` ``(K, dim)`` (probabilities of a one), ``obs``
    ``(num_obs, dim)``.

    :param concentration1: the Beta's ``α_0 > 0`` (counts ones, as in NumPyro's ``Beta``);
        :param concentration0: its ``β_0 > 0``.
    :param mass: as in :func:`nggp_gaussian_mixture`.
    :param sigma: as in :func:`nggp_gaussian_mixture`.
    :param tau: as in :func:`nggp_gaussian_mixture`.
    :param max_clusters: as in :func:`nggp_gaussian_mixture`.
    """
    num_obs, dim, k, z = _partition(num_obs, dim, mass, sigma, tau, max_clusters)
    likelihood = _beta_bernoulli(k, dim, concentration1, concentration0)
    return _observe(likelihood(z), obs, num_obs, dim)


def _check_pitman_yor(mass, discount):
    """Check a Pitman–Yor ``(discount d, mass θ)``: ``0 <= d < 1`` and ``θ > -d`` (``θ > 0`` for
    the Dirichlet process, ``d = 0``); concrete values only."""
    _check(lambda d: (d >= 0) & (d < 1), "discount", "in [0, 1)", discount)
    if not is_concrete(discount) or np.all(np.asarray(discount) == 0):
        _positive(mass=mass)
    else:
        _check(lambda m: m > -np.asarray(discount), "mass", "finite and > -discount", mass)


def stick_breaking_sites(mass, discount, truncation):
    r"""Sample the sticks of a truncated Pitman–Yor stick-breaking; return its weights ``(T,)``.

    .. math::
        v_k \sim \mathrm{Beta}(1 - d,\; θ + k d) \ (k = 1, \dots, T - 1), \quad
        w_k = v_k \prod_{j<k} (1 - v_j), \quad w_T = \prod_{j<T} (1 - v_j)

    (Pitman & Yor, *The two-parameter Poisson–Dirichlet distribution*, Ann. Probab. 1997;
    Ishwaran & James, JASA 2001, Section 3: the truncation ``PY_T`` sets the last stick to 1).
    ``d = 0`` is the Dirichlet process of concentration ``θ`` (sticks ``Beta(1, θ)``).

    Sites: ``v`` ``(T - 1,)`` in a ``numpyro.plate("stick", T - 1)`` (none when ``T = 1``) and the
    deterministic ``weights`` ``(T,)``. Shared by :func:`dp_mixture` and
    :func:`numpyro_bnp.infer.truncated_twin`.

    :param mass: the strength ``θ`` (``> 0`` for ``d = 0``, ``> -d`` otherwise).
    :param discount: the discount ``d ∈ [0, 1)``.
    :param int truncation: ``T >= 1``.
    """
    truncation = positive_int(truncation, "truncation")
    _check_pitman_yor(mass, discount)
    weights = jnp.ones(1)
    if truncation > 1:  # numpyro.plate has no size 0: one cluster has no sticks
        if is_concrete(discount) and np.all(np.asarray(discount) == 0):
            prior = dist.Beta(1.0, mass)  # the Dirichlet process: one Beta(1, α) for all sticks
        else:
            k = jnp.arange(1, truncation, dtype=jnp.result_type(float))
            prior = dist.Beta(1.0 - discount, mass + discount * k)
        with numpyro.plate("stick", truncation - 1):
            sticks = numpyro.sample("v", prior)
        weights = stick_breaking_weights(sticks)
    return numpyro.deterministic("weights", weights)


def dp_mixture(
    obs=None,
    *,
    num_obs,
    dim,
    mass=1.0,
    truncation=10,
    components="gaussian",
    discount=0.0,
    **prior,
):
    r"""Dirichlet-process (or Pitman–Yor) mixture by truncated stick-breaking, with conjugate
    components.

    .. math::
        v_k \sim \mathrm{Beta}(1 - d, α + k d) \ (k < T), \quad
        w_k = v_k \prod_{j<k} (1 - v_j), \quad w_T = \prod_{j<T} (1 - v_j), \quad
        θ_k \overset{iid}{\sim} H_0, \quad z_n \sim \mathrm{Categorical}(w), \quad
        x_n \mid z, θ \sim F(θ_{z_n})

    (the truncation ``DP_T`` of Ishwaran & James, *Gibbs sampling methods for stick-breaking
    priors*, JASA 2001: the last stick is 1; Blei & Jordan, *Variational inference for Dirichlet
    process mixtures*, Bayesian Analysis 2006). ``T = truncation`` bounds the clusters; ``E[w_1]
    = (1 - d) / (1 + α)``. The discount ``d = 0`` (default) is the Dirichlet process of
    concentration ``α``, ``d > 0`` the Pitman–Yor process ``PY(d, α)`` (Pitman & Yor, Ann.
    Probab. 1997; ``PY_T`` of Ishwaran & James 2001, Section 3), :func:`stick_breaking_sites`.

    Sites: ``v`` ``(T - 1,)`` in a ``numpyro.plate("stick", T - 1)`` (no sticks when ``T = 1``:
    one cluster, ``w = [1]``), the deterministic ``weights`` ``(T,)``, the components in a
    ``numpyro.plate("cluster", T)`` (the sites of the NGGP model of the same family), the labels
    ``z`` ``(num_obs,)`` (``Categorical(w)``, marked ``infer={"enumerate": "parallel"}``) and
    ``obs`` ``(num_obs, dim)``, both in a ``numpyro.plate("row", num_obs)``.

    :param obs: observations ``(num_obs, dim)`` or ``None`` (prior predictive).
    :param int num_obs: ``N``; :param int dim: ``D``.
    :param mass: the DP's concentration ``α > 0`` (the Pitman–Yor strength, ``α > -d``, when
        ``discount > 0``).
    :param int truncation: the truncation ``T >= 1``: the number of clusters, ``T - 1`` sticks
        (the mixture engines read ``α`` from the sticks: they need ``T >= 2``).
    :param str components: the conjugate family ``H_0``, ``F``, with the priors, sites and
        keyword names of an NGGP model: ``"gaussian"`` (Normal–Wishart, as
        :func:`nggp_gaussian_mixture`: ``loc``, ``kappa``, ``dof``, ``scale_matrix``),
        ``"diagonal_gaussian"`` (Normal–Gamma, :func:`nggp_diagonal_gaussian_mixture`: ``loc``,
        ``kappa``, ``concentration``, ``rate``), ``"normal"`` (known noise,
        :func:`nggp_normal_mixture`: ``loc``, ``sigma_mu``, ``sigma_o``), ``"poisson"``
        (:func:`nggp_poisson_mixture`: ``concentration``, ``rate``) or ``"bernoulli"``
        (:func:`nggp_bernoulli_mixture`: ``concentration1``, ``concentration0``).
    :param discount: the Pitman–Yor discount ``d ∈ [0, 1)``; ``0``: the Dirichlet process. The
        mixture engines (``PowerPriorSVB``) read ``d = 0`` only (their sticks are ``Beta(1, α)``);
        NumPyro's engines run any ``d``.
    :param prior: the component prior's keywords (defaults as in the NGGP model).
    :raises ValueError: for an unknown ``components``, a prior keyword the family does not take,
        ``truncation`` not a whole number ``>= 1``, ``discount`` outside ``[0, 1)`` or ``mass <= 0``
        (``mass <= -discount`` when ``discount > 0``).

    Inference: ``PowerPriorSVB`` of :mod:`numpyro_bnp.infer` streams it; the engines of NGGP
    mixtures (``ADFNRM``, ``EPNRM``) refuse it (``docs/model_contract.md``). NumPyro's NUTS sums
    the labels out (``MCMC(NUTS(dp_mixture), ...)`` samples ``v`` and the components), and so
    does SVI with ``TraceEnum_ELBO``, whose guide must leave ``z`` to the enumeration; both need
    ``funsor`` (``pip install funsor``):

    >>> import numpy as np
    >>> from jax import random
    >>> from numpyro import handlers
    >>> from numpyro.infer import SVI, Predictive, TraceEnum_ELBO
    >>> from numpyro.infer.autoguide import AutoNormal
    >>> from numpyro.optim import Adam
    >>> from numpyro_bnp.models import dp_mixture
    >>> draws = Predictive(dp_mixture, num_samples=2)(
    ...     random.PRNGKey(0), num_obs=6, dim=2, truncation=4, components="poisson"
    ... )
    >>> draws["v"].shape, draws["weights"].shape, draws["theta"].shape, draws["obs"].shape
    ((2, 3), (2, 4), (2, 4, 2), (2, 6, 2))
    >>> x = np.repeat([[-2.0], [2.0]], 10, axis=0)  # two clusters of 10 rows
    >>> kw = dict(num_obs=20, dim=1, truncation=3, components="normal", sigma_mu=3.0)
    >>> guide = AutoNormal(handlers.block(dp_mixture, hide=["z"]))  # v and mu; z is summed out
    >>> svi = SVI(dp_mixture, guide, Adam(0.05), TraceEnum_ELBO())
    >>> fit = svi.run(random.PRNGKey(1), 300, x, progress_bar=False, **kw)
    >>> weights = Predictive(dp_mixture, guide=guide, params=fit.params, num_samples=100)(
    ...     random.PRNGKey(2), x, **kw
    ... )["weights"]
    >>> int((weights.mean(0) > 0.4).sum())  # two weights near 1/2, the third near 0
    2
    """
    num_obs, dim = positive_int(num_obs, "num_obs"), positive_int(dim, "dim")
    truncation = positive_int(truncation, "truncation")
    _check_pitman_yor(mass, discount)
    _check_obs(obs, num_obs, dim)
    if components not in _COMPONENTS:
        raise ValueError(f"components must be one of {list(_COMPONENTS)}, got {components!r}")
    family = _COMPONENTS[components]
    takes = list(inspect.signature(family).parameters)[2:]  # after (k, dim)
    if unknown := sorted(set(prior) - set(takes)):
        raise ValueError(
            f"components={components!r} takes the prior keywords {takes}; got {unknown} "
            "(each family keeps the keyword names of its NGGP model)"
        )
    weights = stick_breaking_sites(mass, discount, truncation)
    likelihood = family(truncation, dim, **prior)
    with numpyro.plate("row", num_obs):
        z = numpyro.sample("z", dist.Categorical(weights), infer={"enumerate": "parallel"})
        return numpyro.sample("obs", likelihood(z), obs=obs)
