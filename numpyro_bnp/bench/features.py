"""The feature family: one linear-Gaussian feature model under every engine that runs it.

The model is :func:`numpyro_bnp.models.linear_gaussian` (``Z ~ IBP(α, 1)``, ``A_k ~ N(0,
σ_A² I)``, ``o_n ~ N(z_n A, σ_o² I)``) on scikit-learn's 8 x 8 digits, pixels / 16 (``D = 64``),
shuffled with a fixed seed: the first rows are fitted, the last ones held out. Engines:

* ``RIBPFilter(feature_update="memoized")``: one streaming pass (Schaeffer et al. 2022, with the
  library's memoized update, ``docs/ribp.md``);
* ``RIBPFilter.refine``: batch mean-field passes over the training rows from no features (after a
  pass of the filter's paper update, whose state it refines; its seconds are the passes');
* ``CRMSlice`` (Zhu, Bouchard-Côté & Campbell 2020) and ``AcceleratedIBPGibbs`` (Doshi-Velez &
  Ghahramani 2009), our MCMC kernels, four vectorized chains each;
* NumPyro's ``DiscreteHMCGibbs(NUTS)`` on the model's truncated twin
  (:func:`numpyro_bnp.infer.truncated_twin`: ``π_k ~ Beta(αβ/T, β − αβ/T)``,
  ``Z_nk ~ Bernoulli(π_k)``, the same features and noise), chains one after another.

Every engine is scored by the same held-out estimator,
:meth:`numpyro_bnp.infer.RIBPFilter.log_predictive` (importance sampling over a new row's
features, with a proposal fitted to the row): the filter's on its own state; a sampler's draw
becomes a filter state that holds the draw's used features exactly (variance 0) with their
counts ``m_k`` (so a new row takes feature ``k`` with probability ``m_k / (1 + N)`` and new
features from the prior, the IBP's next row), and the score is the log of the mean over draws
of that predictive. The number of features is the filter's active slots and the samplers'
features in use (posterior mean and sd); ESS/s and R-hat are those of that number (ArviZ), the
seconds of a sampler those of its compiled iteration times the iterations of all its chains
(the MCMC run with compilation in the "cold" column).
"""

import warnings

import numpy as np

from numpyro_bnp import datasets
from numpyro_bnp._report import timed
from numpyro_bnp.bench._common import (
    NUM_CHAINS,
    chain_stats,
    iteration_seconds,
    print_engine_table,
    pyplot,
    run_mcmc,
    save_figure,
    vectorized_chains,
)

MASS, SIGMA_A, SIGMA_O = 3.0, 0.3, 0.2
NEW_SLOTS = 16  # unborn slots of the scoring state: the room for a new row's new features


def digits_pixels(num_train, num_test, seed=0):
    """``(train, test)``: scikit-learn's digits, pixels / 16, shuffled, the first ``num_train``
    fitted and the last ``num_test`` held out; float32 ``(., 64)``."""
    x = (datasets.digits()[0] / 16.0).astype(np.float32)
    return datasets.shuffled_split(x, num_test, num_train, seed, held_out="last")


