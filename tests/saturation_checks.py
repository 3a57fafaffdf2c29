"""Reading the saturation warnings of the MCMC kernels
(:func:`numpyro_bnp.infer.core.mcmc.report_saturation`) in tests: what they report, and what they
should report given the ``saturated`` field."""

import re

import numpy as np


def saturation_reports(messages):
    """``{(chain, count, sweep)}`` read from saturation warnings ("chain c: k of i sweeps", or
    "in k of i sweeps" for one chain: chain ``None``)."""
    found = set()
    for message in messages:
        for chain, count, sweep in re.findall(r"chain (\d+): (\d+) of (\d+) sweeps", message):
            found.add((int(chain), int(count), int(sweep)))
        for count, sweep in re.findall(r"full in (\d+) of (\d+) sweeps", message):
            found.add((None, int(count), int(sweep)))
    return found


def expected_reports(saturated, vectorized):
    """The reports of the saturation warnings of ``saturated`` ``(chain, sweep)``: a warning in a
    sweep where a saturated chain's count of saturated sweeps reaches 1, 2, 4, ...; vectorized
    chains report every chain saturated in that sweep (chain ``None`` one at a time)."""
    counts = np.cumsum(saturated, axis=1)
    first = saturated & (counts & (counts - 1) == 0)
    warned = first.any(0, keepdims=True) if vectorized else first
    return {
        (c if vectorized else None, int(counts[c, i]), i + 1)
        for c, i in zip(*np.nonzero(saturated & warned), strict=True)
    }
