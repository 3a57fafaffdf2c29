"""An error raised inside the user's model while an engine reads it surfaces as itself.

The engine adds a note (its name, the last site the model finished); the type and the message
are the model's own, not a second error from the engine's later steps. This holds for the first,
eager read and for every later trace (inside the engines' compiled steps, in the diagnostics):
a model that converts a site's value to NumPy reads fine eagerly and fails under ``jit``.
"""

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from numpyro_bnp import diagnostics
from numpyro_bnp.distributions import BetaProcess, RecursiveIBP, RestrictedBernoulliProcess, exactly
from numpyro_bnp.infer import AcceleratedIBPGibbs, CRMSlice, RestrictedIBPGibbs, RIBPFilter


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


def ibp_reads_z_in_numpy(obs=None, *, num_obs, dim):
    z = numpyro.sample("Z", RecursiveIBP(1.0, 1.0, num_rows=num_obs, max_features=4))
    np.asarray(z)  # fine on concrete values, a TracerArrayConversionError under jit
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([4, dim]).to_event(2))
    numpyro.sample("obs", dist.Normal(z @ a, 0.5).to_event(2), obs=obs)


def restricted_reads_z_in_numpy(obs=None, *, num_obs, dim):
    pi = numpyro.sample("pi", dist.Beta(0.5, 1.5).expand([4]).to_event(1))
    z = numpyro.sample(
        "Z", RestrictedBernoulliProcess(pi, exactly(1)).expand([num_obs]).to_event(1)
    )
    np.asarray(z)
    a = numpyro.sample("A", dist.Normal(0.0, 1.0).expand([4, dim]).to_event(2))
    numpyro.sample("obs", dist.Normal(z @ a, 0.5).to_event(2), obs=obs)


def crm_reads_x_in_numpy(obs=None, *, num_obs, dim):
    theta = numpyro.sample("theta", BetaProcess(1.0, 1.0, truncation=5))
    num_atoms = theta.shape[-1]  # follows the sampler's atoms
    x = numpyro.sample("X", dist.Bernoulli(theta).expand([num_obs, num_atoms]).to_event(2))
    np.asarray(x)
    psi = numpyro.sample("psi", dist.Normal(0.0, 0.5).expand([num_atoms, dim]).to_event(2))
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


@pytest.mark.parametrize(
    "kernel, model, engine, after",
    [
        (AcceleratedIBPGibbs, ibp_reads_z_in_numpy, "AcceleratedIBPGibbs", "Z"),
        (RestrictedIBPGibbs, restricted_reads_z_in_numpy, "RestrictedIBPGibbs", "Z"),
        # CRMSlice's postprocess_fn, which recomputes the deterministic sites, traces first
        (CRMSlice, crm_reads_x_in_numpy, "the MCMC kernel (recomputing deterministic sites)", "X"),
    ],
)
def test_mcmc_kernels_reraise_an_error_of_a_later_trace_under_jit(kernel, model, engine, after):
    mcmc = MCMC(kernel(model), num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(jax.errors.TracerArrayConversionError) as err:
        mcmc.run(jax.random.PRNGKey(0), np.zeros((4, 3)), num_obs=4, dim=3)
    assert engine in _note(err) and f"after its site {after!r}" in _note(err)


def test_diagnostics_reraise_the_models_own_error():
    draws = {"Z": np.zeros((2, 3, 4, 4), np.int32), "A": np.zeros((2, 3, 4, 3))}
    with pytest.raises(ModelFailure, match="the model failed on purpose") as err:
        diagnostics.summary(
            draws,
            model=ibp_fails_on_purpose,
            model_args=(np.zeros((4, 3)),),
            model_kwargs=dict(num_obs=4, dim=3),
        )
    assert "numpyro_bnp.diagnostics" in _note(err) and "after its site 'A'" in _note(err)


def test_diagnostics_reraise_an_error_of_a_vectorised_trace():
    """The log-likelihood maps the model over the draws (``vmap``): values are tracers there."""
    draws = {"Z": np.zeros((2, 3, 4, 4), np.int32), "A": np.zeros((2, 3, 4, 3))}
    with pytest.raises(jax.errors.TracerArrayConversionError) as err:
        diagnostics.summary(
            draws,
            model=ibp_reads_z_in_numpy,
            model_args=(np.zeros((4, 3)),),
            model_kwargs=dict(num_obs=4, dim=3),
        )
    assert "numpyro_bnp.diagnostics" in _note(err) and "after its site 'Z'" in _note(err)
