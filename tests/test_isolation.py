"""Every model-caused process through the sandbox, as an attacker meets it through the real tools: real bubblewrap,
real git, a real loopback listener, real `snaffle solve` runs against the scripted model (issue 14, items 1 4 7-10)."""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from snaffle.adapters import AdapterSpec, ArmAdapter
from snaffle.cli import build_parser, main
from snaffle.primitives.bash import Bash
from snaffle.primitives.execute import SnippetRunner
from snaffle.primitives.run_test import PytestRunner
from snaffle.sandbox import Sandbox, bubblewrap_works, confinement
from snaffle.trajectory import read_trajectory
from snaffle.types import Limits, Task
from snaffle.workspace import Workspace
from tests.helpers import CALC_ISSUE, FORK_BOMB, Start, bash, git, tiny_wheel

pytestmark = pytest.mark.skipif(not bubblewrap_works(), reason="bubblewrap cannot start here (.ci/run installs it)")
WORKTREE = Path(__file__).resolve().parent.parent
SECRET = "sk-isolation-" + uuid.uuid4().hex
PROBE = "probe-" + uuid.uuid4().hex


@pytest.fixture
def workspace(calc_repo: Path) -> Iterator[Workspace]:
    (calc_repo / ".gitignore").write_text("*.log\n")
    git(calc_repo, "add", ".gitignore")
    git(calc_repo, "commit", "-q", "-m", "ignore logs")
    opened = Workspace.open(calc_repo)
    yield opened
    opened.close()


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return Sandbox.create(tmp_path / "scratch")


def tools(workspace: Workspace, box: Sandbox) -> tuple[Bash, SnippetRunner]:
    return Bash(workspace, box, None), SnippetRunner(workspace, box, None, isolate_network=True)


def run_tool(tool: str, workspace: Workspace, box: Sandbox, shell: str, python: str) -> str:
    """`shell` through `bash`, or `python` through `execute`."""
    shell_tool, execute_tool = tools(workspace, box)
    return shell_tool.bash(shell) if tool == "bash" else execute_tool.execute(python)


SECRET_PROBE = """
import sys
from pathlib import Path
from snaffle.primitives.bash import Bash
from snaffle.primitives.execute import SnippetRunner
from snaffle.sandbox import Sandbox
from snaffle.workspace import Workspace

workspace = Workspace.open(Path(sys.argv[1]))
box = Sandbox.create(Path(sys.argv[2]))
print(Bash(workspace, box, None).bash("env; cat /proc/$PPID/environ; cat /proc/*/environ; echo BASH-RAN"))
code = "import os, glob\\nprint(dict(os.environ))\\n"
code += "for p in [f'/proc/{os.getppid()}/environ', *glob.glob('/proc/*/environ')]:\\n"
code += "    try: print(open(p, 'rb').read())\\n    except OSError: pass\\nprint('EXECUTE-RAN')"
print(SnippetRunner(workspace, box, None, isolate_network=True).execute(code))
"""


