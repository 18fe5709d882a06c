"""Scratch directories in the temp dir that a killed run does not leave behind for long.

A run's scratch holds a private copy of the user's repository. `tempfile.TemporaryDirectory` removes it when the run
ends, but nothing runs when the process is killed (SIGKILL, the OOM killer). So each scratch directory carries an
owner stamp, the pid, that process's start time (a reused pid is not mistaken for the owner) and its pid namespace
(a pid of another namespace says nothing here), and the next run removes the directories whose owner is gone. A
directory without a stamp, one that is not a plain directory of this user, and every directory on a system without
/proc are left alone.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OWNER_FILE = ".snaffle-owner"
SWEPT_PREFIXES = ("snaffle-scratch-", "snaffle-collect-", "snaffle-index-", "snaffle-localize-")
"""The temp-dir directories snaffle makes at the top of the temp dir (each holds a copy of, or an index into, the
user's repository); the demo's output directory is the user's and never swept."""
PROC = Path("/proc")


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat, field 22), None if there is no such
    process or no /proc."""
    try:
        fields = (PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19] if len(fields) > 19 else None


def pid_namespace() -> str:
    """This process's pid namespace (`pid:[4026531836]`; `-` without /proc): a pid means a process only in it."""
    try:
        return os.readlink(PROC / "self" / "ns" / "pid")
    except OSError:
        return "-"


def stamp() -> str:
    """This process's owner stamp: pid, start time, pid namespace."""
    pid = os.getpid()
    return f"{pid} {start_time(pid) or '-'} {pid_namespace()}"


def owner_gone(text: str) -> bool:
    """The stamp names a process of this pid namespace that no longer runs (an unreadable stamp, one made without
    /proc or in another namespace, such as a container sharing the temp dir: not gone)."""
    parts = text.split()
    if len(parts) != 3 or not parts[0].isdigit() or "-" in parts[1:] or parts[2] != pid_namespace():
        return False
    return start_time(int(parts[0])) != parts[1]


def mark(path: Path) -> Path:
    """Stamp `path` as this process's scratch directory."""
    (path / OWNER_FILE).write_text(stamp(), encoding="utf-8")
    return path


def make(prefix: str) -> Path:
    """A new stamped directory at the top of the temp dir (`tempfile.mkdtemp`)."""
    return mark(Path(tempfile.mkdtemp(prefix=prefix)))


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A stamped temp directory, removed when the block ends."""
    path = make(prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sweep(root: Path | None = None) -> list[Path]:
    """Remove the scratch directories in `root` (the temp dir) whose owner process is gone; the removed ones."""
    root = Path(tempfile.gettempdir()) if root is None else root
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    for entry in entries:
        if entry.name.startswith(SWEPT_PREFIXES) and _orphaned(entry):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _orphaned(entry: Path) -> bool:
    try:
        info = entry.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return False
        return owner_gone((entry / OWNER_FILE).read_text(encoding="utf-8", errors="replace")[:100])
    except OSError:
        return False
