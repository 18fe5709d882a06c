"""The read-only primitives: `read_entity`, `search_symbol`, `search_code`. Structure in, never whole files out.

No observation carries a line number; bodies come in windows of at most `WINDOW_LINES` lines.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from snaffle.exceptions import ToolFailure
from snaffle.index.parse import Entity, innermost
from snaffle.index.repo import RepoIndex
from snaffle.index.selectors import SelectorError
from snaffle.workspace import PathEscape, Workspace, git, printable

WINDOW_LINES = 100
INLINE_BODY_LINES = 60
"""Entities up to this many lines are shown whole by default: one call instead of two for a weak model."""
KEYWORD_CONTEXT = 2
KEYWORD_LINES_CAP = 60
SYMBOL_CAP = 20
CODE_CAP = 20
CODE_TOO_MANY = 100
"""More matching lines than this are not summarized line by line: the query is too broad to help."""
SEARCH_TIMEOUT_S = 30
TEXT_SUFFIXES = frozenset({".py", ".pyi", ".txt", ".rst", ".md", ".cfg", ".toml", ".ini", ".yaml", ".yml", ".json"})

Kind = Literal["any", "class", "function", "method", "assignment"]


@dataclass
class RepoView:
    """What the primitives share: the workspace, its index, the entities shown so far, the edits made."""

    workspace: Workspace
    index: RepoIndex
    shown: set[str] = field(default_factory=set)
    edits: int = 0

    def entity(self, selector: str) -> Entity:
        try:
            return self.index.resolve(selector)
        except SelectorError as exc:
            raise ToolFailure(str(exc)) from exc

    def lines(self, path: str) -> list[str]:
        return self.index.source(path).decode("utf-8", "replace").splitlines()


class Reader:
    """`read_entity` and the two searches over one `RepoView`."""

    def __init__(self, view: RepoView, skeletons: bool = True) -> None:
        self.view, self.skeletons = view, skeletons

    def read_entity(self, selector: str, keywords: list[str] | None = None, window: int | None = None) -> str:
        """Show a module, class, function or method: signature and docstring, its members, or its body.

        Args:
          selector: a file path relative to the repository root, alone or followed by ::function or ::Class.method
          keywords: show only the lines containing one of these words, with a little context
          window: body window to show (0 is the first 100 lines); small entities are shown whole anyway
        """
        entity = self.view.entity(selector)
        if keywords:
            return self._keyword_lines(entity, keywords)
        lines = self.view.lines(entity.path)[entity.start_line : entity.end_line + 1]
        if window is None and (entity.kind == "module" or len(lines) > INLINE_BODY_LINES):
            if not self.skeletons:  # ablation: the first window of raw text instead of an outline
                return self._window(entity, lines, 0)
            return self._outline(entity, len(lines))
        return self._window(entity, lines, window or 0)

    def _outline(self, entity: Entity, length: int) -> str:
        windows = -(-length // WINDOW_LINES)
        head = f"# {entity.selector} ({entity.kind}, {length} lines; read the body with window=0..{windows - 1})"
        if entity.kind == "module":
            return f"{head}\n{self.view.index.skeleton(entity.path)}"
        members = [m for m in self.view.index.entities(entity.path) if _is_child(entity, m)]
        shown = [entity.signature, *([f'    """{entity.doc}"""'] if entity.doc else [])]
        shown += [_indent(m.signature.splitlines()[-1], entity.indent + "    ") for m in members]
        return "\n".join([head, *shown])

    def _window(self, entity: Entity, lines: list[str], window: int) -> str:
        windows = max(1, -(-len(lines) // WINDOW_LINES))
        if not 0 <= window < windows:
            raise ToolFailure(f"{entity.selector} has windows 0..{windows - 1}; window {window} does not exist")
        self.view.shown.add(entity.selector)
        part = lines[window * WINDOW_LINES : (window + 1) * WINDOW_LINES]
        where = f"window {window} of 0..{windows - 1}" if windows > 1 else "whole"
        return f"# {entity.selector} ({entity.kind}, {len(lines)} lines, {where})\n" + "\n".join(part)

    def _keyword_lines(self, entity: Entity, keywords: list[str]) -> str:
        lines = self.view.lines(entity.path)
        pattern = re.compile("|".join(re.escape(k) for k in keywords if k), re.IGNORECASE)
        hits = [n for n in range(entity.start_line, entity.end_line + 1) if pattern.search(lines[n])]
        if not hits:
            return f"no line of {entity.selector} contains {', '.join(keywords)}"
        owners: dict[Entity, list[int]] = {}
        for hit in hits:
            owners.setdefault(innermost(self.view.index.entities(entity.path), hit) or entity, []).append(hit)
        shown: list[str] = []
        for owner, owned in owners.items():
            self.view.shown.add(owner.selector)
            shown.append(f"# {owner.selector}")
            for start, end in _merge_ranges(owned, KEYWORD_CONTEXT, owner.start_line, owner.end_line):
                shown.extend([*lines[start : end + 1], "..."])
        more = f"\n[... {len(shown) - KEYWORD_LINES_CAP} more lines; use fewer keywords]"
        return "\n".join(shown[:KEYWORD_LINES_CAP]) + (more if len(shown) > KEYWORD_LINES_CAP else "")

    def search_symbol(self, query: str, kind: Kind = "any") -> str:
        """Find classes, functions and methods by name; shows signatures only.

        Args:
          query: a name or part of one; Class.method narrows to methods of that class
          kind: restrict to class, function or method
        """
        ranked = sorted(self._symbol_matches(query, kind), key=lambda pair: (pair[0], pair[1].selector))
        if not ranked:
            return f"no symbol matches {query!r}; try a shorter name or search_code"
        lines = [f"{e.selector}  {' '.join(e.signature.splitlines()[-1].split())}" for _, e in ranked[:SYMBOL_CAP]]
        more = (
            f"\n[{len(ranked) - SYMBOL_CAP} more of {len(ranked)}; refine the query]"
            if len(ranked) > SYMBOL_CAP
            else ""
        )
        return "\n".join(lines) + more

    def _symbol_matches(self, query: str, kind: Kind) -> Iterator[tuple[int, Entity]]:
        needle = query.strip().lower()
        tokens = set(re.split(r"[\W_]+", needle)) - {""}
        for entity in self.view.index.all_entities():
            if not entity.qualname or (kind != "any" and entity.kind != kind):
                continue
            rank = symbol_rank(needle, tokens, entity.qualname.lower())
            if rank is not None:
                yield rank, entity

    def search_code(self, query: str, path: str | None = None, cap: int = CODE_CAP) -> str:
        """Search the text of the repository (a regular expression or plain text); summarized, never dumped.

        Args:
          query: a regular expression or plain text taken from the issue or the code
          path: only search under this file or directory
          cap: how many matching lines to show at most
        """
        pattern = _compile(query)
        hits = list(self._grep(pattern, query, path))
        if not hits:
            return f"no match for {query!r}" + (f" under {path}" if path else "")
        files = Counter(p for p, _, _ in hits)
        if len(hits) > CODE_TOO_MANY:
            top = ", ".join(f"{p} ({n})" for p, n in files.most_common(8))
            advice = "too many to show. Narrow the query or pass path="
            return f"{len(hits)} matches in {len(files)} files: {advice}. Top: {top}"
        return self._summarize(hits, files, max(1, min(cap, 50)))

    def _summarize(self, hits: list[tuple[str, int, str]], files: Counter[str], cap: int) -> str:
        per_entity: Counter[str] = Counter()
        shown: list[str] = []
        indexed = set(self.view.index.files())
        for path, line, text in hits:
            owner = innermost(self.view.index.entities(path), line) if path in indexed else None
            where = owner.selector if owner is not None else path
            per_entity[where] += 1
            if len(shown) < cap:
                self.view.shown.add(where)
                shown.append(f"{where}: {text.strip()[:160]}")
        summary = f"{len(hits)} matches in {len(files)} files; by entity: " + ", ".join(
            f"{where} ({n})" for where, n in per_entity.most_common(10)
        )
        more = f"\n[{len(hits) - len(shown)} more matching lines not shown]" if len(hits) > len(shown) else ""
        return summary + "\n" + "\n".join(shown) + more

    def _grep(self, pattern: re.Pattern[str], query: str, path: str | None) -> Iterator[tuple[str, int, str]]:
        root = self.view.workspace.root
        under = self._search_root(path) if path is not None else "."
        found = ripgrep(root, query, under)
        if found is not None:
            yield from found
            return
        files = [f for f in text_files(root) if under == "." or f == under or f.startswith(under + "/")]
        for rel in files:
            try:
                text = self.view.workspace.resolve(rel).read_text(encoding="utf-8", errors="replace")
            except (OSError, PathEscape):  # vanished, unreadable, or a symlink out of the repository: never read
                continue
            for number, line in enumerate(text.splitlines()):
                if pattern.search(line):
                    yield printable(rel), number, line

    def _search_root(self, path: str) -> str:
        """The existing file or directory `path` names, relative to the root with symlinks followed; refused
        outside the repository."""
        try:
            target = self.view.workspace.resolve(path)
        except PathEscape as exc:
            raise ToolFailure(str(exc)) from exc
        if not target.exists():
            raise ToolFailure(f"no file or directory {path} in the repository; pass a path relative to its root")
        return target.relative_to(self.view.workspace.root).as_posix()


def ripgrep(root: Path, query: str, under: str) -> list[tuple[str, int, str]] | None:
    """Matches by `rg` (the `ripgrep` package ships it) under a checked repo-relative path; None when rg is absent
    or rejects the pattern. The query goes after `-e` and the path after `--`, so neither is ever read as a flag;
    file names that are not UTF-8 come back escaped."""
    rg = shutil.which("rg") or str(Path(sys.executable).parent / "rg")
    if not Path(rg).exists():
        return None
    globs = [arg for suffix in sorted(TEXT_SUFFIXES) for arg in ("-g", f"*{suffix}")]
    flags = ["-n", "--null", "--no-heading", "--color", "never", "--max-columns", "300", *globs]
    command = [rg, *flags, "-e", query, "--", under]
    proc = subprocess.run(command, cwd=root, capture_output=True, timeout=SEARCH_TIMEOUT_S)
    if proc.returncode == 2:
        return None
    hits = []
    for line in proc.stdout.splitlines():
        file, _, rest = line.partition(b"\0")
        number, _, text = rest.partition(b":")
        if number.isdigit():
            name = printable(os.fsdecode(file)).removeprefix("./")
            hits.append((name, int(number) - 1, text.decode("utf-8", "replace")))
    return hits


def text_files(root: Path) -> list[str]:
    """Tracked and untracked-not-ignored files with a text suffix (ripgrep's listing when `rg` is present)."""
    if shutil.which("rg"):
        proc = subprocess.run(["rg", "--files", "--null"], cwd=root, capture_output=True, timeout=SEARCH_TIMEOUT_S)
        listed = [os.fsdecode(name) for name in proc.stdout.split(b"\0") if name]
    else:
        listed = git(root, "ls-files", "-co", "--exclude-standard").splitlines()
    return [f for f in listed if Path(f).suffix in TEXT_SUFFIXES]


def symbol_rank(needle: str, tokens: set[str], qualname: str) -> int | None:
    """0 exact, 1 prefix, 2 substring, 3 every query token in the name; None for no match."""
    name = qualname.rsplit(".", 1)[-1]
    if needle in (name, qualname):
        return 0
    if name.startswith(needle) or qualname.startswith(needle):
        return 1
    if needle in qualname:
        return 2
    parts = set(re.split(r"[\W_]+", qualname)) | set(re.findall(r"[a-z]+", qualname))
    return 3 if tokens and tokens <= parts else None


def _is_child(parent: Entity, entity: Entity) -> bool:
    prefix = parent.qualname + "."
    return entity.qualname.startswith(prefix) and "." not in entity.qualname[len(prefix) :]


def _indent(line: str, indent: str) -> str:
    return indent + line.strip()


def _merge_ranges(hits: list[int], context: int, low: int, high: int) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for hit in hits:
        start, end = max(low, hit - context), min(high, hit + context)
        if ranges and start <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], end)
        else:
            ranges.append((start, end))
    return ranges


def _compile(query: str) -> re.Pattern[str]:
    try:
        return re.compile(query)
    except re.error:
        return re.compile(re.escape(query))