def test_bash_and_execute_cannot_read_the_harness_secrets(calc_repo: Path, tmp_path: Path) -> None:
    env = {**os.environ, "OPENAI_API_KEY": SECRET, "SNAFFLE_PROBE": PROBE, "PYTHONPATH": str(WORKTREE)}
    command = [sys.executable, "-c", SECRET_PROBE, str(calc_repo), str(tmp_path / "scratch")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "BASH-RAN" in done.stdout and "EXECUTE-RAN" in done.stdout, done.stdout + done.stderr
    assert SECRET not in done.stdout and PROBE not in done.stdout
    assert "OPENAI_API_KEY" not in done.stdout and "SNAFFLE_" not in done.stdout


def solve_in_child(repo: Path, out: Path, base_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """`snaffle solve` in its own process, its environment holding the key the way a user's shell does."""
    env = {**os.environ, "OPENAI_API_KEY": SECRET, "SNAFFLE_PROBE": PROBE, "PYTHONPATH": str(WORKTREE)}
    argv = ["solve", "--repo", str(repo), "--issue", CALC_ISSUE, "--arm", "minimal", "--base-url", base_url]
    argv += ["--model", "scripted", "--no-shim", "--max-turns", "5", "--out", str(out), *extra]
    code = "import sys; from snaffle.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, timeout=180)


def test_a_solve_run_shows_the_model_no_secret(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([bash("env; cat /proc/$PPID/environ /proc/1/environ; echo LOOKED"), {"content": "DONE"}])
    done = solve_in_child(calc_repo, tmp_path / "run", server.base_url)
    assert done.returncode == 0, done.stderr
    seen = json.dumps([request.body for request in server.requests])
    assert "LOOKED" in seen
    assert SECRET not in seen and PROBE not in seen


def test_execute_cannot_plant_a_git_fsmonitor(workspace: Workspace, box: Sandbox, tmp_path: Path) -> None:
    marker = tmp_path / "fsmonitor-ran"
    config = workspace.root / ".git" / "config"
    before = config.read_text()
    code = f"open({str(config)!r}, 'a').write('[core]\\n\\tfsmonitor = \"touch {marker}; false\"\\n')"
    out = tools(workspace, box)[1].execute(code)
    assert "Read-only file system" in out
    assert config.read_text() == before
    (workspace.root / "calc" / "__init__.py").write_text("changed = True\n")
    assert "changed = True" in workspace.patch()
    workspace.fingerprint()
    assert subprocess.run(["git", "status", "--short"], cwd=workspace.root, capture_output=True).returncode == 0
    assert not marker.exists()


def test_execute_writes_do_not_persist(workspace: Workspace, box: Sandbox) -> None:
    tag = uuid.uuid4().hex
    targets = {
        "ignored": workspace.root / "debug.log",
        "git": workspace.root / ".git" / f"planted-{tag}",
        "tmp": Path(f"/tmp/snaffle-planted-{tag}"),
        "home": box.scratch / "home" / f"planted-{tag}",
        "venv": box.scratch / "venv" / f"planted-{tag}",
        "source": workspace.root / "calc" / "__init__.py",
    }
    code = "import os\n"
    code += "os.makedirs(os.path.expanduser('~'), exist_ok=True)\n"
    for name, path in targets.items():
        written = path if name != "home" else f"os.path.expanduser('~/planted-{tag}')"
        target = repr(str(written)) if name != "home" else written
        code += f"try:\n    open({target}, 'w').write('x')\n    print('wrote {name}')\nexcept OSError as e:\n"
        code += f"    print('{name}', e)\n"
    source = targets["source"].read_text()
    out = tools(workspace, box)[1].execute(code)
    assert "exit code 0" in out, out
    for name, path in targets.items():
        assert (path.read_text() == source) if name == "source" else not path.exists(), (name, out)


def _alive(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False)
    return found.stdout.split()


@pytest.mark.parametrize("tool", ["bash", "execute"])
def test_detached_children_end_with_the_call(workspace: Workspace, box: Sandbox, tool: str) -> None:
    marker = f"{uuid.uuid4().int % 10_000 + 1000}.75"
    shell = f"setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & disown; echo started"
    python = (
        "import subprocess\n"
        f"subprocess.Popen(['setsid', 'sleep', '{marker}'], start_new_session=True)\n"
        f"subprocess.Popen(['nohup', 'sleep', '{marker}'], stdout=subprocess.DEVNULL, start_new_session=True)\n"
        "print('started')"
    )
    out = run_tool(tool, workspace, box, shell, python)
    assert "started" in out
    time.sleep(0.3)
    assert _alive(f"sleep {marker}") == []


def test_400_forks_from_bash_are_bounded(workspace: Workspace, box: Sandbox) -> None:
    out = tools(workspace, box)[0].bash(f"python -c {shlex.quote(FORK_BOMB)}")
    forked = [int(n) for n in re.findall(r"forked (\d+)", out)]
    assert forked and forked[0] < confinement().max_processes, out


@pytest.mark.parametrize(
    ("tool", "shell", "python"),
    [
        ("bash", "yes | head -c 1G; echo END", ""),
        ("execute", "", "import sys\nfor _ in range(600):\n    sys.stdout.write('y' * 1048576)\nprint('END')"),
    ],
)
def test_a_flood_of_output_keeps_the_harness_small(
    workspace: Workspace, box: Sandbox, tool: str, shell: str, python: str
) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = run_tool(tool, workspace, box, shell, python)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 100_000
    assert len(out) < 20_000 and "cut" in out and "END" in out


RAW_CONNECT = (
    "import _socket\ns = _socket.socket()\ns.settimeout(2)\nprint('connect', s.connect_ex(('127.0.0.1', {port})))"
)


@pytest.mark.parametrize("tool", ["bash", "execute"])
def test_no_tcp_to_a_loopback_listener(workspace: Workspace, box: Sandbox, listener: int, tool: str) -> None:
    code = RAW_CONNECT.format(port=listener)
    shell = f'python -c "{code}"; (echo hi > /dev/tcp/127.0.0.1/{listener}) && echo REACHED'
    out = run_tool(tool, workspace, box, shell, code)
    assert "REACHED" not in out and "connect 0" not in out


@pytest.mark.parametrize("tool", ["bash", "execute"])
def test_a_unix_socket_on_the_host_is_unreachable(
    workspace: Workspace, box: Sandbox, tmp_path: Path, tool: str
) -> None:
    path = tmp_path / "host.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        code = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({str(path)!r})\nprint('REACHED')"
        out = run_tool(tool, workspace, box, f'python -c "{code}"', code)
    assert "REACHED" not in out


def test_pip_from_bash_lands_in_the_scratch_venv_never_the_host(workspace: Workspace, box: Sandbox) -> None:
    wheel = tiny_wheel(box.scratch)
    host_site = Path(sys.prefix) / f"planted-{uuid.uuid4().hex}"
    shell = (
        f"pip install -q --no-index {wheel} && python -c 'import tiny_snaffle_probe as m; print(m.__file__)'; "
        f"touch {host_site} && echo HOST-WRITTEN"
    )
    try:
        out = tools(workspace, box)[0].bash(shell)
        assert str(box.scratch / "venv") in out, out
        assert "HOST-WRITTEN" not in out and not host_site.exists()
    finally:
        host_site.unlink(missing_ok=True)
    host = subprocess.run([sys.executable, "-c", "import tiny_snaffle_probe"], capture_output=True, check=False)
    assert host.returncode != 0


def test_the_repo_tests_still_run_under_run_test(workspace: Workspace, box: Sandbox) -> None:
    assert box.mode == "bubblewrap"
    assert PytestRunner(workspace, box, None).run_test("tests/test_calc.py").startswith("FAILED: 1 failed, 1 passed")


def solve_argv(repo: Path, out: Path, base_url: str, *extra: str) -> list[str]:
    argv = ["solve", "--repo", str(repo), "--issue", CALC_ISSUE, "--arm", "minimal", "--base-url", base_url]
    return [*argv, "--model", "scripted", "--no-shim", "--max-turns", "5", "--out", str(out), *extra]


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_the_sandbox_mode_runs_and_is_recorded(
    calc_repo: Path, scripted: Start, tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    server = scripted([bash("echo ran-$((6*7))"), {"content": "DONE"}])
    assert main(solve_argv(calc_repo, tmp_path / "run", server.base_url, "--sandbox", mode)) == 0
    assert "ran-42" in json.dumps([request.body for request in server.requests])
    header = read_trajectory(tmp_path / "run" / "trajectory.jsonl").events[0]
    assert header["config"]["sandbox"] == mode
    assert ("unsafe" in capsys.readouterr().err) == (mode == "none")


def test_without_bubblewrap_solve_refuses_in_one_line(
    calc_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    bubblewrap_works.cache_clear()
    try:
        assert main(solve_argv(calc_repo, tmp_path / "run", "http://127.0.0.1:9/v1")) == 2
    finally:
        bubblewrap_works.cache_clear()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "apt-get install bubblewrap" in err and "--sandbox none" in err
    assert not (tmp_path / "run" / "trajectory.jsonl").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["solve", "--repo", ".", "--issue", "x", "--out", "o"],
        ["swebench", "run", "--instances", "i.jsonl", "--out", "o"],
        ["demo"],
    ],
)
def test_every_command_that_runs_a_model_takes_sandbox(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).sandbox == "bubblewrap"
    assert build_parser().parse_args([*argv, "--sandbox", "none"]).sandbox == "none"


def test_a_batch_instance_runs_in_the_mode_its_spec_names(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([bash("echo ran"), {"content": "DONE"}])
    adapter = ArmAdapter(AdapterSpec("minimal", "scripted", sandbox="none"), tmp_path / "run")
    attempt = adapter.run(Task(calc_repo, CALC_ISSUE), calc_repo, Limits(max_turns=5), server.base_url)
    assert read_trajectory(attempt.trajectory_path).events[0]["config"]["sandbox"] == "none"