class DrawScorer:
    """Held-out log predictive of feature draws ``(Z, A)`` by the R-IBP filter's estimator."""

    def __init__(self, model_kwargs, capacity, num_samples, seed=0):
        from jax import random

        from numpyro_bnp.infer import RIBPFilter
        from numpyro_bnp.models import linear_gaussian

        kwargs = {k: v for k, v in model_kwargs.items() if k not in ("num_obs", "max_features")}
        self.filter = RIBPFilter(linear_gaussian, max_features=capacity + NEW_SLOTS)
        self.empty = self.filter.init(random.PRNGKey(seed), **kwargs)
        self.num_samples = num_samples

    def __call__(self, z, a, test, rng_key):
        """``(M,)`` ``log p(o | Z, A)`` of the rows ``test``, the draw's used features fixed."""
        import jax.numpy as jnp

        z, a = np.asarray(z), np.asarray(a)
        used = z.sum(0) > 0
        k = int(used.sum())
        s = self.empty
        counts = np.zeros(s.running_sum.shape[0], np.float64)
        counts[:k] = z[:, used].sum(0)
        exists = (np.arange(len(counts)) < k).astype(np.float64)
        state = s._replace(
            mean=s.mean.at[:k].set(jnp.asarray(a[used], s.mean.dtype)),
            var=s.var.at[:k].set(0.0),
            running_sum=jnp.asarray(counts, s.running_sum.dtype),
            existence=jnp.asarray(exists, s.existence.dtype),
            num_seen=jnp.asarray(z.shape[0], s.num_seen.dtype),
        )
        lp = self.filter.log_predictive(state, test, rng_key=rng_key, num_samples=self.num_samples)
        return np.asarray(lp, np.float64)

    def posterior(self, z_draws, a_draws, test, rng_key):
        """Mean over rows of ``log`` of the mean over draws of ``p(o | draw)``."""
        from jax import random
        from scipy.special import logsumexp

        keys = random.split(rng_key, len(z_draws))
        per_draw = np.stack(
            [self(z, a, test, key) for z, a, key in zip(z_draws, a_draws, keys, strict=True)]
        )
        return float(np.mean(logsumexp(per_draw, axis=0) - np.log(len(per_draw))))


