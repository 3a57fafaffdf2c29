r"""The target density of the CRM slice samplers at a state, for its output.

Zhu, Bouchard-Côté & Campbell, *Slice sampling for general completely random measures*, UAI 2020
(the model: paper Eq. 11; ``docs/crm_slice.md``). Each state of the sampler reports
``log_likelihood`` (:func:`log_likelihood`: ``log p(y | X, ψ)`` of the Normal observations) and
``log_joint`` (:func:`log_joint`): the log density of the sampler's target in its own coordinates
(arrivals, uniform marks, counts and traits of the instantiated atoms) with the slice variables,
the atoms after the last instantiated one and their traits integrated out (the names of
``docs/vocabulary.md``). The terms of the atoms and the counts are those of
:class:`~numpyro_bnp.infer.features.crm.atoms.AtomSeries`, the topic model's those of
:mod:`numpyro_bnp.infer.features.crm.topics`. Neither is used by the moves of the sweep: both are
computed for the output only.
"""

import jax.numpy as jnp

from numpyro_bnp.infer.features.crm import topics as topic_model


def log_likelihood(residual, noise_var):
    """``log N(y | Xψ, σ² I)`` from the residual ``y - Xψ`` ``(N, D)`` and ``σ²`` ``(D,)``."""
    return log_likelihood_of_squares(jnp.sum(residual**2, 0), residual.shape[0], noise_var)


def log_likelihood_of_squares(squares, num_rows, noise_var):
    """:func:`log_likelihood` from the residual's column sums of squares ``(D,)`` over
    ``num_rows`` rows (a state's likelihood at several noise variances costs one residual)."""
    return -0.5 * jnp.sum(squares / noise_var) - 0.5 * num_rows * jnp.sum(
        jnp.log(2 * jnp.pi * noise_var)
    )


def trait_log_prior(traits, num_atoms, trait_loc, trait_var):
    """``Σ_{k ≤ K} log N(ψ_k; μ_0, σ_0² I)`` of the ``K = num_atoms`` instantiated traits of
    ``traits`` ``(C, D)``."""
    live = (jnp.arange(traits.shape[0]) < num_atoms)[:, None]
    log_normal = -0.5 * (traits - trait_loc) ** 2 / trait_var - 0.5 * jnp.log(
        2 * jnp.pi * trait_var
    )
    return jnp.sum(jnp.where(live, log_normal, 0.0))


def log_joint(
    atoms,
    theta,
    arrivals,
    num_atoms,
    x,
    traits,
    log_lik,
    *,
    trait_loc=None,
    trait_var=None,
    topic_beta=None,
    allocation=None,
    words=None,
):
    r"""The log density of the sampler's target at a state (the ``log_joint`` field).

    In the sampler's coordinates (Zhu, Bouchard-Côté & Campbell 2020, Eq. 11; the series of
    :mod:`numpyro_bnp.infer.features.crm.atoms`): the arrivals ``Γ_1 < … < Γ_K`` and uniform marks
    ``P_k`` of the ``K`` instantiated atoms, the counts ``X`` and the traits ``ψ_{1:K}``,

    .. math::
        -Γ_K + \sum_{n, k \le K} \log h(X_{nk} \mid θ_k) - Λ(Γ_K)
        + \sum_{k \le K} \log N(ψ_k; μ_0, σ_0^2 I) + \log N(y \mid Xψ, σ^2 I),

    ``exp(-Λ)`` the probability that no row uses an atom after the ``K``-th
    (:meth:`~numpyro_bnp.infer.features.crm.atoms.AtomSeries.log_no_later_use`). Integrated out: the
    slice variables ``U``, the atoms after the ``K``-th and their traits. With the
    inverse-Lévy series (``θ_k = N^{-1}(Γ_k)``) this is the log density of the model with
    ``K`` atoms at ``(θ_{1:K}, X, ψ_{1:K}, y)`` (``θ`` its ``K`` largest atoms) minus
    ``Σ_k log ν(θ_k)`` (the Jacobian ``dΓ_k/dθ_k = -ν(θ_k)``) minus ``Λ``.

    Topic model (``topic_beta`` given): ``Dir(ψ_k; β)`` traits, negative-binomial counts (the
    rates integrated out) and, instead of the Normal term, the words and their topics
    ``Σ_{d,l} log ψ_{z_dl w_dl} + Σ_{d,k} log X_dk! - Σ_{d,v} log y_dv!``
    (:func:`~numpyro_bnp.infer.features.crm.topics.log_token_density`; no such term without words).

    :param atoms: the :class:`~numpyro_bnp.infer.features.crm.atoms.AtomSeries` of the prior (its
        ``dtype`` is the result's).
    :param theta: ``(C,)`` atoms (0 beyond ``K``); :param arrivals: ``(C,)`` ``Γ``;
    :param num_atoms: ``K``; :param x: ``(N, C)`` counts; :param traits: ``(C, D)``;
    :param log_lik: the Normal log-likelihood (:func:`log_likelihood`; ignored for topics);
    :param trait_loc, trait_var: ``μ_0`` and ``σ_0²`` of the Normal trait prior;
    :param topic_beta: the topic concentration ``β`` (topic model; ``None`` otherwise);
    :param allocation, words: ``(N, L)`` topics and word ids of the tokens (topic model with
        data; ``None`` otherwise).
    """
    live = jnp.arange(arrivals.shape[-1]) < num_atoms
    last = jnp.maximum(num_atoms - 1, 0)
    last_arrival = jnp.where(num_atoms > 0, arrivals[last], 0.0)
    log_p = (
        atoms.log_arrivals(last_arrival)
        + atoms.log_counts(x, theta)
        + atoms.log_no_later_use(last_arrival, theta[last], num_atoms)
    )
    if topic_beta is not None:
        log_p += jnp.sum(jnp.where(live, topic_model.log_dirichlet(traits, topic_beta), 0))
        if words is not None:
            log_p += topic_model.log_token_density(words, allocation, x, traits)
        return log_p.astype(atoms.dtype)
    log_p += trait_log_prior(traits, num_atoms, trait_loc, trait_var)
    return (log_p + log_lik).astype(atoms.dtype)
