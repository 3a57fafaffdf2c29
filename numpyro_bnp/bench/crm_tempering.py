"""Tempered replicas of CRMSlice against plain chains at the same wall time (docs/crm_slice.md).

The data are those of the scaling run (:func:`numpyro_bnp.bench.crm_slice_scaling.synthetic`:
truncated beta-Bernoulli linear-Gaussian, σ = 0.2, σ_0 = 0.5, c = 1, K = 2⌈log N⌉ generator
atoms; the true number of features is the number of generator atoms some row uses). For each
setting — no tempering, then each ``--temperatures`` (an int: the default geometric ladder;
``a,b,c``: that ladder) — ``--chains`` vectorized chains of ``CRMSlice(models.linear_gaussian,
temperatures=...)`` from different keys run in blocks of ``--block`` sweeps until ``--seconds``
of sampling (compilation excluded: the first block is not timed and not kept) have passed.
Printed per setting: sweeps done, the R-hat of the number of active features K over the chains
(second half of the kept sweeps, ArviZ), each chain's median K over that half, how many chains
sit at the true K (median), each chain's share of draws at the true K, and the mean swap
acceptance rate of each adjacent pair.
"""

import time

import jax
import numpy as np
from jax import random

from numpyro_bnp._report import Column, Table
from numpyro_bnp.arviz_compat import arviz
from numpyro_bnp.bench import _common
from numpyro_bnp.bench.crm_slice_scaling import MASS, SIGMA, SIGMA0, synthetic
from numpyro_bnp.models import linear_gaussian


def parse_temperatures(text):
    """``None`` for ``"none"``, a ladder for ``"a,b,c"``, else the number of replicas."""
    if text in ("none", "None"):
        return None
    if "," in text:
        return tuple(float(b) for b in text.split(","))
    return int(text)


def run_setting(temperatures, data, kwargs, seconds, block, chains, seed):
    """``(kernel, K (chains, sweeps), mean swap rate per pair or None, seconds)`` of one
    setting."""
    from numpyro_bnp.infer import CRMSlice

    kernel = CRMSlice(linear_gaussian, temperatures=temperatures)
    fields = ("num_active",) + (() if temperatures is None else ("swap_rate",))
    mcmc = _common.mcmc(kernel, 0, block, chains, "vectorized")
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


def tempering(rows, seconds, block, chains, seed, temperatures):
    """The comparison (module docstring) at ``rows`` rows, ``seconds`` of sampling a setting."""
    data, counts = synthetic(rows)
    true_k = int(counts.any(0).sum())
    kwargs = dict(num_obs=rows, dim=data.shape[1], mass=MASS, sigma_a=SIGMA0, sigma_o=SIGMA)
    print(f"N = {rows}, D = {data.shape[1]}, true K = {true_k}, {seconds:.0f} s each")
    columns = (
        Column("temperatures", 28, align="<"), Column("sweeps", 8, gap=""),
        Column("R^ K", 8, ".3f"), Column("median K per chain", 20, align="<", gap="  "),
        Column("at K", 5, gap=""), Column("share of draws at K", 26, align="<", gap="  "),
        Column("swap rate per pair", 18, align="<", gap=""), Column("", align="<", gap="   "),
    )  # fmt: skip
    table = Table(columns)
    table.header()
    for text in ["none", *temperatures]:
        kernel, k, rate, elapsed = run_setting(
            parse_temperatures(text), data, kwargs, seconds, block, chains, seed
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
        table.row(
            name, k.shape[1], rhat, str(medians.tolist()), int(np.sum(medians == true_k)),
            str(share.tolist()), rates, f"({elapsed:.0f} s)",
        )  # fmt: skip
