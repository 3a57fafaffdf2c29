"""The ArviZ adapter gives the same data on ArviZ 0.23 (InferenceData) and 1.x (DataTree)."""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from numpyro_bnp.arviz_compat import arviz, from_dict, group


def test_from_dict_keeps_values_and_a_time_dimension():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(1, 40, 6, 3))  # (chain, draw, time, feature)
    lp = rng.normal(size=(1, 40, 6))
    data = from_dict(
        {"posterior": {"w": w}, "sample_stats": {"lp": lp}},
        dims={"w": ["time", "feature"], "lp": ["time"]},
        coords={"time": np.arange(6), "feature": np.arange(3)},
    )
    posterior = group(data, "posterior")
    assert posterior["w"].dims == ("chain", "draw", "time", "feature")
    np.testing.assert_array_equal(posterior["w"].values, w)
    np.testing.assert_array_equal(group(data, "sample_stats")["lp"].values, lp)
    # ArviZ's own statistics accept it on either version
    summary = arviz().summary(data, var_names=["w"], kind="stats")
    np.testing.assert_allclose(summary["mean"].to_numpy(), w.mean(axis=(0, 1)).ravel(), atol=5e-3)


EXPORT = """
import sys
{imports}
import jax
import os
import subprocess
import sys

import numpy as np
import pytest
from numpyro.infer import MCMC
from numpyro_bnp.infer import AcceleratedIBPGibbs
from numpyro_bnp.models import linear_gaussian

mcmc = MCMC(AcceleratedIBPGibbs(linear_gaussian), num_warmup=1, num_samples=2, progress_bar=False)
mcmc.run(jax.random.PRNGKey(0), np.ones((3, 2)), num_obs=3, dim=2, max_features=2)
data = az.from_numpyro(mcmc)
print(sorted(data.children if hasattr(data, "children") else data.groups()))
"""


def _subprocess_env():
    """CPU only, and the suite's persistent compilation cache (``tests/conftest.py``).

    Each import order needs a fresh interpreter, but all of them compile the same programs (the
    MCMC run, ArviZ's log-likelihood): with the cache, every program kept however quickly it
    compiled, only the first interpreter compiles them and the others load them.
    """
    return {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": jax.config.jax_compilation_cache_dir,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }


@pytest.mark.parametrize(
    "imports",
    [
        "import numpyro_bnp\nimport arviz as az",
        "import arviz as az\nimport numpyro_bnp",
        # ArviZ 1.x loads numpyro lazily: a submodule imported first used to be imported twice
        "import arviz as az\nfrom numpyro.infer import NUTS\nimport numpyro_bnp",
    ],
    ids=["library-first", "arviz-first", "arviz-then-numpyro.infer"],
)
def test_arviz_from_numpyro_in_any_import_order(imports):
    """A fresh interpreter: ArviZ's own from_numpyro exports a library kernel's run."""
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", EXPORT.format(imports=imports)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_subprocess_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    groups = out.stdout.strip().splitlines()[-1]
    assert "posterior" in groups and "observed_data" in groups  # log-likelihood: 0.23 only


RACE = """
import pathlib

replace = pathlib.Path.replace


def replaced_by_another_process(self, target):
    # the other process's replace ran first: the stamp is there, this temporary file is gone
    replace(self, target)
    raise FileNotFoundError(2, "No such file or directory", str(self), str(target))


pathlib.Path.replace = replaced_by_another_process
from numpyro_bnp.arviz_compat import arviz

print(arviz().__version__)
"""


def test_arviz_import_survives_another_process_writing_its_daily_stamp(tmp_path):
    """ArviZ 0.23 writes a once-a-day stamp on import; two processes at once made one fail."""
    if int(arviz().__version__.split(".")[0]) >= 1:
        pytest.skip("ArviZ 1.x writes no stamp")
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", RACE],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "XDG_CACHE_HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == arviz().__version__
