"""The merge–split move alone (with the exact U draw) against the enumerated posterior.

A chain of only ``U | z`` draws and merge–split moves is irreducible over partitions, so it must
reproduce the exact posterior over all 52 partitions of five rows: P(K = k) and every pair's
co-clustering within 4 MCSE. Gaussian rows under an NGGP with σ = ½ (the U-dependent split
prior), documents (sparse rows) under σ = 0.3, τ = 0, and the prior alone (no rows).
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax, random
from mc_checks import check_mean
from scipy.special import logsumexp
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
from numpyro_bnp.infer._mixture_model import read_mixture_model
from numpyro_bnp.infer._split_merge import row_sketch, split_merge

CAPACITY = 5


def exact_posterior(data, marginal, mass, sigma, tau):
    parts = partitions(5)
    log_post = np.asarray(NGGP(mass, sigma, tau, num_points=5).log_prob(jnp.asarray(parts)))
    if data is not None:
        log_post = log_post + np.array(
            [sum(marginal(data[p == k]) for k in range(p.max() + 1)) for p in parts]
        )
    return parts, np.exp(log_post - logsumexp(log_post))


def chain(family, rows, mass, sigma, tau, num_steps, moves=2):
    """Labels ``(num_steps, 5)`` of the chain: U | z, then ``moves`` merge–split moves (half
    of their pairs near ones, as in the sampler)."""
    sketch = None if rows is None else row_sketch(rows)

    def step(labels, key):
        key_u, *keys = random.split(key, moves + 1)
        num = jnp.sum(jnp.zeros(CAPACITY, jnp.int32).at[labels].add(1) > 0)
        log_u = nggp_sample_log_u(key_u, 5, num, mass, sigma, tau)
        for k in keys:
            labels, _, _ = split_merge(
                family, rows, labels, log_u, mass, sigma, tau, CAPACITY, k, sketch
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


@pytest.mark.parametrize("case", ["gaussian", "documents", "prior"])
def test_merge_split_alone_samples_the_enumerated_posterior(case):
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
    mass, sigma, tau = kwargs["mass"], kwargs["sigma"], kwargs["tau"]
    parts, probs = exact_posterior(data, marginal, mass, sigma, tau)
    labels = chain(family, rows, mass, sigma, tau, 6000)
    check(labels, parts, probs)
