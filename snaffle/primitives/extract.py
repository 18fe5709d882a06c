"""Edits out of free text, tolerantly and deterministically: SEARCH/REPLACE blocks, `-`/`+` line changes and
whole-definition rewrites."""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import cache
from typing import Any

from snaffle import data

SEARCH_REPLACE_RE = re.compile(
    r"(?:^(?P<selector>\S+\.py(?:::\S+)?)[ \t]*\n)?"
    r"^[ \t]*<{5,9}[ \t]*SEARCH[ \t]*\n(?P<search>.*?)^[ \t]*={5,9}[ \t]*\n(?P<replace>.*?)^[ \t]*>{5,9}[ \t]*REPLACE",
    re.MULTILINE | re.DOTALL,
)
FENCE_RE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)```", re.DOTALL)
DEF_RE = r"^\s*(?:async\s+def|def|class)\s+{name}\b"
ASSIGN_RE = r"^\s*{name}\s*(?::[^=\n]+)?=(?!=)"
"""`NAME = ...` or `NAME: T = ...`: the statement that (re)defines an assignment entity."""
EDIT_FORMATS = ("rewrite", "search_replace", "line_diff")
AUTO_FORMATS = ("rewrite", "search_replace")
"""What `auto` picks from, by the entity's size."""
EDIT_FORMAT_CHOICES = (*EDIT_FORMATS, "auto")
"""What `--edit-format` and snaffle/data/edit_formats.toml may say: `auto` picks by the entity's size."""
DIFF_HEADERS = ("---", "+++", "@@", "```")
"""Lines of a diff that are neither a removed nor an added line."""
REPAIR_FILE = "edit_formats.toml"


@dataclass(frozen=True)
class SearchReplace:
    """One SEARCH/REPLACE block; `selector` when the answer named the entity."""

    selector: str | None
    search: str
    replace: str


def search_replace_blocks(answer: str) -> list[SearchReplace]:
    """Every SEARCH/REPLACE block, with marker lengths 5 to 9 and a missing final newline tolerated."""
    text = answer if answer.endswith("\n") else answer + "\n"
    return [SearchReplace(m["selector"], m["search"], m["replace"]) for m in SEARCH_REPLACE_RE.finditer(text)]


def line_diff_blocks(answer: str) -> list[SearchReplace]:
    """The `line_diff` answer form: each run of `-` lines and the `+` lines after it, as a block with no selector
    (the lines name their place). Read from the fenced blocks that hold such lines, else from the whole answer (prose
    around a bare diff); a unified diff's headers are skipped and its context lines end a run; a line quoted in
    backticks (`- `x = 1``) is unquoted. A run of `+` lines with no `-` line before it names no place: left out."""
    fenced = [b for b in FENCE_RE.findall(answer) if _diff_rows(b)]
    text = "\n".join(fenced) if fenced else answer
    blocks: list[SearchReplace] = []
    removed: list[str] = []
    added: list[str] = []
    for row in [*_diff_rows(text, every=True), None]:
        sign, line = row if row is not None else (" ", "")
        if sign == "+" and removed:
            added.append(line)
            continue
        if sign == "-" and not added:
            removed.append(line)
            continue
        if removed:
            blocks.append(SearchReplace(None, "\n".join(removed) + "\n", "\n".join(added) + ("\n" if added else "")))
        removed, added = ([line], []) if sign == "-" else ([], [])
    return blocks


def _diff_rows(text: str, every: bool = False) -> list[tuple[str, str]]:
    """(sign, line) for the text's `-` and `+` lines (with `every`, its other lines too, as sign " ")."""
    rows = []
    for raw in text.splitlines():
        if raw.startswith(DIFF_HEADERS):
            continue
        sign = raw[:1]
        if sign and sign in "-+":
            rows.append((sign, _unquoted(raw[1:])))
        elif every:
            rows.append((" ", raw))
    return rows


def _unquoted(line: str) -> str:
    """A line's code without the backticks a model quoted it in (`- `x = 1``); otherwise the line as it is."""
    stripped = line.strip()
    if len(stripped) > 2 and stripped.startswith("`") and stripped.endswith("`") and "`" not in stripped[1:-1]:
        return stripped[1:-1]
    return line


def code_blocks(answer: str) -> list[str]:
    """The answer's fenced code blocks, or the whole answer when it has none."""
    return FENCE_RE.findall(answer) or [answer]


def defining_blocks(answer: str, names: Sequence[str]) -> list[tuple[str, str]]:
    """For each of `names` the answer defines, in the order of `names`: (name, the first fenced block — or the bare
    answer — that defines it, dedented)."""
    blocks = code_blocks(answer)
    found = []
    for name in dict.fromkeys(names):  # two candidates of one name: the caller tells them apart (`closest`)
        block = _defining(blocks, name)
        if block is not None:
            found.append((name, textwrap.dedent(block)))
    return found


def closest(code: str, sources: Sequence[str]) -> int:
    """The index of the source `code` reads most like (the first on a tie): which of two candidates of one name (a
    module's `parse` and `Version.parse`) an answer's definition rewrites."""
    ratios = [SequenceMatcher(None, textwrap.dedent(source), code, autojunk=False).ratio() for source in sources]
    return ratios.index(max(ratios))


