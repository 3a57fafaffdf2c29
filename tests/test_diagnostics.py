import itertools

import numpy as np

from numpyro_bnp.diagnostics import count_parity


def test_count_parity_enumerates_all_small_count_matrices():
    matrices = np.array(list(itertools.product([0, 1, 3], repeat=4))).reshape(-1, 2, 2)
    expected = (np.count_nonzero(matrices, axis=(1, 2)) % 2 == 0).astype(np.int32)
    got = np.asarray(count_parity(matrices))
    assert got.dtype == np.int32 and got.shape == (81,)
    np.testing.assert_array_equal(got, expected)
