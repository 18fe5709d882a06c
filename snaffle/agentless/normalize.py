"""A module's source with what cannot change its behaviour normalized away: the text that selection votes over.

Comments, formatting and docstrings go; so do the spellings of an import: `from re import sub` then `sub(x)` reads
`re.sub(x)`, as `import re` then `re.sub(x)` does, and a name imported twice counts once. What stays: the modules
the file imports (importing runs them), every name the code uses resolved to what it names, and the names `__all__`
lists or a package's `__init__.py` imports from the package itself, which are its interface.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

Imports = ast.Import | ast.ImportFrom


@dataclass(frozen=True)
class Binding:
    """One name a top-level import binds: `alias` in the module names `target` (a dotted path)."""

    alias: str
    target: str
    module: str
    """The module the import runs (`from pkg.mod import x` runs `pkg.mod`)."""


def normalize_source(source: str, package: str | None = None) -> str:
    """The module's behaviour as text: imported modules, interface bindings, then `ast.unparse` of the code with
    docstrings dropped and imported names resolved; the source itself when it does not parse. `package`: the
    top-level package whose `__init__.py` this is (None for any other module)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    _drop_docstrings(tree)
    bindings = [b for node in tree.body if isinstance(node, Imports) for b in _bindings(node)]
    resolved = _resolvable(tree, bindings)
    tree.body = [node for node in tree.body if not (isinstance(node, Imports) and _bindings(node))]
    used = _loaded_names(tree)
    _Resolver(resolved).visit(tree)
    exported = _exported(tree)
    kept = {
        f"{b.alias} = {b.target}"
        for b in bindings
        if b.alias != b.target and (_interface(b, package, exported) or (b.alias in used and b.alias not in resolved))
    }
    header = [f"import {m}" for m in sorted({b.module for b in bindings})] + sorted(kept)
    return "\n".join([*header, ast.unparse(tree)])


def _interface(binding: Binding, package: str | None, exported: set[str]) -> bool:
    """A name the module offers: in `__all__`, or re-exported by a package's `__init__.py` from that package."""
    if binding.alias in exported:
        return True
    inside = binding.module.startswith(".") or binding.module.split(".")[0] == package
    return package is not None and inside


def _drop_docstrings(tree: ast.Module) -> None:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and is_docstring(body[0]):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]


def is_docstring(node: ast.stmt) -> bool:
    """A bare string statement (a docstring where it is its body's first)."""
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _bindings(node: Imports) -> list[Binding]:
    """What a top-level import binds; none for `from m import *` (kept in the code as written)."""
    if isinstance(node, ast.Import):
        return [
            Binding(a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0], a.name)
            for a in node.names
        ]
    module = "." * node.level + (node.module or "")
    if any(a.name == "*" for a in node.names):
        return []
    prefix = module if module.endswith(".") else module + "."
    return [Binding(a.asname or a.name, prefix + a.name, module) for a in node.names]


def _resolvable(tree: ast.Module, bindings: list[Binding]) -> dict[str, str]:
    """Imported names to rewrite as what they name: bound by one target only, and bound nowhere else."""
    targets: dict[str, set[str]] = {}
    for binding in bindings:
        targets.setdefault(binding.alias, set()).add(binding.target)
    elsewhere = _bound_elsewhere(tree)
    return {alias: next(iter(t)) for alias, t in targets.items() if len(t) == 1 and alias not in elsewhere}


def _bound_elsewhere(tree: ast.Module) -> set[str]:
    """Every name something other than a top-level import binds: assignments, parameters, definitions, nested
    imports, `except ... as`, `global`/`nonlocal`, match captures."""
    top = {id(node) for node in tree.body if isinstance(node, Imports)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            found.add(node.id)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, Imports) and id(node) not in top:
            found.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            found.update(node.names)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            found.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            found.add(node.rest)
    return found


class _Resolver(ast.NodeTransformer):
    """Rewrites each use of an imported name as the dotted path it names (`sub` -> `re.sub`)."""

    def __init__(self, resolved: dict[str, str]) -> None:
        self.resolved = resolved

    def visit_Name(self, node: ast.Name) -> ast.AST:
        target = self.resolved.get(node.id)
        return ast.copy_location(ast.Name(id=target, ctx=node.ctx), node) if target else node


def _loaded_names(tree: ast.Module) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _exported(tree: ast.Module) -> set[str]:
    """The string constants a top-level `__all__` is given."""
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        value = getattr(node, "value", None)
        if value is not None and any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            names.update(c.value for c in ast.walk(value) if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return names
