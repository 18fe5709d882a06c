"""The disk space one sandboxed call may take: a budget on the free space it consumes, checked while it runs.

No per-file limit stops a process that writes many small files, and no quota is set on the user's filesystem, so
the call is watched instead: the free space of each filesystem it may write to (the working copy's, the scratch
dir's) is read at the start and again while it runs (`os.statvfs`, no walk of the tree); once one has lost more than
the budget, the call is stopped. Other writers on the same filesystem count too: the budget bounds what the disk
loses during the call, which is what protects the host.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DiskBudget:
    """The filesystems a call writes to, their free bytes when it started, and what it may take of them."""

    free_at_start: tuple[tuple[Path, int], ...]
    budget_bytes: int

    @classmethod
    def watch(cls, paths: Iterable[Path], budget_mb: int) -> DiskBudget:
        """One entry per filesystem among `paths` (0 MB: nothing watched)."""
        if budget_mb <= 0:
            return cls((), 0)
        seen: dict[int, tuple[Path, int]] = {}
        for path in paths:
            try:
                device = os.stat(path).st_dev
                seen.setdefault(device, (path, free_bytes(path)))
            except OSError:
                continue
        return cls(tuple(seen.values()), budget_mb << 20)

    def exceeded(self) -> bool:
        """Whether a watched filesystem has lost more than the budget since the start."""
        for path, free in self.free_at_start:
            try:
                if free - free_bytes(path) > self.budget_bytes:
                    return True
            except OSError:
                continue
        return False


def free_bytes(path: Path) -> int:
    """The bytes an unprivileged writer may still use on `path`'s filesystem."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize
