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


def imported_names(source: bytes, package: str) -> dict[str, str]:
    """Each name a file's `from` imports bind, with the absolute dotted name it stands for: in package `pkg`,
    `from .core.ops import where as w` binds `w` to pkg.core.ops.where (how a package's `__init__` re-exports
    what its modules define). Wildcards bind no name; a relative import above the top package is left out."""
    tree = Parser(python_language()).parse(source)
    statements = QueryCursor(_imports_query()).captures(tree.root_node).get("import", [])
    bound: dict[str, str] = {}
    for statement in (s for s in statements if s.type == "import_from_statement"):
        module = statement.child_by_field_name("module_name")
        base = _absolute(module, package) if module is not None else None
        for child in statement.children_by_field_name("name") if base else ():
            alias = child.child_by_field_name("alias") if child.type == "aliased_import" else None
            name = _text(_target(child))
            bound[_text(alias) if alias else name] = f"{base}.{name}"
    return bound


def _absolute(module: Node, package: str) -> str | None:
    """The absolute name of an import's module (`..ops` in package a.b: a.ops)."""
    if module.type != "relative_import":
        return _text(module)
    prefix = next((c for c in module.children if c.type == "import_prefix"), None)
    dots = len(_text(prefix)) if prefix is not None else 0
    rest = next((_text(c) for c in module.children if c.type == "dotted_name"), "")
    parts = package.split(".") if package else []
    if dots - 1 >= len(parts):
        return None
    base = parts[: len(parts) - (dots - 1)]
    return ".".join([*base, rest] if rest else base)
