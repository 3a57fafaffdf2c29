"""RecursiveIBP marginals and prior sampling against plain NumPy/SciPy peers.

Setting (issue "Package foundation"): N = 1,000 customers, α = 10, β = 5, 10,000 draws.

* ``marginals()`` (jitted, vectorised closed form) vs the R-IBP recursion row by row with SciPy
  Poisson CDFs, as reference implementations compute it.
* ``sample`` (one ``lax.scan`` over customers, vmapped over draws, jitted in chunks) vs two NumPy
  buffet samplers: the plain one (a Python loop over customers for each draw; timed on
  ``--plain-draws`` draws and scaled, since 10,000 draws take minutes) and one vectorised over
  draws (a Python loop over customers only).

Run: ``python -m numpyro_bnp bench restricted_ibp --ibp-prior [--num-samples S] [--chunk C]``.
Prints a table of times and ratios (peer time / ours); float32, the library default.
"""

import jax
import numpy as np
from jax import random
from scipy import stats

from numpyro_bnp._report import Column, median_seconds, print_table, timed
from numpyro_bnp.distributions import RecursiveIBP, ibp_capacity


def numpy_marginals(alpha, beta, num_rows, num_cols):
    """R-IBP recursion (Eq. 4), one row at a time, SciPy Poisson CDFs at k - 1."""
    k = np.arange(1, num_cols + 1)
    p = np.empty((num_rows, num_cols))
    running = np.zeros(num_cols)
    rate_prev = 0.0
    for n in range(1, num_rows + 1):
        rate = rate_prev + alpha * beta / (beta + n - 1)
        p[n - 1] = running / (beta + n - 1) + stats.poisson.cdf(k - 1, rate_prev)
        p[n - 1] -= stats.poisson.cdf(k - 1, rate)
        running += p[n - 1]
        rate_prev = rate
    return p


def numpy_buffet(rng, alpha, beta, num_rows, num_cols, num_draws):
    """Buffet process for ``num_draws`` draws at once; returns (draws, N, K) uint8 and overflow."""
    z = np.zeros((num_draws, num_rows, num_cols), np.uint8)
    counts = np.zeros((num_draws, num_cols))
    dishes = np.zeros(num_draws, np.int64)
    cols = np.arange(num_cols)
    overflow = np.zeros(num_draws, bool)
    for n in range(1, num_rows + 1):
        denom = beta + n - 1
        row = rng.random((num_draws, num_cols)) * denom < counts
        new = rng.poisson(alpha * beta / denom, num_draws)
        row |= (cols >= dishes[:, None]) & (cols < (dishes + new)[:, None])
        overflow |= dishes + new > num_cols
        dishes = np.minimum(dishes + new, num_cols)
        counts += row
        z[:, n - 1] = row
    return z, overflow


def plain_buffet(rng, alpha, beta, num_rows, num_cols):
    """The buffet process for one draw, customer by customer."""
    z = np.zeros((num_rows, num_cols), np.uint8)
    counts = np.zeros(num_cols)
    dishes = 0
    for n in range(1, num_rows + 1):
        denom = beta + n - 1
        z[n - 1, :dishes] = rng.random(dishes) < counts[:dishes] / denom
        new = min(rng.poisson(alpha * beta / denom), num_cols - dishes)
        z[n - 1, dishes : dishes + new] = 1
        dishes += new
        counts += z[n - 1]
    return z


def add_arguments(parser):
    """The options of ``--ibp-prior``."""
    parser.add_argument("--num-rows", type=int, default=1_000, help="--ibp-prior: customers")
    parser.add_argument("--alpha", type=float, default=10.0, help="--ibp-prior: α")
    parser.add_argument("--beta", type=float, default=5.0, help="--ibp-prior: β")
    parser.add_argument("--num-samples", type=int, help="--ibp-prior: draws (10,000; quick 2,000)")
    parser.add_argument("--chunk", type=int, default=500, help="--ibp-prior: draws per call")
    parser.add_argument(
        "--plain-draws", type=int, help="--ibp-prior: draws of the plain peer (200; quick 50)"
    )


