"""Where a wrong value was born, zero tokens: the innermost call whose returned value holds the part of a session
line's value that the issue says is wrong.

A session line shows `'1.2.3-rc.21'` where the issue expects `'1.2.3-rc.2'`: the line's value differs from the
expected one in its trailing `1`. The snippet runs once more on the original tree, watching every function and method
its first run executed (coverage); of the calls made by that line, the first to *end* whose returned value is a piece
of the line's value covering the wrong part is where that part appeared: `_increment_string(string='rc.1') returned
'rc.21'`, a helper the issue never names, ends before `bump_prerelease` and `__str__`, which only pass it on. That
call's function scores 1 (the `origin` localization signal); the later matching calls only carried the value
outwards and score nothing (the issue's names already point at them). A value that is not the line's whole value
must be at least `MIN_PIECE` characters long, so a helper returning `1` does not match every `1` of a version string.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from pathlib import Path

from snaffle.agentless.calls import described, watched
from snaffle.agentless.facts import (
    Call,
    ExecutionFacts,
    SnippetLimits,
    SnippetRun,
    ran_entities,
    run_snippet,
    snippet_limits,
)
from snaffle.gates import is_test_file
from snaffle.index.parse import Entity
from snaffle.index.repo import RepoIndex
from snaffle.sandbox import Sandbox

MAX_WATCHED = 400
"""Functions watched in one run (those the first run executed, in file order)."""
CALLS_PER_FUNCTION = 30
"""Calls recorded per watched function: a helper the session's earlier lines called too still has calls left."""
MIN_PIECE = 2
"""The shortest returned value that counts as a piece of a longer line value."""
TIMEOUT_FACTOR = 10.0
"""The watched run may take this many times the first run's seconds (tracing every call is slower) ..."""
MIN_TIMEOUT_S = 5.0
"""... but at least this long, and never longer than the snippet's own timeout: a snippet that is slow only when
watched costs seconds, not the whole snippet timeout."""
CUT_MARK = "..."
FORMATTERS = frozenset({"__str__", "__repr__", "__format__"})
"""Methods that show an object's value rather than make it: never an origin (`str(v.bump_minor())` is wrong where
`bump_minor` built the object, though `__str__` is the first call to return text)."""


@dataclass(frozen=True)
class Origin:
    """The call whose returned value first held the wrong part of a line's value."""

    entity: Entity
    line: str
    """`name(args) returned value`, as the call trace says it."""


def text_of(shown: str) -> str:
    """The characters a repr shows: a string literal's content, else the repr itself."""
    try:
        value = ast.literal_eval(shown)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return shown
    return value if isinstance(value, str) else shown


def wrong_parts(observed: str, expected: str) -> list[tuple[int, int]]:
    """Spans of `observed` that differ from `expected`: replaced or extra characters, and for a missing part the
    character before it."""
    spans = []
    for tag, start, stop, _, _ in SequenceMatcher(None, observed, expected, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            spans.append((start, stop))
        elif tag == "insert" and start > 0:
            spans.append((start - 1, start))
    merged: list[tuple[int, int]] = []
    for start, stop in spans:  # in order; touching spans are one
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(stop, merged[-1][1]))
        else:
            merged.append((start, stop))
    return merged


def covers(piece: str, observed: str, spans: Sequence[tuple[int, int]]) -> bool:
    """`piece` occurs in `observed` where it overlaps one of `spans`."""
    if not piece or (piece != observed and len(piece) < MIN_PIECE):
        return False
    at = observed.find(piece)
    while at >= 0:
        if any(at < stop and start < at + len(piece) for start, stop in spans):
            return True
        at = observed.find(piece, at + 1)
    return False


def matching_calls(run: SnippetRun, calls: Sequence[Call]) -> Iterator[Call]:
    """The calls of each line whose value missed the issue's expectation that returned a piece of its wrong part,
    in the order they ended."""
    seen = run.seen
    for expectation, met in zip(run.snippet.expectations, seen.met, strict=False):
        value = seen.values[expectation.statement] if expectation.statement < len(seen.values) else None
        if met is not False or value is None:
            continue
        observed = text_of(value)
        spans = wrong_parts(observed, text_of(expectation.expected))
        ended = sorted((c for c in calls if c.statement == expectation.statement and c.end >= 0), key=lambda c: c.end)
        for call in ended:
            returned = call.returned
            if returned is not None and not returned.endswith(CUT_MARK) and covers(text_of(returned), observed, spans):
                yield call


def origins(
    facts: ExecutionFacts, index: RepoIndex, root: Path, sandbox: Sandbox, limits: SnippetLimits | None = None
) -> list[Origin]:
    """Per reproducing run with a missed expectation, the call where the wrong part of a value first appeared (one
    per function)."""
    found: dict[Entity, Origin] = {}
    for run in facts.reproducing:
        if False not in run.seen.met:
            continue
        targets = [e for e in ran_entities(run.seen, index) if not is_test_file(e.path)][:MAX_WATCHED]
        if not targets:
            continue
        bounded = watch_limits(limits or snippet_limits(), run.seen.seconds)
        calls = run_snippet(run.snippet, root, sandbox, bounded, watched(targets, root), CALLS_PER_FUNCTION).calls
        made = (
            c for c in matching_calls(run, calls) if known(c, targets) and targets[c.function].name not in FORMATTERS
        )
        first = next(made, None)
        if first is not None:
            entity = targets[first.function]
            found.setdefault(entity, Origin(entity, described(entity, first)))
    return list(found.values())


def watch_limits(limits: SnippetLimits, first_seconds: float) -> SnippetLimits:
    """The watched run's limits: its timeout from the first run's seconds (`TIMEOUT_FACTOR`, `MIN_TIMEOUT_S`)."""
    bound = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * first_seconds)
    return replace(limits, timeout_s=min(limits.timeout_s, bound))


def known(call: Call, targets: Sequence[Entity]) -> bool:
    """The call names a watched function (the report is written inside the snippet's process, which may forge it)."""
    return 0 <= call.function < len(targets)


def scores(found: Sequence[Origin]) -> dict[Entity, float]:
    """The `origin` localization signal: 1 for each origin."""
    return {o.entity: 1.0 for o in found}
