"""The ready latent feature and latent trait models (re-exported by :mod:`numpyro_bnp.models`)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from numpyro_bnp._checks import is_concrete, positive_int, renamed_arguments
from numpyro_bnp.distributions import (
    BetaProcess,
    GammaProcess,
    RecursiveIBP,
    RestrictedBernoulliProcess,
    ibp_capacity,
)
from numpyro_bnp.distributions.crm import _check
from numpyro_bnp.models.mixtures import _positive

__all__ = [
    "beta_bernoulli_linear_gaussian",
    "binary_features",
    "bnb_combinatorial_clustering",
    "factor_analysis",
    "gamma_poisson_linear_gaussian",
    "linear_gaussian",
    "restricted_linear_gaussian",
]


def _sizes(**sizes):
    """Check the static sizes of a model (positive integers, ``None`` where optional)."""
    return [None if v is None else positive_int(v, name) for name, v in sizes.items()]


def _observe(name, fn, value):
    """The observed ``(N, D)`` site ``name``: rows in a ``numpyro.plate("row", N)``, columns an
    event (``.to_event(1)``), so the log-likelihood has one term per row (``arviz.loo``). ``N``
    follows the rows of the mean (``Z @ A``): the streaming engines substitute a single row."""
    with numpyro.plate("row", fn.batch_shape[0]):
        return numpyro.sample(name, fn.to_event(1), obs=value)


def _learned(mass, sigma_o, max_features):
    """``(mass, sigma_o)``: each one given as a NumPyro distribution (a prior, for an engine that
    learns it, e.g. ``RIBPFilter(feature_update="memoized")``) becomes a sample site of the same
    name; numbers are checked (finite, > 0) and returned."""
    if isinstance(mass, dist.Distribution):
        if max_features is None:
            raise ValueError(
                "a model whose mass is a distribution needs max_features (the capacity of the "
                "IBP matrix cannot follow a random mass)"
            )
        mass = numpyro.sample("mass", mass)
    else:
        _positive(mass=mass)
    if isinstance(sigma_o, dist.Distribution):
        sigma_o = numpyro.sample("sigma_o", sigma_o)
    else:
        _positive(sigma_o=sigma_o)
    return mass, sigma_o


def _capacity(mass, concentration, num_obs, max_features):
    if max_features is None:
        with jax.ensure_compile_time_eval():  # the model may be traced under jit
            return ibp_capacity(mass, concentration, num_rows=num_obs)
    return max_features


def _ibp_features(mass, concentration, sigma_a, num_obs, dim, max_features):
    """The capacity ``K`` (``max_features``, or :func:`ibp_capacity`'s), the binary features
    ``Z ~ IBP(α, β)`` ``(N, K)`` and their traits ``A_k ~ N(0, σ_A² I_D)`` ``(K, D)``."""
    num_features = _capacity(mass, concentration, num_obs, max_features)
    ibp = RecursiveIBP(mass, concentration, num_rows=num_obs, max_features=num_features)
    z = numpyro.sample("Z", ibp)
    a = numpyro.sample("A", dist.Normal(0.0, sigma_a).expand([num_features, dim]).to_event(2))
    return num_features, z, a


@renamed_arguments(alpha="mass", beta="concentration")
def linear_gaussian(
    obs=None,
    *,
    num_obs,
    dim,
    mass=1.0,
    concentration=1.0,
    sigma_a=1.0,
    sigma_o=0.1,
    max_features=None,
):
    r"""Linear-Gaussian latent feature model with an IBP(α, β) prior.

    .. math::
        Z \sim \mathrm{IBP}(α, β), \quad A_k \sim N(0, σ_A^2 I_D), \quad
        o_n \mid Z, A \sim N(z_n A, σ_o^2 I_D).

    The two-parameter IBP(α, β) is the marginal of the beta process with mass α and
    concentration β (Thibaux & Jordan 2007;
    :meth:`~numpyro_bnp.distributions.RecursiveIBP.as_beta_process`), hence the names of its
    arguments here.

    Sites: ``Z`` ``(num_obs, K)`` binary, ``A`` ``(K, dim)``, ``obs`` ``(num_obs, dim)``.

    :param obs: observations ``(num_obs, dim)`` or ``None`` (prior predictive).
    :param int num_obs: number of rows ``N``.
    :param int dim: observation dimension ``D``.
    :param mass: the IBP's α > 0 (expected number of features per row; ``alpha`` before), or a
        prior for it (a NumPyro distribution, e.g. ``dist.Gamma(1.0, 0.2)``: a site ``mass``;
        then ``max_features`` is required).
    :param concentration: the IBP's β > 0 (``beta`` before).
    :param sigma_a: prior standard deviation σ_A of each feature entry.
    :param sigma_o: observation noise standard deviation σ_o, or a prior for it (e.g.
        ``dist.HalfNormal(1.0)``: a site ``sigma_o``). ``RIBPFilter(feature_update="memoized")``
        learns the parameters given priors.
    :param max_features: capacity ``K`` of the IBP matrix; ``None`` picks one that truncates
        with probability below 1e-6 (:func:`~numpyro_bnp.distributions.ibp_capacity`).
    """
    num_obs, dim, max_features = _sizes(num_obs=num_obs, dim=dim, max_features=max_features)
    mass, sigma_o = _learned(mass, sigma_o, max_features)
    _positive(concentration=concentration, sigma_a=sigma_a)
    _, z, a = _ibp_features(mass, concentration, sigma_a, num_obs, dim, max_features)
    return _observe("obs", dist.Normal(z @ a, sigma_o), obs)


@renamed_arguments(alpha="mass", beta="concentration")
def factor_analysis(
    obs=None,
    *,
    num_obs,
    dim,
    mass=1.0,
    concentration=1.0,
    sigma_a=1.0,
    sigma_o=0.1,
    sigma_w=1.0,
    max_features=None,
):
    r"""Infinite factor analysis: binary feature use times a Gaussian weight per row.

    .. math::
        Z \sim \mathrm{IBP}(α, β), \quad A_k \sim N(0, σ_A^2 I_D), \quad
        w_n \sim N(0, σ_w^2 I_K), \quad o_n \mid \cdot \sim N((z_n \odot w_n) A, σ_o^2 I_D).

    Sites: ``Z`` ``(num_obs, K)``, ``A`` ``(K, dim)``, ``W`` ``(num_obs, K)``, ``obs``
    ``(num_obs, dim)``. ``sigma_w`` is the standard deviation σ_w of the weights; it may be a
    ``(K,)`` array (a diagonal Σ_w). ``mass`` is the IBP's α, ``concentration`` its β; the other
    parameters as in :func:`linear_gaussian` (``mass`` and ``sigma_o`` may be priors).
    """
    num_obs, dim, max_features = _sizes(num_obs=num_obs, dim=dim, max_features=max_features)
    mass, sigma_o = _learned(mass, sigma_o, max_features)
    _positive(concentration=concentration, sigma_a=sigma_a, sigma_w=sigma_w)
    num_features, z, a = _ibp_features(mass, concentration, sigma_a, num_obs, dim, max_features)
    w = numpyro.sample("W", dist.Normal(0.0, sigma_w).expand([num_obs, num_features]).to_event(2))
    return _observe("obs", dist.Normal((z * w) @ a, sigma_o), obs)


def binary_features(
    obs=None,
    *,
    num_obs,
    dim,
    mass=1.0,
    concentration=1.0,
    sigma_a=1.0,
    bias=0.0,
    max_features=None,
):
    r"""Binary observations from latent features through a logistic link (e.g. pixels).

    .. math::
        Z \sim \mathrm{IBP}(α, β), \quad A_k \sim N(0, σ_A^2 I_D), \quad
        o_{nd} \mid Z, A, b \sim \mathrm{Bernoulli}(\mathrm{sigmoid}(z_n A_{\cdot d} + b_d)).

    Sites: ``Z`` ``(num_obs, K)``, ``A`` ``(K, dim)``, ``obs`` ``(num_obs, dim)``, and ``bias``
    ``(dim,)`` when ``bias`` is a prior. ``RIBPFilter(feature_update="memoized")`` fits it
    through the Jaakkola–Jordan bound and learns the parameters given priors.

    :param bias: the logits' offset ``b`` (a number or a ``(dim,)`` array), or a prior for each
        of its entries (a NumPyro distribution, e.g. ``dist.Normal(0.0, 3.0)``: a site ``bias``).
    :param mass: as in :func:`linear_gaussian`.
    :param concentration: as in :func:`linear_gaussian`.
    :param sigma_a: as in :func:`linear_gaussian`.
    :param max_features: as in :func:`linear_gaussian`.
    """
    num_obs, dim, max_features = _sizes(num_obs=num_obs, dim=dim, max_features=max_features)
    mass, _ = _learned(mass, 1.0, max_features)
    _positive(concentration=concentration, sigma_a=sigma_a)
    if isinstance(bias, dist.Distribution):
        bias = numpyro.sample("bias", bias.expand([dim]).to_event(1))
    _, z, a = _ibp_features(mass, concentration, sigma_a, num_obs, dim, max_features)
    return _observe("obs", dist.Bernoulli(logits=z @ a + bias), obs)


@renamed_arguments(alpha="mass")
def restricted_linear_gaussian(
    obs=None,
    *,
    num_obs,
    dim,
    count_dist,
    mass=1.0,
    concentration=1.0,
    sigma_a=1.0,
    sigma_o=0.1,
    max_features=None,
):
    r"""Linear-Gaussian latent feature model with a restricted IBP prior (weak-limit truncation).

    .. math::
        π_k \sim \mathrm{Beta}(cα/K,\; c - cα/K), \quad
        z_n \mid π \sim \mathrm{RBeP}(π, f), \quad A_k \sim N(0, σ_A^2 I_D), \quad
        o_n \mid Z, A \sim N(z_n A, σ_o^2 I_D),

    ``k = 1..K``, ``n = 1..N``: the weak-limit beta process (Doshi-Velez & Williamson 2017, Eq. 13)
    with ``K`` atoms, and rows from the
    :class:`~numpyro_bnp.distributions.RestrictedBernoulliProcess` whose number of ones has law
    ``f`` = ``count_dist`` exactly (ibid., Eq. 5). As ``K`` grows the prior on ``Z`` tends to the
    R-IBP(c, α, f). Posterior inference: :class:`~numpyro_bnp.infer.RestrictedIBPGibbs`.

    Sites: ``pi`` ``(K,)``, ``Z`` ``(num_obs, K)`` binary, ``A`` ``(K, dim)``, ``obs``
    ``(num_obs, dim)``.

    :param obs: observations ``(num_obs, dim)`` or ``None`` (prior predictive).
    :param int num_obs: number of rows ``N``.
    :param int dim: observation dimension ``D``.
    :param count_dist: law ``f`` of the number of features per row: a scalar NumPyro distribution
        on the non-negative integers (``dist.Poisson(3.0)``, ``dist.Categorical(p)``,
        :func:`~numpyro_bnp.distributions.exactly`), or one with batch shape ``(num_obs,)`` (a law
        per row: the partially exchangeable R-IBP of Doshi-Velez & Williamson 2017, §4); unbounded
        laws are cut to ``0..K`` and renormalised.
    :param mass: the beta-process mass α, ``0 < α < K`` (the prior mean of ``Σ_k π_k``; ``alpha``
        before).
    :param concentration: the beta-process concentration ``c > 0``.
    :param sigma_a: prior standard deviation σ_A of each feature entry.
    :param sigma_o: observation noise standard deviation σ_o.
    :param max_features: number of atoms ``K``; ``None`` picks the IBP(α, c) capacity of
        :func:`~numpyro_bnp.distributions.ibp_capacity` (more features than ``num_obs`` IBP rows
        use with probability below 1e-6).
    """
    num_obs, dim, max_features = _sizes(num_obs=num_obs, dim=dim, max_features=max_features)
    _positive(mass=mass, concentration=concentration, sigma_a=sigma_a, sigma_o=sigma_o)
    num_features = _capacity(mass, concentration, num_obs, max_features)
    if is_concrete(mass) and not np.all(np.asarray(mass) < num_features):
        raise ValueError(
            f"mass must be < max_features: the weak-limit beta process gives each of the K = "
            f"{num_features} atoms the prior Beta(c α/K, c - c α/K) with α the mass, which "
            f"needs mass < K; got mass={mass!r}. Increase max_features (K) or lower mass"
        )
    shape = concentration * mass / num_features
    pi = numpyro.sample(
        "pi", dist.Beta(shape, concentration - shape).expand([num_features]).to_event(1)
    )
    z = numpyro.sample(
        "Z", RestrictedBernoulliProcess(pi, count_dist).expand([num_obs]).to_event(1)
    )
    a = numpyro.sample("A", dist.Normal(0.0, sigma_a).expand([num_features, dim]).to_event(2))
    return _observe("obs", dist.Normal(z @ a, sigma_o), obs)


def _crm_truncation(mean_active, max_features):
    """The number of atoms of a CRM prior draw (the CRM's ``truncation``): ``max_features``, by
    default the mean number used plus 12 sd plus 10."""
    if max_features is not None:
        return positive_int(max_features, "max_features")
    return int(np.ceil(mean_active + 12.0 * np.sqrt(mean_active) + 10.0))


def _crm_trait_model(obs, crm, count_fn, num_obs, dim, sigma_a, sigma_o):
    theta = numpyro.sample("theta", crm)
    num_atoms = jnp.shape(theta)[-1]  # follows the substituted value (samplers may resize it)
    x = numpyro.sample("X", count_fn(theta).expand([num_obs, num_atoms]).to_event(2))
    psi = numpyro.sample("psi", dist.Normal(0.0, sigma_a).expand([num_atoms, dim]).to_event(2))
    return _observe("obs", dist.Normal(x @ psi, sigma_o), obs)


@renamed_arguments(sigma="sigma_o", sigma0="sigma_a", truncation="max_features")
def beta_bernoulli_linear_gaussian(
    obs=None,
    *,
    num_obs,
    dim,
    mass=1.0,
    concentration=1.0,
    sigma_a=0.5,
    sigma_o=0.2,
    max_features=None,
):
    r"""Beta–Bernoulli linear-Gaussian feature model (Zhu, Bouchard-Côté & Campbell 2020, §4.1).

    .. math::
        θ \sim \mathrm{BP}(c, λ), \quad X_{nk} \sim \mathrm{Bernoulli}(θ_k), \quad
        ψ_k \sim N(0, σ_0^2 I_D), \quad y_n \sim N(\textstyle\sum_k X_{nk} ψ_k, σ^2 I_D).

    Sites: ``theta`` ``(K,)`` (the ``K`` largest atoms of the beta process), ``X`` ``(N, K)``,
    ``psi`` ``(K, D)``, ``obs`` ``(N, D)``. The paper's experiment uses ``mass = c = 1``,
    ``concentration = 1``, ``(σ, σ_0) = (0.2, 0.5)``.

    :param obs: observations ``(num_obs, dim)`` or ``None`` (prior predictive).
    :param int num_obs: number of rows ``N``.
    :param int dim: observation dimension ``D``.
    :param mass: the beta process's mass ``c`` > 0 (the expected number of features per row).
    :param concentration: its concentration λ > 0.
    :param sigma_a: the paper's σ_0, prior standard deviation of each trait entry (``sigma0``
        before).
    :param sigma_o: the paper's σ, observation noise standard deviation (``sigma`` before).
    :param max_features: the number ``K`` of atoms of a prior draw of ``theta`` (the
        ``BetaProcess``'s ``truncation``; ``truncation`` before); ``None``: the mean number of
        features ``c Σ_n λ/(λ+n-1)`` plus a margin. It only sizes prior draws:
        :class:`~numpyro_bnp.infer.CRMSlice` is untruncated up to its own capacity, and ``K``
        follows the substituted ``theta``.
    """
    num_obs, dim = _sizes(num_obs=num_obs, dim=dim)
    _positive(mass=mass, concentration=concentration, sigma_a=sigma_a, sigma_o=sigma_o)
    mean_active = mass * float(np.sum(concentration / (concentration + np.arange(num_obs))))
    crm = BetaProcess(mass, concentration, truncation=_crm_truncation(mean_active, max_features))
    return _crm_trait_model(obs, crm, dist.Bernoulli, num_obs, dim, sigma_a, sigma_o)


@renamed_arguments(sigma="sigma_o", sigma0="sigma_a", truncation="max_features")
def gamma_poisson_linear_gaussian(
    obs=None, *, num_obs, dim, mass=1.0, rate=1.0, sigma_a=0.5, sigma_o=0.2, max_features=None
):
    r"""Gamma–Poisson linear-Gaussian model: rows use each feature a Poisson number of times.

    .. math::
        θ \sim \mathrm{ΓP}(γ, λ), \quad X_{nk} \sim \mathrm{Poisson}(θ_k), \quad
        ψ_k \sim N(0, σ_0^2 I_D), \quad y_n \sim N(\textstyle\sum_k X_{nk} ψ_k, σ^2 I_D).

    The gamma process has Lévy density ``γ θ^{-1} e^{-λθ}``: a row uses ``γ/λ`` features on
    average (with multiplicity) and ``N`` rows use ``γ log(1 + N/λ)`` distinct features on
    average. ``mass`` is γ, ``rate`` is λ; ``sigma_a`` (σ_0), ``sigma_o`` (σ), ``max_features``
    (default ``γ log(1 + N/λ)`` plus a margin) and the sites as in
    :func:`beta_bernoulli_linear_gaussian`.
    """
    num_obs, dim = _sizes(num_obs=num_obs, dim=dim)
    _positive(mass=mass, rate=rate, sigma_a=sigma_a, sigma_o=sigma_o)
    mean_active = mass * float(np.log1p(num_obs / rate))
    crm = GammaProcess(mass, rate, truncation=_crm_truncation(mean_active, max_features))
    return _crm_trait_model(obs, crm, dist.Poisson, num_obs, dim, sigma_a, sigma_o)


@renamed_arguments(truncation="max_features")
def bnb_combinatorial_clustering(
    counts=None,
    *,
    doc_lengths,
    vocab_size,
    mass=1.0,
    concentration=1.1,
    topic_concentration=0.1,
    max_features=None,
):
    r"""Beta–negative-binomial combinatorial clustering of documents (topic model; §4.2).

    Zhu, Bouchard-Côté & Campbell (2020, §4.2) after Broderick et al. (2015): topics ``ψ_k`` share
    a beta-process rate ``θ_k``; document ``d`` has a gamma rate per topic, and word counts are
    Poisson, so that the number of words of document ``d`` from topic ``k`` is
    ``NB(r_d, θ_k)``:

    .. math::
        θ \sim \mathrm{BP}(α, λ), \quad ψ_k \sim \mathrm{Dir}(β 1_V), \quad
        π_{dk} \sim \mathrm{Gamma}(r_d, \text{scale } θ_k/(1-θ_k)), \quad
        y_{dv} \sim \mathrm{Poisson}(\textstyle\sum_k π_{dk} ψ_{kv}),

    with ``r_d = N_d (λ-1)/(αλ)``, which makes the prior expected length of document ``d`` equal to
    ``N_d`` (derived here: with ``ν(dθ) = αλ θ^{-1}(1-θ)^{λ-1} dθ`` the expected count is
    ``r_d ∫ θ/(1-θ) ν(dθ) = r_d αλ/(λ-1)``; ``docs/crm_slice.md``, "Topic models"). The paper's
    setting is ``(α, λ, β) = (1, 1.1, 0.1)``.

    Sites: ``theta`` ``(K,)``, ``topics`` ``(K, V)``, ``rates`` ``(D, K)``, ``counts`` ``(D, V)``.

    :param counts: word-count matrix ``(num_docs, vocab_size)`` or ``None``.
    :param doc_lengths: ``(num_docs,)`` lengths ``N_d`` (they set ``r_d``).
    :param int vocab_size: ``V``.
    :param mass: the beta process's α > 0.
    :param concentration: its λ > 1.
    :param topic_concentration: the Dirichlet parameter β of the topics.
    :param max_features: the number ``K`` of topics (atoms) of a prior draw (the
        ``BetaProcess``'s ``truncation``; ``truncation`` before); ``None``: the mean number of
        topics used plus a margin.
    """
    (vocab_size,) = _sizes(vocab_size=vocab_size)
    _positive(mass=mass, topic_concentration=topic_concentration, doc_lengths=doc_lengths)
    _check(lambda c: c > 1, "concentration", "finite and > 1 (r_d > 0 needs it)", concentration)
    doc_lengths = jnp.asarray(doc_lengths)
    if doc_lengths.ndim != 1 or doc_lengths.shape[0] < 1:
        raise ValueError(f"doc_lengths must have shape (num_docs,), got {doc_lengths.shape}")
    num_docs = doc_lengths.shape[0]
    r = doc_lengths * (concentration - 1.0) / (mass * concentration)
    if max_features is None:
        mean = mass * float(np.sum(concentration / (concentration + np.arange(num_docs))))
        max_features = _crm_truncation(mean, None)
    num_topics = positive_int(max_features, "max_features")
    theta = numpyro.sample("theta", BetaProcess(mass, concentration, truncation=num_topics))
    num_atoms = jnp.shape(theta)[-1]
    topics = numpyro.sample(
        "topics",
        dist.Dirichlet(jnp.full(vocab_size, topic_concentration)).expand([num_atoms]).to_event(1),
    )
    odds = theta / (1.0 - theta)
    rates = numpyro.sample(
        "rates", dist.Gamma(r[:, None], 1.0 / odds).expand([num_docs, num_atoms]).to_event(2)
    )
    return _observe("counts", dist.Poisson(rates @ topics), counts)
