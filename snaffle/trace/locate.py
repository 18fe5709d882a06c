"""Where a patch edits: diff hunks mapped to the enclosing def/class (by `ast` on the file at the base), or to
the hunk header's function name when the base file is not at hand."""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@ ?(.*)$")
HEADER_NAME_RE = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)")
MODULE_SCOPE = "<module>"
GIT_SHOW_TIMEOUT_S = 30

BaseSource = Callable[[str], str | None]
"""The content of a file (path relative to the repo root) at the base the patch applies to, or None."""


@dataclass(frozen=True)
class Hunk:
    """One hunk: the old-file lines it touches (removed lines, or the line an insertion follows), its header."""

    path: str
    lines: tuple[int, ...]
    header: str


@dataclass(frozen=True)
class LocationCheck:
    """The entities an attempt edited and the gold patch's; `missed` when they do not meet."""

    edited: frozenset[str]
    gold: frozenset[str]

    @property
    def missed(self) -> bool:
        return bool(self.edited) and bool(self.gold) and not (self.edited & self.gold)


def hunks(patch: str) -> Iterator[Hunk]:
    """The hunks of a unified (git) diff, with the old-file line numbers each touches."""
    for section in re.split(r"^(?=diff --git )", patch, flags=re.MULTILINE):
        yield from _file_hunks(section.splitlines())


def _file_hunks(lines: list[str]) -> Iterator[Hunk]:
    path = _diff_path(lines)
    old_line, touched, header, in_hunk = 0, list[int](), "", False
    for line in lines:
        match = HUNK_RE.match(line)
        if match:
            if touched:
                yield Hunk(path, tuple(touched), header)
            old_line, touched, header, in_hunk = int(match[1]), [], match[3], True
        elif not in_hunk:
            continue  # the file's header lines, before its first hunk
        elif line.startswith("-"):
            touched.append(old_line)
            old_line += 1
        elif line.startswith("+"):
            touched.append(max(old_line - 1, 1))  # an insertion belongs where it follows
        elif line.startswith(" "):
            old_line += 1
    if touched:
        yield Hunk(path, tuple(touched), header)


def _diff_path(lines: list[str]) -> str:
    """The file a section of a diff changes: `+++ b/PATH`, else `--- a/PATH` (a deletion), else the git line."""
    for prefix in ("+++ b/", "--- a/"):
        for line in lines:
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
    first = lines[0] if lines else ""
    parts = first.split(" b/", 1)
    return parts[1].strip() if first.startswith("diff --git ") and len(parts) == 2 else ""


def entities(patch: str, source: BaseSource | None = None) -> frozenset[str]:
    """`path::Qual.name` of the innermost def/class around each touched line (`path::<module>` outside any)."""
    found: set[str] = set()
    spans_of: dict[str, list[tuple[int, int, str]] | None] = {}
    for hunk in hunks(patch):
        if hunk.path not in spans_of:
            spans_of[hunk.path] = _spans(source(hunk.path)) if source and hunk.path.endswith(".py") else None
        spans = spans_of[hunk.path]
        if spans is None:
            found.add(_by_header(hunk))
        else:
            found.update(f"{hunk.path}::{_innermost(spans, line)}" for line in hunk.lines)
    return frozenset(found)


def _by_header(hunk: Hunk) -> str:
    match = HEADER_NAME_RE.match(hunk.header)
    return f"{hunk.path}::{match[1]}" if match else f"{hunk.path}::{MODULE_SCOPE}"


def _spans(text: str | None) -> list[tuple[int, int, str]] | None:
    """(first line, last line, qualified name) of every def and class, outer before inner."""
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    spans: list[tuple[int, int, str]] = []
    _collect(tree, "", spans)
    return spans


def _collect(node: ast.AST, prefix: str, spans: list[tuple[int, int, str]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{child.name}"
            first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
            spans.append((first, child.end_lineno or child.lineno, name))
            _collect(child, f"{name}.", spans)
        else:
            _collect(child, prefix, spans)


def _innermost(spans: list[tuple[int, int, str]], line: int) -> str:
    inside = [s for s in spans if s[0] <= line <= s[1]]
    return max(inside, key=lambda s: s[0])[2] if inside else MODULE_SCOPE


def git_source(repo: Path, rev: str = "HEAD") -> BaseSource:
    """Files at `rev` of a git repo; for a directory that is not a git repo, the files on disk."""

    def read(path: str) -> str | None:
        try:
            proc = subprocess.run(
                ["git", "show", f"{rev}:{path}"], cwd=repo, capture_output=True, timeout=GIT_SHOW_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired):
            proc = None
        if proc is not None and proc.returncode == 0:
            return proc.stdout.decode("utf-8", "replace")
        file = repo / path
        if (repo / ".git").exists() or not file.is_file():
            return None
        return file.read_text(encoding="utf-8", errors="replace")

    return read


def check_location(patch: str, gold_patch: str, source: BaseSource | None) -> LocationCheck:
    """Map both patches with the same base source, so their entity names are comparable."""
    return LocationCheck(entities(patch, source), entities(gold_patch, source))
