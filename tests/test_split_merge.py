"""The merge–split move alone (with the exact U draw) against the enumerated posterior.

A chain of only ``U | z`` draws and merge–split moves is irreducible over partitions, so it must
reproduce the exact posterior over all 52 partitions of five rows: P(K = k) and every pair's
co-clustering within 4 MCSE. Gaussian rows under an NGGP with σ = ½ (the U-dependent split
prior), documents (sparse rows) under σ = 0.3, τ = 0, and the prior alone (no rows); each
with Dahl's sequentially-allocated proposals (no scans) and with Jain & Neal's restricted Gibbs
scans (two: a launch state refined by one intermediate scan, then the final scan that proposes).
A batch of moves from independent exact draws of the prior given ``U`` checks the scans' proposal
probabilities far more sharply than the chains.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax, random
from mc_checks import check_mean
from scipy.special import gammaln, logsumexp
from scipy.stats import chisquare
from test_nggp_gibbs import (  # the enumeration of test_nggp_gibbs, its data and models
    DOC_MODEL,
    DOCS,
    NORMAL,
    X1,
    docs_marginal,
    normal_marginal,
    partitions,
)

from numpyro_bnp import models
from numpyro_bnp._math import nggp_sample_log_u
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.families import SparseCounts
from numpyro_bnp.infer import NGGPMarginalGibbs
from numpyro_bnp.infer.mixtures.model import read_mixture_model
from numpyro_bnp.infer.mixtures.nggp_gibbs.split_merge import row_sketch, split_merge

CAPACITY = 5


def exact_posterior(data, marginal, mass, sigma, tau):
    parts = partitions(5)
    log_post = np.asarray(NGGP(mass, sigma, tau, num_points=5).log_prob(jnp.asarray(parts)))
    if data is not None:
        log_post = log_post + np.array(
            [sum(marginal(data[p == k]) for k in range(p.max() + 1)) for p in parts]
        )
    return parts, np.exp(log_post - logsumexp(log_post))


def chain(family, rows, mass, sigma, tau, num_steps, moves=2, scans=0):
    """Labels ``(num_steps, 5)`` of the chain: U | z, then ``moves`` merge–split moves (half
    of their pairs near ones, as in the sampler) with ``scans`` restricted Gibbs scans."""
    sketch = None if rows is None else row_sketch(rows)

    def step(labels, key):
        key_u, *keys = random.split(key, moves + 1)
        num = jnp.sum(jnp.zeros(CAPACITY, jnp.int32).at[labels].add(1) > 0)
        log_u = nggp_sample_log_u(key_u, 5, num, mass, sigma, tau)
        for k in keys:
            labels, _, _ = split_merge(
                family, rows, labels, log_u, mass, sigma, tau, CAPACITY, k, sketch, scans
            )
        return labels, labels

    keys = random.split(random.PRNGKey(0), num_steps)
    _, out = jax.jit(lambda keys: lax.scan(step, jnp.zeros(5, jnp.int32), keys))(keys)
    return np.asarray(out)


def check(labels, parts, probs):
    canonical = np.array([np.unique(row, return_inverse=True)[1] for row in labels])
    num = canonical.max(-1) + 1
    events = [(num == k, probs[parts.max(1) + 1 == k].sum()) for k in range(1, 6)]
    events += [
        (labels[:, i] == labels[:, j], probs[parts[:, i] == parts[:, j]].sum())
        for i, j in itertools.combinations(range(5), 2)
    ]
    for draws, exact in events:
        if 0.01 < exact < 0.99:
            check_mean(draws[None].astype(float), exact)
        else:
            assert abs(draws.mean() - exact) < 0.01, (draws.mean(), exact)


def setup(case):
    """``(family, rows, data, marginal, mass, sigma, tau)`` of a case."""
    if case == "documents":
        model, kwargs, data, marginal = (
            models.nggp_multinomial_mixture,
            DOC_MODEL,
            DOCS,
            docs_marginal,
        )
        rows = SparseCounts(
            jnp.tile(jnp.arange(4, dtype=jnp.int32), (5, 1)), jnp.asarray(DOCS, jnp.float32)
        )
    else:
        model, kwargs, data, marginal = models.nggp_normal_mixture, NORMAL, X1, normal_marginal
        rows = jnp.asarray(X1, jnp.float32)
        if case == "prior":
            data, rows = None, None
    family = read_mixture_model(model, (), dict(kwargs, max_clusters=CAPACITY)).family
    return family, rows, data, marginal, kwargs["mass"], kwargs["sigma"], kwargs["tau"]


@pytest.mark.parametrize("scans", [0, 2])
@pytest.mark.parametrize("case", ["gaussian", "documents", "prior"])
def test_merge_split_alone_samples_the_enumerated_posterior(case, scans):
    family, rows, data, marginal, mass, sigma, tau = setup(case)
    parts, probs = exact_posterior(data, marginal, mass, sigma, tau)
    labels = chain(family, rows, mass, sigma, tau, 6000, scans=scans)
    check(labels, parts, probs)


def partition_codes(labels):
    """An integer per partition of five rows: which of the 10 pairs share a cluster."""
    pairs = itertools.combinations(range(5), 2)
    return sum(
        (labels[..., i] == labels[..., j]).astype(int) << b for b, (i, j) in enumerate(pairs)
    )


def test_scans_from_exact_draws_of_the_prior_given_u_keep_its_law():
    """Given ``U`` the moves leave ``p(z | U)`` invariant: 5,000 independent exact draws,
    four moves with two scans each, and the partitions are still distributed as ``p(z | U)``
    (a chi-square test over the 52 partitions, the rare ones pooled; false-alarm rate 1e-4).
    Independent draws need no MCSE: a proposal probability read from a launch scan, or a
    merge's launch state built from its current split, fails here by a chi-square of several
    hundred, where the chains above miss it or catch it at about 4 MCSE. Without rows (no
    likelihood to make the allocations nearly sure) the scans' choices matter most."""
    family, _, _, _, mass, sigma, tau = setup("prior")
    log_u, num = 0.5, 5_000
    parts = partitions(5)
    sizes = np.stack([np.sum(parts == k, 1) for k in range(5)], 1)
    new = np.log(mass) + sigma * np.logaddexp(log_u, np.log(tau))  # log a (U + τ)^σ
    log_p = np.sum(
        np.where(sizes > 0, new + gammaln(np.maximum(sizes, 1) - sigma) - gammaln(1 - sigma), 0),
        1,
    )  # the product over clusters of split_merge's module docstring
    probs = np.exp(log_p - logsumexp(log_p))
    start = parts[np.random.default_rng(0).choice(len(parts), num, p=probs)]

    def moves(labels, key):
        def move(m, labels):
            key_m = random.fold_in(key, m)
            return split_merge(
                family, None, labels, log_u, mass, sigma, tau, CAPACITY, key_m, scans=2
            )[0]

        return lax.fori_loop(0, 4, move, labels)

    out = jax.jit(jax.vmap(moves))(jnp.asarray(start), random.split(random.PRNGKey(1), num))
    out = np.asarray(out)
    assert np.mean(partition_codes(out) != partition_codes(start)) > 0.5  # the moves move
    index = {code: n for n, code in enumerate(partition_codes(parts))}
    counts = np.bincount([index[code] for code in partition_codes(out)], minlength=len(parts))
    expected = num * probs
    rare = expected < 5
    observed = np.append(counts[~rare], counts[rare].sum())
    expected = np.append(expected[~rare], expected[rare].sum())
    if not rare.any():
        observed, expected = observed[:-1], expected[:-1]
    assert chisquare(observed, expected).pvalue > 1e-4


def test_the_kernel_refuses_a_negative_number_of_scans():
    with pytest.raises(ValueError, match="split_merge_scans"):
        NGGPMarginalGibbs(models.nggp_normal_mixture, split_merge_scans=-1)
