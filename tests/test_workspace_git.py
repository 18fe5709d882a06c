"""snaffle's own git never runs what a repository's (model-writable) config or the user's global config names."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from snaffle.workspace import Workspace


def _hostile_repo(tmp_path: Path) -> tuple[Path, Path]:
    repo, marker = tmp_path / "repo", tmp_path / "pwned"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "mod.py").write_text("X = 1\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i"], check=True
    )
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    with (repo / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = {hook}\n\thooksPath = {tmp_path}\n")
    (tmp_path / "post-checkout").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (tmp_path / "post-checkout").chmod(0o755)
    return repo, marker


def test_repository_config_commands_never_run(tmp_path: Path) -> None:
    repo, marker = _hostile_repo(tmp_path)
    subprocess.run(["git", "-C", str(repo), "status"], capture_output=True, check=False)
    assert marker.exists(), "the attack itself must work against plain git"
    marker.unlink()
    workspace = Workspace.open(repo)
    (repo / "mod.py").write_text("X = 2\n")
    assert "X = 2" in workspace.patch()
    workspace.restore(workspace.base_tree)
    copy = workspace.clone(tmp_path / "copy")
    copy.apply("")
    assert not marker.exists()


def test_global_config_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, marker = _hostile_repo(tmp_path)
    (repo / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[core]\n\tfsmonitor = {tmp_path / 'hook.sh'}\n")
    monkeypatch.setenv("HOME", str(home))
    Workspace.open(repo).patch()
    assert not marker.exists()


def test_copies_leave_no_temporary_index_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, _ = _hostile_repo(tmp_path)
    temp = tmp_path / "tmp"  # a private temp dir: other processes' snaffle-index-* dirs do not count
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    before = set(temp.glob("snaffle-index-*"))
    workspace = Workspace.open(repo)
    copies = [workspace.clone(tmp_path / f"copy-{n}") for n in range(3)]
    for copy in copies:
        assert copy.patch() == ""
        shutil.rmtree(copy.root)
        copy.close()
    workspace.close()
    assert set(temp.glob("snaffle-index-*")) == before


def test_a_workspace_opened_in_a_with_block_removes_its_index_on_leaving_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _ = _hostile_repo(tmp_path)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with pytest.raises(RuntimeError), Workspace.open(repo) as workspace:
        assert workspace.index.is_file() and list(temp.glob("snaffle-index-*"))
        raise RuntimeError("the block fails")
    assert not list(temp.glob("snaffle-index-*"))
