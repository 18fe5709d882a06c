"""The entities at the lines an issue links to (`github.com/o/r/blob/REF/PATH#L10-L12`): where the reporter points.

A link at a commit the repository holds is read at that commit, and the entities at its lines are found again by
qualified name in the worktree (the code may have moved since). A link at a branch names the reporter's branch, not
ours, so it and a commit the repository lacks read the worktree's lines. Only a hexadecimal commit name ever reaches
git, and only a path the index holds is read. On the 169 dev instances 19 issues link lines (53 of all 407); the
linked entity is a gold one in most of them.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from snaffle.agentless.issue_text import Permalink
from snaffle.gates import is_test_file
from snaffle.index.parse import Entity, innermost, parse_source
from snaffle.index.repo import RepoIndex
from snaffle.workspace import git_bytes_or_none

COMMIT_RE = re.compile(r"[0-9a-f]{7,40}")
"""A commit's (abbreviated) hash: the only kind of ref looked up in git."""
MAX_BLOB_BYTES = 4 << 20
"""A linked file larger than this at the linked commit is read at the worktree's lines instead."""
REF_TAIL_SEGMENTS = 3
"""A ref with slashes (`release/3.x`) leaves up to this many segments at the head of a link's path."""


def linked_entities(index: RepoIndex, paths: Collection[str], links: Sequence[Permalink]) -> list[Entity]:
    """The worktree's entities (not modules, not in test files) at the lines of `links`, each once, in order;
    `paths` are the files that may be named (the localizer's candidates)."""
    found: dict[Entity, None] = {}
    for link in links:
        path = linked_path(link.path, paths)
        if path is None or is_test_file(path):
            continue
        for entity in _at_lines(index.root, path, index.entities(path), link):
            found.setdefault(entity, None)
    return list(found)


def linked_path(printed: str, paths: Collection[str]) -> str | None:
    """The indexed file a link's path names: the path itself, or what follows a ref's tail segments."""
    parts = printed.split("/")
    for cut in range(min(REF_TAIL_SEGMENTS, len(parts) - 1) + 1):
        candidate = "/".join(parts[cut:])
        if candidate in paths and (cut == 0 or "/" in candidate):
            return candidate
    return None


def _at_lines(root: Path, path: str, current: Sequence[Entity], link: Permalink) -> Iterator[Entity]:
    """The entities at the link's first and last line: read at its commit and named again, or at the worktree."""
    old = _source_at(root, link.ref, path) if COMMIT_RE.fullmatch(link.ref) else None
    if old is None:
        yield from _innermost(current, (link.first, link.last))
        return
    names = {e.qualname for e in _innermost(parse_source(path, old).entities, (link.first, link.last))}
    yield from (e for e in current if e.qualname in names)


def _innermost(entities: Sequence[Entity], lines: Sequence[int]) -> Iterator[Entity]:
    """The innermost entity (not the module) at each 1-based line."""
    for line in dict.fromkeys(lines):
        entity = innermost(entities, line - 1)
        if entity is not None and entity.qualname:
            yield entity


def _source_at(root: Path, commit: str, path: str) -> bytes | None:
    """`path` at `commit` (a hexadecimal name), or None when the repository lacks either or it is too large."""
    size = git_bytes_or_none(root, "cat-file", "-s", f"{commit}:{path}")
    if size is None or not size.strip().isdigit() or int(size) > MAX_BLOB_BYTES:
        return None
    return git_bytes_or_none(root, "cat-file", "blob", f"{commit}:{path}")
