"""The parts of ``python -m numpyro_bnp demo``: one module per capability, each with
``run(out_dir) -> list[str]`` that prints a short table and returns the paths of its figures."""

from numpyro_bnp.demos import ibp, ribp

DEMOS = {"ibp": ibp.run, "ribp": ribp.run}

__all__ = ["DEMOS"]
