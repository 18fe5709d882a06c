"""Repository index: the modules, classes, functions and methods of a Python tree (tree-sitter), their
selectors and skeletons, cached per file on disk and refreshed one file at a time after an edit."""

from __future__ import annotations

import difflib
import gc
import hashlib
import json
import multiprocessing
import os
import posixpath
import re
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache, partial
from importlib import metadata
from pathlib import Path
from typing import Any

from tree_sitter import Language, Node, Parser, Tree

from snaffle.types import SOURCE_DIRS

CACHE_FORMAT = "snaffle-structure/1"
PYTHON_SUFFIX = ".py"
SKIP_DIRS = frozenset(
    """.git .hg .venv venv node_modules __pycache__ .tox .nox site-packages
    .mypy_cache .pytest_cache .ruff_cache .eggs""".split()
)
"""Directory names never indexed, at any depth."""
ROOT_SKIP_DIRS = frozenset({"build", "dist"})
"""Build outputs, skipped only at the top: packages such as pip have a real `build/` subpackage."""
GIT_TIMEOUT_S = 30
CLOSE_MATCHES = 5
CLOSE_MATCH_CUTOFF = 0.6
PARALLEL_MIN_FILES = 200
"""Below this many files to parse, starting worker processes costs more than it saves."""
MAX_WORKERS = 4
CHUNKS_PER_WORKER = 16
"""Work is handed out in this many chunks per worker so one large file cannot leave a core idle."""
START_METHOD = "forkserver"
"""Workers never fork the caller: it may hold threads (the shim, asyncio), which fork does not copy."""
TREE_CACHE_FILES = 8
"""Trees kept for the files parsed last, so that repeated edits to one file reparse incrementally."""
SKELETON_INDENT = "    "
DOC_LINE = '"""{}"""'
BODY_ELIDED = "..."
PARSE_ERROR_NOTE = "# snaffle: {} syntax error(s) here; the signatures below are the parts that parsed"
DECODE_NOTE = "# snaffle: not valid UTF-8; undecodable bytes are shown as U+FFFD"

DEFINITION_TYPES = frozenset({"function_definition", "class_definition"})
DECORATED = "decorated_definition"
CONTAINER_TYPES = frozenset(
    """module block if_statement elif_clause else_clause try_statement except_clause except_group_clause
    finally_clause for_statement while_statement with_statement match_statement case_clause ERROR""".split()
)
"""Statements whose blocks may hold definitions (conditional defs, try/except imports), and error nodes."""
DESCEND_TYPES = CONTAINER_TYPES | DEFINITION_TYPES | {DECORATED}
SKIPPED_IN_DOCSTRING_SEARCH = frozenset({"comment"})
PROPERTY_ACCESSOR = re.compile(r"^@[\w.]+\.(setter|getter|deleter)\b", re.MULTILINE)
OVERLOAD = re.compile(r"^@(\w+\.)*overload\b", re.MULTILINE)
DEFINITION_KEYWORDS = (b"def", b"class")
OCCURRENCE = re.compile(r"^(?P<name>.*)@(?P<n>\d+)$")


@dataclass(frozen=True, slots=True)
class Entity:
    """One module, class, function or method of a Python file."""

    path: str
    qualname: str
    kind: str
    start_line: int
    end_line: int
    start_byte: int
    end_byte: int
    body_start_line: int
    indent: str
    signature: str
    doc: str
    occurrence: int = 0
    """0 when the qualname is unique in its file, else its 1-based rank among the same-named definitions."""

    @property
    def name(self) -> str:
        """The last part of the qualname, as a def or class statement spells it (`Class.method@2` → `method`)."""
        return self.qualname.rsplit(".", 1)[-1].split("@")[0]

    @property
    def selector(self) -> str:
        if not self.qualname:
            return self.path
        suffix = f"@{self.occurrence}" if self.occurrence else ""
        return f"{self.path}::{self.qualname}{suffix}"


