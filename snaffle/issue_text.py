"""What an issue text says about code: code spans, identifiers, paths, dotted names, traceback frames."""

from __future__ import annotations

import re
from dataclasses import dataclass

FENCE_RE = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
INLINE_RE = re.compile(r"`([^`\n]+)`")
INDENTED_RE = re.compile(r"(?:^(?: {4}|\t).*\n?)+", re.MULTILINE)
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
PATH_RE = re.compile(r"(?:[\w.-]+/)*[\w.-]+\.py\b")
FRAME_RES = (
    re.compile(r'File "(?P<path>[^"]+\.py)", line (?P<line>\d+), in (?P<func>[\w<>.]+)'),
    re.compile(r"^(?P<path>[\w./-]+\.py):(?P<line>\d+):(?: in (?P<func>[\w<>.]+))?", re.MULTILINE),
)
CAMEL_RE = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b")
SNAKE_RE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
WORD_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+")
STOPWORDS = frozenset(
    "a an and are as at be but by can could did do does for from had has have how i if in into is it its "
    "me my no not of on or our should so than that the their then there these this to too was we were what "
    "when where which while who why will with would you your def class self return import none true false "
    "py line file error get set".split()
)


@dataclass(frozen=True)
class Frame:
    """One traceback frame: a file path as printed, a 1-based line, the function name."""

    path: str
    line: int
    function: str


@dataclass(frozen=True)
class IssueFacts:
    """The code-shaped facts of an issue, in order of appearance."""

    code_identifiers: tuple[str, ...]
    prose_identifiers: tuple[str, ...]
    paths: tuple[str, ...]
    frames: tuple[Frame, ...]
    words: tuple[str, ...]


def parse_issue(text: str) -> IssueFacts:
    """Extract identifiers (from code spans, and CamelCase/snake_case prose), paths, frames and query words."""
    spans = code_spans(text)
    code_ids = _unique(i for span in spans for i in IDENT_RE.findall(span) if len(i) > 2)
    prose = INLINE_RE.sub(" ", FENCE_RE.sub(" ", text))
    prose_ids = _unique([*CAMEL_RE.findall(prose), *SNAKE_RE.findall(prose)])
    return IssueFacts(
        code_identifiers=tuple(i for i in code_ids if i.lower() not in STOPWORDS),
        prose_identifiers=tuple(i for i in prose_ids if i not in code_ids),
        paths=_unique(PATH_RE.findall(text)),
        frames=frames(text),
        words=tuple(tokenize(text)),
    )


def code_spans(text: str) -> list[str]:
    """Fenced blocks, inline backticks and indented blocks."""
    return [*FENCE_RE.findall(text), *INLINE_RE.findall(text), *INDENTED_RE.findall(text)]


def frames(text: str) -> tuple[Frame, ...]:
    """Traceback frames in the order printed (outermost first), Python and pytest styles."""
    found: list[tuple[int, Frame]] = []
    for pattern in FRAME_RES:
        for match in pattern.finditer(text):
            found.append((match.start(), Frame(match["path"], int(match["line"]), match["func"] or "")))
    return tuple(frame for _, frame in sorted(found, key=lambda pair: pair[0]))


def tokenize(text: str) -> list[str]:
    """Lower-case word pieces: identifiers split on `_`, `.` and camelCase; stopwords and 1-letter pieces dropped."""
    pieces: list[str] = []
    for identifier in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text):
        parts = [p.lower() for p in WORD_RE.findall(identifier)]
        whole = identifier.lower().strip("_")
        pieces.extend(p for p in parts if len(p) > 1 and p not in STOPWORDS)
        if len(parts) > 1 and whole not in STOPWORDS:
            pieces.append(whole)
    return pieces


def _unique(items: object) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:  # type: ignore[attr-defined]
        seen.setdefault(str(item), None)
    return tuple(seen)
