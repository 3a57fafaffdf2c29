"""Every Python code block in the README and in docs/ runs as written."""

import pathlib
import re

import matplotlib
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


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
