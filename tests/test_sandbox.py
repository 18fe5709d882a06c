"""The sandbox as an attacker meets it: real bubblewrap, real processes, a real loopback listener, real git."""

from __future__ import annotations

import os
import re
import resource
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from snaffle import sandbox as sandbox_module
from snaffle.exceptions import UserError
from snaffle.sandbox import CallGroup, Completed, Rlimits, Sandbox, bubblewrap_works
from tests.helpers import FORK_BOMB, tiny_wheel

pytestmark = pytest.mark.skipif(not bubblewrap_works(), reason="bubblewrap cannot start here (.ci/run installs it)")
SECRET = "sk-test-" + uuid.uuid4().hex


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "mod.py").write_text("X = 1\n")
    return root


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("SNAFFLE_API_KEY", SECRET)
    return Sandbox.create(tmp_path / "scratch")


def run(box: Sandbox, repo: Path, command: str, timeout_s: float = 30, **kwargs: object) -> Completed:
    return box.run(command, repo, timeout_s, writable=repo, **kwargs)  # type: ignore[arg-type]


def test_no_secret_is_reachable_from_the_environment_or_proc(box: Sandbox, repo: Path) -> None:
    done = run(box, repo, "env; cat /proc/*/environ; cat /proc/$PPID/environ; ls /proc")
    assert SECRET not in done.output
    assert "OPENAI_API_KEY" not in done.output and "SNAFFLE_" not in done.output


