"""Power-prior streaming variational Bayes (PowerPriorSVB) and its collapsed fit of one batch.

Independent checks: the truncated exponential's mean against the spec's quadrature table and its
KL against ``scipy.integrate.quad``; the collapsed stick-breaking prior against exact
enumeration (sticks integrated numerically); the second-order count expansion against the exact
Poisson-binomial; ``T = 1`` against conjugate Bayes (parameters and the exact log marginal
likelihood); ``ρ = 0`` against a fit of the batch on its own; ``ρ = 1`` against one fit of all
the data; drift (HPP's E[ρ] falls at a change, MHPP forgets only the cluster that moved);
bit-for-bit resume; bad input.
"""

import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random
from scipy import integrate, stats
from sklearn.metrics import adjusted_rand_score

from numpyro_bnp.infer import BadBatchError, PowerPriorState, PowerPriorSVB
from numpyro_bnp.infer.mixtures import collapsed_vi as cvi
from numpyro_bnp.infer.mixtures.power_prior import (
    truncated_exponential_kl,
    truncated_exponential_mean,
)
from numpyro_bnp.models import dp_mixture

CENTRES = np.array([[-5.0, 0.0], [5.0, 0.0], [0.0, 6.0]])
SPREAD = 0.6
MODEL = dict(dim=2, mass=1.0, truncation=6, components="gaussian", kappa=0.1)


def stream(seed, num_batches, size=200, moved=None, labels=False):
    """Batches of three 2-D Gaussians; from batch ``moved[0]`` on, cluster 2 sits at
    ``moved[1]``. ``labels``: also return each batch's true labels."""
    rng = np.random.default_rng(seed)
    out, truth = [], []
    for t in range(num_batches):
        centres = CENTRES.copy()
        if moved is not None and t >= moved[0]:
            centres[2] = moved[1]
        truth.append(rng.integers(3, size=size))
        out.append(centres[truth[-1]] + SPREAD * rng.normal(size=(size, 2)))
    return (out, truth) if labels else out


@pytest.fixture(scope="module")
def engines():
    """One engine per forgetting scheme, set up once (their compiled updates are shared)."""
    made = {
        "svb": PowerPriorSVB(dp_mixture, forgetting=1.0),
        "independent": PowerPriorSVB(dp_mixture, forgetting=0.0),
        "hpp": PowerPriorSVB(dp_mixture, forgetting="hpp", gamma=0.1),
        "mhpp": PowerPriorSVB(dp_mixture, forgetting="mhpp", gamma=0.1),
    }
    for engine in made.values():
        engine.init(random.PRNGKey(0), **MODEL)
    return made


# ------------------------------------------------------------------------- the pieces' math


def test_truncated_exponential_mean_and_kl():
    """Spec table of E[ρ | ω] (quadrature values), the symmetry E[ρ|ω] + E[ρ|−ω] = 1, the series
    at ω ≈ 0, and the KL against numerical integration of the two densities."""
    omega = np.array([-3.0, -0.1, 0.1, 1.0, 2.0, 5.0])
    table = [0.280938, 0.491668, 0.508332, 0.581977, 0.656518, 0.806784]
    np.testing.assert_allclose(truncated_exponential_mean(omega), table, atol=2e-6)
    np.testing.assert_allclose(
        truncated_exponential_mean(omega) + truncated_exponential_mean(-omega), 1.0, atol=1e-12
    )
    assert float(truncated_exponential_mean(0.0)) == 0.5
    np.testing.assert_allclose(truncated_exponential_mean(1e-4), 0.5 + 1e-4 / 12, atol=1e-12)

    def density(w):
        return lambda r: np.exp(w * r) * (w / np.expm1(w) if w != 0 else 1.0)

    for w, g in [(2.0, 0.1), (-3.0, 0.1), (0.5, -0.1), (1e-5, 4.0), (-40.0, 0.1)]:
        q, p = density(w), density(g)
        exact = integrate.quad(lambda r, q=q, p=p: q(r) * np.log(q(r) / p(r)), 0, 1)[0]
        np.testing.assert_allclose(truncated_exponential_kl(w, g), exact, rtol=1e-6, atol=1e-9)


