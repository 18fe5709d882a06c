"""A shown definition with its docstring moved out of the code, above its header as `# | ` comment lines.

A weak model copies what it is shown: on the A/B bench's one-shot rewrites (1.5B, session 5), 36 of 42 answers
repeated the definition's docstring although the prompt says the original is kept, and docstrings were 38 % of the
characters those answers decoded. Moved above the header, the docstring still says what the code should do, but the
definition to rewrite no longer holds it; a rewrite that leaves it out gets it back (primitives/edit.keep_docstring).
Only for rewrites: a search/replace answer must copy lines exactly as the file has them.
"""

from __future__ import annotations

import ast
import textwrap

DOC_PREFIX = "# | "
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def docstring_apart(lines: list[str]) -> list[str]:
    """A definition's source lines with its own docstring as `# | ` lines above it (decorators included); the lines
    unchanged when there is no docstring, the text does not parse alone, the docstring shares a line with other
    code, or it is the whole body."""
    dedented = textwrap.dedent("\n".join(lines)).splitlines()
    try:
        tree = ast.parse("\n".join(dedented))
    except SyntaxError:
        return lines
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, DEFINITIONS) or len(node.body) < 2 or ast.get_docstring(node) is None:
        return lines
    doc, after = node.body[0], node.body[1]
    assert doc.end_lineno is not None
    if dedented[doc.lineno - 1][: doc.col_offset].strip() or after.lineno == doc.end_lineno:
        return lines
    moved = [(DOC_PREFIX + line).rstrip() for line in (ast.get_docstring(node) or "").splitlines()]
    return moved + lines[: doc.lineno - 1] + lines[doc.end_lineno :]


def without_doc_lines(lines: list[str]) -> list[str]:
    """`lines` without the moved docstring's comment lines (a signature shown alone leaves them out)."""
    return [line for line in lines if not line.startswith(DOC_PREFIX.rstrip())]
