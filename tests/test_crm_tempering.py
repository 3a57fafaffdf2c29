"""Tempered replicas of CRMSlice (``temperatures=``): exactness, swaps, sharding, bad input.

The reference is exact: with ``N = 3`` rows the posterior of the beta–Bernoulli linear-Gaussian
model (mass ``c``, concentration 1: the IBP with ``α = c``) is a sum over the multisets of the 7
non-zero binary columns (Griffiths & Ghahramani's probability of a left-ordered class times the
Gaussian marginal likelihood with the traits integrated out), truncated at ``K_MAX`` features
(the mass beyond is checked to be negligible). From it come ``E[K+ | y]`` and ``E[log N(y | Xψ,
v)]`` for the noise variance ``v = σ²/β`` of every replica: the untempered replica must match the
posterior, and the hot replica of ``β_r`` the posterior of the model with noise variance
``σ²/β_r`` (the product of the replicas' targets is what the swaps keep). Tolerances are 4
Monte-Carlo standard errors with the effective sample size from ArviZ
(``mc_checks.check_mean``).
"""

import functools
import itertools
import math
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from mc_checks import check_mean
from numpyro.infer import MCMC, NUTS, Gibbs

from numpyro_bnp.infer import CRMSlice
from numpyro_bnp.infer.features.crm.tempering import replica_numbers, swap_replicas
from numpyro_bnp.models import beta_bernoulli_linear_gaussian

MASS, SIGMA_O, SIGMA_A = 1.0, 0.4, 1.0
Y = np.array([[1.1, -0.2], [0.9, 0.8], [-0.1, 1.0]])  # N = 3, D = 2
KWARGS = dict(num_obs=3, dim=2, mass=MASS, sigma_o=SIGMA_O, sigma_a=SIGMA_A)
BETAS = (1.0, 0.5, 0.2)
K_MAX = 10  # features of the enumeration
WARMUP = 100


def harmonic(n):
    return float(np.sum(1.0 / np.arange(1, n + 1)))


@functools.cache
def _feature_matrices():
    """Every multiset of the non-zero binary columns of ``N = 3`` rows with at most ``K_MAX``
    columns: ``(columns (7, N), counts (M, 7), K+ (M,), log IBP probability of the class (M,))``
    (Griffiths & Ghahramani: ``α^K+ / Π_h K_h! · Π_k (N - m_k)! (m_k - 1)! / N!``, without the
    common ``exp(-α H_N)``)."""
    rows = Y.shape[0]
    columns = np.array([c for c in itertools.product((0, 1), repeat=rows) if any(c)], float)
    m = columns.sum(1)
    log_f = np.array(
        [math.lgamma(rows - k + 1) + math.lgamma(k) - math.lgamma(rows + 1) for k in m]
    )
    counts = []
    for total in range(K_MAX + 1):
        for combo in itertools.combinations_with_replacement(range(len(columns)), total):
            counts.append(np.bincount(np.asarray(combo, int), minlength=len(columns)))
    counts = np.array(counts, float)
    k_plus = counts.sum(1)
    log_factorials = np.vectorize(math.lgamma)(counts + 1).sum(1)
    log_prior = k_plus * np.log(MASS) - log_factorials + counts @ log_f
    return columns, counts, k_plus, log_prior


@functools.cache
def _spectrum(sigma_a=SIGMA_A):
    """``X ψ_d ~ N(0, S)`` with ``S = σ_0² X Xᵀ = σ_0² Σ_h K_h c_h c_hᵀ`` (the traits integrated
    out) for every multiset: the eigenvalues ``λ`` of ``S`` ``(M, N)`` and the squared
    projections of the data on its eigenvectors, summed over the columns, ``(M, N)``."""
    columns, counts, _, _ = _feature_matrices()
    s = sigma_a**2 * np.einsum("mh,hi,hj->mij", counts, columns, columns)
    lam, vectors = np.linalg.eigh(s)
    proj = np.einsum("mij,id->mjd", vectors, Y)
    return np.clip(lam, 0.0, None), np.sum(proj**2, -1)


