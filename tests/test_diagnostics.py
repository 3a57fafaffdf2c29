import itertools
import warnings

import jax
import numpy as np
import pytest
from numpyro.infer import MCMC, Predictive
from numpyro.infer import log_likelihood as numpyro_log_likelihood
from scipy.special import gammaln

from numpyro_bnp import models
from numpyro_bnp.arviz_compat import group, loo_pointwise
from numpyro_bnp.diagnostics import (
    count_parity,
    feature_dims,
    from_mcmc,
    label_invariants,
    summary,
)
from numpyro_bnp.distributions import exactly
from numpyro_bnp.infer import AcceleratedIBPGibbs


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
        "log_lik",
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
    np.testing.assert_allclose(values["log_lik"][1, 7], direct, rtol=1e-5)
    for name in ("num_active", "log_lik"):  # they vary over the draws: R-hat is defined
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
            dict(num_obs=5, dim=3, truncation=4),
            {"theta": ["feature"], "X": ["row", "feature"], "psi": ["feature", "dim"]},
        ),
        (
            models.bnb_combinatorial_clustering,
            dict(doc_lengths=np.full(5, 6.0), vocab_size=3, truncation=4),
            {"theta": ["feature"], "topics": ["feature", "dim"], "rates": ["row", "feature"]},
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
            dict(sigma=0.5, truncation=3),
            lambda s: s["X"] @ s["psi"],
        ),
        (
            models.gamma_poisson_linear_gaussian,
            dict(sigma=0.5, truncation=3),
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
    kwargs = dict(doc_lengths=np.full(4, 12.0), vocab_size=6, truncation=3)
    model = models.bnb_combinatorial_clustering
    draw = Predictive(model, num_samples=1)(jax.random.PRNGKey(5), **kwargs)
    draw = {k: v for k, v in draw.items() if k != "counts"}
    loglik = numpyro_log_likelihood(model, draw, counts, **kwargs)["counts"]
    assert loglik.shape == (1, 4)
    rate = np.asarray(draw["rates"][0], float) @ np.asarray(draw["topics"][0], float)
    direct = np.sum(counts * np.log(rate) - rate - gammaln(counts + 1.0), -1)
    np.testing.assert_allclose(loglik[0], direct, rtol=1e-5)
