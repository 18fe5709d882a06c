"""Failure labels: deterministic readings of an attempt's profile, each with the evidence that triggered it.

Each threshold is a named constant with a test (tests/test_trace_labels.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from snaffle.trace.locate import LocationCheck
from snaffle.trace.stats import AttemptStats

LOOP_CALLS = 3
"""`looping`: the same call (name and arguments) made this many times with nothing changed between."""
REDUNDANT_TEST_RERUNS = 2
"""`redundant_test_runs`: this many test runs that repeat an earlier one with nothing changed between."""
TEST_FILE_EDITS = 1
"""`test_file_edits`: this many edits aimed at a test file."""
MALFORMED_STORM_TURNS = 3
"""`malformed_storm`: this many turns without a usable call (no call, or every call rejected)."""
STOPPED_BY_MODEL = frozenset({"submitted", "no_valid_patch"})
"""Statuses where the run ended on its own decision, not on a cap or an error."""


@dataclass(frozen=True)
class Label:
    """One failure label of an attempt and the evidence for it."""

    name: str
    evidence: str


def _looping(s: AttemptStats, where: LocationCheck | None) -> str | None:
    if s.longest_repeat < LOOP_CALLS:
        return None
    return f"{s.longest_repeat_call!r} made {s.longest_repeat} times with nothing changed between"


def _redundant_test_runs(s: AttemptStats, where: LocationCheck | None) -> str | None:
    if s.test_reruns_unchanged < REDUNDANT_TEST_RERUNS:
        return None
    return f"{s.test_reruns_unchanged} of {s.test_runs} test runs repeated an earlier one with nothing changed"


def _test_file_edits(s: AttemptStats, where: LocationCheck | None) -> str | None:
    return f"{s.test_file_edits} edit(s) aimed at test files" if s.test_file_edits >= TEST_FILE_EDITS else None


def _malformed_storm(s: AttemptStats, where: LocationCheck | None) -> str | None:
    if s.malformed_turns < MALFORMED_STORM_TURNS:
        return None
    return f"{s.malformed_turns} turns without a usable call ({s.rejected_calls} calls rejected)"


def _gave_up_early(s: AttemptStats, where: LocationCheck | None) -> str | None:
    """Stopped by its own decision, with turns left, and no patch that a passing test run checked. Only a loop can
    give up: an agentless run stops when its samples are done (`unvalidated_edits` or `no_edit` say how)."""
    budget_left = not s.turn_cap or s.calls < s.turn_cap
    if s.pipeline or s.status not in STOPPED_BY_MODEL or not budget_left:
        return None
    left = f"{s.turn_cap - s.calls} of {s.turn_cap} turns left" if s.turn_cap else "no turn cap"
    if s.patch_lines == 0:
        return f"{s.status} after {s.calls} calls with an empty patch ({left})"
    if not s.tested_after_last_change:
        return f"{s.status} after {s.calls} calls; no passing test run after the last change ({left})"
    return None


def _context_pressure(s: AttemptStats, where: LocationCheck | None) -> str | None:
    return f"compaction ran {s.compactions} time(s)" if s.compactions else None


def _no_edit(s: AttemptStats, where: LocationCheck | None) -> str | None:
    if s.changed_calls or s.patch_lines or s.edited_samples:
        return None
    if s.pipeline:
        return f"no sample applied an edit ({s.samples} samples, {s.calls} model calls); the patch is empty"
    return f"no call changed the repository in {s.calls} calls; the patch is empty"


def _unvalidated_edits(s: AttemptStats, where: LocationCheck | None) -> str | None:
    """An agentless run whose samples applied edits and validation accepted none of them."""
    if not s.pipeline or not s.edited_samples or s.valid_samples or s.status == "interrupted":
        return None
    broke = f"; regressions: {', '.join(s.regressions[:5])}" if s.regressions else ""
    return f"{s.edited_samples} of {s.samples} samples applied edits; validation accepted none{broke}"


def _wrong_location(s: AttemptStats, where: LocationCheck | None) -> str | None:
    if where is None or not where.missed:
        return None
    return f"edited {sorted(where.edited)}; the gold patch edits {sorted(where.gold)}"


Rule = Callable[[AttemptStats, LocationCheck | None], str | None]
RULES: tuple[tuple[str, Rule], ...] = (
    ("looping", _looping),
    ("redundant_test_runs", _redundant_test_runs),
    ("test_file_edits", _test_file_edits),
    ("malformed_storm", _malformed_storm),
    ("gave_up_early", _gave_up_early),
    ("context_pressure", _context_pressure),
    ("no_edit", _no_edit),
    ("unvalidated_edits", _unvalidated_edits),
    ("wrong_location", _wrong_location),
)
LABELS = tuple(name for name, _ in RULES)


def label(stats: AttemptStats, where: LocationCheck | None = None) -> tuple[Label, ...]:
    """Every label whose rule fires; `wrong_location` only when a gold patch was given (`where`)."""
    found = ((name, rule(stats, where)) for name, rule in RULES)
    return tuple(Label(name, evidence) for name, evidence in found if evidence is not None)
