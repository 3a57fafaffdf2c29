"""Monte-Carlo checks shared by the MCMC tests."""

import numpy as np

from numpyro_bnp.arviz_compat import arviz


def check_mean(draws, truth):
    """``draws`` (chain, draw): |mean - truth| < 4 MCSE, the MCSE from ArviZ's ESS (false-alarm
    rate about 6e-5 per check)."""
    draws = np.asarray(draws, np.float64)
    ess = float(arviz().ess(draws))
    se = draws.std() / np.sqrt(ess)
    assert ess > 100, ess
    assert abs(draws.mean() - truth) < 4 * se, (draws.mean(), truth, se, ess)
