"""What the benchmark families share: MCMC timings and chain statistics, the engine table,
figures. Tables and timings themselves are :mod:`numpyro_bnp._report`'s, data sets
:mod:`numpyro_bnp.datasets`'s."""

import os
import time

import numpy as np

from numpyro_bnp._report import Column, median_seconds, print_table

NUM_CHAINS = 4


def ess_rhat(draws):
    """ArviZ's ``(ESS, R-hat)`` of a scalar ``(chains, draws)``; NaN when it never changed (both
    undefined), R-hat NaN for one chain."""
    from numpyro_bnp.arviz_compat import arviz

    draws = np.asarray(draws, np.float64)
    if not draws.std() > 0:
        return float("nan"), float("nan")
    rhat = float(arviz().rhat(draws)) if draws.shape[0] > 1 else float("nan")
    return float(arviz().ess(draws)), rhat


def chain_stats(values, seconds):
    """``(mean, sd, ESS per second, R-hat)`` of a scalar ``(chains, draws)`` run in ``seconds``."""
    k = np.asarray(values, np.float64)
    ess, rhat = ess_rhat(k)
    return k.mean(), k.std(), ess / seconds, rhat


def loop_seconds(step, state, reps=20, repeats=3):
    """``(seconds per step, compile seconds)`` of ``step`` (a state to the next) from ``state``:
    ``reps`` steps in one compiled program (no compilation, no per-step dispatch), the median of
    ``repeats`` calls after one that warms up; compile seconds: lowering and compiling it."""
    import jax
    from jax import lax

    many = jax.jit(lambda s: lax.fori_loop(0, reps, lambda _, t: step(t), s))
    t0 = time.perf_counter()
    compiled = many.lower(state).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(state))
    seconds, _ = median_seconds(lambda: compiled(state), repeats)
    return seconds / reps, compile_s


def iteration_seconds(kernel, state, model_args, model_kwargs, reps=20, repeats=3):
    """Seconds per MCMC iteration of ``kernel`` from ``state`` (:func:`loop_seconds`)."""
    step = lambda s: kernel.sample(s, model_args, model_kwargs)  # noqa: E731
    return loop_seconds(step, state, reps, repeats)[0]


def mcmc(kernel, warmup, samples, num_chains=1, chain_method="sequential"):
    """``numpyro.infer.MCMC`` of ``kernel``, ``num_chains`` chains of ``warmup`` + ``samples``
    iterations, without a progress bar."""
    from numpyro.infer import MCMC

    return MCMC(
        kernel,
        num_warmup=warmup,
        num_samples=samples,
        num_chains=num_chains,
        chain_method=chain_method,
        progress_bar=False,
    )


def run_mcmc(kernel, warmup, samples, chain_method, run, num_chains=NUM_CHAINS):
    """``(mcmc, wall seconds)`` of one MCMC run ``run(mcmc)`` of ``num_chains`` chains."""
    chains = mcmc(kernel, warmup, samples, num_chains, chain_method)
    seconds, _ = median_seconds(lambda: run(chains))
    return chains, seconds


def step_seconds(kernel, data, model_kwargs, warmup, reps, num_chains=1):
    """``(seconds per iteration, compile seconds)`` of ``kernel`` on ``data`` (:func:`loop_seconds`)
    from the state that ``warmup`` iterations of ``num_chains`` chains (vectorized when more than
    one) end in."""
    from jax import random

    chains = mcmc(kernel, warmup, 1, num_chains, "vectorized" if num_chains > 1 else "sequential")
    chains.run(random.PRNGKey(0), data, **model_kwargs)
    step = lambda s: kernel.sample(s, (data,), model_kwargs)  # noqa: E731
    return loop_seconds(step, chains.last_state, reps)


def vectorized_chains(kernel, data, model_kwargs, warmup, samples, count, reps=20):
    """``NUM_CHAINS`` vectorized chains of ``kernel`` on ``data`` from ``PRNGKey(0)``: ``(mcmc,
    extra fields (chains, draws), row)``, the row of :func:`print_engine_table` of the number
    ``count`` (an extra field of the kernel, as ``"saturated"``): ``seconds`` (the compiled
    iteration's time, :func:`iteration_seconds`, times the iterations), ``cold`` (the MCMC run,
    compilation included), ``K``, ``K_sd``, ``ess_s``, ``rhat`` and ``saturated``."""
    import jax
    from jax import random

    fields = (count, "saturated")

    def run(chains):
        chains.run(random.PRNGKey(0), data, extra_fields=fields, **model_kwargs)
        return chains.get_samples()

    chains, cold = run_mcmc(kernel, warmup, samples, "vectorized", run)
    per_iteration = iteration_seconds(kernel, chains.last_state, (data,), model_kwargs, reps)
    seconds = per_iteration * (warmup + samples)
    extra = jax.device_get(chains.get_extra_fields(group_by_chain=True))
    mean, sd, ess_s, rhat = chain_stats(extra[count], seconds)
    row = dict(seconds=seconds, cold=cold, K=mean, K_sd=sd, ess_s=ess_s, rhat=rhat)
    return chains, extra, dict(row, saturated=bool(np.any(extra["saturated"])))


def discrete_hmc_gibbs(model, obs, warmup, samples, seed=0):
    """``(draws, seconds)`` of one chain of NumPyro's ``DiscreteHMCGibbs(NUTS(model,
    max_tree_depth=6), modified=True)`` (Gibbs sweeps over the discrete sites, Liu's modified
    proposal) on ``obs``: the draws as NumPy arrays, the wall time with compilation."""
    import jax
    import jax.numpy as jnp
    from jax import random
    from numpyro.infer import NUTS, DiscreteHMCGibbs

    chain = mcmc(DiscreteHMCGibbs(NUTS(model, max_tree_depth=6), modified=True), warmup, samples)

    def run():
        chain.run(random.PRNGKey(seed), jnp.asarray(obs))
        return chain.get_samples()

    seconds, draws = median_seconds(run)
    return jax.tree.map(np.asarray, draws), seconds


def print_engine_table(title, rows, count="K", lp_spec=".3f"):
    """One table of the engines family: a row per engine (``seconds``, ``cold``, ``lp``, ``K``
    and, for samplers, ``K_sd``, ``ess_s``, ``rhat``; ``saturated`` marks a run that filled its
    capacity)."""
    print(f"\n== {title}", flush=True)
    columns = (
        Column("engine", 34, align="<"), Column("s", 8, ".2f", gap=""),
        Column("cold s", 8, ".1f", gap=""), Column("held-out", 10, lp_spec, gap=""),
        Column(count, 8, ".2f", gap=""), Column("sd", 7, ".2f", gap=""),
        Column("ESS/s", 9, ".2f", gap=""), Column("R-hat", 7, ".3f", gap=""),
        Column("", align="<", gap="  "),
    )  # fmt: skip
    lines = [
        (
            label, r["seconds"], r["cold"], r["lp"], r["K"], r.get("K_sd", ""), r.get("ess_s", ""),
            ">99" if r.get("rhat", 0) > 99 else r.get("rhat", ""),
            "SATURATED" if r.get("saturated") else "",
        )
        for label, r in rows.items()
    ]  # fmt: skip
    print_table(columns, lines)


def pyplot():
    """``matplotlib.pyplot`` on the file backend (figures are saved, never shown)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, dpi=110, tight=True):
    """Lay out ``fig`` (``tight``: ``tight_layout``; off for a constrained layout), save it at
    ``path`` (its folder made), close it and say where it went."""
    if tight:
        fig.tight_layout()
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    print(f"figure: {path}")
