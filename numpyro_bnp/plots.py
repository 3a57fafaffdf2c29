"""Figures for numpyro_bnp results (needs the ``plots`` extra: matplotlib).

Every function returns the matplotlib ``Figure`` it drew, so callers can save or show it.
"""

import numpy as np

__all__ = [
    "plot_cluster_sizes",
    "plot_feature_count",
    "plot_feature_grid",
    "plot_feature_sharing",
    "plot_forgetting",
    "plot_ibp_marginals",
    "plot_learning_curve",
]


def _pyplot():
    try:
        import matplotlib.pyplot as plt  # falls back to a file backend without a display
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "numpyro_bnp.plots needs matplotlib: pip install 'numpyro_bnp[plots]'"
        ) from err
    return plt


def _small_axes(ax):
    """``(figure, axes)``: ``ax`` and its figure, or a new 4.5 x 3 inch figure."""
    if ax is not None:
        return ax.figure, ax
    return _pyplot().subplots(figsize=(4.5, 3.0), layout="constrained")


def plot_ibp_marginals(exact, estimate, titles=None, *, pairs_per_row=1):
    """Monte-Carlo estimates next to exact IBP marginals (R-IBP paper, Fig. 3).

    :param exact: ``(P, N, K)`` or ``(N, K)`` exact marginals ``p(z_nk = 1)``, e.g.
        :meth:`RecursiveIBP.marginals` flattened over a batch of ``P`` parameter pairs.
    :param estimate: same shape, the Monte-Carlo estimate (mean of sampled matrices).
    :param titles: optional ``P`` strings naming each parameter pair.
    :param pairs_per_row: how many (Monte Carlo, exact) panel pairs to put side by side.
    :return: the figure; each pair shows the columns up to the last whose exact marginal
        exceeds 1e-3.
    """
    plt = _pyplot()
    exact, estimate = np.asarray(exact), np.asarray(estimate)
    if exact.shape != estimate.shape:
        raise ValueError(f"exact {exact.shape} and estimate {estimate.shape} must have one shape")
    if exact.ndim == 2:
        exact, estimate = exact[None], estimate[None]
    if exact.ndim != 3:
        raise ValueError(f"exact must have shape (P, N, K) or (N, K), got {exact.shape}")
    num_pairs = exact.shape[0]
    titles = list(titles) if titles is not None else [""] * num_pairs
    if len(titles) != num_pairs:
        raise ValueError(f"titles must have {num_pairs} entries, got {len(titles)}")
    num_panel_rows = -(-num_pairs // pairs_per_row)
    fig, axes = plt.subplots(
        num_panel_rows,
        2 * pairs_per_row,
        figsize=(4.6 * pairs_per_row, 0.6 + 2.0 * num_panel_rows),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for ax in axes.flat[2 * num_pairs :]:
        ax.set_visible(False)
    for i, (mc, ex, title) in enumerate(zip(estimate, exact, titles, strict=True)):
        used = np.nonzero((ex > 1e-3).any(axis=0))[0]
        width = int(used[-1]) + 1 if used.size else ex.shape[-1]
        for j, (values, name) in enumerate(((mc, "Monte Carlo"), (ex, "exact"))):
            ax = axes.flat[2 * i + j]
            image = ax.imshow(values[:, :width], aspect="auto", vmin=0.0, vmax=1.0)
            ax.set_title(f"{name}\n{title}".strip(), fontsize=8)
            ax.set_xlabel("feature k", fontsize=8)
            ax.tick_params(labelsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("observation n", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.6, label="p(z_nk = 1)")
    return fig


# ---------------------------------------------------------------------------- R-IBP filter
def plot_feature_count(time, num_features, *, truth=None, expected=None, ax=None):
    """Number of features against the number of observations of a stream.

    :param time: ``(T,)`` observation counts (``StreamingResult.time``).
    :param num_features: ``(T,)`` the filter's expected number of features
        (``result.traces["num_features"]``).
    :param truth: optional ``(T,)`` true number of features (synthetic data).
    :param expected: optional ``(T,)`` prior expectation ``E[Λ_n] = α H^β_n``.
    :return: the figure.
    """
    fig, ax = _small_axes(ax)
    ax.plot(time, num_features, label="R-IBP filter")
    if truth is not None:
        ax.plot(time, truth, "--", label="truth")
    if expected is not None:
        ax.plot(time, expected, ":", label="prior E[Λ_n]")
    ax.set_xscale("log")
    ax.set_xlabel("observations n")
    ax.set_ylabel("number of features")
    ax.legend(fontsize=8)
    return fig


def plot_learning_curve(curve, *, references=None, ax=None, label="this engine"):
    """Held-out score per row against the number of observations of a stream.

    :param curve: a :class:`~numpyro_bnp.infer.core.streaming.LearningCurve` (``time``, ``mean``,
        ``se``), drawn with ±2 standard errors.
    :param references: optional ``{label: value}``, a score per row to compare with (an
        oracle, a baseline): a float (a horizontal line) or a ``(T,)`` array over ``time``.
    :param str label: the curve's legend label.
    :return: the figure.
    """
    fig, ax = _small_axes(ax)
    time, mean, se = (np.asarray(v, float) for v in (curve.time, curve.mean, curve.se))
    ax.errorbar(time, mean, yerr=2 * se, marker="o", capsize=3, label=label)
    for name, value in (references or {}).items():
        value = np.asarray(value, float)
        if value.ndim == 0:
            ax.axhline(value, linestyle=":", color="gray", label=name)
        else:
            ax.plot(time, value, "--", label=name)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(_pyplot().NullFormatter())  # labels on the decades only
    ax.set_xlabel("observations n")
    ax.set_ylabel("held-out log predictive per row")
    ax.legend(fontsize=8)
    return fig


def plot_feature_grid(means, image_shape, *, probs=None, max_features=64, ncols=8):
    """Learned features shown as images (one panel per feature, most used first).

    :param means: ``(K, D)`` feature means with ``D = prod(image_shape)``.
    :param image_shape: ``(height, width)``.
    :param probs: optional ``(K,)`` usage probabilities used to order and label the panels.
    :return: the figure.
    """
    plt = _pyplot()
    means = np.asarray(means)
    order = np.argsort(-np.asarray(probs)) if probs is not None else np.arange(len(means))
    order = order[:max_features]
    nrows = max(1, -(-len(order) // ncols))
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(1.2 * ncols, 1.3 * nrows), squeeze=False, layout="constrained"
    )
    for ax in axes.flat:
        ax.axis("off")
    for ax, k in zip(axes.flat, order, strict=False):
        image = means[k].reshape(image_shape)
        scale = np.abs(image).max() or 1.0
        ax.imshow(image, cmap="RdBu_r", vmin=-scale, vmax=scale)
        if probs is not None:
            ax.set_title(f"p={probs[k]:.2f}", fontsize=7)
    return fig


def plot_feature_sharing(sharing, labels, *, vmin=None, vmax=None):
    """Heat map of the fraction of features two classes share (R-IBP paper, Fig. 7).

    :param sharing: ``(C, C)`` symmetric matrix in ``[0, 1]``.
    :param labels: ``C`` class names.
    :param vmin, vmax: colour range; by default the range of ``sharing`` (differences between
        classes are often a few hundredths).
    :return: the figure.
    """
    plt = _pyplot()
    sharing = np.asarray(sharing)
    vmin = float(sharing.min()) if vmin is None else vmin
    vmax = float(sharing.max()) if vmax is None else vmax
    fig, ax = plt.subplots(figsize=(4.2, 3.6), layout="constrained")
    image = ax.imshow(sharing, vmin=vmin, vmax=vmax, cmap="viridis")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(labels)), labels)
    middle = 0.5 * (vmin + vmax)
    for i in range(len(labels)):
        for j in range(len(labels)):
            ax.text(
                j,
                i,
                f"{sharing[i, j]:.2f}",
                ha="center",
                va="center",
                fontsize=6,
                color="w" if sharing[i, j] < middle else "k",
            )
    fig.colorbar(image, ax=ax, label="fraction of features shared")
    return fig


def plot_cluster_sizes(results, *, axes=None):
    """Mixture results side by side: cluster sizes by rank, and clusters over the stream.

    :param results: ``{label: result}`` of :class:`~numpyro_bnp.infer.NRMResult` (ADF-NRM or
        EP-NRM), e.g. ``{"DP": dp, "NGGP σ = ½": ig}``.
    :param axes: optional two matplotlib axes (sizes, clusters over time).
    :return: the figure. Left: the soft counts ``E[n_k]`` in decreasing order on log-log
        axes (a power law, the NGGP's signature, is a straight line; the DP's sizes fall off
        exponentially). Right: ``E[K_n]`` against the observations ``n``.
    """
    plt = _pyplot()
    if not isinstance(results, dict) or not results:
        raise TypeError("results must be a non-empty dict {label: NRMResult}")
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.0), layout="constrained")
    else:
        fig = axes[0].figure
    for label, result in results.items():
        sizes = np.sort(np.asarray(result.cluster_sizes))[::-1]
        axes[0].loglog(np.arange(1, len(sizes) + 1), sizes, ".-", label=label)
        axes[1].plot(result.time, result.traces["num_clusters"], label=label)
    axes[0].set_xlabel("cluster rank")
    axes[0].set_ylabel("soft count E[n_k]")
    axes[1].set_xlabel("observations n")
    axes[1].set_ylabel("clusters E[K_n]")
    axes[0].legend(fontsize=8)
    return fig


