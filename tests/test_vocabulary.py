"""One vocabulary (``docs/vocabulary.md``): the old argument names still work, with a warning.

Every renamed argument goes through :func:`numpyro_bnp._checks.renamed_arguments`: the old name
gives a ``FutureWarning`` that names the new one and the same result as the new name; passing
both is a ``TypeError``.
"""

import warnings

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro import handlers

from numpyro_bnp import models
from numpyro_bnp._checks import RENAMED_REMOVAL, renamed_arguments
from numpyro_bnp.demos import ribp as ribp_demo
from numpyro_bnp.infer import CRMSlice

# One capacity K = 5 everywhere (``truncation=5`` below too): every case traces its model at the
# same shapes, so the eagerly compiled operations of one model's trace serve all its cases (a
# default capacity would differ with the hyper-parameters, and each would compile anew).
K = 5
SIZES = dict(num_obs=4, dim=2)
LINEAR = dict(SIZES, max_features=K)
TOPICS = dict(doc_lengths=np.full(3, 4.0), vocab_size=5)
RESTRICTED = dict(LINEAR, count_dist=dist.Poisson(1.0))

# model, fixed arguments, old names, the same values under the new names
RENAMED = [
    (models.linear_gaussian, LINEAR, {"alpha": 2.0}, {"mass": 2.0}),
    (models.linear_gaussian, LINEAR, {"beta": 3.0}, {"concentration": 3.0}),
    (
        models.factor_analysis,
        LINEAR,
        {"alpha": 2.0, "beta": 0.5},
        {"mass": 2.0, "concentration": 0.5},
    ),
    (models.restricted_linear_gaussian, RESTRICTED, {"alpha": 2.0}, {"mass": 2.0}),
    (models.beta_bernoulli_linear_gaussian, LINEAR, {"sigma": 0.3}, {"sigma_o": 0.3}),
    (models.beta_bernoulli_linear_gaussian, LINEAR, {"sigma0": 2.0}, {"sigma_a": 2.0}),
    (models.beta_bernoulli_linear_gaussian, SIZES, {"truncation": K}, {"max_features": K}),
    (
        models.gamma_poisson_linear_gaussian,
        LINEAR,
        {"sigma": 0.3, "sigma0": 2.0},
        {"sigma_o": 0.3, "sigma_a": 2.0},
    ),
    (models.gamma_poisson_linear_gaussian, SIZES, {"truncation": K}, {"max_features": K}),
    (models.bnb_combinatorial_clustering, TOPICS, {"truncation": K}, {"max_features": K}),
]


def _trace(model, **kwargs):
    tr = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(**kwargs)
    return {name: site for name, site in tr.items() if site["type"] == "sample"}


def _warned(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args, **kwargs)
    return result, [w for w in caught if issubclass(w.category, FutureWarning)]


@pytest.mark.parametrize(
    "model, fixed, old, new", RENAMED, ids=lambda v: getattr(v, "__name__", None)
)
def test_ready_models_accept_their_old_argument_names(model, fixed, old, new):
    old_trace, caught = _warned(_trace, model, **fixed, **old)
    assert len(caught) == len(old)
    for (old_name, new_name), w in zip(zip(old, new, strict=True), caught, strict=True):
        assert str(w.message) == (
            f"{model.__name__}: `{old_name}` is renamed `{new_name}`; the old name will be "
            f"removed in {RENAMED_REMOVAL}"
        )
    new_trace, caught = _warned(_trace, model, **fixed, **new)
    assert not caught
    assert list(old_trace) == list(new_trace)
    for name, site in new_trace.items():  # the same prior draw: the same model
        np.testing.assert_array_equal(old_trace[name]["value"], site["value"])
        assert old_trace[name]["fn"].batch_shape == site["fn"].batch_shape
    old_name, new_name = next(iter(old)), next(iter(new))
    with pytest.raises(TypeError, match=f"got both `{old_name}` and `{new_name}`"):
        _trace(model, **fixed, **{old_name: old[old_name], new_name: new[new_name]})


def test_crm_slice_accepts_max_atoms_in_the_constructor_and_grow():
    kernel, caught = _warned(CRMSlice, models.beta_bernoulli_linear_gaussian, max_atoms=4)
    assert len(caught) == 1 and "`max_atoms` is renamed `max_features`" in str(caught[0].message)
    assert str(caught[0].message).startswith("CRMSlice: ")
    assert kernel.max_features == 4
    with pytest.raises(TypeError, match="got both `max_atoms` and `max_features`"):
        CRMSlice(models.beta_bernoulli_linear_gaussian, max_atoms=4, max_features=4)
    y = jnp.zeros((3, 1))
    state = kernel.init(random.PRNGKey(0), 0, None, (y,), dict(num_obs=3, dim=1))
    grown, caught = _warned(kernel.grow, state, max_atoms=8)
    assert len(caught) == 1 and "CRMSlice.grow: `max_atoms` is renamed" in str(caught[0].message)
    same = kernel.grow(state, max_features=8)
    assert grown.arrivals.shape == same.arrivals.shape == (8,)
    assert grown.z["X"].shape == same.z["X"].shape == (3, 8)
    with pytest.raises(TypeError, match="got both `max_atoms` and `max_features`"):
        kernel.grow(state, max_atoms=8, max_features=8)


def test_the_demo_accepts_alpha():
    with pytest.raises(TypeError, match="got both `alpha` and `mass`"):
        ribp_demo.run("unused", alpha=1.0, mass=1.0)


def test_renamed_arguments_keeps_the_function_and_its_signature():
    import inspect
    import pickle

    @renamed_arguments(old="new")
    def fn(*, new=1):
        """Doc."""
        return new

    assert list(inspect.signature(fn).parameters) == ["new"]
    assert fn.__name__ == "fn" and fn.__doc__ == "Doc."
    with pytest.warns(FutureWarning, match="`old` is renamed `new`; the old name will be removed"):
        assert fn(old=3) == 3
    assert fn(new=4) == 4 and fn() == 1
    # ready models pickle by name and keep the signature the streaming engines inspect
    assert pickle.loads(pickle.dumps(models.linear_gaussian)) is models.linear_gaussian
    assert "num_obs" in inspect.signature(models.linear_gaussian).parameters
