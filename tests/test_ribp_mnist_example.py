"""The MNIST example's sharing measure, on hand-made feature sets."""

import importlib.util
import pathlib

import numpy as np

_PATH = pathlib.Path(__file__).resolve().parents[1] / "examples" / "ribp_mnist.py"
_SPEC = importlib.util.spec_from_file_location("ribp_mnist", _PATH)
ribp_mnist = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ribp_mnist)


def test_feature_sharing_is_the_mean_jaccard_index_over_pairs_of_images():
    # class 0: {0, 1}, {0, 1, 2}, {} ; class 1: {2}, {1, 2, 3}
    use = np.array(
        [
            [0.9, 0.8, 0.1, 0.0],
            [0.6, 0.7, 0.9, 0.2],
            [0.1, 0.5, 0.0, 0.3],  # 0.5 is not above the threshold
            [0.0, 0.0, 1.0, 0.0],
            [0.2, 0.7, 0.8, 0.6],
        ]
    )
    labels = np.array([0, 0, 0, 1, 1])
    sharing = ribp_mnist.feature_sharing(use, labels)
    # distinct pairs within class 0: {01,012} 2/3, {01,-} 0, {012,-} 0 (both orders)
    within0 = (2 / 3 + 0 + 0) / 3
    within1 = 1 / 3  # {2} and {1,2,3}
    # class 0 x class 1: {01}: 0, 1/4; {012}: 1/3, 2/4; {}: 0, 0
    between = (0 + 1 / 4 + 1 / 3 + 2 / 4 + 0 + 0) / 6
    expected = np.array([[within0, between], [between, within1]])
    np.testing.assert_allclose(sharing, expected, rtol=1e-12)
    # the threshold decides membership: at 0.45 the third image uses feature 1
    lower = ribp_mnist.feature_sharing(use, labels, threshold=0.45)
    # class 0 becomes {01}, {012}, {1}: pairs 2/3, 1/2, 1/3
    assert np.isclose(lower[0, 0], (2 / 3 + 1 / 2 + 1 / 3) / 3)


def test_feature_sharing_subsamples_each_class_to_per_class_images():
    rng = np.random.default_rng(1)
    use = rng.uniform(size=(40, 6))
    labels = np.repeat([0, 1], 20)
    full = ribp_mnist.feature_sharing(use, labels, per_class=20)
    again = ribp_mnist.feature_sharing(use, labels, per_class=100)
    np.testing.assert_allclose(full, again)  # all images of each class either way
    np.testing.assert_allclose(full, full.T)
    sub = ribp_mnist.feature_sharing(use, labels, per_class=5, seed=3)
    rng = np.random.default_rng(3)  # one generator, classes in order, as the function draws
    picked = [rng.permutation(np.flatnonzero(labels == c))[:5] for c in (0, 1)]
    small = ribp_mnist.feature_sharing(use[np.concatenate(picked)], np.repeat([0, 1], 5))
    np.testing.assert_allclose(sub, small)