def exact_posterior(noise_var):
    """For each noise variance ``v`` of ``noise_var`` (any shape): ``E[K+ | y]``,
    ``E[log N(y | Xψ, v)]``, the posterior mass at ``K+ = K_MAX`` and ``log p(y)`` (up to a
    constant that does not depend on ``v``), by enumeration: with ``y_d = Xψ_d + ε`` and
    ``C = S + v I``, ``log p(y_d | X) = -½ y_dᵀ C⁻¹ y_d - ½ log|C|`` and
    ``E‖y - Xψ‖² = Σ_d ‖v C⁻¹ y_d‖² + D tr(S - S C⁻¹ S)``."""
    rows, dim = Y.shape
    _, _, k_plus, log_prior = _feature_matrices()
    lam, proj2 = _spectrum()
    v = np.asarray(noise_var, float)[..., None, None]
    log_marginal = -0.5 * np.sum(proj2 / (lam + v) + dim * np.log(lam + v), -1)
    sq = np.sum(v**2 * proj2 / (lam + v) ** 2 + dim * lam * v / (lam + v), -1)
    v = v[..., 0]
    log_lik = -0.5 * sq / v - 0.5 * rows * dim * np.log(2 * np.pi * v)
    log_w = log_prior + log_marginal
    top = log_w.max(-1, keepdims=True)
    w = np.exp(log_w - top)
    total = w.sum(-1, keepdims=True)
    w /= total
    return (
        w @ k_plus,
        np.sum(w * log_lik, -1),
        w[..., k_plus == K_MAX].sum(-1),
        (top + np.log(total))[..., 0],
    )


def run(kernel, num_samples, num_chains=4, seed=0, extra_fields=(), **model_kwargs):
    mcmc = MCMC(
        kernel,
        num_warmup=WARMUP,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(seed), extra_fields=extra_fields, **model_kwargs)
    return mcmc


FIELDS = (
    "swap_rate",
    "swapped",
    "replicas.states.num_active",
    "replicas.states.log_likelihood",
)


@pytest.fixture(scope="module")
def tempered():
    """4 vectorized chains of 3 replicas on the 3-row data set."""
    kernel = CRMSlice(beta_bernoulli_linear_gaussian, temperatures=BETAS, max_features=24)
    mcmc = run(kernel, 2000, extra_fields=FIELDS, obs=jnp.asarray(Y), **KWARGS)
    return kernel, mcmc, mcmc.get_extra_fields(group_by_chain=True)


# ---------------------------------------------------------------------------------------------
# exactness
# ---------------------------------------------------------------------------------------------
def test_enumeration_is_complete():
    # the mass beyond K_MAX features moves E[K+] by about 1e-4, far below the Monte-Carlo error
    for beta in BETAS:
        assert exact_posterior(SIGMA_O**2 / beta)[2] < 1e-5
    # without information in the data, the prior: E[K+] = α H_N
    assert abs(exact_posterior(1e8)[0] - MASS * harmonic(3)) < 1e-4


def test_every_replica_matches_its_enumerated_posterior(tempered):
    _, _, extra = tempered
    assert not np.any(extra["saturated"])
    k_plus, log_lik = exact_posterior(SIGMA_O**2)[:2]
    check_mean(extra["num_active"], k_plus)  # the samples: the untempered posterior
    check_mean(extra["log_likelihood"], log_lik)
    for r, beta in enumerate(BETAS[1:]):  # the hot replicas: noise variance σ²/β
        k_plus, log_lik = exact_posterior(SIGMA_O**2 / beta)[:2]
        check_mean(extra["replicas.states.num_active"][..., r], k_plus)
        check_mean(extra["replicas.states.log_likelihood"][..., r], log_lik)


def test_collapsed_rows_match_the_enumerated_posterior():
    # the count step with every trait integrated out (collapsed_rows=True), then the traits
    # drawn for the exchange and column moves, in every replica at its own noise variance
    kernel = CRMSlice(
        beta_bernoulli_linear_gaussian,
        temperatures=BETAS,
        max_features=24,
        collapsed_rows=True,
        n_collapsed=1,
    )
    mcmc = run(kernel, 1000, extra_fields=FIELDS, obs=jnp.asarray(Y), **KWARGS)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    assert not np.any(extra["saturated"])
    for r, beta in enumerate(BETAS):
        k_plus, log_lik = exact_posterior(SIGMA_O**2 / beta)[:2]
        field = "" if r == 0 else "replicas.states."
        draws = {name: extra[field + name] for name in ("num_active", "log_likelihood")}
        if r:
            draws = {name: value[..., r - 1] for name, value in draws.items()}
        check_mean(draws["num_active"], k_plus)
        check_mean(draws["log_likelihood"], log_lik)


