"""``RIBPFilter.refine``: the refinement passes that undo the one-pass filter's under-count.

Runs under x64 (``conftest.py``). One filter and one compiled refinement serve every seed.
"""

import jax
import numpy as np
import pytest
from jax import random

from numpyro_bnp.distributions import RecursiveIBP
from numpyro_bnp.infer import RIBPFilter
from numpyro_bnp.infer.features.ribp.refine import _feature_sweep
from numpyro_bnp.models import factor_analysis, linear_gaussian

ALPHA, DIM, SIGMA_A, SIGMA_O = 3.0, 10, 1.0, 0.3
NUM_TRAIN, NUM_TEST, SEEDS, PASSES = 300, 100, (0, 1, 2, 3), 40
KWARGS = dict(num_obs=1, dim=DIM, mass=ALPHA, sigma_a=SIGMA_A, sigma_o=SIGMA_O)


def _data(seed):
    z = RecursiveIBP(ALPHA, 1.0, num_rows=NUM_TRAIN + NUM_TEST, max_features=96)
    z = np.asarray(z.sample(random.PRNGKey(seed)), float)
    assert z[:, -1].sum() == 0  # capacity not reached
    rng = np.random.default_rng(seed)
    a = SIGMA_A * rng.normal(size=(z.shape[1], DIM))
    data = z @ a + SIGMA_O * rng.normal(size=(len(z), DIM))
    return int((z[:NUM_TRAIN].sum(0) > 0).sum()), data[:NUM_TRAIN], data[NUM_TRAIN:]


def _score(result, test):
    lp = np.asarray(result.log_predictive(test, rng_key=random.PRNGKey(0), num_samples=1000))
    return result.features["mean"].shape[0], lp


@pytest.fixture(scope="module")
def runs():
    """Per seed: true count, and (count, held-out log predictive) of the filter and refinements."""
    filt = RIBPFilter(linear_gaussian, max_features=64)
    out = []
    for seed in SEEDS:
        truth, train, test = _data(seed)
        res = filt.run(random.PRNGKey(0), train, progress_bar=False, chunk_size=NUM_TRAIN, **KWARGS)
        row = {"truth": truth, "filter": _score(res, test)}
        for start in ("empty", "filter"):
            refined = res.refine(train, num_passes=PASSES, start=start)
            row["refined " + start] = _score(refined, test)
        out.append(row)
    return out


@pytest.mark.parametrize("start", ["empty", "filter"])
def test_refine_brings_the_count_to_the_truth_and_predicts_better(runs, start):
    """α = 3, D = 10, σ_o = 0.3, 300 rows, 4 IBP draws: the filter stops at 3-8 features where
    the truth has 13-22; after 40 refinement passes the count is within a few of the truth.

    Count: the paired improvement of the absolute count error over the seeds must exceed 3 of
    its standard errors (seed to seed), and every seed must improve. Held-out log predictive
    (100 rows per seed, 1,000 importance samples): the pooled paired gain over the filter must
    exceed 3 standard errors (measured about 10 nats per row, s.e. 0.7).
    """
    key = "refined " + start
    err_filter = np.array([abs(r["filter"][0] - r["truth"]) for r in runs])
    err_refined = np.array([abs(r[key][0] - r["truth"]) for r in runs])
    gain = err_filter - err_refined
    assert np.all(gain > 0)
    assert gain.mean() > 3 * gain.std(ddof=1) / np.sqrt(len(gain))

    diff = np.concatenate([r[key][1] - r["filter"][1] for r in runs])
    assert diff.mean() > 3 * diff.std(ddof=1) / np.sqrt(len(diff))


def test_feature_step_converges_to_the_exact_posterior_mean():
    """Given hard assignments ``b ∈ {0, 1}`` the feature posterior is Gaussian, and coordinate
    ascent on a mean-field Gaussian converges to the exact means (and the precision's diagonal):
    compare with the closed-form posterior of ``A`` given ``Z`` (Bayesian linear regression)."""
    rng = np.random.default_rng(5)
    num_rows, k, dim = 30, 4, 3
    z = (rng.random((num_rows, k)) < 0.5).astype(float)
    obs = z @ rng.normal(size=(k, dim)) + 0.3 * rng.normal(size=(num_rows, dim))
    lam, mu0, var0 = np.full(dim, 1 / 0.09), np.full(dim, 0.2), np.full(dim, 2.0)
    mean, var = np.zeros((k, dim)), np.ones((k, dim))
    active = np.ones(k, bool)
    sweep = jax.jit(_feature_sweep)
    for _ in range(200):
        mean, var = sweep(obs, z, mean, active, lam, mu0, var0)
    prec = z.T @ z * lam[0] + np.eye(k) / var0[0]
    exact = np.linalg.solve(prec, z.T @ obs * lam[0] + mu0[0] / var0[0])
    np.testing.assert_allclose(mean, exact, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, np.broadcast_to(1 / np.diag(prec)[:, None], var.shape))


def test_refine_rejects_bad_arguments():
    filt = RIBPFilter(linear_gaussian, max_features=8)
    state = filt.init(random.PRNGKey(0), **KWARGS)
    data = np.zeros((5, DIM))
    for bad, match in [
        (dict(num_passes=0), "num_passes"),
        (dict(num_candidates=1.5), "num_candidates"),
        (dict(min_use=-1.0), "min_use"),
        (dict(start="middle"), "start"),
    ]:
        with pytest.raises(ValueError, match=match):
            filt.refine(state, data, **bad)
    with pytest.raises(ValueError, match="data"):
        filt.refine(state, np.zeros((5, DIM + 1)))
    fa = RIBPFilter(factor_analysis, max_features=8)
    fa_state = fa.init(random.PRNGKey(0), **KWARGS, sigma_w=1.0)
    with pytest.raises(ValueError, match="linear-Gaussian"):
        fa.refine(fa_state, data)
