r"""The topic likelihood of :class:`~numpyro_bnp.infer.CRMTopicSlice`: Poisson word counts (§4.2).

Beta–negative-binomial combinatorial clustering (Zhu, Bouchard-Côté & Campbell 2020, §4.2, in
the reading of ``docs/crm_slice.md``, "Topic models";
:func:`numpyro_bnp.models.bnb_combinatorial_clustering`): atoms ``θ_k`` of a beta process,
topics ``ψ_k ~ Dir(β)``, document rates ``π_dk ~ Gamma(r_d, scale θ_k/(1-θ_k))`` and word counts
``y_dv ~ Poisson(Σ_k π_dk ψ_kv)``.

**Augmentation.** Split ``y_dv = Σ_k y_dkv`` with ``y_dkv ~ Poisson(π_dk ψ_kv)``. Then
``X_dk = Σ_v y_dkv ~ Poisson(π_dk)`` (``Σ_v ψ_kv = 1``) and ``(y_dkv)_v | X_dk ~ Mult(X_dk, ψ_k)``;
integrating the gamma rates out, ``X_dk ~ NB(r_d, θ_k)``: the count matrix of the CRM latent trait
model with ``h = NB(r_d, ·)``, so the slice machinery (thinning, Γ and V moves, document slices
``K_d``) is the negative-binomial one. Written per token (each word occurrence ``l`` of document
``d`` has a word ``w_dl`` and a topic ``z_dl``), the density of the allocation is

.. math::
    \prod_{d,k} \frac{Γ(r_d + X_{dk})}{Γ(r_d)} θ_k^{X_{dk}} (1-θ_k)^{r_d}
    \prod_v ψ_{kv}^{A_{dvk}}

(``A_dvk`` tokens of word ``v`` in document ``d`` on topic ``k``; the multinomial coefficients
cancel against the number of token orders, up to ``Π_{d,v} 1/y_dv!``, a constant of the data:
:func:`log_token_density` keeps it), hence the Gibbs step of one token, with the slice
factor ``1/ξ(k_d)`` of its document (the slice density of paper Eq. 25),

.. math::
    P(z_{dl} = k \mid \cdot) \propto (r_d + X^{-dl}_{dk})\, θ_k\, ψ_{k w_{dl}}
    \exp(k_d(k) / Δ_ξ), \qquad k \le K_d,

``k_d(k) = max(k, last atom of the other tokens)``. Topics are conjugate,
``ψ_k | z ~ Dir(β + word counts of topic k)``, and the rates, needed only for the output, are
``π_dk | X, θ ~ Gamma(r_d + X_dk, scale θ_k)``. The paper draws one slice per word; one per
document (as for the rows of the other models) is equally exact and keeps documents independent
given the atoms, so all documents move in parallel.

Tokens live in a ``(D, L)`` buffer (``L`` the longest document, word id ``-1`` for padding).
"""

import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import gammaln, logsumexp, xlogy

__all__ = [
    "allocate_tokens",
    "document_tokens",
    "draw_rates",
    "draw_topics",
    "log_dirichlet",
    "log_likelihood",
    "log_token_density",
    "token_counts",
    "word_counts",
]


def document_tokens(counts):
    """Host ``(D, V)`` word counts to ``(D, L)`` int32 word ids of each document's tokens.

    ``L`` is the longest document (at least 1); shorter documents are padded with ``-1``.
    """
    counts = np.asarray(counts, np.int64)
    lengths = counts.sum(1)
    words = np.full((counts.shape[0], max(int(lengths.max(initial=0)), 1)), -1, np.int32)
    vocab = np.arange(counts.shape[1])
    for d, row in enumerate(counts):
        words[d, : lengths[d]] = np.repeat(vocab, row)
    return words


def token_counts(words, allocation, num_atoms):
    """``(D, num_atoms)`` int32 counts ``X_dk``: tokens of document ``d`` on atom ``k``.

    :param words: ``(D, L)`` word ids (``-1``: padding); :param allocation: ``(D, L)`` atom
        (0-based) of each token.
    """
    rows = jnp.broadcast_to(jnp.arange(words.shape[0])[:, None], words.shape)
    valid = (words >= 0).astype(jnp.int32)
    return jnp.zeros((words.shape[0], num_atoms), jnp.int32).at[rows, allocation].add(valid)


def word_counts(words, allocation, num_atoms, vocab_size, dtype):
    """``(num_atoms, V)`` counts of each word on each atom (all documents)."""
    valid = (words >= 0).astype(dtype)
    zeros = jnp.zeros((num_atoms, vocab_size), dtype)
    return zeros.at[allocation, jnp.maximum(words, 0)].add(valid)


