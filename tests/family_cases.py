"""The conjugate families' test cases and their brute-force references, shared by the families'
tests: each builder draws its data from the generator it is given (tests seed it by their name).

References are computed independently of the library: batch formulas in NumPy (float64) for the
posteriors, NumPyro distributions for the densities (SciPy and NumPy for the Gaussian densities
of the Monte-Carlo checks).
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from scipy import stats

from numpyro_bnp import families as fam


def per_draw(fn):
    """``fn(θ, *args)`` of one draw as a compiled function of a batch of draws.

    Only for densities without matrix factorisations: two batched CPU LAPACK kernels in one
    program can deadlock jax 0.10 on two cores, so the Gaussian references use SciPy instead.
    The posterior's parameters stay constants of the closure (one compilation per posterior):
    XLA folds them, which compiles faster than one program shared with parameter arguments.
    """
    return lambda thetas, *args: np.asarray(jax.jit(jax.vmap(lambda th: fn(th, *args)))(thetas))


# The reference predictives, compiled once per case (and shared by the variants of
# ``normal_case``) rather than dispatched op by op for every cluster. Each program holds at most
# one (unbatched) LAPACK kernel: Cholesky factors are computed in NumPy.


@jax.jit
def dirichlet_multinomial_log_prob(x, conc):
    return dist.DirichletMultinomial(conc, total_count=x.sum(-1)).log_prob(x)


@jax.jit
def mvn_log_prob(x, loc, scale_tril):
    return dist.MultivariateNormal(loc, scale_tril=scale_tril).log_prob(x)


@jax.jit
def mvt_log_prob(x, df, loc, scale_tril):
    return dist.MultivariateStudentT(df, loc, scale_tril).log_prob(x)


@jax.jit
def student_t_log_prob(x, df, loc, scale):
    return dist.StudentT(df, loc, scale).log_prob(x).sum(-1)


@jax.jit
def gamma_poisson_log_prob(x, a, b):
    return dist.GammaPoisson(a, b).log_prob(x).sum(-1)


@jax.jit
def beta_bernoulli_log_prob(x, a, b):
    return dist.BetaBinomial(a, b, total_count=1).log_prob(x).sum(-1)


# ---------------------------------------------------------------- cases and brute-force references
# Each case: the family, N observations (dense, for the references, and as the family reads
# them), and ``posterior(w)``: for weights w, the brute-force posterior's log density of θ (of a
# batch of draws), of x given θ, the predictive log density, the mean of θ and the parameters.


def _spd(rng, dim, scale=1.0):
    a = rng.normal(size=(dim, dim))
    return scale * (a @ a.T / dim + np.eye(dim))


def dirichlet_case(rng):
    conc0 = np.array([0.5, 1.0, 1.5, 2.0, 0.7])
    dense = rng.poisson(1.2, size=(7, 5)) * (rng.uniform(size=(7, 5)) < 0.6)
    dense[0] = 0
    dense[0, 2] = 3  # one document with a single word

    def posterior(w):
        conc = conc0 + w @ dense
        return {
            "theta": per_draw(dist.Dirichlet(conc).log_prob),
            "lik": per_draw(lambda theta, x: dist.Multinomial(x.sum(), theta).log_prob(x)),
            "pred": lambda x: dirichlet_multinomial_log_prob(x, conc),
            "mean": conc / conc.sum(),
            "params": (conc, conc.sum()),
        }

    family = fam.DirichletMultinomial.from_prior(dist.Dirichlet(conc0))
    return family, dense, fam.sparse_counts(dense), posterior


def normal_case(rng, prior_full=True, noise_full=True, dim=3):
    m0 = rng.normal(size=dim)
    s0 = _spd(rng, dim, 2.0) if prior_full else np.diag(rng.uniform(0.5, 2.0, size=dim))
    cov = _spd(rng, dim, 0.5) if noise_full else np.diag(rng.uniform(0.3, 1.0, size=dim))
    dense = rng.normal(size=(6, dim)) * 2 + 1
    prior = (
        dist.MultivariateNormal(m0, s0)
        if prior_full
        else dist.Normal(m0, np.sqrt(np.diag(s0))).to_event(1)
    )
    noise = {"noise_covariance": cov} if noise_full else {"noise_scale": np.sqrt(np.diag(cov))}
    family = fam.NormalNormal.from_prior(prior, **noise)

    def posterior(w):
        prec = np.linalg.inv(s0) + w.sum() * np.linalg.inv(cov)
        post_cov = np.linalg.inv(prec)
        mean = post_cov @ (np.linalg.solve(s0, m0) + np.linalg.solve(cov, w @ dense))
        return {
            "theta": stats.multivariate_normal(mean, post_cov).logpdf,
            "lik": lambda theta, x: stats.multivariate_normal(x, cov).logpdf(theta),
            "pred": lambda x: mvn_log_prob(x, mean, np.linalg.cholesky(cov + post_cov)),
            "mean": mean,
        }

    return family, dense, jnp.asarray(dense), posterior


def _nw_batch(w, dense, m0, kappa0, nu0, psi0):
    """The batch Normal–Wishart posterior (Bishop 2006, Eqs. 10.60–10.63) from raw weighted
    moments (fine in float64)."""
    kappa, nu = kappa0 + w.sum(), nu0 + w.sum()
    loc = (kappa0 * m0 + w @ dense) / kappa
    scatter = np.einsum("n,ni,nj->ij", w, dense, dense)
    psi = psi0 + scatter + kappa0 * np.outer(m0, m0) - kappa * np.outer(loc, loc)
    return kappa, loc, nu, psi


def _mvn_precision_logpdf(x, loc, precision):
    """log N(x | loc, precision⁻¹) for a batch of precisions ``(S, D, D)`` (NumPy)."""
    diff = x - loc
    _, log_det = np.linalg.slogdet(precision)
    quad = np.einsum("...i,...ij,...j->...", diff, precision, diff)
    return 0.5 * (log_det - diff.shape[-1] * np.log(2 * np.pi) - quad)


def _nw_theta_log_prob(kappa, loc, nu, psi):
    def log_prob(theta):
        prec = np.asarray(theta.precision)
        wishart = stats.wishart(nu, np.linalg.inv(psi)).logpdf(np.moveaxis(prec, 0, -1))
        return wishart + _mvn_precision_logpdf(np.asarray(theta.loc), loc, kappa * prec)

    return log_prob


def normal_wishart_case(rng, dim=3):
    m0, kappa0, nu0, w0 = rng.normal(size=dim), 0.5, dim + 2.0, _spd(rng, dim, 0.5)
    dense = rng.normal(size=(8, dim)) @ _spd(rng, dim) + 2
    prior = dist.Wishart(nu0, scale_matrix=w0)
    family = fam.NormalWishart.from_prior(prior, loc=m0, kappa=kappa0)

    def posterior(w):
        kappa, loc, nu, psi = _nw_batch(w, dense, m0, kappa0, nu0, np.linalg.inv(w0))
        df = nu - dim + 1
        shape = (kappa + 1) / (kappa * df) * psi
        return {
            "theta": _nw_theta_log_prob(kappa, loc, nu, psi),
            "lik": lambda th, x: _mvn_precision_logpdf(
                x, np.asarray(th.loc), np.asarray(th.precision)
            ),
            "pred": lambda x: mvt_log_prob(x, df, loc, np.linalg.cholesky(shape)),
            "mean": fam.MeanPrecision(loc, nu * np.linalg.inv(psi)),
            "params": (kappa, loc, nu, psi),
        }

    return family, dense, jnp.asarray(dense), posterior


def normal_gamma_case(rng, dim=3):
    m0, kappa0 = rng.normal(size=dim), np.array([0.5, 1.0, 2.0])
    a0, b0 = np.array([1.5, 2.0, 3.0]), np.array([1.0, 0.5, 2.0])
    dense = rng.normal(size=(8, dim)) * np.array([1.0, 2.0, 0.5]) - 1
    prior = dist.Gamma(a0, b0).to_event(1)
    family = fam.NormalGamma.from_prior(prior, loc=m0, kappa=kappa0)

    def posterior(w):
        kappa, a = kappa0 + w.sum(), a0 + w.sum() / 2
        loc = (kappa0 * m0 + w @ dense) / kappa
        b = b0 + 0.5 * (w @ dense**2 + kappa0 * m0**2 - kappa * loc**2)

        def theta(th):
            lam = dist.Gamma(a, b).log_prob(th.precision)
            return (lam + dist.Normal(loc, (kappa * th.precision) ** -0.5).log_prob(th.loc)).sum()

        scale = np.sqrt(b * (kappa + 1) / (a * kappa))
        return {
            "theta": per_draw(theta),
            "lik": per_draw(
                lambda th, x: dist.Normal(th.loc, th.precision**-0.5).log_prob(x).sum()
            ),
            "pred": lambda x: student_t_log_prob(x, 2 * a, loc, scale),
            "mean": fam.MeanPrecision(loc, a / b),
            "params": (kappa, loc, a, b),
        }

    return family, dense, jnp.asarray(dense), posterior


def gamma_poisson_case(rng):
    a0, b0 = np.array([2.0, 0.5]), np.array([1.0, 3.0])
    dense = rng.poisson([3.0, 0.4], size=(9, 2))
    family = fam.GammaPoisson.from_prior(dist.Gamma(a0, b0).to_event(1))

    def posterior(w):
        a, b = a0 + w @ dense, b0 + w.sum()
        return {
            "theta": per_draw(lambda th: dist.Gamma(a, b).log_prob(th).sum()),
            "lik": per_draw(lambda th, x: dist.Poisson(th).log_prob(x).sum()),
            "pred": lambda x: gamma_poisson_log_prob(x, a, b),
            "mean": a / b,
            "params": (a, b),
        }

    return family, dense, jnp.asarray(dense), posterior


def beta_bernoulli_case(rng):
    a0, b0 = np.array([1.0, 0.5, 2.0, 3.0]), np.array([1.0, 2.0, 0.7, 1.0])
    dense = (rng.uniform(size=(9, 4)) < [0.2, 0.5, 0.7, 0.9]).astype(float)
    family = fam.BetaBernoulli.from_prior(dist.Beta(a0, b0).to_event(1))

    def posterior(w):
        a, b = a0 + w @ dense, b0 + w @ (1 - dense)
        return {
            "theta": per_draw(lambda th: dist.Beta(a, b).log_prob(th).sum()),
            "lik": per_draw(lambda th, x: dist.Bernoulli(probs=th).log_prob(x).sum()),
            "pred": lambda x: beta_bernoulli_log_prob(x, a, b),
            "mean": a / (a + b),
            "params": (a, b),
        }

    return family, dense, jnp.asarray(dense), posterior


CASES = {
    "dirichlet_multinomial": dirichlet_case,
    "normal_full": normal_case,
    "normal_wishart": normal_wishart_case,
    "normal_gamma": normal_gamma_case,
    "gamma_poisson": gamma_poisson_case,
    "beta_bernoulli": beta_bernoulli_case,
}
