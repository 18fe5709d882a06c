"""Which cgroups a call gets, on cgroup v2 layouts laid out in a temp dir, and the per-process fallback."""

from __future__ import annotations

from pathlib import Path

from snaffle.callgroup import CallGroup
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
