"""The code touched by the changes an issue refers to (`identical to #7215`, `a regression of .../pull/7215`,
`broken since 1a2b3c4`).

A number the issue names is looked up among the commits of HEAD's first-parent chain whose messages refer to it
(history.py keeps them: `Fix #7215`, `Merge pull request #7215 from ...`). Each such commit's diff against its first
parent gives the lines it left, read at that commit, and the entities holding them are found again by qualified name in
the worktree (the code may have moved since). A commit the issue names by its hash counts when it is in HEAD's past
(never a commit after it). A commit touching many entities says little about any one: each gets 1/log2(1 + n) of it.
What reaches git is our own store's hashes and the issue's hexadecimal digits, never an option.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Collection, Sequence
from pathlib import Path

from snaffle.agentless.at_commit import found_again, is_hash
from snaffle.agentless.history import History
from snaffle.gates import is_test_file
from snaffle.index.parse import Entity
from snaffle.index.repo import RepoIndex
from snaffle.workspace import git_bytes_or_none

COMMITS_PER_NUMBER = 3
"""The newest commits of each number read (a long-lived issue gathers many)."""
MAX_COMMITS = 8
"""At most this many commits are read per issue (the numbers' first, in the issue's order, then the hashes'): a hostile
issue naming many busy changes costs a bounded number of reads."""
MAX_FILES = 20
"""A commit changing more Python files than this (a sweep, a reformat) is not read."""
HUNK_RE = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def referenced_scores(
    index: RepoIndex, history: History, numbers: Sequence[str], hashes: Sequence[str] = ()
) -> dict[Entity, float]:
    """Per worktree entity (not in a test file), the summed shares of the commits that touched it (at most 1): those
    referring to the issue's `numbers`, and the `hashes` it names that are in HEAD's past."""
    shas = [sha for number in numbers for sha in history.referencing(number)[:COMMITS_PER_NUMBER]]
    shas += [h for h in hashes if is_hash(h) and _in_past(index.root, h)]
    if not shas:  # most issues: no file list to gather
        return {}
    indexed = set(index.files())
    scores: dict[Entity, float] = defaultdict(float)
    for sha in list(dict.fromkeys(shas))[:MAX_COMMITS]:
        touched = changed_entities(index, sha, indexed)
        for entity in touched:
            scores[entity] = min(1.0, scores[entity] + 1.0 / math.log2(1 + len(touched)))
    return dict(scores)


def _in_past(root: Path, name: str) -> bool:
    """Whether hexadecimal `name` is a commit HEAD descends from."""
    kind = git_bytes_or_none(root, "cat-file", "-t", name)
    return (
        kind is not None
        and kind.strip() == b"commit"
        and git_bytes_or_none(root, "merge-base", "--is-ancestor", name, "HEAD") is not None
    )


def changed_entities(index: RepoIndex, sha: str, indexed: Collection[str]) -> list[Entity]:
    """The worktree's entities that hold what commit `sha` changed against its first parent, among the `indexed`
    files (none for a root commit, a commit changing more than `MAX_FILES` Python files, or when git fails)."""
    lines = _changed_lines(index.root, sha)
    if lines is None or len(lines) > MAX_FILES:
        return []
    found: dict[Entity, None] = {}
    for path, numbers in lines.items():
        if path in indexed and not is_test_file(path):
            found.update(dict.fromkeys(found_again(index, sha, path, numbers) or []))
    return list(found)


def _changed_lines(root: Path, sha: str) -> dict[str, list[int]] | None:
    """Per Python file the commit changed, the 1-based lines of its version that hold the change (a deletion: the
    line after which it was)."""
    diff = git_bytes_or_none(
        root, "diff", "-U0", "--no-renames", "--no-ext-diff", "--no-textconv", f"{sha}^1", sha, "--", "*.py"
    )
    if diff is None:
        return None
    changed: dict[str, list[int]] = {}
    path: str | None = None
    for line in diff.decode("utf-8", "replace").splitlines():
        if line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else None
            if path is not None:
                changed[path] = []
        elif path is not None and (hunk := HUNK_RE.match(line)):
            start, count = int(hunk[1]), int(hunk[2]) if hunk[2] is not None else 1
            changed[path].extend(range(start, start + count) if count else [max(start, 1)])
    return changed
