r"""Ready NumPyro mixture models with a normalized generalized gamma process (NGGP) partition.

Every model here draws a partition of the ``N`` rows from
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
* :func:`nggp_bernoulli_mixture` — binary data, Beta probabilities.

Sites: the labels ``z`` ``(N,)`` (canonical: clusters numbered in order of appearance), the
components in a ``numpyro.plate("cluster", K)`` and the observations ``obs`` ``(N, D)`` in a
``numpyro.plate("row", N)`` (one log-likelihood term per row for
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
``N``-dimensional support that NumPyro can neither enumerate nor update by Gibbs. Every model
draws from the prior under ``handlers.seed`` or ``numpyro.infer.Predictive``.

The arguments share their names with the other ready models (``docs/vocabulary.md``): ``mass``,
``sigma``, ``tau`` for the NGGP, ``max_clusters`` for the capacity, ``sigma_o`` for a known noise
standard deviation, and NumPyro's own names for the parameters of the component priors.

>>> from jax import random
>>> from numpyro.infer import Predictive
>>> from numpyro_bnp.models import nggp_normal_mixture
>>> draws = Predictive(nggp_normal_mixture, num_samples=2)(
...     random.PRNGKey(0), num_obs=6, dim=2, mass=1.0, sigma=0.5
... )
>>> draws["z"].shape, draws["mu"].shape, draws["obs"].shape
((2, 6), (2, 6, 2), (2, 6, 2))
"""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from numpyro_bnp._checks import is_concrete, positive_int
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.distributions.crm import _check

__all__ = [
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


def _observe(fn, obs, num_obs, dim, name="dim"):
    """The observed site ``obs`` ``(N, D)``, its rows in a ``numpyro.plate("row", N)``."""
    if obs is not None and tuple(jnp.shape(obs)) != (num_obs, dim):
        want = f"(num_obs, {name}) = {(num_obs, dim)}"
        raise ValueError(f"obs must have shape {want}, got {tuple(jnp.shape(obs))}")
    with numpyro.plate("row", num_obs):
        return numpyro.sample("obs", fn, obs=obs)


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
    lengths = jnp.broadcast_to(jnp.asarray(doc_lengths), (num_obs,))
    _check(lambda n: (n >= 0) & (n == np.round(n)), "doc_lengths", "whole numbers >= 0", lengths)
    longest = int(np.max(lengths)) if is_concrete(lengths) else None  # sampling under jit
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
    :param mass, sigma, tau: the NGGP's parameters (:func:`nggp_multinomial_mixture`).
    :param loc: ``m_0``, a scalar or ``(dim,)``.
    :param kappa: ``κ_0 > 0``.
    :param dof: the Wishart's degrees of freedom ``ν_0 > dim - 1`` (NumPyro's ``concentration``);
        default ``dim + 2``.
    :param scale_matrix: ``W_0`` ``(dim, dim)``; default ``I / ν_0`` (so that ``E[Λ_k] = I``).
    :param max_clusters: ``K`` (default ``num_obs``).
    """
    num_obs, dim, k, z = _partition(num_obs, dim, mass, sigma, tau, max_clusters)
    dof = dim + 2.0 if dof is None else dof
    _positive(kappa=kappa, dof=dof)
    scale_matrix = jnp.eye(dim) / dof if scale_matrix is None else jnp.asarray(scale_matrix)
    loc = jnp.broadcast_to(jnp.asarray(loc, jnp.result_type(float)), (dim,))
    with numpyro.plate("cluster", k):
        lam = numpyro.sample("Lambda", dist.Wishart(dof, scale_matrix=scale_matrix))
        mu = numpyro.sample("mu", dist.MultivariateNormal(loc, precision_matrix=kappa * lam))
    fn = dist.MultivariateNormal(_of_cluster(mu, z), precision_matrix=_of_cluster(lam, z))
    return _observe(fn, obs, num_obs, dim)


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
    :param mass, sigma, tau, max_clusters: as in :func:`nggp_gaussian_mixture`.

    The defaults suit data of unit scale. Otherwise scale the prior to the data, e.g. ``loc`` the
    data's mean, ``kappa=0.1`` and ``rate`` a fraction ``s`` of each dimension's variance (with
    ``concentration=1`` a cluster's expected precision is that of the data divided by ``s``;
    pick ``s`` on held-out data): on pixel intensities the defaults give a handful of clusters
    (docs/nrm.md).
    """
    num_obs, dim, k, z = _partition(num_obs, dim, mass, sigma, tau, max_clusters)
    _positive(kappa=kappa, concentration=concentration, rate=rate)
    with numpyro.plate("cluster", k):
        lam = numpyro.sample("lam", dist.Gamma(concentration, rate).expand([dim]).to_event(1))
        mu = numpyro.sample("mu", dist.Normal(loc, 1 / jnp.sqrt(kappa * lam)).to_event(1))
    fn = dist.Normal(_of_cluster(mu, z), 1 / jnp.sqrt(_of_cluster(lam, z))).to_event(1)
    return _observe(fn, obs, num_obs, dim)


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
    :param mass, sigma, tau, max_clusters: as in :func:`nggp_gaussian_mixture`.
    """
    num_obs, dim, k, z = _partition(num_obs, dim, mass, sigma, tau, max_clusters)
    _positive(sigma_mu=sigma_mu, sigma_o=sigma_o)
    with numpyro.plate("cluster", k):
        mu = numpyro.sample("mu", dist.Normal(loc, sigma_mu).expand([dim]).to_event(1))
    return _observe(dist.Normal(_of_cluster(mu, z), sigma_o).to_event(1), obs, num_obs, dim)


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
    :param mass, sigma, tau, max_clusters: as in :func:`nggp_gaussian_mixture`.
    """
    num_obs, dim, k, z = _partition(num_obs, dim, mass, sigma, tau, max_clusters)
    _positive(concentration=concentration, rate=rate)
    with numpyro.plate("cluster", k):
        theta = numpyro.sample("theta", dist.Gamma(concentration, rate).expand([dim]).to_event(1))
    return _observe(dist.Poisson(_of_cluster(theta, z)).to_event(1), obs, num_obs, dim)


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
    :param mass, sigma, tau, max_clusters: as in :func:`nggp_gaussian_mixture`.
    """
    num_obs, dim, k, z = _partition(num_obs, dim, mass, sigma, tau, max_clusters)
    _positive(concentration1=concentration1, concentration0=concentration0)
    with numpyro.plate("cluster", k):
        prior = dist.Beta(concentration1, concentration0).expand([dim]).to_event(1)
        theta = numpyro.sample("theta", prior)
    return _observe(dist.Bernoulli(_of_cluster(theta, z)).to_event(1), obs, num_obs, dim)
