"""The CRM slice sampler on real data: held-out score against compiled seconds on digits.

scikit-learn's digits (pixels / 16, D = 64, shuffled with a fixed seed), the first ``N`` images
fitted and the last 200 held out, under ``linear_gaussian`` with α = 3, σ_A = 0.5, σ_o = 0.15
(``DIGITS``); ``CRMSlice`` with the settings ``docs/crm_slice.md`` recommends at high dimension
(``n_collapsed=5, xi_scale=3``), and the same with the collapsed row moves
(``collapsed_rows=True``), each also started from a prior draw (``start="prior"``); ``--tempered
R`` adds it with ``R`` tempered replicas; ``AcceleratedIBPGibbs`` is the baseline. Four
vectorized chains of each engine start from their first state and advance by compiled sweeps,
``--segments`` segments of ``--segment`` sweeps; after each the held-out log predictive per
image of that segment's draws (20 draws, :func:`numpyro_bnp.bench.features.held_out_curve`) is
printed with the compiled seconds so far, and the table ends with the seconds each engine needed
to reach the baseline's best score (within 1 nat).
"""

from numpyro_bnp._report import Column, Table
from numpyro_bnp.bench._common import pyplot, save_figure
from numpyro_bnp.bench.features import DrawScorer, digits_pixels, held_out_curve
from numpyro_bnp.models import linear_gaussian

DIGITS = dict(mass=3.0, sigma_a=0.5, sigma_o=0.15)
DIGITS_TEST, DIGITS_DRAWS, DIGITS_IS = 200, 20, 1000
CURVE_COLUMNS = (
    Column("engine", 36, align="<", gap="  "), Column("sweeps", 6), Column("s", 8, ".1f"),
    Column("held-out", 9, ".2f", gap="  "), Column("features per chain", align="<", gap="  "),
)  # fmt: skip
CURVE = Table(CURVE_COLUMNS)


def digits_curves(rows_list, segment, num_segments, capacity, path, replicas=0, match=None):
    """The real-data section (module docstring): one held-out curve per (engine, N);
    ``replicas`` adds ``CRMSlice`` with that many tempered replicas; ``match`` keeps the
    baseline and the engines whose name contains it."""
    from numpyro_bnp.infer import AcceleratedIBPGibbs, CRMSlice

    def crm_slice(**options):
        return lambda: CRMSlice(
            linear_gaussian, n_collapsed=5, xi_scale=3.0, max_features=2 * capacity, **options
        )

    engines = {"CRMSlice(n_collapsed=5, xi_scale=3)": crm_slice()}
    if replicas:
        engines[f"  same, temperatures={replicas}"] = crm_slice(temperatures=replicas)
    engines["  same, collapsed_rows=True"] = crm_slice(collapsed_rows=True)
    engines["  same, start='prior'"] = crm_slice(start="prior")
    engines["  same, collapsed_rows, start='prior'"] = crm_slice(collapsed_rows=True, start="prior")
    engines["AcceleratedIBPGibbs"] = lambda: AcceleratedIBPGibbs(linear_gaussian)
    if match is not None:
        engines = {k: v for k, v in engines.items() if match in k or k == "AcceleratedIBPGibbs"}
    curves = {}
    for num_rows in rows_list:
        train, test = digits_pixels(num_rows, DIGITS_TEST)
        kw = dict(num_obs=num_rows, dim=train.shape[1], max_features=capacity, **DIGITS)
        scorer = DrawScorer(kw, 2 * capacity, DIGITS_IS)
        print(f"\n== digits, N = {num_rows} fitted, {DIGITS_TEST} held out, {DIGITS}", flush=True)
        CURVE.header()
        for name, make in engines.items():
            curve = held_out_curve(
                make(), train, test, kw, (segment,) * num_segments, scorer, DIGITS_DRAWS
            )
            curves[name, num_rows] = curve
            for point in curve:
                chains = " ".join(f"{k:4.1f}" for k in point["K_chains"])
                CURVE.row(name, point["sweeps"], point["seconds"], point["lp"], chains)
    print("\n== seconds to reach the baseline's best held-out score (within 1 nat)")
    columns = (
        Column("N", 5), Column("engine", 36, align="<"), Column("reached s", 9, ".1f"),
        Column("final", 9, ".2f"), Column("features", 8, ".1f"), Column("s", 6, ".0f"),
    )  # fmt: skip
    reach = Table(columns)
    reach.header()
    for num_rows in rows_list:
        best = max(p["lp"] for p in curves["AcceleratedIBPGibbs", num_rows])
        for name in engines:
            hit = [p for p in curves[name, num_rows] if p["lp"] >= best - 1.0]
            last = curves[name, num_rows][-1]
            reached = hit[0]["seconds"] if hit else "not"
            reach.row(num_rows, name, reached, last["lp"], last["K"], last["seconds"])
    if path:
        plot_curves(curves, path)
    return curves


def plot_curves(curves, path):
    """Held-out log predictive against compiled seconds, one line per (engine, N)."""
    fig, ax = pyplot().subplots(figsize=(6, 4))
    for (name, num_rows), curve in curves.items():
        ax.plot([p["seconds"] for p in curve], [p["lp"] for p in curve], "o-", ms=3,
                label=f"{name}, N = {num_rows}")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("seconds (compiled, 4 chains)")
    ax.set_ylabel("held-out log predictive per image")
    ax.legend(fontsize=7)
    save_figure(fig, path, dpi=80)
