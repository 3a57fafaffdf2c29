"""Demo: the R-IBP streaming filter learns binary features of scikit-learn's 8x8 digits."""

import os
import time

import numpy as np
from jax import random


def run(out_dir, *, alpha=3.0, sigma_a=0.5, sigma_o=0.1, num_test=300, seed=0):
    """Stream the digits (1,797 images, 8 x 8, scaled to [0, 1]) through ``RIBPFilter``.

    Prints a short table (observations, features, throughput) and the held-out log predictive,
    and saves two figures: the number of features as the stream grows and the
    learned features as images. Returns the figure paths.
    """
    from sklearn.datasets import load_digits

    from numpyro_bnp.infer import RIBPFilter
    from numpyro_bnp.models import linear_gaussian
    from numpyro_bnp.plots import plot_feature_count, plot_feature_grid

    images = load_digits().data / 16.0
    order = np.random.default_rng(seed).permutation(len(images))
    train, test = images[order[:-num_test]], images[order[-num_test:]]
    kwargs = dict(num_obs=1, dim=64, alpha=alpha, sigma_a=sigma_a, sigma_o=sigma_o)

    start = time.perf_counter()
    filt = RIBPFilter(linear_gaussian, max_features=64)
    result = filt.run(random.PRNGKey(seed), train, chunk_size=256, progress_bar=False, **kwargs)
    elapsed = time.perf_counter() - start
    score = float(np.mean(result.log_predictive(test, num_samples=500)))

    print(f"{'observations':>12} {'features':>9} {'active':>7} {'obs/s (incl. compile)':>22}")
    for t in (10, 100, 1000, len(train)):
        print(
            f"{t:>12} {result.traces['num_features'][t - 1]:>9.1f} "
            f"{result.traces['num_active'][t - 1]:>7d} {len(train) / elapsed:>22,.0f}"
        )
    print(f"held-out log predictive per image (importance sampling, 500 draws): {score:.1f}")

    os.makedirs(out_dir, exist_ok=True)
    paths = [
        os.path.join(out_dir, "ribp_digits_feature_count.png"),
        os.path.join(out_dir, "ribp_digits_features.png"),
    ]
    plot_feature_count(result.time, result.traces["num_features"]).savefig(paths[0], dpi=120)
    grid = plot_feature_grid(result.features["mean"], (8, 8), probs=result.feature_probs)
    grid.savefig(paths[1], dpi=120)
    return paths
