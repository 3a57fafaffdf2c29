"""Collapsed moves of CRMSlice (column moves: births at any dimension; row moves with every
trait integrated out): exactness.

The moves (``numpyro_bnp.infer.features.crm.births``, ``numpyro_bnp.infer.features.crm.rows``) are
first driven
by small standalone loops: on a model with a few fixed atoms the slice variables and the moves
alone must reproduce the posterior computed by enumerating every count matrix (the traits
integrated out in closed form); on the untruncated prior-only model (atoms revealed from the
thinned tail, arrivals moved, the column moves the only update of the counts) the chain must
recover ``E[K+] = c H_N``. Then in ``CRMSlice``: a prior-only run recovers ``E[K+]`` with the
moves on (column moves, and column plus row moves), and on data like scikit-learn's digits
(``D = 64``, traits of scale 0.5, noise 0.15), where a trait drawn from the prior fits no row,
features are born. Tolerances are 4 Monte-Carlo standard errors with the effective sample size
from ArviZ (``mc_checks.check_mean``).
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax, random
from mc_checks import check_mean
from mcmc_runs import run_chains

from numpyro_bnp.distributions import BetaProcess, GammaProcess
from numpyro_bnp.infer import CRMSlice
from numpyro_bnp.infer.features.crm.atoms import AtomSeries
from numpyro_bnp.infer.features.crm.births import collapsed_columns
from numpyro_bnp.infer.features.crm.rows import collapsed_rows
from numpyro_bnp.models import beta_bernoulli_linear_gaussian, linear_gaussian

XI = 1.0  # Δ_ξ: ξ(k) = e^{-k}


def atom_series(crm, likelihood, num_rows):
    return AtomSeries(
        crm,
        "bondesson",
        likelihood,
        None,
        num_rows,
        jnp.float64,
        n_gamma=4,
        gamma_step=1.0,
        n_marks=0,
        mark_step=0.3,
    )


def last_used(x):
    """``(N,)`` the last atom (1-based) each row uses, 0 for none."""
    index = jnp.arange(1, x.shape[1] + 1, dtype=jnp.int32)
    return jnp.max(jnp.where(x > 0, index, 0), axis=1)


# ---------------------------------------------------------------------------------------------
# a few fixed atoms: the moves alone against the enumerated posterior
# ---------------------------------------------------------------------------------------------
NOISE_VAR = np.array([0.3, 0.5]) ** 2
TRAIT_LOC = np.array([0.3, -0.2])
TRAIT_VAR = np.array([0.8, 0.6]) ** 2
CASES = {  # likelihood: (CRM of the count law, fixed atoms θ, data y (N, D=2), counts enumerated)
    "bernoulli": (
        BetaProcess(1.0),
        np.array([0.7, 0.4, 0.2]),
        np.array([[1.1, -0.9], [0.2, 0.5], [1.4, -0.3]]),
        range(2),
    ),
    "poisson": (
        GammaProcess(1.0, 1.0),
        np.array([0.8, 0.3]),
        np.array([[1.2, -0.8], [0.1, 0.6]]),
        range(10),
    ),
}


def exact_moments(
    likelihood, theta, y, values, noise_var=NOISE_VAR, trait_loc=TRAIT_LOC, trait_var=TRAIT_VAR
):
    """Posterior ``P(X_nk = x)`` (as ``E[X_nk]``, ``E[K+]``) and ``E[ψ]`` of the finite model by
    enumeration, the traits integrated out: per column ``d``, ``y_{·d} ~ N(X μ_0d, σ_d² I +
    σ_0d² X Xᵀ)``, and ``E[ψ | X, y]`` the conjugate mean."""
    n, k = y.shape[0], theta.shape[0]
    log_w, mean_x, mean_k, mean_psi = [], [], [], []
    for flat in itertools.product(values, repeat=n * k):
        x = np.array(flat, float).reshape(n, k)
        if likelihood == "bernoulli":
            log_h = np.sum(x * np.log(theta) + (1 - x) * np.log1p(-theta))
        else:
            from scipy.special import gammaln

            log_h = np.sum(x * np.log(theta) - theta - gammaln(x + 1))
        log_f, psi = 0.0, np.zeros((k, y.shape[1]))
        for d in range(y.shape[1]):
            cov = noise_var[d] * np.eye(n) + trait_var[d] * x @ x.T
            r = y[:, d] - x @ np.full(k, trait_loc[d])
            log_f += -0.5 * (np.linalg.slogdet(2 * np.pi * cov)[1] + r @ np.linalg.solve(cov, r))
            prec = x.T @ x / noise_var[d] + np.eye(k) / trait_var[d]
            psi[:, d] = np.linalg.solve(
                prec, x.T @ y[:, d] / noise_var[d] + trait_loc[d] / trait_var[d]
            )
        log_w.append(log_h + log_f)
        mean_x.append(x)
        mean_k.append(np.sum(x.sum(0) > 0))
        mean_psi.append(psi)
    w = np.exp(np.array(log_w) - max(log_w))
    w /= w.sum()
    return (
        np.tensordot(w, np.array(mean_x), 1),
        float(w @ np.array(mean_k)),
        np.tensordot(w, np.array(mean_psi), 1),
    )


def finite_chains(key, atoms, theta, y, num_chains, num_sweeps, n_columns=3):
    """Chains of (slice variables, ``n_columns`` collapsed column moves) on the fixed atoms
    ``theta``; rows may use atom ``k <= min(K_n, K)``. Returns the draws of ``X`` and ``ψ``."""
    n, k = y.shape[0], theta.shape[0]
    gaussian = tuple(jnp.asarray(v) for v in (NOISE_VAR, TRAIT_LOC, TRAIT_VAR))

    def sweep(carry, key):
        x, residual, traits = carry
        k_u, k_move = random.split(key)
        wanted = last_used(x) + jnp.floor(XI * random.exponential(k_u, (n,))).astype(jnp.int32)
        x, residual, traits, _ = collapsed_columns(
            k_move,
            x,
            residual,
            traits,
            theta,
            jnp.minimum(wanted, k),
            jnp.int32(k),
            atoms=atoms,
            gaussian=gaussian,
            xi_scale=XI,
            n_columns=n_columns,
        )
        return (x, residual, traits), (x, traits)

    def chain(key):
        x = jnp.zeros((n, k), jnp.int32)
        traits = jnp.asarray(TRAIT_LOC) + jnp.zeros((k, 1))
        return lax.scan(sweep, (x, y, traits), random.split(key, num_sweeps))[1]

    return jax.jit(jax.vmap(chain))(random.split(key, num_chains))


@pytest.mark.parametrize("likelihood", ["bernoulli", "poisson"])
def test_moves_alone_reproduce_the_enumerated_posterior(likelihood):
    crm, theta, y, values = CASES[likelihood]
    atoms = atom_series(crm, likelihood, y.shape[0])
    x, traits = finite_chains(random.PRNGKey(0), atoms, jnp.asarray(theta), jnp.asarray(y), 4, 6000)
    x, traits = np.asarray(x, float), np.asarray(traits)
    mean_x, mean_k, mean_psi = exact_moments(likelihood, theta, y, values)
    for n, k in np.ndindex(*mean_x.shape):
        check_mean(x[:, :, n, k], mean_x[n, k])
    check_mean((x.sum(-2) > 0).sum(-1), mean_k)
    for k, d in ((0, 0), (theta.shape[0] - 1, 1)):
        check_mean(traits[:, :, k, d], mean_psi[k, d])


def row_chains(key, atoms, theta, y, gaussian, num_chains, num_sweeps, refresh_every):
    """Chains of (slice variables, one pass of collapsed row moves) on the fixed atoms
    ``theta``, as :func:`finite_chains`. Returns the draws of ``X``."""
    n, k = y.shape[0], theta.shape[0]
    noise_var, trait_loc, trait_var = gaussian

    def sweep(x, key):
        k_u, k_move = random.split(key)
        wanted = last_used(x) + jnp.floor(XI * random.exponential(k_u, (n,))).astype(jnp.int32)
        x = collapsed_rows(
            k_move,
            x,
            y,
            theta,
            jnp.minimum(wanted, k),
            jnp.int32(k),
            atoms=atoms,
            noise_var=noise_var,
            trait_loc=jnp.asarray(trait_loc),
            trait_var=trait_var,
            xi_scale=XI,
            refresh_every=refresh_every,
        )
        return x, x

    def chain(key):
        return lax.scan(sweep, jnp.zeros((n, k), jnp.int32), random.split(key, num_sweeps))[1]

    return jax.jit(jax.vmap(chain))(random.split(key, num_chains))


def test_collapsed_rows_alone_reproduce_the_enumerated_posterior():
    # one noise variance and one trait variance (what the row moves need), a mean per column;
    # refresh_every=2 < N also checks the recomputation of the posterior between blocks
    crm, theta, y, values = CASES["bernoulli"]
    noise_var, trait_var, trait_loc = 0.4**2, 0.7**2, TRAIT_LOC
    atoms = atom_series(crm, "bernoulli", y.shape[0])
    gaussian = (noise_var, trait_loc, trait_var)
    x = row_chains(
        random.PRNGKey(2), atoms, jnp.asarray(theta), jnp.asarray(y), gaussian, 4, 4000, 2
    )
    x = np.asarray(x, float)
    dims = np.ones(y.shape[1])
    mean_x, mean_k, _ = exact_moments(
        "bernoulli", theta, y, values, noise_var * dims, trait_loc, trait_var * dims
    )
    for n, k in np.ndindex(*mean_x.shape):
        check_mean(x[:, :, n, k], mean_x[n, k])
    check_mean((x.sum(-2) > 0).sum(-1), mean_k)


# ---------------------------------------------------------------------------------------------
# the untruncated prior-only model: the moves are the only update of the counts
# ---------------------------------------------------------------------------------------------
def prior_only_chains(key, atoms, num_rows, capacity, num_chains, num_sweeps, n_columns, xi_scale):
    """Chains of the slice sweep (``docs/crm_slice.md``) with the count step replaced by
    ``n_columns`` collapsed column moves: slices, atoms revealed from the thinned tail, the moves,
    trailing atoms pruned, a sentinel revealed for the Γ moves and dropped. Returns ``K+`` per
    sweep, whether a sweep asked for more atoms than ``capacity`` and the moves' ``ColumnInfo``."""
    index = jnp.arange(1, capacity + 1, dtype=jnp.int32)
    gaussian = (None, jnp.zeros(1), jnp.ones(1))

    def reveal(key, gamma, start, stop):
        def body(j, carry):
            gamma, key = carry
            key, sub = random.split(key)
            previous = jnp.where(j > 0, gamma[jnp.maximum(j - 1, 0)], 0.0)
            return gamma.at[j].set(atoms.thin(sub, previous)[0]), key

        return lax.fori_loop(start, stop, body, (gamma, key))[0]

    def sweep(carry, key):
        x, gamma, num_atoms = carry
        k_u, k_reveal, k_move, k_sentinel, k_gamma = random.split(key, 5)
        e = random.exponential(k_u, (num_rows,))
        wanted = last_used(x) + jnp.floor(xi_scale * e).astype(jnp.int32)
        k_star = jnp.minimum(jnp.max(wanted), capacity)
        gamma = reveal(k_reveal, gamma, num_atoms, k_star)
        theta = jnp.where(
            index <= k_star, atoms.theta(jnp.where(index <= k_star, gamma, 1.0), 1.0), 0.0
        )
        traits = jnp.zeros((capacity, 1))
        x, _, _, info = collapsed_columns(
            k_move,
            x,
            jnp.zeros((num_rows, 0)),
            traits,
            theta,
            jnp.minimum(wanted, capacity),
            k_star,
            atoms=atoms,
            gaussian=gaussian,
            xi_scale=xi_scale,
            n_columns=n_columns,
        )
        num_atoms = jnp.max(last_used(x))
        sentinel = jnp.minimum(num_atoms + 1, capacity)
        gamma = reveal(k_sentinel, gamma, num_atoms, sentinel)
        totals = jnp.sum(x, axis=0).astype(gamma.dtype)
        gamma, _ = atoms.move_arrivals(k_gamma, gamma, jnp.ones(capacity), totals, sentinel)
        gamma = jnp.where(index <= num_atoms, gamma, 0.0)
        k_plus = jnp.sum(jnp.any(x > 0, axis=0))
        return (x, gamma, num_atoms), (k_plus, jnp.max(wanted) > capacity, info)

    def chain(key):
        init = (jnp.zeros((num_rows, capacity), jnp.int32), jnp.zeros(capacity), jnp.int32(0))
        return lax.scan(sweep, init, random.split(key, num_sweeps))[1]

    return jax.jit(jax.vmap(chain))(random.split(key, num_chains))