def bench_ibp_prior(args):
    """The table (module docstring)."""
    num_samples = args.num_samples or (2_000 if args.quick else 10_000)
    plain_draws = args.plain_draws or (50 if args.quick else 200)
    num_rows, alpha, beta = args.num_rows, args.alpha, args.beta
    capacity = ibp_capacity(alpha, beta, num_rows=num_rows, tail_prob=1e-6)
    ibp = RecursiveIBP(alpha, beta, num_rows=num_rows, max_features=capacity)
    print(
        f"N={num_rows} alpha={alpha} beta={beta} capacity={capacity} jax {jax.__version__} "
        f"backend={jax.default_backend()} devices={jax.device_count()}"
    )

    # -- marginals
    marginals = jax.jit(lambda d: d.marginals())
    p, ours_m, compile_m = timed(lambda _: marginals(ibp), repeats=5)
    peer_m, p_ref = median_seconds(lambda: numpy_marginals(alpha, beta, num_rows, capacity), 2)
    max_diff = float(np.abs(np.asarray(p, np.float64) - p_ref).max())

    # -- sampling
    num_chunks = num_samples // args.chunk
    draws = num_chunks * args.chunk

    @jax.jit
    def sample_chunk(key):
        z, (overflow,) = ibp.sample_with_intermediates(key, (args.chunk,))
        return z, overflow

    compile_s, _ = median_seconds(lambda: sample_chunk(random.PRNGKey(0)))

    def ours_sampling():
        keys = random.split(random.PRNGKey(1), num_chunks)
        dishes = 0.0
        for key in keys:
            z, _ = sample_chunk(key)
            dishes += float((z.sum(-2) > 0).sum())
        return dishes / draws

    ours_s, dishes_ours = median_seconds(ours_sampling)

    def peer_sampling():
        rng = np.random.default_rng(1)
        dishes = 0.0
        for _ in range(num_chunks):
            z, _ = numpy_buffet(rng, alpha, beta, num_rows, capacity, args.chunk)
            dishes += float((z.sum(-2) > 0).sum())
        return dishes / draws

    peer_s, dishes_peer = median_seconds(peer_sampling)
    rng = np.random.default_rng(2)
    plain_s, _ = median_seconds(
        lambda: [plain_buffet(rng, alpha, beta, num_rows, capacity) for _ in range(plain_draws)]
    )
    plain_s *= draws / plain_draws
    expected = float(ibp.expected_num_features()[-1])

    print()
    print_table(
        (
            Column("task", 34, align="<"), Column("ours (s)", 10, ".4f"),
            Column("peer (s)", 10, ".4f"), Column("peer/ours", 10, ".1f"),
            Column("peer", align="<", gap="  "),
        ),
        [
            ("marginals(), N x K", ours_m, peer_m, peer_m / ours_m, "SciPy recursion, row by row"),
            (
                f"sample {draws} draws", f"{ours_s:.2f}", f"{peer_s:.2f}",
                f"{peer_s / ours_s:.2f}", "NumPy buffet, vectorised over draws",
            ),
            (
                f"sample {draws} draws", f"{ours_s:.2f}", f"{plain_s:.2f}",
                f"{plain_s / ours_s:.2f}",
                f"NumPy buffet, one draw at a time (timed on {plain_draws}, scaled)",
            ),
        ],
    )  # fmt: skip
    print()
    print(f"compile: marginals {compile_m:.2f} s, sample chunk {compile_s:.2f} s")
    print(f"marginals: max |float32 - SciPy float64| = {max_diff:.2e}")
    print(
        f"mean number of dishes: exact {expected:.2f}, ours {dishes_ours:.2f}, "
        f"NumPy {dishes_peer:.2f} (s.e. {np.sqrt(expected / draws):.2f})"
    )
