import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS, DiscreteHMCGibbs, Predictive
from numpyro.infer import log_likelihood as numpyro_log_likelihood
from scipy.special import gammaln, logsumexp
from scipy.stats import norm

from numpyro_bnp import models
from numpyro_bnp.arviz_compat import group, loo_pointwise
from numpyro_bnp.diagnostics import (
    count_parity,
    feature_dims,
    from_mcmc,
    label_invariants,
    log_predictive,
    new_row_probs,
    summary,
)
from numpyro_bnp.distributions import exactly
from numpyro_bnp.infer import AcceleratedIBPGibbs, RIBPFilter, RIBPResult


def test_count_parity_enumerates_all_small_count_matrices():
    matrices = np.array(list(itertools.product([0, 1, 3], repeat=4))).reshape(-1, 2, 2)
    expected = (np.count_nonzero(matrices, axis=(1, 2)) % 2 == 0).astype(np.int32)
    got = np.asarray(count_parity(matrices))
    assert got.dtype == np.int32 and got.shape == (81,)
    np.testing.assert_array_equal(got, expected)


# ---------------------------------------------------------------- label-invariant summary, dims
N, D, K = 12, 4, 6
MODEL_KW = dict(num_obs=N, dim=D, sigma_o=0.5, max_features=K)


@pytest.fixture(scope="module")
def ibp_run():
    rng = np.random.default_rng(0)
    features = 1.5 * np.repeat(np.eye(2), 2, axis=1)
    data = (rng.random((N, 2)) < 0.5) @ features + 0.5 * rng.normal(size=(N, D))
    mcmc = MCMC(
        AcceleratedIBPGibbs(models.linear_gaussian),
        num_warmup=20,
        num_samples=30,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(0), data, extra_fields=("num_active",), **MODEL_KW)
    return mcmc, data


def test_summary_has_only_label_invariant_rows(ibp_run):
    mcmc, data = ibp_run
    table = summary(mcmc, pairs=[(0, 1), (2, 5)])
    assert list(table.index) == [
        "num_active",
        "log_likelihood",
        "parity",
        "cooccurrence[0-1]",
        "cooccurrence[2-5]",
    ]
    z = np.asarray(mcmc.get_samples(group_by_chain=True)["Z"])
    assert z.shape[:2] == (2, 30)
    by_hand = (z != 0).any(axis=2).sum(-1)
    np.testing.assert_allclose(table.loc["num_active", "mean"], by_hand.mean(), atol=5e-4)
    np.testing.assert_array_equal(by_hand, mcmc.get_extra_fields(group_by_chain=True)["num_active"])
    shared = ((z[:, :, 2] != 0) & (z[:, :, 5] != 0)).any(-1)
    np.testing.assert_allclose(table.loc["cooccurrence[2-5]", "mean"], shared.mean(), atol=5e-4)
    # log-likelihood of one draw, directly: Normal(Z A, sigma_o) over all entries
    a = np.asarray(mcmc.get_samples(group_by_chain=True)["A"])
    resid = data - z[1, 7] @ a[1, 7]
    direct = -0.5 * np.sum(resid**2) / 0.25 - N * D * np.log(0.5 * np.sqrt(2 * np.pi))
    values, _ = label_invariants(
        mcmc.get_samples(group_by_chain=True), models.linear_gaussian, (data,), MODEL_KW
    )
    np.testing.assert_allclose(values["log_likelihood"][1, 7], direct, rtol=1e-5)
    for name in ("num_active", "log_likelihood"):  # they vary over the draws: R-hat is defined
        assert np.isfinite(table.loc[name, "r_hat"])


