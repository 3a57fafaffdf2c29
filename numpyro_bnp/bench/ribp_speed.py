"""The R-IBP filter's speed on synthetic linear-Gaussian data (``docs/ribp.md``, "Speed").

Data (:func:`synthetic`): ``Z ~ IBP(α = 10, β = 1)``, ``A_k ~ N(0, I_50)``, ``o_n = z_n A +
N(0, 0.5² I)``, float32. Sections of ``bench ribp``:

1. throughput (:func:`throughput_section`): rows per second of the compiled chunk scan with 64
   and 128 fixed slots, its compile time, and a plain NumPy implementation of the same step
   (:func:`numpy_reference`, a Python loop over observations) as the naive reference; then
   (:func:`throughput_curves`) both updates' rows per second against the number of slots (32
   to 256, D = 50) and against the dimension (10 to 784, 128 slots);
2. time and state memory against N (:func:`memory_section`): capacity growing from 16 slots as
   features accumulate, peak RSS.
"""

import os
import resource
import time
import warnings

import numpy as np

from numpyro_bnp._report import Column, Table, median_seconds

ALPHA, BETA, DIM, SIGMA_A, SIGMA_O = 10.0, 1.0, 50, 1.0, 0.5
KWARGS = dict(num_obs=1, dim=DIM, mass=ALPHA, concentration=BETA, sigma_a=SIGMA_A, sigma_o=SIGMA_O)


def synthetic(num_rows, seed=0, dim=DIM):
    """``(Z, A, obs)``: an IBP feature matrix ``(N, 256)``, the true features ``(256, dim)`` and
    the observations ``(N, dim)``, float32."""
    from jax import random

    from numpyro_bnp.distributions import RecursiveIBP

    capacity = 256
    z = RecursiveIBP(ALPHA, BETA, num_rows=num_rows, max_features=capacity)
    z = np.asarray(z.sample(random.PRNGKey(seed)), np.float32)
    rng = np.random.default_rng(seed)
    a = (SIGMA_A * rng.normal(size=(capacity, dim))).astype(np.float32)
    obs = z @ a + SIGMA_O * rng.normal(size=(num_rows, dim)).astype(np.float32)
    return z, a, obs.astype(np.float32)


def rows_per_second(filt, state, obs, chunk=512):
    """``(rows per second, compile seconds)`` of ``filt``'s compiled chunk scan (an
    ``RIBPFilter`` at a fixed capacity) from ``state`` over the first whole chunks of ``obs``,
    after a first chunk that warms up."""
    import jax

    valid = np.ones(chunk, bool)
    t0 = time.perf_counter()
    compiled = filt.scan_chunk.lower(state, obs[:chunk], valid).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(state, obs[:chunk], valid))
    usable = len(obs) // chunk * chunk

    def one_pass():
        s = state
        for i in range(0, usable, chunk):
            s, _ = compiled(s, obs[i : i + chunk], valid)
        return s

    seconds, _ = median_seconds(one_pass)
    return usable / seconds, compile_s


def throughput(obs, capacity, feature_update="paper"):
    """:func:`rows_per_second` of the linear-Gaussian filter with ``capacity`` fixed slots on
    the rows ``obs`` ``(N, D)``."""
    from jax import random

    from numpyro_bnp.infer import RIBPFilter
    from numpyro_bnp.models import linear_gaussian

    filt = RIBPFilter(linear_gaussian, max_features=capacity, feature_update=feature_update)
    state = filt.init(random.PRNGKey(0), **dict(KWARGS, dim=obs.shape[1]))
    return rows_per_second(filt, state, obs)


def numpy_reference(obs, capacity, num_steps=3):
    """Rows per second of the same step in plain NumPy, one observation at a time (prior, 3
    sweeps, statistics): the filtering prior from SciPy's Poisson CDF, isotropic Gaussian
    features, ossification (Schaeffer et al. 2022, Algorithm 1; ``docs/ribp.md``)."""
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


