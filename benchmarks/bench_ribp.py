"""Benchmark of the R-IBP streaming filter on synthetic linear-Gaussian data.

    python benchmarks/bench_ribp.py            # full run (a few minutes on 2 cores)
    python benchmarks/bench_ribp.py --quick    # smaller N, fewer MCMC samples

Data: Z ~ IBP(α = 10, β = 1), A_k ~ N(0, I_50), o_n = z_n A + N(0, 0.5² I). Prints

1. throughput (float32, D = 50) with 64 and 128 fixed slots, compile time, and a plain NumPy
   implementation of the same step (Python loop over observations) as the naive reference;
2. time and state memory vs N (capacity grows as features accumulate), peak RSS;
3. held-out negative log predictive per observation at N = 200 training rows: the filter
   (importance-sampled, features integrated out), the oracle (true features, IBP predictive given
   the true Z), NumPyro's DiscreteHMCGibbs + NUTS on a truncated beta-Bernoulli version of the
   model,
   and scikit-learn FactorAnalysis / PCA with K = min(true number of features, D - 1);
4. number of features recovered vs the truth.
"""

import argparse
import resource
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_bnp.distributions import RecursiveIBP
from numpyro_bnp.infer import RIBPFilter, RIBPState
from numpyro_bnp.models import linear_gaussian

ALPHA, BETA, DIM, SIGMA_A, SIGMA_O = 10.0, 1.0, 50, 1.0, 0.5
KWARGS = dict(num_obs=1, dim=DIM, alpha=ALPHA, beta=BETA, sigma_a=SIGMA_A, sigma_o=SIGMA_O)


def synthetic(num_rows, seed=0):
    """IBP feature matrix, true features and observations (float32)."""
    capacity = 256
    z = RecursiveIBP(ALPHA, BETA, num_rows=num_rows, max_features=capacity)
    z = np.asarray(z.sample(random.PRNGKey(seed)), np.float32)
    rng = np.random.default_rng(seed)
    a = (SIGMA_A * rng.normal(size=(capacity, DIM))).astype(np.float32)
    obs = z @ a + SIGMA_O * rng.normal(size=(num_rows, DIM)).astype(np.float32)
    return z, a, obs.astype(np.float32)


def throughput(obs, capacity, chunk=512):
    filt = RIBPFilter(linear_gaussian, max_features=capacity)
    state = filt.init(random.PRNGKey(0), **KWARGS)
    valid = np.ones(chunk, bool)
    t0 = time.perf_counter()
    compiled = filt.scan_chunk.lower(state, obs[:chunk], valid).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(state, obs[:chunk], valid))
    usable = len(obs) // chunk * chunk
    t0 = time.perf_counter()
    for i in range(0, usable, chunk):
        state, _ = compiled(state, obs[i : i + chunk], valid)
    jax.block_until_ready(state)
    return usable / (time.perf_counter() - t0), compile_s


def numpy_reference(obs, capacity, num_steps=3):
    """The same step in plain NumPy, one observation at a time (prior, 3 sweeps, statistics).

    Filtering prior from SciPy's Poisson CDF; isotropic Gaussian features; ossification.
    """
    from scipy.stats import poisson

    lam = 1.0 / SIGMA_O**2
    mean = np.zeros((capacity, DIM))
    var = np.full((capacity, DIM), SIGMA_A**2)
    running, exist = np.zeros(capacity), np.zeros(capacity)
    k = np.arange(capacity)
    eps = 1e-7
    t0 = time.perf_counter()
    for n, o in enumerate(obs):
        rate = exist.sum()
        new = ALPHA * BETA / (BETA + n)
        created = poisson.cdf(k, rate) - poisson.cdf(k, rate + new)
        q = np.clip(running / (BETA + n) + created, eps, 1 - eps)
        logit0 = np.log(q) - np.log1p(-q)
        b, mu0, var0 = q.copy(), mean.copy(), var.copy()
        mu = mean.copy()
        for step in range(num_steps):
            resid = o - b @ mu
            order = k if step % 2 == 0 else k[::-1]
            for l in order:
                r = resid + b[l] * mu[l]
                v = 1.0 / (1.0 / var0[l] + b[l] * lam)
                m = v * (mu0[l] / var0[l] + b[l] * lam * r)
                tot = b[l] + running[l]
                if tot > 0:
                    mu[l] = (b[l] * m + running[l] * mu0[l]) / tot
                    var[l] = (b[l] * v + running[l] * var0[l]) / tot
                logit = logit0[l] + lam * mu[l] @ r - 0.5 * lam * (mu[l] @ mu[l] + var[l].sum())
                b[l] = 0.5 * (1.0 + np.tanh(0.5 * logit))  # stable sigmoid
                resid = r - b[l] * mu[l]
        share = np.clip(1.0 - running / (BETA + n) / q, 0, 1)
        exist = np.minimum(exist + b * share, 1 - eps)
        running += b
        mean = mu
    return len(obs) / (time.perf_counter() - t0)


