"""The mixture-model contract: the reader finds the NGGP partition, the components and the
observed site by their distributions, builds ONE cluster's conjugate family, and refuses models
that do not fit with a message naming what it expected and what it found.

The prior predictive of each family is checked against an independent closed form (NumPyro's
Dirichlet-multinomial, SciPy's Student-t and negative binomial) at one row.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from scipy import stats

from numpyro_bnp import families, models
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.infer.core.model import unwrap
from numpyro_bnp.infer.mixtures.model import read_mixture_model

N, D, V, K = 10, 3, 5, 4
NGGP_ARGS = dict(mass=2.0, sigma=0.3, tau=1.5)
LENGTHS = np.arange(1, N + 1)  # documents of different lengths
LOC = np.array([0.5, -1.0, 2.0])
W0 = np.array([[0.5, 0.1, 0.0], [0.1, 0.4, 0.05], [0.0, 0.05, 0.3]])
DOF, KAPPA = 5.0, 0.5
ENGINE = "TestEngine"

# ready model, its arguments, family, component sites, one row x, log p(x) under the prior
READY = {
    "documents": (
        models.nggp_multinomial_mixture,
        dict(num_obs=N, vocab_size=V, doc_lengths=LENGTHS, concentration=0.7),
        families.DirichletMultinomial,
        ("theta",),
        np.array([3, 0, 1, 0, 2]),
        lambda x: dist.DirichletMultinomial(jnp.full(V, 0.7), total_count=x.sum()).log_prob(x),
    ),
    "gaussian": (
        models.nggp_gaussian_mixture,
        dict(num_obs=N, dim=D, loc=LOC, kappa=KAPPA, dof=DOF, scale_matrix=W0),
        families.NormalWishart,
        ("Lambda", "mu"),
        np.array([1.0, -0.5, 0.3]),
        lambda x: stats.multivariate_t(
            loc=LOC,
            shape=(KAPPA + 1) / (KAPPA * (DOF - D + 1)) * np.linalg.inv(W0),
            df=DOF - D + 1,
        ).logpdf(x),
    ),
    "diagonal": (
        models.nggp_diagonal_gaussian_mixture,
        dict(num_obs=N, dim=D, loc=LOC, kappa=KAPPA, concentration=2.0, rate=3.0),
        families.NormalGamma,
        ("lam", "mu"),
        np.array([1.0, -0.5, 0.3]),
        lambda x: stats.t.logpdf(
            x, df=4.0, loc=LOC, scale=np.sqrt(3.0 * (KAPPA + 1) / (2.0 * KAPPA))
        ).sum(),
    ),
    "normal": (
        models.nggp_normal_mixture,
        dict(num_obs=N, dim=D, loc=LOC, sigma_mu=2.0, sigma_o=0.3),
        families.NormalNormal,
        ("mu",),
        np.array([1.0, -0.5, 0.3]),
        lambda x: stats.norm.logpdf(x, LOC, np.sqrt(2.0**2 + 0.3**2)).sum(),
    ),
    "poisson": (
        models.nggp_poisson_mixture,
        dict(num_obs=N, dim=D, concentration=2.0, rate=0.5),
        families.GammaPoisson,
        ("theta",),
        np.array([0, 3, 7]),
        lambda x: stats.nbinom.logpmf(x, 2.0, 0.5 / 1.5).sum(),
    ),
    "bernoulli": (
        models.nggp_bernoulli_mixture,
        dict(num_obs=N, dim=D, concentration1=0.5, concentration0=1.5),
        families.BetaBernoulli,
        ("theta",),
        np.array([1, 0, 1]),
        lambda x: np.sum(np.where(x == 1, np.log(0.25), np.log(0.75))),
    ),
}


def _read(model, **kwargs):
    return read_mixture_model(model, (), kwargs, ENGINE)


def _ready(case):
    model, kwargs, *_ = READY[case]
    return _read(model, **kwargs, **NGGP_ARGS, max_clusters=K)


def _predictive_row(family, x):
    row = families.sparse_counts(x) if isinstance(family, families.DirichletMultinomial) else x
    return float(family.log_predictive(family.prior, row))


@pytest.mark.parametrize("case", READY)
def test_ready_models_are_read(case):
    _, _, family_cls, sites, x, log_p = READY[case]
    spec = _ready(case)
    assert type(spec.family) is family_cls
    assert (spec.mass, spec.sigma, spec.tau) == (2.0, 0.3, 1.5)
    assert (spec.num_rows, spec.max_clusters) == (N, K)
    assert spec.dim == (V if case == "documents" else D)
    assert spec.obs_kind == ("documents" if case == "documents" else "dense")
    assert spec.partition_site == "z" and spec.obs_site == "obs"
    assert spec.component_sites == sites
    assert spec.engine == ENGINE and len(spec.site_summary) == 2 + len(sites)
    # the prior predictive of one row against an independent closed form
    np.testing.assert_allclose(_predictive_row(spec.family, x), float(log_p(x)), rtol=1e-10)


def test_the_families_hold_the_priors_passed():
    prior = _ready("documents").family.prior
    np.testing.assert_allclose(prior.concentration, np.full(V, 0.7))
    prior = _ready("gaussian").family.prior
    np.testing.assert_allclose([prior.kappa, prior.dof], [KAPPA, DOF])
    np.testing.assert_allclose(prior.loc, LOC)
    np.testing.assert_allclose(prior.scale_tril @ prior.scale_tril.T, np.linalg.inv(W0))
    prior = _ready("diagonal").family.prior
    for value, expected in zip(prior, (KAPPA, LOC, 2.0, 3.0), strict=True):
        np.testing.assert_allclose(value, np.broadcast_to(expected, (D,)))
    family = _ready("normal").family
    np.testing.assert_allclose(family.prior.loc, LOC)
    np.testing.assert_allclose(family.prior.precision, np.full(D, 2.0**-2))
    np.testing.assert_allclose(family.noise_precision, np.full(D, 0.3**-2))
    prior = _ready("poisson").family.prior
    np.testing.assert_allclose(prior.concentration, np.full(D, 2.0))
    np.testing.assert_allclose(prior.rate, np.full(D, 0.5))
    prior = _ready("bernoulli").family.prior
    np.testing.assert_allclose(prior.concentration1, np.full(D, 0.5))
    np.testing.assert_allclose(prior.concentration0, np.full(D, 1.5))


# --------------------------------------------------------------------- user-written models
def _observe(fn, obs, rows_plate):
    if not rows_plate:
        return numpyro.sample("x", fn, obs=obs)
    with numpyro.plate("data", fn.batch_shape[0]):
        return numpyro.sample("x", fn, obs=obs)


def user_documents(obs=None, *, rows_plate, lengths=LENGTHS):
    labels = numpyro.sample("labels", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        topic = numpyro.sample("topic", dist.Dirichlet(jnp.full(V, 0.7)))
    return _observe(dist.Multinomial(lengths, topic[labels]), obs, rows_plate)


def user_wishart(obs=None, *, rows_plate, covariance=False):
    z = numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        prec = numpyro.sample("P", dist.Wishart(DOF, scale_matrix=W0))
        if covariance:  # the same prior written with covariances and Cholesky factors
            cov = jnp.linalg.inv(KAPPA * prec)
            m = numpyro.sample("m", dist.MultivariateNormal(LOC, covariance_matrix=cov))
        else:
            m = numpyro.sample("m", dist.MultivariateNormal(LOC, precision_matrix=KAPPA * prec))
    if covariance:
        fn = dist.MultivariateNormal(m[z], scale_tril=jnp.linalg.cholesky(jnp.linalg.inv(prec[z])))
    else:
        fn = dist.MultivariateNormal(m[z], precision_matrix=prec[z])
    return _observe(fn, obs, rows_plate)


def user_normal_gamma(obs=None, *, rows_plate):
    z = numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        lam = numpyro.sample("lam", dist.Gamma(2.0, 3.0).expand([D]).to_event(1))
        mu = numpyro.sample("mu", dist.Normal(LOC, 1 / jnp.sqrt(KAPPA * lam)).to_event(1))
    return _observe(dist.Normal(mu[z], 1 / jnp.sqrt(lam[z])).to_event(1), obs, rows_plate)


def user_normal(obs=None, *, rows_plate):
    z = numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        mu = numpyro.sample("mu", dist.Normal(LOC, 2.0).expand([D]).to_event(1))
    return _observe(dist.Normal(mu[z], 0.3).to_event(1), obs, rows_plate)


def user_poisson(obs=None, *, rows_plate):
    z = numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        rate = numpyro.sample("rate", dist.Gamma(2.0, 0.5).expand([D]).to_event(1))
    return _observe(dist.Poisson(rate[z]).to_event(1), obs, rows_plate)


def user_bernoulli(obs=None, *, rows_plate):
    z = numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        p = numpyro.sample("p", dist.Beta(0.5, 1.5).expand([D]).to_event(1))
    return _observe(dist.Bernoulli(p[z]).to_event(1), obs, rows_plate)


USER = [
    ("documents", user_documents, {}, ("topic",)),
    ("gaussian", user_wishart, {}, ("P", "m")),
    ("gaussian", user_wishart, {"covariance": True}, ("P", "m")),
    ("diagonal", user_normal_gamma, {}, ("lam", "mu")),
    ("normal", user_normal, {}, ("mu",)),
    ("poisson", user_poisson, {}, ("rate",)),
    ("bernoulli", user_bernoulli, {}, ("p",)),
]


@pytest.mark.parametrize("rows_plate", [False, True], ids=["no_rows_plate", "rows_plate"])
@pytest.mark.parametrize(
    "case, model, extra, sites", USER, ids=lambda v: getattr(v, "__name__", None)
)
def test_user_written_models_read_as_the_ready_ones(case, model, extra, sites, rows_plate):
    spec, ready = _read(model, rows_plate=rows_plate, **extra), _ready(case)
    assert type(spec.family) is type(ready.family)
    assert spec.component_sites == sites and spec.obs_site == "x"
    for name in ("mass", "sigma", "tau", "num_rows", "max_clusters", "dim", "obs_kind"):
        assert getattr(spec, name) == getattr(ready, name)
    for a, b in zip(jax.tree.leaves(spec.family), jax.tree.leaves(ready.family), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_multivariate_noise_of_known_covariance():
    noise = np.array([[0.5, 0.2, 0.0], [0.2, 0.4, 0.1], [0.0, 0.1, 0.3]])

    def known_covariance(obs=None):
        z = numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
        with numpyro.plate("clusters", K):
            mu = numpyro.sample("mu", dist.Normal(LOC, 2.0).expand([D]).to_event(1))
        numpyro.sample("x", dist.MultivariateNormal(mu[z], covariance_matrix=noise), obs=obs)

    spec = _read(known_covariance)
    assert type(spec.family) is families.NormalNormal and spec.component_sites == ("mu",)
    x = np.array([1.0, -0.5, 0.3])
    expected = stats.multivariate_normal(LOC, 4.0 * np.eye(D) + noise).logpdf(x)
    np.testing.assert_allclose(_predictive_row(spec.family, x), expected, rtol=1e-10)


# ---------------------------------------------------------------- models that do not fit
def no_partition(obs=None):
    z = numpyro.sample("z", dist.Categorical(jnp.ones(K) / K).expand([N]))
    with numpyro.plate("clusters", K):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    numpyro.sample("x", dist.Normal(mu[z], 0.3).to_event(1), obs=obs)


def two_partitions(obs=None):
    z = numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    numpyro.sample("z2", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    numpyro.sample("x", dist.Normal(mu[z], 0.3).to_event(1), obs=obs)


def normal_prior_on_the_scale(obs=None):
    z = numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
        log_s = numpyro.sample("log_s", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    numpyro.sample("x", dist.Normal(mu[z], jnp.exp(log_s[z])).to_event(1), obs=obs)


def dirichlet_poisson(obs=None):
    z = numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        theta = numpyro.sample("theta", dist.Dirichlet(jnp.ones(V)))
    numpyro.sample("x", dist.Poisson(10 * theta[z]).to_event(1), obs=obs)


def topic_outside_the_plate(obs=None):
    numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    theta = numpyro.sample("theta", dist.Dirichlet(jnp.ones(V)))
    numpyro.sample("x", dist.Multinomial(LENGTHS, jnp.broadcast_to(theta, (N, V))), obs=obs)


def first_topic_for_every_row(obs=None):
    numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        theta = numpyro.sample("theta", dist.Dirichlet(jnp.ones(V)))
    numpyro.sample("x", dist.Multinomial(LENGTHS, jnp.broadcast_to(theta[0], (N, V))), obs=obs)


def shifted_mean(obs=None):
    z = numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    numpyro.sample("x", dist.Normal(mu[z] + 1, 0.3).to_event(1), obs=obs)


def prior_on_the_mass(obs=None):
    mass = numpyro.sample("mass", dist.Gamma(1.0, 1.0))
    z = numpyro.sample("z", NGGP(mass, 0.3, 1.5, num_points=N))
    with numpyro.plate("clusters", K):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    numpyro.sample("x", dist.Normal(mu[z], 0.3).to_event(1), obs=obs)


def mean_independent_of_the_precision(obs=None):
    z = numpyro.sample("z", NGGP(num_points=N, **NGGP_ARGS))
    with numpyro.plate("clusters", K):
        prec = numpyro.sample("P", dist.Wishart(DOF, scale_matrix=W0))
        m = numpyro.sample("m", dist.MultivariateNormal(LOC, precision_matrix=jnp.eye(D)))
    numpyro.sample("x", dist.MultivariateNormal(m[z], precision_matrix=prec[z]), obs=obs)


CONJUGATE = "a conjugate pair of components and likelihood, one of: Dirichlet components"
NOT_FITTING = [
    (no_partition, "expected exactly one sample site with a NGGP distribution, found 0"),
    (two_partitions, "expected exactly one sample site with a NGGP distribution, found 2"),
    (
        normal_prior_on_the_scale,
        CONJUGATE + ".*found the components {mu: Normal, log_s: Normal} with Normal observations",
    ),
    (dirichlet_poisson, CONJUGATE + ".*found the components {theta: Dirichlet} with Poisson"),
    (topic_outside_the_plate, "plate over the K=1 clusters.*'theta' has batch shape \\(\\)"),
    (
        first_topic_for_every_row,
        "the observed site 'x' to have probs = theta\\[z\\].*found probs that differ from it in "
        "row 0",
    ),
    (shifted_mean, "the observed site 'x' to have loc = mu\\[z\\].*found loc that differ"),
    (prior_on_the_mass, "the NGGP's mass is the value of the sample site 'mass'.*not supported"),
    (mean_independent_of_the_precision, "the mean site 'm' to be MultivariateNormal.*kappa0 \\* P"),
]


@pytest.mark.parametrize("model, message", NOT_FITTING, ids=lambda v: getattr(v, "__name__", None))
def test_models_that_do_not_fit_are_refused_naming_what_was_expected(model, message):
    with pytest.raises(ValueError, match=f"^{ENGINE}") as info:
        _read(model)
    assert info.match(message)
    assert "; the model has: " in str(info.value)  # the sites found are listed
    assert "z: NGGP" in str(info.value) or model is no_partition


def test_the_nggp_parameters_must_be_numbers():
    def read(mass):
        _read(models.nggp_normal_mixture, num_obs=N, dim=D, mass=mass, sigma=0.3, max_clusters=K)
        return mass

    with pytest.raises(
        ValueError, match=r"the NGGP's mass must be a number .*NGGPMarginalGibbs learns"
    ):
        jax.jit(read)(2.0)


# ---------------------------------------------------------------------- observed data
def test_check_observed_names_the_argument_and_the_first_bad_row():
    docs = _ready("documents")
    counts = np.zeros((3, V))
    counts[0, 0], counts[1, :] = 4, 1  # documents of different lengths are fine
    docs.check_observed(counts, "batch")
    for bad, value in ((-1.0, "-1.0"), (0.5, "0.5")):
        wrong = counts.copy()
        wrong[2, 3] = bad
        with pytest.raises(ValueError, match=f"batch holds .*row: 2, value {value} in column 3"):
            docs.check_observed(wrong, "batch")
    with pytest.raises(ValueError, match=r"batch must have shape \(n, 5\)"):
        docs.check_observed(np.zeros((3, V + 1)), "batch")
    poisson, bernoulli = _ready("poisson"), _ready("bernoulli")
    poisson.check_observed(np.array([[0, 2, 9]]), "rows")
    with pytest.raises(ValueError, match=r"rows holds .*IntegerNonnegative.*row: 1"):
        poisson.check_observed(np.array([[0, 2, 9], [1, 2.5, 0]]), "rows")
    bernoulli.check_observed(np.array([[0, 1, 1]]), "pixels")
    with pytest.raises(ValueError, match=r"pixels holds .*Boolean.*row: 0, value 2\.0"):
        bernoulli.check_observed(np.array([[0, 2, 1]]), "pixels")
    with pytest.raises(ValueError, match=r"points contains NaN or infinite values .*row: 1"):
        _ready("normal").check_observed(np.array([[0.0, 1, 2], [np.nan, 0, 0]]), "points")


# ------------------------------------------------------------ component values, prior draws
@pytest.mark.parametrize("case", READY)
def test_component_values_name_the_model_sites(case):
    model, kwargs, *_ = READY[case]
    spec = _ready(case)
    values = spec.family.mean(spec.family.init_clusters(K))  # the structure of sample, too
    sites = spec.component_values(values)
    assert tuple(sites) == spec.component_sites
    labels = np.array([0, 1, 2, 3, 0, 1, 2, 3, 3, 0])
    data = {**sites, "z": labels}
    tr = handlers.trace(handlers.seed(handlers.substitute(model, data=data), 0)).get_trace(
        **kwargs, **NGGP_ARGS, max_clusters=K
    )
    obs = tr["obs"]["fn"]
    if isinstance(values, families.MeanPrecision):
        mean, precision = values.loc[labels], values.precision[labels]
        if case == "diagonal":
            np.testing.assert_allclose(obs.variance, 1 / precision, rtol=1e-10)
        else:
            np.testing.assert_allclose(unwrap(obs).precision_matrix, precision, rtol=1e-8)
    else:
        mean = values[labels] * (LENGTHS[:, None] if case == "documents" else 1)
    np.testing.assert_allclose(obs.mean, mean, rtol=1e-10)


def test_documents_drawn_from_the_prior_have_their_lengths():
    labels = np.array([0, 1, 2, 3, 0, 1, 2, 3, 3, 0])  # the partition is not the subject here
    model = handlers.substitute(models.nggp_multinomial_mixture, data={"z": labels})
    kwargs = dict(num_obs=N, vocab_size=V, doc_lengths=LENGTHS, max_clusters=K, **NGGP_ARGS)
    tr = handlers.trace(handlers.seed(model, 0)).get_trace(**kwargs)
    counts = np.asarray(tr["obs"]["value"])
    assert counts.shape == (N, V) and counts.min() >= 0
    np.testing.assert_array_equal(counts.sum(-1), LENGTHS)
    # given the documents, their lengths are their row sums
    observed = handlers.trace(handlers.seed(model, 0)).get_trace(
        counts, **dict(kwargs, doc_lengths=None)
    )
    np.testing.assert_array_equal(observed["obs"]["fn"].total_count, LENGTHS)
    with pytest.raises(ValueError, match=r"obs must have shape \(num_obs, vocab_size\)"):
        handlers.seed(model, 0)(counts[:, :-1], **kwargs)


def test_documents_of_one_length_drawn_by_predictive():
    # Predictive vmaps the model: the lengths must reach the Multinomial's total_count_max
    # from the host value of a scalar doc_lengths (it raised before)
    from numpyro.infer import Predictive

    kwargs = dict(num_obs=N, vocab_size=V, doc_lengths=7, max_clusters=K, **NGGP_ARGS)
    draws = Predictive(models.nggp_multinomial_mixture, num_samples=2)(
        jax.random.PRNGKey(0), **kwargs
    )
    np.testing.assert_array_equal(np.asarray(draws["obs"]).sum(-1), np.full((2, N), 7))


def test_a_partition_beyond_the_capacity_is_never_given_another_clusters_parameters():
    labels = np.array([0, 1, 2, 3, 4, 0, 1, 2, 3, 4])  # five clusters, K = 4
    model = handlers.seed(handlers.substitute(models.nggp_normal_mixture, data={"z": labels}), 0)
    kwargs = dict(num_obs=N, dim=D, max_clusters=K)
    with pytest.raises(ValueError, match="max_clusters=4 is less than the 5 clusters"):
        model(**kwargs)

    def loc(z):  # under jit: NaN parameters for the rows beyond the capacity
        data = {"z": z}
        tr = handlers.trace(handlers.substitute(handlers.seed(models.nggp_normal_mixture, 0), data))
        return tr.get_trace(**kwargs)["obs"]["fn"].mean

    loc = np.asarray(jax.jit(loc)(labels))
    assert np.isnan(loc[labels == 4]).all() and np.isfinite(loc[labels < 4]).all()
