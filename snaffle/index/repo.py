"""Repository index: the modules, classes, functions and methods of a Python tree, listed, parsed per file
(`index.parse`), outlined (`index.skeleton`), cached on disk (`index.cache`), resolved by selector
(`index.selectors`) and refreshed one file at a time after an edit."""

from __future__ import annotations

import gc
import hashlib
import multiprocessing
import os
import posixpath
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from tree_sitter import Tree

from snaffle.index.cache import (
    DamagedEntry,
    FileInfo,
    IndexedFile,
    Stats,
    content_name,
    damaged_line,
    load_manifest,
    load_record,
    record_from_payload,
    record_payload,
    store_manifest,
    store_record,
)
from snaffle.index.parse import Entity, EntityOptions, ParsedSource, entity_options, parse_source
from snaffle.index.selectors import SelectorError, path_error, pick
from snaffle.index.skeleton import render_skeleton
from snaffle.types import SOURCE_DIRS

PYTHON_SUFFIX = ".py"
SKIP_DIRS = frozenset(
    """.git .hg .venv venv node_modules __pycache__ .tox .nox site-packages
    .mypy_cache .pytest_cache .ruff_cache .eggs""".split()
)
"""Directory names never indexed, at any depth."""
ROOT_SKIP_DIRS = frozenset({"build", "dist"})
"""Build outputs, skipped only at the top: packages such as pip have a real `build/` subpackage."""
GIT_TIMEOUT_S = 30
PARALLEL_MIN_FILES = 200
"""Below this many files to parse, worker processes cost more than they save: with a localizer's documents built
in them too, 94-204 new sympy texts took 0.90-1.20x the CPU of one process and 124 sphinx texts 1.16x, on 2 cores
at load average 5-7 (issue 17's index_bench runs)."""
OVERLAP_MIN_FILES = 8
OVERLAP_MIN_REUSED = 300
"""A build given work to do `meanwhile` parses at least `OVERLAP_MIN_FILES` new files in a worker process beside it
when that work is on at least this many reused files (~0.15 s of records and documents read back); less is done one
after the other, here: the fork and the records' trip back cost ~0.05 s (sphinx, 9 new texts beside 175 reused:
1.20x the wall of one process; sympy, 27 beside 826: 0.86x)."""
OVERLAP_FILES_PER_WORKER = 40
"""... and one more worker per this many: the caller's own work on ~800 seen sympy files (their records and
documents read back) takes about as long as one worker's parse of 40 new ones."""
MAX_WORKERS = 4
CHUNKS_PER_WORKER = 16
"""Work is handed out in this many chunks per worker so one large file cannot leave a core idle."""
START_METHOD = "forkserver"
"""Workers never fork a caller that runs other Python threads (the shim, asyncio): fork copies only the calling
thread, and a lock another one holds stays held in the child."""
SINGLE_THREAD_START_METHOD = "fork"
"""A caller with no other Python thread is forked: a worker then starts with every module already imported (a pool
of 2 measured ready in 0.06 s, against 1.3 s and 0.19 s CPU per worker from a fork server, at load average 5).
A C library's own threads, such as OpenBLAS's, are no hazard: the workers never call into it."""
FORK_WARNING = r".*multi-threaded, use of fork\(\) may lead to deadlocks"
"""Python 3.12+ warns on fork whenever the OS counts other threads, a C library's included."""
MAX_SELECTOR_CHARS = 4096
"""Linux's PATH_MAX: a longer selector names no file."""
TREE_CACHE_FILES = 8
"""Trees kept for the files parsed last, so that repeated edits to one file reparse incrementally."""
Companion = Callable[[bytes, "IndexedFile"], None]
"""Per-file work a caller adds to a parallel build (a localizer's documents), run in the worker beside the parse
with the file's text and record, so that a new worktree pays for its new files once, on every core. It must be
picklable (a module-level function or a partial of one) and keep its results in a cache of its own."""
Identity = tuple[os.stat_result, str]
"""A file's stat and content hash."""
Meanwhile = Callable[[Sequence[str]], object]
"""A caller's own work on the files whose records a build reused (a localizer loading their documents), done while
the new files are parsed."""


@dataclass(frozen=True, slots=True)
class BuildStats:
    """How `RepoIndex.build` obtained each file's entities."""

    files: int
    cached: int
    parsed: int
    workers: int
    rebuilt: int = 0
    """Cache entries found damaged (truncated, corrupt) and written anew; `build` says so in one stderr line."""


# ------------------------------------------------------------------------------------------- indexing


