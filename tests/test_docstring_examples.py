"""Every docstring example of the library runs and prints what it says (doctest).

The examples are what a user sees, so they run with JAX's defaults (float32, no x64).
"""

import doctest
import importlib
import pathlib

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "numpyro_bnp"
MODULES = sorted(
    ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    for path in ROOT.rglob("*.py")
    if ">>>" in path.read_text()
)


def test_the_examples_are_found():
    assert (
        "numpyro_bnp.infer.features.ribp.filter" in MODULES
        and "numpyro_bnp.distributions.ibp" in MODULES
    )


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    with jax.enable_x64(False):
        failed, attempted = doctest.testmod(module, optionflags=flags, verbose=False)
    assert attempted > 0
    assert failed == 0, f"{failed} of {attempted} docstring examples of {name} failed (see above)"
