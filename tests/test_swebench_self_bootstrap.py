"""Self-bootstrapping: `snaffle solve --repo .` on a copy of snaffle's own checkout with a planted bug; the copy's
own tests fail before the run and pass after it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from snaffle.testing import ScriptedServer
from tests.helpers import git

Start = Callable[[list[dict[str, Any]]], ScriptedServer]
ROOT = Path(__file__).resolve().parents[1]
GOOD = "return self.prompt_tokens + self.completion_tokens"
BAD = "return self.prompt_tokens - self.completion_tokens"
TARGET = ["tests/test_harness.py", "-k", "token_cap"]
ISSUE = "The token cap never trips: Usage.total_tokens in snaffle/types.py seems to subtract completion tokens."


def copy_of_snaffle(dest: Path) -> Path:
    """The committed tree of this checkout (no untracked work, no .venv), as a fresh repository."""
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True, check=True)
    dest.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "snaffle")
    return dest


def own_tests_pass(repo: Path) -> bool:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *TARGET]
    return subprocess.run(command, cwd=repo, capture_output=True, timeout=300).returncode == 0


@pytest.mark.slow
def test_snaffle_fixes_a_bug_planted_in_itself(tmp_path: Path, scripted: Start) -> None:
    repo = copy_of_snaffle(tmp_path / "snaffle")
    types = repo / "snaffle" / "types.py"
    assert GOOD in types.read_text()
    types.write_text(types.read_text().replace(GOOD, BAD))
    git(repo, "commit", "-q", "-am", "planted bug")
    imported = subprocess.run(
        [sys.executable, "-c", "import snaffle; print(snaffle.__file__)"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(imported.stdout.strip()).is_relative_to(repo)
    assert not own_tests_pass(repo)
    run_tests = {"tool_calls": [{"name": "bash", "arguments": {"command": f"python -m pytest -q {' '.join(TARGET)}"}}]}
    edit = {"command": "str_replace", "path": "snaffle/types.py", "old_str": BAD, "new_str": GOOD}
    server = scripted(
        [
            run_tests,
            {
                "tool_calls": [
                    {
                        "name": "str_replace_editor",
                        "arguments": {"command": "view", "path": "snaffle/types.py", "view_range": [36, 40]},
                    }
                ]
            },
            {
                "content": "total_tokens subtracts; fixing it.",
                "tool_calls": [{"name": "str_replace_editor", "arguments": edit}],
            },
            run_tests,
            {"content": "The token cap tests pass now.\nDONE"},
        ]
    )
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snaffle.cli",
            "solve",
            "--repo",
            ".",
            "--arm",
            "minimal",
            "--issue",
            ISSUE,
            "--base-url",
            server.base_url,
            "--model",
            "scripted",
            "--out",
            str(out),
            "--json",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["exit_status"] == "submitted"
    assert f"+        {GOOD}" in (out / "patch.diff").read_text()
    assert own_tests_pass(repo)
    git(repo, "stash", "-q")
    assert not own_tests_pass(repo)
