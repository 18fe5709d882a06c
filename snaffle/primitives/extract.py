"""Edits out of free text, tolerantly and deterministically: SEARCH/REPLACE blocks and whole-definition rewrites."""

from __future__ import annotations

import ast
import re
import textwrap
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

SEARCH_REPLACE_RE = re.compile(
    r"(?:^(?P<selector>\S+\.py(?:::\S+)?)[ \t]*\n)?"
    r"^[ \t]*<{5,9}[ \t]*SEARCH[ \t]*\n(?P<search>.*?)^[ \t]*={5,9}[ \t]*\n(?P<replace>.*?)^[ \t]*>{5,9}[ \t]*REPLACE",
    re.MULTILINE | re.DOTALL,
)
FENCE_RE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)```", re.DOTALL)
DEF_RE = r"^\s*(?:async\s+def|def|class)\s+{name}\b"
EDIT_FORMATS = ("rewrite", "search_replace")


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


def code_blocks(answer: str) -> list[str]:
    """The answer's fenced code blocks, or the whole answer when it has none."""
    return FENCE_RE.findall(answer) or [answer]


def defining_blocks(answer: str, names: Sequence[str]) -> list[tuple[str, str]]:
    """For each of `names` the answer defines, in the order of `names`: (name, the first fenced block — or the bare
    answer — that defines it, dedented)."""
    blocks = code_blocks(answer)
    found = []
    for name in dict.fromkeys(names):  # two candidates of one name: the answer's def goes to the first
        block = _defining(blocks, name)
        if block is not None:
            found.append((name, textwrap.dedent(block)))
    return found


def pick_block(answer: str, name: str) -> str:
    """The block that defines `name` (or the first block, or the whole answer), dedented."""
    blocks = code_blocks(answer)
    return textwrap.dedent(_defining(blocks, name) or blocks[0])


def _defining(blocks: Sequence[str], name: str) -> str | None:
    pattern = re.compile(DEF_RE.format(name=re.escape(name)), re.MULTILINE)
    return next((b for b in blocks if pattern.search(b)), None)


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


def one_shot_for(model: str) -> bool:
    """Whether the agentless arm repairs with one tool-less call per sample for this model (data, measured)."""
    return bool(_model_entry(model).get("one_shot", _repair_table()["default"]["one_shot"]))


@cache
def _repair_table() -> dict[str, Any]:
    return tomllib.loads(resources.files("snaffle.data").joinpath("edit_formats.toml").read_text())


def _model_entry(model: str) -> dict[str, Any]:
    return next((m for m in _repair_table().get("models", []) if m["match"].lower() in model.lower()), {})


def is_unified_diff(answer: str) -> bool:
    """Whether the answer is a unified diff (recognised so it can be refused with a precise reason)."""
    return bool(re.search(r"^--- \S+.*\n\+\+\+ \S+.*\n@@ ", answer, re.MULTILINE))


def edit_format_for(model: str, entity_lines: int, configured: str | None = None) -> str:
    """`rewrite` or `search_replace` for this model and entity size, from snaffle/data/edit_formats.toml."""
    default = _repair_table()["default"]
    chosen = configured or str(_model_entry(model).get("edit_format", default["edit_format"]))
    if chosen == "auto":
        return "rewrite" if entity_lines <= int(default["auto_max_lines"]) else "search_replace"
    if chosen not in EDIT_FORMATS:
        raise ValueError(f"unknown edit format {chosen!r}; use one of rewrite, search_replace, auto")
    return chosen
