"""The control arm's file tool, `str_replace_editor`, with the argument names other harnesses use."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, TypeVar

from snaffle.exceptions import ToolFailure
from snaffle.sandbox import cut
from snaffle.workspace import PathEscape, Workspace, printable

SNIPPET_CONTEXT = 4
LISTING_DEPTH = 2
LISTING_CAP = 200
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".venv", "node_modules", ".pytest_cache", ".mypy_cache"})

T = TypeVar("T")
Command = Literal["view", "create", "str_replace", "insert", "undo_edit"]


class Editor:
    """View, create and edit files inside one workspace; keeps an undo history per file."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self._history: dict[Path, list[bytes | None]] = {}

    def str_replace_editor(
        self,
        command: Command,
        path: str,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
    ) -> str:
        """View, create and edit files. Paths are relative to the repository root.

        Args:
          command: view (a file with line numbers, or a directory listing), create, str_replace, insert, undo_edit
          path: a file or directory, relative to the repository root
          file_text: content of the new file (create)
          old_str: exact text to replace; must occur exactly once in the file (str_replace)
          new_str: replacement text (str_replace) or text to insert (insert)
          insert_line: insert new_str after this line number; 0 inserts at the top (insert)
          view_range: [first, last] line numbers to view, 1-based; last -1 means to the end (view)
        """
        try:
            target = self.workspace.resolve(path)
        except PathEscape as exc:
            raise ToolFailure(str(exc)) from exc
        if command == "view":
            return self._view(target, view_range)
        if command == "create":
            return self._create(target, _required(file_text, "file_text", command))
        if command == "undo_edit":
            return self._undo(target)
        text = self._read_text(target)
        if command == "str_replace":
            return self._replace(target, text, _required(old_str, "old_str", command), new_str or "")
        return self._insert(target, text, _required(insert_line, "insert_line", command), new_str or "")

    def _view(self, target: Path, view_range: list[int] | None) -> str:
        if target.is_dir():
            return self._listing(target)
        text = self._read_text(target, viewing=True)
        lines = text.splitlines()
        first, last = _window(view_range, len(lines))
        numbered = [f"{n:6d}\t{lines[n - 1]}" for n in range(first, last + 1)]
        return cut("\n".join(numbered) if numbered else "(empty file)")

    def _listing(self, root: Path) -> str:
        """Entries up to `LISTING_DEPTH` below `root`; a symlink is shown as a link (`name@`), never followed."""
        entries: list[str] = []
        for directory, dirs, names in os.walk(root):  # os.walk never descends into a directory symlink
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
            entries += [self._entry(Path(directory, name)) for name in (*dirs, *names)]
            if len(Path(directory).relative_to(root).parts) + 1 >= LISTING_DEPTH:
                dirs.clear()
        entries.sort()
        more = f"\n[... {len(entries) - LISTING_CAP} more entries ...]" if len(entries) > LISTING_CAP else ""
        return "\n".join(entries[:LISTING_CAP]) + more or "(empty directory)"

    def _entry(self, path: Path) -> str:
        """One listing line: the path relative to the root (names that are not UTF-8 escaped), `/` for a
        directory, `@` for a symlink and where it leads when that is outside the repository."""
        rel = printable(path.relative_to(self.workspace.root).as_posix())
        if path.is_symlink():
            try:
                self.workspace.resolve(rel)
            except PathEscape:
                return f"{rel}@ (a link out of the repository; not followed)"
            return f"{rel}@"
        return rel + ("/" if path.is_dir() else "")

    def _create(self, target: Path, file_text: str) -> str:
        if target.exists():
            raise ToolFailure(f"{self._rel(target)} already exists; use str_replace to change it")
        self._remember(target, None)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(file_text, encoding="utf-8")
        return f"created {self._rel(target)} ({len(file_text.splitlines())} lines)"

    def _replace(self, target: Path, text: str, old: str, new: str) -> str:
        count = text.count(old)
        if count != 1:
            raise ToolFailure(_match_problem(text, old, count, self._rel(target)))
        start_line = text[: text.index(old)].count("\n")
        self._write(target, text, text.replace(old, new, 1))
        return self._snippet(target, start_line, new.count("\n") + 1)

    def _insert(self, target: Path, text: str, line: int, new: str) -> str:
        lines = text.splitlines(keepends=True)
        if not 0 <= line <= len(lines):
            raise ToolFailure(f"insert_line {line} is outside the file (0..{len(lines)})")
        if lines and not lines[-1].endswith("\n") and line == len(lines):
            lines[-1] += "\n"
        block = new if new.endswith("\n") else new + "\n"
        self._write(target, text, "".join(lines[:line]) + block + "".join(lines[line:]))
        return self._snippet(target, line, block.count("\n"))

    def _undo(self, target: Path) -> str:
        history = self._history.get(target)
        if not history:
            raise ToolFailure(f"no edit of {self._rel(target)} to undo")
        previous = history.pop()
        if previous is None:
            target.unlink(missing_ok=True)
            return f"undid the creation of {self._rel(target)}"
        target.write_bytes(previous)
        return f"undid the last edit of {self._rel(target)}"

    def _write(self, target: Path, old: str, new: str) -> None:
        self._remember(target, old.encode("utf-8"))
        target.write_text(new, encoding="utf-8")

    def _remember(self, target: Path, content: bytes | None) -> None:
        self._history.setdefault(target, []).append(content)

    def _read_text(self, target: Path, viewing: bool = False) -> str:
        if not target.is_file():
            raise ToolFailure(f"{self._rel(target)} does not exist or is not a file")
        data = target.read_bytes()
        if b"\0" in data[:8192]:
            raise ToolFailure(f"{self._rel(target)} is a binary file ({len(data)} bytes); not shown or edited")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if viewing:
                return f"[not valid UTF-8 at byte {exc.start}; shown with replacement characters]\n" + data.decode(
                    "utf-8", "replace"
                )
            raise ToolFailure(f"{self._rel(target)} is not valid UTF-8 (byte {exc.start}); editing refused") from exc

    def _snippet(self, target: Path, start: int, length: int) -> str:
        lines = target.read_text(encoding="utf-8").splitlines()
        first = max(0, start - SNIPPET_CONTEXT)
        last = min(len(lines), start + length + SNIPPET_CONTEXT)
        shown = "\n".join(f"{n + 1:6d}\t{lines[n]}" for n in range(first, last))
        return f"edited {self._rel(target)}; lines {first + 1}-{last} now read:\n{shown}"

    def _rel(self, target: Path) -> str:
        return self.workspace.relative(target)