def state_with_features(means, probs, num_seen, capacity, var=1e-10):
    """A filter state whose first slots hold given features used with given probabilities.

    The filtering prior of such a state is ``probs`` for those slots (``S_k = p_k (β + n)``, the
    feature exists), plus the IBP's new-feature mass on the free slots, whose features keep their
    prior N(0, σ_A²): its predictive is the IBP predictive given the features.
    """
    k = len(means)
    mean = np.zeros((capacity, DIM), np.float32)
    mean[:k] = means
    variance = np.full((capacity, DIM), SIGMA_A**2, np.float32)
    variance[:k] = var
    running = np.zeros(capacity, np.float32)
    running[:k] = probs * (BETA + num_seen)
    exist = np.zeros(capacity, np.float32)
    exist[:k] = 1.0 - 1e-6
    return RIBPState(
        jnp.asarray(mean),
        jnp.asarray(variance),
        jnp.asarray(running),
        jnp.asarray(exist),
        jnp.asarray(num_seen, jnp.int32),
        jnp.asarray(0.0, jnp.float32),
    )


def hmc_gibbs(train, truncation, num_samples, seed=0):
    """NumPyro DiscreteHMCGibbs(NUTS) on the truncated model π_k ~ Beta(αβ/K, β)."""
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS, DiscreteHMCGibbs

    def truncated(obs):
        pi = numpyro.sample("pi", dist.Beta(ALPHA * BETA / truncation, BETA).expand([truncation]))
        a = numpyro.sample("A", dist.Normal(0.0, SIGMA_A).expand([truncation, DIM]).to_event(2))
        with numpyro.plate("rows", obs.shape[0], dim=-2):
            z = numpyro.sample("z", dist.Bernoulli(pi).to_event(0))
        numpyro.sample("obs", dist.Normal(z @ a, SIGMA_O).to_event(2), obs=obs)

    kernel = DiscreteHMCGibbs(NUTS(truncated), modified=True)
    mcmc = MCMC(kernel, num_warmup=num_samples, num_samples=num_samples, progress_bar=False)
    t0 = time.perf_counter()
    mcmc.run(random.PRNGKey(seed), jnp.asarray(train))
    return mcmc.get_samples(), time.perf_counter() - t0


