"""The repository's history as evidence, zero model tokens: the files changed by past commits whose messages read like
the issue (BugLocator's similar-report score: a commit's similarity shared out over the files it changed).

Only HEAD's first-parent chain is read (`git log --first-parent`): a merged pull request is one change (its merge
message holds the request's title; its files are the whole request's), and nothing after HEAD can leak in. Commits
read once are kept on disk with their first parent and an inverted index of their messages' terms, so a new worktree
or clone of a repository seen before reads only the commits it does not share with those seen, and a query touches
only the commits that hold its words.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from snaffle.agentless.documents import Bm25, Bm25Params, Vector
from snaffle.agentless.issue_text import ISSUE_NUMBER_RE, tokenize
from snaffle.index.cache import write_json
from snaffle.workspace import SAFE_GIT, git_bytes_or_none, git_env

HISTORY_DIR = "history"
HISTORY_FORMAT = 3
GIT_LOG_TIMEOUT_S = 60.0
READ_BYTES = 1 << 16
MERGE_LINE_RE = re.compile(r"^Merge (pull request #\d+ from \S+|(remote-tracking )?branch \S+.*)$", re.MULTILINE)
"""A merge's generated first line (its branch names are not what the change is about)."""
LOG_FORMAT = "--format=%x00%H %P%n%B%x01"


@dataclass(frozen=True)
class HistoryParams:
    """[history] of data/localize.toml: how many commits are read, how many similar ones vote, BM25's k1 and b."""

    commits: int
    similar: int
    k1: float
    b: float


@dataclass(frozen=True)
class Commit:
    """One commit as git printed it: its hash, first parent ('' for a root), message terms, the Python files it
    changed (against that parent)."""

    sha: str
    parent: str
    terms: tuple[str, ...]
    files: tuple[str, ...]
    references: tuple[str, ...] = ()
    """The issue and pull request numbers its message refers to (`Fix #7215`, `Merge pull request #7215 from ...`)."""


@dataclass
class Commits:
    """The commits of a store, numbered in the order they were read, with the postings of their messages' terms
    (a term's commit numbers, one per occurrence)."""

    shas: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    files: list[list[str]] = field(default_factory=list)
    postings: dict[str, list[int]] = field(default_factory=dict)
    number: dict[str, int] = field(default_factory=dict)
    references: dict[str, list[int]] = field(default_factory=dict)
    """An issue or pull request number's commits (those whose message refers to it)."""

    def add(self, commit: Commit) -> None:
        number = len(self.shas)
        self.number[commit.sha] = number
        self.shas.append(commit.sha)
        self.parents.append(commit.parent)
        self.lengths.append(len(commit.terms))
        self.files.append(list(commit.files))
        for term in commit.terms:
            self.postings.setdefault(term, []).append(number)
        for reference in commit.references:
            self.references.setdefault(reference, []).append(number)

    def chain(self, head: str | None, limit: int) -> list[int]:
        """The numbers of `head`'s first-parent chain, newest first, as far as the store knows it."""
        found: list[int] = []
        number = self.number.get(head or "")
        while number is not None and len(found) < limit:
            found.append(number)
            number = self.number.get(self.parents[number])
        return found

    def payload(self) -> dict[str, Any]:
        fields = ("shas", "parents", "lengths", "files", "postings", "references")
        return {"format": HISTORY_FORMAT, **{name: getattr(self, name) for name in fields}}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Commits:
        if payload.get("format") != HISTORY_FORMAT:
            raise ValueError("another format")
        shas, parents = [str(s) for s in payload["shas"]], [str(p) for p in payload["parents"]]
        lengths = [int(n) for n in payload["lengths"]]
        files = [[str(name) for name in _listed(names)] for names in payload["files"]]
        postings = {str(term): _listed(numbers) for term, numbers in dict(payload["postings"]).items()}
        references = {str(ref): _listed(numbers) for ref, numbers in dict(payload["references"]).items()}
        if not len(shas) == len(parents) == len(lengths) == len(files):
            raise ValueError("columns of different lengths")
        number = {sha: n for n, sha in enumerate(shas)}
        return cls(shas, parents, lengths, files, postings, number, references)


def _listed(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError("a list expected")
    return value


class CommitStore:
    """Commits read from git once, kept on disk per repository (`_file`)."""

    def __init__(self, cache_dir: Path | None) -> None:
        self.directory = cache_dir / HISTORY_DIR if cache_dir is not None else None

    def history(self, root: Path, params: HistoryParams) -> History:
        """HEAD's first-parent chain at `root` (at most `params.commits`), as a `History` (empty when `root` is no
        repository or has no commit)."""
        target = self._file(root)
        commits = self._load(target)
        head, new = read_commits(root, commits.number, params.commits)
        for commit in new:
            commits.add(commit)
        if new and target is not None:
            write_json(target, commits.payload())
        return History(commits, commits.chain(head, params.commits), params)

    def _file(self, root: Path) -> Path | None:
        """The store of the repository at `root`: by its origin's URL (clones of one repository share it), else by
        its git directory (worktrees share that). Commits are named by their hashes, so a shared store is only
        bigger, never wrong."""
        if self.directory is None:
            return None
        key = _git(root, "config", "--get", "remote.origin.url")
        key = key or _git(root, "rev-parse", "--path-format=absolute", "--git-common-dir")
        if not key:
            return None
        return self.directory / f"{hashlib.sha1(key.encode()).hexdigest()}.json"

    @staticmethod
    def _load(target: Path | None) -> Commits:
        if target is None:
            return Commits()
        try:
            return Commits.from_payload(json.loads(target.read_bytes()))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return Commits()  # absent, damaged or of another format: read again from git


def read_commits(root: Path, known: Collection[str], limit: int) -> tuple[str | None, list[Commit]]:
    """HEAD's hash and its first-parent commits from git, newest first, until one in `known` (or `limit` of them;
    nothing when git fails, and what was read when it outlasts `GIT_LOG_TIMEOUT_S`)."""
    command = [*SAFE_GIT, "log", "--no-show-signature", "--first-parent", "--diff-merges=first-parent"]
    command += ["--name-only", LOG_FORMAT, f"--max-count={limit}", "HEAD", "--"]
    try:
        process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=git_env())
    except OSError:
        return None, []
    head: str | None = None
    found: list[Commit] = []
    try:
        assert process.stdout is not None
        for commit in _records(process.stdout, time.monotonic() + GIT_LOG_TIMEOUT_S):
            head = head or commit.sha
            if commit.sha in known:
                break
            found.append(commit)
    finally:
        process.kill()
        process.wait()
    return head, found


