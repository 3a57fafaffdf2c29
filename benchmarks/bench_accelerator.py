"""The engines' compiled step times on the backend JAX runs on (CPU or GPU).

    python benchmarks/bench_accelerator.py                   # every case, JAX's default backend
    JAX_PLATFORMS=cpu python benchmarks/bench_accelerator.py  # the same on the CPU
    python benchmarks/bench_accelerator.py --cases ribp gibbs_digits --json times.jsonl

Each case compiles its program once, runs it once to warm up and times a second run (compilation
reported apart). The cases are the engines' inner loops at the sizes of the other benchmarks:

* ``ribp``: ``RIBPFilter`` rows per second, linear-Gaussian, D = 50, 128 slots, 4,096 rows in
  chunks of 512 (the paper's update and ``feature_update="memoized"``), as in ``bench_ribp.py``;
* ``adf_digits`` / ``ep_digits``: ``ADFNRM`` (one pass) and ``EPNRM`` (5 passes) on
  scikit-learn's digits as 64-word count documents (1,438 training documents, DP), as in
  ``bench_engines.py``;
* ``gibbs_galaxies`` / ``gibbs_digits`` / ``gibbs_reuters``: ``NGGPMarginalGibbs`` seconds per
  sweep of four vectorized chains (galaxies: 66 rows, Normal–Gamma, 64 slots; digits as counts:
  1,438 documents, 192 slots; Reuters: 316 documents, 4,258 words, 192 slots);
* ``nuts_twin``: NumPyro's NUTS on the truncated stick-breaking twin ``models.dp_mixture`` of the
  galaxies model (T = 20), seconds per iteration of one chain;
* ``crm_slice``: ``CRMSlice`` seconds per sweep on the scaling benchmark's data at N = 5,000
  (``bench_crm_slice.py``), one chain;
* ``power_prior``: ``PowerPriorSVB`` (HPP) seconds per batch of 1,000 2-D rows.

Data: the galaxies shipped with the package (``numpyro_bnp.datasets``), scikit-learn's digits,
Reuters from ``pip install lda`` (the case is skipped, saying why, without it). ``--json``
appends one JSON line per case.
"""

import argparse
import json
import pathlib
import time

import numpy as np

CASES = (
    "ribp",
    "adf_digits",
    "ep_digits",
    "gibbs_galaxies",
    "gibbs_digits",
    "gibbs_reuters",
    "nuts_twin",
    "crm_slice",
    "power_prior",
)
NUM_CHAINS = 4


def row(value, unit, compile_s):
    return dict(value=value, unit=unit, compile_s=compile_s)


def compiled_seconds(step, state, reps):
    """``(seconds per step, compile seconds)`` of ``reps`` steps of ``step`` in one program."""
    import jax
    from jax import lax

    many = jax.jit(lambda s: lax.fori_loop(0, reps, lambda _, t: step(t), s))
    t0 = time.perf_counter()
    compiled = many.lower(state).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(state))
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(state))
    return (time.perf_counter() - t0) / reps, compile_s


def twice(run):
    """``(seconds of a second run, seconds of the first)``: the first compiles."""
    import jax

    t0 = time.perf_counter()
    jax.block_until_ready(run(0))
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(run(1))
    return time.perf_counter() - t0, cold


def case_ribp():
    import jax
    from jax import random

    from numpyro_bnp.distributions import RecursiveIBP
    from numpyro_bnp.infer import RIBPFilter
    from numpyro_bnp.models import linear_gaussian

    dim, capacity, chunk, num_rows = 50, 128, 512, 4_096
    kwargs = dict(num_obs=1, dim=dim, mass=10.0, concentration=1.0, sigma_a=1.0, sigma_o=0.5)
    z = RecursiveIBP(10.0, 1.0, num_rows=num_rows, max_features=256).sample(random.PRNGKey(0))
    rng = np.random.default_rng(0)
    obs = np.asarray(z, np.float32) @ rng.normal(size=(256, dim)).astype(np.float32)
    obs = (obs + 0.5 * rng.normal(size=obs.shape)).astype(np.float32)
    valid = np.ones(chunk, bool)
    rows = {}
    for update in ("paper", "memoized"):
        filt = RIBPFilter(linear_gaussian, max_features=capacity, feature_update=update)
        state = filt.init(random.PRNGKey(0), **kwargs)
        t0 = time.perf_counter()
        compiled = filt.scan_chunk.lower(state, obs[:chunk], valid).compile()
        compile_s = time.perf_counter() - t0
        jax.block_until_ready(compiled(state, obs[:chunk], valid))
        t0 = time.perf_counter()
        for i in range(0, num_rows, chunk):
            state, _ = compiled(state, obs[i : i + chunk], valid)
        jax.block_until_ready(state)
        seconds = time.perf_counter() - t0
        rows[f"RIBPFilter {update}, 128 slots"] = row(num_rows / seconds, "rows/s", compile_s)
    return rows


