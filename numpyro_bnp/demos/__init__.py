"""The parts of ``python -m numpyro_bnp demo``: one module per capability, each with
``run(out_dir) -> list[str]`` that prints a short table and returns the paths of its figures."""

from numpyro_bnp.demos import ibp, nggp_gibbs, nrm, power_prior, ribp

DEMOS = {
    "ibp": ibp.run,
    "ribp": ribp.run,
    "nrm": nrm.run,
    "power_prior": power_prior.run,
    "nggp_gibbs": nggp_gibbs.run,
}

__all__ = ["DEMOS"]
