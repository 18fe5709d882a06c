"""The on-disk cache of the index: one JSON record per file (its identity and entities), written atomically and
keyed by the file's path and the grammar's version."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from snaffle.index.parse import Entity

CACHE_FORMAT = "snaffle-structure/1"


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
    try:
        return metadata.version("tree-sitter-python")
    except metadata.PackageNotFoundError:
        return "unknown"


def _cache_file(cache_dir: Path, path: str) -> Path:
    digest = hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()
    return cache_dir / f"tsp-{_grammar_version()}" / digest[:2] / f"{digest[2:]}.json"


def record_payload(root: str, info: FileInfo, entities: Iterable[Entity]) -> dict[str, Any]:
    """One file's cache record as plain JSON data, with the root of the checkout it was read from."""
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


def record_from_payload(payload: dict[str, Any]) -> IndexedFile:
    """The in-memory record of a cache payload."""
    info = FileInfo(*payload["info"])
    return IndexedFile(info, tuple(Entity(info.path, *row) for row in payload["entities"]))


def store_record(cache_dir: Path | None, payload: dict[str, Any]) -> None:
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


def load_record(cache_dir: Path | None, path: str) -> tuple[str, IndexedFile] | None:
    """The cached (root, record) of `path`, or None when absent, unreadable or of another format."""
    if cache_dir is None:
        return None
    try:
        payload = json.loads(_cache_file(cache_dir, path).read_bytes())
        if payload["format"] != CACHE_FORMAT or payload["info"][0] != path:
            return None
        return str(payload["root"]), record_from_payload(payload)
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        return None
