"""Stream the MNIST test images through the R-IBP filter (Schaeffer et al. 2022, Fig. 7).

    python examples/ribp_mnist.py [--num-images 10000] [--out-dir figures]

Reads ``../shared/data/mnist/t10k-images-idx3-ubyte.gz`` (relative to the project root; skips
with a message when absent), downsamples 28 x 28 -> 14 x 14, streams the images through
``RIBPFilter`` on the linear-Gaussian model and saves three figures: the number of features
against the number of observations, the learned features as images, and the fraction of features
that two digit classes share (3/5 and 7/9 should share more, 1 should stand apart).
"""

import argparse
import gzip
import os
import pathlib
import sys

import numpy as np
from jax import random

from numpyro_bnp.infer import RIBPFilter
from numpyro_bnp.models import linear_gaussian
from numpyro_bnp.plots import plot_feature_count, plot_feature_grid, plot_feature_sharing

DATA = pathlib.Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "mnist"


def read_idx(path):
    """An idx-format array (big-endian header: magic, sizes), gzip-compressed."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def feature_sharing(use, labels, threshold=0.5):
    """Weighted Jaccard overlap of the classes' feature-usage rates, ``(10, 10)``.

    ``use`` is ``(M, K)``: the probability that each image uses each feature. ``u_ck`` is the
    fraction of class-``c`` images that use feature ``k`` (``use > threshold``); two classes share
    ``Σ_k min(u_c, u_d) / Σ_k max(u_c, u_d)`` of their features.
    """
    rates = np.stack([(use[labels == c] > threshold).mean(0) for c in range(10)])
    low = np.minimum(rates[:, None], rates[None]).sum(-1)
    high = np.maximum(rates[:, None], rates[None]).sum(-1)
    return low / np.maximum(high, 1e-12)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-images", type=int, default=10_000)
    parser.add_argument("--out-dir", default="figures")
    parser.add_argument("--alpha", type=float, default=5.0)
    parser.add_argument("--sigma-a", type=float, default=0.5)
    parser.add_argument("--sigma-o", type=float, default=0.15)
    args = parser.parse_args()
    images_path = DATA / "t10k-images-idx3-ubyte.gz"
    if not images_path.exists():
        print(f"skipping: MNIST not found at {images_path} (see ../shared/data/README.md)")
        return 0
    images = read_idx(images_path)[: args.num_images].astype(np.float32) / 255.0
    labels = read_idx(DATA / "t10k-labels-idx1-ubyte.gz")[: args.num_images]
    small = images.reshape(-1, 14, 2, 14, 2).mean((2, 4)).reshape(len(images), 196)

    filt = RIBPFilter(linear_gaussian)
    result = filt.run(
        random.PRNGKey(0),
        small,
        chunk_size=500,
        num_obs=1,
        dim=196,
        alpha=args.alpha,
        sigma_a=args.sigma_a,
        sigma_o=args.sigma_o,
    )
    print(f"{len(small)} images -> {result.traces['num_features'][-1]:.1f} features")
    sharing = feature_sharing(np.asarray(result.feature_use(small)), labels)
    for a, b in ((3, 5), (7, 9), (4, 9), (1, 0), (1, 8)):
        print(f"classes {a} and {b} share {sharing[a, b]:.2f} of their features")

    os.makedirs(args.out_dir, exist_ok=True)
    figures = {
        "ribp_mnist_feature_count.png": plot_feature_count(
            result.time, result.traces["num_features"]
        ),
        "ribp_mnist_features.png": plot_feature_grid(
            result.features["mean"], (14, 14), probs=result.feature_probs, max_features=48
        ),
        "ribp_mnist_sharing.png": plot_feature_sharing(sharing, [str(c) for c in range(10)]),
    }
    for name, fig in figures.items():
        fig.savefig(os.path.join(args.out_dir, name), dpi=110)
        print("saved", os.path.join(args.out_dir, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