def test_the_host_outside_the_copy_is_invisible(box: Sandbox, repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "user-secret.txt"
    outside.write_text("private")
    home_file = Path.home() / ".bashrc"
    done = run(box, repo, f"cat {outside}; cat /etc/shadow; ls {Path.home()}; cat {home_file}; ls /run")
    assert "private" not in done.output
    assert "No such file" in done.output
    assert "root:" not in done.output


def test_git_metadata_is_read_only_and_the_copy_writable(box: Sandbox, repo: Path) -> None:
    config = (repo / ".git" / "config").read_text()
    done = run(box, repo, "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> .git/config; echo new > new.py")
    assert "Read-only file system" in done.output
    assert (repo / ".git" / "config").read_text() == config
    assert (repo / "new.py").read_text() == "new\n"


def test_tmp_is_private_and_does_not_persist(box: Sandbox, repo: Path) -> None:
    marker = f"/tmp/snaffle-test-{uuid.uuid4().hex}"
    run(box, repo, f"echo x > {marker}")
    assert not Path(marker).exists()


def test_no_network_not_even_loopback_or_dev_tcp(box: Sandbox, repo: Path, listener: int) -> None:
    code = f"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=2)"
    done = run(box, repo, f'python -c "{code}"; echo hi > /dev/tcp/127.0.0.1/{listener} && echo REACHED')
    assert "REACHED" not in done.output
    assert "Connection refused" in done.output or "unreachable" in done.output


def test_a_unix_socket_on_the_host_filesystem_is_out_of_reach(box: Sandbox, repo: Path, tmp_path: Path) -> None:
    path = tmp_path / "host.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(path)!r}); print('REACHED')"
    done = run(box, repo, f'python -c "{code}"')
    server.close()
    assert "REACHED" not in done.output


def _alive(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False)
    return found.stdout.split()


def test_detached_children_end_with_the_call(box: Sandbox, repo: Path) -> None:
    marker = f"{uuid.uuid4().int % 10_000 + 1000}.5"
    run(box, repo, f"setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & disown; echo started")
    time.sleep(0.2)
    assert _alive(f"sleep {marker}") == []


def test_a_timeout_ends_the_whole_tree(box: Sandbox, repo: Path) -> None:
    marker = f"{uuid.uuid4().int % 10_000 + 1000}.25"
    done = run(box, repo, f"sleep {marker} & sleep {marker}", timeout_s=1)
    assert done.timed_out and done.returncode is None
    time.sleep(0.2)
    assert _alive(f"sleep {marker}") == []


def test_a_fork_bomb_is_bounded(box: Sandbox, repo: Path) -> None:
    probe = CallGroup.create(1, 0)
    probe.close()
    if probe.pids is None and os.geteuid() == 0:
        pytest.skip("no writable pids cgroup, and RLIMIT_NPROC does not bind root")
    limit = sandbox_module.confinement().max_processes
    done = box.run(["python", "-c", FORK_BOMB], repo, 60, writable=repo)
    forked = [int(n) for n in re.findall(r"forked (\d+)", done.output)]
    assert forked and forked[0] < limit, done.output


MEMORY_FLOOD = "held = []\nwhile True:\n    held.append(bytearray(32 * 1024**2))\n"
SHARED_FLOOD = (  # four processes, 120 MB each: every one alone under a 300 MB cap, together above it
    "import os, time\n"
    "for _ in range(4):\n"
    "    if os.fork() == 0:\n"
    "        held = bytearray(120 * 1024**2)\n"
    "        time.sleep(30)\n"
    "        os._exit(0)\n"
    "os.wait(); os.wait(); os.wait(); os.wait()\n"
)


def memory_group_here() -> bool:
    probe = CallGroup.create(1, 1 << 30)
    probe.close()
    return probe.memory is not None


def test_a_memory_flood_is_stopped_at_the_calls_cap_and_said(box: Sandbox, repo: Path) -> None:
    """A patch whose code allocates without end took this host to its global OOM killer (21 GB, session 20)."""
    small = replace(box, memory_mb=300)
    started = time.monotonic()
    done = small.run(["python", "-c", MEMORY_FLOOD], repo, 60, writable=repo)
    assert not done.timed_out and done.returncode != 0
    assert time.monotonic() - started < 30
    if memory_group_here():
        assert done.memory_exceeded
        assert "killed at this call's memory cap of 300 MB" in done.output, done.output
    else:  # no writable memory cgroup: each process gets the cap as its address-space limit
        assert "MemoryError" in done.output, done.output


def test_processes_share_one_memory_cap(box: Sandbox, repo: Path) -> None:
    if not memory_group_here():
        pytest.skip("no writable memory cgroup here (the per-process address-space limit cannot bind a sum)")
    done = replace(box, memory_mb=300).run(["python", "-c", SHARED_FLOOD], repo, 60, writable=repo)
    assert done.memory_exceeded and not done.timed_out, done.output
    assert "memory cap of 300 MB" in done.output


def test_the_packaged_memory_cap_binds_without_being_asked(box: Sandbox, repo: Path) -> None:
    cap_mb = sandbox_module.confinement().max_memory_mb
    assert box.memory_mb == cap_mb and 0 < cap_mb * 1024**2 < os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    done = box.run(["python", "-c", MEMORY_FLOOD], repo, 120, writable=repo)
    assert not done.timed_out and done.returncode != 0
    assert f"memory cap of {cap_mb} MB" in done.output or "MemoryError" in done.output, done.output


def test_a_process_under_the_cap_is_untouched(box: Sandbox, repo: Path) -> None:
    code = "b = bytearray(100 * 1024**2); print('held', len(b) >> 20)"
    done = replace(box, memory_mb=300).run(["python", "-c", code], repo, 60, writable=repo)
    assert done.returncode == 0 and "held 100" in done.output and not done.memory_exceeded


DISK_FLOOD = "f = open('flood.bin', 'wb')\nwhile True:\n    f.write(bytes(1 << 22))\n    f.flush()\n"
SPREAD_FLOOD = (  # many files, each small: no per-file limit stops it
    "n = 0\nwhile True:\n    n += 1\n    with open(f'part{n}.bin', 'wb') as f:\n        f.write(bytes(1 << 22))\n"
)


@pytest.mark.parametrize("code", [DISK_FLOOD, SPREAD_FLOOD], ids=["one-file", "many-files"])
def test_a_disk_flood_is_stopped_at_the_calls_write_budget_and_said(box: Sandbox, repo: Path, code: str) -> None:
    """A patch (or a command) that writes without end would fill the host's disk within the 300 s a test run has."""
    small = replace(box, disk_mb=200)
    started = time.monotonic()
    done = small.run(["python", "-c", code], repo, 120, writable=repo)
    assert done.disk_exceeded and not done.timed_out and done.returncode != 0
    assert "stopped: this call took more than 200 MB of the disk" in done.output, done.output
    assert time.monotonic() - started < 60
    written = sum(p.stat().st_size for p in repo.glob("*.bin"))
    assert written < 200 * 2**20 + 2**30, written  # near the budget: checked every 0.1 s, page-cache writes are fast


def test_a_call_within_its_disk_budget_is_untouched(box: Sandbox, repo: Path) -> None:
    code = "open('small.bin', 'wb').write(bytes(20 << 20)); print('wrote')"
    done = replace(box, disk_mb=200).run(["python", "-c", code], repo, 60, writable=repo)
    assert done.returncode == 0 and "wrote" in done.output and not done.disk_exceeded
    assert box.disk_mb == sandbox_module.confinement().max_disk_mb > 0


def test_output_is_capped_at_the_pipe(box: Sandbox, repo: Path) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    done = run(box, repo, "yes | head -c 300000000; echo END", output_cap=4096)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert done.dropped > 299_000_000
    assert len(done.output) < 4096 + 100
    assert done.output.rstrip().endswith("END")
    assert grown_kib < 50_000


def test_rlimits_bind_inside(box: Sandbox, repo: Path) -> None:
    code = "b = bytearray(3 * 1024**3)"
    done = run(box, repo, f'python -c "{code}"', limits=Rlimits(memory_bytes=1024**3))
    assert "MemoryError" in done.output


def test_pip_installs_into_the_scratch_venv_never_the_host(box: Sandbox, repo: Path) -> None:
    wheel = tiny_wheel(repo)
    command = f"pip install -q --no-index {wheel.name} && python -c 'import tiny_snaffle_probe as m; print(m.__file__)'"
    done = run(box, repo, command, timeout_s=120)
    assert str(box.scratch / "venv") in done.output, done.output
    host = subprocess.run([sys.executable, "-c", "import tiny_snaffle_probe"], capture_output=True, check=False)
    assert host.returncode != 0


def test_without_bubblewrap_model_commands_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    bubblewrap_works.cache_clear()
    try:
        with pytest.raises(UserError, match="apt-get install bubblewrap.*--sandbox none"):
            Sandbox.create(tmp_path / "scratch")
        assert Sandbox.create(tmp_path / "scratch", mode="none").mode == "none"
    finally:
        bubblewrap_works.cache_clear()


def test_an_unknown_mode_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--sandbox bubblewrap or --sandbox none"):
        Sandbox.create(tmp_path, mode="docker")


def test_an_interpreter_started_through_a_relative_path_still_runs_inside(tmp_path: Path, repo: Path) -> None:
    """`cd bench && ../.venv/bin/python ...` leaves `..` in sys.executable, a path the sandbox cannot follow."""
    bin_dir = Path(sys.executable).parent
    inside = bin_dir / "sub"
    inside.mkdir(exist_ok=True)
    try:
        script = (
            "import pathlib, sys\n"
            "from snaffle.sandbox import Sandbox\n"
            "box, repo = Sandbox.create(pathlib.Path(sys.argv[1])), pathlib.Path(sys.argv[2])\n"
            "done = box.run([box.python, '-c', 'print(6 * 7)'], repo, 30, writable=repo)\n"
            "print(box.python, done.output.strip())\n"
        )
        done = subprocess.run(
            [f"../{Path(sys.executable).name}", "-c", script, str(tmp_path / "scratch"), str(repo)],
            cwd=inside,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
    finally:
        inside.rmdir()
    python, output = done.stdout.split()
    assert ".." not in python and output == "42", done.stderr
