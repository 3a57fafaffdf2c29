"""The mixture family: one NGGP mixture model under every engine that runs it.

* ``ADFNRM`` (one streaming pass, Tank, Foti & Fox 2015), ``EPNRM`` (ADF then EP passes);
* ``NGGPMarginalGibbs`` (the collapsed Gibbs sampler of Favaro & Teh 2013), four vectorized
  chains from different seeds, as the gold standard;
* on galaxies, NumPyro's NUTS on the truncated twin ``infer.truncated_twin(model)`` (the same
  Normal–Gamma components, the DP by truncated stick-breaking with the labels enumerated;
  NUTS's number of clusters counts the distinct labels of ``Predictive(...,
  infer_discrete=True)`` draws).

Under the Dirichlet process (``σ = 0``) and the normalized inverse-Gaussian (``σ = ½``), ``τ = 1``.
Columns: seconds of a second run (compiled programs reused; the samplers': the time per
iteration of the compiled kernel, timed alone, times the iterations of the four chains), of the
first (cold) run (the samplers': the MCMC run, compilation included), held-out log predictive per
row (the samplers': the average over draws of the exact predictive given each draw, see
``NGGPMarginalGibbs.log_predictive``), the number of clusters (the samplers': posterior mean and
standard deviation), its ESS per second and R-hat over the chains (ArviZ). The ratio lines are
the targets of the issue: EP against the Gibbs sampler's held-out score and time, the chains'
R-hat, the Gibbs sampler's ESS/s against NUTS.

Data: the galaxies (82 velocities in 1,000 km/s, Roeder 1990, shipped with the package; a fixed
20 % held out), scikit-learn digits as 64-word count documents (80/20) and Reuters
(``lda.datasets.load_reuters``, 395 documents, 80/20; ``pip install lda``).
"""

import numpy as np

from numpyro_bnp import datasets
from numpyro_bnp._report import Column, Table, timed
from numpyro_bnp.bench._common import (
    NUM_CHAINS,
    chain_stats,
    iteration_seconds,
    mcmc,
    print_engine_table,
    pyplot,
    run_mcmc,
    save_figure,
    vectorized_chains,
)

PRIORS = (("DP", 0.0), ("NIG", 0.5))


def run_streaming(engine_cls, model, train, test, model_kwargs, grid=None, **options):
    from jax import random

    engine = engine_cls(model, **options)

    def run(seed):
        result = engine.run(random.PRNGKey(seed), train, progress_bar=False, **model_kwargs)
        return result, result.cluster_sizes

    (result, _), seconds, cold = timed(run)
    lp = float(np.mean(result.log_predictive(test)))
    K = float(np.asarray(result.traces["num_clusters"])[-1])
    row = dict(seconds=seconds, cold=cold, lp=lp, K=K)
    if grid is not None:
        row["density"] = np.exp(result.log_predictive(grid))
    return row