def test_summary_is_unchanged_by_permuting_feature_labels(ibp_run):
    mcmc, data = ibp_run
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    rng = np.random.default_rng(1)
    perms = np.array([[rng.permutation(K) for _ in range(30)] for _ in range(2)])
    z = np.take_along_axis(samples["Z"], perms[:, :, None, :], axis=3)
    a = np.take_along_axis(samples["A"], perms[:, :, :, None], axis=2)
    assert not np.array_equal(z, samples["Z"])
    permuted = summary(
        {"Z": z, "A": a}, model=models.linear_gaussian, model_args=(data,), model_kwargs=MODEL_KW
    )
    original = summary(mcmc)
    assert list(permuted.index) == list(original.index)
    np.testing.assert_allclose(permuted.to_numpy(float), original.to_numpy(float), rtol=1e-6)


def test_export_names_rows_features_and_dimensions(ibp_run):
    mcmc, _ = ibp_run
    data = from_mcmc(mcmc)
    posterior = group(data, "posterior")
    assert posterior["Z"].dims == ("chain", "draw", "row", "feature")
    assert posterior["A"].dims == ("chain", "draw", "feature", "dim")
    assert posterior["Z"].shape == (2, 30, N, K)
    assert group(data, "observed_data")["obs"].dims == ("row", "dim")
    assert group(data, "log_likelihood")["obs"].dims[:3] == ("chain", "draw", "row")


@pytest.mark.parametrize(
    "model, kwargs, expected",
    [
        (
            models.factor_analysis,
            dict(num_obs=5, dim=3, max_features=4),
            {"Z": ["row", "feature"], "A": ["feature", "dim"], "W": ["row", "feature"]},
        ),
        (
            models.restricted_linear_gaussian,
            dict(num_obs=5, dim=3, count_dist=exactly(1), max_features=4),
            {"pi": ["feature"], "Z": ["row", "feature"], "A": ["feature", "dim"]},
        ),
        (
            models.gamma_poisson_linear_gaussian,
            dict(num_obs=5, dim=3, max_features=4),
            {"theta": ["feature"], "X": ["row", "feature"], "psi": ["feature", "dim"]},
        ),
        (
            models.bnb_combinatorial_clustering,
            dict(doc_lengths=np.full(5, 6.0), vocab_size=3, max_features=4),
            {"theta": ["feature"], "topics": ["feature", "dim"], "rates": ["row", "feature"]},
        ),
        (
            models.nggp_gaussian_mixture,
            dict(num_obs=5, dim=3),
            {"z": ["row"], "mu": ["cluster", "dim"], "Lambda": ["cluster", "dim", "dim2"]},
        ),
    ],
)
def test_feature_dims_of_every_ready_model(model, kwargs, expected):
    obs = np.ones((5, 3))
    dims = feature_dims(model, (obs,), kwargs)
    observed = [name for name in dims if name not in expected]
    assert len(observed) == 1 and dims[observed[0]] == ["row", "dim"]
    assert {k: v for k, v in dims.items() if k in expected} == expected


