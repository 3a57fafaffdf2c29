"""The ArviZ adapter gives the same data on ArviZ 0.23 (InferenceData) and 1.x (DataTree)."""

import numpy as np

from numpyro_bnp.arviz_compat import arviz, from_dict, group


def test_from_dict_keeps_values_and_a_time_dimension():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(1, 40, 6, 3))  # (chain, draw, time, feature)
    lp = rng.normal(size=(1, 40, 6))
    data = from_dict(
        {"posterior": {"w": w}, "sample_stats": {"lp": lp}},
        dims={"w": ["time", "feature"], "lp": ["time"]},
        coords={"time": np.arange(6), "feature": np.arange(3)},
    )
    posterior = group(data, "posterior")
    assert posterior["w"].dims == ("chain", "draw", "time", "feature")
    np.testing.assert_array_equal(posterior["w"].values, w)
    np.testing.assert_array_equal(group(data, "sample_stats")["lp"].values, lp)
    # ArviZ's own statistics accept it on either version
    summary = arviz().summary(data, var_names=["w"], kind="stats")
    np.testing.assert_allclose(summary["mean"].to_numpy(), w.mean(axis=(0, 1)).ravel(), atol=5e-3)
