"""Imports as module names: what a file imports, and the dotted name a repository file is imported as."""

from __future__ import annotations

from functools import cache
from pathlib import Path, PurePosixPath

from tree_sitter import Node, Parser, Query, QueryCursor

from snaffle.index.parse import python_language

IMPORTS_QUERY = "[(import_statement) (import_from_statement) (future_import_statement)] @import"


@cache
def _imports_query() -> Query:
    return Query(python_language(), IMPORTS_QUERY)


def imported_modules(source: bytes) -> list[str]:
    """Absolute module names a file imports (`from a.b import c` gives a.b and a.b.c; `from a import *`, a and
    a.*), in source order, nested ones included. tree-sitter tolerates syntax errors (a Python 2 file, a stray
    token): the import statements it finds are kept, those inside a broken statement lost."""
    tree = Parser(python_language()).parse(source)
    statements = QueryCursor(_imports_query()).captures(tree.root_node).get("import", [])
    names: list[str] = []
    for statement in sorted(statements, key=lambda node: node.start_byte):
        names.extend(_statement_modules(statement))
    return names


def _statement_modules(statement: Node) -> list[str]:
    imported = [_text(_target(child)) for child in statement.children_by_field_name("name")]
    if statement.type == "import_statement":
        return imported
    module = statement.child_by_field_name("module_name")
    base = "__future__" if statement.type == "future_import_statement" else _text(module) if module else ""
    if not base or (module is not None and module.type == "relative_import"):
        return []
    if any(child.type == "wildcard_import" for child in statement.children):
        imported.append("*")
    return [base, *(f"{base}.{name}" for name in imported)]


def _target(child: Node) -> Node:
    """The imported name of `a as b` (a), or the name itself."""
    name = child.child_by_field_name("name") if child.type == "aliased_import" else None
    return name or child


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def module_name(root: Path, path: str) -> str:
    """The dotted name `path` imports as: counted from the first directory up that is not a package, so
    `src/pkg/mod.py` is `pkg.mod`."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    top = len(parts) - 1
    while top > 0 and (root.joinpath(*parts[:top]) / "__init__.py").is_file():
        top -= 1
    dotted = ".".join(parts[top:])
    return dotted.removesuffix(".__init__")
