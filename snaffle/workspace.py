"""The repository a run works in: safe path resolution, the starting snapshot, the patch, a change fingerprint.

Snapshots and patches go through a private git index, so the user's index, refs and stash are never touched.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from snaffle import scratch
from snaffle.exceptions import UserError

ALWAYS_EXCLUDED = (
    ":(glob,exclude)**/__pycache__/**",
    ":(glob,exclude)**/*.pyc",
    ":(glob,exclude).pytest_cache/**",
)
GIT_TIMEOUT_S = 120
INDEX_PREFIX = "snaffle-index-"
SAFE_GIT = ("git", "-c", "core.fsmonitor=", "-c", "core.hooksPath=/dev/null", "-c", "core.quotepath=off")
"""snaffle's own git never runs repository-controlled commands (a model may have written the repo's config)."""
SAFE_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0"}
MAX_PATH_BYTES = 4096
"""Linux's PATH_MAX: a longer path names no file, so it is refused before the file system is asked."""


class PathEscape(ValueError):
    """A path that resolves outside the repository (symlinks followed), or that no file can have (a NUL byte,
    longer than `MAX_PATH_BYTES`, not encodable)."""


@dataclass(frozen=True)
class Workspace:
    """A git repository, the tree it started from, and a private index that keeps git's stat cache warm."""

    root: Path
    base_tree: str
    index: Path

    @classmethod
    def open(cls, repo: Path) -> Workspace:
        """Open a repo and snapshot its working tree (uncommitted changes included) as the base."""
        top = repo_root(repo)
        index = scratch.make(INDEX_PREFIX) / "index"
        real_index = Path(git(top, "rev-parse", "--path-format=absolute", "--git-path", "index").strip())
        if real_index.is_file():
            shutil.copyfile(real_index, index)
        return cls(top, snapshot_tree(top, index), index)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the private index (a copy's index lives in its own .git and goes with the copy)."""
        if self.index.parent.name.startswith(INDEX_PREFIX):
            shutil.rmtree(self.index.parent, ignore_errors=True)
        else:
            self.index.unlink(missing_ok=True)

    def resolve(self, path: str) -> Path:
        """A path given by the model, relative to the root (or absolute inside it), with every symlink followed;
        escapes and paths no file can have are refused."""
        try:
            if "\0" in path or len(os.fsencode(path)) > MAX_PATH_BYTES:
                raise ValueError("a NUL byte or too long")
            candidate = Path(path)
            resolved = (candidate if candidate.is_absolute() else self.root / candidate).resolve()
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte, UnicodeEncodeError: a lone surrogate
            raise PathEscape(f"path {printable(path)[:80]!r} is not a usable path ({exc})") from exc
        if resolved != self.root and self.root not in resolved.parents:
            raise PathEscape(
                f"path {printable(path)[:80]!r} is outside the repository; use a path relative to its root"
            )
        return resolved

    def relative(self, path: Path) -> str:
        """`path` (inside the root, symlinks followed) relative to the root, as shown to the model."""
        return printable(path.resolve().relative_to(self.root).as_posix())

    def patch(self) -> str:
        """The diff from the starting snapshot to the working tree, new untracked files included."""
        tree = snapshot_tree(self.root, self.index)
        return git(self.root, "diff", "--binary", "--no-color", "--no-ext-diff", self.base_tree, tree)

    def restore(self, tree: str) -> list[str]:
        """Put the working tree back to a snapshot: changed and deleted files restored, new files removed."""
        current = snapshot_tree(self.root, self.index)
        if current == tree:
            return []
        changes = git(self.root, "diff", "--name-status", "--no-renames", "-z", tree, current).split("\0")
        touched = []
        for status, path in zip(changes[0::2], changes[1::2], strict=False):
            target = self.root / path
            if status == "A":
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(git_bytes(self.root, "cat-file", "blob", f"{tree}:{path}"))
            touched.append(path)
        snapshot_tree(self.root, self.index)
        return touched

    def clone(self, target: Path) -> Workspace:
        """A clean copy of the starting tree at `target` sharing this repo's objects (no network, no copy of .git)."""
        git(self.root, "clone", "-q", "--shared", "--no-checkout", str(self.root), str(target))
        borrow_alternates(self.root, target)
        git(target, "read-tree", "-u", "--reset", self.base_tree)
        index = target / ".git" / "snaffle-index"  # goes with the copy: nothing is left behind when it is removed
        shutil.copyfile(target / ".git" / "index", index)
        return Workspace(target.resolve(), self.base_tree, index)

    def apply(self, patch: str) -> None:
        """Apply a patch made against the starting tree to this working tree."""
        if not patch.strip():
            return
        proc = subprocess.run(
            [*SAFE_GIT, "apply", "--whitespace=nowarn", "-"],
            cwd=self.root,
            env=git_env(),
            input=patch.encode(),
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise UserError(f"patch does not apply: {proc.stderr.decode('utf-8', 'replace').strip()[:200]}")

    def changed_since_start(self) -> list[str]:
        """The paths whose content differs from the starting snapshot (new and deleted files included)."""
        current = snapshot_tree(self.root, self.index)
        if current == self.base_tree:
            return []
        return git(self.root, "diff", "--name-only", "--no-renames", "-z", self.base_tree, current).split("\0")[:-1]

    def fingerprint(self) -> str:
        """A digest that changes whenever the working tree's content changes."""
        return snapshot_tree(self.root, self.index)


def borrow_alternates(source: Path, target: Path) -> None:
    """Let a clone of a clone list its source's object stores too, so one level of alternates names them all."""
    theirs = source / ".git" / "objects" / "info" / "alternates"
    if theirs.is_file():
        ours = target / ".git" / "objects" / "info" / "alternates"
        with ours.open("a", encoding="utf-8") as handle:
            handle.write(theirs.read_text(encoding="utf-8"))


def repo_root(repo: Path) -> Path:
    """The top level of the git working tree `repo` is in; a missing directory or a non-repo is a `UserError`.
    Cheap (two rev-parse calls): the front door checks `--repo` with it, without snapshotting the tree."""
    root = repo.resolve()
    if not root.is_dir():
        raise UserError(f"repository not found: {repo} (pass an existing directory to --repo)")
    if git(root, "rev-parse", "--is-inside-work-tree", check=False).strip() != "true":
        raise UserError(f"not a git repository: {repo} (run `git init && git add -A && git commit` there)")
    return Path(git(root, "rev-parse", "--show-toplevel").strip()).resolve()


def snapshot_tree(root: Path, index: Path) -> str:
    """Write the working tree (respecting .gitignore) to a tree object through the private index."""
    env = git_env(GIT_INDEX_FILE=str(index))
    git(root, "add", "-A", "--", ".", *ALWAYS_EXCLUDED, env=env)
    return git(root, "write-tree", env=env).strip()


def git(root: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    """Run git in `root` and return stdout (decoded leniently)."""
    proc = subprocess.run(
        [*SAFE_GIT, *args],
        cwd=root,
        env=env or git_env(),
        capture_output=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
    )
    if check and proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise UserError(f"git {args[0]} failed in {root}: {message[-1] if message else proc.returncode}")
    return proc.stdout.decode("utf-8", "replace")


def git_bytes(root: Path, *args: str) -> bytes:
    """Run git and return raw stdout (file contents)."""
    proc = subprocess.run(
        [*SAFE_GIT, *args], cwd=root, env=git_env(), capture_output=True, timeout=GIT_TIMEOUT_S, check=True
    )
    return proc.stdout


def git_bytes_or_none(root: Path, *args: str) -> bytes | None:
    """`git_bytes`, or None when git fails, is missing or outlasts its timeout (evidence that may not be there)."""
    try:
        return git_bytes(root, *args)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
        return None


def git_env(**extra: str) -> dict[str, str]:
    """The environment of snaffle's own git calls: no system or global config, never a prompt."""
    return {**os.environ, **SAFE_GIT_ENV, **extra}


def printable(name: str) -> str:
    """`name` with every byte that is not UTF-8 (a file name decoded with surrogateescape) as a backslash escape:
    always encodable, so it can be shown, logged and sent (any other lone surrogate becomes `\\udXXX`)."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def classify_patch(patch: str) -> str:
    """`empty`, `binary_only` (every changed file is binary) or `patch`."""
    if not patch.strip():
        return "empty"
    sections = patch.split("\ndiff --git ")
    binary = ["GIT binary patch" in s or "\nBinary files " in s for s in sections]
    return "binary_only" if all(binary) else "patch"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()
