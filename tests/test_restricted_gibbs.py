"""RestrictedIBPGibbs: the collapsed Gibbs kernel for restricted-IBP linear-Gaussian models.

References are independent of the kernel: the exact posterior over Z of a tiny model (all
labelled matrices enumerated, the collapsed Gaussian likelihood from SciPy's multivariate normal,
the beta-process integral by tensor Gauss–Jacobi quadrature), the prior itself (i.i.d. Beta
draws and exact restricted-Bernoulli rows) under a flat likelihood, and known truth on synthetic
data. Monte-Carlo tolerances use ArviZ's effective sample size; each check is at 4.5–5 s.e., so
with about 60 checks the family-wise false-alarm rate stays below 1e-3 (fixed seeds).
"""

import itertools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC
from scipy import stats
from scipy.optimize import linear_sum_assignment
from scipy.special import roots_jacobi

from numpyro_bnp import arviz_compat, models
from numpyro_bnp.distributions import RestrictedBernoulliProcess, exactly
from numpyro_bnp.infer import RestrictedIBPGibbs

az = arviz_compat.arviz()


def ess(x):
    """ArviZ bulk ESS of a ``(chain, draw)`` series (the number of draws if it is constant)."""
    x = np.asarray(x, np.float64)
    if np.ptp(x) == 0:
        return float(x.size)
    return float(az.ess(x))


def mc_mean_and_se(x):
    """Mean and its standard error from ArviZ's ESS, for a ``(chain, draw)`` series."""
    x = np.asarray(x, np.float64)
    return x.mean(), x.std() / np.sqrt(ess(x))


# ---------------------------------------------------------------------------- exact reference
def exact_posterior(obs, count_pmf, beta_a, beta_b, sigma_a, sigma_o, nodes=40):
    """All labelled Z with allowed row counts, ``P(Z | O)`` and ``E[sorted π | O]``.

    ``P(Z) = ∫ Π_n P(z_n | π) Π_k Beta(π_k) dπ`` by a tensor Gauss–Jacobi rule (the Beta weight
    is exact in the rule), ``p(O | Z)`` column by column as ``N(0, σ_A² ZZᵀ + σ_o² I)``.
    """
    num_rows, dim = obs.shape
    k = len(count_pmf) - 1
    rows = [np.array(r) for r in itertools.product((0, 1), repeat=k) if count_pmf[sum(r)] > 0]
    x, w = roots_jacobi(nodes, beta_b - 1.0, beta_a - 1.0)  # weight (1-x)^(b-1) (1+x)^(a-1)
    grid = np.stack(np.meshgrid(*[(1.0 + x) / 2.0] * k, indexing="ij"), -1).reshape(-1, k)
    weight = np.prod(np.stack(np.meshgrid(*[w / w.sum()] * k, indexing="ij"), -1), -1).ravel()
    pb = np.zeros((len(grid), k + 1))
    pb[:, 0] = 1.0
    for i in range(k):  # Poisson-binomial pmf on the grid (plain recursion, no logs)
        pb[:, 1:] = pb[:, 1:] * (1.0 - grid[:, i : i + 1]) + pb[:, :-1] * grid[:, i : i + 1]
        pb[:, 0] *= 1.0 - grid[:, i]
    row_prob = np.stack(
        [
            count_pmf[r.sum()] * np.prod(np.where(r == 1, grid, 1.0 - grid), -1) / pb[:, r.sum()]
            for r in rows
        ],
        1,
    )
    sorted_grid = -np.sort(-grid, 1)
    configs = list(itertools.product(range(len(rows)), repeat=num_rows))
    log_post = np.zeros(len(configs))
    sorted_pi = np.zeros((len(configs), k))
    for c, idx in enumerate(configs):
        z = np.stack([rows[i] for i in idx])
        cov = sigma_a**2 * z @ z.T + sigma_o**2 * np.eye(num_rows)
        mvn = stats.multivariate_normal(np.zeros(num_rows), cov)
        joint = weight * np.prod(row_prob[:, list(idx)], 1)
        log_post[c] = np.log(joint.sum()) + sum(mvn.logpdf(obs[:, d]) for d in range(dim))
        sorted_pi[c] = joint @ sorted_grid / joint.sum()
    post = np.exp(log_post - log_post.max())
    post /= post.sum()
    matrices = np.stack([np.stack([rows[i] for i in idx]) for idx in configs])
    return matrices, post, post @ sorted_pi


def independent_log_likelihood(obs, z, sigma_a, sigma_o):
    """``log p(O | Z)``, the features integrated out, from SciPy (each column Gaussian)."""
    num_rows, dim = obs.shape
    cov = sigma_a**2 * z @ z.T + sigma_o**2 * np.eye(num_rows)
    mvn = stats.multivariate_normal(np.zeros(num_rows), cov)
    return sum(mvn.logpdf(obs[:, d]) for d in range(dim))