def harmonic(n):
    return float(np.sum(1.0 / np.arange(1, n + 1)))


def test_prior_only_moves_recover_the_expected_number_of_features():
    mass, num_rows = 1.5, 6
    atoms = atom_series(BetaProcess(mass), "bernoulli", num_rows)
    k_plus, saturated, info = prior_only_chains(
        random.PRNGKey(1), atoms, num_rows, 64, 4, 4000, 6, 3.0
    )
    assert not np.any(saturated)
    check_mean(np.asarray(k_plus)[:, 200:], mass * harmonic(num_rows))
    assert info.births.sum() > 1000 and info.deaths.sum() > 1000  # both directions move


# ---------------------------------------------------------------------------------------------
# in the kernel
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "collapsed_rows, capacity, num_samples", [(False, 64, 1500), (True, 48, 600)]
)
def test_kernel_prior_only_with_collapsed_moves(collapsed_rows, capacity, num_samples):
    # the exchange moves off: the counts move by the one-entry Gibbs step (or the collapsed row
    # moves, which cost O(C²) per row: a smaller buffer and fewer, less correlated draws) and
    # the column moves
    mass, num_rows = 1.5, 6
    kernel = CRMSlice(
        beta_bernoulli_linear_gaussian,
        xi_scale=3.0,
        max_features=capacity,
        n_swaps=0,
        n_collapsed=3,
        collapsed_rows=collapsed_rows,
    )
    mcmc = run_chains(kernel, 100, num_samples, 4, num_obs=num_rows, dim=1, mass=mass)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    assert not np.any(extra["saturated"])
    check_mean(extra["num_active"], mass * harmonic(num_rows))


def test_kernel_births_at_high_dimension():
    # 12 traits of scale 0.5 in D = 64 with noise 0.15 (digits' setting): a prior trait fits no
    # row (log-odds of a row switching on about -350, docs/crm_slice.md), so without the collapsed
    # column moves the chains find a few features in 100 sweeps; with them, every chain finds
    # about as many as the generator uses
    rng = np.random.default_rng(0)
    num_rows, dim, sigma_a, sigma_o = 100, 64, 0.5, 0.15
    used = rng.random((num_rows, 12)) < 0.3
    traits = sigma_a * rng.normal(size=(12, dim))
    y = (used @ traits + sigma_o * rng.normal(size=(num_rows, dim))).astype(np.float32)
    kwargs = dict(num_obs=num_rows, dim=dim, mass=3.0, sigma_a=sigma_a, sigma_o=sigma_o)
    with jax.enable_x64(False):
        mcmc = run_chains(CRMSlice(linear_gaussian, n_collapsed=1), 80, 20, 2, obs=y, **kwargs)
    k_plus = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_active"])
    assert np.all(k_plus[:, -1] >= 10), k_plus[:, -1]
