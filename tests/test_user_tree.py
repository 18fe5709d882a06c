"""The user's working tree during and after `solve`: every arm works on a private copy; only `--apply` writes back."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snaffle.model.client import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.testing import ScriptedServer
from snaffle.types import Limits, Task
from tests.helpers import CALC_ISSUE, FIX_SCRIPT, Start, bash, git, repo_tests_pass

WIPE = "git checkout -- . && git clean -fdq && git stash drop"


def users_work(repo: Path) -> Path:
    """Give the calc repo a stash entry, an unstaged edit and an untracked file, as a user's tree has."""
    (repo / "tests" / "test_calc.py").write_text("# stashed\n", encoding="utf-8")
    git(repo, "stash")
    with (repo / "calc" / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write("# the user's unstaged edit\n")
    (repo / "notes.txt").write_text("the user's untracked notes\n", encoding="utf-8")
    return repo


def tree_state(repo: Path) -> str:
    """A digest of every file of the working tree, the index, the refs, `git status` and `git stash list`."""
    digest = hashlib.sha256()
    for path in sorted(p for p in repo.rglob("*") if p.is_file() and ".git" not in p.relative_to(repo).parts):
        digest.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update((repo / ".git" / "index").read_bytes())
    for args in (["for-each-ref"], ["status", "--porcelain", "--untracked-files=all"], ["stash", "list"]):
        digest.update(git(repo, "--no-optional-locks", *args).encode())
    return digest.hexdigest()


def solve_command(repo: Path, base_url: str, out: Path, *extra: str) -> list[str]:
    args = ["solve", "--arm", "minimal", "--repo", str(repo), "--issue", CALC_ISSUE, "--base-url", base_url]
    return [sys.executable, "-m", "snaffle.cli", *args, "--out", str(out), "--model", "scripted", "--json", *extra]


def test_a_model_wiping_the_tree_leaves_the_users_work_intact(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    repo = users_work(calc_repo)
    before = tree_state(repo)
    script = [bash(WIPE), bash(f"{WIPE.replace('&&', ';')}; rm -rf ./*"), {"content": "DONE"}]
    server = scripted(script)
    config = SolveConfig(
        "minimal", ModelConfig(server.base_url, "scripted"), Limits(max_turns=5), tmp_path / "run", zero_pricer
    )
    attempt = solve(Task(repo, CALC_ISSUE), config)
    assert attempt.exit_status == "submitted" and server.remaining == 0
    assert tree_state(repo) == before
    assert "the user's unstaged edit" in (repo / "calc" / "__init__.py").read_text()
    assert (repo / "notes.txt").is_file() and git(repo, "stash", "list").count("\n") == 1
    assert "deleted file mode" in (tmp_path / "run" / "patch.diff").read_text()  # the copy was wiped
    assert json.loads((tmp_path / "run" / "result.json").read_text())["applied"] is False


@pytest.mark.parametrize(("requests_seen", "extra_s"), [(0, 0.4), (1, 0.0), (2, 0.5), (3, 0.0)])
def test_kill_9_at_any_moment_leaves_the_users_tree_byte_identical(
    calc_repo: Path, tmp_path: Path, requests_seen: int, extra_s: float
) -> None:
    repo = users_work(calc_repo)
    before = tree_state(repo)
    edit = "echo '# model' >> calc/__init__.py && rm tests/test_calc.py && echo new > new.py && rm notes.txt"
    script = [bash(edit), {**bash("sleep 2"), "delay": 0.5}, {"content": "DONE", "delay": 30}]
    out = tmp_path / "run"
    with ScriptedServer(script) as server:
        proc = subprocess.Popen(solve_command(repo, server.base_url, out))
        deadline = time.monotonic() + 60
        while len(server.requests) < requests_seen and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(extra_s)
        assert proc.poll() is None and len(server.requests) >= requests_seen
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert tree_state(repo) == before


def test_without_apply_the_patch_waits_in_the_run_dir(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    repo = users_work(calc_repo)
    before = tree_state(repo)
    server = scripted(FIX_SCRIPT)
    out = tmp_path / "run"
    proc = subprocess.run(solve_command(repo, server.base_url, out), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert tree_state(repo) == before and not repo_tests_pass(repo)
    patch = (out / "patch.diff").resolve()
    assert f"git -C {repo} apply {patch}" in proc.stderr and json.loads(proc.stdout)["applied"] is False
    git(repo, "apply", str(patch))
    assert repo_tests_pass(repo)


def test_apply_applies_the_patch_to_the_users_tree(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    repo = users_work(calc_repo)
    server = scripted(FIX_SCRIPT)
    out = tmp_path / "run"
    proc = subprocess.run(solve_command(repo, server.base_url, out, "--apply"), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert repo_tests_pass(repo) and json.loads(proc.stdout)["applied"] is True
    assert "the user's unstaged edit" in (repo / "calc" / "__init__.py").read_text()
    assert (repo / "notes.txt").is_file() and git(repo, "stash", "list").count("\n") == 1
    assert json.loads((out / "result.json").read_text())["applied"] is True


def test_apply_refuses_when_the_user_edited_the_tree_meanwhile(calc_repo: Path, tmp_path: Path) -> None:
    repo = users_work(calc_repo)
    out = tmp_path / "run"
    script = [{**FIX_SCRIPT[0], "delay": 2}, *FIX_SCRIPT[1:]]
    with ScriptedServer(script) as server:
        proc = subprocess.Popen(
            solve_command(repo, server.base_url, out, "--apply"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 60
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        (repo / "notes.txt").write_text("edited while the run was going\n", encoding="utf-8")
        stdout, stderr = proc.communicate(timeout=120)
    lines = [line for line in stderr.decode().splitlines() if line.startswith("snaffle: error:")]
    assert proc.returncode == 2 and len(lines) == 1, stderr
    assert "changed since the run started" in lines[0] and "notes.txt" in lines[0] and "git -C" in lines[0]
    assert not repo_tests_pass(repo) and "edited while" in (repo / "notes.txt").read_text()
    assert "return a + b" in (out / "patch.diff").read_text()
    result = json.loads((out / "result.json").read_text())
    assert result["applied"] is False and "changed since" in result["not_applied"]
