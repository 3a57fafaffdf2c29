"""Demo: the collapsed Gibbs sampler of an NGGP mixture, its chains checked with ArviZ."""

import os

import numpy as np
from jax import random

from numpyro_bnp import datasets
from numpyro_bnp._report import Column, median_seconds, print_table

NAMES = ("num_clusters", "log_joint")  # label-invariant quantities the chains are checked on
RHAT_OK = 1.01  # below it (for every quantity) the chains are said to agree


def run(
    out_dir,
    *,
    num_chains=4,
    num_warmup=300,
    num_samples=700,
    mass=1.0,
    sigma=0.25,
    max_clusters=32,
    seed=0,
):
    """Sample the partition of the galaxies' velocities (in 1,000 km/s) under an NGGP mixture
    of Normals with Normal–Gamma priors (:func:`numpyro_bnp.models.nggp_diagonal_gaussian_mixture`,
    ``μ ~ N(mean, 1/(0.05 λ))``, ``λ ~ Gamma(2, 2)``) with ``NGGPMarginalGibbs``
    (``docs/nrm.md``): ``num_chains`` vectorized chains of ``num_warmup`` + ``num_samples``
    sweeps under ``numpyro.infer.MCMC``.

    The labels are not comparable across draws (label switching); the number of clusters and
    the log joint density are. Prints their posterior mean and standard deviation, each chain's
    mean, and ArviZ's bulk and tail effective sample sizes and R-hat. Saves the data with the
    posterior predictive density (:meth:`NGGPMarginalGibbs.log_predictive`), the chains' traces
    of the number of clusters and its posterior, and returns the figure's path in a list.
    ``mass`` and ``sigma`` are the NGGP's (``tau`` = 1; ``sigma=0``: the Dirichlet process),
    ``max_clusters`` the model's cluster slots.
    """
    from numpyro.infer import MCMC

    from numpyro_bnp import models
    from numpyro_bnp.arviz_compat import arviz, from_dict, group
    from numpyro_bnp.infer import NGGPMarginalGibbs
    from numpyro_bnp.plots import _pyplot

    x = (datasets.galaxies() / 1000.0)[:, None]
    kwargs = dict(
        num_obs=len(x),
        dim=1,
        mass=mass,
        sigma=sigma,
        tau=1.0,
        loc=float(x.mean()),
        kappa=0.05,
        concentration=2.0,
        rate=2.0,
        max_clusters=max_clusters,
    )
    kernel = NGGPMarginalGibbs(models.nggp_diagonal_gaussian_mixture)
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    seconds, _ = median_seconds(
        lambda: mcmc.run(random.PRNGKey(seed), x, extra_fields=NAMES, **kwargs)
    )
    # the label-invariant diagnostics as ArviZ data (diagnostics.from_mcmc(mcmc) exports the
    # whole run: the labels, the components' draws and every row's log-likelihood)
    fields = mcmc.get_extra_fields(group_by_chain=True)
    data = from_dict({"sample_stats": {k: np.asarray(fields[k]) for k in NAMES}})
    stats = group(data, "sample_stats")
    az = arviz()
    ess_bulk, ess_tail, rhat = az.ess(stats), az.ess(stats, method="tail"), az.rhat(stats)
    num_clusters = np.asarray(stats["num_clusters"])  # (chain, draw)

    print(
        f"galaxies: {len(x)} velocities; NGGP(mass={mass}, sigma={sigma}, tau=1) mixture of "
        f"Normals; {num_chains} chains x ({num_warmup} warm-up + {num_samples}) sweeps in "
        f"{seconds:.1f} s (compilation included)"
    )
    columns = (
        Column("", 14, align="<"), Column("mean", 7, ".2f"), Column("sd", 6, ".2f"),
        Column("chain means", 8 * num_chains), Column("ESS bulk", 8, ".0f"),
        Column("tail", 6, ".0f"), Column("R-hat", 6, ".3f"),
    )  # fmt: skip
    rows = []
    for name in NAMES:
        values = np.asarray(stats[name], dtype=float)
        chains = " ".join(f"{m:7.1f}" for m in values.mean(1))
        rows.append(
            (
                name, values.mean(), values.std(), chains, float(ess_bulk[name]),
                float(ess_tail[name]), float(rhat[name]),
            )
        )  # fmt: skip
    print_table(columns, rows)
    worst = max(float(rhat[name]) for name in NAMES)
    if not np.isfinite(worst):
        verdict = "R-hat is not finite (a quantity did not vary): run longer chains"
    elif worst < RHAT_OK:
        verdict = f"the chains agree (R-hat below {RHAT_OK})"
    else:
        verdict = f"the chains disagree (R-hat {worst:.3f} >= {RHAT_OK}): run longer chains"
    values, counts = np.unique(num_clusters, return_counts=True)
    print(
        f"Posterior mode of the number of clusters: {values[np.argmax(counts)]} "
        f"(P = {counts.max() / counts.sum():.2f}); {verdict}."
    )

    # the posterior predictive density: the average over draws of the exact predictive
    grid = np.linspace(5.0, 40.0, 200)[:, None]
    samples = mcmc.get_samples()
    thin = max(1, len(samples[next(iter(samples))]) // 200)
    density = np.exp(
        kernel.log_predictive({k: v[::thin] for k, v in samples.items()}, grid, x, **kwargs)
    )
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(11.0, 3.0), layout="constrained")
    axes[0].hist(x[:, 0], bins=30, density=True, color="0.8", label="data")
    axes[0].plot(grid[:, 0], density, label="posterior predictive")
    axes[0].set_xlabel("velocity (1,000 km/s)")
    axes[0].legend(fontsize=8)
    for c, chain in enumerate(num_clusters):
        axes[1].plot(chain, lw=0.6, alpha=0.8, label=f"chain {c}")
    axes[1].set_xlabel("sweep after warm-up")
    axes[1].set_ylabel("clusters")
    axes[1].set_title(f"R-hat {float(rhat['num_clusters']):.3f}", fontsize=9)
    axes[2].bar(values, counts / counts.sum(), color="C0")
    axes[2].set_xlabel("clusters")
    axes[2].set_ylabel("posterior probability")
    axes[2].set_title(f"ESS {float(ess_bulk['num_clusters']):.0f} (bulk)", fontsize=9)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "nggp_gibbs_galaxies.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]