def independent_log_joint(obs, z, pi, count_pmf, beta_a, beta_b, sigma_a, sigma_o):
    """``log p(O | Z) + log P(Z | π) + log p(π)`` from SciPy and the row distribution's pmf."""
    log_lik = independent_log_likelihood(obs, z, sigma_a, sigma_o)
    log_prior = stats.beta(beta_a, beta_b).logpdf(pi).sum()
    row = RestrictedBernoulliProcess(pi, dist.Categorical(jnp.asarray(count_pmf)))
    return log_lik + log_prior + float(row.log_prob(jnp.asarray(z)).sum())


TINY_OBS = np.array([[1.0, -0.5], [0.8, 0.9], [-0.2, 1.1]])
TINY = dict(
    num_obs=3, dim=2, mass=1.5, sigma_a=1.0, sigma_o=0.7, max_features=3
)  # π ~ Beta(.5, .5)


@pytest.mark.parametrize(
    "count_pmf, chain_method",
    [([0.0, 0.6, 0.4, 0.0], "sequential"), ([0.0, 0.0, 1.0, 0.0], "vectorized")],
    ids=["f_on_1_2", "exactly_2"],
)
def test_matches_enumerated_posterior(count_pmf, chain_method):
    count_pmf = np.array(count_pmf)
    law = exactly(2) if count_pmf[2] == 1.0 else dist.Categorical(jnp.asarray(count_pmf[:3]))
    model = partial(models.restricted_linear_gaussian, count_dist=law, **TINY)
    mcmc = MCMC(
        RestrictedIBPGibbs(model),
        num_warmup=200,
        num_samples=3000,
        num_chains=2,
        chain_method=chain_method,
        progress_bar=False,
    )
    fields = ("log_joint", "log_likelihood")
    mcmc.run(random.PRNGKey(0), obs=jnp.asarray(TINY_OBS), extra_fields=fields)
    samples = mcmc.get_samples(group_by_chain=True)
    z = np.asarray(samples["Z"])  # (2, S, 3, 3)
    matrices, post, sorted_pi = exact_posterior(TINY_OBS, count_pmf, 0.5, 0.5, 1.0, 0.7)

    codes = (z.reshape(*z.shape[:2], -1) << np.arange(9)).sum(-1)
    ref_codes = (matrices.reshape(len(matrices), -1) << np.arange(9)).sum(-1)
    assert np.isin(codes, ref_codes).all()  # every draw has allowed row counts
    big = post >= 0.005  # cells tested one by one; the small ones together as one cell
    cells = [codes == c for c in ref_codes[big]] + [~np.isin(codes, ref_codes[big])]
    for hit, p in zip(cells, [*post[big], post[~big].sum()], strict=True):
        se = np.sqrt(p * (1.0 - p) / ess(hit))
        assert abs(hit.mean() - p) < 4.5 * se, (hit.mean(), p, se)

    drawn = -np.sort(-np.asarray(samples["pi"]), -1)
    for k in range(3):
        mean, se = mc_mean_and_se(drawn[..., k])
        assert abs(mean - sorted_pi[k]) < 4.5 * se, (k, mean, sorted_pi[k], se)

    # the kernel's log_joint and log_likelihood diagnostics equal independent computations
    extra = mcmc.get_extra_fields(group_by_chain=True)
    log_joint, log_lik = np.asarray(extra["log_joint"]), np.asarray(extra["log_likelihood"])
    pi = np.asarray(samples["pi"])
    for c, s in [(0, 0), (1, 17), (0, 2999)]:
        ref = independent_log_joint(TINY_OBS, z[c, s], pi[c, s], count_pmf[:3], 0.5, 0.5, 1.0, 0.7)
        np.testing.assert_allclose(log_joint[c, s], ref, rtol=1e-9)
        ref = independent_log_likelihood(TINY_OBS, z[c, s], 1.0, 0.7)
        np.testing.assert_allclose(log_lik[c, s], ref, rtol=1e-9)

    data = arviz_compat.from_numpyro(mcmc)  # multi-chain export, both chain methods
    posterior = arviz_compat.group(data, "posterior")
    assert posterior["Z"].shape == (2, 3000, 3, 3) and posterior["pi"].shape == (2, 3000, 3)
    assert arviz_compat.group(data, "log_likelihood")["obs"].shape[:2] == (2, 3000)
    assert "log_joint" in arviz_compat.group(data, "sample_stats")


