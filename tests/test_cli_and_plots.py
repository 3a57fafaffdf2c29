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


def test_demo_registers_one_part_per_engine_family():
    from numpyro_bnp.demos import DEMOS, nggp_gibbs, nrm, power_prior

    assert list(DEMOS) == ["ibp", "ribp", "nrm", "power_prior", "nggp_gibbs"]
    assert DEMOS["nrm"] is nrm.run and DEMOS["power_prior"] is power_prior.run
    assert DEMOS["nggp_gibbs"] is nggp_gibbs.run


def test_nrm_demo_clusters_beat_one_cluster_on_held_out_documents(tmp_path, capsys):
    """On 120 Reuters documents, ADF and EP each beat one cluster for the whole corpus by more
    than 5 paired standard errors of the held-out log predictive."""
    pytest.importorskip("lda", reason="the Reuters corpus comes with the lda package")
    from numpyro_bnp.demos import nrm

    paths = nrm.run(str(tmp_path), num_train=120, num_test=40, num_passes=1, max_clusters=128)
    out = capsys.readouterr().out
    rows = re.findall(
        r"^(ADF|EP)-NRM.*?\s(\d+)\s+(\d+)\s+(-[\d.]+)\s+\+?(-?[\d.]+) ± ([\d.]+)", out, re.M
    )
    assert [r[0] for r in rows] == ["ADF", "EP"]
    for _name, clusters, _, _, gap, se in rows:
        assert int(clusters) > 1
        assert float(gap) > 5 * float(se)
    assert "120 documents streamed, 40 held out" in out
    assert [os.path.basename(p) for p in paths] == ["nrm_reuters_clusters.png"]
    assert os.path.getsize(paths[0]) > 10_000


def test_drifting_stream_demo_forgets_only_the_moved_cluster(tmp_path, capsys):
    """MHPP's E[ρ_k] falls below 0.5 for one component exactly at the change (the cluster that
    moved) and stays above it for every component in use on the other batches."""
    from numpyro_bnp.demos import power_prior

    paths = power_prior.run(str(tmp_path), num_batches=4, batch_size=120, change=3)
    out = capsys.readouterr().out
    rows = re.findall(
        r"^\s+(\d)(\*?)\s+((?:[\d.]+ )+)\s*(\d+)\s+(-?[\d.]+|nan)\s+(-[\d.]+)$", out, re.M
    )
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    assert [r[1] for r in rows] == ["", "", "*", ""]
    for batch, _, rho, clusters, _before, _after in rows[1:]:
        rho = np.array(rho.split(), float)
        assert int(clusters) == 3 and len(rho) == 3
        assert (rho < 0.5).sum() == (1 if batch == "3" else 0)
    before_at, after_at = float(rows[2][4]), float(rows[2][5])
    assert before_at < after_at - 1.0  # the old model fits the changed batch badly
    assert "forgets 1 of the 3 components in use" in out
    assert [os.path.basename(p) for p in paths] == [
        "power_prior_forgetting.png",
        "power_prior_stream.png",
    ]
    with pytest.raises(ValueError, match="change"):
        power_prior.run(str(tmp_path), num_batches=4, change=1)


def test_gibbs_demo_reports_arviz_diagnostics_of_the_number_of_clusters(tmp_path, capsys):
    """Two short chains: finite ESS and R-hat of the number of clusters and the log joint, a
    verdict that agrees with the printed R-hat, and a plausible number of clusters."""
    from numpyro_bnp.demos import nggp_gibbs

    paths = nggp_gibbs.run(str(tmp_path), num_chains=2, num_warmup=20, num_samples=40)
    out = capsys.readouterr().out
    rows = dict(
        (name, tuple(map(float, rest.split())))
        for name, rest in re.findall(r"^(num_clusters|log_joint)\s+(.*)$", out, re.M)
    )
    assert set(rows) == {"num_clusters", "log_joint"}
    mean, _sd, *chain_means, ess_bulk, ess_tail, rhat = rows["num_clusters"]
    assert len(chain_means) == 2 and 3 <= mean <= 30
    assert ess_bulk > 0 and ess_tail > 0 and np.isfinite(rhat)
    worst = max(rhat, rows["log_joint"][-1])
    assert ("the chains agree" in out) == (worst < nggp_gibbs.RHAT_OK)
    assert [os.path.basename(p) for p in paths] == ["nggp_gibbs_galaxies.png"]
    assert os.path.getsize(paths[0]) > 10_000


def test_bench_engines_command_says_what_quick_runs_and_rejects_unknown_data(capsys):
    with pytest.raises(SystemExit) as exit_help:
        main(["bench", "engines", "--help"])
    assert exit_help.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--quick runs the small version" in out and "DiscreteHMCGibbs" in out
    with pytest.raises(SystemExit) as exit_bad:
        main(["bench", "engines", "--quick", "--data", "nonexistent"])
    assert exit_bad.value.code == 2
    assert "invalid choice: 'nonexistent'" in capsys.readouterr().err


def test_the_package_ships_the_galaxies_velocities():
    """The package data (Roeder 1990; R's MASS::galaxies): 82 velocities, their known range and
    mean (20,828.17 km/s), split 66 / 16 into disjoint fitted and held-out rows."""
    from numpyro_bnp.bench.mixtures import galaxies_data
    from numpyro_bnp.datasets import galaxies

    v = galaxies()
    assert v.shape == (82,) and (v.min(), v.max()) == (9172, 34279)
    assert abs(v.mean() - 20828.17) < 0.01
    train, test = galaxies_data()
    assert train.shape == (66, 1) and test.shape == (16, 1)
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])[:, 0]), np.sort(v) / 1000)
