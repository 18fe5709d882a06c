"""The entities at the lines an issue links to (`github.com/o/r/blob/REF/PATH#L10-L12`): where the reporter points.

A link at a commit the repository holds is read at that commit, and the entities at its lines are found again by
qualified name in the worktree (the code may have moved since). A link at a branch names the reporter's branch, not
ours, so it and a commit the repository lacks read the worktree's lines. Only a hexadecimal commit name ever reaches
git, and only a path the index holds is read. On the 169 dev instances 19 issues link lines (53 of all 407); the
linked entity is a gold one in most of them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from snaffle.agentless.at_commit import entities_at, found_again
from snaffle.agentless.issue_text import Permalink
from snaffle.gates import is_test_file
from snaffle.index.parse import Entity
from snaffle.index.repo import RepoIndex

REF_TAIL_SEGMENTS = 3
"""A ref with slashes (`release/3.x`) leaves up to this many segments at the head of a link's path."""


def linked_entities(index: RepoIndex, paths: Collection[str], links: Sequence[Permalink]) -> list[Entity]:
    """The worktree's entities (not modules, not in test files) at the lines of `links`, each once, in order;
    `paths` are the files that may be named (the localizer's candidates). A link is read at its commit when that is
    a hash the repository holds (at_commit.py), else at the worktree's lines."""
    found: dict[Entity, None] = {}
    for link in links:
        path = linked_path(link.path, paths)
        if path is None or is_test_file(path):
            continue
        lines = (link.first, link.last)
        then = found_again(index, link.ref, path, lines)
        found.update(dict.fromkeys(then if then is not None else entities_at(index.entities(path), lines)))
    return list(found)


def linked_path(printed: str, paths: Collection[str]) -> str | None:
    """The indexed file a link's path names: the path itself, or what follows a ref's tail segments."""
    parts = printed.split("/")
    for cut in range(min(REF_TAIL_SEGMENTS, len(parts) - 1) + 1):
        candidate = "/".join(parts[cut:])
        if candidate in paths and (cut == 0 or "/" in candidate):
            return candidate
    return None