def test_prior_only_recovers_expected_features_and_always_swaps():
    # no likelihood: every replica targets the prior and every proposed exchange is accepted
    kwargs = dict(num_obs=6, dim=1, mass=1.5)
    kernel = CRMSlice(beta_bernoulli_linear_gaussian, xi_scale=3.0, temperatures=3)
    mcmc = run(kernel, 300, extra_fields=("swap_rate", "swapped"), **kwargs)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    assert not np.any(extra["saturated"])
    check_mean(extra["num_active"], 1.5 * harmonic(6))
    assert np.all(extra["swap_rate"] == 1.0)
    # deterministic even-odd schedule: pair p is proposed after sweep i when p = i mod 2
    sweep = WARMUP + np.arange(300)
    proposed = (np.arange(2)[None, :] % 2) == (sweep[:, None] % 2)
    assert np.array_equal(extra["swapped"], np.broadcast_to(proposed, extra["swapped"].shape))


# ---------------------------------------------------------------------------------------------
# a block of numpyro.infer.Gibbs: NUTS moves the noise scale, seeing the untempered replica only
# ---------------------------------------------------------------------------------------------
SIGMA_PRIOR = dist.Gamma(10.0, 20.0)  # noise scale: mean 0.5, sd 0.16


def noise_model(obs=None, *, num_obs, dim):
    sigma_o = numpyro.sample("sigma_o", SIGMA_PRIOR)
    return beta_bernoulli_linear_gaussian(
        obs, num_obs=num_obs, dim=dim, mass=MASS, sigma_o=sigma_o, sigma_a=SIGMA_A, max_features=20
    )


