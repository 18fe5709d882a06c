"""Bag-of-words documents for localization and a fielded BM25 over them, with zero model tokens.

Per file: its content's terms, and per entity its head (name, signature, docstring) and body terms, stored
inverted and cached on disk by the file's content hash, so a checkout of another commit reuses them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from snaffle.agentless.issue_text import identifier_pieces, tokenize
from snaffle.index.cache import IndexedFile, damaged_line
from snaffle.index.parse import Entity
from snaffle.index.repo import Companion

DOCUMENTS_FORMAT = "snaffle-documents/3"
DOCUMENTS_DIR = "documents-3"
"""Sub-directory of the structure cache holding the documents (bump with the format)."""
BODY_TOKENS_CAP = 400
"""Body terms kept per function: the start of a long body says what it is about, the rest mostly repeats."""
BODY_KINDS = frozenset({"function", "method"})
LAYOUT_DIGITS = 12
DIGITS = "0123456789"
IDENTIFIER_BYTES = bytes(
    c if chr(c).isascii() and (chr(c).isalnum() or c == ord("_")) else ord(" ") for c in range(256)
)
"""A byte table keeping `[A-Za-z0-9_]` and making every other byte a space (the characters of `IDENTIFIER_RE`)."""

Counts = dict[str, str]
"""term -> its count, as decimal text."""
Postings = dict[str, str]
"""term -> "entity count entity count ..." over one file's entities, as decimal text (`postings` reads one)."""
DECIMALS = re.compile(r"[0-9 \n]*")
"""What stored postings and lengths may hold: parsed where read, so checked for digits when loaded."""
COUNTS = re.compile(r"(?:[0-9]+(?: [0-9]+)*)?")
"""What a stored terms table's values must be: one number per term, each between single spaces."""
Vector = npt.NDArray[np.float64]


@dataclass(frozen=True)
class FileDocuments:
    """One file's documents: its terms, and its entities' head and body terms (inverted), with lengths. Counts
    and postings stay the decimal text the cache stores and are parsed where read: a new checkout loads every
    file's documents, a query reads a few terms' (JSON's integers took 4x the decoding time of the same text)."""

    terms: Counts
    heads: Postings
    bodies: Postings
    head_lengths: tuple[int, ...]
    body_lengths: tuple[int, ...]
    length: int

    def count(self, term: str) -> int:
        """How often `term` occurs in the whole file."""
        return int(self.terms.get(term, 0))

    def head(self, term: str) -> list[int]:
        """`term`'s postings over the entities' heads: [entity, count, entity, count, ...]."""
        return postings(self.heads.get(term, ""))

    def body(self, term: str) -> list[int]:
        """`term`'s postings over the entities' bodies: [entity, count, entity, count, ...]."""
        return postings(self.bodies.get(term, ""))


def postings(text: str) -> list[int]:
    """Postings stored as decimal text, as numbers."""
    return list(map(int, text.split()))


def build_documents(source: bytes, entities: Sequence[Entity]) -> FileDocuments:
    """Tokenize one file: the whole text, and per entity its head and (functions only) the start of its body."""
    text = source.decode("utf-8", "replace")
    runs = identifier_runs(text)
    starts = _line_starts(text)
    heads = [Counter(terms_of(identifier_runs(f"{e.qualname} {e.signature} {e.doc}").split())) for e in entities]
    bodies = [Counter(_body_terms(runs, starts, e) if e.kind in BODY_KINDS else ()) for e in entities]
    counts = _term_counts(runs.split())
    return FileDocuments(
        terms={term: str(count) for term, count in counts.items()},
        heads=_invert(heads),
        bodies=_invert(bodies),
        head_lengths=tuple(sum(c.values()) for c in heads),
        body_lengths=tuple(sum(c.values()) for c in bodies),
        length=sum(counts.values()),
    )


def identifier_runs(text: str) -> str:
    """`text` with every character that no identifier holds made a space, offsets kept (one character each): its
    `split()` are the runs of `[A-Za-z0-9_]`, each an identifier of `tokenize` once its leading digits go. Three
    passes in C instead of a regular expression (build_documents measured 37% less CPU on two sympy checkouts)."""
    return text.encode("ascii", "replace").translate(IDENTIFIER_BYTES).decode("ascii")


def terms_of(runs: Iterable[str]) -> list[str]:
    """`tokenize` of the text the runs came from: the pieces of each run's identifier, in order."""
    return list(itertools.chain.from_iterable(map(_run_pieces, runs)))


