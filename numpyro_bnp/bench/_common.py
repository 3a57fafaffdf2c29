"""Timing, chain statistics and the table printer shared by the engine benchmarks."""

import time

import numpy as np

NUM_CHAINS = 4


def chain_stats(values, seconds):
    """``(mean, sd, ESS/s, R-hat)`` of a scalar ``(chains, draws)`` (ArviZ); ESS and R-hat are
    NaN when the value never changed (both undefined)."""
    from numpyro_bnp.arviz_compat import arviz

    k = np.asarray(values, np.float64)
    az = arviz()
    ess = float(az.ess(k)) if k.std() > 0 else float("nan")
    rhat = float(az.rhat(k)) if k.std() > 0 and k.shape[0] > 1 else float("nan")
    return k.mean(), k.std(), ess / seconds, rhat


def timed(run, repeats=2):
    """``run(seed)``, then ``repeats`` more times: ``(the last result, the fastest of the
    repeats' seconds, the first's seconds)``. The first (cold) run compiles; the others reuse
    the compiled programs, as a user's next run does (the fastest is the least disturbed by
    other work on a shared machine)."""
    import jax

    t0 = time.perf_counter()
    jax.block_until_ready(run(0))
    cold = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(run(1))
        best = min(best, time.perf_counter() - t0)
    return out, best, cold


def iteration_seconds(kernel, state, model_args, model_kwargs, reps=20, repeats=3):
    """Seconds per MCMC iteration of ``kernel`` from ``state``, compiled, ``reps`` iterations
    in one program (no compilation, no per-iteration dispatch): the fastest of ``repeats``
    calls after the first (the least disturbed by other work on a shared machine)."""
    import jax
    from jax import lax

    @jax.jit
    def many(state):
        def body(_, s):
            return kernel.sample(s, model_args, model_kwargs)

        return lax.fori_loop(0, reps, body, state)

    jax.block_until_ready(many(state))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(many(state))
        best = min(best, time.perf_counter() - t0)
    return best / reps


def run_mcmc(kernel, warmup, samples, chain_method, run, num_chains=NUM_CHAINS):
    """``(mcmc, wall seconds)`` of one MCMC run of ``num_chains`` chains."""
    from numpyro.infer import MCMC

    mcmc = MCMC(
        kernel,
        num_warmup=warmup,
        num_samples=samples,
        num_chains=num_chains,
        chain_method=chain_method,
        progress_bar=False,
    )
    t0 = time.perf_counter()
    run(mcmc)
    return mcmc, time.perf_counter() - t0


def print_table(title, rows, count="K", lp_format="10.3f"):
    """One table: a row per engine (``seconds``, ``cold``, ``lp``, ``K`` and, for samplers,
    ``K_sd``, ``ess_s``, ``rhat``; ``saturated`` marks a run that filled its capacity)."""
    print(f"\n== {title}", flush=True)
    print(
        f"{'engine':<34}{'s':>8}{'cold s':>8}{'held-out':>10}{count:>8}{'sd':>7}{'ESS/s':>9}"
        f"{'R-hat':>7}"
    )
    for label, r in rows.items():
        k_sd = f"{r['K_sd']:7.2f}" if "K_sd" in r else " " * 7
        ess = f"{r['ess_s']:9.2f}" if "ess_s" in r else " " * 9
        rhat = " " * 7 if "rhat" not in r else "    >99" if r["rhat"] > 99 else f"{r['rhat']:7.3f}"
        sat = "  SATURATED" if r.get("saturated") else ""
        print(
            f"{label:<34}{r['seconds']:8.2f}{r['cold']:8.1f}{r['lp']:{lp_format}}{r['K']:8.2f}"
            f"{k_sd}{ess}{rhat}{sat}",
            flush=True,
        )


def save_figure(fig, path):
    """Lay out ``fig``, save it at ``path`` (110 dpi), close it and say where it went."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"figure: {path}")
