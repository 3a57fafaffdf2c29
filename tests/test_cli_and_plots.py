"""The demo command and the figures it draws."""

import os
import re

import numpy as np
import pytest

from numpyro_bnp.__main__ import main
from numpyro_bnp.plots import plot_feature_sharing, plot_ibp_marginals


def test_demo_prints_agreeing_table_and_saves_its_figure(tmp_path, capsys):
    from numpyro_bnp.demos import ibp

    paths = ibp.run(str(tmp_path), num_rows=8, num_samples=1_000, chunk=500)
    out = capsys.readouterr().out
    rows = re.findall(
        r"^\s*([\d.]+)\s+([\d.]+) \|\s+([\d.]+)\s+([\d.]+) \|\s+([\d.]+)\s+([\d.]+)$", out, re.M
    )
    assert len(rows) == 9
    for _alpha, _beta, exact_k, mc_k, _err, err_in_se in map(lambda r: map(float, r), rows):
        assert err_in_se < 5.5  # ~5,000 cells per run, as in the marginals test
        assert abs(mc_k - exact_k) < 5 * np.sqrt(exact_k / 1_000)  # K_N is Poisson
    assert [p.endswith("ibp_marginals.png") for p in paths] == [True]
    assert (tmp_path / "ibp_marginals.png").stat().st_size > 10_000


def test_cli_rejects_unknown_demo_parts(tmp_path):
    with pytest.raises(SystemExit):
        main(["demo", "--out-dir", str(tmp_path), "--only", "nonexistent"])


def test_plot_ibp_marginals_draws_one_pair_of_panels_per_parameter_pair():
    exact = np.random.default_rng(0).uniform(size=(3, 5, 7))
    fig = plot_ibp_marginals(exact, exact, ["a", "b", "c"], pairs_per_row=2)
    visible = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    assert len(visible) == 6
    np.testing.assert_array_equal(visible[5].images[0].get_array(), exact[2])
    with pytest.raises(ValueError, match="one shape"):
        plot_ibp_marginals(exact, exact[:2])
    with pytest.raises(ValueError, match="titles"):
        plot_ibp_marginals(exact, exact, ["a"])


def test_ribp_digits_demo_beats_a_one_feature_model(tmp_path, capsys):
    """The demo's held-out log predictive beats the same filter with one slot by 5 paired s.e."""
    from numpyro_bnp.demos import DEMOS, ribp

    assert DEMOS["ribp"] is ribp.run
    paths = ribp.run(str(tmp_path), num_train=300, num_test=100, num_samples=200)
    out = capsys.readouterr().out
    counts = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+(\d+)$", out, re.M)
    assert [int(t) for t, _, _ in counts] == [10, 100, 300]
    assert float(counts[-1][1]) > 2  # more than one feature found
    gap, se = map(float, re.search(r"difference (-?[\d.]+) ± ([\d.]+)", out).groups())
    assert gap > 5 * se
    assert [os.path.basename(p) for p in paths] == [
        "ribp_digits_feature_count.png",
        "ribp_digits_features.png",
        "ribp_digits_learning_curve.png",
    ]
    curve = re.search(r"along the stream: (.*)$", out, re.M).group(1)
    assert [int(t) for t in re.findall(r"after (\d+)", curve)] == [30, 90, 300]
    np.testing.assert_allclose(  # the curve's end is the score printed above
        float(re.findall(r"(-?[\d.]+) ±", curve)[-1]),
        float(re.search(r"R-IBP (-?[\d.]+)", out).group(1)),
        atol=0.011,
    )
    assert all(os.path.getsize(p) > 2_000 for p in paths)


def test_plot_feature_sharing_spans_the_data_and_labels_every_cell():
    sharing = np.array([[0.8, 0.6, 0.62], [0.6, 0.7, 0.65], [0.62, 0.65, 0.9]])
    fig = plot_feature_sharing(sharing, ["a", "b", "c"])
    image = fig.axes[0].images[0]
    assert image.get_clim() == (0.6, 0.9)  # differences of a few hundredths stay visible
    assert sorted(t.get_text() for t in fig.axes[0].texts) == sorted(
        f"{v:.2f}" for v in sharing.flat
    )
    fixed = plot_feature_sharing(sharing, "abc", vmin=0.0, vmax=1.0)
    assert fixed.axes[0].images[0].get_clim() == (0.0, 1.0)
