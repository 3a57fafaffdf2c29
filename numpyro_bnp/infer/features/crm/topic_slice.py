r"""Slice sampler for the beta–negative-binomial topic model (Zhu et al. 2020, §4.2).

Zhu, Bouchard-Côté & Campbell, *Slice sampling for general completely random measures*, UAI 2020;
the model as we read it (``docs/crm_slice.md``, "Topic models";
:func:`numpyro_bnp.models.bnb_combinatorial_clustering`): atoms ``θ_k`` of a beta process, topics
``ψ_k ~ Dir(β)``, document rates ``π_dk ~ Gamma(r_d, scale θ_k/(1-θ_k))`` and word counts
``y_dv ~ Poisson(Σ_k π_dk ψ_kv)``. Splitting every count over the topics and integrating the
rates out, document ``d`` has ``X_dk ~ NB(r_d, θ_k)`` words on topic ``k``: the counts of a CRM
latent trait model, so one sweep is :func:`numpyro_bnp.infer.features.crm.sweep.sweep_atoms` (the
slices,
the thinned reveal of new atoms, the Γ and V moves of the negative-binomial count law) around this
model's two steps (module :mod:`numpyro_bnp.infer.features.crm.topics`): a Gibbs pass over the
topic of
every word (all documents in parallel), and the conjugate draw ``ψ_k ~ Dir(β + word counts of
topic k)``. The rates are drawn for the output only, ``π_dk ~ Gamma(r_d + X_dk, scale θ_k)``.

The word counts are read from the model's arguments at every sweep and turned into tokens on the
host (:meth:`CRMTopicSlice.sample`): a run continued on new documents (as many, none longer than
the token buffer) fits them. Traced without word counts the model is sampled from its prior (the
counts then move by the negative-binomial count step of
:func:`numpyro_bnp.infer.features.crm.counts.update_counts`).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_bnp._checks import is_concrete
from numpyro_bnp.infer.core.mcmc import with_deterministic
from numpyro_bnp.infer.features.crm import target
from numpyro_bnp.infer.features.crm import topics as topic_model
from numpyro_bnp.infer.features.crm.counts import update_counts
from numpyro_bnp.infer.features.crm.kernel import CRMSliceKernel
from numpyro_bnp.infer.features.crm.sweep import (
    atom_fields,
    initial_atom_fields,
    live_theta,
    pad_last,
    sweep_atoms,
)

__all__ = ["CRMTopicSlice", "CRMTopicSliceState"]


class CRMTopicSliceState(NamedTuple):
    """State of :class:`CRMTopicSlice` (one chain; vectorized chains add a leading axis).

    The fields of the atoms and the sweep (``i``, ``arrivals``, ``marks``, ``num_atoms``,
    ``num_active``, ``parity``, ``num_slice_atoms``, ``saturated``, ``num_saturated``,
    ``accept_gamma``, ``accept_marks``, ``rng_key``) are as in
    :class:`~numpyro_bnp.infer.CRMSliceState` (the fields every CRM slice sampler has).

    :ivar z: the sample field ``{CRM site: (C,), topic site: (C, V), rate site: (N, C)}`` (0
        beyond ``num_atoms``), for a capacity ``C``.
    :ivar counts: ``(N, C)`` counts ``X``: the words of document ``n`` on atom ``k``.
    :ivar allocation: ``(N, L)`` atom (0-based) of each token of the token buffer (``(N, 0)``
        without word counts).
    :ivar log_likelihood: ``log p(y | rates, topics)`` at the rates drawn for the output.
    :ivar log_joint: the log density of the sampler's target at the state: negative-binomial
        counts (rates integrated out), ``Dir(β)`` topics and the words with their topics given the
        counts (:func:`~numpyro_bnp.infer.features.crm.target.log_joint`).
    """

    i: jnp.ndarray
    z: dict
    arrivals: jnp.ndarray
    marks: jnp.ndarray
    counts: jnp.ndarray
    allocation: jnp.ndarray
    num_atoms: jnp.ndarray
    num_active: jnp.ndarray
    parity: jnp.ndarray
    num_slice_atoms: jnp.ndarray
    saturated: jnp.ndarray
    num_saturated: jnp.ndarray
    accept_gamma: jnp.ndarray
    accept_marks: jnp.ndarray
    log_likelihood: jnp.ndarray
    log_joint: jnp.ndarray
    rng_key: jnp.ndarray


class _Constants(NamedTuple):
    """What the pure functions of :class:`CRMTopicSlice` close over, read once from the model."""

    spec: object  # CRMTraitModel of the topic model
    atoms: object  # AtomSeries (negative-binomial count law)
    capacity: int
    gibbs: bool
    xi_scale: float
    topic_beta: jnp.ndarray  # (V,) Dirichlet β


def _log_joint(c, theta, arrivals, num_atoms, counts, topics, allocation, words):
    data = {} if words is None else {"allocation": allocation, "words": words}
    zero = jnp.zeros((), c.atoms.dtype)
    return target.log_joint(
        c.atoms, theta, arrivals, num_atoms, counts, topics, zero, topic_beta=c.topic_beta, **data
    )


def _init_chain(c, words, key):
    """A chain's first state: every token on atom 1, at ``Γ_1 = 1``, uniform topics (any start
    with positive density will do; the first sweep moves them and computes ``θ``)."""
    spec, dtype, cap, n = c.spec, c.atoms.dtype, c.capacity, c.spec.num_rows
    if words is None:
        allocation = jnp.zeros((n, 0), jnp.int32)
        counts = jnp.zeros((n, cap), jnp.int32)
    else:
        allocation = jnp.zeros(words.shape, jnp.int32)
        counts = topic_model.token_counts(words, allocation, cap)
    topics = jnp.full((cap, spec.dim), 1.0 / spec.dim, dtype)
    z = {
        spec.crm_site: jnp.zeros(cap, dtype),
        spec.trait_site: topics,
        spec.rate_site: jnp.zeros((n, cap), dtype),
    }
    num_atoms = jnp.any(counts > 0).astype(jnp.int32)
    arrivals = jnp.zeros(cap, dtype).at[0].set(num_atoms.astype(dtype))
    marks = jnp.full(cap, 0.5, dtype)
    theta = live_theta(c.atoms, arrivals, marks, num_atoms)
    return CRMTopicSliceState(
        z=z,
        counts=counts,
        allocation=allocation,
        **initial_atom_fields(counts, arrivals, marks, num_atoms),
        log_likelihood=jnp.zeros((), dtype),
        log_joint=_log_joint(c, theta, arrivals, num_atoms, counts, topics, allocation, words),
        rng_key=random.split(key)[0],  # the key left after a split, as in CRMSlice
    )


def _sweep(c, words, state):
    """One sweep of one chain on the documents' tokens ``words`` ``(N, L)`` (``None``: prior)."""
    spec, dtype = c.spec, c.atoms.dtype
    cap, vocab = state.counts.shape[-1], spec.dim
    key, *steps = random.split(state.rng_key, 8)
    observed = words is not None
    # the counts of these words under the state's allocation (new documents: a new start)
    counts = topic_model.token_counts(words, state.allocation, cap) if observed else state.counts

    def count_step(key, x, topics, theta, slice_atoms, stop):
        if observed:  # the topic of every token
            allocation, x = topic_model.allocate_tokens(
                key,
                words,
                state.allocation,
                x,
                theta,
                topics,
                c.atoms.total_count,
                slice_atoms,
                c.xi_scale,
            )
            return x, allocation
        x, _ = update_counts(
            key,
            x,
            jnp.zeros((x.shape[0], 0), dtype),
            topics,
            theta,
            slice_atoms,
            stop,
            atoms=c.atoms,
            noise_var=None,
            xi_scale=c.xi_scale,
            n_swaps=0,
        )
        return x, state.allocation

    def topic_step(key, x, allocation):
        if observed:
            words_on = topic_model.word_counts(words, allocation, cap, vocab, dtype)
        else:
            words_on = jnp.zeros((cap, vocab), dtype)
        return topic_model.draw_topics(key, c.topic_beta, words_on)

    def draw_topics(key, num):
        return topic_model.draw_topics(key, c.topic_beta, jnp.zeros((num, vocab), dtype))

    swept = sweep_atoms(
        steps,
        c.atoms,
        counts,
        state.z[spec.trait_site],
        state.arrivals,
        state.marks,
        state.num_atoms,
        xi_scale=c.xi_scale,
        draw_traits=draw_topics,
        count_step=count_step,
        trait_step=topic_step,
    )
    live = jnp.arange(cap) < swept.num_atoms
    topics = jnp.where(live[:, None], swept.traits, 0.0)
    # rates | X, θ for the output; nothing beyond the instantiated atoms
    key, k_rates = random.split(key)
    rates = topic_model.draw_rates(k_rates, c.atoms.total_count, swept.x, swept.theta)
    log_lik = jnp.zeros((), dtype)
    if observed:
        log_lik = topic_model.log_likelihood(words, rates, topics).astype(dtype)
    allocation = swept.aux
    return CRMTopicSliceState(
        i=state.i + 1,
        z={spec.crm_site: swept.theta, spec.trait_site: topics, spec.rate_site: rates},
        counts=swept.x,
        allocation=allocation,
        **atom_fields(swept, state.num_saturated),
        log_likelihood=log_lik,
        log_joint=_log_joint(
            c,
            swept.theta,
            swept.arrivals,
            swept.num_atoms,
            swept.x,
            topics,
            allocation,
            words,
        ),
        rng_key=key,
    )


