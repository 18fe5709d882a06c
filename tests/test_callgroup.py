"""Which cgroups a call gets, on cgroup v2 layouts laid out in a temp dir, and the per-process fallback."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from snaffle.callgroup import STALE_S, CallGroup, sweep_stale
from snaffle.sandbox import Rlimits, confinement, per_process


def unified(tmp_path: Path, delegated: str) -> Path:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text(delegated)
    (root / "cgroup.procs").write_text("")
    return root


def test_v2_with_memory_delegated_caps_both_in_one_group(tmp_path: Path) -> None:
    group = CallGroup.create(64, 300 << 20, unified(tmp_path, "memory pids\n"))
    assert group.pids is not None and group.memory == group.pids
    assert (group.pids / "pids.max").read_text() == "64"
    assert (group.pids / "memory.max").read_text() == str(300 << 20)
    assert group.paths() == [group.pids]


def test_v2_without_the_memory_controller_caps_processes_only(tmp_path: Path) -> None:
    group = CallGroup.create(64, 300 << 20, unified(tmp_path, "pids\n"))
    assert group.pids is not None and group.memory is None
    assert not (group.pids / "memory.max").exists()


def test_no_cgroupfs_gives_no_group(tmp_path: Path) -> None:
    group = CallGroup.create(64, 300 << 20, tmp_path / "absent")
    assert group == CallGroup(None, None) and not group.memory_exceeded()


def test_the_oom_kill_count_says_whether_the_cap_killed(tmp_path: Path) -> None:
    path = tmp_path / "g"
    path.mkdir()
    (path / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 0\n")
    assert not CallGroup(None, path).memory_exceeded()
    (path / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    assert CallGroup(None, path).memory_exceeded()


def test_without_a_memory_group_each_process_gets_an_address_space_limit() -> None:
    fallback = confinement().fallback_address_space_mb << 20
    assert per_process(Rlimits(), CallGroup(None, None), 4096).memory_bytes == fallback
    assert per_process(Rlimits(), CallGroup(None, Path("/g")), 4096).memory_bytes == 0
    assert per_process(Rlimits(memory_bytes=1 << 30), CallGroup(None, None), 4096).memory_bytes == 1 << 30
    assert per_process(Rlimits(), CallGroup(None, None), 0).memory_bytes == 0


def test_groups_a_killed_run_left_behind_are_swept_and_no_others() -> None:
    """A run killed with SIGKILL never closes its groups; the next run removes those left empty for long. A group
    with a live member stays (the kernel refuses), and so does a recent empty one (another run may be about to join
    it)."""
    made = [CallGroup.create(16, 0) for _ in range(3)]
    if any(group.pids is None for group in made):
        pytest.skip("no writable pids cgroup here (not root, or no cgroupfs)")
    stale, recent, busy = (group.pids for group in made)
    assert stale is not None and recent is not None and busy is not None
    member = subprocess.Popen(["sleep", "60"], preexec_fn=made[2].join)
    old = time.time() - STALE_S - 60
    for path in (stale, busy):
        os.utime(path, (old, old))
    try:
        sweep_stale.cache_clear()  # this process made groups before: the next one sweeps again
        CallGroup.create(16, 0).close()
        assert (not stale.exists(), recent.exists(), busy.exists()) == (True, True, True)
    finally:
        member.kill()
        member.wait()
        for group in made:
            group.close()
