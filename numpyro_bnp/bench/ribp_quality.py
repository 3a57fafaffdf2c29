"""The R-IBP filter's held-out quality on synthetic linear-Gaussian data (``docs/ribp.md``).

The data are :func:`numpyro_bnp.bench.ribp_speed.synthetic`'s (``Z ~ IBP(α = 10, β = 1)``,
``A_k ~ N(0, I_50)``, ``o_n = z_n A + N(0, 0.5² I)``). Sections of ``bench ribp``:

3. held-out negative log predictive per observation (:func:`quality`): at N = 200 and 10,000
   training rows, the filter (importance-sampled, features integrated out), the oracle (true
   features, exact IBP predictive given the true Z, by an independent importance sampler that is
   checked against enumeration, :func:`ibp_log_predictive`), NumPyro's DiscreteHMCGibbs + NUTS on
   a truncated beta-Bernoulli version of the model (the first N only), scikit-learn
   FactorAnalysis / PCA with K = min(true number of features, D - 1), and the number of features
   each method keeps and recovers;
4. the bias of the filter's ``log_predictive`` on a state that holds the true features
   (:func:`proposal_bias`).
"""

import functools
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random

from numpyro_bnp._report import Column, Table, print_table
from numpyro_bnp.bench._common import discrete_hmc_gibbs
from numpyro_bnp.bench.ribp_speed import ALPHA, BETA, DIM, KWARGS, SIGMA_A, SIGMA_O, synthetic
from numpyro_bnp.infer import RIBPFilter
from numpyro_bnp.models import linear_gaussian

QUALITY_SIZES = (200, 1_000, 10_000)  # training rows; the MCMC reference runs at the first
MATCH_TOL = 0.3  # a true feature is recovered if a learned one is within 30 % of its norm


MAX_NEW = 16  # new features summed over in the oracle's predictive
REFINE_PASSES = 150  # passes of RIBPFilter.refine (one birth at most per pass)


def ibp_log_predictive(test, feats, probs, new_rate, key, num_samples=1000):
    """Held-out ``log p(o | features)`` of an IBP-type predictive with *known* features.

    ``z_k ~ Bern(probs_k)`` independently for the ``K`` given features ``feats`` ``(K, D)``, plus
    ``Pois(new_rate)`` new features drawn from the prior ``N(0, σ_A² I)``, and
    ``o ~ N(z A + new, σ_o² I)``. The new features are integrated out exactly (their number ``j``
    is summed up to ``MAX_NEW``, a tail below 1e-12: ``N(o; z A, (σ_o² + j σ_A²) I)``); ``z`` is
    importance sampled from a mean-field proposal fitted to the row (annealed coordinate ascent on
    ``z`` with the features fixed, then greedy single and pair flips of its rounding, then two more
    sweeps; mixed 9:1 with ``probs``). The estimate is the log-mean-exp of the weights, consistent
    as ``num_samples`` grows; its Monte-Carlo standard error is the delta-method
    ``sd(w) / (√S mean(w))``. Independent of the filter's own estimator.

    :return: ``(M,)`` estimates and ``(M,)`` standard errors (in nats).
    """
    from scipy.stats import poisson

    if poisson.sf(MAX_NEW, new_rate) > 1e-12:
        raise ValueError(f"new_rate={new_rate} needs more than {MAX_NEW} new features")
    j = np.arange(MAX_NEW + 1)
    log_pj = poisson.logpmf(j, new_rate) if new_rate > 0 else np.where(j == 0, 0.0, -np.inf)
    est, se = _ibp_log_predictive(
        jnp.asarray(test, jnp.float32),
        jnp.asarray(feats, jnp.float32),
        jnp.clip(jnp.asarray(probs, jnp.float32), 1e-20, 1.0 - 1e-6),
        jnp.asarray(log_pj, jnp.float32),
        random.split(key, len(test)),
        num_samples,
    )
    return np.asarray(est, np.float64), np.asarray(se, np.float64)