def _read(root: str, path: str) -> tuple[os.stat_result, bytes]:
    full = os.path.join(root, path)
    stat = os.stat(full)  # before reading: a concurrent edit then shows up as a changed mtime next time
    with open(full, "rb") as handle:
        return stat, handle.read()


def _indexed(path: str, stat: os.stat_result, source: bytes, parsed: ParsedSource) -> IndexedFile:
    sha1 = hashlib.sha1(source).hexdigest()
    info = FileInfo(path, stat.st_mtime_ns, stat.st_size, sha1, parsed.lines, parsed.parse_errors, parsed.decode_errors)
    return IndexedFile(info, parsed.entities)


def _index_in_worker(
    root: str, cache_dir: Path | None, options: EntityOptions, companion: Companion | None, path: str
) -> dict[str, Any] | None:
    """Parse and cache one file in a worker process, then run the companion on it; the record goes back as plain
    data (None: unreadable)."""
    try:
        stat, source = _read(root, path)
    except OSError:
        return None
    record = _indexed(path, stat, source, parse_source(path, source, options=options))
    store_record(cache_dir, options, record)
    if companion is not None:
        companion(source, record)
    return record_payload(record.info, record.entities)


def _nothing(reused: Sequence[str]) -> None:
    """No work beside a build's parsing."""


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic collector while many long-lived, acyclic records are created: it only rescans them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _skipped(parts: Sequence[str]) -> bool:
    return bool(parts) and parts[0] in ROOT_SKIP_DIRS or any(part in SKIP_DIRS for part in parts)


def _git_files(root: Path) -> list[str] | None:
    """Tracked plus untracked-but-not-ignored files when `root` is a git work tree's top, else None."""
    if not (root / ".git").exists():
        return None
    command = ["git", "ls-files", "-co", "--exclude-standard", "-z"]
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    names, top = os.fsdecode(done.stdout).split("\0"), str(root)
    return [name for name in names if name.endswith(PYTHON_SUFFIX) and os.path.isfile(os.path.join(top, name))]


def _walk_files(root: Path) -> list[str]:
    found = []
    for directory, dirs, names in os.walk(root):
        relative = Path(directory).relative_to(root).parts
        dirs[:] = [d for d in dirs if not _skipped((*relative, d))]
        prefix = "/".join(relative)
        found += [f"{prefix}/{n}" if prefix else n for n in names if n.endswith(PYTHON_SUFFIX)]
    return found


