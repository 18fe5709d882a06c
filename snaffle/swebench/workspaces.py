"""Per-instance checkouts at `base_commit`: from a local mirror directory, a SWE-bench Docker image, or the forge.

A mirror checkout borrows the mirror's objects (git alternates) and carries one branch at the base commit, so
later history is not reachable from any ref. Blobs the mirror lacks (snapshots may leave out large files) are left
out of the checkout through a sparse checkout, and listed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snaffle.workspace import SAFE_GIT, SAFE_GIT_ENV

MIRROR_LAYOUTS = ("{owner}__{name}", "{owner}+{name}", "{owner}__{name}.git", "{owner}/{name}")
"""Names a repository may have inside `--repos DIR`; each may hold the git directory itself or a `repo/` in it."""
BASE_BRANCH = "snaffle-base"
GIT_TIMEOUT_S = 900
DOCKER_IMAGE = "{namespace}/sweb.eval.x86_64.{key}:latest"
FORGE_URL = "https://github.com/{repo}.git"
HINT = "put a git repository at DIR/owner__name and pass --repos DIR, or allow the network with --forge"
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_NO_LAZY_FETCH": "1", "GIT_CONFIG_NOSYSTEM": "1"}


class WorkspaceUnavailable(Exception):
    """No source could provide a checkout; the message says what was tried and how to fix it."""


@dataclass(frozen=True)
class Sources:
    """Where checkouts come from, tried in this order: a mirror directory, Docker images, the forge (network)."""

    repos: Path | None = None
    docker: bool = False
    docker_namespace: str = "swebench"
    forge: str | None = None
    """A URL template such as `https://github.com/{repo}.git`; None means no network."""


@dataclass(frozen=True)
class Checkout:
    """A working tree at the base commit, where it came from, and the files it lacks."""

    path: Path
    source: str
    missing: tuple[str, ...] = ()

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "missing_files": list(self.missing)}


def prepare_checkout(repo: str, commit: str, dest: Path, sources: Sources, instance_id: str = "") -> Checkout:
    """A checkout of `repo` at `commit` in `dest` (which must not exist yet), from the first source that has it."""
    reasons: list[str] = []
    git_dir = find_git_dir(sources.repos, repo) if sources.repos else None
    if git_dir is not None:
        try:
            return checkout_from_mirror(git_dir, commit, dest)
        except WorkspaceUnavailable as exc:
            reasons.append(str(exc))
            shutil.rmtree(dest, ignore_errors=True)
    elif sources.repos:
        reasons.append(f"no mirror of {repo} in {sources.repos} (looked for {repo.replace('/', '__')})")
    if sources.docker and instance_id:
        if docker_available():
            return checkout_from_docker(docker_image(instance_id, sources.docker_namespace), dest)
        reasons.append("no Docker daemon answers")
    if sources.forge:
        return checkout_from_forge(sources.forge.format(repo=repo), commit, dest, sources.repos, repo)
    raise WorkspaceUnavailable(f"no checkout of {repo} at {commit[:12]}: {'; '.join(reasons) or 'no source'}; {HINT}")


def check_source(repo: str, sources: Sources) -> None:
    """Fail early (before building anything) when no source could provide a checkout of `repo`."""
    if find_git_dir(sources.repos, repo) is None and not sources.forge and not sources.docker:
        where = f"in {sources.repos} " if sources.repos else ""
        looked = f"no mirror of {repo} {where}(looked for {repo.replace('/', '__')})"
        raise WorkspaceUnavailable(f"{looked}; {HINT}")


def find_git_dir(repos: Path | None, repo: str) -> Path | None:
    """The git directory of `repo` inside a mirror directory, bare or not, under any of the accepted names."""
    if repos is None or "/" not in repo:
        return None
    owner, name = repo.split("/", 1)
    for layout in MIRROR_LAYOUTS:
        base = repos / layout.format(owner=owner, name=name)
        for candidate in (base, base / "repo"):
            if (candidate / ".git").is_dir():
                return (candidate / ".git").resolve()
            if (candidate / "objects").is_dir() and (candidate / "HEAD").is_file():
                return candidate.resolve()
    return None


def checkout_from_mirror(git_dir: Path, commit: str, dest: Path) -> Checkout:
    """A shared-object checkout: nothing is copied, no network, only the base commit's history has a ref."""
    dest.mkdir(parents=True)
    git(dest, "init", "-q")
    alternates = dest / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{git_dir / 'objects'}\n", encoding="utf-8")
    if git(dest, "cat-file", "-e", f"{commit}^{{commit}}", check=False) is None:
        raise WorkspaceUnavailable(f"commit {commit[:12]} is not in the mirror {git_dir}; refresh the mirror")
    git(dest, "update-ref", f"refs/heads/{BASE_BRANCH}", commit)
    git(dest, "symbolic-ref", "HEAD", f"refs/heads/{BASE_BRANCH}")
    copy_past_tags(git_dir, commit, dest)
    missing = missing_blobs(dest, commit)
    if missing:
        sparse_without(dest, missing)
    git(dest, "reset", "-q", "--hard")
    return Checkout(dest, "mirror", missing)