def test_gibbs_block_with_nuts_matches_the_enumerated_posterior():
    # exact: p(σ | y) ∝ p(σ) p(y | σ) on a grid of σ, each p(y | σ) and E[K+ | y, σ] enumerated
    grid = np.linspace(0.02, 2.5, 600)
    k_plus, _, _, log_evidence = exact_posterior(grid**2)
    log_post = np.asarray(SIGMA_PRIOR.log_prob(grid)) + log_evidence
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    assert w[0] + w[-1] < 1e-6
    kernel = Gibbs(
        [
            (CRMSlice(noise_model, temperatures=BETAS), ["theta", "X", "psi"]),
            (NUTS(noise_model, max_tree_depth=3), ["sigma_o"]),
        ]
    )
    mcmc = MCMC(
        kernel,
        num_warmup=WARMUP,
        num_samples=1200,
        progress_bar=False,
    )
    fields = ("block_states.0.num_active", "block_states.0.replicas.noise_var")
    mcmc.run(random.PRNGKey(0), jnp.asarray(Y), num_obs=3, dim=2, extra_fields=fields)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    sigma = np.asarray(mcmc.get_samples(group_by_chain=True)["sigma_o"])
    check_mean(extra["block_states.0.num_active"], w @ k_plus)
    check_mean(sigma, w @ grid)
    # after warm-up the hot replicas keep the noise of its end: σ²/β_r for one σ
    hot = np.asarray(extra["block_states.0.replicas.noise_var"])  # (1, draws, R - 1, D)
    assert np.all(hot == hot[:, :1])
    scale = hot[0, 0, :, 0] * np.asarray(BETAS[1:])
    np.testing.assert_allclose(scale, scale[0], rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# the swap field
# ---------------------------------------------------------------------------------------------
def test_swap_rate_is_the_acceptance_probability(tempered):
    kernel, mcmc, extra = tempered
    rate, swapped = np.asarray(extra["swap_rate"]), np.asarray(extra["swapped"])
    assert np.all((rate >= 0) & (rate <= 1))
    sweep = WARMUP + np.arange(rate.shape[1])
    for p in range(len(BETAS) - 1):
        proposed = sweep % 2 == p % 2
        r, s = rate[:, proposed, p].ravel(), swapped[:, proposed, p].ravel()
        assert not np.any(swapped[:, ~proposed, p])
        assert 0.05 < r.mean() < 0.95  # the ladder is neither trivial nor frozen
        # swapped_t - rate_t is a martingale difference: the s.e. of its mean needs no ESS
        se = np.sqrt(np.mean(r * (1 - r)) / r.size)
        assert abs(s.mean() - r.mean()) < 4 * se, (p, s.mean(), r.mean(), se)
    # replicas that differ in nothing always exchange
    states = jax.tree.map(lambda a: a[0], mcmc.last_state)
    stack = jax.tree.map(
        lambda a, b: jnp.concatenate([a[None], b]),
        states._replace(replicas=None, swap_rate=None, swapped=None),
        states.replicas.states,
    )
    numbers = kernel._data(kernel.constants, None, (jnp.asarray(Y),), KWARGS)
    same = replica_numbers(numbers, (1.0, 1.0, 1.0))
    _, rate, _ = swap_replicas(
        random.PRNGKey(0), stack, same, numbers.obs, 0, count_site="X", trait_site="psi"
    )
    assert np.all(np.asarray(rate) == 1.0)


# ---------------------------------------------------------------------------------------------
# the replicas sharded over 4 (virtual) devices draw the same chains
# ---------------------------------------------------------------------------------------------
_CHILD = """
import numpy as np, jax, jax.numpy as jnp
from jax import random
from numpyro.infer import MCMC
from numpyro_bnp.infer import CRMSlice
from numpyro_bnp.models import beta_bernoulli_linear_gaussian
y = jnp.asarray(np.random.default_rng(0).normal(size=(10, 2)))
draws = {}
for shard in (True, False):
    kernel = CRMSlice(beta_bernoulli_linear_gaussian, temperatures=4, max_features=16,
                      shard_replicas=shard)
    mcmc = MCMC(kernel, num_warmup=5, num_samples=20, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(random.PRNGKey(0), y, num_obs=10, dim=2, extra_fields=("swapped",))
    mesh = kernel.constants.mesh
    print(shard, len(jax.devices()), None if mesh is None else mesh.devices.size)
    draws[shard] = (mcmc.get_samples(), mcmc.get_extra_fields())
(a, ea), (b, eb) = draws[True], draws[False]
assert np.array_equal(ea["num_active"], eb["num_active"])
assert np.array_equal(ea["swapped"], eb["swapped"]) and ea["swapped"].any()
assert np.array_equal(a["X"], b["X"])
# float32 sums over the devices in another order: the traits agree to rounding
np.testing.assert_allclose(a["psi"], b["psi"], rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(ea["log_joint"], eb["log_joint"], rtol=1e-6)
print("same")
"""


def test_sharded_replicas_draw_the_same_chains():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_COMPILATION_CACHE_DIR"] = str(
        pathlib.Path(__file__).resolve().parents[1] / ".jax_cache"
    )
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:3] == ["True 4 4", "False 4 None", "same"], out.stdout


# ---------------------------------------------------------------------------------------------
# bad ladders
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "temperatures, match",
    [
        ((0.9, 0.5), "start at 1"),
        ((1.0, 0.5, 0.5), "strictly decreasing"),
        ((1.0, 0.2, 0.5), "strictly decreasing"),
        ((1.0, 0.0), "> 0"),
        ((1.0, -0.5), "> 0"),
        ((1.0, float("nan")), "finite"),
        ((1.0, float("inf")), "finite"),
        ((1.0,), "at least 2"),
        (1, "int >= 2"),
        (True, "temperatures"),
        ("hot", "temperatures"),
        ([[1.0, 0.5]], "at least 2"),
    ],
)
def test_bad_ladders_raise(temperatures, match):
    with pytest.raises(ValueError, match="temperatures") as info:
        CRMSlice(beta_bernoulli_linear_gaussian, temperatures=temperatures)
    assert match in str(info.value)