def pick_block(answer: str, name: str) -> str:
    """The block that defines `name` (or the first block, or the whole answer), dedented."""
    blocks = code_blocks(answer)
    return textwrap.dedent(_defining(blocks, name) or blocks[0])


def _defining(blocks: Sequence[str], name: str) -> str | None:
    """The first block with a def or class of `name`, else the first that assigns `name`."""
    for form in (DEF_RE, ASSIGN_RE):
        pattern = re.compile(form.format(name=re.escape(name)), re.MULTILINE)
        found = next((b for b in blocks if pattern.search(b)), None)
        if found is not None:
            return found
    return None


def isolate_definition(code: str, name: str) -> str | None:
    """The lines of `def name`/`class name` alone (its decorators, its header, everything indented deeper), for an
    answer block that does not parse as a whole (e.g. a later definition cut off); None when that does not parse
    either."""
    lines = code.splitlines(keepends=True)
    pattern = re.compile(DEF_RE.format(name=re.escape(name)))
    header = next((i for i, line in enumerate(lines) if pattern.match(line)), None)
    if header is None:
        return None
    indent = len(lines[header]) - len(lines[header].lstrip())
    start, end = header, header + 1
    while start > 0 and lines[start - 1].strip().startswith("@"):
        start -= 1
    while end < len(lines) and _inside(lines[end], indent):
        end += 1
    segment = textwrap.dedent("".join(lines[start:end]))
    try:
        ast.parse(segment)
    except SyntaxError:
        return None
    return segment


def _inside(line: str, indent: int) -> bool:
    """A line still belongs to a definition at `indent`: blank, or indented deeper."""
    return not line.strip() or len(line) - len(line.lstrip()) > indent


def reindent(snippet: str, target: str) -> str | None:
    """When `snippet` lost its indentation, the indentation it has in `target`: matched line by line, stripped."""
    lines = [line.strip() for line in snippet.splitlines()]
    if not lines or not lines[0]:
        return None
    target_lines = target.splitlines()
    for start, line in enumerate(target_lines):
        if line.strip() != lines[0]:
            continue
        window = target_lines[start : start + len(lines)]
        if [w.strip() for w in window] == lines:
            return "\n".join(window) + ("\n" if snippet.endswith("\n") else "")
    return None


@dataclass(frozen=True)
class RepairForm:
    """How the agentless arm asks models whose name holds `match` (case-insensitively) for a repair."""

    match: str
    edit_format: str
    """rewrite, search_replace, or auto (rewrite up to `RepairTable.auto_max_lines` lines)."""
    one_shot: bool

    def __post_init__(self) -> None:
        if self.edit_format not in EDIT_FORMAT_CHOICES:
            choices = ", ".join(EDIT_FORMAT_CHOICES)
            raise data.DataError(f"unknown edit_format {self.edit_format!r} for {self.match!r}; use one of {choices}")


@dataclass(frozen=True)
class RepairTable:
    """snaffle/data/edit_formats.toml: the measured rows (the first match wins), the default, the `auto` threshold."""

    models: tuple[RepairForm, ...]
    default: RepairForm
    auto_max_lines: int

    def form_for(self, model: str) -> RepairForm:
        lowered = model.lower()
        return next((row for row in self.models if row.match.lower() in lowered), self.default)


def repair_table_from(tables: Mapping[str, Any]) -> RepairTable:
    """The table from the file's tables; a missing or unknown key, or an unknown edit format, is a `DataError`."""
    where = f"snaffle/data/{REPAIR_FILE}"
    keys = ("edit_format", "auto_max_lines", "one_shot")
    default = data.required(data.table(tables, "default", where), keys, f"{where} [default]")
    models = tables.get("models")
    if not isinstance(models, list):
        raise data.DataError(f"{where} lacks the required [[models]] rows")
    rows = [data.record(RepairForm, row, f"{where} [[models]] row {n}") for n, row in enumerate(models, 1)]
    fallback = RepairForm("", default["edit_format"], default["one_shot"])
    return RepairTable(tuple(rows), fallback, default["auto_max_lines"])


@cache
def repair_table() -> RepairTable:
    """The packaged repair table (read on first use, never at import)."""
    return repair_table_from(data.load(REPAIR_FILE))


def one_shot_for(model: str) -> bool:
    """Whether the agentless arm repairs with one tool-less call per sample for this model (data, measured)."""
    return repair_table().form_for(model).one_shot


def is_unified_diff(answer: str) -> bool:
    """Whether the answer is a unified diff (recognised so it can be refused with a precise reason)."""
    return bool(re.search(r"^--- \S+.*\n\+\+\+ \S+.*\n@@ ", answer, re.MULTILINE))


def edit_format_for(model: str, entity_lines: int, configured: str | None = None) -> str:
    """`rewrite`, `search_replace` or `line_diff` for this model and entity size, from
    snaffle/data/edit_formats.toml."""
    table = repair_table()
    chosen = configured or table.form_for(model).edit_format
    if chosen == "auto":
        return AUTO_FORMATS[0] if entity_lines <= table.auto_max_lines else AUTO_FORMATS[1]
    if chosen not in EDIT_FORMATS:
        raise ValueError(f"unknown edit format {chosen!r}; use one of {', '.join(EDIT_FORMAT_CHOICES)}")
    return chosen