def _records(stream: IO[bytes], deadline: float) -> Iterator[Commit]:
    """The commits of `git log`'s output in `LOG_FORMAT` as they arrive."""
    pending = b""
    while time.monotonic() < deadline:
        block = stream.read1(READ_BYTES)  # type: ignore[attr-defined]
        pending += block
        *complete, pending = pending.split(b"\0")
        if not block:
            complete.append(pending)
        for raw in complete:
            if raw:
                yield _commit(raw.decode("utf-8", errors="replace"))
        if not block:
            return


def _commit(record: str) -> Commit:
    head, _, rest = record.partition("\n")
    message, _, names = rest.partition("\x01")
    sha, *parents = head.split()
    files = tuple(name for name in names.split("\n") if name.endswith(".py"))
    terms = tuple(tokenize(MERGE_LINE_RE.sub("", message)))
    references = tuple(dict.fromkeys(ISSUE_NUMBER_RE.findall(message)))
    return Commit(sha, parents[0] if parents else "", terms, files, references)


def _git(root: Path, *arguments: str) -> str | None:
    """git's output in `root`, or None when it fails (no repository, no such key, no git)."""
    found = git_bytes_or_none(root, *arguments)
    return None if found is None else found.decode("utf-8", "replace").strip()


class MessageBm25(Bm25):
    """BM25 over the messages of a chain's commits (one field), from the store's postings: a term's frequency in a
    message is how often the commit's number is among the term's postings."""

    def __init__(self, commits: Commits, numbers: npt.NDArray[np.int64], params: HistoryParams) -> None:
        self.postings = commits.postings
        self.position = np.full(len(commits.shas), -1, dtype=np.int64)
        self.position[numbers] = np.arange(len(numbers))
        lengths = np.array(commits.lengths, dtype=np.float64)[numbers].tolist()
        super().__init__(lengths, Bm25Params(params.k1, params.b, path=0.0, head=0.0, body=1.0))

    def holders(self, terms: Iterable[str]) -> dict[str, list[int]]:
        """Per term, the message number of each of its occurrences in the chain (one per occurrence)."""
        return {term: self._places(term) for term in terms}

    def frequencies(self, term: str, among: Sequence[int] | None = None) -> Vector:
        places = self._places(term) if among is None else among
        return np.bincount(np.asarray(places, dtype=np.int64), minlength=len(self.lengths)).astype(np.float64)

    def _places(self, term: str) -> list[int]:
        try:  # a damaged store's numbers count nothing
            numbers = np.array(self.postings.get(term, ()), dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            return []
        places = self.position[numbers[(numbers >= 0) & (numbers < len(self.position))]]
        found: list[int] = places[places >= 0].tolist()
        return found


class History:
    """The commits of one chain that changed Python files, asked with an issue's words: BM25 over their messages."""

    def __init__(self, commits: Commits, chain: Sequence[int], params: HistoryParams) -> None:
        self.commits = commits
        self.params = params
        self.numbers = np.array([n for n in chain if commits.files[n]], dtype=np.int64)
        """The documents: the chain's commits that changed Python files, newest first."""
        self.bm25 = MessageBm25(commits, self.numbers, params)

    def __len__(self) -> int:
        return len(self.numbers)

    @cached_property
    def _places(self) -> dict[int, int]:
        """Each document's place in the chain (0: the newest)."""
        return {n: i for i, n in enumerate(self.numbers.tolist())}

    def referencing(self, number: str) -> list[str]:
        """The hashes of the chain's commits (those that changed Python files) whose message refers to issue or pull
        request `number`, newest first."""
        place = self._places
        found = sorted((place[n], n) for n in self.commits.references.get(number, []) if n in place)
        return [self.commits.shas[n] for _, n in found]

    def file_scores(self, words: Sequence[str], candidates: Collection[str]) -> dict[str, float]:
        """Each candidate file's share of the `similar` most similar commits' scores (a commit's score divided
        among the Python files it changed), normalized to the best file's."""
        if not words or not len(self.numbers):
            return {}
        raw = self.bm25.scores(words)
        shares: dict[str, float] = defaultdict(float)
        for document in np.argsort(-raw, kind="stable")[: self.params.similar]:
            if raw[document] <= 0:
                break
            files = self.commits.files[self.numbers[document]]
            for path in files:
                if path in candidates:
                    shares[path] += float(raw[document]) / len(files)
        best = max(shares.values(), default=0.0)
        return {path: share / best for path, share in shares.items()} if best > 0 else {}