# ---------------------------------------------------------------- pointwise log-likelihood
def test_loo_sees_one_log_likelihood_term_per_row(ibp_run):
    mcmc, data = ibp_run
    idata = from_mcmc(mcmc)
    pointwise = np.asarray(group(idata, "log_likelihood")["obs"])
    assert pointwise.shape == (2, 30, N)
    samples = mcmc.get_samples(group_by_chain=True)
    z, a = np.asarray(samples["Z"])[0, 3], np.asarray(samples["A"])[0, 3]
    resid = data - z @ a  # sigma_o = 0.5
    joint = -0.5 * np.sum(resid**2) / 0.25 - N * D * np.log(0.5 * np.sqrt(2 * np.pi))
    np.testing.assert_allclose(pointwise[0, 3].sum(), joint, rtol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few draws: ArviZ warns about the Pareto k
        num_points, elpd_i = loo_pointwise(idata)
    assert num_points == N and elpd_i.shape == (N,) and np.all(np.isfinite(elpd_i))


def _normal_loglik(obs, mean, scale):
    return np.sum(-0.5 * ((obs - mean) / scale) ** 2 - np.log(scale * np.sqrt(2 * np.pi)), -1)


@pytest.mark.parametrize(
    "model, kwargs, mean",
    [
        (models.linear_gaussian, dict(sigma_o=0.5, max_features=3), lambda s: s["Z"] @ s["A"]),
        (
            models.factor_analysis,
            dict(sigma_o=0.5, max_features=3),
            lambda s: (s["Z"] * s["W"]) @ s["A"],
        ),
        (
            models.restricted_linear_gaussian,
            dict(sigma_o=0.5, count_dist=exactly(1), max_features=3),
            lambda s: s["Z"] @ s["A"],
        ),
        (
            models.beta_bernoulli_linear_gaussian,
            dict(sigma_o=0.5, max_features=3),
            lambda s: s["X"] @ s["psi"],
        ),
        (
            models.gamma_poisson_linear_gaussian,
            dict(sigma_o=0.5, max_features=3),
            lambda s: s["X"] @ s["psi"],
        ),
    ],
)
def test_ready_models_observe_one_row_at_a_time(model, kwargs, mean):
    obs = np.random.default_rng(2).normal(size=(5, 3))
    kwargs = dict(num_obs=5, dim=3, **kwargs)
    draw = Predictive(model, num_samples=1)(jax.random.PRNGKey(3), **kwargs)
    draw = {k: v for k, v in draw.items() if k != "obs"}
    loglik = numpyro_log_likelihood(model, draw, obs, **kwargs)["obs"]
    assert loglik.shape == (1, 5)
    one = {k: np.asarray(v[0], float) for k, v in draw.items()}
    np.testing.assert_allclose(loglik[0], _normal_loglik(obs, mean(one), 0.5), rtol=1e-5)


def test_topic_model_observes_one_document_at_a_time():
    counts = np.random.default_rng(4).poisson(2.0, size=(4, 6))
    kwargs = dict(doc_lengths=np.full(4, 12.0), vocab_size=6, max_features=3)
    model = models.bnb_combinatorial_clustering
    draw = Predictive(model, num_samples=1)(jax.random.PRNGKey(5), **kwargs)
    draw = {k: v for k, v in draw.items() if k != "counts"}
    loglik = numpyro_log_likelihood(model, draw, counts, **kwargs)["counts"]
    assert loglik.shape == (1, 4)
    rate = np.asarray(draw["rates"][0], float) @ np.asarray(draw["topics"][0], float)
    direct = np.sum(counts * np.log(rate) - rate - gammaln(counts + 1.0), -1)
    np.testing.assert_allclose(loglik[0], direct, rtol=1e-5)


# ---------------------------------------------------------------- held-out predictive rows
def _by_hand(test_row, a, probs, sigma):
    """``log Σ_z Π_k p_k^z_k (1 - p_k)^(1 - z_k) N(x; z A, σ²)``, ``z`` over the features with
    ``p_k > 0``, each configuration written out; also the configurations' log prior and log
    likelihood."""
    cols = np.flatnonzero(probs > 0)
    log_prior, log_lik = [], []
    for bits in itertools.product([0, 1], repeat=cols.size):
        z = np.zeros(probs.size)
        z[cols] = bits
        log_prior.append(np.log(np.prod(np.where(z[cols] == 1, probs[cols], 1.0 - probs[cols]))))
        log_lik.append(norm.logpdf(test_row, z @ a, sigma).sum())
    log_prior, log_lik = np.array(log_prior), np.array(log_lik)
    return logsumexp(log_prior + log_lik), log_prior, log_lik


LG_KW = dict(num_obs=6, dim=3, sigma_o=0.5, concentration=2.0, max_features=4)


@pytest.fixture(scope="module")
def two_draws():
    """Two hand-made linear-Gaussian draws: 2 features used (m = 3, 2) and 3 (m = 6, 1, 1)."""
    rng = np.random.default_rng(5)
    z = np.zeros((1, 2, 6, 4), np.int32)
    z[0, 0, :3, 0] = z[0, 0, 2:4, 1] = 1
    z[0, 1, :, 0] = z[0, 1, 1, 1] = z[0, 1, 5, 2] = 1
    samples = {"Z": z, "A": rng.normal(size=(1, 2, 4, 3))}
    return samples, rng.normal(size=(6, 3)), rng.normal(size=(3, 3))


def test_log_predictive_sums_a_new_rows_features_out_exactly(two_draws):
    samples, data, test = two_draws
    args = (models.linear_gaussian, (data,), LG_KW)
    probs = new_row_probs(samples, *args)  # the buffet's next customer: m_k / (β + N)
    np.testing.assert_allclose(probs[0, 0], [3 / 8, 2 / 8, 0, 0])
    np.testing.assert_allclose(probs[0, 1], [6 / 8, 1 / 8, 1 / 8, 0])
    got = log_predictive(samples, *args, test_obs=test)
    assert got.shape == (1, 2, 3)
    for s in range(2):
        for m in range(3):
            want, log_prior, _ = _by_hand(test[m], samples["A"][0, s], probs[0, s], 0.5)
            assert len(log_prior) == (4 if s == 0 else 8)
            np.testing.assert_allclose(got[0, s, m], want, rtol=1e-10)


def test_log_predictive_falls_back_to_monte_carlo_with_a_warning(two_draws):
    samples, data, test = two_draws
    args = (models.linear_gaussian, (data,), LG_KW)
    exact = log_predictive(samples, *args, test_obs=test)
    with pytest.raises(TypeError, match="rng_key"):
        log_predictive(samples, *args, test_obs=test, max_enumerate=2)
    num = 20_000
    with pytest.warns(UserWarning, match="up to 3 features, more than max_enumerate=2"):
        mc = log_predictive(
            samples,
            *args,
            test_obs=test,
            max_enumerate=2,
            rng_key=jax.random.PRNGKey(0),
            num_mc_samples=num,
        )
    probs = new_row_probs(samples, *args)
    for s in range(2):
        for m in range(3):
            log_p, log_prior, log_lik = _by_hand(test[m], samples["A"][0, s], probs[0, s], 0.5)
            # the estimate is the mean of num likelihoods p(x | z), z ~ prior: its log has
            # standard error sqrt(Var[p(x | z)] / num) / p(x)
            rel_var = np.exp(logsumexp(log_prior + 2 * log_lik) - 2 * log_p) - 1.0
            assert abs(mc[0, s, m] - exact[0, s, m]) < 4 * np.sqrt(rel_var / num)


def test_summary_adds_one_log_predictive_row_per_held_out_row(ibp_run):
    mcmc, data = ibp_run
    test = data[:2] + 0.1
    table = summary(mcmc, pairs=[(0, 1)], test_obs=test, round_to="none")
    assert list(table.index) == [
        "num_active",
        "log_likelihood",
        "parity",
        "cooccurrence[0-1]",
        "log_predictive[0]",
        "log_predictive[1]",
    ]
    samples = mcmc.get_samples(group_by_chain=True)
    z = np.asarray(samples["Z"])
    probs = new_row_probs(samples, models.linear_gaussian, (data,), MODEL_KW)
    np.testing.assert_allclose(probs, z.sum(2) / (1.0 + N), rtol=1e-12)  # β = 1
    values = log_predictive(samples, models.linear_gaussian, (data,), MODEL_KW, test_obs=test)
    np.testing.assert_allclose(table.loc["log_predictive[1]", "mean"], values[..., 1].mean())
    want = _by_hand(test[1], np.asarray(samples["A"])[1, 4], probs[1, 4], 0.5)[0]
    np.testing.assert_allclose(values[1, 4, 1], want, rtol=1e-8)


@pytest.mark.parametrize(
    "model, kwargs, match",
    [
        (models.factor_analysis, dict(max_features=3), "not other per-row latent sites"),
        (models.gamma_poisson_linear_gaussian, dict(max_features=3), "has a Poisson distribution"),
        (
            models.restricted_linear_gaussian,
            dict(count_dist=exactly(1), max_features=3),
            "has a RestrictedBernoulliProcess distribution",
        ),
    ],
)
def test_log_predictive_refuses_what_it_cannot_sum_out(model, kwargs, match):
    kwargs = dict(num_obs=5, dim=3, **kwargs)
    draws = Predictive(model, num_samples=4)(jax.random.PRNGKey(0), **kwargs)
    draws = {k: np.asarray(v).reshape(2, 2, *v.shape[1:]) for k, v in draws.items() if k != "obs"}
    data = np.zeros((5, 3))
    with pytest.raises(ValueError, match=match):
        log_predictive(draws, model, (data,), kwargs, test_obs=data[:1])


def test_streaming_log_predictive_refuses_factor_analysis():
    filt = RIBPFilter(models.factor_analysis, max_features=4)
    state = filt.init(jax.random.PRNGKey(0), dim=3)
    result = RIBPResult(filt, state, {}, np.zeros(0, np.int64))
    with pytest.raises(ValueError, match="weight site 'W'"):
        summary(
            result, rng_key=jax.random.PRNGKey(1), obs=np.zeros((2, 3)), test_obs=np.zeros((1, 3))
        )


def test_constant_quantities_do_not_warn():
    """Z the same in every draw: num_active, parity and co-occurrence are constant (R-hat NaN)."""
    rng = np.random.default_rng(6)
    z = np.zeros((N, K), np.int32)
    z[:, 0] = 1
    z[::2, 1] = 1
    draws = {"Z": np.broadcast_to(z, (2, 50, N, K)), "A": rng.normal(size=(2, 50, K, D))}
    data = rng.normal(size=(N, D))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = summary(
            draws,
            model=models.linear_gaussian,
            model_args=(data,),
            model_kwargs=MODEL_KW,
            test_obs=data[:1],
        )
    constant = ["num_active", "parity", "cooccurrence[0-1]", "cooccurrence[0-6]"]
    assert table.loc[constant, "sd"].eq(0).all() and table.loc[constant, "r_hat"].isna().all()
    assert np.isfinite(table.loc["log_likelihood", "r_hat"])
    assert np.isfinite(table.loc["log_predictive[0]", "r_hat"])


# ---------------------------------------------------------------- NumPyro's DiscreteHMCGibbs
def truncated_beta_bernoulli(obs=None, *, num_obs, dim, max_features, sigma_o=0.5):
    """Linear-Gaussian model with the K-atom beta-Bernoulli prior: π_k ~ Beta(1/K, 1),
    Z_nk ~ Bernoulli(π_k) in plates (NumPyro's DiscreteHMCGibbs moves each entry)."""
    pi = numpyro.sample("pi", dist.Beta(1.0 / max_features, 1.0).expand([max_features]))
    with numpyro.plate("rows", num_obs, dim=-2), numpyro.plate("features", max_features):
        z = numpyro.sample("Z", dist.Bernoulli(pi))
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([max_features, dim]).to_event(2))
    with numpyro.plate("row", z.shape[0]):
        numpyro.sample("obs", dist.Normal(z @ a, sigma_o).to_event(1), obs=obs)


