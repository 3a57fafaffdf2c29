"""Soak test of the streaming loop: a long stream through the R-IBP filter, memory over time.

    python -m numpyro_bnp bench soak                      # 10^6 observations (a few minutes)
    python -m numpyro_bnp bench soak --num-obs 200000     # shorter

The run calls :func:`numpyro_bnp.enable_cpu_loop_kernels` first (each CPU loop compiled into one
kernel) unless ``--xla-default`` is given (docs/ribp.md, "Streaming, checkpoints, capacity").

Data: a Python generator of batches of ``--batch`` rows (1,000 by default) of linear-Gaussian
data, D = 20, from 5 true features used with probability 0.3 each, o_n = z_n A + N(0, 0.5² I),
float32. The stream goes through :class:`~numpyro_bnp.infer.RIBPFilter` (capacity growing from
16 slots, no progress bar) twice, each in a fresh process so that the memory figures do not mix:
with ``trace_every=1000`` (the traces take O(T / 1000)) and with ``trace_every=1`` (every step's
diagnostics kept, about 28 bytes per observation). The generator samples the resident set size
(RSS, from ``/proc/self/statm``, else the peak from ``resource``) ten times along the stream and
the script prints, for each run, the observations absorbed, RSS in MiB, elapsed seconds,
observations per second and whether the state is finite (the loop checks every chunk and would
have stopped with ``NonFiniteStateError``; the last row checks the final state itself).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

from numpyro_bnp._report import Column, print_table

HELP = (
    "Each of the two streams runs in a fresh process (python -m numpyro_bnp bench soak --single "
    "TRACE_EVERY ...) so that the memory figures do not mix; --quick streams 100,000 "
    "observations instead of --num-obs."
)
QUICK_HELP = "10^5 observations (see below)"
CPU_LOOP_KERNELS = True

DIM, NUM_TRUE, SIGMA_O = 20, 5, 0.5
KWARGS = dict(num_obs=1, dim=DIM, mass=2.0, concentration=1.0, sigma_a=1.0, sigma_o=SIGMA_O)


def rss_mib():
    """Current resident set size in MiB (``/proc/self/statm``), else the peak (``resource``)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        return peak / 1024


def batches(num_obs, batch, samples, t0, seed=0):
    """Yield ``num_obs`` rows in batches; record ``(absorbed, RSS, elapsed)`` along the way.

    With ``chunk_size == batch`` the loop absorbs each batch before it asks for the next, so the
    rows yielded before a request are the rows absorbed.
    """
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(NUM_TRUE, DIM))
    every = max(batch, num_obs // 10 // batch * batch)
    for start in range(0, num_obs, batch):
        if start and start % every == 0:
            samples.append((start, rss_mib(), time.perf_counter() - t0))
        n = min(batch, num_obs - start)
        z = rng.random((n, NUM_TRUE)) < 0.3
        yield (z @ features + SIGMA_O * rng.normal(size=(n, DIM))).astype(np.float32)


def soak(num_obs, batch, trace_every):
    """One stream in this process; returns the samples and the final figures as a dict."""
    import jax
    from jax import random

    from numpyro_bnp.infer import RIBPFilter
    from numpyro_bnp.models import linear_gaussian

    filt = RIBPFilter(linear_gaussian)
    # compile outside the timed stream (one chunk of the starting capacity)
    filt.run(
        random.PRNGKey(0),
        np.zeros((batch, DIM), np.float32),
        chunk_size=batch,
        progress_bar=False,
        **KWARGS,
    )
    samples = [(0, rss_mib(), 0.0)]
    t0 = time.perf_counter()
    result = filt.run(
        random.PRNGKey(0),
        batches(num_obs, batch, samples, t0),
        chunk_size=batch,
        progress_bar=False,
        trace_every=trace_every,
        **KWARGS,
    )
    jax.block_until_ready(result.state)
    elapsed = time.perf_counter() - t0
    finite = all(bool(np.isfinite(np.asarray(leaf)).all()) for leaf in result.state)
    samples.append((int(result.state.num_seen), rss_mib(), elapsed))
    return {
        "samples": samples,
        "finite": finite,
        "trace_rows": len(result.time),
        "trace_bytes": sum(v.nbytes for v in result.traces.values()) + result.time.nbytes,
        "capacity": filt.capacity(result.state),
        "features": float(result.traces["num_features"][-1]),
    }


def print_soak(trace_every, out):
    """The table of one stream ``out`` (:func:`soak`)."""
    print(
        f"\ntrace_every = {trace_every}: {out['trace_rows']:,} trace rows kept "
        f"({out['trace_bytes'] / 2**20:.2f} MiB), capacity {out['capacity']}, "
        f"{out['features']:.1f} features"
    )
    samples = out["samples"]
    rows = []
    for i, (absorbed, rss, elapsed) in enumerate(samples):
        last = i == len(samples) - 1
        finite = ("yes" if out["finite"] else "NO") if last else "yes (checked per chunk)"
        rows.append((absorbed, rss, elapsed, absorbed / elapsed if elapsed > 0 else None, finite))
    print_table(
        (
            Column("observations", 12, ","), Column("RSS MiB", 9, ".1f"),
            Column("elapsed s", 10, ".1f"), Column("obs/s", 9, ".0f"),
            Column("state finite", align="<", gap="  "),
        ),
        rows,
    )  # fmt: skip
    first, end = samples[1] if len(samples) > 2 else samples[0], samples[-1]
    growth = (end[1] - first[1]) / max(end[0] - first[0], 1) * 2**20
    print(
        f"RSS growth after the first sample: {end[1] - first[1]:+.1f} MiB "
        f"({growth:+.1f} bytes per observation)"
    )


def add_arguments(parser):
    """The options of ``bench soak`` besides ``--quick``."""
    parser.add_argument(
        "--num-obs", type=int, help="observations streamed (default 10^6; quick 10^5)"
    )
    parser.add_argument("--batch", type=int, default=1000, help="rows per generated batch")
    parser.add_argument("--single", type=int, default=None, help=argparse.SUPPRESS)


def run(args):
    """Both streams, each in a child process (``--single``: one stream here, as JSON)."""
    num_obs = args.num_obs or (100_000 if args.quick else 1_000_000)
    if args.single is not None:  # the child process: one stream, figures as JSON on stdout
        print(json.dumps(soak(num_obs, args.batch, args.single)))
        return 0
    print(f"{num_obs:,} observations, batches of {args.batch}, D = {DIM}, float32")
    for trace_every in (1000, 1):
        cmd = [
            sys.executable, "-m", "numpyro_bnp", "bench", "soak", "--num-obs", str(num_obs),
            "--batch", str(args.batch), "--single", str(trace_every),
        ]  # fmt: skip
        if args.xla_default:
            cmd.append("--xla-default")
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        print_soak(trace_every, json.loads(done.stdout.strip().splitlines()[-1]))
    return 0
