"""Small real data sets shipped with the package (no download), for the demo and benchmarks."""

from importlib import resources

import numpy as np

__all__ = ["galaxies"]


def galaxies():
    """The velocities (km/s) of 82 galaxies of the Corona Borealis region, ``(82,)`` float64:
    Roeder, *Density estimation with confidence sets exemplified by superclusters and voids in
    the galaxies*, JASA 1990 (R's ``MASS::galaxies``), the standard data set of
    Bayesian-nonparametric mixture papers."""
    text = resources.files("numpyro_bnp.data").joinpath("galaxies.csv").read_text()
    return np.loadtxt(text.splitlines(), comments="#", skiprows=3)
