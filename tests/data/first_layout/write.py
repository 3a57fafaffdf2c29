"""Writes the checkpoints and pickled results that ``tests/test_layout.py`` loads.

Run once with the code of the first layout (the flat ``numpyro_bnp/infer/`` folder, before the
engine families became subpackages): ``python tests/data/first_layout/write.py OUT_DIR``.
"""

import pickle
import sys

import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_bnp import models
from numpyro_bnp.infer import ADFNRM, PowerPriorSVB, RIBPFilter


def _save(result, out, name):
    result.save(f"{out}/{name}.npz")
    with open(f"{out}/{name}_result.pkl", "wb") as f:
        pickle.dump(result, f)


def main(out):
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(4, 5))
    rows = (rng.random((60, 4)) < 0.4) @ feats + 0.2 * rng.normal(size=(60, 5))
    clusters = rng.normal(size=(3, 2)) * 6
    points = clusters[rng.integers(3, size=60)] + rng.normal(size=(60, 2))
    ribp = RIBPFilter(models.linear_gaussian, max_features=16, dtype=jnp.float32)
    lg = dict(num_obs=1, dim=5, mass=2.0, sigma_a=1.0, sigma_o=0.2)
    _save(ribp.run(random.PRNGKey(0), rows[:40], progress_bar=False, chunk_size=16, **lg), out,
          "ribp")  # fmt: skip
    adf = ADFNRM(models.nggp_normal_mixture)
    normal = dict(num_obs=1, dim=2, mass=1.0, sigma=0.5, sigma_mu=6.0, sigma_o=1.0)
    _save(adf.run(None, points[:40], progress_bar=False, **normal), out, "adf_nrm")
    svb = PowerPriorSVB(models.dp_mixture, forgetting="hpp", gamma=0.1)
    batches = [points[:20], points[20:40]]
    _save(svb.run(random.PRNGKey(0), batches, num_obs=20, dim=2, progress_bar=False), out,
          "power_prior")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