@dataclass(frozen=True, slots=True)
class FileInfo:
    """What the index knows about one Python file: its identity on disk and how well it parsed."""

    path: str
    mtime_ns: int
    size: int
    sha1: str
    lines: int
    parse_errors: int
    decode_errors: bool


@dataclass(frozen=True, slots=True)
class ParsedSource:
    """The entities of one source text, with its count of syntax errors and its tree."""

    entities: tuple[Entity, ...]
    parse_errors: int
    decode_errors: bool
    lines: int
    tree: Tree


@dataclass(frozen=True, slots=True)
class BuildStats:
    """How `RepoIndex.build` obtained each file's entities."""

    files: int
    cached: int
    parsed: int
    workers: int


@dataclass(frozen=True, slots=True)
class _Indexed:
    """A file's identity and entities, as held in memory."""

    info: FileInfo
    entities: tuple[Entity, ...]


class SelectorError(ValueError):
    """A selector that names no entity, or more than one; the message lists close matches."""


# ---------------------------------------------------------------------------------------------- parsing


@cache
def _language() -> Language:
    import tree_sitter_python

    return Language(tree_sitter_python.language())


def parse_source(path: str, source: bytes, previous: tuple[bytes, Tree] | None = None) -> ParsedSource:
    """Index one source text: entities in source order (module first) and its syntax errors. `previous`,
    an earlier version of the text and its tree, makes the parse incremental."""
    tree = _reparse(source, *previous) if previous is not None else Parser(_language()).parse(source)
    root = tree.root_node
    rows = [_module_row(source, root)]
    rows.extend(_definition_row(source, *found) for found in _walk(root, source))
    entities = tuple(Entity(path, *row) for row in _number_duplicates(rows))
    errors = count_parse_errors(root)
    return ParsedSource(entities, errors, _has_decode_errors(source), _line_count(source), tree)


def _reparse(source: bytes, old_source: bytes, old_tree: Tree) -> Tree:
    """Parse `source` reusing the tree of `old_source`, told the one byte range in which they differ."""
    start, old_end, new_end = _changed_span(old_source, source)
    old_tree.edit(
        start_byte=start,
        old_end_byte=old_end,
        new_end_byte=new_end,
        start_point=_point(old_source, start),
        old_end_point=_point(old_source, old_end),
        new_end_point=_point(source, new_end),
    )
    return Parser(_language()).parse(source, old_tree)


def _changed_span(old: bytes, new: bytes) -> tuple[int, int, int]:
    """(start, old end, new end): the bytes outside old[start:old_end] and new[start:new_end] are equal."""
    limit = min(len(old), len(new))
    start = _common_length(limit, lambda n: old[:n] == new[:n])
    suffix = _common_length(limit - start, lambda n: old[len(old) - n :] == new[len(new) - n :])
    return start, len(old) - suffix, len(new) - suffix


def _common_length(limit: int, equal: Callable[[int], bool]) -> int:
    """The largest n <= limit with equal(n), for a predicate true up to some n and false after it."""
    low, high = 0, limit
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if equal(middle) else (low, middle - 1)
    return low


def _point(source: bytes, offset: int) -> tuple[int, int]:
    """(row, byte column) of a byte offset, as tree-sitter counts them."""
    return source.count(b"\n", 0, offset), offset - (source.rfind(b"\n", 0, offset) + 1)


def _walk(root: Node, source: bytes) -> Iterator[tuple[Node, Node, str, str]]:
    """(outer node incl. decorators, definition, qualname, kind) for every class and def, in source order."""
    stack: list[tuple[Node, str, str]] = [(root, "", "module")]
    while stack:
        node, prefix, parent_kind = stack.pop()
        definition = node.child_by_field_name("definition") if node.type == DECORATED else node
        name = definition.child_by_field_name("name") if definition is not None else None
        if definition is None or name is None or definition.type not in DEFINITION_TYPES:
            children, inner_prefix, inner_kind = node.children, prefix, parent_kind
        else:
            kind = _kind(definition.type, parent_kind)
            qualname = prefix + _text(name)
            yield node, definition, qualname, kind
            if not _may_hold_definitions(source, definition, kind):
                continue
            children, inner_prefix, inner_kind = definition.children, qualname + ".", kind
        stack.extend((c, inner_prefix, inner_kind) for c in reversed(children) if c.type in DESCEND_TYPES)