def digits_documents():
    import sklearn.datasets

    x = sklearn.datasets.load_digits().data.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(x))
    return x[perm[len(x) // 5 :]]


def reuters_documents():
    import lda.datasets

    x = np.asarray(lda.datasets.load_reuters())
    perm = np.random.default_rng(0).permutation(len(x))
    return x[perm[len(x) // 5 :]]


def documents_kwargs(train, concentration):
    return dict(
        vocab_size=train.shape[1], mass=1.0, sigma=0.0, tau=1.0, concentration=concentration
    )


def streaming_case(engine_cls, label, **options):
    from jax import random

    from numpyro_bnp import models

    train = digits_documents()
    kw = documents_kwargs(train, 0.2)
    engine = engine_cls(models.nggp_multinomial_mixture, new_cluster_threshold=0.5, **options)

    def run(seed):
        result = engine.run(random.PRNGKey(seed), train, progress_bar=False, **kw)
        return result.cluster_sizes

    seconds, cold = twice(run)
    return {label: row(len(train) / seconds, "docs/s", cold - seconds)}


def case_adf_digits():
    from numpyro_bnp.infer import ADFNRM

    return streaming_case(ADFNRM, "ADFNRM digits-as-counts, 1 pass")


def case_ep_digits():
    from numpyro_bnp.infer import EPNRM

    return streaming_case(EPNRM, "EPNRM digits-as-counts, 5 passes", num_passes=5)


def galaxies():
    from numpyro_bnp import datasets

    x = (datasets.galaxies() / 1000.0)[:, None]
    perm = np.random.default_rng(0).permutation(len(x))
    return x[perm[len(x) // 5 :]]


def galaxies_prior(train):
    return dict(loc=float(train.mean()), kappa=0.05, concentration=2.0, rate=2.0)


def gibbs_case(model, train, kwargs, label, reps):
    from jax import random
    from numpyro.infer import MCMC

    from numpyro_bnp.infer import NGGPMarginalGibbs

    kernel = NGGPMarginalGibbs(model)
    mcmc = MCMC(
        kernel,
        num_warmup=2,
        num_samples=1,
        num_chains=NUM_CHAINS,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), train, **kwargs)
    step = lambda s: kernel.sample(s, (train,), kwargs)  # noqa: E731 (vectorized inside)
    per_sweep, compile_s = compiled_seconds(step, mcmc.last_state, reps)
    return {label: row(per_sweep, "s/sweep (4 chains)", compile_s)}


def case_gibbs_galaxies():
    from numpyro_bnp import models

    train = galaxies()
    kw = dict(dim=1, mass=1.0, sigma=0.0, tau=1.0, num_obs=len(train), max_clusters=64)
    kw.update(galaxies_prior(train))
    label = "NGGPMarginalGibbs galaxies DP, 64 slots"
    return gibbs_case(models.nggp_diagonal_gaussian_mixture, train, kw, label, reps=50)


def case_gibbs_digits():
    from numpyro_bnp import models

    train = digits_documents()
    kw = dict(documents_kwargs(train, 0.2), num_obs=len(train), max_clusters=192)
    label = "NGGPMarginalGibbs digits-as-counts DP, 192 slots"
    return gibbs_case(models.nggp_multinomial_mixture, train, kw, label, reps=5)


def case_gibbs_reuters():
    from numpyro_bnp import models

    train = reuters_documents()
    kw = dict(documents_kwargs(train, 0.5), num_obs=len(train), max_clusters=192)
    label = "NGGPMarginalGibbs Reuters DP, 192 slots"
    return gibbs_case(models.nggp_multinomial_mixture, train, kw, label, reps=3)


def case_nuts_twin():
    import jax
    from jax import random
    from numpyro.infer import MCMC, NUTS

    from numpyro_bnp import models

    train = galaxies()
    kw = dict(
        num_obs=len(train), dim=1, mass=1.0, truncation=20, components="diagonal_gaussian",
        **galaxies_prior(train),
    )  # fmt: skip
    kernel = NUTS(models.dp_mixture)
    mcmc = MCMC(kernel, num_warmup=200, num_samples=1, progress_bar=False)
    mcmc.run(random.PRNGKey(0), train, **kw)
    step = jax.jit(lambda s: kernel.sample(s, (train,), kw))
    per_iter, compile_s = compiled_seconds(step, mcmc.last_state, reps=50)
    return {"NUTS dp_mixture twin galaxies, T = 20": row(per_iter, "s/iter (1 chain)", compile_s)}


def case_crm_slice():
    import math

    from jax import random
    from numpyro.infer import MCMC

    from numpyro_bnp.infer import CRMSlice
    from numpyro_bnp.models import linear_gaussian

    num_rows, mass, sigma_a, sigma_o = 5_000, 1.0, 0.5, 0.2  # bench_crm_slice.py's, N = 5,000
    truncation = 2 * math.ceil(math.log(num_rows))
    dim = 2 * math.ceil(num_rows * math.log(num_rows) / (num_rows - math.log(num_rows)))
    rng = np.random.default_rng(0)
    theta = np.exp(-np.cumsum(rng.exponential(size=truncation)) / mass)
    counts = (rng.random((num_rows, truncation)) < theta).astype(np.float32)
    features = sigma_a * rng.normal(size=(truncation, dim))
    obs = (counts @ features + sigma_o * rng.normal(size=(num_rows, dim))).astype(np.float32)
    kw = dict(
        num_obs=num_rows, dim=dim, mass=mass, concentration=1.0, sigma_a=sigma_a,
        sigma_o=sigma_o, max_features=64,
    )  # fmt: skip
    kernel = CRMSlice(linear_gaussian)
    mcmc = MCMC(kernel, num_warmup=5, num_samples=1, progress_bar=False)
    mcmc.run(random.PRNGKey(0), obs, **kw)
    per_sweep, compile_s = compiled_seconds(
        lambda s: kernel.sample(s, (obs,), kw), mcmc.last_state, reps=10
    )
    return {"CRMSlice linear-Gaussian N = 5,000": row(per_sweep, "s/sweep (1 chain)", compile_s)}


def case_power_prior():
    import jax
    from jax import random

    from numpyro_bnp.infer import PowerPriorSVB
    from numpyro_bnp.models import dp_mixture

    rng = np.random.default_rng(0)
    centres = np.array([[-4.0, 0.0], [0.0, 4.0], [4.0, 0.0]])
    batches = [
        (centres[rng.integers(3, size=1000)] + rng.normal(size=(1000, 2))).astype(np.float32)
        for _ in range(3)
    ]
    engine = PowerPriorSVB(dp_mixture, forgetting="hpp", gamma=0.1)
    prior = dict(loc=np.zeros(2), kappa=1.0, dof=4.0, scale_matrix=np.eye(2) / 4.0)
    state = engine.init(
        random.PRNGKey(0), dim=2, mass=1.0, truncation=20, components="gaussian", **prior
    )
    t0 = time.perf_counter()
    state, _ = engine.update(state, batches[0])
    jax.block_until_ready(state)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    for batch in batches[1:]:
        state, _ = engine.update(state, batch)
    jax.block_until_ready(state)
    seconds = (time.perf_counter() - t0) / (len(batches) - 1)
    return {"PowerPriorSVB HPP, 1,000 2-D rows": row(seconds, "s/batch", cold - seconds)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--json", type=pathlib.Path, help="append one JSON line per case")
    args = parser.parse_args(argv)

    import jax

    backend = jax.default_backend()
    device = str(jax.devices()[0].device_kind)
    print(f"backend {backend} ({device}), jax {jax.__version__}")
    print(f"{'case':<52} {'value':>12} {'unit':<20} {'compile s':>9}")
    for name in args.cases:
        fn = globals()[f"case_{name}"]
        try:
            rows = fn()
        except ImportError as err:
            print(f"{name}: skipped ({err})")
            continue
        for label, r in rows.items():
            print(f"{label:<52} {r['value']:>12.4g} {r['unit']:<20} {r['compile_s']:>9.1f}")
            if args.json:
                with open(args.json, "a") as fh:
                    record = dict(case=name, label=label, backend=backend, device=device, **r)
                    fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
