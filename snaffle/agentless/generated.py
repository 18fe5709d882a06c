"""Files a tool wrote (their head says so: "DO NOT EDIT", "automatically generated"): a fix goes to the generator,
so localization leaves them out. Only the head is read — the leading comments and the module docstring — so a
generator script that writes the marker into its output is not taken for its output."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snaffle import data


@dataclass(frozen=True)
class GeneratedRule:
    """[generated] of data/localize.toml: how much of a file is read, and the patterns its head is searched for."""

    head_bytes: int
    markers: tuple[str, ...]
    """Lower-case regular expressions; none: no file is called generated."""

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str) -> GeneratedRule:
        """The rule from its data table; a missing key or a pattern that does not compile is a `DataError`."""
        rule = data.record(cls, table, where)
        for marker in rule.markers:
            try:
                re.compile(marker)
            except re.error as exc:
                raise data.DataError(f"{where}: marker {marker!r} is not a regular expression ({exc})") from exc
        return cls(int(rule.head_bytes), tuple(rule.markers))

    def patterns(self) -> list[re.Pattern[str]]:
        return [re.compile(marker) for marker in self.markers]


STRING_OPENERS = ('"""', "'''")
PREFIX_LETTERS = "rRuUbB"
MAX_PREFIX = 2


def file_head(text: str) -> str:
    """The lines before the first line of code: blank lines, comments and the module docstring (a triple-quoted
    string at the start of a line, up to its closing quotes), lower-cased."""
    head: list[str] = []
    closing = ""
    for line in text.splitlines():
        stripped = line.strip()
        if closing:
            head.append(stripped)
            closing = "" if closing in stripped else closing
        elif not stripped or stripped.startswith("#"):
            head.append(stripped)
        elif opener := _docstring_opener(stripped):
            head.append(stripped)
            closing = "" if opener in stripped[stripped.index(opener) + 3 :] else opener
        else:
            break
    return "\n".join(head).lower()


def _docstring_opener(stripped: str) -> str:
    """The triple quote a line starts with (after string prefix letters such as r or u), or ""."""
    body = stripped.lstrip(PREFIX_LETTERS)
    if len(stripped) - len(body) > MAX_PREFIX:
        return ""
    return next((quote for quote in STRING_OPENERS if body.startswith(quote)), "")


def is_generated(source: bytes, markers: Sequence[re.Pattern[str]]) -> bool:
    """Whether the head of `source` (its first bytes are enough) matches one of `markers` (lower-case patterns)."""
    head = file_head(source.decode("utf-8", "replace"))
    return any(marker.search(head) for marker in markers)


def generated_files(root: Path, paths: Iterable[str], rule: GeneratedRule) -> set[str]:
    """The paths (relative to `root`) whose first `rule.head_bytes` say a tool generated them; none without
    markers. A file that cannot be read is not called generated (the index reports it where it matters)."""
    markers = rule.patterns()
    if not markers:
        return set()
    found: set[str] = set()
    for path in paths:
        try:
            with open(os.path.join(root, path), "rb") as handle:
                head = handle.read(rule.head_bytes)
        except OSError:
            continue
        if is_generated(head, markers):
            found.add(path)
    return found