def run_gibbs(model, train, test, model_kwargs, warmup, samples, grid=None, **options):
    """The Gibbs sampler's row (``options``: the kernel's, e.g. ``split_merge``); its seconds:
    the vectorized chains' time per sweep (timed compiled) times the sweeps."""
    from numpyro_bnp.infer import NGGPMarginalGibbs

    kernel = NGGPMarginalGibbs(model, **options)
    mcmc, fields, row = vectorized_chains(
        kernel, train, model_kwargs, warmup, samples, "num_clusters"
    )
    labels = np.asarray(mcmc.get_samples()["z"])[:: max(1, samples * NUM_CHAINS // 400)]
    row["lp"] = float(np.mean(kernel.log_predictive(labels, test, train, **model_kwargs)))
    row["num_clusters"] = np.asarray(fields["num_clusters"]).ravel()
    if grid is not None:
        row["density"] = np.exp(kernel.log_predictive(labels, grid, train, **model_kwargs))
    return row, (kernel, mcmc)


def run_nuts_twin(train, test, prior, truncation, warmup, samples, seed=1, grid=None):
    """NUTS on the truncated twin of the galaxies' DP model (``infer.truncated_twin``: the DP
    by ``truncation`` sticks, labels enumerated): the DP row NumPyro users run today."""
    import jax
    from jax import random
    from jax.scipy.special import logsumexp
    from numpyro.infer import NUTS, Predictive

    from numpyro_bnp import models
    from numpyro_bnp.infer import truncated_twin

    twin = truncated_twin(models.nggp_diagonal_gaussian_mixture)
    kwargs = dict(
        num_obs=len(train), dim=1, mass=1.0, sigma=0.0, tau=1.0, max_clusters=truncation,
        **prior,
    )  # fmt: skip

    def run(mcmc):
        mcmc.run(random.PRNGKey(seed), train, **kwargs)
        jax.block_until_ready(mcmc.get_samples())

    kernel = NUTS(twin)
    mcmc, cold = run_mcmc(kernel, warmup, samples, "sequential", run)
    one_chain = jax.tree.map(lambda a: a[0], mcmc.last_state)
    per_iteration = iteration_seconds(kernel, one_chain, (train,), kwargs)
    seconds = per_iteration * (warmup + samples) * NUM_CHAINS  # the chains one after another
    draws = mcmc.get_samples()
    labels = Predictive(twin, draws, infer_discrete=True)(
        random.PRNGKey(seed + 1), train, **kwargs
    )["z"]
    labels = np.asarray(labels).reshape(NUM_CHAINS, samples, -1)
    num = np.array([[len(np.unique(row)) for row in chain] for chain in labels])
    mean, sd, ess_s, rhat = chain_stats(num, seconds)
    w = draws["weights"]  # (S, T)
    mu, lam = draws["mu"][..., 0], draws["lam"][..., 0]  # (S, T)

    def log_density(rows):  # (M,) log of the posterior mean density
        x = np.asarray(rows)[:, 0]
        log_comp = (
            0.5 * (np.log(lam)[:, None] - np.log(2 * np.pi))
            - 0.5 * lam[:, None] * (x[None, :, None] - mu[:, None]) ** 2
        )  # (S, M, T)
        per_draw = logsumexp(np.log(w)[:, None] + log_comp, axis=-1)
        return np.asarray(logsumexp(per_draw, axis=0) - np.log(per_draw.shape[0]))

    lp = float(np.mean(log_density(test)))
    row = dict(seconds=seconds, cold=cold, lp=lp, K=mean, K_sd=sd, ess_s=ess_s, rhat=rhat)
    row["num_clusters"] = num.ravel()
    if grid is not None:
        row["density"] = np.exp(log_density(grid))
    return row


def print_targets(rows, *, nuts=None, ep_target=True):
    for name, _ in PRIORS:
        gibbs, ep = rows.get(f"Gibbs {name}"), rows.get(f"EP {name}")
        if gibbs is None or ep is None:
            continue
        rhat = gibbs["rhat"]
        ok = "PASS" if rhat <= 1.05 else "FAIL"
        print(f"target {name}: R-hat of K over {NUM_CHAINS} chains <= 1.05: {rhat:.3f} -> {ok}")
        if not ep_target:
            continue
        gap = (ep["lp"] - gibbs["lp"]) / abs(gibbs["lp"])
        speed = ep["seconds"] / gibbs["seconds"]
        ok = "PASS" if gap >= -0.01 and speed <= 0.1 else "FAIL"
        print(
            f"target {name}: EP within 1 % of Gibbs' held-out in <= 1/10 of its time: "
            f"{100 * gap:+.2f} %, time ratio {speed:.3f} -> {ok}"
        )
    if nuts is not None and "Gibbs DP" in rows:
        ratio = rows["Gibbs DP"]["ess_s"] / nuts["ess_s"]
        ok = "PASS" if ratio >= 10 else "FAIL"
        print(f"target: Gibbs ESS/s of K >= 10x NUTS on the twin: {ratio:.1f}x -> {ok}")


def galaxies_data():
    """``(train, test)``: the velocities in 1,000 km/s, ``(66, 1)`` and ``(16, 1)``."""
    x = (datasets.galaxies() / 1000.0)[:, None]
    return datasets.shuffled_split(x, len(x) // 5)


def galaxies_prior(train):
    """The Normal-Gamma prior of the galaxies' clusters: ``μ ~ N(mean, 1 / (κ λ))``, ``λ ~
    Gamma(2, 2)``: clusters of about 1,000 km/s, means anywhere in the data's range (``κ =
    0.05``: a prior standard deviation of the mean of about 4.5)."""
    return dict(loc=float(train.mean()), kappa=0.05, concentration=2.0, rate=2.0)


def bench_galaxies(settings, figure=None):
    """``settings``: ``sweeps`` (warm-up, kept) of the Gibbs sampler, ``nuts_draws`` of NUTS
    (``None``: not run), ``priors`` (names from ``PRIORS``; default both)."""
    from numpyro_bnp import models
    from numpyro_bnp.infer import ADFNRM, EPNRM

    train, test = galaxies_data()
    grid = np.linspace(5.0, 40.0, 281)[:, None]
    prior = galaxies_prior(train)
    rows = {}
    for name, sigma in PRIORS:
        if name not in settings.get("priors", dict(PRIORS)):
            continue
        kw = dict(dim=1, mass=1.0, sigma=sigma, tau=1.0, **prior)
        model = models.nggp_diagonal_gaussian_mixture
        rows[f"ADF {name}"] = run_streaming(ADFNRM, model, train, test, kw, grid)
        rows[f"EP {name}"] = run_streaming(EPNRM, model, train, test, kw, grid, num_passes=5)
        gibbs_kw = dict(kw, num_obs=len(train), max_clusters=64)
        gibbs, _ = run_gibbs(model, train, test, gibbs_kw, *settings["sweeps"], grid)
        rows[f"Gibbs {name}"] = gibbs
    if settings.get("nuts_draws"):
        nuts = run_nuts_twin(train, test, prior, 20, *settings["nuts_draws"], grid=grid)
        rows["NUTS DP twin (T = 20)"] = nuts
    else:
        nuts = None
    print_engine_table(
        f"galaxies ({len(train)} train / {len(test)} test velocities, Normal-Gamma components)",
        rows,
    )
    print_targets(rows, nuts=nuts, ep_target=False)
    if figure:
        plot_galaxies(np.concatenate([train, test]), grid, rows, figure)
    return rows


# The posterior pmf of the number of clusters of BNPdensity's own fits of the galaxies (R
# package BNPdensity 2023.3.8, Arbel et al. 2021, ANZ J. Stat.; Barrios et al. 2013, Stat.
# Sci.), read from its data objects ``Galaxy2.out`` (``MixNRMI2``: a location-scale mixture) and
# ``Galaxy1.out`` (``MixNRMI1``: a location mixture with one common scale), each 1,000 draws
# of one chain of ``NGG(Alpha = 1, Kappa = 0.015, Gama = 0.5)`` on the 82 velocities in 1,000
# km/s: {number of clusters: probability}.
BNPDENSITY_GALAXIES = {
    "MixNRMI2 (location-scale)": {
        3: 0.215, 4: 0.291, 5: 0.245, 6: 0.134, 7: 0.046, 8: 0.040, 9: 0.015, 10: 0.010,
        11: 0.002, 12: 0.002,
    },
    "MixNRMI1 (common scale)": {
        5: 0.005, 6: 0.154, 7: 0.230, 8: 0.222, 9: 0.159, 10: 0.125, 11: 0.045, 12: 0.035,
        13: 0.013, 14: 0.008, 15: 0.003, 16: 0.001,
    },
}  # fmt: skip


def bnpdensity_galaxies_models():
    """``{label: (model, Gibbs blocks or None, analysis)}``: the two BNPdensity galaxies
    analyses (``analysis``, a key of :data:`BNPDENSITY_GALAXIES`) as NumPyro models for
    ``NGGPMarginalGibbs``, the NGGP the same (``a = 1``, ``σ = ½``, ``τ = 0.015``:
    BNPdensity's Lévy intensity ``Alpha / Γ(1 − Gama) s^{−1−Gama} e^{−Kappa s}`` is ours).
    ``Galaxy2.out`` was fitted by ``MixNRMI2(x, Alpha = 1, Beta = 0.015, Gama = 0.5, distr.k =
    1, distr.py0 = 2, mu.py0 = 20, sigma.py0 = 20, distr.pz0 = 2, mu.pz0 = 1, sigma.pz0 = 1)``
    (its documentation): Normal kernels, locations from a Gamma of mean and standard deviation
    20 (an exponential of mean 20), standard deviations from a Gamma of mean and standard
    deviation 1 (``Exp(1)``); ``Galaxy1.out`` by ``MixNRMI1``, one common standard deviation
    ``~ Gamma(1, 1)``:

    * location-scale, BNPdensity's priors: those two exponentials, which no conjugate prior
      reproduces (the kernel samples them with auxiliary components, Neal's Algorithm 8);

    * location-scale: ``nggp_diagonal_gaussian_mixture`` whose Gamma prior on the precision
      matches the quartiles of ``1/s²`` for ``s ~ Exp(1)`` in log scale (``a0 = 0.40``, ``b0 =
      0.051``) and whose ``κ0 = 3.3e-4`` gives a new cluster's predictive density at the data's
      mean that of BNPdensity's prior (0.0154);
    * common scale: ``nggp_normal_mixture`` with ``sigma_o ~ Gamma(1, 1)`` sampled by NUTS in
      a ``numpyro.infer.Gibbs`` block and the locations ``N(m, s²)`` with the exponential's
      density at its mean (``s = m e / √(2π)``).
    """
    import numpyro
    import numpyro.distributions as dist

    from numpyro_bnp import models
    from numpyro_bnp.distributions import NGGP

    x = datasets.galaxies() / 1000.0
    mean, nggp = float(x.mean()), dict(mass=1.0, sigma=0.5, tau=0.015, max_clusters=48)

    def bnpdensity_priors(obs=None):
        z = numpyro.sample("z", NGGP(nggp["mass"], nggp["sigma"], nggp["tau"], num_points=len(x)))
        with numpyro.plate("clusters", nggp["max_clusters"]):
            mu = numpyro.sample("mu", dist.Exponential(1 / 20.0).expand([1]).to_event(1))
            s = numpyro.sample("s", dist.Exponential(1.0).expand([1]).to_event(1))
        numpyro.sample("obs", dist.Normal(mu[z], s[z]).to_event(1), obs=obs)

    def location_scale(obs=None):
        return models.nggp_diagonal_gaussian_mixture(
            obs, num_obs=len(x), dim=1, loc=mean, kappa=3.3e-4, concentration=0.40, rate=0.051,
            **nggp,
        )  # fmt: skip

    def common_scale(obs=None):
        sigma_o = numpyro.sample("sigma_o", dist.Gamma(1.0, 1.0))
        return models.nggp_normal_mixture(
            obs, num_obs=len(x), dim=1, loc=mean, sigma_mu=mean * np.e / np.sqrt(2 * np.pi),
            sigma_o=sigma_o, **nggp,
        )  # fmt: skip

    names = list(BNPDENSITY_GALAXIES)
    return {
        "location-scale, their priors": (bnpdensity_priors, None, names[0]),
        "location-scale, Normal-Gamma": (location_scale, None, names[0]),
        "common scale": (common_scale, ["sigma_o"], names[1]),
    }


def bench_galaxies_published(settings):
    """The posterior of the number of clusters of ``NGGPMarginalGibbs`` (4 chains) on all 82
    galaxies against BNPdensity's (:func:`bnpdensity_galaxies_models`); ``settings``:
    ``published_sweeps`` (warm-up, kept) of the kernel alone and of the Gibbs composite with
    NUTS on the common scale."""
    import jax
    from jax import random
    from numpyro.infer import NUTS, Gibbs

    from numpyro_bnp.infer import NGGPMarginalGibbs

    x = (datasets.galaxies() / 1000.0)[:, None]
    print("\n== galaxies (all 82) against BNPdensity's NGG(1, 0.015, 0.5) fits", flush=True)
    columns = (
        Column("analysis", 32, align="<"), Column("engine", 22, align="<", gap=""),
        Column("K mean", 8, ".2f", gap=""), Column("sd", 6, ".2f", gap=""),
        Column("R-hat", 7, ".3f", gap=""), Column("pmf of K (3..12)", align="<", gap="  "),
    )  # fmt: skip
    table = Table(columns)
    table.header()
    rows = {}
    for label, (model, block, name) in bnpdensity_galaxies_models().items():
        warmup, samples = settings["published_sweeps"][block is not None]
        if block is None:
            kernel, method, field = NGGPMarginalGibbs(model), "vectorized", "num_clusters"
        else:
            kernel = Gibbs([(NGGPMarginalGibbs(model), ["z", "mu"]), (NUTS(model), block)])
            method, field = "sequential", "block_states.0.num_clusters"
        chains = mcmc(kernel, warmup, samples, NUM_CHAINS, method)
        chains.run(random.PRNGKey(0), x, extra_fields=(field,))
        num = np.asarray(jax.device_get(chains.get_extra_fields(group_by_chain=True)[field]))
        mean, sd, _, rhat = chain_stats(num, 1.0)
        reference = BNPDENSITY_GALAXIES[name]
        ks = np.array(list(reference))
        ref_mean = float(np.dot(ks, list(reference.values())))
        ref_sd = float(np.sqrt(np.dot((ks - ref_mean) ** 2, list(reference.values()))))
        ours = " ".join(f"{np.mean(num == k):.2f}" for k in range(3, 13))
        theirs = " ".join(f"{reference.get(k, 0.0):.2f}" for k in range(3, 13))
        table.row(label, "NGGPMarginalGibbs", mean, sd, rhat, ours)
        table.row(name, "BNPdensity", ref_mean, ref_sd, "", theirs)
        rows[label] = dict(K=mean, K_sd=sd, rhat=rhat, reference=(ref_mean, ref_sd))
    return rows


def plot_galaxies(data, grid, rows, path):
    """Left: the posterior mean densities of every engine over the data's histogram; right:
    the samplers' posterior of the number of clusters."""
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(11, 4))
    left.hist(data[:, 0], bins=30, density=True, color="0.85", label="82 galaxies")
    for label, row in rows.items():
        if "density" in row:
            style = "-" if "Gibbs" in label else ":" if "NUTS" in label else "--"
            left.plot(grid[:, 0], row["density"], style, lw=1.3, label=label)
    left.set_xlabel("velocity (1,000 km/s)")
    left.set_ylabel("density")
    left.legend(fontsize=7)
    for label, row in rows.items():
        if "num_clusters" in row:
            ks = np.arange(1, 41)
            pmf = np.bincount(row["num_clusters"].astype(int), minlength=41)[1:41]
            right.plot(ks, pmf / pmf.sum(), "o-", ms=3, label=label)
    right.set_xlabel("number of clusters")
    right.set_ylabel("posterior probability")
    right.legend(fontsize=7)
    save_figure(fig, path)


def documents(name):
    """``(train, test)`` count documents, a fifth held out: ``"digits"`` (scikit-learn's
    digits, the 64 pixel intensities as word counts, ``(1438, 64)`` and ``(359, 64)``) or
    ``"reuters"`` (``lda``'s, ``(316, 4258)`` and ``(79, 4258)``)."""
    x = datasets.digits()[0] if name == "digits" else datasets.reuters()[0]
    return datasets.shuffled_split(x, len(x) // 5)


def bench_documents(settings, name, concentration, capacity):
    """``settings``: ``sweeps`` of the Gibbs sampler and its ``split_merge`` moves per sweep,
    ``fraction`` of the training documents."""
    from numpyro_bnp import models
    from numpyro_bnp.infer import ADFNRM, EPNRM

    try:
        train, test = documents(name)
    except ImportError as err:
        package = "lda" if name == "reuters" else "scikit-learn"
        print(f"\n== {name}: skipped ({err}; pip install {package})")
        return None
    train = train[: int(len(train) * settings.get("fraction", 1.0))]
    model = models.nggp_multinomial_mixture
    rows = {}
    for prior, sigma in PRIORS:
        kw = dict(vocab_size=train.shape[1], mass=1.0, sigma=sigma, tau=1.0)
        kw["concentration"] = concentration
        opts = dict(new_cluster_threshold=0.5)
        rows[f"ADF {prior}"] = run_streaming(ADFNRM, model, train, test, kw, **opts)
        rows[f"EP {prior}"] = run_streaming(EPNRM, model, train, test, kw, num_passes=5, **opts)
        gibbs_kw = dict(kw, num_obs=len(train), max_clusters=capacity)
        rows[f"Gibbs {prior}"], _ = run_gibbs(
            model, train, test, gibbs_kw, *settings["sweeps"], split_merge=settings["split_merge"]
        )
    print_engine_table(
        f"{name} ({len(train)} train / {len(test)} test documents, vocabulary "
        f"{train.shape[1]:,}, λ0 = {concentration})",
        rows,
    )
    print_targets(rows)
    return rows
