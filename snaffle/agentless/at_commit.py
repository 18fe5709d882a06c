"""Code as it was at another commit, found again by name in the worktree: where a link or a past change points.

A line number means something only in a file's text at its commit. That text is read there (`git cat-file`) and
parsed, and the entities holding the lines are named by their qualified names, which find the same definitions in the
worktree however far they have moved since (permalink.py, referenced.py). Only a hexadecimal commit name is passed to
git, never an option, and a text over `MAX_BLOB_BYTES` is not parsed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from snaffle.index.parse import Entity, innermost, parse_source
from snaffle.index.repo import RepoIndex
from snaffle.workspace import git_bytes_or_none

HASH_RE = re.compile(r"[0-9a-f]{7,40}")
"""A commit's (abbreviated) hash: the only kind of name looked up in git."""
MAX_BLOB_BYTES = 4 << 20


def is_hash(name: str) -> bool:
    return HASH_RE.fullmatch(name) is not None


def found_again(index: RepoIndex, commit: str, path: str, lines: Iterable[int]) -> list[Entity] | None:
    """The worktree's entities named as those holding `lines` (1-based) of `path` at `commit`, in file order; None when
    the text there cannot be read (not a hash, no such commit or file, too large)."""
    old = git_bytes_or_none(index.root, "cat-file", "blob", f"{commit}:{path}") if is_hash(commit) else None
    if old is None or len(old) > MAX_BLOB_BYTES:
        return None
    names = {e.qualname for e in entities_at(parse_source(path, old).entities, lines)}
    return [e for e in index.entities(path) if e.qualname in names]


def entities_at(entities: Sequence[Entity], lines: Iterable[int]) -> Iterator[Entity]:
    """The innermost entity (not the module) at each distinct 1-based line."""
    for line in dict.fromkeys(lines):
        entity = innermost(entities, line - 1)
        if entity is not None and entity.qualname:
            yield entity
