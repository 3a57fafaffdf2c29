"""The R-IBP filter on binary data: Bernoulli pixels with logits ``Z @ A + b`` (``docs/ribp.md``).

The model is :func:`numpyro_bnp.models.binary_features` (``A_k ~ N(0, σ_A² I)``, IBP(α, 1)).
Held-out log predictive per image (higher is better; the filters' by importance sampling over
``z`` with the features drawn from ``q(A)``), for

* ``RIBPFilter(feature_update="memoized")`` with the bias a site with prior ``Normal(0, 3)``
  (learned along the stream);
* ``RIBPFilter(feature_update="paper")`` (the generic Newton path) with the bias fixed at the
  training images' pixel logits (without a bias it learns nothing: -44 per digit image);
* independent pixels (each pixel's training frequency), the model without features;
* on bars, the oracle (the true bars, bias and feature probabilities) and NumPyro's
  ``DiscreteHMCGibbs`` + ``NUTS`` on the truncated model (``π_k ~ Beta(α/K, 1)``, the same
  logistic likelihood and priors; not with ``--quick``).

Sections of ``bench ribp --binary``: 1. bars (6 x 6 images, 12 bars, each in an image with
probability 0.15, logits ``6 z @ bars - 3``), over n, with the bars recovered (a learned feature
within 30 % / 50 % of a bar's norm); 2. binarized digits (scikit-learn, pixels / 16 > 0.5, 1,597
training and 200 test images), over n; 3. throughput of the memoized update (float32, digits);
4. (``--mnist DIR``) binarized MNIST digits 1, 3, 5, 7, 9 (:func:`numpyro_bnp.datasets.mnist`).
"""

import time
import warnings

import numpy as np
import numpyro.distributions as dist
from jax import random
from scipy.special import log_expit, logsumexp

from numpyro_bnp import datasets
from numpyro_bnp._report import Column, Table
from numpyro_bnp.bench._common import discrete_hmc_gibbs
from numpyro_bnp.bench.ribp_speed import rows_per_second
from numpyro_bnp.infer import RIBPFilter, streaming
from numpyro_bnp.models import binary_features

BIAS_PRIOR = dist.Normal(0.0, 3.0)
NUM_IS = 500  # importance samples per held-out image