@lru_cache(maxsize=200_000)
def _run_pieces(run: str) -> tuple[str, ...]:
    """The word pieces of the identifier in one run (`2fast` holds `fast`; digits alone hold none)."""
    identifier = run.lstrip(DIGITS)
    return identifier_pieces(identifier) if identifier else ()


def _line_starts(text: str) -> list[int]:
    """The offset at which each of `text.splitlines()` starts, then the text's length."""
    return list(itertools.accumulate(map(len, text.splitlines(keepends=True)), initial=0))


def _body_terms(runs: str, starts: Sequence[int], entity: Entity) -> list[str]:
    """The first `BODY_TOKENS_CAP` terms of the entity's body lines (the text between two line starts tokenizes
    as those lines joined: a line break is no identifier's character); a long body is not read past the cap."""
    last = len(starts) - 1
    first, end = min(entity.body_start_line, last), min(entity.end_line + 1, last)
    body = runs[starts[first] : starts[end]].split() if first < end else []
    return list(itertools.islice(itertools.chain.from_iterable(map(_run_pieces, body)), BODY_TOKENS_CAP))


def _term_counts(runs: Sequence[str]) -> dict[str, int]:
    """`Counter(tokenize(text))` in the same order, counted per distinct run rather than per occurrence."""
    counts: dict[str, int] = {}
    for run, repeats in Counter(runs).items():
        for piece in _run_pieces(run):
            counts[piece] = counts.get(piece, 0) + repeats
    return counts


def _invert(counters: Sequence[Counter[str]]) -> Postings:
    inverted: dict[str, list[int]] = {}
    find = inverted.get
    for number, counter in enumerate(counters):
        for term, count in counter.items():
            found = find(term)
            if found is None:
                inverted[term] = [number, count]
            else:
                found += (number, count)
    return {term: " ".join(map(str, numbers)) for term, numbers in inverted.items()}


class DocumentStore:
    """Documents by content hash: memory, then the disk cache (when there is one), else tokenized anew."""

    def __init__(self, cache_dir: Path | None) -> None:
        self.directory = cache_dir / DOCUMENTS_DIR if cache_dir is not None else None
        self._directory_name = str(self.directory)
        self._memory: dict[str, FileDocuments] = {}
        self._damaged: list[str] = []

    def get(self, sha1: str, entities: Sequence[Entity], source: Callable[[], bytes]) -> FileDocuments:
        """The documents of the file with content `sha1`, parsed into `entities`; `source` reads it if needed."""
        layout = entity_layout(entities)
        found = self._memory.get(f"{sha1}-{layout}") or self._load(sha1, layout)
        if found is None:
            found = build_documents(source(), entities)
            self._store(sha1, layout, found)
        self._memory[f"{sha1}-{layout}"] = found
        return found

    def _name(self, sha1: str) -> str:
        """The entry's file name, joined by os.path (asked once per file of a checkout)."""
        return os.path.join(self._directory_name, sha1[:2], f"{sha1[2:]}.json")

    def _load(self, sha1: str, layout: str) -> FileDocuments | None:
        if self.directory is None:
            return None
        name = self._name(sha1)
        try:
            with open(name, "rb") as handle:
                payload = json.loads(handle.read())
            if payload.get("format") != DOCUMENTS_FORMAT or payload["sha1"] != sha1 or payload["layout"] != layout:
                return None  # another format, another file's text (copied over this one), another parse
            return _from_payload(payload)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
            self._damaged.append(name)  # rebuilt by the caller; `report_damaged` says so
            return None

    def report_damaged(self) -> int:
        """Say in one stderr line how many entries could not be read back (and were rebuilt) since last asked."""
        damaged, self._damaged = self._damaged, []
        if damaged:
            print(damaged_line("documents", damaged), file=sys.stderr, flush=True)
        return len(damaged)

    def _store(self, sha1: str, layout: str, documents: FileDocuments) -> None:
        if self.directory is not None:
            _store_entry(self.directory, sha1, layout, documents)

    def companion(self) -> Companion | None:
        """The documents' share of a parallel index build: each new file's documents built in the worker that
        parses it and written to this store's disk cache (None without one: a worker's memory is not kept)."""
        return partial(_build_and_store, self.directory) if self.directory is not None else None


def _build_and_store(directory: Path, source: bytes, record: IndexedFile) -> None:
    """Build one file's documents from its text and record and write them under its content hash."""
    _store_entry(directory, record.info.sha1, entity_layout(record.entities), build_documents(source, record.entities))


