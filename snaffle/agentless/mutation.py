"""Zero-token repair: each one-point mutant of the localized code (agentless/mutants.py) is tried on one scratch copy
against the evidence that reproduced the issue; those that pass all of it go on to full validation as candidates,
and decide the run only when nothing else could (`decisive`).

The evidence is asked first of the unmutated copy: what does not fail there cannot judge a mutant, and its time
there bounds each mutant's run (a mutant that loops is stopped at `timeout_factor` times that). Only the issue's own
evidence screens (a reproducing snippet, the given failing test, a reproduction test made from a snippet): a
model-written reproduction test can be wrong, and a mutant picked by it alone would be a guess.
"""

from __future__ import annotations

import builtins
import itertools
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from snaffle import data
from snaffle.agentless.evidence import Evidence
from snaffle.agentless.mutants import DATA_FILE, FileMutants, Mutant
from snaffle.agentless.sampling import validated_choice
from snaffle.agentless.validate import CandidatePatch, evidence_rank
from snaffle.index.parse import Entity
from snaffle.sandbox import Sandbox
from snaffle.workspace import Workspace


@dataclass(frozen=True)
class Screening:
    """snaffle/data/mutation.toml [screening]: how many mutants, how long, how many go on to validation."""

    entities: int
    """The localized entities whose code is mutated, best first."""
    max_mutants: int
    max_seconds: float
    max_survivors: int
    timeout_factor: float
    min_timeout_s: float


@cache
def screening_limits() -> Screening:
    return data.load_record(Screening, DATA_FILE, "screening")


@dataclass(frozen=True)
class Survivor:
    """A mutant that passed every piece of screening evidence, and its patch against the starting tree."""

    mutant: Mutant
    patch: str


@dataclass(frozen=True)
class Report:
    """What the screening did: mutants made and tried, the survivors, its seconds, and why it stopped early."""

    generated: int
    tried: int
    survivors: tuple[Survivor, ...]
    seconds: float
    stopped: str = ""
    evidence: tuple[str, ...] = ()

    def decision(self) -> str:
        head = f"{len(self.survivors)} of {self.tried} mutants pass the evidence"
        tail = f" ({self.stopped})" if self.stopped else ""
        return f"{head}, of {self.generated} made{tail}"

    def fields(self) -> dict[str, object]:
        return {
            "generated": self.generated,
            "tried": self.tried,
            "survivors": [s.mutant.describe() for s in self.survivors],
            "evidence": list(self.evidence),
            "seconds": round(self.seconds, 2),
        }


def plan(
    entities: Sequence[Entity], sources: Callable[[str], bytes], executed: Mapping[str, Collection[int]] | None
) -> list[Mutant]:
    """The mutants of `entities` (in their order; each file parsed once), each entity's lines limited to those the
    evidence ran (plus its signature, whose defaults run at the call) when `executed` says which lines ran; every
    line otherwise."""
    files: dict[str, FileMutants | None] = {}
    found: list[Mutant] = []
    for entity in entities:
        if entity.path not in files:
            try:
                files[entity.path] = FileMutants(sources(entity.path).decode("utf-8"), entity.path)
            except UnicodeDecodeError:
                files[entity.path] = None  # byte offsets of a file that is not UTF-8 would not be Python's
        file = files[entity.path]
        lines: set[int] | None = None
        if executed is not None:
            lines = set(executed.get(entity.path, ()))
            lines |= set(range(entity.start_line + 1, entity.body_start_line + 1))
        if file is not None:
            found += file.within(entity.start_line + 1, entity.end_line + 1, lines)  # Entity lines are 0-based
    return found


def screen(
    copy: Workspace, candidates: Sequence[Mutant], evidence: Sequence[Evidence], sandbox: Sandbox, limits: Screening
) -> Report:
    """Try `candidates` in order on `copy` (left as it was found), each against the evidence that fails unmutated."""
    started = time.monotonic()
    probes = calibrated(copy, evidence, sandbox, limits)
    if not probes:
        return Report(len(candidates), 0, (), time.monotonic() - started, "no evidence fails on the original")
    survivors: list[Survivor] = []
    tried, stopped = 0, ""
    stamps = itertools.count(int(time.time()) + 1)
    for mutant in candidates[: limits.max_mutants]:
        if time.monotonic() - started > limits.max_seconds:
            stopped = f"time budget of {limits.max_seconds:.0f} s spent"
            break
        tried += 1
        patch = trial(copy, mutant, probes, sandbox, stamps)
        if patch:
            survivors.append(Survivor(mutant, patch))
            if len(survivors) >= limits.max_survivors:
                stopped = f"{limits.max_survivors} survivors"
                break
    if not stopped and len(candidates) > limits.max_mutants:
        stopped = f"cap of {limits.max_mutants} mutants"
    names = tuple(p.name for p in probes)
    return Report(len(candidates), tried, tuple(survivors), time.monotonic() - started, stopped, names)


def calibrated(copy: Workspace, evidence: Sequence[Evidence], sandbox: Sandbox, limits: Screening) -> list[Evidence]:
    """Each piece of evidence that fails on the unmutated copy, bounded by its time there."""
    probes = []
    for item in evidence:
        started = time.monotonic()
        verdict = item.judge(copy, sandbox)
        seconds = time.monotonic() - started
        if verdict.passed is False:
            probes.append(item.bounded(max(limits.min_timeout_s, limits.timeout_factor * seconds)))
    return probes


