"""A new worktree of a repository indexed before pays only for the file texts no earlier checkout had: counted (not
timed) on real git worktrees, parsed by real worker processes (forked, or from a fork server when the caller runs
other threads), with rankings identical to an empty cache's and damaged cache entries rebuilt with one line."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from snaffle.agentless.documents import DOCUMENTS_DIR, DocumentStore
from snaffle.agentless.history import HISTORY_DIR
from snaffle.agentless.localize import Localizer
from snaffle.index.cache import IndexedFile
from snaffle.index.repo import (
    OVERLAP_FILES_PER_WORKER,
    OVERLAP_MIN_FILES,
    OVERLAP_MIN_REUSED,
    PARALLEL_MIN_FILES,
    RepoIndex,
    _worker_count,
)
from tests.helpers import git, make_repo

MODULES = 24
ISSUE = "rescale_widget returns the wrong size for a widget of width 7; scale factor is ignored in module 3"


def _module(number: int, factor: int = 2) -> str:
    return (
        f'"""Widgets of family {number}."""\n\n\n'
        f"class Widget{number}:\n"
        f"    def rescale_widget(self, width):\n"
        f'        """Scale a widget of family {number}."""\n'
        f"        return width * {factor} + {number}\n\n\n"
        f"def helper_{number}(value):\n"
        f"    return Widget{number}().rescale_widget(value)\n"
    )


FIRST: dict[str, str | bytes] = {f"pkg/mod{n}.py": _module(n) for n in range(MODULES)}
FIRST |= {"pkg/__init__.py": "", "tests/test_mod.py": "def test_one():\n    assert True\n"}
CHANGED = {"pkg/mod3.py": _module(3, factor=7) + "\n\ndef scale_factor():\n    return 7\n", "pkg/extra.py": "X = 1\n"}
"""The second commit: one module edited (a definition added), one added; the other texts are the first's."""
SOURCES = sorted(p for p in {*FIRST, *CHANGED} if not p.startswith("tests/"))


@pytest.fixture
def worktrees(tmp_path: Path) -> tuple[Path, Path]:
    """Two worktrees of one repository at new paths, at its first and at its second commit."""
    origin = make_repo(tmp_path / "origin", FIRST)
    first = git(origin, "rev-parse", "HEAD").strip()
    for name, content in CHANGED.items():
        (origin / name).write_text(content, encoding="utf-8")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "second")
    old, new = tmp_path / "old", tmp_path / "new"
    git(origin, "worktree", "add", "-q", "--detach", str(old), first)
    git(origin, "worktree", "add", "-q", "--detach", str(new), "HEAD")
    return old, new


@pytest.fixture
def busy_thread() -> Iterator[None]:
    """Another Python thread running in this process, as the shim's would."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


def ranking(repo: Path, cache: Path | None) -> dict[str, object]:
    found = Localizer(RepoIndex(repo, cache)).localize(ISSUE).as_json()
    found.pop("elapsed_s")
    return found


def _document_entry(cache: Path, sha1: str) -> Path:
    return cache / DOCUMENTS_DIR / sha1[:2] / f"{sha1[2:]}.json"


def _parallel_build(repo: Path, cache: Path) -> tuple[RepoIndex, tuple[int, int, int]]:
    index = RepoIndex(repo, cache)
    stats = index.build(workers=2, paths=SOURCES, companion=DocumentStore(cache).companion())
    return index, (stats.parsed, stats.cached, stats.workers)


def test_a_second_worktree_parses_only_its_new_texts_and_ranks_as_an_empty_cache(
    worktrees: tuple[Path, Path], tmp_path: Path
) -> None:
    old, new = worktrees
    cache = tmp_path / "cache"
    Localizer(RepoIndex(old, cache)).prepare()
    index, counts = _parallel_build(new, cache)
    assert counts == (2, len(SOURCES) - 2, 2)  # mod3 (edited) and extra (added): the others' texts are known
    assert index.resolve("pkg/mod3.py::scale_factor").kind == "function"  # the edited file was parsed anew
    cold = ranking(new, None)
    assert cold["entities"], "the issue must rank something for the comparison to mean anything"
    assert ranking(new, cache) == cold


def test_the_parse_workers_write_the_new_files_documents(worktrees: tuple[Path, Path], tmp_path: Path) -> None:
    """The documents of a worktree's new texts are built by the workers that parse them, so the localizer only
    reads them back; an unchanged text's entry is the one the first worktree wrote."""
    old, new = worktrees
    cache = tmp_path / "cache"
    Localizer(RepoIndex(old, cache)).prepare()
    before = {p.relative_to(cache) for p in (cache / DOCUMENTS_DIR).rglob("*.json")}
    index, _ = _parallel_build(new, cache)
    written = {p.relative_to(cache) for p in (cache / DOCUMENTS_DIR).rglob("*.json")} - before
    expected = {_document_entry(cache, index.info(p).sha1).relative_to(cache) for p in CHANGED}
    assert written == expected


