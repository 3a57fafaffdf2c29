"""The repository keeps its promises: CI runs exactly the README's test command."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _code_lines(text):
    blocks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (ROOT / "README.md").read_text()
    test_commands = [line for line in _code_lines(readme) if "pytest" in line]
    assert len(test_commands) == 1, f"README must show exactly one test command: {test_commands}"
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_commands[0] in ci_lines
    assert "set -euo pipefail" in ci_lines


def test_readme_has_the_demo_command():
    demo = [line for line in _code_lines((ROOT / "README.md").read_text()) if "demo" in line]
    assert len(demo) == 1 and demo[0].startswith("python3 -m venv")
    assert demo[0].endswith("-m numpyro_bnp demo")
