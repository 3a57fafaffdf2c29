"""The documentation holds: every Python code block in the README and in docs/ runs as written,
every ``numpyro_bnp`` name it mentions exists, and the site (API pages included) builds strictly."""

import importlib
import importlib.util
import inspect
import os
import pathlib
import re
import subprocess
import sys

import matplotlib
import pytest

import numpyro_bnp.infer

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ENGINES = [
    "RIBPFilter",
    "ADFNRM",
    "EPNRM",
    "PowerPriorSVB",
    "NGGPMarginalGibbs",
    "CRMSlice",
    "CRMTopicSlice",
    "AcceleratedIBPGibbs",
    "RestrictedIBPGibbs",
    "truncated_twin",
]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_code_blocks_run(page, tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    if not blocks:
        pytest.skip(f"{page.name} has no Python blocks")
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)  # blocks that save files write here
    namespace = {"__name__": f"docs_{page.stem}"}
    for block in blocks:  # blocks of one page share a namespace, like a reader's session
        exec(compile(block, str(page), "exec"), namespace)


def _documented_names():
    """``{dotted name: pages}`` of every ``numpyro_bnp.x.y`` in the README and docs/ (text and code,
    the API pages' ``:::`` lines included) and every name of a ``from numpyro_bnp.x import ...``."""
    names = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        found = set(re.findall(r"\bnumpyro_bnp(?:\.\w+)+", text))
        imports = r"^\s*from (numpyro_bnp(?:\.\w+)*) import (\([^)]*\)|.*)"
        for module, imported in re.findall(imports, text, flags=re.M):
            for name in re.sub(r"#.*", "", imported).strip("()").split(","):
                if name.strip():
                    found.add(f"{module}.{name.split(' as ')[0].strip()}")
        for name in found:
            names.setdefault(name, []).append(str(page.relative_to(ROOT)))
    return names


def _resolves(dotted):
    """Whether ``dotted`` is a module or an attribute of one (importing submodules on the way)."""
    head, *parts = dotted.split(".")
    obj = importlib.import_module(head)
    for part in parts:
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif inspect.ismodule(obj):
            try:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
            except ModuleNotFoundError as error:
                if error.name != f"{obj.__name__}.{part}":
                    raise
                return False
        else:
            return False
    return True


def test_documented_names_import():
    names = _documented_names()
    assert "numpyro_bnp.infer.RIBPFilter" in names  # the scan finds the names
    assert not _resolves("numpyro_bnp.infer.RIBPFilter.no_such_method")  # and can miss one
    missing = {name: pages for name, pages in sorted(names.items()) if not _resolves(name)}
    assert not missing, f"names in the docs that do not resolve: {missing}"


def test_engines_are_public_in_infer():
    assert [name for name in ENGINES if name not in numpyro_bnp.infer.__all__] == []
    for name in ENGINES:
        assert callable(getattr(numpyro_bnp.infer, name))


def test_api_page_documents_every_public_inference_name():
    page = (ROOT / "docs" / "api" / "infer.md").read_text()
    documented = re.findall(r"^::: numpyro_bnp\.infer\.(\w+)$", page, flags=re.M)
    assert sorted(documented) == sorted(numpyro_bnp.infer.__all__)


def test_mkdocs_build_strict(tmp_path):
    """``mkdocs build --strict``: no broken link or anchor, no page missing from the nav, and every
    ``:::`` name of docs/api/ found, with a docstring mkdocstrings parses without a warning."""
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's notice about MkDocs 2
        timeout=300,
    )
    output = build.stdout + build.stderr
    assert build.returncode == 0 and "WARNING" not in output, output


def test_rst_docstrings_become_markdown():
    """The API pages' Griffe extension: roles as code spans, directives and doctests fenced."""
    spec = importlib.util.spec_from_file_location("rst", ROOT / "docs" / "rst_docstrings.py")
    rst = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rst)
    docstring = (
        "See :class:`~numpyro_bnp.infer.CRMSlice` and :func:`numpyro_bnp.models.dp_mixture`,\n"
        "with :math:`ν(θ)`.\n\n.. math::\n    a = b\n\nthen\n\n"
        ".. code-block:: python\n\n    >>> 1 + 1\n    2\n\n>>> x = 1\n>>> x\n1\n\nend\n"
        ":param x: as in :meth:`RIBPFilter.run`."
    )
    assert rst.to_markdown(docstring).split("\n") == [
        "See `CRMSlice` and `numpyro_bnp.models.dp_mixture`,",
        "with `ν(θ)`.",
        "",
        "",
        "```",
        "a = b",
        "```",
        "",
        "then",
        "",
        "",
        "```python",
        ">>> 1 + 1",
        "2",
        "```",
        "",
        "",
        "```python",
        ">>> x = 1",
        ">>> x",
        "1",
        "```",
        "",
        "",
        "end",
        ":param x: as in `RIBPFilter.run`.",
    ]