def _exact_log_prior(z, num_comp, alpha):
    """log p(z) of the truncated stick-breaking prior, each stick integrated numerically."""
    total = 0.0
    for k in range(num_comp - 1):
        n_k, n_above = np.sum(z == k), np.sum(z > k)
        value = integrate.quad(
            lambda v, a=n_k, b=n_above: v**a * (1 - v) ** b * stats.beta.pdf(v, 1, alpha), 0, 1
        )[0]
        total += np.log(value)
    return total


def test_collapsed_prior_is_the_stick_breaking_marginal():
    """With one-hot labels (variances 0, the expansion exact): Σ_z p(z) = 1 over all labelings
    (N = 4, T = 3, α = 2), ``expected_log_prior`` = log p(z), and ``label_log_prior`` is the
    exact conditional p(z_n = k | z_{-n}) (which sums to one)."""
    num_rows, num_comp, alpha = 4, 3, 2.0
    labelings = np.array(list(itertools.product(range(num_comp), repeat=num_rows)))
    exact = np.array([_exact_log_prior(z, num_comp, alpha) for z in labelings])
    np.testing.assert_allclose(np.exp(exact).sum(), 1.0, rtol=1e-9)
    index = {tuple(z): i for i, z in enumerate(labelings)}
    for z in labelings[::7]:
        phi = jnp.eye(num_comp)[z]
        np.testing.assert_allclose(cvi.expected_log_prior(phi, alpha), exact[index[tuple(z)]])
        n = 1
        others = np.delete(np.asarray(phi), n, axis=0)
        mean, var = cvi.count_moments(jnp.asarray(others))
        cond = np.exp(cvi.label_log_prior(mean, var, alpha))
        joint = np.exp([exact[index[tuple(np.r_[z[:n], k, z[n + 1 :]])]] for k in range(3)])
        np.testing.assert_allclose(cond, joint / joint.sum(), rtol=1e-9)


def test_second_order_counts_beat_first_order():
    """The spec's check: E log(1 + N) for N a sum of 40 Bernoullis, p ~ U(0, 0.3), exact (the
    Poisson-binomial by convolution) against the expansions: the second order is closer than the
    first. (The spec's table, 1.86380 / 1.86935 / 1.91990, comes from draws its text does not
    pin down; these are the draws of NumPy's ``default_rng(0)``.) With no variance the
    expansion is exact."""
    p = np.random.default_rng(0).uniform(0, 0.3, size=40)
    pmf = np.array([1.0])
    for q in p:
        pmf = np.convolve(pmf, [1 - q, q])
    exact = float(pmf @ np.log1p(np.arange(pmf.size)))
    mean, var = p.sum(), (p * (1 - p)).sum()
    second = float(cvi._expected_log(1.0, mean, var))
    first = float(np.log1p(mean))
    assert abs(second - exact) < 0.1 * abs(first - exact)
    np.testing.assert_allclose(cvi._expected_log(1.0, 7.0, 0.0), np.log(8.0))