def throughput_section(obs_all):
    """Section 1 on the rows ``obs_all`` (at least 20,480)."""
    print("\n== 1. throughput (fixed slots, chunks of 512, float32, D=50)")
    columns = (
        Column("update", 9), Column("slots", 6), Column("obs/s", 10, ",.0f"),
        Column("compile s", 10, ".2f"), Column("NumPy obs/s", 12, ",.0f"),
        Column("speed-up", 9),
    )  # fmt: skip
    table = Table(columns)
    table.header()
    for capacity in (64, 128):
        ref = numpy_reference(obs_all[:200].astype(np.float64), capacity)
        for mode in ("paper", "memoized"):
            with warnings.catch_warnings():  # the memoized births fill a fixed capacity
                warnings.simplefilter("ignore", RuntimeWarning)
                rate, compile_s = throughput(obs_all[:20_480], capacity, feature_update=mode)
            table.row(mode, capacity, rate, compile_s, ref, f"{rate / ref:.0f}x")
    print("NumPy: the paper's update, one observation at a time")


CURVE_SLOTS = (32, 64, 128, 256)
CURVE_DIMS = (10, 50, 200, 784)


def throughput_curves(num_rows):
    """Rows per second of both updates over one pass of ``num_rows`` rows from the empty state
    (:func:`rows_per_second`) against the slots (:data:`CURVE_SLOTS`, D = 50) and the dimension
    (:data:`CURVE_DIMS`, 128 slots)."""
    print(f"\n== 1b. throughput vs slots and vs D ({num_rows:,} rows, chunks of 512, float32)")
    columns = (
        Column("slots", 6), Column("D", 5), Column("paper obs/s", 12, ",.0f"),
        Column("memoized obs/s", 15, ",.0f"), Column("memoized compile s", 19, ".2f"),
    )  # fmt: skip
    table = Table(columns)
    table.header()
    settings = [(k, DIM) for k in CURVE_SLOTS] + [(128, d) for d in CURVE_DIMS if d != DIM]
    data = {}
    for capacity, dim in settings:
        if dim not in data:
            data[dim] = synthetic(num_rows, seed=1, dim=dim)[2]
        with warnings.catch_warnings():  # the memoized births fill a fixed capacity
            warnings.simplefilter("ignore", RuntimeWarning)
            paper, _ = throughput(data[dim], capacity)
            memoized, compile_s = throughput(data[dim], capacity, feature_update="memoized")
        table.row(capacity, dim, paper, memoized, compile_s)


def memory_section(z_all, obs_all, sizes):
    """Section 2: one run of the filter on the first ``n`` rows for each ``n`` of ``sizes``."""
    import jax
    from jax import random

    from numpyro_bnp.infer import RIBPFilter
    from numpyro_bnp.models import linear_gaussian

    print("\n== 2. time and memory vs N (capacity grows from 16 slots, chunks of 512)")
    columns = (
        Column("N", 8, ","), Column("time s", 8, ".1f"), Column("obs/s", 8, ",.0f"),
        Column("slots", 6), Column("state KiB", 10, ".1f"), Column("features", 9, ".1f"),
        Column("true", 5), Column("peak RSS MiB", 13, ".0f"),
    )  # fmt: skip
    table = Table(columns)
    table.header()
    for n in sizes:
        filt = RIBPFilter(linear_gaussian)
        t0 = time.perf_counter()
        res = filt.run(random.PRNGKey(0), obs_all[:n], chunk_size=512, progress_bar=False, **KWARGS)
        jax.block_until_ready(res.state)
        elapsed = time.perf_counter() - t0
        kib = sum(np.asarray(x).nbytes for x in res.state) / 1024
        truth = int((z_all[:n].sum(0) > 0).sum())
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        table.row(
            n, elapsed, n / elapsed, res.state.mean.shape[0], kib,
            float(res.traces["num_features"][-1]), truth, rss,
        )  # fmt: skip


def speed_sections(quick, throughput_only):
    """Sections 1 and 2 (only 1 with ``throughput_only``)."""
    import jax

    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    print(
        f"backend {jax.default_backend()}, {jax.device_count()} device(s), float32, D={DIM}, "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
    )
    z_all, _, obs_all = synthetic(max(sizes) + 300)
    throughput_section(obs_all)
    throughput_curves(2_048 if quick else 8_192)
    if not throughput_only:
        memory_section(z_all, obs_all, sizes)
