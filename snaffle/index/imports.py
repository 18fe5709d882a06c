"""Imports as module names: what a file imports, and the dotted name a repository file is imported as."""

from __future__ import annotations

import ast
from pathlib import Path, PurePosixPath


def imported_modules(source: bytes) -> list[str]:
    """Absolute module names a file imports (`from a.b import c` gives a.b and a.b.c)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_name(root: Path, path: str) -> str:
    """The dotted name `path` imports as: counted from the first directory up that is not a package, so
    `src/pkg/mod.py` is `pkg.mod`."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    top = len(parts) - 1
    while top > 0 and (root.joinpath(*parts[:top]) / "__init__.py").is_file():
        top -= 1
    dotted = ".".join(parts[top:])
    return dotted.removesuffix(".__init__")