class CRMTopicSlice(CRMSliceKernel):
    r"""Slice sampler for the beta–negative-binomial topic model, as a NumPyro MCMC kernel.

    The algorithm: the module docstring and ``docs/crm_slice.md``, "Topic models".

    :param model: a NumPyro model with a ``BetaProcess`` site ``θ`` ``(K,)``, a rate site
        ``Gamma(r_d, scale θ_k/(1-θ_k))`` ``(D, K)`` with one shape ``r_d`` per document, a topic
        site ``Dirichlet(β)`` ``(K, V)`` with the same ``β`` for every atom and ``Poisson`` word
        counts ``(D, V)`` with mean ``rates @ topics``, e.g.
        :func:`numpyro_bnp.models.bnb_combinatorial_clustering`. Traced without word counts the
        model is sampled from its prior. Latent trait models with a count site are
        :class:`~numpyro_bnp.infer.CRMSlice`'s (a ``ValueError`` says so).
    :param representation: as in :class:`~numpyro_bnp.infer.CRMSlice`.
    :param xi_scale: as in :class:`~numpyro_bnp.infer.CRMSlice`.
    :param max_features: as in :class:`~numpyro_bnp.infer.CRMSlice`.
    :param n_gamma: as in :class:`~numpyro_bnp.infer.CRMSlice`.
    :param gamma_step: as in :class:`~numpyro_bnp.infer.CRMSlice`.
    :param n_marks: as in :class:`~numpyro_bnp.infer.CRMSlice`.
    :param mark_step: as in :class:`~numpyro_bnp.infer.CRMSlice`.
    :param on_saturation: as in :class:`~numpyro_bnp.infer.CRMSlice`.

    The sample (``sample_field``) is ``{theta, topics, rates}``: zeros beyond the instantiated
    atoms; an instantiated atom that no word uses keeps its prior topic and its
    ``Gamma(r_d, θ_k)`` rates. It does not run as a block of :class:`numpyro.infer.Gibbs`.

    **Example**

    .. code-block:: python

        >>> import numpy as np
        >>> from jax import random
        >>> from numpyro.infer import MCMC
        >>> from numpyro_bnp.infer import CRMTopicSlice
        >>> from numpyro_bnp.models import bnb_combinatorial_clustering
        >>> rng = np.random.default_rng(0)
        >>> topics = np.kron(np.eye(2), np.ones((1, 3))) / 3  # two topics on disjoint words
        >>> counts = rng.poisson(15 * rng.dirichlet([0.3, 0.3], size=20) @ topics)
        >>> mcmc = MCMC(CRMTopicSlice(bnb_combinatorial_clustering, max_features=12),
        ...             num_warmup=100, num_samples=20, progress_bar=False)
        >>> mcmc.run(random.PRNGKey(0), counts, doc_lengths=counts.sum(1), vocab_size=6)
        >>> mcmc.get_samples()["topics"].shape
        (20, 12, 6)
    """

    observation = "topics"
    other_kernel = "CRMSlice"

    def postprocess_fn(self, model_args, model_kwargs):
        """The model's deterministic sites added at the sampled values."""
        return with_deterministic(self._model, model_args, model_kwargs)

    # ------------------------------------------------------------------ kernel pieces
    def _constants(self, spec, atoms, capacity, gibbs):
        if gibbs:
            raise ValueError(
                "CRMTopicSlice does not run as a block of numpyro.infer.Gibbs: run it alone "
                "on the topic model (its hyper-parameters fixed)"
            )
        beta = jnp.asarray(spec.topic_concentration, atoms.dtype)
        return _Constants(spec, atoms, capacity, gibbs, self.xi_scale, beta)

    def _state_rows(self, state):
        return state.counts.shape[-2]

    def _data(self, c, state, model_args, model_kwargs):
        """The documents' tokens ``(N, L)`` at these arguments (``None`` without word counts),
        padded to the state's token buffer ``L``."""
        spec, cap, dtype = c.spec, c.capacity, c.atoms.dtype
        rows = spec.num_rows if state is None else self._state_rows(state)
        # concrete values (not staged into the compiled sweep): the data are checked here
        with jax.ensure_compile_time_eval():
            template = {
                spec.crm_site: jnp.zeros(cap, dtype),
                spec.trait_site: jnp.full((cap, spec.dim), 1.0 / spec.dim, dtype),
                spec.rate_site: jnp.zeros((rows, cap), dtype),
            }
            numbers = spec.numbers(template, model_args, model_kwargs)
        self._check_rows(state, numbers.num_rows, "counts and the topics of the words")
        counts = numbers.obs
        if counts is None:
            return None
        name = f"the word counts at site {spec.obs_site!r}"
        if not is_concrete(counts):
            raise ValueError(
                f"CRMTopicSlice needs {name} as concrete arrays (they become tokens on the "
                "host): run MCMC with jit_model_args=False"
            )
        counts = np.asarray(counts)
        if counts.ndim != 2 or counts.shape[1] != spec.dim:
            raise ValueError(f"{name} must have shape (N, {spec.dim}), got {counts.shape}")
        if not (np.all(np.isfinite(counts)) and np.all(counts >= 0)) or np.any(
            counts != np.round(counts)
        ):
            raise ValueError(f"{name} must be non-negative integers")
        words = topic_model.document_tokens(counts)
        if state is not None:
            width = state.allocation.shape[-1]
            if words.shape[1] > width:
                raise ValueError(
                    f"CRMTopicSlice: a document has {words.shape[1]} words, more than the "
                    f"{width} of the token buffer of the chains' state; start new chains "
                    "(MCMC.run without post_warmup_state) for these documents"
                )
            words = np.pad(words, [(0, 0), (0, width - words.shape[1])], constant_values=-1)
        return jnp.asarray(words)

    def _init_chain(self, c, words, key):
        return _init_chain(c, words, key)

    def _sweep(self, c, words, state):
        return _sweep(c, words, state)

    def _pad(self, c, state, pad):
        spec = c.spec
        z = dict(state.z)
        z[spec.trait_site] = pad_last(z[spec.trait_site], -2, pad)
        for name in (spec.crm_site, spec.rate_site):
            z[name] = pad_last(z[name], -1, pad)
        return state._replace(z=z, counts=pad_last(state.counts, -1, pad))