def test_summary_of_numpyros_discrete_hmc_gibbs(ibp_run):
    """The ready IBP models have no enumerable support (NumPyro cannot move a buffet matrix):
    the model is the truncated beta-Bernoulli one, whose new row takes feature k w.p. π_k."""
    _, data = ibp_run
    kwargs = dict(num_obs=N, dim=D, max_features=4)
    mcmc = MCMC(
        DiscreteHMCGibbs(NUTS(truncated_beta_bernoulli)),
        num_warmup=20,
        num_samples=30,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(1), data, **kwargs)
    test = data[:2] + 0.1
    table = summary(mcmc, test_obs=test)
    reference = summary(ibp_run[0], test_obs=test)
    assert list(table.index) == list(reference.index)
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    values, _ = label_invariants(samples, truncated_beta_bernoulli, (data,), kwargs)
    z, a, pi = samples["Z"][1, 9], samples["A"][1, 9], samples["pi"][1, 9]
    np.testing.assert_allclose(values["log_likelihood"][1, 9], norm.logpdf(data, z @ a, 0.5).sum())
    predictive = log_predictive(samples, truncated_beta_bernoulli, (data,), kwargs, test_obs=test)
    np.testing.assert_allclose(predictive[1, 9, 0], _by_hand(test[0], a, pi, 0.5)[0], rtol=1e-8)