def test_prior_only_run_recovers_the_prior():
    """With a flat likelihood (σ_o = 10³, data 0) the posterior is the prior itself."""
    num_rows, num_features, mass = 10, 8, 2.0
    law = dist.Poisson(1.5)
    model = partial(
        models.restricted_linear_gaussian,
        num_obs=num_rows,
        dim=1,
        count_dist=law,
        mass=mass,
        sigma_o=1e3,
        max_features=num_features,
    )
    mcmc = MCMC(
        RestrictedIBPGibbs(model),
        num_warmup=100,
        num_samples=2000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), obs=jnp.zeros((num_rows, 1)), extra_fields=("num_active",))
    samples = mcmc.get_samples(group_by_chain=True)
    pi, z = np.asarray(samples["pi"]), np.asarray(samples["Z"])

    # the prior: π_k ~ Beta(α/K, 1 - α/K) i.i.d., rows exact restricted-Bernoulli draws
    draws = 8_000
    shape = mass / num_features
    key_pi, key_z = random.split(random.PRNGKey(1))
    pi_ref = np.asarray(random.beta(key_pi, shape, 1.0 - shape, (draws, num_features)))
    rows = jax.vmap(lambda k, p: RestrictedBernoulliProcess(p, law).sample(k, (num_rows,)))
    z_ref = np.asarray(jax.jit(rows)(random.split(key_z, draws), jnp.asarray(pi_ref)))

    def check(chain_values, reference):
        mean, se = mc_mean_and_se(chain_values)
        se_ref = reference.std() / np.sqrt(len(reference))
        assert abs(mean - reference.mean()) < 5.0 * np.hypot(se, se_ref), (mean, reference.mean())

    for k in range(num_features):  # the feature-probability profile
        check(-np.sort(-pi, -1)[..., k], -np.sort(-pi_ref, -1)[:, k])
        check(-np.sort(-z.mean(-2), -1)[..., k], -np.sort(-z_ref.mean(-2), -1)[:, k])
    count_pmf = stats.poisson(1.5).pmf(np.arange(num_features + 1))
    count_pmf /= count_pmf.sum()  # the law is cut to 0..K and renormalised
    for j in range(5):  # row counts follow f exactly
        mean, se = mc_mean_and_se((z.sum(-1) == j).mean(-1))
        assert abs(mean - count_pmf[j]) < 5.0 * se, (j, mean, count_pmf[j], se)
    active = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_active"])
    check(active, (z_ref.sum(-2) > 0).sum(-1))


def synthetic_features(counts, seed=0, num_rows=60, dim=16, true_k=5, sigma_o=0.2):
    """Five well-separated N(0, I) features; row ``n`` uses ``counts(rng)`` of them at random."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(true_k, dim))
    z_true = np.zeros((num_rows, true_k), int)
    for n in range(num_rows):
        z_true[n, rng.choice(true_k, counts(rng), replace=False)] = 1
    obs = z_true @ features + sigma_o * rng.normal(size=(num_rows, dim))
    return features, z_true, obs


def run_recovery(count_dist, obs, sigma_o, num_warmup, num_chains):
    """Chains on the synthetic data; returns the best chain's ``Z``, ``A``, ``num_active``."""
    num_rows, dim = obs.shape
    model = partial(
        models.restricted_linear_gaussian,
        num_obs=num_rows,
        dim=dim,
        count_dist=count_dist,
        mass=2.0,
        sigma_o=sigma_o,
        max_features=10,
    )
    mcmc = MCMC(
        RestrictedIBPGibbs(model),
        num_warmup=num_warmup,
        num_samples=100,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), obs=jnp.asarray(obs), extra_fields=("log_joint", "num_active"))
    extra = mcmc.get_extra_fields(group_by_chain=True)
    best = int(np.argmax(np.asarray(extra["log_joint"]).mean(1)))
    samples = mcmc.get_samples(group_by_chain=True)
    z, a = np.asarray(samples["Z"])[best], np.asarray(samples["A"])[best]
    return z, a, np.asarray(extra["num_active"])[best]


def check_recovery(z, a, num_active, features, z_true):
    """The truth up to permutation: rows, features (posterior sd ~ σ_o/sqrt(24) = 0.04), K."""
    assert (num_active == features.shape[0]).mean() > 0.9
    errors = []
    for zs, as_ in zip(z, a, strict=True):
        used = zs.sum(0) > 0
        cost = ((features[:, None, :] - as_[None]) ** 2).mean(-1) + np.where(used, 0.0, 1e6)
        rows, cols = linear_sum_assignment(cost)
        errors.append(np.sqrt(cost[rows, cols].max()))
        # the rows' features are the true ones under the matching
        assert (zs[:, cols] == z_true[:, rows]).mean() > 0.97
    assert np.quantile(errors, 0.9) < 0.15