def test_one_component_is_conjugate_bayes(engines):
    """T = 1 (spec fact 7): the posterior is the prior plus every row's statistics, and the ELBO
    is the exact log marginal likelihood A(posterior) − A(prior) − (N D / 2) log 2π."""
    family = engines["svb"]._family
    obs = jnp.asarray(stream(3, 1, size=50)[0])
    prior = family.init_clusters(1)
    mask = jnp.ones(50)
    fit = cvi.fit(family, prior, obs, mask, jnp.ones((50, 1)), 1.0, 5, 1e-12)
    expected = family.absorb(prior, obs, jnp.ones((50, 1)))
    for got, want in zip(jax.tree.leaves(fit.params), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    log_evidence = (
        family.log_normalizer(fit.params)[0]
        - family.log_normalizer(prior)[0]
        - 50 * np.log(2 * np.pi)
    )
    np.testing.assert_allclose(fit.elbo, log_evidence, rtol=1e-10)

    # and the evidence is the product of the sequential predictives (an independent route)
    def step(params, x):
        return family.update(params, family.stats(x), 1.0), family.log_predictive(params, x)[0]

    np.testing.assert_allclose(log_evidence, jax.lax.scan(step, prior, obs)[1].sum(), rtol=1e-10)


# ------------------------------------------------------------------------- the engine


def test_three_clusters_are_found_and_predicted(engines):
    """Every scheme finds the three clusters of a stationary stream (ARI 1 on held-out rows),
    and the predictive is the mixture of Student-t's: its density integrates to one."""
    batches = stream(0, 3)
    (test,), (truth,) = stream(1, 1, labels=True)
    for name in ("independent", "hpp"):  # (svb and mhpp: in the tests below)
        res = engines[name].run(random.PRNGKey(0), batches, progress_bar=False, **MODEL)
        assert res.traces["num_clusters"][-1] == 3, name
        assert adjusted_rand_score(truth, res.predict(test)) == 1.0, name
        assert np.all(res.traces["converged"])
    grid = np.linspace(-12, 12, 241)
    xy = np.stack(np.meshgrid(grid, grid), -1).reshape(-1, 2)
    mass = np.exp(res.log_predictive(xy)).sum() * (grid[1] - grid[0]) ** 2
    np.testing.assert_allclose(mass, 1.0, atol=2e-3)


def test_rho_zero_is_each_batch_on_its_own(engines):
    """ρ = 0: the state after a batch does not depend on what came before it (bit for bit)."""
    engine = engines["independent"]
    first, second = stream(4, 2)
    state = engine.init(random.PRNGKey(0), **MODEL)
    after_first, _ = engine.update(state, first)
    other, _ = engine.update(state, first[::-1] + 3.0)  # another history of one batch
    a, _ = engine.update(after_first, second)
    b, _ = engine.update(other, second)
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(u, v)


def test_rho_one_accumulates_the_stream(engines):
    """ρ = 1 on a stationary stream: the components' posteriors after two batches carry both
    batches' rows (their pseudo-counts κ add up to the prior's plus every row), as one fit of
    all the rows does, and their means agree with that fit's to the rows' standard error."""
    engine = engines["svb"]
    batches = stream(5, 2, size=100)
    res = engine.run(random.PRNGKey(0), batches, progress_bar=False, **MODEL)
    whole = engine.run(random.PRNGKey(0), [np.concatenate(batches)], progress_bar=False, **MODEL)
    kappa0 = MODEL["kappa"]
    for r in (res, whole):
        np.testing.assert_allclose(r.components.kappa.sum(), 6 * kappa0 + 200, rtol=1e-6)
    used = res.components.kappa > 1
    means = np.sort(res.components.loc[used], axis=0)
    np.testing.assert_allclose(
        means, np.sort(whole.components.loc[whole.components.kappa > 1], axis=0), atol=0.1
    )


@pytest.fixture(scope="module")
def moved_runs(engines):
    """HPP and MHPP on a stream where cluster 2 moves from (0, 6) to (0, 4.5) at batch 4."""
    batches = stream(6, 5, moved=(3, [0.0, 4.5]))
    return tuple(
        engines[name].run(random.PRNGKey(0), batches, progress_bar=False, **MODEL)
        for name in ("hpp", "mhpp")
    )


def test_hpp_sees_a_change_and_mhpp_forgets_only_the_moved_cluster(moved_runs):
    """Cluster 2 moves by 2.5 standard deviations at batch 4: HPP's E[ρ] is high on the
    stationary batches and falls at the change; MHPP's falls only for the moved cluster's
    component, which follows it."""
    hpp, mhpp = moved_runs
    rho = hpp.expected_rho[:, 0]
    assert np.all(rho[1:3] > 0.95) and rho[3] < 0.1 and rho[4] > 0.9
    moved = int(np.argmin(np.abs(mhpp.components.loc - [0.0, 4.5]).sum(1)))
    rho = mhpp.expected_rho[3]
    used = mhpp.traces["expected_rho"][2] > 0.6  # the components that held data before
    assert rho[moved] < 0.1
    assert np.all(rho[used & (np.arange(rho.size) != moved)] > 0.9)
    np.testing.assert_allclose(mhpp.components.loc[moved], [0.0, 4.5], atol=0.15)


def test_resume_is_bit_for_bit(engines, tmp_path):
    """Two batches, saved, loaded in a rebuilt engine, two more: the same state as four."""
    engine = engines["hpp"]
    batches = stream(7, 4)
    whole = engine.run(random.PRNGKey(3), batches, progress_bar=False, **MODEL)
    half = engine.run(random.PRNGKey(3), batches[:2], progress_bar=False, **MODEL)
    half.save(tmp_path / "state.npz")
    rebuilt, state = PowerPriorSVB.from_checkpoint(dp_mixture, tmp_path / "state.npz")
    rest = rebuilt.run(random.PRNGKey(99), batches[2:], progress_bar=False, init_state=state)
    for u, v in zip(jax.tree.leaves(whole.state), jax.tree.leaves(rest.state), strict=True):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(rest.time, [3, 4])


def test_bad_input_is_refused_and_the_state_kept(engines):
    engine = engines["svb"]
    state = engine.init(random.PRNGKey(0), **MODEL)
    good = stream(8, 1)[0]
    bad = good.copy()
    bad[3, 1] = np.nan
    with pytest.raises(BadBatchError, match="bad row: 3"):
        engine.update(state, bad)
    with pytest.raises(BadBatchError, match="shape"):
        engine.update(state, good[:, :1])
    with pytest.raises(TypeError, match="PowerPriorState"):
        engine.update(tuple(state), good)
    assert isinstance(engine.update(state, good)[0], PowerPriorState)
    with pytest.raises(ValueError, match="forgetting"):
        PowerPriorSVB(dp_mixture, forgetting=1.5)
    with pytest.raises(ValueError, match="forgetting"):
        PowerPriorSVB(dp_mixture, forgetting="fixed")
    with pytest.raises(TypeError, match="gamma"):
        PowerPriorSVB(dp_mixture, forgetting="hpp")
    with pytest.raises(ValueError, match="gamma"):
        PowerPriorSVB(dp_mixture, forgetting=0.5, gamma=0.1)


def test_warnings_for_a_small_truncation_and_an_unconverged_fit():
    engine = PowerPriorSVB(dp_mixture, forgetting=1.0, max_iter=1)
    with pytest.warns(RuntimeWarning) as caught:
        engine.run(
            random.PRNGKey(0), stream(9, 1), progress_bar=False, **{**MODEL, "truncation": 2}
        )
    text = " ".join(str(w.message) for w in caught)
    assert "max_iter=1" in text and "truncation may be too small" in text


def test_to_arviz_has_a_batch_time_dimension(engines):
    res = engines["mhpp"].run(random.PRNGKey(0), stream(10, 3), progress_bar=False, **MODEL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = res.to_arviz(random.PRNGKey(1), num_draws=50, num_chains=2)
    stream_group = data["stream"]
    assert stream_group["expected_rho"].shape == (3, 6)
    np.testing.assert_array_equal(stream_group["time"], [1, 2, 3])
    weights = np.asarray(data["posterior"]["weights"])
    assert weights.shape == (2, 50, 6)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-9)
    assert np.asarray(data["posterior"]["v"]).shape == (2, 50, 5)
    assert np.asarray(data["posterior"]["mu"]).shape == (2, 50, 6, 2)


def test_plot_forgetting_draws_rho_and_the_clusters(moved_runs):
    import matplotlib

    matplotlib.use("Agg")
    from numpyro_bnp.plots import plot_forgetting

    hpp, mhpp = moved_runs
    fig = plot_forgetting({"HPP": hpp, "MHPP": mhpp}, changes=[4])
    top, bottom = fig.axes
    np.testing.assert_allclose(top.lines[0].get_ydata(), hpp.expected_rho[:, 0])
    np.testing.assert_allclose(bottom.lines[0].get_ydata(), hpp.traces["num_clusters"])
    assert len(top.lines) == 2 + 1 + 1  # HPP, MHPP's mean and its components, the change
    with pytest.raises(TypeError, match="non-empty dict"):
        plot_forgetting([hpp])