@functools.partial(jax.jit, static_argnums=5)
def _ibp_log_predictive(test, feats, probs, log_pj, keys, num_samples):
    from jax.scipy.special import logsumexp

    log_p, log_not_p = jnp.log(probs), jnp.log1p(-probs)
    sq_norm, gram, logit = jnp.sum(feats**2, axis=1), feats @ feats.T, log_p - log_not_p
    lam = 1.0 / SIGMA_O**2
    var_j = SIGMA_O**2 + jnp.arange(MAX_NEW + 1, dtype=jnp.float32) * SIGMA_A**2
    # deterministic annealing of the likelihood (temperature 100 -> 1) and a polish by single and
    # pair flips keep the proposal out of the local optima that plain sweeps fall into on a few
    # rows in a hundred (a missed mode can carry e^50 times the weight of the one found)
    temps = jnp.asarray(np.concatenate([np.geomspace(100.0, 1.0, 12), np.ones(3)]), jnp.float32)

    def one(o, key):
        def sweep(b, temp):
            def slot(r, x):
                a_k, logit_k, b_k, s_k = x
                r = r + b_k * a_k
                b_k = jax.nn.sigmoid(logit_k + lam / temp * (a_k @ r - 0.5 * s_k))
                return r - b_k * a_k, b_k

            return lax.scan(slot, o - b @ feats, (feats, logit, b, sq_norm))[1], None

        def polish(_, z):  # the best single or pair flip of the rounded fit, if it improves
            sign = 1.0 - 2.0 * z
            gain = sign * logit + lam * (sign * (feats @ (o - z @ feats)) - 0.5 * sq_norm)
            pair = gain[:, None] + gain[None] - lam * jnp.outer(sign, sign) * gram
            pair = jnp.where(jnp.eye(len(z), dtype=bool), -jnp.inf, pair)
            i, j = jnp.unravel_index(jnp.argmax(pair), pair.shape)
            single = jnp.zeros_like(z).at[jnp.argmax(gain)].set(1.0)
            both = jnp.zeros_like(z).at[i].set(1.0).at[j].set(1.0)
            step = jnp.where(gain.max() >= pair[i, j], single, both)
            best = jnp.maximum(gain.max(), pair[i, j])
            return jnp.where(best > 0, jnp.abs(z - step), z)

        b = lax.scan(sweep, probs, temps)[0]
        z_hat = lax.fori_loop(0, 16, polish, (b > 0.5).astype(jnp.float32))
        b = lax.scan(sweep, z_hat, jnp.ones(2, jnp.float32))[0]
        q = jnp.clip(0.9 * b + 0.1 * probs, 1e-20, 1.0 - 1e-6)
        z = (random.uniform(key, (num_samples, len(probs))) < q).astype(jnp.float32)
        log_ratio = z @ (log_p - jnp.log(q)) + (1 - z) @ (log_not_p - jnp.log1p(-q))
        sq = jnp.sum((o - z @ feats) ** 2, axis=-1)
        ll = -0.5 * (o.shape[0] * jnp.log(2 * jnp.pi * var_j) + sq[:, None] / var_j)
        log_w = logsumexp(ll + log_pj, axis=1) + log_ratio
        w = jnp.exp(log_w - log_w.max())
        se = jnp.std(w) / (jnp.sqrt(num_samples) * jnp.mean(w))
        return logsumexp(log_w) - jnp.log(num_samples), se

    return lax.map(lambda x: one(*x), (test, keys))


def check_estimator(num_features=10, num_rows=40):
    """Largest |IS - exact| in standard errors on a case small enough to enumerate ``2^K``."""
    import itertools

    from scipy.special import logsumexp
    from scipy.stats import poisson

    rng = np.random.default_rng(1)
    feats = SIGMA_A * rng.normal(size=(num_features, DIM))
    probs = rng.uniform(0.05, 0.6, num_features)
    new_rate = 0.5
    z = rng.random((num_rows, num_features)) < probs
    new = rng.poisson(new_rate, (num_rows, 1))
    test = z @ feats + np.sqrt(SIGMA_O**2 + new * SIGMA_A**2) * rng.normal(size=(num_rows, DIM))
    est, se = ibp_log_predictive(test, feats, probs, new_rate, random.PRNGKey(3))
    configs = np.array(list(itertools.product([0.0, 1.0], repeat=num_features)))
    log_prior = configs @ np.log(probs) + (1 - configs) @ np.log1p(-probs)
    j = np.arange(30)
    var_j = SIGMA_O**2 + j * SIGMA_A**2
    exact = []
    for o in test:
        sq = np.sum((o - configs @ feats) ** 2, axis=-1)
        ll = -0.5 * (DIM * np.log(2 * np.pi * var_j) + sq[:, None] / var_j)
        exact.append(logsumexp(logsumexp(ll + poisson.logpmf(j, new_rate), axis=1) + log_prior))
    return float(np.max(np.abs(est - np.array(exact)) / np.maximum(se, 1e-6)))


