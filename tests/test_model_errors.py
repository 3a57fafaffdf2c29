"""An error raised inside the user's model while an engine reads it surfaces as itself.

The engine adds a note (its name, the last site the model finished); the type and the message
are the model's own, not a second error from the engine's later steps.
"""

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from numpyro_bnp.distributions import BetaProcess, RecursiveIBP
from numpyro_bnp.infer import CRMSlice, RIBPFilter


class ModelFailure(RuntimeError):
    pass


def ibp_fails_on_purpose(obs=None, *, num_obs, dim):
    numpyro.sample("Z", RecursiveIBP(1.0, 1.0, num_rows=num_obs, max_features=4))
    numpyro.sample("A", dist.Normal(0.0, 1.0).expand([4, dim]).to_event(2))
    raise ModelFailure("the model failed on purpose")


def ibp_transposed_features(obs=None, *, num_obs, dim):
    z = numpyro.sample("Z", RecursiveIBP(1.0, 1.0, num_rows=num_obs, max_features=4))
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([dim, 4]).to_event(2))  # (D, K): a bug
    numpyro.sample("obs", dist.Normal(z @ a, 0.1).to_event(2), obs=obs)


def crm_fails_on_purpose(obs=None, *, num_obs, dim):
    numpyro.sample("theta", BetaProcess(1.0, 1.0, truncation=5))
    raise ModelFailure("the model failed on purpose")


def crm_transposed_traits(obs=None, *, num_obs, dim):
    theta = numpyro.sample("theta", BetaProcess(1.0, 1.0, truncation=5))
    x = numpyro.sample("X", dist.Bernoulli(theta).expand([num_obs, 5]).to_event(2))
    psi = numpyro.sample("psi", dist.Normal(0.0, 0.5).expand([dim, 5]).to_event(2))  # (D, K)
    numpyro.sample("obs", dist.Normal(x @ psi, 0.2).to_event(2), obs=obs)


def _note(err):
    return " ".join(getattr(err.value, "__notes__", []))


def test_ribp_filter_reraises_the_models_own_error():
    filt = RIBPFilter(ibp_fails_on_purpose, max_features=4)
    with pytest.raises(ModelFailure, match="the model failed on purpose") as err:
        filt.init(jax.random.PRNGKey(0), num_obs=1, dim=3)
    assert "RIBPFilter" in _note(err) and "after its site 'A'" in _note(err)


def test_ribp_filter_reraises_a_shape_error_of_the_model():
    filt = RIBPFilter(ibp_transposed_features, max_features=4)
    with pytest.raises(TypeError, match="dot_general") as err:
        filt.init(jax.random.PRNGKey(0), num_obs=1, dim=3)
    assert "RIBPFilter" in _note(err) and "after its site 'A'" in _note(err)


@pytest.mark.parametrize(
    "model, kind, match, after",
    [
        (crm_fails_on_purpose, ModelFailure, "the model failed on purpose", "theta"),
        (crm_transposed_traits, TypeError, "dot_general", "psi"),
    ],
)
def test_crm_slice_reraises_the_models_own_error(model, kind, match, after):
    mcmc = MCMC(CRMSlice(model), num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(kind, match=match) as err:
        mcmc.run(jax.random.PRNGKey(0), np.zeros((4, 3)), num_obs=4, dim=3)
    assert "CRMSlice" in _note(err) and f"after its site {after!r}" in _note(err)
