"""AcceleratedIBPGibbs: diagnostics recorded by default, a full feature capacity never silent.

A sweep in which the active features fill the model's ``max_features`` warns on the host with the
number of such sweeps (again each time a chain's count doubles), for one chain and for vectorized
chains; ``on_saturation="error"`` stops the run; a capacity that suffices gives no warning.
"""

import warnings

import numpy as np
import pytest
from jax import random
from numpyro.infer import MCMC
from saturation_checks import expected_reports, saturation_reports

from numpyro_bnp.infer import AcceleratedIBPGibbs
from numpyro_bnp.models import linear_gaussian

FEATURES = np.kron(np.eye(4), np.ones((1, 2)))  # four block features, D = 8
Y = (np.random.default_rng(0).random((20, 4)) < 0.5) @ FEATURES
Y = Y + 0.1 * np.random.default_rng(1).normal(size=Y.shape)
KWARGS = dict(num_obs=20, dim=8, sigma_o=0.1)


def run(chains, max_features, **kernel_kwargs):
    mcmc = MCMC(
        AcceleratedIBPGibbs(linear_gaussian, **kernel_kwargs),
        num_warmup=0,
        num_samples=12,
        num_chains=chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), Y, max_features=max_features, **KWARGS)
    return mcmc


@pytest.mark.parametrize("chains", [1, 2])
def test_a_full_capacity_warns_with_counts(chains):
    with pytest.warns(RuntimeWarning, match=r"feature capacity \(2, the max_features") as record:
        mcmc = run(chains, max_features=2)
    extra = mcmc.get_extra_fields(group_by_chain=True)  # recorded without being asked
    assert {"num_active", "parity", "log_joint", "log_likelihood", "saturated"} <= set(extra)
    saturated = np.asarray(extra["saturated"])
    assert saturated.any()
    messages = [str(w.message) for w in record if "feature capacity" in str(w.message)]
    assert saturation_reports(messages) == expected_reports(saturated, vectorized=chains > 1)
    assert all("larger max_features" in m for m in messages)


def test_a_full_capacity_can_stop_the_run():
    with pytest.raises(RuntimeError, match=r"feature capacity \(2, .*full in 1 of \d+ sweeps"):
        run(1, max_features=2, on_saturation="error")


def test_no_warning_when_the_capacity_suffices():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        mcmc = run(2, max_features=16)
    assert not np.any(mcmc.get_extra_fields()["saturated"])
    assert not [w for w in record if "capacity" in str(w.message)]