def allocate_tokens(key, words, allocation, counts, theta, topics, total_count, slice_atoms, xi):
    """One Gibbs pass over the token positions, all documents in parallel (module docstring).

    :param words: ``(D, L)`` word ids; :param allocation: ``(D, L)`` atoms of the tokens;
    :param counts: ``(D, C)`` ``X`` of ``allocation``; :param theta: ``(C,)`` atoms (0 beyond
        the instantiated ones); :param topics: ``(C, V)``; :param total_count: ``(D,)`` ``r_d``;
    :param slice_atoms: ``(D,)`` ``K_d``; :param xi: ``Δ_ξ``.
    :return: the new ``(allocation, counts)``.
    """
    num_docs, cap = counts.shape
    rows = jnp.arange(num_docs)
    index = jnp.arange(1, cap + 1, dtype=jnp.int32)
    allowed = index[None, :] <= slice_atoms[:, None]
    log_theta = jnp.log(theta)
    log_topics = jnp.log(topics)
    r = total_count[:, None]

    def body(pos, carry):
        allocation, counts, key = carry
        key, sub = random.split(key)
        word = words[:, pos]
        valid = word >= 0
        old = allocation[:, pos]
        others = counts.at[rows, old].add(-valid.astype(counts.dtype))
        last = jnp.max(jnp.where(others > 0, index, 0), axis=1)
        last_if = jnp.maximum(index[None, :], last[:, None])  # k_d if the token goes to k
        logw = (
            jnp.log(r + others)
            + log_theta[None, :]
            + log_topics[:, jnp.maximum(word, 0)].T
            + last_if / xi
        )
        new = random.categorical(sub, jnp.where(allowed, logw, -jnp.inf), axis=-1)
        new = jnp.where(valid, new, old).astype(allocation.dtype)
        counts = others.at[rows, new].add(valid.astype(counts.dtype))
        return allocation.at[:, pos].set(new), counts, key

    allocation, counts, _ = lax.fori_loop(0, words.shape[1], body, (allocation, counts, key))
    return allocation, counts


def draw_topics(key, concentration, counts):
    """``(C, V)`` draws ``ψ_k ~ Dir(β + counts_k)`` (through log-gammas: no underflow to NaN).

    :param concentration: ``(V,)`` ``β``; :param counts: ``(C, V)`` word counts of each atom
        (zeros: prior draws).
    """
    log_g = random.loggamma(key, concentration + counts, dtype=counts.dtype)
    return jnp.exp(log_g - logsumexp(log_g, axis=-1, keepdims=True))


def draw_rates(key, total_count, counts, theta):
    """``(D, C)`` rates ``π_dk ~ Gamma(r_d + X_dk, scale θ_k)`` (0 where ``θ_k = 0``)."""
    shape = total_count[:, None] + counts.astype(theta.dtype)
    return random.gamma(key, shape, dtype=theta.dtype) * theta[None, :]


def log_likelihood(words, rates, topics):
    """``Σ_dv log Poisson(y_dv | (π ψ)_dv)`` with ``y`` the word counts of the tokens ``words``."""
    # y_dv: the tokens of document d "allocated" to their own word
    y = token_counts(words, jnp.maximum(words, 0), topics.shape[-1]).astype(rates.dtype)
    mean = rates @ topics
    return jnp.sum(xlogy(y, mean) - mean - gammaln(y + 1.0))


def log_dirichlet(topics, concentration):
    """``(C,)`` ``log Dir(ψ_k; β)`` of each topic ``ψ_k`` (a row of ``topics`` ``(C, V)``)."""
    beta = jnp.broadcast_to(concentration, topics.shape[-1:])
    norm = gammaln(jnp.sum(beta)) - jnp.sum(gammaln(beta))
    return norm + jnp.sum((beta - 1.0) * jnp.log(topics), axis=-1)


def log_token_density(words, allocation, counts, topics):
    r"""``log p(y, z | X, ψ)``: the words of the tokens and their topics given the counts.

    Given ``X_dk`` tokens of document ``d`` on topic ``k``, their words are i.i.d. ``ψ_k``; the
    topics ``z`` of the tokens (in the fixed order of :func:`document_tokens`) are uniform over
    the orders that give the table ``A_dvk``, so that (module docstring)

    .. math::
        \log p(y, z \mid X, ψ) = \sum_{d,l} \log ψ_{z_{dl} w_{dl}}
        + \sum_{d,k} \log X_{dk}! - \sum_{d,v} \log y_{dv}!,

    a density over ``(y, z)`` (summed over ``z`` it is ``Π_{d,k} Mult(A_dk· | X_dk, ψ_k)``
    summed over the tables with margins ``y``). Shapes as in :func:`allocate_tokens`.
    """
    dtype = topics.dtype
    valid = words >= 0
    log_psi = jnp.log(topics)[allocation, jnp.maximum(words, 0)]
    y = token_counts(words, jnp.maximum(words, 0), topics.shape[-1]).astype(dtype)
    return (
        jnp.sum(jnp.where(valid, log_psi, 0.0))
        + jnp.sum(gammaln(counts.astype(dtype) + 1.0))
        - jnp.sum(gammaln(y + 1.0))
    )
