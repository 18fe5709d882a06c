"""Per-instance checkouts: mirror layouts, no future history, missing blobs, the forge, Docker images."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from snaffle.swebench.workspaces import (
    Sources,
    WorkspaceUnavailable,
    docker_image,
    find_git_dir,
    prepare_checkout,
)
from tests.helpers import git, make_repo
from tests.swebench_helpers import make_mirror


def test_bare_and_non_bare_mirrors(tmp_path: Path) -> None:
    mirror, commits = make_mirror(tmp_path)
    calc = prepare_checkout("acme/calc", commits["calc-2"], tmp_path / "a", Sources(repos=mirror))
    shapes = prepare_checkout("acme/shapes", commits["shapes-1"], tmp_path / "b", Sources(repos=mirror))
    assert (calc.path / "calc" / "extra.py").is_file() and calc.source == "mirror" and calc.missing == ()
    assert (shapes.path / "shapes.py").is_file()
    assert git(calc.path, "rev-parse", "HEAD").strip() == commits["calc-2"]
    assert git(calc.path, "status", "--porcelain") == ""


def test_later_history_is_not_reachable(tmp_path: Path) -> None:
    mirror, commits = make_mirror(tmp_path)
    source = tmp_path / "src" / "calc"
    git(source, "tag", "v0.1", commits["calc-1"])
    git(source, "tag", "v9.9", commits["calc-future"])
    shutil.rmtree(mirror / "acme__calc")
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(mirror / "acme__calc")], check=True)
    checkout = prepare_checkout("acme/calc", commits["calc-2"], tmp_path / "co", Sources(repos=mirror))
    reachable = git(checkout.path, "log", "--all", "--format=%H").split()
    assert commits["calc-future"] not in reachable and commits["calc-1"] in reachable
    assert git(checkout.path, "tag").split() == ["v0.1"]
    assert not (checkout.path / "FUTURE.txt").exists()


def test_fetch_style_layout_is_found(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "mirror" / "pallets+flask" / "repo", {"a.py": "A = 1\n"})
    assert find_git_dir(tmp_path / "mirror", "pallets/flask") == (repo / ".git").resolve()
    assert find_git_dir(tmp_path / "mirror", "pallets/click") is None


def test_missing_blobs_are_left_out_and_listed(tmp_path: Path) -> None:
    source = make_repo(tmp_path / "src", {"pkg/mod.py": "X = 1\n", "data/big.bin": b"\0" * 5000, "README": "hi\n"})
    blob = git(source, "rev-parse", "HEAD:data/big.bin").strip()
    mirror = tmp_path / "mirror"
    shutil.copytree(source / ".git", mirror / "acme__big")
    (mirror / "acme__big" / "objects" / blob[:2] / blob[2:]).unlink()
    checkout = prepare_checkout("acme/big", git(source, "rev-parse", "HEAD").strip(), tmp_path / "co", Sources(mirror))
    assert checkout.missing == ("data/big.bin",)
    assert (checkout.path / "pkg" / "mod.py").read_text() == "X = 1\n" and not (checkout.path / "data").exists()
    assert git(checkout.path, "status", "--porcelain") == ""


def test_unavailable_names_what_was_tried_and_the_fix(tmp_path: Path) -> None:
    mirror, _ = make_mirror(tmp_path)
    with pytest.raises(WorkspaceUnavailable, match="not in the mirror"):
        prepare_checkout("acme/calc", "f" * 40, tmp_path / "a", Sources(repos=mirror))
    with pytest.raises(WorkspaceUnavailable, match="--repos DIR"):
        prepare_checkout("acme/nothing", "f" * 40, tmp_path / "b", Sources(repos=mirror))
    assert not (tmp_path / "a").exists()


def test_forge_clone_is_cached_in_the_mirror_dir(tmp_path: Path) -> None:
    _, commits = make_mirror(tmp_path)
    forge = tmp_path / "forge" / "acme"
    forge.mkdir(parents=True)
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(tmp_path / "src" / "calc"), str(forge / "calc.git")], check=True
    )
    sources = Sources(repos=tmp_path / "cache", forge=f"file://{tmp_path}/forge/{{repo}}.git")
    checkout = prepare_checkout("acme/calc", commits["calc-1"], tmp_path / "co", sources)
    assert checkout.source == "forge" and (checkout.path / "calc" / "__init__.py").is_file()
    assert find_git_dir(tmp_path / "cache", "acme/calc") is not None
    again = prepare_checkout("acme/calc", commits["calc-2"], tmp_path / "co2", sources)
    assert again.source == "mirror"


FAKE_DOCKER = """#!/bin/sh
case "$1" in
  info) exit 0 ;;
  create) echo "$2" > "$FAKE_DOCKER_LOG"; echo cid123 ;;
  cp) cp -a "$FAKE_TESTBED/." "$3" ;;
  rm) exit 0 ;;
esac
"""


def test_docker_image_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(stat.S_IRWXU)
    testbed = make_repo(tmp_path / "testbed", {"mod.py": "X = 1\n"})
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TESTBED", str(testbed))
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(tmp_path / "image"))
    checkout = prepare_checkout("psf/requests", "a" * 40, tmp_path / "co", Sources(docker=True), "psf__requests-2931")
    assert checkout.source == "docker" and (checkout.path / "mod.py").is_file()
    assert (tmp_path / "image").read_text().strip() == "swebench/sweb.eval.x86_64.psf_1776_requests-2931:latest"
    assert docker_image("django__django-11099", "ns") == "ns/sweb.eval.x86_64.django_1776_django-11099:latest"
