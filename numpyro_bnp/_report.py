"""The tables and timings that ``python -m numpyro_bnp bench`` and ``demo`` print.

A table is a list of :class:`Column` (header, width, number format, alignment, the text before
it) and rows of values: numbers are formatted by the column's ``spec``, text is printed as it is,
``None`` as ``-``. :class:`Table` prints the header, then each row as it comes (a benchmark's row
can take minutes); :func:`print_table` prints a whole one. :func:`timed` and
:func:`median_seconds` time compiled work: the median over repeats, the first (cold) call, which
compiles, reported apart.
"""

import statistics
import time
from typing import NamedTuple

__all__ = ["Column", "Table", "Timing", "format_row", "median_seconds", "print_table", "timed"]


class Column(NamedTuple):
    """One column: its ``header``, ``width`` in characters (at least the header's), ``spec`` the
    format of its numbers (``".2f"``, ``",d"``, ``"+.1f"``; text cells are printed as they are),
    ``align`` (``">"`` right, ``"<"`` left) and ``gap``, the text before it (dropped before the
    first column)."""

    header: str
    width: int = 0
    spec: str = ""
    align: str = ">"
    gap: str = " "


def _cell(value, column):
    if value is None:
        text = "-"
    elif isinstance(value, str):
        text = value
    else:
        text = format(value, column.spec)
    return f"{text:{column.align}{max(column.width, len(column.header))}}"


def format_row(columns, values):
    """One line: ``values`` (one a column) in their ``columns``, trailing spaces removed."""
    if len(values) != len(columns):
        raise ValueError(f"{len(values)} values for {len(columns)} columns")
    cells = zip(values, columns, strict=True)
    return "".join(c.gap * (i > 0) + _cell(v, c) for i, (v, c) in enumerate(cells)).rstrip()


class Table:
    """A table printed as it is filled: :meth:`header` once, then :meth:`row` per row (flushed,
    so that a long benchmark shows each row when it is done). ``rule``: a line of ``-`` under the
    header."""

    def __init__(self, columns, rule=False):
        self.columns = tuple(columns)
        self.rule = rule

    def header(self):
        line = format_row(self.columns, [c.header for c in self.columns])
        print(line, flush=True)
        if self.rule:
            print("-" * len(line), flush=True)

    def row(self, *values):
        print(format_row(self.columns, values), flush=True)


def print_table(columns, rows, rule=False):
    """Print the header of ``columns`` and every row of ``rows`` (sequences of values)."""
    table = Table(columns, rule)
    table.header()
    for values in rows:
        table.row(*values)


class Timing(NamedTuple):
    """What :func:`timed` measured: ``out`` the last repeat's result, ``seconds`` the median over
    the repeats, ``cold`` the first call's seconds (compilation included)."""

    out: object
    seconds: float
    cold: float


def median_seconds(fn, repeats=1, clock=time.perf_counter):
    """``(median seconds, last result)`` of ``repeats`` calls of ``fn()``, each timed until its
    result is ready (``jax.block_until_ready``); the median is the least disturbed by other work on
    a shared machine without favouring one lucky call. ``clock``: seconds now."""
    import jax

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    seconds = []
    for _ in range(repeats):
        t0 = clock()
        out = jax.block_until_ready(fn())
        seconds.append(clock() - t0)
    return statistics.median(seconds), out


def timed(run, repeats=3, clock=time.perf_counter):
    """``run(0)`` once (the cold call, which compiles), then ``run(1)`` ``repeats`` times, as a
    user's next runs reuse the compiled programs: a :class:`Timing`."""
    cold, _ = median_seconds(lambda: run(0), 1, clock)
    seconds, out = median_seconds(lambda: run(1), repeats, clock)
    return Timing(out, seconds, cold)