def test_recovers_features_and_row_count():
    """Synthetic data, exactly J = 2 of 5 features per row: the features up to permutation.

    Single-row Gibbs moves can stick in a mode where one feature is shared by all rows and each
    pair of true features gets its own; chains are therefore compared by the label-free
    ``log_joint`` diagnostic and the best one is checked (about half of the chains reach the
    truth after this warmup). Five features, not four: with four and J = 2, ``B_i = S/2 - A_i``
    (``S`` the sum of the features) with every row switched to the complementary pair explains
    the data equally well — the model is not identifiable there.
    """
    count, sigma_o = 2, 0.2
    features, z_true, obs = synthetic_features(lambda rng: count, sigma_o=sigma_o)
    z, a, num_active = run_recovery(exactly(count), obs, sigma_o, num_warmup=500, num_chains=8)
    assert (z.sum(-1) == count).all()
    check_recovery(z, a, num_active, features, z_true)


def test_recovers_row_counts_under_a_broad_count_law():
    """f uniform on {1, 2, 3}, each row's true count drawn from f: the counts row by row.

    The true counts vary, so complementing a feature (``z_{:k} → 1 - z_{:k}``, which with
    ``B_j = A_j + A_k``, ``C = -2 A_k`` explains the data equally well) would push some row
    outside {1, 2, 3}: the truth is identifiable. (With every true count equal to 2 it is not:
    the posterior moves to the complemented representation, counts 1 and 3; see the docs.)
    Every draw of the best chain must give every row its true count.
    """
    sigma_o = 0.2
    features, z_true, obs = synthetic_features(lambda rng: int(rng.integers(1, 4)), sigma_o=sigma_o)
    law = dist.Categorical(jnp.array([0.0, 1.0, 1.0, 1.0]) / 3.0)
    z, a, num_active = run_recovery(law, obs, sigma_o, num_warmup=300, num_chains=4)
    assert set(z_true.sum(1)) == {1, 2, 3}
    assert (z.sum(-1) == z_true.sum(1)).all()
    check_recovery(z, a, num_active, features, z_true)


def test_bad_models_raise_clear_errors():
    obs = jnp.zeros((3, 2))
    kernel = RestrictedIBPGibbs(models.linear_gaussian)
    with pytest.raises(ValueError, match=r"RestrictedBernoulliProcess.*the model has: Z: Recurs"):
        kernel.init(random.PRNGKey(0), 0, None, (), dict(num_obs=3, dim=2, obs=obs))

    restricted = partial(models.restricted_linear_gaussian, count_dist=exactly(1), **TINY)
    with pytest.raises(ValueError, match="data at the observed site 'obs'"):
        RestrictedIBPGibbs(restricted).init(random.PRNGKey(0), 0, None, (), {})

    def poisson_obs(obs=None):
        pi = numpyro.sample("pi", dist.Beta(0.5, 0.5).expand([3]).to_event(1))
        z = numpyro.sample("Z", RestrictedBernoulliProcess(pi, exactly(1)).expand([3]).to_event(1))
        a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([3, 2]).to_event(2))
        numpyro.sample("obs", dist.Poisson(jnp.exp(z @ a)).to_event(2), obs=obs)

    with pytest.raises(ValueError, match="linear-Gaussian observed site 'obs'"):
        RestrictedIBPGibbs(poisson_obs).init(random.PRNGKey(0), 0, None, (), dict(obs=obs))

    def other_probs(obs=None):
        numpyro.sample("pi", dist.Beta(0.5, 0.5).expand([3]).to_event(1))
        z = numpyro.sample(
            "Z", RestrictedBernoulliProcess(jnp.full(3, 0.3), exactly(1)).expand([3]).to_event(1)
        )
        a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([3, 2]).to_event(2))
        numpyro.sample("obs", dist.Normal(z @ a, 1.0).to_event(2), obs=obs)

    with pytest.raises(ValueError, match="probabilities of 'Z' to be the value of the Beta site"):
        RestrictedIBPGibbs(other_probs).init(random.PRNGKey(0), 0, None, (), dict(obs=obs))

    kernel = RestrictedIBPGibbs(restricted)
    with pytest.raises(ValueError, match="init_params\\['Z'\\] must be binary"):
        kernel.init(random.PRNGKey(0), 0, {"Z": jnp.ones((3, 3), int)}, (), dict(obs=obs))
    with pytest.raises(ValueError, match="init_params\\['pi'\\] must have shape"):
        kernel.init(random.PRNGKey(0), 0, {"pi": jnp.ones(2) / 2}, (), dict(obs=obs))
    with pytest.raises(TypeError, match="model must be a NumPyro model function"):
        RestrictedIBPGibbs("not a model")