class RepoIndex:
    """The Python entities of one directory tree, indexed lazily per file and cached on disk."""

    def __init__(self, root: Path, cache_dir: Path | None = None, options: EntityOptions | None = None) -> None:
        self.root = Path(root).resolve()
        self.cache_dir = cache_dir
        self.options = options or entity_options()
        self._root_key = str(self.root)
        self._manifest: Stats | None = None  # the stats this checkout had when last indexed, read on first use
        self._files: list[str] | None = None
        self._records: dict[str, IndexedFile] = {}
        self._trees: dict[str, tuple[bytes, Tree]] = {}  # the last parses, oldest first
        self._damaged: list[str] = []  # cache entries found damaged since the last build reported them

    # ---- listing

    def files(self) -> list[str]:
        """Repo-relative Python files, sorted; git's view (tracked + untracked, not ignored) when possible."""
        if self._files is None:
            listed = _git_files(self.root)
            names = listed if listed is not None else _walk_files(self.root)
            self._files = sorted({n for n in names if not _skipped(n.split("/")[:-1]) and self._listable(n)})
        return list(self._files)

    def _listable(self, name: str) -> bool:
        """A name a selector can spell (UTF-8: a surrogate-escaped byte cannot be typed back) whose real path
        stays inside the root (a symlink that leads outside is never followed)."""
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            return False
        # Neither git's listing nor os.walk goes through a directory symlink, so only the file itself can be a
        # link: one lstat per file, a realpath only for a link (realpath on every file measured 10-17x slower).
        return not os.path.islink(os.path.join(self._root_key, name)) or self._inside(name)

    def _inside(self, normal: str) -> bool:
        """Whether `normal`, every symlink followed, is inside the root."""
        real = os.path.realpath(self.root / normal)
        return real == self._root_key or real.startswith(self._root_key + os.sep)

    # ---- per-file queries

    def entities(self, path: str) -> list[Entity]:
        """Entities of one file in source order, module first; re-indexed if the file changed on disk."""
        return list(self._get(self._checked(path)).entities)

    def info(self, path: str) -> FileInfo:
        return self._get(self._checked(path)).info

    def record(self, listed: str) -> IndexedFile:
        """The identity and entities of a path `files()` listed, re-indexed if it changed on disk; the listing
        checked it, so none of a selector's checks run again (a symlink's realpath per file is what they cost)."""
        return self._get(listed)

    def parse_errors(self, path: str) -> int:
        return self.info(path).parse_errors

    def skeleton(self, path: str) -> str:
        record = self._get(self._checked(path))
        return render_skeleton(record.entities, record.info.parse_errors, record.info.decode_errors)

    def source(self, path: str) -> bytes:
        return (self.root / self._checked(path)).read_bytes()

    def all_entities(self) -> Iterator[Entity]:
        for path in self.files():
            try:
                record = self._get(path)
            except SelectorError:  # deleted since the listing
                continue
            yield from record.entities

    # ---- selectors

    def resolve(self, selector: str) -> Entity:
        """The one entity named by `path.py`, `path.py::func` or `path.py::Class.method`. A name defined more
        than once takes `@n` (1-based, source order), except a property family (the bare name means the
        getter) and overloads (the implementation); `Entity.selector` always resolves back to its entity."""
        path_part, _, name = selector.strip().partition("::")
        path = self._checked(path_part)
        entities = self._get(path).entities
        name = name.replace("::", ".").strip().removesuffix("()")
        if not name:
            return entities[0]
        return pick(path, name, entities)

    # ---- building and refreshing

    def build(
        self,
        workers: int = 0,
        paths: Sequence[str] | None = None,
        companion: Companion | None = None,
        meanwhile: Meanwhile | None = None,
    ) -> BuildStats:
        """Index every file (or those of `paths`, e.g. the non-test ones a localizer reads), reusing valid cache
        records; `workers` 0 picks processes by the work left; each worker also runs the `companion` on the files
        it parses (see `Companion`). `meanwhile` is called once with the paths whose records were reused, while
        worker processes parse the rest when that pays (`_worth_a_worker`: a second core does the parsing; only
        forked workers, which start in milliseconds, so not while other threads run). The checkout's manifest is
        written after."""
        listed = self.files()
        paths = listed if paths is None else sorted(set(paths) & set(listed))
        with _gc_paused():
            known, stale = self._partition(paths)
            load = partial(self._load_known, known, meanwhile or _nothing)
            beside = meanwhile is not None and workers != 1 and threading.active_count() == 1
            count = _worker_count(workers, len(stale), beside=beside)
            if count > 1 or (beside and _worth_a_worker(len(stale), len(known))):
                parsed, count, late = self._parse_parallel(stale, count, companion, load)
            else:
                late = load()
                parsed = self._parse_serial(stale)
            parsed += self._parse_serial(late)  # records that could not be read back after all
            stale += late
        self._store_manifest()
        damaged, self._damaged = self._damaged, []
        if damaged:
            print(damaged_line("index", damaged), file=sys.stderr, flush=True)
        return BuildStats(len(paths), len(paths) - len(stale), parsed, count, len(damaged))

    def _store_manifest(self) -> None:
        """Write this checkout's stats when they differ from the ones read (one file for the whole checkout)."""
        known = self._known_stats()
        stats = {path: known[path] for path in self.files() if path in known}
        stats |= {path: (r.info.mtime_ns, r.info.size, r.info.sha1) for path, r in self._records.items()}
        if self.cache_dir is not None and stats != known:
            store_manifest(self.cache_dir, self._root_key, stats)
            self._manifest = stats

    def _known_stats(self) -> Stats:
        if self._manifest is None:
            self._manifest = load_manifest(self.cache_dir, self._root_key)
        return self._manifest

    def refresh(self, path: str) -> None:
        """Re-index one file after an edit (always re-reads it); a deleted file leaves the index."""
        path = self._normalize(path)
        if _outside(path) or not self._inside(path):
            raise SelectorError(f"{path!r} is outside the repository; use a path relative to its root")
        if not _is_file(self.root / path):
            self._records.pop(path, None)
            self._trees.pop(path, None)
            if self._files is not None and path in self._files:
                self._files.remove(path)
            return
        if path.endswith(PYTHON_SUFFIX):
            if not self._reuse(path, trust_stat=False):
                self._parse_into_memory(path)
            if self._files is not None and path not in self._files and not _skipped(path.split("/")[:-1]):
                self._files = sorted([*self._files, path])

    # ---- internals

    def _get(self, path: str) -> IndexedFile:
        try:
            if not self._reuse(path):
                self._parse_into_memory(path)
        except FileNotFoundError:
            self._records.pop(path, None)
            raise path_error(path, self.files()) from None
        return self._records[path]

    def _reuse(self, path: str, trust_stat: bool = True) -> bool:
        """Bring a still-valid record into memory: the one in memory or, by content hash, one from the disk cache."""
        identity = self._identify(path, trust_stat)
        return identity is None or self._adopt(path, *identity)

    def _identify(self, path: str, trust_stat: bool = True) -> Identity | None:
        """The stat and content hash of a file whose record in memory is not current (None: it is). The hash comes
        from this checkout's manifest when the file's stat is unchanged, else from its bytes."""
        full = os.path.join(self._root_key, path)
        stat = os.stat(full)
        record = self._records.get(path)
        if record is not None and trust_stat and _same_stat(record.info, stat):
            return None
        known = self._known_stats().get(path) if trust_stat else None
        if known is not None and known[:2] == (stat.st_mtime_ns, stat.st_size):
            return stat, known[2]
        with open(full, "rb") as handle:
            return stat, hashlib.sha1(handle.read()).hexdigest()

    def _adopt(self, path: str, stat: os.stat_result, sha1: str) -> bool:
        """Take the record of text `sha1` for `path`: the one in memory when its text is that, else the disk
        cache's (False: none, or a damaged one)."""
        record = self._held(path, sha1)
        if record is not None:
            self._records[path] = IndexedFile(
                replace(record.info, mtime_ns=stat.st_mtime_ns, size=stat.st_size), record.entities
            )
            return True
        try:
            loaded = load_record(self.cache_dir, self.options, path, stat, sha1)
        except DamagedEntry as damaged:
            self._damaged.append(str(damaged))
            return False
        if loaded is None:
            return False
        self._records[path] = loaded
        return True

    def _partition(self, paths: Sequence[str]) -> tuple[dict[str, Identity | None], list[str]]:
        """The files whose text has a record (in memory or in the disk cache: only its name is looked up), with
        their identity (None: the record in memory is current), and the files to parse."""
        known: dict[str, Identity | None] = {}
        stale: list[str] = []
        for path in paths:
            try:
                identity = self._identify(path)
            except OSError:  # vanished or unreadable: the parse attempt that follows drops it
                stale.append(path)
                continue
            if identity is None or self._has_record(path, identity[1]):
                known[path] = identity
            else:
                stale.append(path)
        return known, stale

    def _held(self, path: str, sha1: str) -> IndexedFile | None:
        """The record in memory for `path` when it is of the text `sha1`."""
        record = self._records.get(path)
        return record if record is not None and record.info.sha1 == sha1 else None

    def _has_record(self, path: str, sha1: str) -> bool:
        if self._held(path, sha1) is not None:
            return True
        return self.cache_dir is not None and os.path.exists(content_name(self.cache_dir, sha1, self.options))

    def _load_known(self, known: Mapping[str, Identity | None], meanwhile: Meanwhile) -> list[str]:
        """Bring the records `_partition` found into memory, then run `meanwhile` on those files; the files whose
        record could not be read back after all (damaged, or replaced since) are returned, to be parsed."""
        late = [path for path, identity in known.items() if identity is not None and not self._adopt(path, *identity)]
        missing = set(late)
        meanwhile([path for path in known if path not in missing])
        return late

    def _parse_into_memory(self, path: str) -> None:
        stat, source = _read(self._root_key, path)
        parsed = parse_source(path, source, self._trees.pop(path, None), self.options)
        self._trees[path] = (source, parsed.tree)
        if len(self._trees) > TREE_CACHE_FILES:
            self._trees.pop(next(iter(self._trees)))
        record = self._records[path] = _indexed(path, stat, source, parsed)
        store_record(self.cache_dir, self.options, record)

    def _parse_serial(self, paths: Iterable[str]) -> int:
        parsed = 0
        for path in paths:
            try:
                self._parse_into_memory(path)
            except OSError:  # vanished or unreadable since the listing: not part of the index
                continue
            parsed += 1
        return parsed

    def _parse_parallel(
        self, paths: list[str], workers: int, companion: Companion | None, beside: Callable[[], list[str]]
    ) -> tuple[int, int, list[str]]:
        """Parse in worker processes while `beside` runs here: (files parsed, workers used, what `beside`
        returned); a pool that cannot start (a script without a `__main__` guard, no process support) falls back to
        parsing here."""
        job = partial(_index_in_worker, self._root_key, self.cache_dir, self.options, companion)
        chunk = max(1, len(paths) // (workers * CHUNKS_PER_WORKER))
        failed = (BrokenProcessPool, OSError, ValueError)  # ValueError: no such start method on this platform
        with ExitStack() as stack:
            try:
                pending = stack.enter_context(_pool(workers)).map(job, paths, chunksize=chunk)
            except failed:
                pending = None
            returned = beside()  # once, whatever became of the pool (its own errors are the caller's)
            payloads: list[dict[str, Any]] | None
            try:
                payloads = None if pending is None else [p for p in pending if p is not None]
            except failed:
                payloads = None
        if payloads is None:
            return self._parse_serial(paths), 1, returned
        for payload in payloads:
            self._records[payload["info"][0]] = record_from_payload(payload)
        return len(payloads), workers, returned

    def _normalize(self, path: str) -> str:
        text = path.strip().replace("\\", "/")
        if os.path.isabs(text):
            candidate = Path(text).resolve()
            text = candidate.relative_to(self.root).as_posix() if candidate.is_relative_to(self.root) else text
        return posixpath.normpath(text).removeprefix("./") if text else text

    def _checked(self, path: str) -> str:
        """A normalized path to an existing Python file inside the root, or a SelectorError naming the fix."""
        if "\0" in path or len(path) > MAX_SELECTOR_CHARS:
            raise SelectorError(f"{path[:80]!r}... is not a path (a NUL byte, or too long); use a path from the index")
        normal = self._normalize(path)
        if not normal:
            raise SelectorError("no file given; start the selector with a path relative to the repository root")
        if _outside(normal) or not self._inside(normal):
            raise SelectorError(f"{path!r} is outside the repository (symlinks followed); use a path inside its root")
        if not _is_file(self.root / normal):
            normal = self._meant(normal)
        if not normal.endswith(PYTHON_SUFFIX):
            raise SelectorError(f"{normal} is not a Python file, so it has no entities; search it with search_code")
        return normal

    def _meant(self, path: str) -> str:
        """The file a missing `path` most likely means, when exactly one reading exists: a module path for a package
        (`pkg.py` is `pkg/__init__.py`) or a path inside a source directory (`pkg/mod.py` is `src/pkg/mod.py`);
        else the SelectorError listing close files."""
        readings = [path.removesuffix(PYTHON_SUFFIX) + "/__init__.py"] if path.endswith(PYTHON_SUFFIX) else []
        readings += [f"{source}/{path}" for source in SOURCE_DIRS]
        found = [r for r in readings if _is_file(self.root / r) and self._inside(r)]
        if len(found) != 1:
            raise path_error(path, self.files())
        return found[0]


@contextmanager
def _pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """Parse workers, forked when no other Python thread runs here (the fork warning of a C library's threads
    silenced: no other thread can be changing the warning filters meanwhile), else started by a fork server."""
    if threading.active_count() > 1:
        context = multiprocessing.get_context(START_METHOD)
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            yield pool
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", FORK_WARNING, DeprecationWarning)
        context = multiprocessing.get_context(SINGLE_THREAD_START_METHOD)
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            yield pool


def _outside(normal: str) -> bool:
    """Whether a normalized path leaves the root (or is empty)."""
    return not normal or normal == ".." or normal.startswith(("../", "/"))


def _is_file(path: Path) -> bool:
    """`Path.is_file`, False for a name no file can have (too long a component) instead of an OSError."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _worth_a_worker(stale: int, reused: int) -> bool:
    """Whether parsing `stale` files in a worker beside the caller's work on `reused` ones pays for the process."""
    return stale >= OVERLAP_MIN_FILES and reused >= OVERLAP_MIN_REUSED


def _worker_count(requested: int, stale: int, beside: bool = False) -> int:
    """Processes for `stale` files: as requested, else one per core (capped) when there is enough work; with work
    beside them, one per `OVERLAP_FILES_PER_WORKER` files (as many as the cores)."""
    cores = min(os.cpu_count() or 1, MAX_WORKERS)
    automatic = cores if stale >= PARALLEL_MIN_FILES else 1
    if beside:
        automatic = max(automatic, min(cores, stale // OVERLAP_FILES_PER_WORKER))
    return max(1, min(requested or automatic, stale))


def _same_stat(info: FileInfo, stat: os.stat_result) -> bool:
    return info.mtime_ns == stat.st_mtime_ns and info.size == stat.st_size
