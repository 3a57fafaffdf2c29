"""The real data sets of the demo and the benchmarks, one loader each, and their held-out split.

Only the galaxies ship with the package; scikit-learn's digits and the ``lda`` package's Reuters
corpus come with those packages (``pip install -e ".[examples]"``; an ``ImportError`` without
them) and MNIST is read from the files given.
"""

import gzip
import pathlib
from importlib import resources

import numpy as np

__all__ = ["digits", "galaxies", "mnist", "reuters", "shuffled_split"]


def galaxies():
    """The velocities (km/s) of 82 galaxies of the Corona Borealis region, ``(82,)`` float64:
    Roeder, *Density estimation with confidence sets exemplified by superclusters and voids in
    the galaxies*, JASA 1990 (R's ``MASS::galaxies``), the standard data set of
    Bayesian-nonparametric mixture papers."""
    text = resources.files("numpyro_bnp.data").joinpath("galaxies.csv").read_text()
    return np.loadtxt(text.splitlines(), comments="#", skiprows=3)


def digits():
    """scikit-learn's handwritten digits (the UCI optical-digits test set, Alpaydin & Kaynak
    1998): ``(pixels, labels)``, ``(1797, 64)`` int64 intensities 0 to 16 of the 8 x 8 images
    and ``(1797,)`` int64 digits 0 to 9. Needs scikit-learn."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return data.data.astype(np.int64), data.target


def reuters():
    """The ``lda`` package's 395 Reuters news stories: ``(counts, vocab)``, ``(395, 4258)``
    int64 word counts of the documents and ``(4258,)`` the words. Needs ``lda``."""
    import lda.datasets

    return np.asarray(lda.datasets.load_reuters()), np.asarray(lda.datasets.load_reuters_vocab())


def mnist(folder):
    """The 10,000 MNIST test images (LeCun et al. 1998) from ``folder``, which holds
    ``t10k-images-idx3-ubyte.gz`` and ``t10k-labels-idx1-ubyte.gz``: ``(images, labels)``,
    ``(10000, 784)`` uint8 pixels of the 28 x 28 images and ``(10000,)`` uint8 digits."""
    folder = pathlib.Path(folder)
    with gzip.open(folder / "t10k-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(folder / "t10k-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images, labels


def shuffled_split(data, num_test, num_train=None, seed=0, held_out="first"):
    """``(train, test)`` rows of ``data`` in the order of ``np.random.default_rng(seed)``'s
    permutation: ``held_out="first"`` holds out the first ``num_test`` of it and fits the next
    ``num_train`` (default: all the others); ``"last"`` holds out the last ``num_test`` and fits
    the first ``num_train`` (default: all the others)."""
    perm = np.random.default_rng(seed).permutation(len(data))
    rest = len(data) - num_test
    num_train = rest if num_train is None else num_train
    if not 0 <= num_test <= len(data) or not 0 <= num_train <= rest:
        raise ValueError(
            f"num_test={num_test} and num_train={num_train} do not fit {len(data)} rows"
        )
    if held_out == "first":
        return data[perm[num_test : num_test + num_train]], data[perm[:num_test]]
    if held_out == "last":
        return data[perm[:num_train]], data[perm[rest:]]
    raise ValueError(f"held_out must be 'first' or 'last', got {held_out!r}")