def trial(
    copy: Workspace, mutant: Mutant, probes: Sequence[Evidence], sandbox: Sandbox, stamps: itertools.count[int]
) -> str:
    """The mutant's patch if every probe passes with it, else ''; the file is put back either way. Each write gets a
    new whole-second mtime, so a cached bytecode file of an earlier version (same size, same second) is never used."""
    file = copy.root / mutant.path
    original = file.read_bytes()
    write(file, mutant.apply(original), next(stamps))
    try:
        for probe in probes:
            if probe.judge(copy, sandbox).passed is not True:
                return ""
        return copy.patch()
    finally:
        write(file, original, next(stamps))


def write(file: Path, content: bytes, stamp: int) -> None:
    file.write_bytes(content)
    os.utime(file, (stamp, stamp))


def decisive(found: Sequence[CandidatePatch]) -> bool:
    """The survivors of a finished screening end the repair (see `indecision`)."""
    return not indecision(found, "")


def indecision(found: Sequence[CandidatePatch], stopped: str) -> str:
    """Why the survivors cannot end the repair, '' when they can: the screening stopped early; none is
    `validated`; the best is part of a fix (it fixes some related tests failing on the original and leaves others
    failing: measured, one of two swapped `return`s fixed 5 of 11 and passed the snippet); or a mutant of another
    behaviour has evidence as good (left failing, passing, related tests fixed), a tie for the model's samples."""
    if stopped:
        return f"screening stopped early ({stopped})"
    chosen = validated_choice(found)
    if chosen is None:
        return "none is validated"
    if chosen.part_of_fix:
        return f"the best mutant fixes {chosen.fixed} of the related tests failing on the original, not all"
    rivals = [m for m in found if m.valid and m.key != chosen.key]
    if any(evidence_rank(m) <= evidence_rank(chosen) for m in rivals):
        return "no one behaviour has the best evidence"
    return ""


def partial(found: Sequence[CandidatePatch]) -> CandidatePatch | None:
    """The survivor selection would choose when it is part of a fix: it fixes some related tests failing on the
    original and leaves others failing (see `indecision`); None otherwise."""
    chosen = validated_choice(found)
    return chosen if chosen is not None and chosen.part_of_fix else None


def seconded(found: Sequence[CandidatePatch], samples: Sequence[CandidatePatch]) -> list[CandidatePatch]:
    """The valid mutants whose behaviour a valid sample of the model's also has: a second vote for it. A mutant
    no sample agrees with is not a candidate once the screening was not decisive."""
    keys = {c.key for c in samples if c.valid}
    return [m for m in found if m.valid and m.key in keys]


HANDLER_OPERATORS = frozenset({"exception_swapped", "exception_widened"})
"""The operators that change what an `except` clause catches (agentless/mutants.py `_exception`)."""


def least_handler_change(survivors: Sequence[Survivor], found: Sequence[CandidatePatch]) -> list[CandidatePatch]:
    """`found` (the validated `survivors`, in their order) without the handler changes that another valid one of the
    same `except` clause, with evidence as good, changes less: it still catches everything the clause caught where
    this one drops some, or both keep it and this one adds strictly more (`LookupError` where `KeyError, IndexError`
    is enough). The evidence cannot tell them apart, so they would tie; what the clause caught before is kept."""
    pairs = list(zip(survivors, found, strict=True))

    def bettered(survivor: Survivor, candidate: CandidatePatch) -> bool:
        rank = evidence_rank(candidate)
        return any(
            rival.valid and evidence_rank(rival) <= rank and changes_less(other.mutant, survivor.mutant)
            for other, rival in pairs
            if rival is not candidate
        )

    return [candidate for survivor, candidate in pairs if not bettered(survivor, candidate)]


def changes_less(rival: Mutant, mutant: Mutant) -> bool:
    """Both change the same names of one `except` clause; `rival` keeps what it caught and `mutant` does not, or
    both keep it and `mutant` catches strictly more."""
    same_site = (rival.path, rival.start, rival.end) == (mutant.path, mutant.start, mutant.end)
    if not same_site or {rival.operator, mutant.operator} - HANDLER_OPERATORS:
        return False
    before, ours, theirs = (handler_classes(m) for m in (mutant.before, mutant.after, rival.after))
    if before is None or ours is None or theirs is None or not covers(theirs, before):
        return False
    return not covers(ours, before) or (covers(ours, theirs) and not covers(theirs, ours))


def handler_classes(text: str) -> tuple[type[BaseException], ...] | None:
    """The builtin exception classes `text` names (`KeyError`, `KeyError, IndexError`, `(A, B)`); None when a name
    is not one (a project's own exception's hierarchy is not known here)."""
    names = [name.strip() for name in text.strip().strip("()").split(",") if name.strip()]
    found = [getattr(builtins, name, None) for name in names]
    classes = [c for c in found if isinstance(c, type) and issubclass(c, BaseException)]
    return tuple(classes) if names and len(classes) == len(names) else None


def covers(wide: Sequence[type[BaseException]], narrow: Sequence[type[BaseException]]) -> bool:
    """Every class of `narrow` is caught by a clause naming `wide`."""
    return all(any(issubclass(n, w) for w in wide) for n in narrow)