# ---------------------------------------------------------------- streaming results
S_DIM, S_SIGMA = 5, 0.2


@pytest.fixture(scope="module")
def stream():
    """A linear-Gaussian stream of 400 rows (3 features, each used w.p. 0.4) and 3 held out."""
    rng = np.random.default_rng(0)
    feats = 2.0 * rng.normal(size=(3, S_DIM))
    z = (rng.random((403, 3)) < 0.4).astype(float)
    data = z @ feats + S_SIGMA * rng.normal(size=(403, S_DIM))
    filt = RIBPFilter(
        models.linear_gaussian,
        max_features=16,
        num_steps=4,
        retire_threshold=1e-2,
        dtype=jnp.float32,
    )
    result = filt.run(
        jax.random.PRNGKey(0),
        data[:400],
        progress_bar=False,
        chunk_size=64,
        dim=S_DIM,
        mass=1.0,
        sigma_o=S_SIGMA,
    )
    return result, data[:400], data[400:]


def test_summary_of_a_streaming_result(stream):
    result, train, test = stream
    rows = train[:100]
    with pytest.raises(TypeError, match="obs"):
        summary(result, rng_key=jax.random.PRNGKey(1))
    table = summary(
        result, rng_key=jax.random.PRNGKey(1), obs=rows, num_draws=250, num_chains=4, test_obs=test
    )
    assert list(table.index) == [
        "num_active",
        "log_likelihood",
        "parity",
        "cooccurrence[0-1]",
        "cooccurrence[0-50]",
        "cooccurrence[50-99]",
        "log_predictive[0]",
        "log_predictive[1]",
        "log_predictive[2]",
    ]
    # 100 rows use every active feature of every draw
    assert abs(table.loc["num_active", "mean"] - result.num_active) < 0.1
    for name in ("log_likelihood", "log_predictive[0]", "log_predictive[2]"):
        # 4 x 250 independent draws: ESS about 1000, R-hat about 1
        assert 700 < table.loc[name, "ess_bulk"] < 1400
        assert abs(table.loc[name, "r_hat"] - 1.0) < 0.02
    # log_likelihood against other draws of the same posterior, by hand: Normal(Z A, σ²) of the rows
    draws = result.posterior_samples(jax.random.PRNGKey(7), 1000, obs=rows)
    mean = np.einsum("smk,skd->smd", np.asarray(draws["Z"]), np.asarray(draws["A"]))
    by_hand = norm.logpdf(rows, mean, S_SIGMA).sum((1, 2))
    se = np.sqrt(by_hand.var() / 1000 + table.loc["log_likelihood", "sd"] ** 2 / 1000)
    assert abs(table.loc["log_likelihood", "mean"] - by_hand.mean()) < 4 * se


def test_streaming_log_predictive_averages_to_the_filters_predictive(stream):
    """The mean over draws of p(x* | A, π) is the filter's p(x* | data), which it computes
    otherwise (features integrated in closed form, z importance-sampled over all slots)."""
    result, train, test = stream
    samples = result.posterior_samples(jax.random.PRNGKey(2), 2000, obs=train[:5])
    samples = {k: np.asarray(v)[None] for k, v in samples.items()}
    model = numpyro.handlers.condition(models.linear_gaussian, data={"obs": train[:5]})
    engine = result.engine
    probs = np.broadcast_to(result.feature_probs, (1, 2000, result.num_active))
    per_draw = log_predictive(
        samples, model, engine.model_args, engine.model_kwargs, test_obs=test, probs=probs
    )
    averaged = logsumexp(per_draw[0], axis=0) - np.log(2000)
    filters = np.asarray(
        result.log_predictive(test, rng_key=jax.random.PRNGKey(3), num_samples=4000)
    )
    np.testing.assert_allclose(averaged, filters, atol=0.1)
