"""The on-disk cache of the index, keyed by content: one JSON record per distinct file text (its entities, as one
set of `EntityOptions` parses them) and one manifest per checkout (each file's stat and content hash), written
atomically and kept apart per grammar version. A second checkout of a repository at another commit reuses every
record whose text it shares, whatever the path of the checkout."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from snaffle.index.parse import Entity, EntityOptions

CACHE_FORMAT = "snaffle-structure/2"
MANIFEST_FORMAT = "snaffle-manifest/1"
SHA1 = re.compile(r"[0-9a-f]{40}")
DIST_INFO = re.compile(r"tree_sitter_python-([0-9][0-9A-Za-z.+!-]*)\.dist-info")
Stats = dict[str, tuple[int, int, str]]
"""path -> (mtime_ns, size, sha1) of the files one checkout held when it was last indexed."""


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
class IndexedFile:
    """A file's identity and entities, as held in memory and as one cache record holds them."""

    info: FileInfo
    entities: tuple[Entity, ...]


@cache
def _grammar_version() -> str:
    """The installed tree-sitter-python's version, read from the name of its dist-info directory beside it (importing
    importlib.metadata measured 58 ms CPU of a fresh `snaffle localize`), else asked of importlib.metadata."""
    import tree_sitter_python

    beside = Path(tree_sitter_python.__file__).resolve().parent.parent
    found = [m[1] for d in beside.glob("tree_sitter_python-*.dist-info") if (m := DIST_INFO.fullmatch(d.name))]
    if len(found) == 1:
        return found[0]
    from importlib import metadata

    try:
        return metadata.version("tree-sitter-python")
    except metadata.PackageNotFoundError:
        return "unknown"


def _grammar_dir(cache_dir: Path) -> Path:
    return cache_dir / f"tsp-{_grammar_version()}"


def _content_file(cache_dir: Path, sha1: str, options: EntityOptions) -> Path:
    return Path(content_name(cache_dir, sha1, options))


def content_name(cache_dir: Path, sha1: str, options: EntityOptions) -> str:
    """The record's file name as a string: joined by os.path, as a build asks it once per file (pathlib's joins
    measured ~0.3 s CPU of a warm sympy index)."""
    return os.path.join(_options_dir(cache_dir, options), sha1[:2], f"{sha1[2:]}.json")


@cache
def _options_dir(cache_dir: Path, options: EntityOptions) -> str:
    return str(_grammar_dir(cache_dir) / options.key)


def _manifest_file(cache_dir: Path, root: str) -> Path:
    digest = hashlib.sha1(root.encode("utf-8", "surrogateescape")).hexdigest()
    return _grammar_dir(cache_dir) / "checkouts" / f"{digest}.json"


def record_payload(info: FileInfo, entities: Iterable[Entity]) -> dict[str, Any]:
    """One file's record as plain JSON data (what a worker process sends back)."""
    return {"format": CACHE_FORMAT, "info": _info_row(info), "entities": list(map(_row, entities))}


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


def record_from_payload(payload: Mapping[str, Any]) -> IndexedFile:
    """The in-memory record of a payload."""
    info = FileInfo(*payload["info"])
    return IndexedFile(info, tuple(Entity(info.path, *row) for row in payload["entities"]))


def store_record(cache_dir: Path | None, options: EntityOptions, record: IndexedFile) -> None:
    """Write one file text's record under its content hash; a cache that cannot be written is only a slower index."""
    if cache_dir is None:
        return
    info = record.info
    payload = {
        "format": CACHE_FORMAT,
        "sha1": info.sha1,
        "file": [info.lines, info.parse_errors, info.decode_errors],
        "entities": list(map(_row, record.entities)),
    }
    write_json(_content_file(cache_dir, info.sha1, options), payload)


class DamagedEntry(ValueError):
    """Raised by `load_record` for an entry that exists but cannot be read back (truncated, not JSON, the wrong
    shape, unreadable): the caller rebuilds it and says so in one line (`damaged_line`). An entry of another
    format or of another text is not damaged, only not this one's."""


def load_record(
    cache_dir: Path | None, options: EntityOptions, path: str, stat: os.stat_result, sha1: str
) -> IndexedFile | None:
    """The record of the file text `sha1` found at `path` (with `stat`), or None when absent or of another
    format or text; a `DamagedEntry` when it cannot be read back."""
    if cache_dir is None:
        return None
    name = content_name(cache_dir, sha1, options)
    try:
        with open(name, "rb") as handle:
            payload = json.loads(handle.read())
        if payload.get("format") != CACHE_FORMAT or payload["sha1"] != sha1:
            return None
        lines, errors, undecodable = payload["file"]
        info = FileInfo(path, stat.st_mtime_ns, stat.st_size, sha1, lines, errors, undecodable)
        return IndexedFile(info, tuple(Entity(path, *row) for row in payload["entities"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as error:
        raise DamagedEntry(name) from error


def damaged_line(kind: str, names: list[str]) -> str:
    """The one line that says how many entries of one cache could not be read back and were rebuilt."""
    more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
    were = "entry was" if len(names) == 1 else "entries were"
    return f"snaffle: {len(names)} {kind} cache {were} truncated or corrupt and rebuilt: {names[0]}{more}"


def load_manifest(cache_dir: Path | None, root: str) -> Stats:
    """What the checkout at `root` held when it was last indexed (empty when unknown or unreadable)."""
    if cache_dir is None:
        return {}
    try:
        payload = json.loads(_manifest_file(cache_dir, root).read_bytes())
        if payload["format"] != MANIFEST_FORMAT or payload["root"] != root:
            return {}
        files = payload["files"].items()
        return {str(path): (int(m), int(s), h) for path, (m, s, h) in files if SHA1.fullmatch(str(h))}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def store_manifest(cache_dir: Path | None, root: str, stats: Stats) -> None:
    """Record each file's stat and content hash for the next index of the same checkout."""
    if cache_dir is not None:
        payload = {"format": MANIFEST_FORMAT, "root": root, "files": stats}
        write_json(_manifest_file(cache_dir, root), payload)


def write_json(target: Path, payload: Mapping[str, Any]) -> None:
    """Write atomically (a reader sees the old file or the new one); a failure leaves no temporary behind."""
    temporary = target.with_name(f"{target.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(payload, ensure_ascii=False, separators=(",", ":")), "utf-8")
        os.replace(temporary, target)
    except OSError:
        temporary.unlink(missing_ok=True)