def _thin(samples, num_draws):
    """Every chain's draws ``(C, S, ...)`` thinned to ``num_draws`` in all, flattened."""
    chains, draws = samples.shape[:2]
    step = max(1, chains * draws // num_draws)
    return np.asarray(samples).reshape(chains * draws, *samples.shape[2:])[::step][:num_draws]


def run_filter(train, test, model_kwargs, num_samples):
    from jax import random

    from numpyro_bnp.infer import RIBPFilter
    from numpyro_bnp.models import linear_gaussian

    kwargs = {k: v for k, v in model_kwargs.items() if k != "num_obs"}
    engine = RIBPFilter(linear_gaussian, feature_update="memoized")

    def run(seed):
        result = engine.run(random.PRNGKey(seed), train, progress_bar=False, **kwargs)
        return result, result.state

    with warnings.catch_warnings():  # the memoized births fill a fixed capacity: it says so
        warnings.simplefilter("ignore", RuntimeWarning)
        (result, _), seconds, cold = timed(run)
    lp = result.log_predictive(test, rng_key=random.PRNGKey(0), num_samples=num_samples)
    return dict(seconds=seconds, cold=cold, lp=float(np.mean(lp)), K=float(result.num_active))


def run_refine(train, test, model_kwargs, num_passes, num_samples):
    from jax import random

    from numpyro_bnp.infer import RIBPFilter
    from numpyro_bnp.models import linear_gaussian

    kwargs = {k: v for k, v in model_kwargs.items() if k != "num_obs"}
    engine = RIBPFilter(linear_gaussian)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = engine.run(random.PRNGKey(0), train, progress_bar=False, **kwargs)

    def run(_):
        refined = result.refine(train, num_passes=num_passes, start="empty")
        return refined, refined.state

    (refined, _), seconds, cold = timed(run)
    lp = refined.log_predictive(test, rng_key=random.PRNGKey(0), num_samples=num_samples)
    return dict(seconds=seconds, cold=cold, lp=float(np.mean(lp)), K=float(refined.num_active))


def run_kernel(kernel, train, test, model_kwargs, warmup, samples, scorer, num_draws):
    """A row for one of our MCMC kernels, ``NUM_CHAINS`` vectorized chains."""
    from jax import random

    with warnings.catch_warnings():  # a prior draw of the initial state may be truncated
        warnings.simplefilter("ignore", RuntimeWarning)
        mcmc, fields, row = vectorized_chains(
            kernel, train, model_kwargs, warmup, samples, "num_active", reps=10
        )
    draws = mcmc.get_samples(group_by_chain=True)
    z, a = _thin(draws["Z"], num_draws), _thin(draws["A"], num_draws)
    row["lp"] = scorer.posterior(z, a, test, random.PRNGKey(1))
    return dict(row, trace=np.asarray(fields["num_active"]))


def held_out_curve(kernel, train, test, model_kwargs, segments, scorer, num_draws, seed=0):
    """The held-out score of ``kernel`` along its run: ``NUM_CHAINS`` vectorized chains, one
    compiled sweep per call from their first state (no warm-up), and after each segment of
    sweeps the segment's draws are scored (``num_draws`` of them, thinned over the chains,
    :meth:`DrawScorer.posterior`).

    The sweeps are dispatched one by one (a fraction of a millisecond each, against tens of
    milliseconds per sweep here), not as one compiled ``lax.scan``, so that the segments' draws
    reach the host as they come (``docs/crm_slice.md``, "Known problem with jax 0.10 on CPU",
    for the XLA setting the library makes at import on jax < 0.11, without which such a scan
    could hang).

    :param segments: the sweeps of each segment, e.g. ``(25,) * 12``;
    :return: one dict per segment with ``sweeps`` (done so far), ``seconds`` (the compiled
        sweeps' wall time so far, the first call's compilation excluded), ``lp``, ``K`` (mean
        features in use in the segment) and ``K_chains`` (each chain's mean).
    """
    import time

    import jax
    from jax import random

    args = (train,)
    keys = random.split(random.PRNGKey(seed), NUM_CHAINS)
    state = kernel.init(keys, 0, None, args, model_kwargs)
    sweep = jax.jit(lambda s: kernel.sample(s, args, model_kwargs)).lower(state).compile()
    curve, seconds, done = [], 0.0, 0
    for i, sweeps in enumerate(segments):
        draws = []
        t0 = time.perf_counter()
        for _ in range(sweeps):
            state = sweep(state)
            draws.append((state.z["Z"], state.z["A"]))
        jax.block_until_ready(state)
        seconds += time.perf_counter() - t0
        done += sweeps
        z = np.stack([np.asarray(d[0]) for d in draws], axis=1)  # (chains, sweeps, N, K)
        a = np.stack([np.asarray(d[1]) for d in draws], axis=1)
        used = (z.sum(-2) > 0).sum(-1)  # (chains, sweeps) features in use
        lp = scorer.posterior(
            _thin(z, num_draws), _thin(a, num_draws), test, random.PRNGKey(seed + 1 + i)
        )
        curve.append(
            dict(sweeps=done, seconds=seconds, lp=lp, K=float(used.mean()),
                 K_chains=used.mean(1))
        )  # fmt: skip
    return curve


def run_discrete_hmc_gibbs(train, test, model_kwargs, truncation, warmup, samples, scorer,
                           num_draws, num_chains):  # fmt: skip
    """NumPyro's ``DiscreteHMCGibbs(NUTS(max_tree_depth=6), modified=True)`` on the truncated
    twin of ``linear_gaussian`` (``infer.truncated_twin``), ``num_chains`` chains one after
    another."""
    import jax
    from jax import random
    from numpyro.infer import NUTS, DiscreteHMCGibbs

    from numpyro_bnp.infer import truncated_twin
    from numpyro_bnp.models import linear_gaussian

    kwargs = dict(model_kwargs, max_features=truncation)  # the twin's T: the IBP's capacity
    twin = truncated_twin(linear_gaussian)
    kernel = DiscreteHMCGibbs(NUTS(twin, max_tree_depth=6), modified=True)

    def run(mcmc):
        mcmc.run(random.PRNGKey(0), train, **kwargs)
        jax.block_until_ready(mcmc.get_samples())

    mcmc, cold = run_mcmc(kernel, warmup, samples, "sequential", run, num_chains=num_chains)
    one_chain = jax.tree.map(lambda x: x[0], mcmc.last_state)
    per_iteration = iteration_seconds(kernel, one_chain, (train,), kwargs, 3, 2)
    seconds = per_iteration * (warmup + samples) * num_chains
    draws = mcmc.get_samples(group_by_chain=True)
    num_used = (np.asarray(draws["Z"]).sum(-2) > 0).sum(-1)  # (chains, draws)
    mean, sd, ess_s, rhat = chain_stats(num_used, seconds)
    z, a = _thin(draws["Z"], num_draws), _thin(draws["A"], num_draws)
    lp = scorer.posterior(z, a, test, random.PRNGKey(1))
    saturated = bool(np.any(num_used >= truncation))
    return dict(
        seconds=seconds, cold=cold, lp=lp, K=mean, K_sd=sd, ess_s=ess_s, rhat=rhat,
        saturated=saturated, trace=num_used,
    )  # fmt: skip


def plot_features(rows, path):
    """Left: held-out log predictive against seconds, one point per engine; right: the
    samplers' number of features along their kept draws, one line per chain."""
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(11, 4))
    for i, (label, row) in enumerate(rows.items()):
        color = f"C{i}"
        left.plot(row["seconds"], row["lp"], "o", color=color, label=label)
        if "trace" in row:
            for j, chain in enumerate(np.atleast_2d(row["trace"])):
                right.plot(chain, color=color, lw=0.8, alpha=0.8, label=label if j == 0 else None)
    left.set_xscale("log")
    left.set_xlabel("seconds (compiled)")
    left.set_ylabel("held-out log predictive per row")
    left.legend(fontsize=7)
    right.set_xlabel("kept draw")
    right.set_ylabel("features in use")
    right.legend(fontsize=7)
    save_figure(fig, path)


