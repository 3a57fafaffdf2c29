"""Benchmark: NGGP EPPF evaluation and partition sampling, CRM series sampling.

Compares ``numpyro_bnp`` (JAX, jitted, float64) with a straightforward SciPy/NumPy
implementation written here: the EPPF via ``scipy.integrate.quad`` of the U-integral (spec
``nrm_adf_ep.md`` §2.2) and the urn as a Python loop calling that quadrature at every item.
Times exclude JAX compilation (one warm-up call). Prints a table of times and ratios.

Run: ``python benchmarks/bench_nggp.py [--quick]``
"""

import argparse
import time

import jax
import numpy as np
from jax import random
from scipy import integrate, optimize, special

jax.config.update("jax_enable_x64", True)

from numpyro_bnp.distributions import (  # noqa: E402
    NGGP,
    BetaProcess,
    GammaProcess,
    GeneralizedGammaProcess,
)

MASS, SIGMA, TAU = 2.0, 0.3, 1.0


# ------------------------------------------------------------------ SciPy / NumPy reference
def scipy_log_v(n, k, a=MASS, s=SIGMA, t=TAU):
    """log V_{n,k} by scipy.integrate.quad in x = log u around the mode (spec §2.2)."""

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


# ------------------------------------------------------------------ timing helpers
def timed(fun, repeat=1):
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        out = fun()
        jax.block_until_ready(out)
        best = min(best, time.perf_counter() - start)
    return best


def main(quick=False):
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    rows = []
    for n in sizes:
        d = NGGP(MASS, SIGMA, TAU, num_points=n)
        sample = jax.jit(lambda key, d=d: d.sample(key))
        log_prob = jax.jit(lambda z, d=d: d.log_prob(z))
        z = sample(random.PRNGKey(0))
        log_prob(z).block_until_ready()
        t_eppf = timed(lambda z=z, f=log_prob: f(z), 3)
        t_sample = timed(lambda f=sample: f(random.PRNGKey(1)))
        z_np = np.asarray(z)
        t_eppf_ref = timed(lambda z_np=z_np: scipy_log_eppf(z_np))
        assert abs(scipy_log_eppf(z_np) - float(log_prob(z))) < 1e-6 * abs(float(log_prob(z)))
        ref_n = min(n, 1_000)  # the Python-loop urn is timed on 1000 items and scaled
        t_ref = timed(lambda m=ref_n: numpy_urn(np.random.default_rng(0), m)) * n / ref_n
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
            draws(keys).block_until_ready()
            t = timed(lambda f=draws, keys=keys: f(keys), 3)
            ref = np.nan
            if name.startswith("gamma") and rep == "inverse_levy":
                ref = (
                    timed(
                        lambda: [
                            numpy_inverse_levy_gamma(np.random.default_rng(i), truncation)
                            for i in range(5)
                        ]
                    )
                    * 20
                )
            rows.append((f"series {name} {rep} (100 x {truncation})", truncation, t, ref))

    print(f"{'task':52s} {'n':>8s} {'numpyro_bnp [s]':>16s} {'SciPy/NumPy [s]':>16s} {'ratio':>8s}")
    for task, n, t, ref in rows:
        ratio = ref / t if np.isfinite(ref) else np.nan
        ref_s = f"{ref:16.4f}" if np.isfinite(ref) else f"{'-':>16s}"
        ratio_s = f"{ratio:8.1f}" if np.isfinite(ratio) else f"{'-':>8s}"
        print(f"{task:52s} {n:8d} {t:16.4f} {ref_s} {ratio_s}")
    print("SciPy urn times for n > 1000 are the 1000-item time scaled linearly (a lower bound).")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="n up to 1e4 only")
    main(parser.parse_args().quick)
