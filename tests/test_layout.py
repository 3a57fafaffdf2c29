"""The layout of the engines (docs/development.md, "Layout"): imports point down the floors, the
module paths of the first layout still import, and checkpoints and pickles written by the first
layout's code (``tests/data/first_layout``, written by its ``write.py``) still load."""

import ast
import importlib
import pathlib
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random

import numpyro_bnp.infer as infer
from numpyro_bnp import models

PACKAGE = pathlib.Path(infer.__file__).resolve().parents[1]
DATA = pathlib.Path(__file__).parent / "data" / "first_layout"

#: floor -> the floors of the library it may not import (imports point down)
FORBIDDEN = {
    "distributions": ("infer", "models", "diagnostics", "plots", "bench", "demos"),
    "families": ("infer", "models", "diagnostics", "plots", "bench", "demos"),
    "models": ("infer", "diagnostics", "plots", "bench", "demos"),
    "infer/core": ("infer.features", "infer.mixtures", "infer.twins", "bench", "demos"),
    "infer/features": ("infer.mixtures", "infer.twins", "bench", "demos"),
    "infer/mixtures": ("infer.features", "infer.twins", "bench", "demos"),
    "demos": ("bench",),
    "datasets.py": ("infer", "models", "diagnostics", "plots", "bench", "demos"),
    "_report.py": ("infer", "models", "diagnostics", "plots", "bench", "demos"),
}


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


@pytest.mark.parametrize("floor", sorted(FORBIDDEN))
def test_imports_point_down(floor):
    root = PACKAGE / floor
    bad = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in (sorted(root.rglob("*.py")) if root.is_dir() else [root])
        for module in _imports(path)
        for below in FORBIDDEN[floor]
        if module == f"numpyro_bnp.{below}" or module.startswith(f"numpyro_bnp.{below}.")
    ]
    assert not bad, bad


def test_only_the_command_imports_the_bench():
    importers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.parent.name != "bench"
        and any(
            m == "numpyro_bnp.bench" or m.startswith("numpyro_bnp.bench.") for m in _imports(path)
        )
    )
    assert importers == ["__main__.py"], importers


def test_no_module_is_past_eight_hundred_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 800
    }
    assert not long, long


@pytest.mark.parametrize("old", sorted(infer.FIRST_LAYOUT))
def test_first_layout_paths_import_the_moved_modules(old):
    moved = importlib.import_module(f"numpyro_bnp.infer.{infer.FIRST_LAYOUT[old]}")
    assert importlib.import_module(f"numpyro_bnp.infer.{old}") is moved
    assert getattr(infer, old) is moved


def test_the_mixture_models_first_module_path_imports():
    import numpyro_bnp.mixture_models
    from numpyro_bnp.mixture_models import dp_mixture

    assert dp_mixture is numpyro_bnp.mixture_models.dp_mixture is models.dp_mixture


def test_public_engine_names_import_from_infer():
    from numpyro_bnp.infer.ribp import RIBPFilter as first_layout
    from numpyro_bnp.infer.streaming import learning_curve  # noqa: F401

    from numpyro_bnp.infer import (  # noqa: F401
        ADFNRM,
        EPNRM,
        AcceleratedIBPGibbs,
        CRMSlice,
        CRMTopicSlice,
        NGGPMarginalGibbs,
        PowerPriorSVB,
        RestrictedIBPGibbs,
        RIBPFilter,
        truncated_twin,
    )

    assert first_layout is RIBPFilter


def _rows():
    """The data ``write.py`` streamed (the same generator, the same draws)."""
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(4, 5))
    rows = (rng.random((60, 4)) < 0.4) @ feats + 0.2 * rng.normal(size=(60, 5))
    clusters = rng.normal(size=(3, 2)) * 6
    points = clusters[rng.integers(3, size=60)] + rng.normal(size=(60, 2))
    return rows, points


def _same(a, b):
    leaves_a, leaves_b = (np.asarray(x) for x in a), (np.asarray(x) for x in b)
    return all(
        x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(leaves_a, leaves_b, strict=True)
    )


def _flat(state):
    return jax.tree.leaves(state)


def _comparable(state):
    """The state's leaves, ADF-NRM's ``log_empty`` as the occupancy ``1 - e^ℓ`` (a cluster's
    ``ℓ`` of -100 or so is float32 rounding of ``log(1 - r)`` at ``r`` next to 1)."""
    if hasattr(state, "log_empty"):
        state = state._replace(log_empty=-np.expm1(np.asarray(state.log_empty)))
    return _flat(state)


ENGINES = {
    "ribp": (
        lambda: infer.RIBPFilter(models.linear_gaussian, max_features=16, dtype=jnp.float32),
        lambda engine, rows, points, **kw: engine.run(
            random.PRNGKey(0), rows, progress_bar=False, chunk_size=16, num_obs=1, dim=5,
            mass=2.0, sigma_a=1.0, sigma_o=0.2, **kw
        ),
        lambda rows, points: (rows[:40], rows[40:], rows),
    ),
    "adf_nrm": (
        lambda: infer.ADFNRM(models.nggp_normal_mixture),
        lambda engine, data, points, **kw: engine.run(
            None, data, num_obs=1, dim=2, mass=1.0, sigma=0.5, sigma_mu=6.0, sigma_o=1.0,
            progress_bar=False, **kw
        ),
        lambda rows, points: (points[:40], points[40:], points),
    ),
    "power_prior": (
        lambda: infer.PowerPriorSVB(models.dp_mixture, forgetting="hpp", gamma=0.1),
        lambda engine, batches, points, **kw: engine.run(
            random.PRNGKey(0), batches, num_obs=20, dim=2, progress_bar=False, **kw
        ),
        lambda rows, points: (
            [points[:20], points[20:40]], [points[40:]], [points[:20], points[20:40], points[40:]]
        ),
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_first_layout_checkpoints_and_pickles_resume_the_stream(name):
    """The first layout's checkpoint loads into today's engine; its pickled result unpickles (its
    classes named by their first-layout modules) with the same state, bit for bit; today's code
    over the same rows reaches that state, and the stream resumed from it ends where one run over
    all the data ends. The last two hold to float32 rounding, not bit for bit: ``write.py`` ran
    in a process with JAX's defaults, the suite switches x64 on around this float32 block, and
    ADF-NRM now normalizes the old clusters' responsibilities in log space
    (:func:`_comparable`); power-prior SVB's coordinate ascent stops at its tolerance (1e-3)."""
    build, run, split = ENGINES[name]
    first, rest, everything = split(*_rows())
    with jax.enable_x64(False):  # as write.py ran: float32
        engine = build()
        today = run(engine, first, None)  # reads the model, as a loading engine must have
        state = engine.load(DATA / f"{name}.npz")
        with open(DATA / f"{name}_result.pkl", "rb") as f:
            pickled = pickle.load(f)
        resumed = run(engine, rest, None, init_state=state)
        whole = run(engine, everything, None)
    assert type(pickled.state) is type(state) and _same(_flat(pickled.state), _flat(state))
    for reached, expected in ((today.state, state), (resumed.state, whole.state)):
        pairs = zip(_comparable(reached), _comparable(expected), strict=True)
        for a, b in pairs:
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-3, atol=1e-6)
