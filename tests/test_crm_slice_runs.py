"""CRMSlice and CRMTopicSlice across runs: the data are read at every run, the kernels refuse
each other's models, and a saturated buffer can stop the run.

A run continued on new data (``mcmc.post_warmup_state = mcmc.last_state``) must fit the new data:
the exported log-likelihood of every draw is recomputed here from the exported sites and the new
data (exact, to float32 round-off), and the features / word counts follow the new data. A
different number of rows is refused (the counts of each row are part of the state).
"""

import numpy as np
import pytest
from jax import random
from numpyro.infer import MCMC
from scipy import stats

from numpyro_bnp.infer import CRMSlice, CRMTopicSlice
from numpyro_bnp.models import (
    beta_bernoulli_linear_gaussian,
    bnb_combinatorial_clustering,
    linear_gaussian,
)

FEATURES = np.kron(np.eye(2), np.ones((1, 3)))  # two block features, D = 6
ROWS, SIGMA = 40, 0.1


def test_continued_run_fits_the_new_data():
    rng = np.random.default_rng(0)
    z = (rng.random((ROWS, 2)) < 0.5).astype(int)
    y_old = z @ FEATURES + SIGMA * rng.normal(size=(ROWS, 6))
    y_new = z @ -FEATURES + SIGMA * rng.normal(size=(ROWS, 6))  # the features change sign
    kwargs = dict(num_obs=ROWS, dim=6, sigma_o=SIGMA)
    mcmc = MCMC(
        CRMSlice(linear_gaussian, max_features=12),
        num_warmup=100,
        num_samples=60,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), y_old, **kwargs)
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(random.PRNGKey(1), y_new, **kwargs)
    samples = {k: np.asarray(v, np.float64) for k, v in mcmc.get_samples().items()}
    assert samples["Z"].shape == (120, ROWS, 12)
    # the kernel's log-likelihood is that of the new data at the exported Z, A
    mean = samples["Z"] @ samples["A"]
    log_lik = stats.norm.logpdf(y_new, mean, SIGMA).sum((-2, -1))
    np.testing.assert_allclose(mcmc.get_extra_fields()["log_likelihood"], log_lik, rtol=1e-4)
    # and its draws explain the new data to the noise level (label-invariant: a local mode with
    # blended or duplicated features explains them too), not the old ones
    rms_new = np.sqrt(np.mean((y_new - mean[-10:]) ** 2))
    rms_old = np.sqrt(np.mean((y_old - mean[-10:]) ** 2))
    assert rms_new < 3 * SIGMA and rms_old > 10 * SIGMA, (rms_new, rms_old)
    # the counts of each row are state: another number of rows is refused
    with pytest.raises(ValueError, match="now has 30 rows, the chains' state 40"):
        mcmc.run(random.PRNGKey(2), y_new[:30], **dict(kwargs, num_obs=30))


def test_topic_continued_run_fits_the_new_documents():
    rng = np.random.default_rng(1)
    topics = np.kron(np.eye(2), np.ones((1, 3))) / 3.0  # two topics on disjoint words, V = 6
    counts_old = rng.poisson(12.0 * rng.dirichlet([0.5, 0.5], size=15) @ topics)
    counts_new = counts_old[:, ::-1].copy()  # the same lengths, other words
    kernel = CRMTopicSlice(bnb_combinatorial_clustering, max_features=10)
    mcmc = MCMC(kernel, num_warmup=60, num_samples=20, progress_bar=False)
    lengths = counts_old.sum(1)
    mcmc.run(random.PRNGKey(0), counts_old, doc_lengths=lengths, vocab_size=6)
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(random.PRNGKey(1), counts_new, doc_lengths=lengths, vocab_size=6)
    samples = {k: np.asarray(v, np.float64) for k, v in mcmc.get_samples().items()}
    # the exported log-likelihood is the Poisson likelihood of the new counts
    mean = samples["rates"] @ samples["topics"]
    log_lik = stats.poisson.logpmf(counts_new, mean).sum((-2, -1))
    np.testing.assert_allclose(mcmc.get_extra_fields()["log_likelihood"], log_lik, rtol=1e-4)
    # the words of each topic in the last state are the new words
    state = mcmc.last_state
    assert np.array_equal(np.asarray(state.counts).sum(1), counts_new.sum(1))
    main = samples["rates"][-1].sum(0) > 0.2 * counts_new.sum()
    found = samples["topics"][-1][main]
    assert found.shape[0] == 2
    assert np.abs(np.sort(found @ topics.T * 3.0, 0) - [[0, 0], [1, 1]]).max() < 0.2, found
    with pytest.raises(ValueError, match="now has 10 rows, the chains' state 15"):
        mcmc.run(random.PRNGKey(2), counts_new[:10], doc_lengths=lengths[:10], vocab_size=6)


def test_each_kernel_names_the_other_for_its_model():
    counts = np.ones((4, 3), int)
    with pytest.raises(ValueError, match=r"use numpyro_bnp\.infer\.CRMTopicSlice"):
        MCMC(CRMSlice(bnb_combinatorial_clustering), num_warmup=1, num_samples=1).run(
            random.PRNGKey(0), counts, doc_lengths=counts.sum(1), vocab_size=3
        )
    with pytest.raises(ValueError, match=r"use numpyro_bnp\.infer\.CRMSlice"):
        MCMC(CRMTopicSlice(linear_gaussian), num_warmup=1, num_samples=1).run(
            random.PRNGKey(0), np.zeros((4, 2)), num_obs=4, dim=2
        )


def test_saturation_can_stop_the_run():
    # prior-only, 6 rows of mass 1.5: a buffer of 2 atoms saturates in the first sweeps
    kernel = CRMSlice(
        beta_bernoulli_linear_gaussian, xi_scale=3.0, max_features=2, on_saturation="error"
    )
    mcmc = MCMC(kernel, num_warmup=0, num_samples=10, progress_bar=False)
    with pytest.raises(RuntimeError, match=r"atom buffer \(2 atoms\) was full in 1 of \d+ sweeps"):
        mcmc.run(random.PRNGKey(0), num_obs=6, dim=1, mass=1.5)
    with pytest.raises(ValueError, match="on_saturation"):
        CRMSlice(linear_gaussian, on_saturation="ignore")
