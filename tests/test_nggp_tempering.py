"""Tempered replicas of NGGPMarginalGibbs (``temperatures=``): exactness, swaps, bad input.

The reference is exact: the posterior over all 52 partitions of five Gaussian rows under an NGGP
(σ = ½), the EPPF times the conjugate marginal likelihoods written with SciPy
(``test_nggp_gibbs``). Replica ``r`` targets the EPPF times the marginal likelihood raised to
``β_r``, so its partition frequencies (the number of clusters, every pair of rows together)
must match that enumerated *tempered* posterior, and the untempered replica's the posterior;
the run includes the merge–split moves (five per sweep), whose tempered ratio is then tested
too. The swap statistic's mean must match its exact expectation under the product of two
neighbours' enumerated targets. Tolerances are 4 Monte-Carlo standard errors with the effective
sample size from ArviZ (``mc_checks.check_mean``).
"""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
from jax import random
from mc_checks import check_mean, check_partition_events
from numpyro.infer import MCMC, NUTS, Gibbs
from scipy.special import logsumexp
from test_nggp_gibbs import FULL, NORMAL, X1, normal_marginal, partitions, three_clusters

from numpyro_bnp import models
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.infer import NGGPMarginalGibbs

BETAS = (1.0, 0.4, 0.12)
PAIRS = tuple(itertools.combinations(range(5), 2))  # every pair of the five rows
WARMUP = 100
FIELDS = (
    "num_clusters",
    "co_clustered",
    "log_likelihood",
    "log_joint",
    "saturated",
    "swap_rate",
    "swapped",
    "replicas.num_clusters",
    "replicas.co_clustered",
    "replicas.log_likelihood",
    "replicas.log_joint",
)


def enumeration():
    """Every partition of the five rows, its log EPPF and its log marginal likelihood."""
    parts = partitions(5)
    log_eppf = np.asarray(
        NGGP(NORMAL["mass"], NORMAL["sigma"], NORMAL["tau"], num_points=5).log_prob(
            jnp.asarray(parts)
        ),
        np.float64,
    )
    log_lik = np.array(
        [sum(normal_marginal(X1[p == k]) for k in range(p.max() + 1)) for p in parts]
    )
    return parts, log_eppf, log_lik


def tempered_posterior(beta):
    """The enumerated target of the replica at ``beta``: EPPF × marginal likelihood^β."""
    _, log_eppf, log_lik = enumeration()
    log_post = log_eppf + beta * log_lik
    return np.exp(log_post - logsumexp(log_post))


@pytest.fixture(scope="module")
def tempered():
    """4 vectorized chains of 3 replicas on the five rows, merge–split moves included."""
    kernel = NGGPMarginalGibbs(models.nggp_normal_mixture, pairs=PAIRS, temperatures=BETAS)
    mcmc = MCMC(
        kernel,
        num_warmup=WARMUP,
        num_samples=1500,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), obs=jnp.asarray(X1), extra_fields=FIELDS, **NORMAL)
    return kernel, mcmc.get_extra_fields(group_by_chain=True)


def replica(extra, name, r):
    """``(chain, draw, ...)`` field ``name`` of replica ``r``."""
    if r == 0:
        return np.asarray(extra[name])
    return np.asarray(extra[f"replicas.{name}"])[:, :, r - 1]


# ---------------------------------------------------------------------------------------------
# exactness
# ---------------------------------------------------------------------------------------------
def test_every_replica_matches_its_enumerated_tempered_posterior(tempered):
    _, extra = tempered
    assert not np.any(extra["saturated"])
    parts = partitions(5)
    for r, beta in enumerate(BETAS):
        probs = tempered_posterior(beta)
        num = replica(extra, "num_clusters", r)
        together = replica(extra, "co_clustered", r)
        check_partition_events(num, together, probs, parts)
    # the replicas' targets differ: the hot ones are not the posterior
    cold, hot = tempered_posterior(BETAS[0]), tempered_posterior(BETAS[-1])
    assert 0.5 * np.abs(cold - hot).sum() > 0.3


