"""The engines' compiled step times on the backend JAX runs on (CPU or GPU; docs/engines.md).

    python -m numpyro_bnp bench accelerator                   # every case, JAX's default backend
    JAX_PLATFORMS=cpu python -m numpyro_bnp bench accelerator  # the same on the CPU
    python -m numpyro_bnp bench accelerator --cases ribp gibbs_digits --json times.jsonl

Each case compiles its program once, runs it once to warm up and reports the median of timed
runs (compilation reported apart). The cases are the engines' inner loops at the sizes of the
other families:

* ``ribp``: ``RIBPFilter`` rows per second, linear-Gaussian, D = 50, 128 slots, 4,096 rows in
  chunks of 512 (the paper's update and ``feature_update="memoized"``), as in ``bench ribp``;
* ``adf_digits`` / ``ep_digits``: ``ADFNRM`` (one pass) and ``EPNRM`` (5 passes) on
  scikit-learn's digits as 64-word count documents (1,438 training documents, DP), as in
  ``bench engines``;
* ``gibbs_galaxies`` / ``gibbs_digits`` / ``gibbs_reuters``: ``NGGPMarginalGibbs`` seconds per
  sweep of four vectorized chains (galaxies: 66 rows, Normal–Gamma, 64 slots; digits as counts:
  1,438 documents, 192 slots; Reuters: 316 documents, 4,258 words, 192 slots);
* ``nuts_twin``: NumPyro's NUTS on the truncated stick-breaking twin ``models.dp_mixture`` of the
  galaxies model (T = 20), seconds per iteration of one chain;
* ``crm_slice``: ``CRMSlice`` seconds per sweep on the scaling data of ``bench crm_slice`` at
  N = 5,000, one chain;
* ``power_prior``: ``PowerPriorSVB`` (HPP) seconds per batch of 1,000 2-D rows.

Data: the galaxies shipped with the package (:mod:`numpyro_bnp.datasets`), scikit-learn's
digits, Reuters from ``pip install lda`` (the case is skipped, saying why, without it).
``--json`` appends one JSON line per case.
"""

import json
import pathlib
import statistics

import numpy as np

from numpyro_bnp._report import Column, Table, median_seconds, timed
from numpyro_bnp.bench import crm_slice_scaling, mixtures, ribp_speed
from numpyro_bnp.bench._common import NUM_CHAINS, step_seconds

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
QUICK_CASES = ("ribp", "gibbs_galaxies", "power_prior")
HELP = (
    f"--quick runs the cases {', '.join(QUICK_CASES)} (a minute or two on 2 CPU cores); "
    "--cases picks others."
)
QUICK_HELP = "the cheap cases only (see below)"
CPU_LOOP_KERNELS = False


def row(value, unit, compile_s):
    return dict(value=value, unit=unit, compile_s=compile_s)


def case_ribp():
    _, _, obs = ribp_speed.synthetic(4_096)
    rows = {}
    for update in ("paper", "memoized"):
        rate, compile_s = ribp_speed.throughput(obs, 128, feature_update=update)
        rows[f"RIBPFilter {update}, 128 slots"] = row(rate, "rows/s", compile_s)
    return rows


def documents_kwargs(train, concentration):
    return dict(
        vocab_size=train.shape[1], mass=1.0, sigma=0.0, tau=1.0, concentration=concentration
    )


def streaming_case(engine_cls, label, **options):
    from jax import random

    from numpyro_bnp import models

    train = mixtures.documents("digits")[0]
    kw = documents_kwargs(train, 0.2)
    engine = engine_cls(models.nggp_multinomial_mixture, new_cluster_threshold=0.5, **options)

    def run(seed):
        result = engine.run(random.PRNGKey(seed), train, progress_bar=False, **kw)
        return result.cluster_sizes

    _, seconds, cold = timed(run)
    return {label: row(len(train) / seconds, "docs/s", cold - seconds)}


def case_adf_digits():
    from numpyro_bnp.infer import ADFNRM

    return streaming_case(ADFNRM, "ADFNRM digits-as-counts, 1 pass")


def case_ep_digits():
    from numpyro_bnp.infer import EPNRM

    return streaming_case(EPNRM, "EPNRM digits-as-counts, 5 passes", num_passes=5)


def gibbs_case(model, train, kwargs, label, reps):
    from numpyro_bnp.infer import NGGPMarginalGibbs

    kernel = NGGPMarginalGibbs(model)
    per_sweep, compile_s = step_seconds(kernel, train, kwargs, 2, reps, NUM_CHAINS)
    return {label: row(per_sweep, "s/sweep (4 chains)", compile_s)}