def _may_hold_definitions(source: bytes, definition: Node, kind: str) -> bool:
    """Classes do; a function only if its body has the word `def` or `class` (a false positive such as
    `default` merely costs a visit) or it did not parse cleanly."""
    body = definition.child_by_field_name("body")
    if kind == "class" or body is None or definition.has_error:
        return True
    return any(source.find(keyword, body.start_byte, body.end_byte) >= 0 for keyword in DEFINITION_KEYWORDS)


def _kind(node_type: str, parent_kind: str) -> str:
    if node_type == "class_definition":
        return "class"
    return "method" if parent_kind == "class" else "function"


def _definition_row(source: bytes, outer: Node, node: Node, qualname: str, kind: str) -> tuple[Any, ...]:
    body = node.child_by_field_name("body")
    indent = _indent(source, outer.start_byte)
    header_end = _header_end(source, node, body)
    signature = _dedent(_decode(source[outer.start_byte : header_end]), indent)
    body_line = body.start_point.row if body is not None else _last_line(node)
    return (
        qualname,
        kind,
        outer.start_point.row,
        _last_line(outer),
        outer.start_byte,
        outer.end_byte,
        body_line,
        indent,
        signature,
        _docstring(body),
    )


def _module_row(source: bytes, root: Node) -> tuple[Any, ...]:
    last = max(0, _line_count(source) - 1)
    return ("", "module", 0, last, 0, len(source), 0, "", "", _docstring(root))


