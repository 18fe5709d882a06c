"""Shared fixtures: small git repositories with planted bugs, and the scripted model server."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from snaffle.testing import ScriptedServer

GIT_ENV = [
    "-c",
    "user.email=test@snaffle.invalid",
    "-c",
    "user.name=snaffle-test",
    "-c",
    "commit.gpgsign=false",
]

CALC_SOURCE = '''"""A tiny calculator package."""


def add(a, b):
    """Return the sum of a and b."""
    return a - b


def mul(a, b):
    return a * b
'''

CALC_TEST = """from calc import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
"""

CALC_ISSUE = "add(2, 3) returns -1 instead of 5. The add function in calc/__init__.py seems to subtract."


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *GIT_ENV, *args], cwd=repo, capture_output=True, text=True, check=True)
    return proc.stdout


def make_repo(root: Path, files: dict[str, str | bytes]) -> Path:
    """A committed git repository holding `files`."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.fixture
def calc_repo(tmp_path: Path) -> Path:
    """A repo with a planted bug: add() subtracts."""
    files: dict[str, str | bytes] = {"calc/__init__.py": CALC_SOURCE, "tests/test_calc.py": CALC_TEST}
    return make_repo(tmp_path / "calc", files)


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedServer]]:
    """Start scripted model servers; all are stopped at the end of the test."""
    servers: list[ScriptedServer] = []

    def start(script: list[dict[str, object]]) -> ScriptedServer:
        server = ScriptedServer(script)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