def plot_forgetting(results, *, axes=None, changes=None):
    """Drift detection: ``E[ρ_t]`` of power-prior streams over their batches, with their
    numbers of clusters.

    :param results: ``{label: result}`` of :class:`~numpyro_bnp.infer.PowerPriorResult`, e.g.
        ``{"HPP": hpp, "MHPP": mhpp}``.
    :param axes: optional two matplotlib axes (E[ρ], clusters).
    :param changes: optional batch numbers where the stream is known to change (dotted lines).
    :return: the figure. Top: ``E[ρ_t]`` (HPP: one line; MHPP: the mean over the components,
        each component's value a dot; a component that holds no data stays near the prior's
        mean): a drop marks a change, where the stream forgets its past. Bottom: the clusters
        of predictive weight above 1 %.
    """
    plt = _pyplot()
    if not isinstance(results, dict) or not results:
        raise TypeError("results must be a non-empty dict {label: PowerPriorResult}")
    if axes is None:
        fig, axes = plt.subplots(2, 1, figsize=(6.0, 4.0), sharex=True, layout="constrained")
    else:
        fig = axes[0].figure
    for label, result in results.items():
        rho = np.asarray(result.expected_rho)
        (line,) = axes[0].plot(result.time, rho.mean(axis=1), ".-", label=label)
        if np.ptp(rho, axis=1).max() > 1e-6:  # one ρ per component (MHPP)
            times = np.repeat(result.time, rho.shape[1])
            axes[0].plot(times, rho.ravel(), ".", color=line.get_color(), alpha=0.3, ms=3)
        axes[1].plot(result.time, result.traces["num_clusters"], ".-", label=label)
    for t in changes or ():
        for ax in axes:
            ax.axvline(t, color="0.6", ls=":", lw=1)
    axes[0].set_ylim(-0.03, 1.03)
    axes[0].set_ylabel("E[ρ_t]")
    axes[1].set_ylabel("clusters")
    axes[1].set_xlabel("batch t")
    axes[0].legend(fontsize=8)
    return fig