def _number_duplicates(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Append each row's occurrence: 0 for a unique qualname, else 1, 2, ... in source order."""
    totals = Counter(row[0] for row in rows)
    seen: Counter[str] = Counter()
    numbered = []
    for row in rows:
        seen[row[0]] += 1
        numbered.append((*row, seen[row[0]] if totals[row[0]] > 1 else 0))
    return numbered


def _header_end(source: bytes, node: Node, body: Node | None) -> int:
    """End byte of the header: its ':', else its last token before the body; a broken header ends with
    the line it breaks on, since error recovery may have swallowed the definitions that follow."""
    end = node.start_byte
    for child in node.children:
        if body is not None and child.start_byte >= body.start_byte:
            break
        if child.has_error:
            line_end = source.find(b"\n", child.start_byte)
            return len(source) if line_end < 0 else line_end
        if child.type == ":":
            return child.end_byte
        if not child.is_extra:
            end = child.end_byte
    return end


def _docstring(body: Node | None) -> str:
    """First non-blank line of the docstring opening `body`, or ""."""
    if body is None:
        return ""
    for statement in body.children:
        if statement.type in SKIPPED_IN_DOCSTRING_SEARCH:
            continue
        if statement.type != "expression_statement" or statement.named_child_count != 1:
            return ""
        string = statement.named_children[0]
        if string.type == "concatenated_string":
            string = string.named_children[0]
        return _string_first_line(string) if string.type == "string" else ""
    return ""


def _string_first_line(string: Node) -> str:
    parts = string.children
    if len(parts) < 2:
        return ""
    raw = string.text or b""
    text = raw[parts[0].end_byte - string.start_byte : parts[-1].start_byte - string.start_byte]
    for line in _decode(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def count_parse_errors(root: Node) -> int:
    """Number of ERROR and MISSING nodes under `root` (0 = clean); visits only subtrees that hold errors."""
    count = 0
    stack = [root] if root.has_error else []
    while stack:
        node = stack.pop()
        count += node.is_error or node.is_missing
        stack.extend(child for child in node.children if child.has_error)
    return count


def _text(node: Node) -> str:
    return _decode(node.text or b"")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _has_decode_errors(source: bytes) -> bool:
    try:
        source.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _line_count(source: bytes) -> int:
    return source.count(b"\n") + (1 if source and not source.endswith(b"\n") else 0)


def _last_line(node: Node) -> int:
    row, column = node.end_point
    return row - 1 if column == 0 and row > node.start_point.row else row


def _indent(source: bytes, start: int) -> str:
    line_start = source.rfind(b"\n", 0, start) + 1
    prefix = _decode(source[line_start:start])
    return prefix[: len(prefix) - len(prefix.lstrip())]


def _dedent(text: str, indent: str) -> str:
    if not indent:
        return text
    lines = text.split("\n")
    return "\n".join([lines[0], *(line.removeprefix(indent) for line in lines[1:])])


# --------------------------------------------------------------------------------------------- skeleton


def render_skeleton(entities: Sequence[Entity], parse_errors: int = 0, decode_errors: bool = False) -> str:
    """Signatures in source order, nested ones indented, bodies elided; docstring heads as docstrings."""
    lines = [PARSE_ERROR_NOTE.format(parse_errors)] if parse_errors else []
    lines += [DECODE_NOTE] if decode_errors else []
    if entities and entities[0].kind == "module" and entities[0].doc:
        lines.append(DOC_LINE.format(_escape_doc(entities[0].doc)))
    members = [e for e in entities if e.kind != "module"]
    for index, entity in enumerate(members):
        pad = SKELETON_INDENT * entity.qualname.count(".")
        lines.extend(pad + line for line in entity.signature.split("\n"))
        inner = pad + SKELETON_INDENT
        if entity.doc:
            lines.append(inner + DOC_LINE.format(_escape_doc(entity.doc)))
        nested = index + 1 < len(members) and members[index + 1].start_byte < entity.end_byte
        if entity.kind != "class" or not (nested or entity.doc):
            lines.append(inner + BODY_ELIDED)
    return "".join(line + "\n" for line in lines)


def _escape_doc(doc: str) -> str:
    return doc.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


# ----------------------------------------------------------------------------------------- disk cache


@cache
def _grammar_version() -> str:
    try:
        return metadata.version("tree-sitter-python")
    except metadata.PackageNotFoundError:
        return "unknown"


def default_cache_dir() -> Path:
    """The user cache for indexes: $XDG_CACHE_HOME/snaffle/structure (or ~/.cache/...)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "snaffle" / "structure"


def _cache_file(cache_dir: Path, path: str) -> Path:
    digest = hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()
    return cache_dir / f"tsp-{_grammar_version()}" / digest[:2] / f"{digest[2:]}.json"


def _payload(root: str, info: FileInfo, entities: Iterable[Entity]) -> dict[str, Any]:
    return {
        "format": CACHE_FORMAT,
        "root": root,
        "info": _info_row(info),
        "entities": list(map(_row, entities)),
    }


def _row(e: Entity) -> tuple[Any, ...]:
    """An entity without its path, in field order: the cache's record layout."""
    return (
        e.qualname,
        e.kind,
        e.start_line,
        e.end_line,
        e.start_byte,
        e.end_byte,
        e.body_start_line,
        e.indent,
        e.signature,
        e.doc,
        e.occurrence,
    )


def _info_row(info: FileInfo) -> list[Any]:
    return [info.path, info.mtime_ns, info.size, info.sha1, info.lines, info.parse_errors, info.decode_errors]


def _from_payload(payload: dict[str, Any]) -> _Indexed:
    info = FileInfo(*payload["info"])
    return _Indexed(info, tuple(Entity(info.path, *row) for row in payload["entities"]))


def _store(cache_dir: Path | None, payload: dict[str, Any]) -> None:
    """Write one file's record atomically; a cache that cannot be written is only a slower index."""
    if cache_dir is None:
        return
    target = _cache_file(cache_dir, payload["info"][0])
    temporary = target.with_name(f"{target.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(payload, ensure_ascii=False, separators=(",", ":")), "utf-8")
        os.replace(temporary, target)
    except OSError:
        temporary.unlink(missing_ok=True)


def _load(cache_dir: Path | None, path: str) -> tuple[str, _Indexed] | None:
    """The cached (root, record) of `path`, or None when absent, unreadable or of another format."""
    if cache_dir is None:
        return None
    try:
        payload = json.loads(_cache_file(cache_dir, path).read_bytes())
        if payload["format"] != CACHE_FORMAT or payload["info"][0] != path:
            return None
        return str(payload["root"]), _from_payload(payload)
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        return None


# ------------------------------------------------------------------------------------------- indexing


def _read(root: str, path: str) -> tuple[os.stat_result, bytes]:
    full = os.path.join(root, path)
    stat = os.stat(full)  # before reading: a concurrent edit then shows up as a changed mtime next time
    with open(full, "rb") as handle:
        return stat, handle.read()


def _indexed(path: str, stat: os.stat_result, source: bytes, parsed: ParsedSource) -> _Indexed:
    sha1 = hashlib.sha1(source).hexdigest()
    info = FileInfo(path, stat.st_mtime_ns, stat.st_size, sha1, parsed.lines, parsed.parse_errors, parsed.decode_errors)
    return _Indexed(info, parsed.entities)


def _index_in_worker(root: str, cache_dir: Path | None, path: str) -> dict[str, Any] | None:
    """Parse and cache one file in a worker process; the record goes back as plain data (None: unreadable)."""
    try:
        stat, source = _read(root, path)
    except OSError:
        return None
    record = _indexed(path, stat, source, parse_source(path, source))
    payload = _payload(root, record.info, record.entities)
    _store(cache_dir, payload)
    return payload


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
    names = os.fsdecode(done.stdout).split("\0")
    return [name for name in names if name.endswith(PYTHON_SUFFIX) and os.path.isfile(root / name)]


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

    def __init__(self, root: Path, cache_dir: Path | None = None) -> None:
        self.root = Path(root).resolve()
        self.cache_dir = cache_dir
        self._root_key = str(self.root)
        self._files: list[str] | None = None
        self._records: dict[str, _Indexed] = {}
        self._trees: dict[str, tuple[bytes, Tree]] = {}  # the last parses, oldest first

    # ---- listing

    def files(self) -> list[str]:
        """Repo-relative Python files, sorted; git's view (tracked + untracked, not ignored) when possible."""
        if self._files is None:
            listed = _git_files(self.root)
            names = listed if listed is not None else _walk_files(self.root)
            self._files = sorted({n for n in names if not _skipped(n.split("/")[:-1])})
        return list(self._files)

    # ---- per-file queries

    def entities(self, path: str) -> list[Entity]:
        """Entities of one file in source order, module first; re-indexed if the file changed on disk."""
        return list(self._get(self._checked(path)).entities)

    def info(self, path: str) -> FileInfo:
        return self._get(self._checked(path)).info

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
        return _pick(path, name, entities)

    # ---- building and refreshing

    def build(self, workers: int = 0) -> BuildStats:
        """Index every file, reusing valid cache records; `workers` 0 picks processes by the work left."""
        paths = self.files()
        with _gc_paused():
            stale = [path for path in paths if not self._reuse_or_false(path)]
            count = _worker_count(workers, len(stale))
            parsed, count = self._parse_parallel(stale, count) if count > 1 else (self._parse_serial(stale), 1)
        return BuildStats(len(paths), len(paths) - len(stale), parsed, count)

    def refresh(self, path: str) -> None:
        """Re-index one file after an edit (always re-reads it); a deleted file leaves the index."""
        path = self._normalize(path)
        if _outside(path):
            raise SelectorError(f"{path!r} is outside the repository; use a path relative to its root")
        if not (self.root / path).is_file():
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

    def _get(self, path: str) -> _Indexed:
        try:
            if not self._reuse(path):
                self._parse_into_memory(path)
        except FileNotFoundError:
            self._records.pop(path, None)
            raise self._path_error(path) from None
        return self._records[path]

    def _reuse(self, path: str, trust_stat: bool = True) -> bool:
        """Bring a still-valid record (memory, then disk) into memory: stat first, hash only on a change."""
        stat = os.stat(self.root / path)
        record = self._records.get(path)
        if record is None:
            loaded = _load(self.cache_dir, path)
            if loaded is None:
                return False
            root, record = loaded
            if root != self._root_key:
                trust_stat = False  # another checkout's record: same stat does not mean same content
        if trust_stat and _same_stat(record.info, stat):
            self._records[path] = record
            return True
        sha1 = hashlib.sha1((self.root / path).read_bytes()).hexdigest()
        if sha1 != record.info.sha1:
            return False
        info = replace(record.info, mtime_ns=stat.st_mtime_ns, size=stat.st_size)
        self._records[path] = _Indexed(info, record.entities)
        _store(self.cache_dir, _payload(self._root_key, info, record.entities))
        return True

    def _reuse_or_false(self, path: str) -> bool:
        try:
            return self._reuse(path)
        except OSError:  # vanished or unreadable: the parse attempt that follows drops it
            return False

    def _parse_into_memory(self, path: str) -> None:
        stat, source = _read(self._root_key, path)
        parsed = parse_source(path, source, self._trees.pop(path, None))
        self._trees[path] = (source, parsed.tree)
        if len(self._trees) > TREE_CACHE_FILES:
            self._trees.pop(next(iter(self._trees)))
        record = self._records[path] = _indexed(path, stat, source, parsed)
        if self.cache_dir is not None:
            _store(self.cache_dir, _payload(self._root_key, record.info, record.entities))

    def _parse_serial(self, paths: Iterable[str]) -> int:
        parsed = 0
        for path in paths:
            try:
                self._parse_into_memory(path)
            except OSError:  # vanished or unreadable since the listing: not part of the index
                continue
            parsed += 1
        return parsed

    def _parse_parallel(self, paths: list[str], workers: int) -> tuple[int, int]:
        """Parse in worker processes: (files parsed, workers used); a pool that cannot start (a script
        without a `__main__` guard, no process support) falls back to parsing here."""
        job = partial(_index_in_worker, self._root_key, self.cache_dir)
        chunk = max(1, len(paths) // (workers * CHUNKS_PER_WORKER))
        try:
            context = multiprocessing.get_context(START_METHOD)
            with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                payloads = [p for p in pool.map(job, paths, chunksize=chunk) if p is not None]
        except (BrokenProcessPool, OSError, ValueError):  # ValueError: no forkserver on this platform
            return self._parse_serial(paths), 1
        for payload in payloads:
            self._records[payload["info"][0]] = _from_payload(payload)
        return len(payloads), workers

    def _normalize(self, path: str) -> str:
        text = path.strip().replace("\\", "/")
        if os.path.isabs(text):
            candidate = Path(text).resolve()
            text = candidate.relative_to(self.root).as_posix() if candidate.is_relative_to(self.root) else text
        return posixpath.normpath(text).removeprefix("./") if text else text

    def _checked(self, path: str) -> str:
        """A normalized path to an existing Python file inside the root, or a SelectorError naming the fix."""
        normal = self._normalize(path)
        if not normal:
            raise SelectorError("no file given; start the selector with a path relative to the repository root")
        if _outside(normal):
            raise SelectorError(f"{path!r} is outside the repository; use a path relative to its root")
        if not (self.root / normal).is_file():
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
        found = [r for r in readings if (self.root / r).is_file()]
        if len(found) != 1:
            raise self._path_error(path)
        return found[0]

    def _path_error(self, path: str) -> SelectorError:
        files = self.files()
        base = posixpath.basename(path)
        same_name = [f for f in files if posixpath.basename(f) == base]
        close = difflib.get_close_matches(path, files, n=CLOSE_MATCHES, cutoff=CLOSE_MATCH_CUTOFF)
        return SelectorError(_listing(f"no file {path} in the repository", [*same_name, *close]))


def _outside(normal: str) -> bool:
    """Whether a normalized path leaves the root (or is empty)."""
    return not normal or normal == ".." or normal.startswith(("../", "/"))


def _worker_count(requested: int, stale: int) -> int:
    """Processes for `stale` files: as requested, else one per core (capped) when there is enough work."""
    automatic = min(os.cpu_count() or 1, MAX_WORKERS) if stale >= PARALLEL_MIN_FILES else 1
    return max(1, min(requested or automatic, stale))


def _same_stat(info: FileInfo, stat: os.stat_result) -> bool:
    return info.mtime_ns == stat.st_mtime_ns and info.size == stat.st_size


# ------------------------------------------------------------------------------------------- selectors


def _pick(path: str, name: str, entities: Sequence[Entity]) -> Entity:
    """Resolve `name` (a qualname, optionally `@n`) among one file's entities."""
    match = OCCURRENCE.match(name)
    qualname, wanted = (match["name"], int(match["n"])) if match else (name, 0)
    same = [e for e in entities if e.qualname == qualname and e.kind != "module"]
    if not same:
        raise _name_error(path, qualname, entities)
    if wanted:
        if wanted <= len(same):
            return same[wanted - 1]
        title = f"no {path}::{name}: there are {len(same)} definitions of {qualname}; pick one:"
        raise SelectorError(_listing(title, _describe(same), limit=len(same)))
    if len(same) == 1:
        return same[0]
    preferred = _preferred(same)
    if preferred is not None:
        return preferred
    title = f"{path}::{qualname} is ambiguous: {len(same)} definitions; pick one:"
    raise SelectorError(_listing(title, _describe(same), limit=len(same)))


def _preferred(same: Sequence[Entity]) -> Entity | None:
    """The definition a bare name means in a family: a property's getter, an overloaded function's body."""
    if all(PROPERTY_ACCESSOR.search(e.signature) for e in same[1:]):
        return same[0]
    if all(OVERLOAD.search(e.signature) for e in same[:-1]) and not OVERLOAD.search(same[-1].signature):
        return same[-1]
    return None


def _name_error(path: str, qualname: str, entities: Sequence[Entity]) -> SelectorError:
    names = sorted({e.qualname for e in entities if e.qualname})
    last = qualname.rsplit(".", 1)[-1]
    suffix = [n for n in names if n.rsplit(".", 1)[-1] == last]
    close = difflib.get_close_matches(qualname, names, n=CLOSE_MATCHES, cutoff=CLOSE_MATCH_CUTOFF)
    title = f"no {qualname} in {path}"
    return SelectorError(_listing(title, [f"{path}::{n}" for n in dict.fromkeys([*suffix, *close])]))


def _describe(entities: Sequence[Entity]) -> list[str]:
    return [f"{e.selector}  {_header_line(e.signature)}" for e in entities]


def _header_line(signature: str) -> str:
    lines = [line for line in signature.split("\n") if line.strip()]
    decorators = [line.strip() for line in lines if line.lstrip().startswith("@")]
    header = next((line.strip() for line in lines if not line.lstrip().startswith("@")), "")
    return " ".join([*decorators, header])


def _listing(title: str, options: Sequence[str], limit: int = CLOSE_MATCHES) -> str:
    """`title`, then one option per line (at most `limit`), or a note that there are none."""
    unique = list(dict.fromkeys(options))[:limit]
    if not unique:
        return f"{title.removesuffix(':')}; no close matches"
    heading = title if title.endswith(":") else f"{title}; did you mean:"
    return "\n".join([heading, *(f"  {option}" for option in unique)])
