"""Tempered replicas of CRMSlice against plain chains at the same wall time (docs/crm_slice.md).

    python benchmarks/bench_crm_tempering.py                       # N = 500, 120 s per setting
    python benchmarks/bench_crm_tempering.py --rows 1000 --seconds 240 --temperatures 4 8

The data are those of ``benchmarks/bench_crm_slice.py`` (truncated beta-Bernoulli
linear-Gaussian, σ = 0.2, σ_0 = 0.5, c = 1, K = 2⌈log N⌉ generator atoms; the true number of
features is the number of generator atoms some row uses). For each setting — no tempering, then
each ``--temperatures`` (an int: the default geometric ladder; ``a,b,c``: that ladder) — 4
vectorized chains of ``CRMSlice(models.linear_gaussian, temperatures=...)`` from different keys
run in blocks of ``--block`` sweeps until ``--seconds`` of sampling (compilation excluded: the
first block is not timed and not kept) have passed. Printed per setting: sweeps done, the R-hat of
the number of active features K over the 4 chains (second half of the kept sweeps, ArviZ), each
chain's median K over that half, how many chains sit at the true K (median), each chain's share
of draws at the true K, and the mean swap acceptance rate of each adjacent pair.
"""

import argparse
import time

import jax
import numpy as np
from bench_crm_slice import MASS, SIGMA, SIGMA0, synthetic
from jax import random
from numpyro.infer import MCMC

from numpyro_bnp.arviz_compat import arviz
from numpyro_bnp.infer import CRMSlice
from numpyro_bnp.models import linear_gaussian


def parse_temperatures(text):
    if text in ("none", "None"):
        return None
    if "," in text:
        return tuple(float(b) for b in text.split(","))
    return int(text)


def run(temperatures, data, kwargs, seconds, block, chains, seed):
    kernel = CRMSlice(linear_gaussian, temperatures=temperatures)
    fields = ("num_active",) + (() if temperatures is None else ("swap_rate",))
    mcmc = MCMC(
        kernel,
        num_warmup=0,
        num_samples=block,
        num_chains=chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(seed), data, extra_fields=fields, **kwargs)  # compiles; dropped
    jax.block_until_ready(mcmc.last_state)
    ks, rates, start, i = [], [], time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        i += 1
        mcmc.post_warmup_state = mcmc.last_state
        mcmc.run(random.PRNGKey(seed + i), data, extra_fields=fields, **kwargs)
        extra = mcmc.get_extra_fields(group_by_chain=True)
        ks.append(np.asarray(extra["num_active"]))
        if temperatures is not None:
            rates.append(np.asarray(extra["swap_rate"]))
    elapsed = time.perf_counter() - start
    k = np.concatenate(ks, 1)
    rate = np.concatenate(rates, 1).mean((0, 1)) if rates else None
    return kernel, k, rate, elapsed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperatures", nargs="+", default=["4"], type=str)
    args = parser.parse_args(argv)

    data, counts = synthetic(args.rows)
    true_k = int(counts.any(0).sum())
    kwargs = dict(num_obs=args.rows, dim=data.shape[1], mass=MASS, sigma_a=SIGMA0, sigma_o=SIGMA)
    print(f"N = {args.rows}, D = {data.shape[1]}, true K = {true_k}, {args.seconds:.0f} s each")
    header = f"{'temperatures':<28}{'sweeps':>8} {'R^ K':>8}  {'median K per chain':<20}{'at K':>5}"
    print(header + f"  {'share of draws at K':<26}swap rate per pair")
    for text in ["none", *args.temperatures]:
        temps = parse_temperatures(text)
        kernel, k, rate, elapsed = run(
            temps, data, kwargs, args.seconds, args.block, args.chains, args.seed
        )
        half = k[:, k.shape[1] // 2 :]
        if half.std() == 0:
            rhat = float("nan")  # no chain moved
        elif np.all(half.std(1) == 0):
            rhat = float("inf")  # every chain constant, not all at the same K
        else:
            rhat = float(arviz().rhat(half.astype(float)))
        medians = np.median(half, 1).astype(int)
        share = np.round(np.mean(half == true_k, 1), 2)  # each chain's share of draws at K
        ladder = kernel.temperature_ladder
        name = "none" if ladder is None else ",".join(f"{b:.3g}" for b in ladder)
        rates = "" if rate is None else " ".join(f"{r:.2f}" for r in rate)
        print(
            f"{name:<28}{k.shape[1]:>8} {rhat:>8.3f}  {medians.tolist()!s:<20}"
            f"{int(np.sum(medians == true_k)):>5}  {share.tolist()!s:<26}{rates}"
            f"   ({elapsed:.0f} s)"
        )


if __name__ == "__main__":
    main()
