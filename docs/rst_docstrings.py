"""Griffe extension for the API pages: the reStructuredText of the docstrings as Markdown.

The docstrings are Sphinx style: mkdocstrings' ``sphinx`` parser reads their ``:param:``,
``:raises:`` and ``:return:`` fields, and the descriptions are rendered as Markdown. This
extension rewrites the rest of their reStructuredText before that:

* roles, ``:class:`~numpyro_bnp.infer.CRMSlice``` and ``:math:`ν(θ)```, become code spans
  (``CRMSlice``, the last part only after ``~``, as Sphinx shows it);
* ``.. math::`` and ``.. code-block::`` directives, and doctest paragraphs (``>>>``), become
  fenced code blocks.
"""

import re
import textwrap

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|math):`([^`]+)`")
_DIRECTIVE = re.compile(r"^( *)\.\. (math|code-block)::(.*)$")


def _role(match):
    target = match.group(1)
    shown = target[1:].rsplit(".", 1)[-1] if target.startswith("~") else target
    return f"`{shown}`"


def _fence(lines, language=""):
    body = textwrap.dedent("\n".join(lines)).strip("\n")
    return ["", f"```{language}", *body.split("\n"), "```", ""]


def to_markdown(text):
    """``text`` with its roles, directives and doctest paragraphs in Markdown."""
    lines = _ROLE.sub(_role, text).split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        directive = _DIRECTIVE.match(line)
        if directive:  # the indented block that follows (and an argument of .. math::)
            indent, kind, argument = directive.groups()
            block = [f"{indent}    {argument.strip()}"] if kind == "math" else []
            i += 1
            while i < len(lines) and (
                not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)
            ):
                block.append(lines[i])
                i += 1
            language = argument.strip() if kind == "code-block" else ""
            out += [indent + fenced for fenced in _fence(block, language)]
        elif line.lstrip().startswith(">>>") and (not out or not out[-1].strip()):
            start = i
            while i < len(lines) and lines[i].strip():
                i += 1
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + fenced for fenced in _fence(lines[start:i], "python")]
        else:
            out.append(line)
            i += 1
    return "\n".join(out)


class RstDocstrings(griffe.Extension):
    """Rewrite every docstring with :func:`to_markdown` once the package is loaded."""

    def on_object(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