def bench_features(settings, figure=None):
    """The feature table. ``settings``: ``num_train``, ``num_test``, ``capacity`` (the model's
    ``max_features``), ``refine_passes``, ``sweeps`` (warm-up, kept) of our kernels,
    ``hmc_iterations`` (warm-up, kept) and ``hmc_chains`` of DiscreteHMCGibbs (``None``: not
    run), ``truncation`` of its model, ``num_draws`` scored per sampler and ``num_samples``
    importance samples per held-out row."""
    from numpyro_bnp.infer import AcceleratedIBPGibbs, CRMSlice
    from numpyro_bnp.models import linear_gaussian

    try:
        train, test = digits_pixels(settings["num_train"], settings["num_test"])
    except ImportError as err:
        print(f"\n== features: skipped ({err}; pip install scikit-learn)")
        return None
    capacity = settings["capacity"]
    kw = dict(
        num_obs=len(train), dim=train.shape[1], mass=MASS, sigma_a=SIGMA_A, sigma_o=SIGMA_O,
        max_features=capacity,
    )  # fmt: skip
    num_samples, num_draws = settings["num_samples"], settings["num_draws"]
    scorer = DrawScorer(kw, 2 * max(capacity, settings.get("truncation") or 0), num_samples)
    rows = {}
    rows["R-IBP filter (memoized)"] = run_filter(train, test, kw, num_samples)
    passes = settings["refine_passes"]
    rows[f"R-IBP refine ({passes} passes)"] = run_refine(train, test, kw, passes, num_samples)
    sweeps = settings["sweeps"]
    for name, kernel in (
        ("CRMSlice", CRMSlice(linear_gaussian)),
        ("AcceleratedIBPGibbs", AcceleratedIBPGibbs(linear_gaussian)),
    ):
        label = f"{name} ({NUM_CHAINS}x{sweeps[0]}+{sweeps[1]})"
        rows[label] = run_kernel(kernel, train, test, kw, *sweeps, scorer, num_draws)
    if settings.get("hmc_iterations"):
        (warmup, samples), chains = settings["hmc_iterations"], settings["hmc_chains"]
        truncation = settings["truncation"]
        label = f"DiscreteHMCGibbs T={truncation} ({chains}x{warmup}+{samples})"
        rows[label] = run_discrete_hmc_gibbs(
            train, test, kw, truncation, warmup, samples, scorer, num_draws, chains
        )
    print_engine_table(
        f"features: digits pixels / 16 ({len(train)} train / {len(test)} test rows, D = 64; "
        f"linear_gaussian α = {MASS:g}, σ_A = {SIGMA_A:g}, σ_o = {SIGMA_O:g}, "
        f"{capacity} feature slots)",
        rows,
        lp_spec=".2f",
    )
    if figure:
        plot_features(rows, figure)
    return rows