def held_out_nll(filt, state, test, num_samples=2000):
    return -float(jnp.mean(filt.log_predictive(state, test, num_samples=num_samples)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    print(f"backend {jax.default_backend()}, {jax.device_count()} device(s), float32, D={DIM}")
    z_all, a_true, obs_all = synthetic(max(sizes) + 300)

    print("\n== 1. throughput (fixed slots, chunks of 512, float32, D=50)")
    print(f"{'slots':>6} {'obs/s':>10} {'compile s':>10} {'NumPy obs/s':>12} {'speed-up':>9}")
    for capacity in (64, 128):
        rate, compile_s = throughput(obs_all[:20_480], capacity)
        ref = numpy_reference(obs_all[:200].astype(np.float64), capacity)
        print(f"{capacity:>6} {rate:>10,.0f} {compile_s:>10.2f} {ref:>12,.0f} {rate / ref:>8.0f}x")

    print("\n== 2. time and memory vs N (capacity grows from 16 slots, chunks of 512)")
    print(
        f"{'N':>8} {'time s':>8} {'obs/s':>8} {'slots':>6} {'state KiB':>10} "
        f"{'features':>9} {'true':>5} {'peak RSS MiB':>13}"
    )
    for n in sizes:
        filt = RIBPFilter(linear_gaussian)
        t0 = time.perf_counter()
        res = filt.run(random.PRNGKey(0), obs_all[:n], chunk_size=512, progress_bar=False, **KWARGS)
        jax.block_until_ready(res.state)
        elapsed = time.perf_counter() - t0
        kib = sum(np.asarray(x).nbytes for x in res.state) / 1024
        truth = int((z_all[:n].sum(0) > 0).sum())
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"{n:>8,} {elapsed:>8.1f} {n / elapsed:>8,.0f} {res.state.mean.shape[0]:>6} "
            f"{kib:>10.1f} {res.traces['num_features'][-1]:>9.1f} {truth:>5} {rss:>13.0f}"
        )

    print("\n== 3. held-out negative log predictive per observation (N=200 train, 300 test)")
    n_train = 200
    train, test = obs_all[:n_train], obs_all[-300:]
    z_train = z_all[:n_train]
    used = z_train.sum(0) > 0
    true_k = int(used.sum())
    rows = []
    filt = RIBPFilter(linear_gaussian)
    t0 = time.perf_counter()
    res = filt.run(random.PRNGKey(0), train, chunk_size=200, progress_bar=False, **KWARGS)
    rows.append(
        (
            "R-IBP filter (this library)",
            held_out_nll(filt, res.state, test),
            time.perf_counter() - t0,
            f"{res.traces['num_features'][-1]:.1f} features",
        )
    )
    capacity = res.state.mean.shape[0]
    probs = z_train[:, used].sum(0) / (BETA + n_train)
    oracle = state_with_features(a_true[used], probs, n_train, max(capacity, 2 * true_k))
    rows.append(
        (
            "oracle: true A, IBP predictive given Z",
            held_out_nll(filt, oracle, test),
            float("nan"),
            f"{true_k} true features",
        )
    )

    truncation = 2 * true_k
    num_samples = 100 if args.quick else 300
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples, seconds = hmc_gibbs(train, truncation, num_samples)
    draws = np.linspace(0, num_samples - 1, 20).astype(int)
    per_draw = []
    for s in draws:
        st = state_with_features(
            np.asarray(samples["A"][s]), np.asarray(samples["pi"][s]), n_train, truncation + 8
        )
        per_draw.append(np.asarray(filt.log_predictive(st, test, num_samples=1000)))
    per_draw = np.stack(per_draw)  # posterior predictive: mean of p over draws
    lp = np.log(np.mean(np.exp(per_draw - per_draw.max(0)), 0)) + per_draw.max(0)
    rows.append(
        (
            f"NumPyro DiscreteHMCGibbs+NUTS, K={truncation}",
            -float(lp.mean()),
            seconds,
            f"{num_samples}+{num_samples} iterations",
        )
    )

    from sklearn.decomposition import PCA, FactorAnalysis

    k_lin = min(true_k, DIM - 1)  # at most D - 1 Gaussian factors
    for name, model in (("sklearn FactorAnalysis", FactorAnalysis), ("sklearn PCA", PCA)):
        t0 = time.perf_counter()
        fitted = model(n_components=k_lin).fit(train)
        rows.append(
            (
                f"{name}, K={k_lin}",
                -float(fitted.score_samples(test).mean()),
                time.perf_counter() - t0,
                "Gaussian latent factors",
            )
        )
    print(f"{'method':<42} {'NLL/obs':>9} {'fit s':>7}  note")
    for name, nll, sec, note in rows:
        print(f"{name:<42} {nll:>9.2f} {sec:>7.2f}  {note}")


if __name__ == "__main__":
    main()
