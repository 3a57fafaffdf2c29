"""The truncated stick-breaking DP mixture ``dp_mixture`` and its reading by the mixture contract.

Prior draws against the stick-breaking moments ``E[w_1] = 1 / (1 + α)`` and ``E[w_T] = (α / (1 +
α))^(T - 1)`` (Ishwaran & James 2001); the reader finds the labels, the sticks and the same
conjugate family as for the NGGP model of the same components, and refuses what is not the
stick-breaking of ``Beta(1, α)`` sticks; NUTS sums the labels out.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro import handlers
from numpyro.infer import MCMC, NUTS, Predictive
from scipy.special import gammaln

from numpyro_bnp import models
from numpyro_bnp._math import stick_breaking_weights
from numpyro_bnp.infer import ADFNRM, EPNRM
from numpyro_bnp.infer.mixtures.model import read_mixture_model

N, D, T = 6, 3, 4
ALPHA = 1.5
ENGINE = "TestEngine"
BOTH = ("nggp", "stick_breaking")
LOC = np.array([0.5, -1.0, 2.0])
W0 = np.array([[0.5, 0.1, 0.0], [0.1, 0.4, 0.05], [0.0, 0.05, 0.3]])

# components -> the NGGP model of the same family, and priors that are not the defaults
COMPONENTS = {
    "gaussian": (models.nggp_gaussian_mixture, dict(loc=LOC, kappa=0.5, dof=5.0, scale_matrix=W0)),
    "diagonal_gaussian": (
        models.nggp_diagonal_gaussian_mixture,
        dict(loc=LOC, kappa=0.5, concentration=2.0, rate=3.0),
    ),
    "normal": (models.nggp_normal_mixture, dict(loc=LOC, sigma_mu=2.0, sigma_o=0.3)),
    "poisson": (models.nggp_poisson_mixture, dict(concentration=2.0, rate=0.5)),
    "bernoulli": (models.nggp_bernoulli_mixture, dict(concentration1=0.5, concentration0=1.5)),
}


def _read(model, partitions=BOTH, **kwargs):
    return read_mixture_model(model, (), kwargs, ENGINE, partitions=partitions)


# ---------------------------------------------------------------------- the prior
@pytest.fixture(scope="module")
def prior_draws():
    kwargs = dict(num_obs=3, dim=1, mass=ALPHA, truncation=T, components="normal")
    return Predictive(models.dp_mixture, num_samples=4000)(random.PRNGKey(0), **kwargs)


def test_prior_draws_have_the_sites_shapes(prior_draws):
    shapes = {name: value.shape for name, value in prior_draws.items()}
    assert shapes == {
        "v": (4000, T - 1),
        "weights": (4000, T),
        "mu": (4000, T, 1),
        "z": (4000, 3),
        "obs": (4000, 3, 1),
    }
    np.testing.assert_allclose(prior_draws["weights"].sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(prior_draws["weights"], stick_breaking_weights(prior_draws["v"]))


@pytest.mark.parametrize(
    "k, expected", [(0, 1 / (1 + ALPHA)), (T - 1, (ALPHA / (1 + ALPHA)) ** (T - 1))]
)
def test_prior_weights_have_the_stick_breaking_means(prior_draws, k, expected):
    w = np.asarray(prior_draws["weights"][:, k])
    se = w.std() / np.sqrt(w.size)  # independent draws
    assert abs(w.mean() - expected) < 4 * se, (w.mean(), expected, se)


def test_pitman_yor_prior_number_of_clusters():
    """With a discount d, the sticks Beta(1 - d, α + k d) give the Pitman–Yor partition: the
    prior E[K_n] matches Pitman's closed form (α/d) [(α + d)_n / (α)_n - 1] within 5 MC standard
    errors plus the truncation's effect (K_n changes only if two rows share the remainder
    weight w_T: at most n P(two rows there) <= n C(n, 2) E[w_T^2])."""
    d, a, n, t, draws = 0.4, 0.5, 5, 100, 4000
    kwargs = dict(num_obs=n, dim=1, mass=a, discount=d, truncation=t, components="normal")
    z = Predictive(models.dp_mixture, num_samples=draws, return_sites=["z", "v"])(
        random.PRNGKey(5), **kwargs
    )
    k = np.array([len(np.unique(row)) for row in np.asarray(z["z"])])
    log_rising = lambda x: gammaln(x + n) - gammaln(x)  # noqa: E731  log (x)_n
    exact = a / d * (np.exp(log_rising(a + d) - log_rising(a)) - 1)
    j = np.arange(1, t)
    b = a + d * j
    second = np.prod(b * (b + 1) / ((1 - d + b) * (2 - d + b)))
    bound = n * n * (n - 1) / 2 * second
    assert bound < 0.01
    assert abs(k.mean() - exact) < 5 * k.std() / np.sqrt(draws) + bound
    v = np.asarray(z["v"][:, 0])  # the first stick: Beta(1 - d, α + d), mean (1 - d) / (1 + α)
    assert abs(v.mean() - (1 - d) / (1 + a)) < 5 * v.std() / np.sqrt(draws)


def test_one_cluster_has_no_sticks():
    tr = handlers.trace(handlers.seed(models.dp_mixture, 0)).get_trace(
        num_obs=N, dim=D, truncation=1, components="normal"
    )
    assert "v" not in tr
    np.testing.assert_array_equal(tr["weights"]["value"], [1.0])
    np.testing.assert_array_equal(tr["z"]["value"], np.zeros(N))
    assert tr["mu"]["value"].shape == (1, D) and tr["obs"]["value"].shape == (N, D)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            dict(components="student"),
            ValueError,
            r"components must be one of \['gaussian', 'diagonal_gaussian', 'normal', 'poisson', "
            r"'bernoulli'\], got 'student'",
        ),
        (
            dict(components="poisson", sigma_o=0.1),
            ValueError,
            r"components='poisson' takes the prior keywords \['concentration', 'rate'\]; got "
            r"\['sigma_o'\]",
        ),
        (dict(truncation=0), ValueError, "truncation must be a positive integer, got 0"),
        (dict(truncation=2.5), TypeError, "truncation must be a positive integer, got 2.5"),
        (dict(mass=0.0), ValueError, "mass must be finite and > 0, got 0.0"),
        (dict(discount=1.0), ValueError, r"discount must be in \[0, 1\), got 1.0"),
        (dict(discount=0.3, mass=-0.3), ValueError, "mass must be finite and > -discount"),
        (dict(obs=np.zeros((N, D + 1))), ValueError, r"obs must have shape \(num_obs, dim\)"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs, error, message):
    kwargs = dict(dict(num_obs=N, dim=D, components="poisson"), **kwargs)
    with pytest.raises(error, match=message):
        handlers.seed(models.dp_mixture, 0)(**kwargs)


# ---------------------------------------------------------------------- the reader
@pytest.mark.parametrize("components", COMPONENTS)
def test_every_components_choice_reads_as_its_nggp_model(components):
    nggp_model, prior = COMPONENTS[components]
    spec = _read(
        models.dp_mixture,
        num_obs=N,
        dim=D,
        mass=ALPHA,
        truncation=T,
        components=components,
        **prior,
    )
    nggp = _read(nggp_model, num_obs=N, dim=D, mass=ALPHA, sigma=0.0, max_clusters=T, **prior)
    assert (spec.partition_kind, nggp.partition_kind) == ("stick_breaking", "nggp")
    assert (spec.partition_site, spec.sticks_site, nggp.sticks_site) == ("z", "v", None)
    assert (spec.mass, spec.sigma, spec.tau) == (ALPHA, 0.0, 1.0)
    assert (spec.num_rows, spec.max_clusters, spec.dim) == (N, T, D)
    assert (spec.component_sites, spec.obs_site) == (nggp.component_sites, nggp.obs_site)
    assert type(spec.family) is type(nggp.family)
    jax.tree.map(np.testing.assert_allclose, spec.family, nggp.family)


def _sticks(mass=ALPHA, concentration1=1.0, length=T - 1):
    with numpyro.plate("stick", length):
        return numpyro.sample("v", dist.Beta(concentration1, mass))


def _labels_and_rows(obs, probs=None, logits=None):
    with numpyro.plate("clusters", T):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    with numpyro.plate("rows", N):
        z = numpyro.sample("z", dist.Categorical(probs, logits))
        numpyro.sample("x", dist.Normal(mu[z], 0.3).to_event(1), obs=obs)


def log_weights(obs=None):
    _labels_and_rows(obs, logits=jnp.log(stick_breaking_weights(_sticks())))


def test_a_model_of_your_own_with_logits_reads_as_stick_breaking():
    spec = _read(log_weights)
    assert (spec.partition_kind, spec.partition_site, spec.sticks_site) == (
        "stick_breaking",
        "z",
        "v",
    )
    assert (spec.mass, spec.max_clusters, spec.component_sites) == (ALPHA, T, ("mu",))


def reversed_weights(obs=None):
    _labels_and_rows(obs, stick_breaking_weights(_sticks())[::-1])


def sticks_of_beta_two_one(obs=None):
    _labels_and_rows(obs, stick_breaking_weights(_sticks(concentration1=2.0)))


def one_alpha_per_stick(obs=None):
    _labels_and_rows(obs, stick_breaking_weights(_sticks(mass=jnp.arange(1.0, T))))


def two_label_sites(obs=None):
    weights = stick_breaking_weights(_sticks())
    with numpyro.plate("rows", N):
        numpyro.sample("z2", dist.Categorical(weights))
    _labels_and_rows(obs, weights)


def one_stick_too_many(obs=None):
    _labels_and_rows(obs, stick_breaking_weights(_sticks(length=T)[:-1]))


def one_label_for_all_rows(obs=None):
    z = numpyro.sample("z", dist.Categorical(stick_breaking_weights(_sticks())))
    with numpyro.plate("clusters", T):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    numpyro.sample("x", dist.Normal(mu[z], 0.3).expand([N, D]).to_event(2), obs=obs)


def prior_on_the_mass(obs=None):
    mass = numpyro.sample("mass", dist.Gamma(1.0, 1.0))
    _labels_and_rows(obs, stick_breaking_weights(_sticks(mass=mass)))


WEIGHTS = r"the stick-breaking weights w_k = v_k prod_\{j<k\} \(1 - v_j\)"
NOT_FITTING = [
    (
        reversed_weights,
        f"expected the labels site 'z' to have probs = {WEIGHTS}.*of batch shape \\(T - 1,\\) "
        r"= \(3,\); found probs that are not the stick-breaking of 'v' \(row 0 differs\)",
    ),
    (
        sticks_of_beta_two_one,
        r"expected the sticks site 'v' to be Beta\(1, alpha\).*found concentration1 = \[2.0\]",
    ),
    (
        one_alpha_per_stick,
        r"expected the sticks site 'v' to be Beta\(1, alpha\) with one alpha for all sticks; "
        r"found concentration0 = \[1.0, 2.0, 3.0\]",
    ),
    (
        two_label_sites,
        "expected exactly one latent Categorical labels site \\(the stick-breaking partition\\), "
        "found 2: 'z2', 'z'",
    ),
    (
        one_stick_too_many,
        f"expected the labels site 'z' to have probs = {WEIGHTS}.*found Beta sites of the wrong "
        r"length: 'v' of batch shape \(4,\)",
    ),
    (
        one_label_for_all_rows,
        r"expected a labels site of batch shape \(N,\), one label per row .*; 'z' has batch "
        r"shape \(\) and event shape \(\)",
    ),
    (
        prior_on_the_mass,
        "the mass alpha of the sticks site 'v' is the value of the sample site 'mass': a prior "
        "on the mass is not supported yet",
    ),
]


@pytest.mark.parametrize("model, message", NOT_FITTING, ids=lambda v: getattr(v, "__name__", None))
def test_models_that_are_not_stick_breaking_are_refused_naming_the_site(model, message):
    with pytest.raises(ValueError, match=f"^{ENGINE}") as info:
        _read(model)
    assert info.match(message)
    assert "; the model has: " in str(info.value)  # the sites found are listed


def test_one_cluster_and_a_traced_mass_are_refused():
    kwargs = dict(num_obs=N, dim=D, components="normal")
    with pytest.raises(ValueError, match="the labels site 'z' to have T >= 2 categories"):
        _read(models.dp_mixture, truncation=1, **kwargs)

    def read(mass):
        _read(models.dp_mixture, mass=mass, truncation=T, **kwargs)
        return mass

    with pytest.raises(ValueError, match=r"sticks site 'v' must have numbers.*prior on the mass"):
        jax.jit(read)(2.0)


@pytest.mark.parametrize("engine", [ADFNRM, EPNRM])
def test_nggp_engines_refuse_the_dp_mixture_naming_power_prior_svb(engine):
    with pytest.raises(ValueError) as info:
        options = dict(num_passes=1) if engine is EPNRM else {}
        engine(models.dp_mixture, **options).init(
            random.PRNGKey(0), num_obs=N, dim=D, components="normal"
        )
    assert info.match(
        f"^{engine.__name__} expected exactly one sample site with a NGGP distribution, found 0 "
        r"\(this engine takes the partition kinds \('nggp',\); the latent Categorical site 'z' "
        r"is a 'stick_breaking' partition.*with PowerPriorSVB\)"
    )


def test_the_partition_kinds_an_engine_takes():
    nggp = dict(num_obs=N, dim=D, max_clusters=T)
    with pytest.raises(ValueError, match=r"partition 'z' is of the kind 'nggp'.*ADFNRM or EPNRM"):
        _read(models.nggp_normal_mixture, partitions=("stick_breaking",), **nggp)
    with pytest.raises(ValueError, match=r"partitions must be a non-empty tuple of \('nggp', "):
        _read(models.nggp_normal_mixture, partitions="nggp", **nggp)


# ---------------------------------------------------------------------- NumPyro's NUTS
def test_nuts_with_enumerated_labels_finds_the_two_clusters():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-2.0, 0.3, (15, 1)), rng.normal(2.0, 0.3, (15, 1))])
    mcmc = MCMC(NUTS(models.dp_mixture), num_warmup=200, num_samples=100, progress_bar=False)
    kwargs = dict(mass=0.2, truncation=3, components="normal", sigma_mu=3.0, sigma_o=0.3)
    mcmc.run(random.PRNGKey(0), x, num_obs=30, dim=1, **kwargs)
    draws = mcmc.get_samples()
    assert "z" not in draws  # summed out
    weights = np.asarray(draws["weights"]).mean(0)
    big = np.argsort(weights)[-2:]
    assert weights[big].sum() > 0.9, weights
    means = np.sort(np.asarray(draws["mu"]).mean(0)[big, 0])
    np.testing.assert_allclose(means, [-2.0, 2.0], atol=0.3)


@pytest.mark.parametrize("model", [models.dp_mixture, models.nggp_gaussian_mixture])
def test_float32_wishart_components_are_read_at_d20(model):
    """The reader's stand-in precision matrices stay well conditioned in float32 (a standard
    normal point of the unconstrained space failed the MultivariateNormal's check at D >= 10)."""
    with jax.enable_x64(False):
        spec = read_mixture_model(
            model, (), dict(num_obs=3, dim=20), partitions=("nggp", "stick_breaking")
        )
    assert spec.dim == 20 and spec.family.prior.scale_tril.dtype == jnp.float32