def _required(value: T | None, name: str, command: str) -> T:
    if value is None:
        raise ToolFailure(f"command {command} needs the argument {name}")
    return value


def _window(view_range: list[int] | None, total: int) -> tuple[int, int]:
    if not view_range:
        return 1, total
    if len(view_range) != 2:
        raise ToolFailure("view_range must be two line numbers, [first, last]")
    first, last = view_range
    last = total if last == -1 else min(last, total)
    if first < 1 or first > max(total, 1) or last < first:
        raise ToolFailure(f"view_range {view_range} is outside the file (1..{total})")
    return first, last


def _match_problem(text: str, old: str, count: int, rel: str) -> str:
    if count == 0:
        squeezed = " ".join(old.split())
        hint = (
            " (it matches if whitespace is ignored: copy the exact indentation)"
            if squeezed and squeezed in " ".join(text.split())
            else ""
        )
        return f"old_str not found in {rel}{hint}; view the file and copy the text exactly"
    lines = [text[:i].count("\n") + 1 for i in _positions(text, old)]
    return f"old_str occurs {count} times in {rel} (lines {', '.join(map(str, lines[:10]))}); include more context"


def _positions(text: str, needle: str) -> list[int]:
    found, start = [], text.find(needle)
    while start != -1:
        found.append(start)
        start = text.find(needle, start + 1)
    return found