def test_workers_from_a_fork_server_when_another_thread_runs(
    worktrees: tuple[Path, Path], tmp_path: Path, busy_thread: None
) -> None:
    old, new = worktrees
    cache = tmp_path / "cache"
    Localizer(RepoIndex(old, cache)).prepare()
    _, counts = _parallel_build(new, cache)
    assert counts == (2, len(SOURCES) - 2, 2)
    assert ranking(new, cache) == ranking(new, None)


def test_forked_and_serial_builds_record_the_same_entities(worktrees: tuple[Path, Path], tmp_path: Path) -> None:
    _, new = worktrees
    forked, _ = _parallel_build(new, tmp_path / "forked")
    serial = RepoIndex(new, tmp_path / "serial")
    assert serial.build(workers=1, paths=SOURCES).workers == 1
    assert [forked.entities(p) for p in SOURCES] == [serial.entities(p) for p in SOURCES]


@pytest.mark.parametrize("damage", ['{"format": "snaffle-structure/2", "sha1": "', "", "\0\xff", "[]", "null"])
def test_a_damaged_index_entry_is_rebuilt_and_said_once(
    worktrees: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    _, new = worktrees
    cache = tmp_path / "cache"
    cold = ranking(new, cache)
    capsys.readouterr()
    others = (DOCUMENTS_DIR, HISTORY_DIR, "checkouts")  # the index's entries only
    entries = [p for p in cache.rglob("*.json") if not set(others) & set(p.parts)]
    for entry in entries[:3]:
        entry.write_text(damage, encoding="utf-8")
    moved = tmp_path / "moved"
    new.rename(moved)  # a new path: no manifest, every file hashed and its record looked up
    assert RepoIndex(moved, cache).build(workers=1, paths=SOURCES).rebuilt == 3
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("snaffle: 3 index cache entries were truncated or corrupt and rebuilt: ")
    assert lines[0].endswith(" (and 2 more)")
    assert ranking(moved, cache) == cold
    assert capsys.readouterr().err == ""  # rebuilt: read back without a word the next time


def test_a_damaged_documents_entry_is_rebuilt_and_said_once(
    worktrees: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, new = worktrees
    cache = tmp_path / "cache"
    cold = ranking(new, cache)
    capsys.readouterr()
    entry = next((cache / DOCUMENTS_DIR).rglob("*.json"))
    entry.write_bytes(entry.read_bytes()[:40])  # truncated mid-write, as a full disk leaves it
    assert ranking(new, cache) == cold
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"snaffle: 1 documents cache entry was truncated or corrupt and rebuilt: {entry}"]


def test_an_entry_of_another_format_is_replaced_without_a_word(
    worktrees: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An older snaffle's entries are not damage: they are simply not this version's."""
    _, new = worktrees
    cache = tmp_path / "cache"
    cold = ranking(new, cache)
    for entry in cache.rglob("*.json"):
        if "checkouts" not in entry.parts:
            entry.write_text('{"format": "snaffle-structure/1", "sha1": "0"}', encoding="utf-8")
    capsys.readouterr()
    new.rename(tmp_path / "moved")
    assert ranking(tmp_path / "moved", cache) == cold
    assert capsys.readouterr().err == ""


def test_bm25_over_the_holders_of_each_term_scores_as_a_pass_over_every_file(worktrees: tuple[Path, Path]) -> None:
    """`scores` reads each query term's frequencies only in the files that hold it (one pass for all terms): the
    arrays are bit for bit those of reading every file for every term."""
    tables = Localizer(RepoIndex(worktrees[1])).prepare().tables
    words = ["rescale", "widget", "width", "scale", "factor", "widget", "pkg", "family", "nowhere"]
    for bm25 in (tables.entity_bm25, tables.file_bm25):
        holders = bm25.holders(words)
        assert set(holders) == set(words) - {"nowhere"}
        for term in set(words):
            assert bm25.frequencies(term, holders.get(term, [])).tobytes() == bm25.frequencies(term).tobytes()
        assert bm25.scores(words).any()


LARGE: dict[str, str | bytes] = {f"pkg/mod{n}.py": _module(n) for n in range(OVERLAP_MIN_REUSED + 20)}
LARGE |= {"pkg/__init__.py": ""}
"""A repository with enough files that work on the reused ones pays for a parse worker beside it."""
LARGE_SOURCES = sorted(LARGE)
EDITED = {f"pkg/mod{n}.py": _module(n, factor=n + 3) for n in range(OVERLAP_MIN_FILES + 2)}
"""A commit that edits more modules than a build parses in-process: the rest keep the first commit's texts."""


@pytest.fixture
def edited(tmp_path: Path) -> tuple[Path, Path]:
    """A worktree of `LARGE` at its first commit, and one at a commit editing `EDITED`'s modules."""
    origin = make_repo(tmp_path / "origin-edited", LARGE)
    first = git(origin, "rev-parse", "HEAD").strip()
    for name, content in EDITED.items():
        (origin / name).write_text(content, encoding="utf-8")
    git(origin, "commit", "-q", "-am", "edit many")
    old, new = tmp_path / "old-edited", tmp_path / "new-edited"
    git(origin, "worktree", "add", "-q", "--detach", str(old), first)
    git(origin, "worktree", "add", "-q", "--detach", str(new), "HEAD")
    return old, new


@pytest.fixture
def seen(edited: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """The edited worktree, and a cache holding the first commit's records (its worktree indexed)."""
    old, new = edited
    cache = tmp_path / "cache"
    RepoIndex(old, cache).build(paths=LARGE_SOURCES)
    return new, cache


def _build_beside(repo: Path, cache: Path, paths: Sequence[str]) -> tuple[list[list[str]], list[int], int, int]:
    """Build with work `meanwhile`: the paths it was given per call, the worker processes alive during each call,
    and the build's parsed and worker counts."""
    calls: list[list[str]] = []
    alive: list[int] = []

    def meanwhile(reused: Sequence[str]) -> None:
        calls.append(list(reused))
        alive.append(len(multiprocessing.active_children()))

    stats = RepoIndex(repo, cache).build(paths=paths, meanwhile=meanwhile)
    return calls, alive, stats.parsed, stats.workers


def test_the_work_beside_a_build_gets_the_reused_files_while_a_worker_parses_the_new_ones(
    seen: tuple[Path, Path],
) -> None:
    new, cache = seen
    calls, alive, parsed, workers = _build_beside(new, cache, LARGE_SOURCES)
    assert calls == [[p for p in LARGE_SOURCES if p not in EDITED]]
    assert alive == [1], "the new texts are parsed by one worker process while the caller works"
    assert (parsed, workers) == (len(EDITED), 1)


def test_no_worker_beside_a_caller_that_runs_other_threads(seen: tuple[Path, Path], busy_thread: None) -> None:
    """A worker would come from a fork server there (a second or more to start): the new files are parsed here."""
    new, cache = seen
    calls, alive, parsed, workers = _build_beside(new, cache, LARGE_SOURCES)
    assert calls == [[p for p in LARGE_SOURCES if p not in EDITED]]
    assert (alive, parsed, workers) == ([0], len(EDITED), 1)


def test_a_few_new_files_beside_little_work_are_parsed_here_and_the_work_still_runs_once(
    worktrees: tuple[Path, Path], tmp_path: Path
) -> None:
    old, new = worktrees
    cache = tmp_path / "cache"
    RepoIndex(old, cache).build(paths=SOURCES)
    calls, alive, parsed, workers = _build_beside(new, cache, SOURCES)
    assert calls == [[p for p in SOURCES if p not in CHANGED]]
    assert (alive, parsed, workers) == ([0], len(CHANGED), 1)


def test_a_localizer_prepared_beside_its_parse_worker_ranks_as_an_empty_cache(
    edited: tuple[Path, Path], tmp_path: Path
) -> None:
    old, new = edited
    cache = tmp_path / "cache"
    Localizer(RepoIndex(old, cache)).prepare()
    cold = ranking(new, None)
    assert cold["entities"], "the issue must rank something for the comparison to mean anything"
    assert ranking(new, cache) == cold
    written = {_document_entry(cache, RepoIndex(new, cache).info(p).sha1) for p in EDITED}
    assert all(entry.is_file() for entry in written), "the worker wrote the edited files' documents"


def test_a_damaged_record_found_beside_the_parse_worker_is_parsed_after_it_and_said_once(
    seen: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A record whose name is in the cache but whose content cannot be read back is parsed once the worker is done;
    the work beside gets only the files whose records were read."""
    new, cache = seen
    damaged = "pkg/__init__.py"
    name = f"{RepoIndex(new).info(damaged).sha1[2:]}.json"  # a text the edit left as it was
    entry = next(p for p in cache.rglob(name) if DOCUMENTS_DIR not in p.parts)
    entry.write_text('{"format": "snaffle-structure/2", "sha1": "', encoding="utf-8")
    capsys.readouterr()
    calls, alive, parsed, workers = _build_beside(new, cache, LARGE_SOURCES)
    assert calls == [[p for p in LARGE_SOURCES if p not in EDITED and p != damaged]]
    assert (alive, parsed, workers) == ([1], len(EDITED) + 1, 1)
    assert capsys.readouterr().err == f"snaffle: 1 index cache entry was truncated or corrupt and rebuilt: {entry}\n"
    assert RepoIndex(new, cache).entities(damaged) == RepoIndex(new).entities(damaged)


@pytest.mark.parametrize(
    ("stale", "beside", "expected"),
    [
        (OVERLAP_FILES_PER_WORKER - 1, True, 1),
        (2 * OVERLAP_FILES_PER_WORKER, True, 2),
        (100 * OVERLAP_FILES_PER_WORKER, True, 2),
        (2 * OVERLAP_FILES_PER_WORKER, False, 1),
        (PARALLEL_MIN_FILES, False, 2),
    ],
)
def test_workers_beside_a_caller_grow_with_the_new_files_up_to_the_cores(
    monkeypatch: pytest.MonkeyPatch, stale: int, beside: bool, expected: int
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert _worker_count(0, stale, beside=beside) == expected
    assert _worker_count(1, stale, beside=beside) == 1  # asked for one: one


def _slow_companion(source: bytes, record: IndexedFile) -> None:
    """A companion that keeps a parse worker busy (module level: a forked worker runs it)."""
    time.sleep(0.1)


def test_a_parse_worker_that_dies_beside_the_callers_work_leaves_the_build_whole(seen: tuple[Path, Path]) -> None:
    """The worker is killed while the caller's work runs: the new files are parsed here after all, the caller's work
    ran once, and every record is what a fresh index makes."""
    new, cache = seen
    calls: list[int] = []

    def kill_the_workers(reused: Sequence[str]) -> None:
        calls.append(len(reused))
        for child in multiprocessing.active_children():
            child.kill()

    index = RepoIndex(new, cache)
    stats = index.build(paths=LARGE_SOURCES, companion=_slow_companion, meanwhile=kill_the_workers)
    assert calls == [len(LARGE_SOURCES) - len(EDITED)]
    assert (stats.parsed, stats.workers) == (len(EDITED), 1)
    fresh = RepoIndex(new)
    assert [index.entities(p) for p in EDITED] == [fresh.entities(p) for p in EDITED]
