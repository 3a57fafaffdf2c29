"""Demo: the R-IBP streaming filter learns binary features of scikit-learn's 8x8 digits."""

import os
import time
import warnings

import numpy as np
from jax import random

from numpyro_bnp import datasets
from numpyro_bnp._checks import renamed_arguments
from numpyro_bnp._report import Column, print_table


@renamed_arguments(alpha="mass")
def run(
    out_dir,
    *,
    num_train=None,
    num_test=200,
    mass=None,
    sigma_a=0.3,
    sigma_o=None,
    num_samples=200,
    seed=0,
):
    """Stream the digits (1,797 images, 8 x 8, scaled to [0, 1]) through ``RIBPFilter`` with the
    memoized update (``feature_update="memoized"``, see ``docs/ribp.md``).

    The images are shuffled; the last ``num_test`` are held out and the first ``num_train``
    (default: all the others) are streamed. Prints the number of features as the stream grows,
    and the held-out log predictive per image (importance sampling with ``num_samples`` draws)
    next to a filter restricted to one feature, with the paired standard error of the
    difference, and the held-out score along the stream (after 10 %, 30 % and all of the
    training images, :func:`numpyro_bnp.infer.core.streaming.learning_curve`: a curve that stops
    rising means the filter stopped learning). Saves three figures, the number of features
    against the number of observations with the prior's ``E[Λ_n]``, the learned features as
    images and the held-out score along the stream, and returns their paths. ``mass``,
    ``sigma_a`` and ``sigma_o`` are those of :func:`numpyro_bnp.models.linear_gaussian`
    (``mass`` = the IBP's α); by default ``mass`` and ``sigma_o`` are learned along the stream,
    from the priors ``Gamma(1, 0.2)`` (mean 5) and ``HalfNormal(1)``, and printed.
    """
    import numpyro.distributions as dist

    from numpyro_bnp.distributions import RecursiveIBP
    from numpyro_bnp.infer import RIBPFilter, streaming
    from numpyro_bnp.models import linear_gaussian
    from numpyro_bnp.plots import plot_feature_count, plot_feature_grid, plot_learning_curve

    images = datasets.digits()[0] / 16.0
    train, test = datasets.shuffled_split(images, num_test, num_train, seed, held_out="last")
    mass = dist.Gamma(1.0, 0.2) if mass is None else mass
    sigma_o = dist.HalfNormal(1.0) if sigma_o is None else sigma_o
    kwargs = dict(num_obs=1, dim=64, mass=mass, sigma_a=sigma_a, sigma_o=sigma_o, max_features=64)

    scores, scoring = [], [0.0]  # per-image held-out log predictive at each point; its time

    def held_out(result):
        start = time.perf_counter()
        scores.append(
            np.asarray(
                result.log_predictive(test, rng_key=random.PRNGKey(0), num_samples=num_samples)
            )
        )
        scoring[0] += time.perf_counter() - start
        return scores[-1]

    # the stream in three segments, scored after each (the end state is one run's)
    eval_at = sorted({max(1, round(f * len(train))) for f in (0.1, 0.3)} | {len(train)})
    start = time.perf_counter()
    curve = streaming.learning_curve(
        RIBPFilter(linear_gaussian, feature_update="memoized"),
        random.PRNGKey(seed),
        train,
        held_out,
        eval_at=eval_at,
        chunk_size=256,
        progress_bar=False,
        **kwargs,
    )
    elapsed = time.perf_counter() - start - scoring[0]
    result, score = curve.result, scores[-1]
    with warnings.catch_warnings():  # one slot is (knowingly) truncated
        warnings.simplefilter("ignore", RuntimeWarning)
        single = RIBPFilter(linear_gaussian, feature_update="memoized", max_features=1).run(
            random.PRNGKey(seed), train, chunk_size=256, progress_bar=False, **kwargs
        )
    single_score = np.asarray(
        single.log_predictive(test, rng_key=random.PRNGKey(0), num_samples=num_samples)
    )

    print_table(
        (Column("observations", 12), Column("features", 9, ".1f"), Column("active", 7, "d")),
        [
            (t, float(result.traces["num_features"][t - 1]), result.traces["num_active"][t - 1])
            for t in sorted({min(t, len(train)) for t in (10, 100, 1000, len(train))})
        ],
    )
    print(f"{len(train) / elapsed:,.0f} observations/s including compilation")
    if result.hyper_parameters:
        print(
            "learned: "
            + ", ".join(f"{k} = {float(v):.3g}" for k, v in result.hyper_parameters.items())
        )
    gap = score - single_score
    print(
        f"held-out log predictive per image ({num_test} images, importance sampling with "
        f"{num_samples} draws): R-IBP {score.mean():.2f}, one-feature model "
        f"{single_score.mean():.2f}, difference {gap.mean():.2f} ± "
        f"{gap.std(ddof=1) / np.sqrt(len(gap)):.2f} (s.e.)"
    )
    print(
        "held-out log predictive per image along the stream: "
        + ", ".join(f"{m:.2f} ± {s:.2f} after {t}" for t, m, s in zip(*curve[:3], strict=True))
    )

    os.makedirs(out_dir, exist_ok=True)
    paths = [
        os.path.join(out_dir, "ribp_digits_feature_count.png"),
        os.path.join(out_dir, "ribp_digits_features.png"),
        os.path.join(out_dir, "ribp_digits_learning_curve.png"),
    ]
    if isinstance(mass, dist.Distribution):  # the prior's E[Λ_n] at the learned mass
        mass = result.hyper_parameters["mass"]
    expected = RecursiveIBP(mass, 1.0, num_rows=len(train), max_features=1).expected_num_features()
    plot_feature_count(result.time, result.traces["num_features"], expected=expected).savefig(
        paths[0], dpi=100
    )
    grid = plot_feature_grid(result.features["mean"], (8, 8), probs=result.feature_probs)
    grid.savefig(paths[1], dpi=100)
    plot_learning_curve(curve, label="R-IBP filter, memoized update").savefig(paths[2], dpi=100)
    return paths
