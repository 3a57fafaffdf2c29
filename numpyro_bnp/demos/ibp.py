"""Demo: exact R-IBP marginals against simulation on the paper's (α, β) grid (Fig. 3)."""

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_bnp._report import Column, print_table
from numpyro_bnp.distributions import RecursiveIBP, ibp_capacity

ALPHAS = (1.1, 10.78, 15.37)
BETAS = (2.3, 5.6, 12.9)


def run(out_dir, *, num_rows=30, num_samples=5_000, chunk=500, seed=0):
    """Simulate the buffet process on the 3 x 3 grid and compare with ``marginals()``.

    Prints one line per (α, β): the exact and simulated number of dishes after ``num_rows``
    customers, the largest marginal error and the largest error in Monte-Carlo standard errors.
    Saves the side-by-side figure and returns its path in a list.
    """
    from numpyro_bnp.plots import plot_ibp_marginals

    start = time.perf_counter()
    alpha = jnp.repeat(jnp.array(ALPHAS), len(BETAS))
    beta = jnp.tile(jnp.array(BETAS), len(ALPHAS))
    capacity = ibp_capacity(alpha, beta, num_rows=num_rows, tail_prob=1e-6)
    ibp = RecursiveIBP(alpha, beta, num_rows=num_rows, max_features=capacity)

    @jax.jit
    def chunk_sums(key):
        z, (overflow,) = ibp.sample_with_intermediates(key, (chunk,))
        return z.sum(0), (z.sum(-2) > 0).sum(-1).sum(0), overflow.sum(0)

    totals, dishes, overflows = 0, 0, 0
    for key in random.split(random.PRNGKey(seed), num_samples // chunk):
        z_sum, num_dishes, overflow = chunk_sums(key)
        totals, dishes, overflows = totals + z_sum, dishes + num_dishes, overflows + overflow
    draws = chunk * (num_samples // chunk)
    estimate = np.asarray(totals) / draws
    exact = np.asarray(ibp.marginals())
    expected_dishes = np.asarray(ibp.expected_num_features()[:, -1])
    se = np.sqrt(np.maximum(exact * (1 - exact), 1.0 / draws) / draws)

    print(f"R-IBP exact marginals vs {draws} buffet-process draws, N = {num_rows} customers")
    errors = [np.abs(estimate[i] - exact[i]) for i in range(len(alpha))]
    print_table(
        (
            Column("alpha", 6, ".2f"), Column("beta", 6, ".2f"),
            Column("E[K_N]", 8, ".2f", gap=" | "), Column("MC", 8, ".2f"),
            Column("max|err|", 9, ".4f", gap=" | "), Column("max err/se", 10, ".2f"),
        ),
        [
            (
                float(alpha[i]), float(beta[i]), expected_dishes[i], float(dishes[i]) / draws,
                err.max(), (err / se[i]).max(),
            )
            for i, err in enumerate(errors)
        ],
    )  # fmt: skip
    if int(np.sum(overflows)):
        print(f"warning: {int(np.sum(overflows))} draws exceeded the capacity {capacity}")
    titles = [f"α={float(a):.2f}, β={float(b):.1f}" for a, b in zip(alpha, beta, strict=True)]
    fig = plot_ibp_marginals(exact, estimate, titles, pairs_per_row=len(BETAS))
    path = os.path.join(out_dir, "ibp_marginals.png")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    print(f"({time.perf_counter() - start:.1f} s)")
    return [path]