def hmc_gibbs(train, truncation, num_warmup, num_samples, seed=0):
    """NumPyro ``DiscreteHMCGibbs(NUTS)`` on the truncated model ``π_k ~ Beta(αβ/K, β)``.

    The finite beta-Bernoulli model with ``K = truncation`` features, the same Gaussian features
    and noise as the data; one chain, NUTS with tree depth at most 6, Gibbs sweeps over all
    ``z_nk`` (Liu's modified proposal). Returns the samples and the wall time.
    """
    import numpyro
    import numpyro.distributions as dist

    def truncated(obs):
        pi = numpyro.sample("pi", dist.Beta(ALPHA * BETA / truncation, BETA).expand([truncation]))
        a = numpyro.sample("A", dist.Normal(0.0, SIGMA_A).expand([truncation, DIM]).to_event(2))
        rows = numpyro.plate("rows", obs.shape[0], dim=-2)
        with numpyro.plate("features", truncation, dim=-1), rows:
            z = numpyro.sample("z", dist.Bernoulli(pi))
        numpyro.sample("obs", dist.Normal(z @ a, SIGMA_O).to_event(2), obs=obs)

    return discrete_hmc_gibbs(truncated, train, num_warmup, num_samples, seed)


def num_matched(learned, truth):
    """True features (rows of ``truth``) with a learned one within ``MATCH_TOL`` of their norm."""
    if len(learned) == 0:
        return 0
    dist2 = np.sum((truth[:, None] - learned[None]) ** 2, axis=-1)
    return int(np.sum(np.sqrt(dist2.min(1)) < MATCH_TOL * np.linalg.norm(truth, axis=1)))


def num_matched_by_pairs(learned, truth):
    """True features within ``MATCH_TOL`` of a learned feature or of the sum or difference of
    two: what a merge or a split of two features could reach from ``learned``."""
    sums = learned[:, None] + learned[None]
    diffs = learned[:, None] - learned[None]
    combos = np.concatenate([learned, sums.reshape(-1, DIM), diffs.reshape(-1, DIM)])
    return sum(num_matched(combos, a[None]) for a in truth)


def timed_fit(fit, test, true_feats, num_is):
    """Run ``fit()`` (a filter run or a refinement) and score it on ``test``.

    :return: ``(result, (per-row log predictive, found, matched, fit seconds))``.
    """
    t0 = time.perf_counter()
    result = fit()
    jax.block_until_ready(result.state)
    seconds = time.perf_counter() - t0
    lp = result.log_predictive(test, rng_key=random.PRNGKey(0), num_samples=num_is)
    feats = result.features["mean"]
    return result, (np.asarray(lp, np.float64), len(feats), num_matched(feats, true_feats), seconds)


