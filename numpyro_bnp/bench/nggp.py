"""The NGGP prior's EPPF and partition sampling and the CRM series against SciPy/NumPy.

``numpyro_bnp`` (JAX, jitted, float64) against a straightforward SciPy/NumPy implementation
written here: the EPPF via ``scipy.integrate.quad`` of the U-integral (docs/nrm.md; James,
Lijoi & Prünster 2009) and the urn as a Python loop calling that quadrature at every item; the
gamma process's inverse-Lévy atoms by SciPy root finding. Times exclude JAX compilation (the
first call, :func:`numpyro_bnp._report.timed`); a table of times and ratios.
"""

import jax
import numpy as np
from jax import random
from scipy import integrate, optimize, special

from numpyro_bnp._report import Column, median_seconds, print_table, timed

MASS, SIGMA, TAU = 2.0, 0.3, 1.0


def scipy_log_v(n, k, a=MASS, s=SIGMA, t=TAU):
    """log V_{n,k} of the NGGP(a, σ, τ) by scipy.integrate.quad in x = log u around the mode of
    the integrand of the U-integral (James, Lijoi & Prünster 2009)."""

    def g(x):
        return (
            n * x
            + (k * s - n) * np.logaddexp(x, np.log(t))
            - a / s * t**s * np.expm1(s * np.log1p(np.exp(x) / t))
        )

    mode = optimize.minimize_scalar(
        lambda x: -g(x), bounds=(-50, 50), method="bounded", options={"xatol": 1e-10}
    ).x
    gm = g(mode)
    value, _ = integrate.quad(
        lambda x: np.exp(g(x) - gm), mode - 60, mode + 60, points=[mode], limit=400
    )
    return k * np.log(a) - special.gammaln(n) + gm + np.log(value)


def scipy_log_eppf(labels):
    """log EPPF of ``labels`` ``(n,)``: log V_{n,K} + Σ_k log((1 − σ)_{n_k − 1})."""
    sizes = np.bincount(labels)
    sizes = sizes[sizes > 0]
    factors = special.gammaln(sizes - SIGMA) - special.gammaln(1 - SIGMA)
    return scipy_log_v(len(labels), len(sizes)) + factors.sum()


def numpy_urn(rng, n):
    """The exact urn with a Python loop: p(new) = V_{i+1,K+1} / V_{i,K} by quadrature."""
    labels = np.zeros(n, dtype=np.int64)
    sizes = [1]
    for i in range(1, n):
        k = len(sizes)
        log_old = np.log(i - k * SIGMA) + scipy_log_v(i + 1, k)
        log_new = scipy_log_v(i + 1, k + 1)
        p_new = 1.0 / (1.0 + np.exp(log_old - log_new))
        if rng.random() < p_new:
            labels[i] = k
            sizes.append(1)
        else:
            w = np.array(sizes, dtype=float) - SIGMA
            c = rng.choice(k, p=w / w.sum())
            labels[i] = c
            sizes[c] += 1
    return labels


def numpy_inverse_levy_gamma(rng, truncation, mass=2.0, rate=1.0):
    """Gamma-process inverse-Lévy atoms by scipy root finding on N(x) = mass E1(rate x)."""
    from scipy.optimize import brentq

    gammas = np.cumsum(rng.exponential(size=truncation))
    return np.array(
        [brentq(lambda x, g=g: mass * special.exp1(rate * x) - g, 1e-300, 1e3) for g in gammas]
    )


def bench_nggp(quick=False):
    """The table: n up to 10^5 (10^4 with ``quick``), the series at truncation 200."""
    from numpyro_bnp.distributions import NGGP, BetaProcess, GammaProcess, GeneralizedGammaProcess

    jax.config.update("jax_enable_x64", True)
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    rows = []
    for n in sizes:
        d = NGGP(MASS, SIGMA, TAU, num_points=n)
        sample = jax.jit(lambda key, d=d: d.sample(key))
        log_prob = jax.jit(lambda z, d=d: d.log_prob(z))
        z = sample(random.PRNGKey(0))  # compiles the sampler
        t_eppf = timed(lambda _, z=z, f=log_prob: f(z)).seconds
        t_sample = median_seconds(lambda f=sample: f(random.PRNGKey(1)))[0]
        z_np = np.asarray(z)
        t_eppf_ref = median_seconds(lambda z_np=z_np: scipy_log_eppf(z_np))[0]
        assert abs(scipy_log_eppf(z_np) - float(log_prob(z))) < 1e-6 * abs(float(log_prob(z)))
        ref_n = min(n, 1_000)  # the Python-loop urn is timed on 1000 items and scaled
        urn = median_seconds(lambda m=ref_n: numpy_urn(np.random.default_rng(0), m))[0]
        t_ref = urn * n / ref_n
        rows.append(("EPPF log_prob", n, t_eppf, t_eppf_ref))
        rows.append(("partition sample", n, t_sample, t_ref))
    truncation = 200
    for name, process, reps in [
        (
            "beta(2, 2.5)",
            BetaProcess(2.0, 2.5, truncation=truncation),
            ["inverse_levy", "bondesson", "rejection"],
        ),
        (
            "gamma(2, 1)",
            GammaProcess(2.0, 1.0, truncation=truncation),
            ["inverse_levy", "bondesson", "rejection"],
        ),
        (
            "GGP(2, .5, 1)",
            GeneralizedGammaProcess(2.0, 0.5, 1.0, truncation=truncation),
            ["inverse_levy", "rejection"],
        ),
    ]:
        for rep in reps:
            draws = jax.jit(jax.vmap(lambda k, p=process, r=rep: p.series(k, truncation, r)))
            keys = random.split(random.PRNGKey(0), 100)
            t = timed(lambda _, f=draws, keys=keys: f(keys)).seconds
            ref = None
            if name.startswith("gamma") and rep == "inverse_levy":  # 5 draws, scaled to 100
                ref = (
                    20
                    * median_seconds(
                        lambda: [
                            numpy_inverse_levy_gamma(np.random.default_rng(i), truncation)
                            for i in range(5)
                        ]
                    )[0]
                )
            rows.append((f"series {name} {rep} (100 x {truncation})", truncation, t, ref))
    columns = (
        Column("task", 52, align="<"), Column("n", 8, "d"), Column("numpyro_bnp [s]", 16, ".4f"),
        Column("SciPy/NumPy [s]", 16, ".4f"), Column("ratio", 8, ".1f"),
    )  # fmt: skip
    print_table(columns, [(*row, None if row[3] is None else row[3] / row[2]) for row in rows])
    print("SciPy urn times for n > 1000 are the 1000-item time scaled linearly (a lower bound).")
