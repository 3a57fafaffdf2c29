"""The ``bench`` command line, its shared table printer and timings, and the data split (no JAX
compilation: parsing, fake clocks and NumPy only)."""

import numpy as np
import pytest

from numpyro_bnp import datasets
from numpyro_bnp.__main__ import build_parser, main
from numpyro_bnp._report import Column, Table, format_row, median_seconds, print_table, timed
from numpyro_bnp.bench import FAMILIES

PROTOCOL = ("HELP", "QUICK_HELP", "CPU_LOOP_KERNELS", "add_arguments", "run")


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_family_has_the_protocol_and_a_help_that_lists_quick(name, capsys):
    family = FAMILIES[name]
    assert family.__doc__.splitlines()[0] and all(hasattr(family, a) for a in PROTOCOL)
    with pytest.raises(SystemExit) as done:
        main(["bench", name, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m numpyro_bnp bench {name} [-h] [--quick]")
    assert ("--xla-default" in out) == family.CPU_LOOP_KERNELS
    args = build_parser().parse_args(["bench", name, "--quick"])
    assert args.quick and args.family_module is family


def test_an_unknown_family_is_refused_with_the_list_of_families(capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench", "nonexistent"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nonexistent'" in err
    assert all(f"'{name}'" in err for name in FAMILIES)


class FakeClock:
    """A clock that reads the given instants in turn."""

    def __init__(self, *instants):
        self.instants = iter(instants)

    def __call__(self):
        return next(self.instants)


def test_median_seconds_is_the_median_of_the_repeats_and_returns_the_last_result():
    calls = iter(range(10))
    clock = FakeClock(0.0, 1.0, 10.0, 13.0, 20.0, 22.0, 30.0, 30.5)  # 1, 3, 2, 0.5 s
    seconds, out = median_seconds(lambda: next(calls), repeats=4, clock=clock)
    assert seconds == 1.5 and out == 3
    with pytest.raises(ValueError, match="repeats"):
        median_seconds(lambda: None, repeats=0)


def test_timed_reports_the_cold_call_apart_from_the_median_of_the_repeats():
    seeds = []
    clock = FakeClock(0.0, 9.0, 10.0, 11.0, 11.0, 15.0, 20.0, 22.0)  # cold 9, then 1, 4, 2 s
    timing = timed(lambda seed: seeds.append(seed) or seed, repeats=3, clock=clock)
    assert (timing.seconds, timing.cold, timing.out) == (2.0, 9.0, 1)
    assert seeds == [0, 1, 1, 1]


def test_the_table_printer_aligns_formats_and_marks_missing_values(capsys):
    columns = (
        Column("method", 8, align="<"),
        Column("s", 6, ".2f"),
        Column("K", 3, gap=" | "),
        Column("note", align="<", gap="  "),
    )
    print_table(columns, [("ADF", 1.23456, 12, "cold"), ("EP x20", None, 7, "")])
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "method        s |   K  note",
        "ADF        1.23 |  12  cold",
        "EP x20        - |   7",
    ]
    assert format_row(columns[:2], ("a long label", 0.5)) == "a long label   0.50"
    with pytest.raises(ValueError, match="2 values for 4 columns"):
        format_row(columns, (1, 2))
    table = Table(columns[:2], rule=True)
    table.header()
    table.row("x", 3.0)
    assert capsys.readouterr().out.splitlines() == ["method        s", "-" * 15, "x          3.00"]


def test_shuffled_split_holds_out_the_first_or_the_last_of_one_permutation():
    data = np.arange(10) * 10
    perm = np.random.default_rng(3).permutation(10)
    train, test = datasets.shuffled_split(data, 2, seed=3)
    np.testing.assert_array_equal(test, data[perm[:2]])
    np.testing.assert_array_equal(train, data[perm[2:]])
    train, test = datasets.shuffled_split(data, 3, num_train=4, seed=3, held_out="last")
    np.testing.assert_array_equal(test, data[perm[7:]])
    np.testing.assert_array_equal(train, data[perm[:4]])
    train, _ = datasets.shuffled_split(data, 2, num_train=5, seed=3)
    np.testing.assert_array_equal(train, data[perm[2:7]])
    with pytest.raises(ValueError, match="do not fit"):
        datasets.shuffled_split(data, 4, num_train=7)
    with pytest.raises(ValueError, match="held_out"):
        datasets.shuffled_split(data, 2, held_out="middle")