def _store_entry(directory: Path, sha1: str, layout: str, documents: FileDocuments) -> None:
    """Write atomically; a cache that cannot be written only makes the next run slower."""
    target = directory / sha1[:2] / f"{sha1[2:]}.json"
    temporary = target.with_name(f"{target.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(_payload(sha1, layout, documents), separators=(",", ":")), "utf-8")
        os.replace(temporary, target)
    except OSError:
        temporary.unlink(missing_ok=True)


def entity_layout(entities: Sequence[Entity]) -> str:
    """A digest of where the entities lie: documents built for another parse of the same text are not reused. (A
    qualname holds no space: each span is one line of five words; formatted, not JSON: 2.6x faster.)"""
    spans = "\n".join(f"{e.qualname} {e.kind} {e.start_line} {e.body_start_line} {e.end_line}" for e in entities)
    return hashlib.sha1(spans.encode()).hexdigest()[:LAYOUT_DIGITS]


def _payload(sha1: str, layout: str, documents: FileDocuments) -> dict[str, Any]:
    """An entry: each table as two strings, its terms and their values (JSON strings decode faster than lists)."""
    return {
        "format": DOCUMENTS_FORMAT,
        "sha1": sha1,
        "layout": layout,
        "terms": _columns(documents.terms, " "),
        "heads": _columns(documents.heads, "\n"),
        "bodies": _columns(documents.bodies, "\n"),
        "head_lengths": " ".join(map(str, documents.head_lengths)),
        "body_lengths": " ".join(map(str, documents.body_lengths)),
        "length": documents.length,
    }


def _columns(table: dict[str, str], separator: str) -> list[str]:
    return [" ".join(table), separator.join(table.values())]


def _from_payload(payload: dict[str, Any]) -> FileDocuments:
    """The documents of an entry; a ValueError (or TypeError, KeyError, IndexError) for one that is damaged."""
    length = payload["length"]
    if not isinstance(length, int):
        raise ValueError("length")
    return FileDocuments(
        _table(payload["terms"], " ", COUNTS),
        _table(payload["heads"], "\n", DECIMALS),
        _table(payload["bodies"], "\n", DECIMALS),
        _numbers(payload["head_lengths"]),
        _numbers(payload["body_lengths"]),
        length,
    )


def _table(columns: list[str], separator: str, shape: re.Pattern[str]) -> dict[str, str]:
    """A table from its terms and values; values not of their `shape`, or one too many or too few, are damage."""
    terms, values = columns[0].split(), columns[1]
    if not shape.fullmatch(values):
        raise ValueError("not decimal")
    split = values.split(separator) if terms else []
    if len(split) != len(terms):
        raise ValueError("terms and values differ in number")
    return dict(zip(terms, split, strict=True))


def _numbers(text: str) -> tuple[int, ...]:
    if not DECIMALS.fullmatch(text):
        raise ValueError("not decimal")
    return tuple(postings(text))


# ------------------------------------------------------------------------------------------------ BM25


def idf(document_frequency: int, documents: int) -> float:
    """Lucene's BM25 idf: always positive, large for rare terms."""
    return math.log(1 + (documents - document_frequency + 0.5) / (document_frequency + 0.5))


def query_weights(words: Iterable[str]) -> dict[str, float]:
    """Each distinct query term once, a repeated one a little more (1 + ln count)."""
    return {term: 1.0 + math.log(count) for term, count in Counter(words).items()}


@dataclass(frozen=True)
class Bm25Params:
    """BM25F knobs: term-frequency saturation k1, length normalization b, and each field's weight (values come
    from data/localize.toml's [entity_bm25] and [file_bm25]; no defaults here that could disagree)."""

    k1: float
    b: float
    path: float
    head: float
    body: float


class Bm25:
    """BM25F over documents given as fielded term frequencies; `frequencies` is the one thing subclasses say."""

    def __init__(self, lengths: Sequence[float], params: Bm25Params) -> None:
        self.params = params
        self.lengths = np.asarray(lengths, dtype=np.float64)
        average = float(self.lengths.mean()) if len(lengths) else 1.0
        self.norm = params.k1 * (1 - params.b + params.b * self.lengths / max(average, 1e-9))

    def scores(self, words: Iterable[str]) -> Vector:
        """Each document's BM25F score for the query words."""
        total = np.zeros(len(self.lengths))
        weights = query_weights(words)
        holders = self.holders(weights)  # one pass over the documents for every term, not one pass per term
        for term, weight in weights.items():
            tf = self.frequencies(term, holders.get(term, []))
            frequency = int(np.count_nonzero(tf))
            if frequency:
                total += weight * idf(frequency, len(tf)) * tf / (tf + self.norm)
        return total

    def frequencies(self, term: str, among: Sequence[int] | None = None) -> Vector:
        """The fielded frequency of `term` in every document; `among`: the numbers of the only files that can
        hold it (`holders`), in order."""
        raise NotImplementedError

    def holders(self, terms: Iterable[str]) -> dict[str, list[int]]:
        """For each of `terms`, the numbers of the files whose fields hold it, in order."""
        raise NotImplementedError


def _holders(fields: Iterable[Sequence[dict[str, Any]]], terms: Iterable[str]) -> dict[str, list[int]]:
    """For each term, the numbers of the files (in order) in any of whose `fields` (one dict per file each) it is a
    key: set intersections, so a file costs as many lookups as the query has terms, in C."""
    wanted = set(terms)
    found: dict[str, list[int]] = {}
    for number, dicts in enumerate(zip(*fields, strict=True)):
        held = set().union(*(d.keys() & wanted for d in dicts))
        for term in held:
            found.setdefault(term, []).append(number)
    return found


class FileBm25(Bm25):
    """BM25F over whole files: path terms, the heads of the file's entities (names, signatures, docstrings: what
    the file defines) and its content terms."""

    def __init__(self, paths: Sequence[str], documents: Sequence[FileDocuments], params: Bm25Params) -> None:
        self.documents = documents
        self.path_terms = [Counter(tokenize(p)) for p in paths]
        lengths = [
            params.body * d.length + params.head * sum(d.head_lengths) + params.path * sum(t.values())
            for d, t in zip(documents, self.path_terms, strict=True)
        ]
        super().__init__(lengths, params)

    def frequencies(self, term: str, among: Sequence[int] | None = None) -> Vector:
        path, head, body = self.params.path, self.params.head, self.params.body
        tf = np.zeros(len(self.documents))
        for number in range(len(self.documents)) if among is None else among:
            d, p = self.documents[number], self.path_terms[number]
            tf[number] = body * d.count(term) + head * sum(d.head(term)[1::2]) + path * p.get(term, 0)
        return tf

    def holders(self, terms: Iterable[str]) -> dict[str, list[int]]:
        documents = self.documents
        return _holders(([d.terms for d in documents], [d.heads for d in documents], self.path_terms), terms)


class EntityBm25(Bm25):
    """BM25F over entity documents: the file's path terms, the entity's head terms and body terms."""

    def __init__(self, paths: Sequence[str], documents: Sequence[FileDocuments], params: Bm25Params) -> None:
        self.documents = documents
        self.path_terms = [Counter(tokenize(p)) for p in paths]
        self.offsets = [0, *itertools.accumulate(len(d.head_lengths) for d in documents)]
        lengths: list[float] = []
        for document, path_terms in zip(documents, self.path_terms, strict=True):
            in_path = params.path * sum(path_terms.values())
            pairs = zip(document.head_lengths, document.body_lengths, strict=True)
            lengths.extend(in_path + params.head * h + params.body * b for h, b in pairs)
        super().__init__(lengths, params)

    def frequencies(self, term: str, among: Sequence[int] | None = None) -> Vector:
        """The fielded frequency of `term` in every entity document."""
        tf = np.zeros(len(self.lengths))
        ids: list[int] = []
        counts: list[float] = []
        fields = ((self.params.head, FileDocuments.head), (self.params.body, FileDocuments.body))
        for number in range(len(self.documents)) if among is None else among:
            document, path_terms, start = self.documents[number], self.path_terms[number], self.offsets[number]
            if in_path := path_terms.get(term, 0):
                tf[start : self.offsets[number + 1]] += self.params.path * in_path
            for weight, read in fields:
                numbers = read(document, term)
                ids.extend(start + n for n in numbers[0::2])
                counts.extend(weight * c for c in numbers[1::2])
        if ids:
            np.add.at(tf, np.asarray(ids), np.asarray(counts))
        return tf

    def holders(self, terms: Iterable[str]) -> dict[str, list[int]]:
        documents = self.documents
        return _holders(([d.heads for d in documents], [d.bodies for d in documents], self.path_terms), terms)
