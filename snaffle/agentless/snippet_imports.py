"""The import a snippet pasted without it needs, read from the repository's tree (zero tokens, nothing executed).

A session such as `>>> inflection.underscore("x")` stops at `NameError: name 'inflection' is not defined`: when the
name is a top-level module of the repository the line to add is `import inflection`; when it is a public name that
exactly one of the repository's packages (or a module the issue names) binds, `from PKG import NAME`. A name
anything else could provide (the standard library, a builtin, an installed package) or that two modules bind gets
no guess.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from snaffle.sandbox import import_roots

UNDEFINED_RE = re.compile(r"^name '(?P<name>[A-Za-z_]\w*)' is not defined")
DOTTED_RE = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b")
NOT_LIBRARY = frozenset(
    {"setup", "conftest", "noxfile", "fabfile", "tasks", "manage", "docs", "doc", "examples", "bench", "benchmarks"}
)
"""Top-level files and directories of a repository that are not what its users import."""
STAR_DEPTH = 2
"""How many `from .module import *` hops a package's names are followed through."""
MAX_FILE_BYTES = 1_000_000


def undefined_name(message: str) -> str | None:
    """The name a NameError's message says is not defined (None for any other message)."""
    match = UNDEFINED_RE.match(message)
    return match["name"] if match else None


def shadows_outside(name: str) -> bool:
    """A name something outside the repository provides: a builtin, a keyword, a standard-library module."""
    return keyword.iskeyword(name) or hasattr(builtins, name) or name in sys.stdlib_module_names


@dataclass(frozen=True)
class RepoImports:
    """The repository's top-level modules and the modules an issue names, for `import_for`."""

    root: Path
    modules: tuple[tuple[str, Path], ...]
    """Top-level modules by name -> the file that defines them (a package's `__init__.py`), root before src/."""
    named: tuple[tuple[str, Path], ...]
    """Modules the issue names (`boltons.strutils`) that are files of the repository, by dotted name."""

    @classmethod
    def read(cls, root: Path, issue: str) -> RepoImports:
        root = root.resolve()
        modules = top_modules(root)
        named = [(dotted, path) for dotted in issue_modules(issue) if (path := module_file(dotted, root, modules))]
        return cls(root, tuple(modules.items()), tuple(dict(named).items()))

    def import_for(self, name: str) -> str | None:
        """The import line that defines `name`, or None when none does or which one would be a guess."""
        if not name.isidentifier() or shadows_outside(name):
            return None
        modules = dict(self.modules)
        if name in modules:
            return f"import {name}"
        packages = [m for m, path in self.modules if path.name == "__init__.py"]
        for candidates in (packages, [d for d, _ in self.named if d not in packages]):
            owners = [m for m in candidates if name in public_names(self.path_of(m), self.root, modules)]
            if owners:
                return f"from {owners[0]} import {name}" if len(owners) == 1 else None
        return None

    def path_of(self, dotted: str) -> Path:
        return dict(self.modules).get(dotted) or dict(self.named)[dotted]


def top_modules(root: Path) -> dict[str, Path]:
    """The repository's importable top-level packages and module files, inside the root (a symlink pointing out is
    left out), test, documentation and build files aside; a name the standard library has is never one."""
    found: dict[str, Path] = {}
    for base in import_roots(root):
        for path in [*sorted(base.glob("*/__init__.py")), *sorted(base.glob("*.py"))]:
            name = path.parent.name if path.name == "__init__.py" else path.stem
            if _library_name(name) and name not in found and inside(path, root):
                found[name] = path.resolve()
    return found


def _library_name(name: str) -> bool:
    return (
        name.isidentifier()
        and not name.startswith(("test", "_"))
        and name not in NOT_LIBRARY
        and not shadows_outside(name)
    )


def inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return False
    return path.is_file()


def issue_modules(issue: str) -> list[str]:
    """Every dotted prefix of a dotted name in the issue (`a.b.c` gives `a.b` and `a.b.c`), in order."""
    found: dict[str, None] = {}
    for match in DOTTED_RE.finditer(issue):
        parts = match[0].split(".")
        for end in range(2, len(parts) + 1):
            found[".".join(parts[:end])] = None
    return list(found)


def module_file(dotted: str, root: Path, modules: dict[str, Path]) -> Path | None:
    """The repository file of module `dotted` (whose first part is a top-level package of it), or None."""
    first, *rest = dotted.split(".")
    if first not in modules or modules[first].name != "__init__.py":
        return None
    return submodule(modules[first].parent, rest, root)


def submodule(directory: Path, parts: list[str], root: Path) -> Path | None:
    """`directory/a/b.py` or `directory/a/b/__init__.py` for parts [a, b], inside the root, or None."""
    if not parts:
        init = directory / "__init__.py"
        return init.resolve() if inside(init, root) else None
    *packages, last = parts
    base = directory.joinpath(*packages)
    for path in (base / f"{last}.py", base / last / "__init__.py"):
        if inside(path, root):
            return path.resolve()
    return None


def public_names(path: Path, root: Path, modules: dict[str, Path], depth: int = STAR_DEPTH) -> frozenset[str]:
    """The public names module `path` binds at its top level: defs, classes, assignments and imports from the
    repository itself (never one from outside it), `from .module import *` followed; its `__all__` when literal."""
    tree = _parse(path)
    if tree is None:
        return frozenset()
    names: set[str] = set()
    for node in _top_level(tree.body):
        names |= _bound(node, path, root, modules, depth)
    listed = _all_of(tree)
    return frozenset(listed if listed is not None else {n for n in names if not n.startswith("_")})


def _parse(path: Path) -> ast.Module | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements, with those inside top-level `if` and `try` blocks (version switches)."""
    found: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            found += _top_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            found += _top_level(node.body + node.orelse + [s for h in node.handlers for s in h.body])
        else:
            found.append(node)
    return found


def _bound(node: ast.stmt, path: Path, root: Path, modules: dict[str, Path], depth: int) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, ast.Import):
        return {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in modules}
    if isinstance(node, ast.ImportFrom):
        source = _import_source(node, path, root, modules)
        if source is None:
            return set()
        if any(a.name == "*" for a in node.names):
            return set(public_names(source, root, modules, depth - 1)) if depth > 0 else set()
        return {a.asname or a.name for a in node.names}
    return set()


def _import_source(node: ast.ImportFrom, path: Path, root: Path, modules: dict[str, Path]) -> Path | None:
    """The repository file a `from ... import` reads (relative, or absolute from a top-level package), or None."""
    parts = node.module.split(".") if node.module else []
    if node.level == 0:
        return module_file(".".join(parts), root, modules) if parts else None
    directory = path.parent
    for _ in range(node.level - 1):
        directory = directory.parent
    return submodule(directory, parts, root)


def _all_of(tree: ast.Module) -> set[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                listed = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
            return {n for n in listed if isinstance(n, str)} if isinstance(listed, (list, tuple)) else None
    return None