def test_log_joint_is_each_replicas_tempered_target_after_the_exchanges(tempered):
    """The exchanged states' ``log_joint`` is recomputed at their new replica: log EPPF +
    β_r log p(X | z), with the untempered log_likelihood one of the 52 enumerated values."""
    _, extra = tempered
    _, log_eppf, log_lik = enumeration()
    for r, beta in enumerate(BETAS):
        ell = replica(extra, "log_likelihood", r).ravel()
        joint = replica(extra, "log_joint", r).ravel()
        which = np.abs(ell[:, None] - log_lik[None, :]).argmin(1)
        np.testing.assert_allclose(ell, log_lik[which], rtol=1e-5)
        np.testing.assert_allclose(joint, log_eppf[which] + beta * log_lik[which], rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# the swap fields
# ---------------------------------------------------------------------------------------------
def test_swap_rate_is_its_exact_expectation_and_drives_the_swaps(tempered):
    """At the swept states (before the exchange) replicas r and r + 1 are independent draws
    of their targets, so E[swap_rate_r] = Σ_{p,q} π_r(p) π_{r+1}(q) min(1, exp((β_r −
    β_{r+1})(ℓ(q) − ℓ(p)))), enumerated; the pair is proposed after every other sweep and then
    exchanged with that probability."""
    _, extra = tempered
    rate, swapped = np.asarray(extra["swap_rate"]), np.asarray(extra["swapped"])
    assert rate.shape == swapped.shape == (4, 1500, len(BETAS) - 1)
    assert np.all((rate >= 0) & (rate <= 1))
    _, _, log_lik = enumeration()
    sweep = WARMUP + np.arange(rate.shape[1])
    for p in range(len(BETAS) - 1):
        delta = (BETAS[p] - BETAS[p + 1]) * (log_lik[None, :] - log_lik[:, None])
        accept = np.minimum(1.0, np.exp(delta))
        exact = tempered_posterior(BETAS[p]) @ accept @ tempered_posterior(BETAS[p + 1])
        assert 0.05 < exact < 0.95  # the ladder is neither trivial nor frozen
        check_mean(rate[..., p], exact)
        proposed = sweep % 2 == p % 2
        assert not np.any(swapped[:, ~proposed, p])
        r, s = rate[:, proposed, p].ravel(), swapped[:, proposed, p].ravel()
        # swapped_t - rate_t is a martingale difference: the s.e. of its mean needs no ESS
        se = np.sqrt(np.mean(r * (1 - r)) / r.size)
        assert abs(s.mean() - r.mean()) < 4 * se, (p, s.mean(), r.mean(), se)


def test_a_full_capacity_in_a_replica_warns_and_the_int_ladder_is_geometric():
    """Every pass of every replica saturates (3 clusters in 2 slots): ``saturated`` and the
    warning as without tempering; ``temperatures=3`` is ``exp(-r √(2 / (N D)))``."""
    x, _ = three_clusters(1, per_cluster=5)
    kernel = NGGPMarginalGibbs(models.nggp_normal_mixture, temperatures=3)
    assert kernel.temperature_ladder is None  # N D is known at init
    mcmc = MCMC(kernel, num_warmup=0, num_samples=3, progress_bar=False)
    with pytest.warns(RuntimeWarning, match=r"clusters plate \(2 slots"):
        mcmc.run(random.PRNGKey(0), obs=jnp.asarray(x), extra_fields=("saturated",), **FULL)
    assert np.all(mcmc.get_extra_fields()["saturated"])
    step = np.sqrt(2 / (FULL["num_obs"] * FULL["dim"]))
    np.testing.assert_allclose(kernel.temperature_ladder, np.exp(-step * np.arange(3)))


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(  # the shared ladder check (every case: test_crm_tempering)
    "temperatures, match", [((1.0, 0.2, 0.5), "strictly decreasing"), (1, "int >= 2")]
)
def test_bad_ladders_raise(temperatures, match):
    with pytest.raises(ValueError, match="temperatures") as info:
        NGGPMarginalGibbs(models.nggp_normal_mixture, temperatures=temperatures)
    assert match in str(info.value)


def test_a_gibbs_block_with_temperatures_is_refused():
    import numpyro
    import numpyro.distributions as dist

    def noise_model(obs=None, *, num_obs, dim):
        sigma_o = numpyro.sample("sigma_o", dist.HalfNormal(1.0))
        return models.nggp_normal_mixture(obs, num_obs=num_obs, dim=dim, sigma_o=sigma_o)

    kernel = Gibbs(
        [
            (NGGPMarginalGibbs(noise_model, temperatures=2), ["z", "mu"]),
            (NUTS(noise_model), ["sigma_o"]),
        ]
    )
    mcmc = MCMC(kernel, num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(ValueError, match=r"temperatures.*numpyro.infer.Gibbs"):
        mcmc.run(random.PRNGKey(0), jnp.asarray(X1), num_obs=5, dim=1)