def bars(num_rows, seed, side=6, prob=0.15):
    """``(features (12, 36), images (N, 36))``: ``6 bars`` and the images."""
    lines = np.zeros((2 * side, side, side))
    for i in range(side):
        lines[i, i, :] = lines[side + i, :, i] = 1.0
    features = 6.0 * lines.reshape(2 * side, -1)
    rng = np.random.default_rng(seed)
    z = (rng.random((num_rows, 2 * side)) < prob).astype(float)
    logits = z @ features - 3.0
    images = (rng.random(logits.shape) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return features, images


def independent_pixels(train, test):
    """Per-image log-likelihood of ``test`` under each pixel's training frequency."""
    rate = np.clip(train.mean(0), 1.0 / (len(train) + 2), 1.0 - 1.0 / (len(train) + 2))
    return test @ np.log(rate) + (1 - test) @ np.log1p(-rate)


def data_logits(train):
    rate = np.clip(train.mean(0), 1.0 / (len(train) + 2), 1.0 - 1.0 / (len(train) + 2))
    return np.log(rate) - np.log1p(-rate)


def mixture_score(test, logits, log_weights):
    """``log Σ_s w_s Π_d Bernoulli(o_d | σ(logits_sd))`` per test image."""
    sign = 2.0 * test - 1.0
    per = np.stack([log_expit(s * logits).sum(1) for s in sign])  # (M, S)
    return logsumexp(per + log_weights, axis=1)


def matched(learned, truth, tol):
    if len(learned) == 0:
        return 0
    err = np.linalg.norm(truth[:, None] - learned[None], axis=-1).min(1)
    return int(np.sum(err < tol * np.linalg.norm(truth, axis=1)))


def curve(mode, train, test, eval_at, **model_kwargs):
    """``(scores, result, seconds)``: the filter's per-image held-out scores after each of
    ``eval_at`` training images, its final result, and the run's seconds (without scoring)."""
    filt = RIBPFilter(binary_features, feature_update=mode, max_features=None)
    timings, scores = [], []

    def score(result):
        timings.append(time.perf_counter())
        scores.append(result.log_predictive(test, rng_key=random.PRNGKey(0), num_samples=NUM_IS))
        timings.append(time.perf_counter())
        return scores[-1]

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the paper's update: no births
        lc = streaming.learning_curve(
            filt,
            random.PRNGKey(0),
            train,
            score,
            eval_at=eval_at,
            progress_bar=False,
            num_obs=1,
            dim=train.shape[1],
            **model_kwargs,
        )
    scoring = sum(b - a for a, b in zip(timings[::2], timings[1::2], strict=True))
    return scores, lc.result, time.perf_counter() - t0 - scoring


def hmc_gibbs(train, test, truncation, iters, mass, sigma_a, seed=0):
    """NumPyro ``DiscreteHMCGibbs(NUTS)`` on the truncated model; posterior-predictive score
    of ``test`` from 30 draws (each by Monte Carlo over ``z ~ Bernoulli(π)``) and seconds."""
    import numpyro

    def truncated(obs):
        pi = numpyro.sample("pi", dist.Beta(mass / truncation, 1.0).expand([truncation]))
        a = numpyro.sample("A", dist.Normal(0.0, sigma_a).expand([truncation, obs.shape[1]]))
        bias = numpyro.sample("bias", BIAS_PRIOR.expand([obs.shape[1]]))
        with numpyro.plate("rows", obs.shape[0], dim=-2), numpyro.plate("k", truncation):
            z = numpyro.sample("z", dist.Bernoulli(pi))
        numpyro.sample("obs", dist.Bernoulli(logits=z @ a + bias).to_event(2), obs=obs)

    samples, seconds = discrete_hmc_gibbs(truncated, train, iters, iters, seed)
    rng = np.random.default_rng(seed)
    per_draw = []
    for s in np.linspace(0, iters - 1, 30).astype(int):
        zs = (rng.random((2000, truncation)) < samples["pi"][s]).astype(float)
        logits = zs @ samples["A"][s] + samples["bias"][s]
        per_draw.append(mixture_score(test, logits, -np.log(len(zs))))
    score = logsumexp(np.stack(per_draw), axis=0) - np.log(len(per_draw))
    last = samples["z"][-1].sum(0) > 0
    return score, samples["A"][-1][last], seconds


COLUMNS = (
    Column("n", 6), Column("method", 44, align="<"), Column("log p/img", 9, ".2f"),
    Column("s.e.", 6, ".2f"), Column("feats", 6), Column("bars 30/50%", 9),
    Column("fit s", 8, ".1f"),
)  # fmt: skip
TABLE = Table(COLUMNS)


def row(name, n, scores, found="", recovered="", seconds=""):
    """One row of the table: the mean of the per-image ``scores`` and its standard error."""
    s = np.asarray(scores, np.float64)
    TABLE.row(n, name, s.mean(), s.std(ddof=1) / np.sqrt(s.size), found, recovered, seconds)


def filter_rows(train, test, sizes, truth=None, paper=True, **model_kwargs):
    """Print the rows of independent pixels, the paper's update (bias at the data's logits;
    unless ``paper`` is False) and the memoized update (bias learned) after each of ``sizes``
    training images, with the features recovered of ``truth`` where given; returns the
    memoized filter's final result."""
    memo, memo_end, memo_s = curve("memoized", train, test, sizes, bias=BIAS_PRIOR, **model_kwargs)
    if paper:
        base, base_end, base_s = curve(
            "paper", train, test, sizes, bias=data_logits(train), **model_kwargs
        )
    recovered = ""
    if truth is not None:
        learned = memo_end.features["mean"]
        recovered = f"{matched(learned, truth, 0.3)}/{matched(learned, truth, 0.5)}"
    last = len(sizes) - 1
    for i, n in enumerate(sizes):
        row("independent pixels", n, independent_pixels(train[:n], test))
        if paper:
            end = (len(base_end.features["mean"]), "", base_s) if i == last else ()
            row("R-IBP paper's update, bias = data logits", n, base[i], *end)
        end = (len(memo_end.features["mean"]), recovered, memo_s) if i == last else ()
        row("R-IBP memoized, bias learned", n, memo[i], *end)
    return memo_end


def bars_section(quick):
    sizes = [100, 300, 1000] if quick else [100, 300, 1000, 3000]
    features, images = bars(max(sizes) + 500, seed=0)
    train, test = images[:-500], images[-500:]
    print(
        "\n== 1. bars: 6 x 6 images, 12 bars (each w.p. 0.15), logits 6 z @ bars - 3; "
        "500 test images"
    )
    TABLE.header()
    rng = np.random.default_rng(1)
    zs = (rng.random((20_000, 12)) < 0.15).astype(float)
    oracle = mixture_score(test, zs @ features - 3.0, -np.log(len(zs)))
    row("oracle: true bars, bias and probabilities", "-", oracle)
    memo = filter_rows(train, test, sizes, features, mass=2.0, sigma_a=3.0)
    print(f"   memoized: learned bias mean {memo.hyper_parameters['bias'].mean():.2f} (truth -3)")
    if not quick:
        n = 300
        score, feats, seconds = hmc_gibbs(train[:n], test, 24, 150, 2.0, 3.0)
        rec = f"{matched(feats, features, 0.3)}/{matched(feats, features, 0.5)}"
        row("NumPyro DiscreteHMCGibbs+NUTS, K=24, 150+150", n, score, len(feats), rec, seconds)


def digits_section(quick):
    images = (datasets.digits()[0] / 16.0 > 0.5).astype(np.float32)
    train, test = datasets.shuffled_split(images, 200, held_out="last")
    sizes = [160, 480] if quick else [160, 480, len(train)]
    train = train[: sizes[-1]]
    print(
        f"\n== 2. binarized digits (8 x 8, pixels / 16 > 0.5): {len(train)} training, "
        "200 test images"
    )
    TABLE.header()
    filter_rows(train, test, sizes, mass=3.0, sigma_a=2.0)
    return train


def throughput_section(train):
    print("\n== 3. throughput (images/s, float32, D = 64, fixed slots, chunks of 512)")
    obs = np.tile(train, (-(-4096 // len(train)), 1))[:4096]
    for capacity in (32, 64):
        rates = {}
        for mode, bias in (("memoized", BIAS_PRIOR), ("paper", data_logits(train))):
            filt = RIBPFilter(binary_features, feature_update=mode, max_features=capacity)
            state = filt.init(
                random.PRNGKey(0), num_obs=1, dim=64, mass=3.0, sigma_a=2.0, bias=bias
            )
            rates[mode] = rows_per_second(filt, state, obs)[0]
        print(
            f"   {capacity} slots: memoized {rates['memoized']:,.0f}, paper's update "
            f"{rates['paper']:,.0f} (ratio {rates['memoized'] / rates['paper']:.2f})"
        )


def mnist_section(folder, num_images):
    """Section 4: the MNIST test images of ``folder`` (:func:`numpyro_bnp.datasets.mnist`)."""
    images, labels = datasets.mnist(folder)
    keep = np.isin(labels, [1, 3, 5, 7, 9])
    images = (images[keep] > 127).astype(np.float32)
    train, test = datasets.shuffled_split(images, 500, num_images)
    sizes = [500, 2000, num_images]
    print(
        f"\n== 4. binarized MNIST (digits 1 3 5 7 9, > 127): {len(train)} training, 500 test images"
    )
    TABLE.header()
    filter_rows(train, test, sizes, paper=False, mass=10.0, sigma_a=2.0)


def binary_sections(quick, mnist=None, mnist_images=5000):
    """Sections 1 to 3, and 4 on the MNIST files in the folder ``mnist`` (if given)."""
    bars_section(quick)
    train = digits_section(quick)
    throughput_section(train)
    if mnist is not None:
        mnist_section(mnist, mnist_images)
