"""run_test and execute on real repos, real pytest, real subprocesses."""

from __future__ import annotations

from pathlib import Path

import pytest

from snaffle.primitives.execute import SnippetRunner, unshare_available
from snaffle.primitives.run_test import PytestRunner
from snaffle.sandbox import Sandbox
from snaffle.workspace import Workspace


@pytest.fixture
def workspace(calc_repo: Path) -> Workspace:
    return Workspace.open(calc_repo)


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox.create(tmp_path / "scratch")


def test_run_test_summarizes_failures_and_reuses_unchanged_results(workspace: Workspace, sandbox: Sandbox) -> None:
    runner = PytestRunner(workspace, sandbox, None)
    first = runner.run_test("tests/test_calc.py")
    assert first.startswith("FAILED: 1 failed, 1 passed")
    assert "tests/test_calc.py::test_add" in first and "assert -1 == 5" in first
    again = runner.run_test("tests/test_calc.py")
    assert again.startswith("(unchanged since last run; not re-run)") and first in again
    source = workspace.root / "calc" / "__init__.py"
    source.write_text(source.read_text().replace("a - b", "a + b"))
    assert runner.run_test("tests/test_calc.py").startswith("passed: 2 passed")
    assert runner.run_test("tests/test_calc.py::test_mul").startswith("passed: 1 passed")
    assert runner.run_test("-k mul").startswith("passed: 1 passed, 1 deselected")


def test_run_test_reports_collection_errors(workspace: Workspace, sandbox: Sandbox) -> None:
    (workspace.root / "tests" / "test_broken.py").write_text("import nowhere_module\n")
    out = PytestRunner(workspace, sandbox, None).run_test("tests/test_broken.py")
    assert out.startswith("FAILED") and "nowhere_module" in out


def test_execute_runs_code_with_the_repo_importable(workspace: Workspace, sandbox: Sandbox) -> None:
    runner = SnippetRunner(workspace, sandbox, None, isolate_network=True)
    out = runner.execute("from calc import add; print(add(2, 3))")
    assert out.startswith("-1\n[exit code 0]")


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_execute_leaves_the_repo_unchanged(workspace: Workspace, tmp_path: Path, mode: str) -> None:
    sandbox = Sandbox.create(tmp_path / "scratch", mode)
    code = (
        "import pathlib, os\n"
        f"root = pathlib.Path({str(workspace.root)!r})\n"
        "(root / 'calc' / '__init__.py').write_text('broken')\n"
        "(root / 'new.txt').write_text('x')\n"
        "os.remove(root / 'tests' / 'test_calc.py')\n"
    )
    before = workspace.fingerprint()
    out = SnippetRunner(workspace, sandbox, None, isolate_network=False).execute(code)
    if mode == "none":  # unconfined: the writes happen, and are reverted
        assert "reverted changes to" in out and "calc/__init__.py" in out and "new.txt" in out
    else:  # the copy is read-only inside the sandbox: the first write fails
        assert "Read-only file system" in out and "reverted" not in out
    assert workspace.fingerprint() == before


def test_execute_enforces_timeout_and_memory(workspace: Workspace, sandbox: Sandbox) -> None:
    runner = SnippetRunner(workspace, sandbox, None, isolate_network=False, timeout_s=2)
    assert "MemoryError" in runner.execute("x = bytearray(4 * 1024**3)")
    assert runner.execute("while True: pass").endswith("[timed out]")
    assert runner.execute("print('a' * 10000)").count("bytes cut") == 1


@pytest.mark.parametrize(("mode", "isolate"), [("bubblewrap", False), ("none", True), ("none", False)])
def test_execute_has_no_network(workspace: Workspace, tmp_path: Path, mode: str, isolate: bool) -> None:
    if mode == "none" and isolate and not unshare_available():
        pytest.skip("this machine cannot create a network namespace")
    sandbox = Sandbox.create(tmp_path / "scratch", mode)
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = "import socket\ns = socket.socket()\ns.settimeout(2)\n"
        code += f"print('connect', s.connect_ex(('127.0.0.1', {port})))"
        out = SnippetRunner(workspace, sandbox, None, isolate_network=isolate).execute(code)
    assert "connect 0" not in out
    if mode == "none":  # unshare --net: only a loopback that is down; else the courtesy guard
        assert ("connect 1" in out) if isolate else ("network access is disabled" in out)