def copy_past_tags(git_dir: Path, commit: str, dest: Path) -> None:
    """Tags reachable from the base commit (versions computed from tags, e.g. setuptools_scm, need them)."""
    listing = git(git_dir, "for-each-ref", f"--merged={commit}", "--format=%(objectname) %(refname)", "refs/tags")
    lines = [f"create {ref} {sha}" for sha, ref in (line.split(" ", 1) for line in (listing or "").splitlines())]
    if lines:
        git(dest, "update-ref", "--stdin", stdin="\n".join(lines) + "\n")


def missing_blobs(repo: Path, commit: str) -> tuple[str, ...]:
    """Paths of the commit's files whose blobs the object store lacks."""
    listing = git(repo, "ls-tree", "-r", "-z", "--full-tree", commit) or ""
    blobs: dict[str, list[str]] = {}
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        _mode, kind, sha = meta.split()
        if kind == "blob":
            blobs.setdefault(sha, []).append(path)
    if not blobs:
        return ()
    answer = git(repo, "cat-file", "--batch-check", stdin="\n".join(blobs) + "\n") or ""
    absent = [line.split()[0] for line in answer.splitlines() if line.endswith(" missing")]
    return tuple(sorted(path for sha in absent for path in blobs.get(sha, [])))


def sparse_without(repo: Path, paths: tuple[str, ...]) -> None:
    """Check out everything except `paths` (non-cone sparse checkout patterns)."""
    git(repo, "config", "core.sparseCheckout", "true")
    git(repo, "config", "core.sparseCheckoutCone", "false")
    patterns = ["/*", *(f"!/{escape_pattern(path)}" for path in paths)]
    info = repo / ".git" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "sparse-checkout").write_text("\n".join(patterns) + "\n", encoding="utf-8")


def escape_pattern(path: str) -> str:
    """A literal path as a gitignore-style pattern."""
    escaped = "".join(f"\\{c}" if c in "\\*?[]!#" else c for c in path)
    return escaped[:-1] + "\\ " if escaped.endswith(" ") else escaped


def checkout_from_forge(url: str, commit: str, dest: Path, cache: Path | None, repo: str) -> Checkout:
    """Clone over the network (into the mirror directory when one is given, so later instances reuse it)."""
    target = (cache / repo.replace("/", "__")) if cache else dest.parent / f"{dest.name}.forge.git"
    with locked(target.parent / f".{target.name}.lock"):
        if not (target / "objects").is_dir():
            partial = target.parent / f"{target.name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            if git(target.parent, "clone", "--bare", "--quiet", url, str(partial), check=False) is None:
                raise WorkspaceUnavailable(f"cannot clone {url} (no network?); pass --repos DIR with a local mirror")
            partial.rename(target)
    checkout = checkout_from_mirror(target.resolve(), commit, dest)
    return Checkout(checkout.path, "forge", checkout.missing)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive file lock, so concurrent workers clone a repository once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def docker_image(instance_id: str, namespace: str) -> str:
    """SWE-bench's published instance image (Docker Hub disallows `__`, so it is spelled `_1776_`)."""
    return DOCKER_IMAGE.format(namespace=namespace, key=instance_id.replace("__", "_1776_")).lower()


def docker_available() -> bool:
    """True when a docker CLI is installed and its daemon answers."""
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def checkout_from_docker(image: str, dest: Path) -> Checkout:
    """Copy `/testbed` (a git checkout at the base commit) out of the instance image."""
    created = subprocess.run(["docker", "create", image], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    if created.returncode != 0:
        raise WorkspaceUnavailable(f"docker create {image} failed: {created.stderr.strip()[-300:]}")
    container = created.stdout.strip()
    try:
        dest.mkdir(parents=True)
        copied = subprocess.run(
            ["docker", "cp", f"{container}:/testbed/.", str(dest)],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
        if copied.returncode != 0:
            raise WorkspaceUnavailable(f"docker cp from {image} failed: {copied.stderr.strip()[-300:]}")
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=120)
    return Checkout(dest, "docker")


def git(cwd: Path, *args: str, stdin: str | None = None, check: bool = True) -> str | None:
    """Run git offline; stdout, or None on failure when `check` is off."""
    proc = subprocess.run(
        [*SAFE_GIT, "-c", "advice.detachedHead=false", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        errors="replace",
        env={**os.environ, **GIT_ENV, **SAFE_GIT_ENV},
        timeout=GIT_TIMEOUT_S,
    )
    if proc.returncode == 0:
        return proc.stdout
    if check:
        message = proc.stderr.strip().splitlines()
        raise WorkspaceUnavailable(f"git {args[0]} failed in {cwd}: {message[-1] if message else proc.returncode}")
    return None
