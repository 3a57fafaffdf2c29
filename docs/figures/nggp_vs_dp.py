"""Figure: cluster-size distribution of the DP and the NGGP at matched E[K_n].

Draws partitions of n = 300 items from NGGP(a=1, σ=0.5, τ=1) and from the Dirichlet process
whose concentration gives the same exact E[K_n]; plots the mean number of clusters of each size.
Writes ``docs/figures/nggp_vs_dp.png``. Run from the project root:
``python docs/figures/nggp_vs_dp.py``.
"""

import pathlib

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from jax import random
from scipy import optimize

jax.config.update("jax_enable_x64", True)

from numpyro_bnp.distributions import NGGP, cluster_sizes  # noqa: E402

N, DRAWS = 300, 1000


def main():
    nggp = NGGP(1.0, 0.5, 1.0, num_points=N)
    target = float(nggp.expected_num_clusters()[-1])
    # DP: E[K_n] = Σ_i a / (a + i - 1)
    dp_mass = optimize.brentq(lambda a: np.sum(a / (a + np.arange(N))) - target, 1e-3, 1e3)
    dp = NGGP(dp_mass, 0.0, 1.0, num_points=N)
    sizes = np.arange(1, N + 1)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, d, key in [
        (f"DP(a={dp_mass:.2f})", dp, 0),
        ("NGGP(a=1, σ=0.5, τ=1)", nggp, 1),
    ]:
        z = d.sample(random.PRNGKey(key), (DRAWS,))
        counts = np.asarray(cluster_sizes(z))
        mean_m = np.stack([(counts == j).sum(-1) for j in sizes[:60]], -1).mean(0)
        ax.loglog(sizes[:60], mean_m, "o-", ms=3, label=label)
    ax.set_xlabel("cluster size j")
    ax.set_ylabel("E[number of clusters of size j]")
    ax.set_title(f"n = {N}, matched E[K_n] = {target:.2f}")
    ax.legend()
    fig.tight_layout()
    out = pathlib.Path(__file__).with_suffix(".png")
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