def case_gibbs_galaxies():
    from numpyro_bnp import models

    train = mixtures.galaxies_data()[0]
    kw = dict(dim=1, mass=1.0, sigma=0.0, tau=1.0, num_obs=len(train), max_clusters=64)
    kw.update(mixtures.galaxies_prior(train))
    label = "NGGPMarginalGibbs galaxies DP, 64 slots"
    return gibbs_case(models.nggp_diagonal_gaussian_mixture, train, kw, label, reps=50)


def case_gibbs_digits():
    from numpyro_bnp import models

    train = mixtures.documents("digits")[0]
    kw = dict(documents_kwargs(train, 0.2), num_obs=len(train), max_clusters=192)
    label = "NGGPMarginalGibbs digits-as-counts DP, 192 slots"
    return gibbs_case(models.nggp_multinomial_mixture, train, kw, label, reps=5)


def case_gibbs_reuters():
    from numpyro_bnp import models

    train = mixtures.documents("reuters")[0]
    kw = dict(documents_kwargs(train, 0.5), num_obs=len(train), max_clusters=192)
    label = "NGGPMarginalGibbs Reuters DP, 192 slots"
    return gibbs_case(models.nggp_multinomial_mixture, train, kw, label, reps=3)


def case_nuts_twin():
    from numpyro.infer import NUTS

    from numpyro_bnp import models

    train = mixtures.galaxies_data()[0]
    kw = dict(
        num_obs=len(train), dim=1, mass=1.0, truncation=20, components="diagonal_gaussian",
        **mixtures.galaxies_prior(train),
    )  # fmt: skip
    per_iter, compile_s = step_seconds(NUTS(models.dp_mixture), train, kw, 200, reps=50)
    return {"NUTS dp_mixture twin galaxies, T = 20": row(per_iter, "s/iter (1 chain)", compile_s)}


def case_crm_slice():
    from numpyro_bnp.infer import CRMSlice
    from numpyro_bnp.models import linear_gaussian

    num_rows = 5_000
    obs, _ = crm_slice_scaling.synthetic(num_rows)
    kw = dict(
        num_obs=num_rows, dim=obs.shape[1], mass=crm_slice_scaling.MASS, concentration=1.0,
        sigma_a=crm_slice_scaling.SIGMA0, sigma_o=crm_slice_scaling.SIGMA, max_features=64,
    )  # fmt: skip
    per_sweep, compile_s = step_seconds(CRMSlice(linear_gaussian), obs, kw, 5, reps=10)
    return {"CRMSlice linear-Gaussian N = 5,000": row(per_sweep, "s/sweep (1 chain)", compile_s)}


def case_power_prior():
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
    cold, (state, _) = median_seconds(lambda: engine.update(state, batches[0]))
    seconds = []
    for batch in batches[1:]:
        batch_s, (state, _) = median_seconds(lambda s=state, b=batch: engine.update(s, b))
        seconds.append(batch_s)
    seconds = statistics.median(seconds)
    return {"PowerPriorSVB HPP, 1,000 2-D rows": row(seconds, "s/batch", cold - seconds)}


def add_arguments(parser):
    """The options of ``bench accelerator`` besides ``--quick``."""
    parser.add_argument(
        "--cases", nargs="+", choices=CASES, help="default: all (--quick: the cheap ones)"
    )
    parser.add_argument("--json", type=pathlib.Path, help="append one JSON line per case")


def run(args):
    """The cases ``args.cases`` (module docstring), one table."""
    import jax

    backend = jax.default_backend()
    device = str(jax.devices()[0].device_kind)
    print(f"backend {backend} ({device}), jax {jax.__version__}")
    columns = (
        Column("case", 52, align="<"), Column("value", 12, ".4g"),
        Column("unit", 20, align="<"), Column("compile s", 9, ".1f"),
    )  # fmt: skip
    table = Table(columns)
    table.header()
    for name in args.cases or (QUICK_CASES if args.quick else CASES):
        try:
            rows = globals()[f"case_{name}"]()
        except ImportError as err:
            print(f"{name}: skipped ({err})")
            continue
        for label, r in rows.items():
            table.row(label, r["value"], r["unit"], r["compile_s"])
            if args.json:
                with open(args.json, "a") as fh:
                    record = dict(case=name, label=label, backend=backend, device=device, **r)
                    fh.write(json.dumps(record) + "\n")
    return 0
