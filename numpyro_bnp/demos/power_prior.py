"""Demo: a drifting stream. Power-prior streaming VB learns how much of the past to forget."""

import os
import time

import numpy as np
from jax import random

from numpyro_bnp._report import Column, print_table

CENTRES = np.array([[-5.0, 0.0], [5.0, 0.0], [0.0, 6.0]])
MOVED_TO = np.array([0.0, 3.5])  # where the third cluster goes at the change
SCALE = 0.6  # the clusters' standard deviation


def stream(num_batches, batch_size, change, seed):
    """``(train, test)`` lists of batches ``(batch_size, 2)``: three 2-D Gaussian clusters,
    the third at ``MOVED_TO`` instead of ``CENTRES[2]`` from batch ``change`` on (1-based)."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for t in range(1, num_batches + 1):
        centres = CENTRES.copy()
        if t >= change:
            centres[2] = MOVED_TO
        for out in (train, test):
            z = rng.integers(len(centres), size=batch_size)
            out.append(centres[z] + SCALE * rng.normal(size=(batch_size, 2)))
    return train, test


def run(out_dir, *, num_batches=6, batch_size=200, change=4, gamma=0.1, seed=0):
    """Stream ``num_batches`` batches of ``batch_size`` points through ``PowerPriorSVB`` on a
    Dirichlet-process mixture of Gaussians (:func:`numpyro_bnp.models.dp_mixture`,
    ``docs/power_prior.md``), with the forgetting learned per batch and component
    (``forgetting="mhpp"``, ``gamma`` the natural parameter of the prior of ρ).

    Three clusters; from batch ``change`` on the third sits 2.5 lower (about 4 standard
    deviations). Prints, per batch, the learned ``E[ρ_k]`` of the components the batch uses,
    the clusters, and the held-out log density per point of fresh points of the batch's
    distribution under the model before and after the batch is absorbed. Saves the
    forgetting plot (:func:`numpyro_bnp.plots.plot_forgetting`) and the data just before and
    at the change coloured by component, and returns both paths.
    """
    from numpyro_bnp.infer import PowerPriorInfo, PowerPriorResult, PowerPriorSVB
    from numpyro_bnp.models import dp_mixture
    from numpyro_bnp.plots import _pyplot, plot_forgetting

    if not 2 <= change <= num_batches:
        raise ValueError(f"change must be a batch number in [2, {num_batches}], got {change}")
    train, test = stream(num_batches, batch_size, change, seed)
    kwargs = dict(dim=2, mass=1.0, truncation=6, components="gaussian", kappa=0.1)
    start = time.perf_counter()
    engine = PowerPriorSVB(dp_mixture, forgetting="mhpp", gamma=gamma)
    state = engine.init(random.PRNGKey(seed), **kwargs)
    infos, counts, before, after, kept = [], [], [], [], {}
    for t in range(num_batches):
        # the model of the batches so far on this batch's held-out points, then after it
        before.append(engine.log_predictive(state, test[t]).mean() if t else np.nan)
        state, info = engine.update(state, train[t])
        infos.append(info)
        counts.append(np.asarray(state.counts))  # the batch's expected counts E[N_k]
        after.append(engine.log_predictive(state, test[t]).mean())
        if t + 1 in (change - 1, change):
            kept[t + 1] = state
    seconds = time.perf_counter() - start
    traces = {
        k: np.stack([np.asarray(getattr(i, k)) for i in infos]) for k in PowerPriorInfo._fields
    }
    result = PowerPriorResult(engine, state, traces, np.arange(1, num_batches + 1))
    counts = np.stack(counts)
    used = counts >= 0.01 * counts.sum(1, keepdims=True)  # components holding >= 1 % of it
    rho = result.expected_rho

    shift = np.linalg.norm(MOVED_TO - CENTRES[2])
    print(
        f"MHPP: {num_batches} batches of {batch_size} points, 3 clusters in 2-D; from batch "
        f"{change} on the third sits {shift:.1f} lower ({shift / SCALE:.0f} standard deviations)"
    )
    print_table(
        (
            Column("batch", 6), Column("E[ρ_k] of used components", 26), Column("clusters", 8),
            Column("held-out before", 15, ".2f"), Column("after", 6, ".2f"),
        ),
        [
            (
                f"{t + 1}{'*' if t + 1 == change else ' '}",
                " ".join(f"{r:.2f}" for r in rho[t][used[t]]), int(traces["num_clusters"][t]),
                before[t], after[t],
            )
            for t in range(num_batches)
        ],
    )  # fmt: skip
    at = rho[change - 1][used[change - 1]]
    rest = np.concatenate([rho[t][used[t]] for t in range(1, num_batches) if t != change - 1])
    forgot = int((at < 0.5).sum())
    print(
        f"At the change MHPP forgets {forgot} of the {at.size} components in use (E[ρ_k] < 0.5) "
        f"and keeps the others ({', '.join(f'{r:.2f}' for r in at[at >= 0.5])}); "
        + (
            f"on the other batches after the first every component in use keeps its past "
            f"(E[ρ_k] {rest.min():.2f}–{rest.max():.2f}). "
            if rest.size and rest.min() >= 0.5
            else f"on the other batches after the first E[ρ_k] spans "
            f"{rest.min():.2f}–{rest.max():.2f}. "
            if rest.size
            else ""
        )
        + f"Held-out: log density per point of fresh points of the batch under the model before "
        f"and after absorbing it ({seconds:.1f} s, compilation included)."
    )

    os.makedirs(out_dir, exist_ok=True)
    paths = [
        os.path.join(out_dir, "power_prior_forgetting.png"),
        os.path.join(out_dir, "power_prior_stream.png"),
    ]
    plt = _pyplot()
    fig = plot_forgetting({"MHPP, mean of all components": result}, changes=[change])
    for k in np.flatnonzero(used.any(0)):  # each component the stream used, as a line
        fig.axes[0].plot(result.time, rho[:, k], lw=1, alpha=0.8, label=f"component {k}")
    fig.axes[0].legend(fontsize=7, ncols=2)
    fig.savefig(paths[0], dpi=100)
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.6), sharex=True, sharey=True)
    for ax, t in zip(axes, (change - 1, change), strict=True):
        x = train[t - 1]
        colours = engine.predict(kept[t], x)
        ax.scatter(x[:, 0], x[:, 1], c=colours, cmap="tab10", vmin=0, vmax=9, s=6)
        weights = ", ".join(f"{k}: {r:.2f}" for k, r in enumerate(rho[t - 1]) if used[t - 1][k])
        title = f"batch {t}{' (the change)' if t == change else ''}"
        ax.set_title(f"{title}\nE[ρ_k] of components {weights}", fontsize=8)
    axes[0].set_ylabel("colour: the point's component")
    fig.tight_layout()
    fig.savefig(paths[1], dpi=100)
    plt.close(fig)
    return paths
