"""The cgroups of one sandboxed call: a cap on its processes and on its memory, all of them together.

A call's process tree joins a fresh group before it execs: a `pids` group (`pids.max`: a fork bomb stops there) and a
memory group (`memory.max`, v1 `memory.limit_in_bytes`: past it the kernel kills inside the group, never elsewhere on
the host). cgroup v2 holds both in one directory; v1 has one per controller, the memory group nested under the
memory group snaffle itself runs in, so any limit already set above still holds. Where a group cannot be made (no
cgroupfs, not writable: a user without root), its path is None and the caller falls back to per-process rlimits.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
KILL_ROUNDS = 50
STALE_S = 3600.0
"""A `snaffle-*` group left empty this long by a run that never closed it (killed with SIGKILL) is swept."""


@dataclass(frozen=True)
class CallGroup:
    """One call's groups: `pids` caps its processes, `memory` (None where it cannot be made) caps their memory."""

    pids: Path | None
    memory: Path | None = None

    @classmethod
    def create(cls, max_processes: int, memory_bytes: int, root: Path = CGROUP_ROOT) -> CallGroup:
        if (root / "cgroup.controllers").exists():
            return _unified(root, max_processes, memory_bytes)
        pids = _make(_v1_root(root / "pids"), {"pids.max": str(max_processes)})
        memory = _make(_v1_own(root, "memory"), _v1_memory_limits(root, memory_bytes)) if memory_bytes else None
        return cls(pids, memory)

    def paths(self) -> list[Path]:
        return list(dict.fromkeys(p for p in (self.pids, self.memory) if p is not None))

    def join(self) -> None:
        """Called in the child before exec: it and everything it starts belong to the groups."""
        for path in self.paths():
            with open(path / "cgroup.procs", "w") as procs:
                procs.write(str(os.getpid()))

    def memory_exceeded(self) -> bool:
        """Whether the kernel killed a member for the memory cap (read before `close`)."""
        if self.memory is None:
            return False
        for name in ("memory.events", "memory.oom_control"):  # v2, v1: both count `oom_kill N`
            try:
                lines = (self.memory / name).read_text().splitlines()
            except OSError:
                continue
            counts = [int(line.split()[1]) for line in lines if line.startswith("oom_kill ")]
            return bool(counts and counts[0] > 0)
        return False

    def close(self) -> None:
        """Kill every member still alive, then remove the groups."""
        for path in self.paths():
            _empty(path)
            _remove(path)


def _unified(root: Path, max_processes: int, memory_bytes: int) -> CallGroup:
    """cgroup v2: one group under the root; memory capped when the root delegates the memory controller."""
    limits = {"pids.max": str(max_processes)}
    delegated = _read(root / "cgroup.subtree_control").split()
    if memory_bytes and "memory" in delegated:
        limits["memory.max"] = str(memory_bytes)
    path = _make(root if not (root / "pids.max").exists() else None, limits, {"memory.swap.max": "0"})
    return CallGroup(path, path if path is not None and "memory.max" in limits else None)


def _v1_root(root: Path) -> Path | None:
    """A v1 controller's root (it has cgroup.procs and no pids.max), or None."""
    return root if (root / "cgroup.procs").exists() and not (root / "pids.max").exists() else None


def _v1_own(root: Path, controller: str) -> Path | None:
    """The v1 `controller` group this process runs in (limits set above it keep holding for a child of it)."""
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            own = root / controller / path.lstrip("/")
            return own if (own / "cgroup.procs").exists() else None
    return None


def _v1_memory_limits(root: Path, memory_bytes: int) -> dict[str, str]:
    limits = {"memory.limit_in_bytes": str(memory_bytes)}
    if (root / "memory" / "memory.memsw.limit_in_bytes").exists():  # memory and swap together: no escape to swap
        limits["memory.memsw.limit_in_bytes"] = str(memory_bytes)
    return limits


def _make(parent: Path | None, limits: dict[str, str], optional: dict[str, str] | None = None) -> Path | None:
    """A fresh child of `parent` with `limits` written (and those of `optional` the kernel offers), or None (and
    nothing left behind) when it cannot be made."""
    if parent is None:
        return None
    sweep_stale(parent)
    path = parent / f"snaffle-{uuid.uuid4().hex[:12]}"
    try:
        path.mkdir()
        for name, value in limits.items():
            (path / name).write_text(value)
        for name, value in (optional or {}).items():
            if (path / name).exists():
                (path / name).write_text(value)
        return path
    except OSError:
        _remove(path)
        return None


@cache
def sweep_stale(parent: Path) -> None:
    """Remove the groups of runs that never closed theirs: untouched for `STALE_S` (a group with members stays:
    the kernel refuses to remove it). Once per parent in a process: a run's later calls find nothing new to sweep."""
    try:
        left = [p for p in parent.glob("snaffle-*") if time.time() - p.stat().st_mtime > STALE_S]
    except OSError:
        return
    for path in left:
        _remove(path)


def _empty(path: Path) -> None:
    for _ in range(KILL_ROUNDS):
        try:
            pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)


def _remove(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