def quality(quick=False, hmc_iters=None, sizes=None, hmc=True):
    """Section 3: held-out NLL per observation and features recovered, one table.

    ``hmc_iters``: warm-up and sampling iterations of the MCMC reference (default 150, 60 with
    ``quick``; about 0.7 s each on an idle 2-core machine). ``sizes``: training sizes (the MCMC
    reference runs at the first, unless ``hmc`` is False). The filter is followed by
    ``RIBPFilter.refine`` over its training rows, from the filter's features and from none.
    """
    from scipy.special import logsumexp
    from sklearn.decomposition import PCA, FactorAnalysis

    num_test = 200 if quick else 500
    num_is = 2000  # importance samples of the filter's log_predictive
    hmc_iters = hmc_iters or (60 if quick else 150)
    sizes = sizes or (QUALITY_SIZES[:1] if quick else QUALITY_SIZES)
    z_all, a_true, obs_all = synthetic(max(sizes) + num_test, seed=1)
    test = obs_all[-num_test:]
    print(
        f"\n== 3. held-out negative log predictive per observation ({num_test} test rows from the"
        f" same IBP draw; α={ALPHA:g}, β={BETA:g}, D={DIM}, σ_A={SIGMA_A:g}, σ_o={SIGMA_O:g})"
    )
    print(
        f"oracle estimator vs exact enumeration (K=10, 40 rows): "
        f"max |error| = {check_estimator():.1f} s.e."
    )
    rows = []  # (N, method, per-row log predictive, found, matched, true, seconds, note)
    for n in sizes:
        train, z_train = obs_all[:n], z_all[:n]
        used = z_train.sum(0) > 0
        true_k, true_feats = int(used.sum()), a_true[used]
        oracle, oracle_se = ibp_log_predictive(
            test,
            true_feats,
            z_train[:, used].sum(0) / (BETA + n),
            ALPHA * BETA / (BETA + n),
            random.PRNGKey(1),
        )
        rows.append(
            (
                n,
                "oracle: true A, exact IBP predictive",
                oracle,
                true_k,
                true_k,
                true_k,
                0.0,
                f"IS 1000, max s.e. {oracle_se.max():.3f}",
            )
        )

        for mode in ("memoized", "paper"):
            filt = RIBPFilter(linear_gaussian, feature_update=mode)
            fit = functools.partial(
                filt.run, random.PRNGKey(0), train, chunk_size=512, progress_bar=False, **KWARGS
            )
            res, row = timed_fit(fit, test, true_feats, num_is)
            pairs = num_matched_by_pairs(np.asarray(res.features["mean"]), true_feats)
            note = (
                f"IS {num_is}; ρ_N = {res.traces['num_features'][-1]:.1f};"
                f" matched by a sum or difference of two: {pairs}"
            )
            rows.append(
                (n, f"R-IBP filter, feature_update={mode!r}", *row[:3], true_k, row[3], note)
            )
        for start in ("filter", "empty"):  # refinement of the paper's update (the last `res`)
            fit = functools.partial(res.refine, train, num_passes=REFINE_PASSES, start=start)
            row = timed_fit(fit, test, true_feats, num_is)[1]
            note = f"IS {num_is}; {REFINE_PASSES} passes"
            rows.append((n, f"  + refine, start={start!r}", *row[:3], true_k, row[3], note))

        if hmc and n == sizes[0]:
            truncation = 16 * -(-int(1.1 * true_k) // 16)  # >= the truth, a multiple of 16
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                samples, seconds = hmc_gibbs(train, truncation, hmc_iters, hmc_iters)
            draws = np.linspace(0, hmc_iters - 1, 30).astype(int)
            per_draw = np.stack(
                [
                    ibp_log_predictive(
                        test,
                        samples["A"][s],
                        samples["pi"][s],
                        0.0,
                        random.PRNGKey(2 + s),
                        num_samples=500,
                    )[0]
                    for s in draws
                ]
            )  # posterior predictive: log of the mean over draws of p(o | draw)
            lp = logsumexp(per_draw, axis=0) - np.log(len(draws))
            last = samples["z"][-1].sum(0) > 0
            rows.append(
                (
                    n,
                    f"NumPyro DiscreteHMCGibbs+NUTS, K={truncation}",
                    lp,
                    int(last.sum()),
                    num_matched(samples["A"][-1][last], true_feats),
                    true_k,
                    seconds,
                    f"{hmc_iters}+{hmc_iters} iterations, 30 draws, IS 500",
                )
            )

        k_lin = min(true_k, DIM - 1)  # at most D - 1 factors (PCA needs a noise dimension)
        for name, model in (("sklearn FactorAnalysis", FactorAnalysis), ("sklearn PCA", PCA)):
            t0 = time.perf_counter()
            options = {"svd_method": "lapack"} if model is FactorAnalysis else {}
            fitted = model(n_components=k_lin, **options).fit(train)
            seconds = time.perf_counter() - t0
            rows.append(
                (
                    n,
                    f"{name}, K={k_lin}",
                    fitted.score_samples(test),
                    None,
                    None,
                    true_k,
                    seconds,
                    "Gaussian latent factors",
                )
            )

    oracles = {n: lp for n, name, lp, *_ in rows if name.startswith("oracle")}
    columns = (
        Column("N", 6, ","), Column("method", 40, align="<", gap="  "), Column("NLL/obs", 8, ".2f"),
        Column("Δ oracle ± s.e.", 16), Column("found", 6), Column("matched", 8), Column("true", 5),
        Column("fit s", 7, ".1f"), Column("note", align="<", gap="  "),
    )  # fmt: skip
    lines = []
    for n, name, lp, found, matched, true_k, seconds, note in rows:
        gap = oracles[n] - lp
        gap_txt = f"{gap.mean():7.2f} ± {gap.std(ddof=1) / np.sqrt(len(gap)):5.2f}"
        lines.append((n, name, -lp.mean(), gap_txt, found, matched, true_k, seconds, note))
    print_table(columns, lines)
    print(
        f"found: features the method keeps (filter: existence > 1/2; MCMC: columns used in the last"
        f" draw); matched: true features with a found one within {MATCH_TOL:.0%} of their norm;"
        " fit s includes compilation"
    )


def proposal_bias(sizes=QUALITY_SIZES, num_test=500, num_samples=2000, seed=1):
    """Section 4: bias of ``RIBPFilter.log_predictive`` on a state that holds the true features.

    The state has the true features used by the first ``N`` rows (variance 0, ``S_k`` their true
    counts, created), unborn slots at the prior, and ``num_seen = N``. Its target differs from
    the oracle's only in the prior of new features (the R-IBP spreads them over slots), so the
    oracle's sampler is also run on the filter's own target: the unborn slots share the marginal
    ``N(0, σ_A²)``, so ``p(o | z)`` depends on them only through their number ``j``, whose
    prior is the Poisson-binomial of their ``π_k``.
    """
    z_all, a_true, obs_all = synthetic(max(sizes) + num_test, seed=seed)
    test = obs_all[-num_test:]
    print(
        f"\n== 4. log_predictive bias on a state holding the true features ({num_test} test rows,"
        f" {num_samples} samples; filter minus reference, nats; 'own': the filter's own target)"
    )
    columns = (
        Column("N", 6, ","), Column("mean", 8, ".3f"), Column("median", 8, ".4f"),
        Column("< -5", 5), Column("< -1", 5), Column("worst", 8, ".1f"),
        Column("own mean", 9, ".3f"), Column("own worst", 10, ".1f"), Column("s", 6, ".1f"),
    )  # fmt: skip
    table = Table(columns)
    table.header()
    for n in sizes:
        z_train = z_all[:n]
        used = z_train.sum(0) > 0
        k, feats, counts = int(used.sum()), a_true[used], z_train[:, used].sum(0)
        oracle, _ = ibp_log_predictive(
            test, feats, counts / (BETA + n), ALPHA * BETA / (BETA + n), random.PRNGKey(1)
        )
        capacity = k + 24
        filt = RIBPFilter(linear_gaussian, max_features=capacity)
        state = filt.init(random.PRNGKey(0), **KWARGS)
        pad = np.zeros(capacity - k, np.float32)
        state = state._replace(
            mean=state.mean.at[:k].set(feats),
            var=state.var.at[:k].set(0.0),
            running_sum=jnp.asarray(np.concatenate([counts, pad]), state.running_sum.dtype),
            existence=jnp.asarray(np.concatenate([np.ones(k), pad]), state.existence.dtype),
            num_seen=jnp.asarray(n, state.num_seen.dtype),
        )
        eps = np.finfo(np.float32).eps  # the filter's clip
        prior = np.clip(np.asarray(filt.prior(state), np.float64), eps, 1.0 - eps)
        pj = np.zeros(capacity - k + 1)
        pj[0] = 1.0
        for p in prior[k:]:  # Poisson-binomial number of unborn slots switched on
            pj[1:] = pj[1:] * (1 - p) + pj[:-1] * p
            pj[0] *= 1 - p
        own, _ = _ibp_log_predictive(
            jnp.asarray(test, jnp.float32),
            jnp.asarray(feats, jnp.float32),
            jnp.clip(jnp.asarray(prior[:k], jnp.float32), 1e-20, 1.0 - 1e-6),
            jnp.asarray(np.log(np.maximum(pj[: MAX_NEW + 1], 1e-300)), jnp.float32),
            random.split(random.PRNGKey(1), num_test),
            1000,
        )
        t0 = time.perf_counter()
        lp = filt.log_predictive(state, test, rng_key=random.PRNGKey(7), num_samples=num_samples)
        lp = np.asarray(jax.block_until_ready(lp), np.float64)
        seconds = time.perf_counter() - t0
        d, e = lp - oracle, lp - np.asarray(own, np.float64)
        table.row(
            n, d.mean(), np.median(d), int((d < -5).sum()), int((d < -1).sum()), d.min(),
            e.mean(), e.min(), seconds,
        )  # fmt: skip
    print("s: the filter's log_predictive, including compilation")
