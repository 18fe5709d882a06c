"""Issue facts from execution, zero tokens: each snippet of the issue run in the sandbox against a tree.

What it did (the exception and its repo frames, the values it printed, whether the user's shown output came back,
whether a stated expectation held) becomes localization signals, a line of the reproduction prompt, a zero-token
reproduction test, and `SnippetEvidence`: the same snippet asked again of a patched copy.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path

from snaffle import data
from snaffle.agentless.evidence import Verdict
from snaffle.agentless.snippet_imports import RepoImports, undefined_name
from snaffle.agentless.snippets import Expectation, Extracted, Reading, Snippet, Statement, extract
from snaffle.agentless.validate import TestOutcomes
from snaffle.gates import is_test_file
from snaffle.index.parse import Entity, innermost
from snaffle.index.repo import RepoIndex
from snaffle.sandbox import Rlimits, Sandbox, import_roots
from snaffle.workspace import Workspace

NOT_REPRODUCTIONS = frozenset({"ModuleNotFoundError", "ImportError", "SyntaxError", "KeyboardInterrupt"})
"""Exceptions that say the snippet could not run here (a missing dependency, pasted pseudo-code), not the bug."""
FRAME_DECAY = 0.7
"""Each raising frame further out from the innermost repo frame counts this much less."""
SHORT_OUTPUT = 400


@dataclass(frozen=True)
class SnippetLimits:
    """How a snippet runs and what is inferred around it: snaffle/data/agentless.toml [snippets], every key
    required."""

    timeout_s: float
    output_cap_bytes: int
    memory_mb: int
    file_mb: int
    coverage: bool
    infer_imports: bool
    """A snippet stopped at an undefined name the repository provides is run again with its import first."""
    max_imports: int
    """The most imports added to one snippet."""
    ordered_expectations: bool
    """Stated values map in order onto as many session lines (snippets.ordered_expectations)."""
    indented_scripts: bool
    """Markdown's indented code blocks are snippets too (snippets.indented_blocks)."""
    kind_expectations: bool
    """One stated value maps onto the only session line shown a literal of its kind (snippets._only_of_kind)."""
    raised_expectations: bool
    """One stated literal maps onto the line a session ends raising at (snippets._raising_line)."""

    def reading(self) -> Reading:
        """How the issue's text is read: the four reading switches above as one record."""
        return Reading(
            ordered=self.ordered_expectations,
            indented=self.indented_scripts,
            by_kind=self.kind_expectations,
            raised=self.raised_expectations,
        )


SNIPPET_ENV = {"PYTHONHASHSEED": "0"}
"""A snippet shows the same values run to run: a set of strings (a dict built from one) iterates in the order of
its hashes, seeded per process unless fixed, and a prompt quoting such a value would differ each time (no replay, no
reuse of the server's KV prefix)."""


@cache
def snippet_limits() -> SnippetLimits:
    return data.load_record(SnippetLimits, "agentless.toml", "snippets")


@dataclass(frozen=True)
class Raised:
    """The exception a snippet ended with: type, message, and its frames inside the repository (outermost first)."""

    type: str
    message: str
    repo_frames: tuple[tuple[str, int, str], ...]

    @property
    def line(self) -> str:
        return f"{self.type}: {self.message}".strip().rstrip(":")


@dataclass(frozen=True)
class Call:
    """One call of a watched function during a snippet's statement: its arguments and how it ended."""

    function: int
    """The watched function's position in the list the run was given."""
    args: str
    ended: str
    """`returned X`, `yielded A, B`, `raised E: message`, or `did not return` (the statement stopped inside it)."""
    statement: int
    """The snippet statement it ran in."""
    shown: bool
    """Its returned object is the statement's value (the first such call to start: where the line's value came from)."""
    end: int = -1
    """Its place among the run's watched calls in the order they ended (-1: it never ended); an inner call ends
    before the call around it."""

    @property
    def returned(self) -> str | None:
        """The repr of the value it returned (cut as the driver cuts it); None if it raised, yielded or never ended."""
        return self.ended.removeprefix("returned ") if self.ended.startswith("returned ") else None


@dataclass(frozen=True)
class Watched:
    """A function whose calls a snippet run records: its file (absolute), 1-based line span and `def` name."""

    path: str
    first_line: int
    last_line: int
    name: str


@dataclass(frozen=True)
class Observation:
    """What one snippet did on one tree."""

    raised: Raised | None
    values: tuple[str | None, ...]
    met: tuple[bool | None, ...]
    """Per expectation of the snippet: whether the value equalled the expected one (None: never reached)."""
    output: str
    timed_out: bool
    cut: int
    seconds: float
    executed: Mapping[str, frozenset[int]]
    """Per repo-relative file, the 1-based lines the snippet ran."""
    coverage_missing: str = ""
    """Why coverage measured nothing (the interpreter cannot import it), when it was asked for."""
    calls: tuple[Call, ...] = ()
    """The calls of the watched functions, when the run watched some (agentless/calls.py)."""

    def summary(self) -> str:
        """One line: how it ended."""
        if self.timed_out:
            return "stopped: did not finish in time"
        if self.raised is not None:
            return f"raised {self.raised.line}"
        return "ran without an exception" + (f" (output cut by {self.cut} bytes)" if self.cut else "")


def run_snippet(
    snippet: Snippet,
    root: Path,
    sandbox: Sandbox,
    limits: SnippetLimits | None = None,
    watch: Sequence[Watched] = (),
    calls_per_function: int | None = None,
) -> Observation:
    """Run `snippet` against the tree at `root`, read-only, in a fresh scratch dir; never raises for what it does.
    With `watch`, the run records those functions' calls instead of measuring coverage (`calls_per_function` of
    each, the driver's own number if None)."""
    limits = limits or snippet_limits()
    measured = limits.coverage and not watch
    with tempfile.TemporaryDirectory(prefix="snaffle-snippet-", dir=sandbox.scratch) as tmp:
        cwd = Path(tmp)
        marker = f"--snaffle-{secrets.token_hex(8)}--"
        job = {
            "kind": snippet.kind,
            "statements": [s.source for s in snippet.statements],
            "expectations": {str(e.statement): e.expected for e in snippet.expectations},
            "root": str(root),
            "marker": marker,
            "coverage": measured,
            "watch": [[w.path, w.first_line, w.last_line, w.name] for w in watch],
            **({"calls_per_function": calls_per_function} if calls_per_function is not None else {}),
        }
        (cwd / "job.json").write_text(json.dumps(job), encoding="utf-8")
        started = time.monotonic()
        rlimits = Rlimits(memory_bytes=limits.memory_mb << 20, file_bytes=limits.file_mb << 20)
        done = sandbox.run(
            [sandbox.python, "-c", driver_source()],
            cwd,
            limits.timeout_s,
            writable=root,
            env={**sandbox.env_for(root), **SNIPPET_ENV},
            limits=rlimits,
            output_cap=limits.output_cap_bytes,
            readonly=True,
        )
        seconds = time.monotonic() - started
        report = _read_json(cwd / "report.json")
        executed = covered(cwd / "coverage.data", root) if measured else {}
        missing = _note(cwd / "coverage.missing") if measured else ""
    output = re.sub(rf"^{re.escape(marker)} \d+\n?", "", done.output, flags=re.MULTILINE)
    seen = observation(snippet, report, output, done.timed_out, done.dropped, seconds, executed, root)
    return replace(seen, coverage_missing=missing, calls=calls_of(report))


def calls_of(report: list[dict[str, object]]) -> tuple[Call, ...]:
    """The watched calls the driver recorded, statement by statement."""
    found = []
    for number, result in enumerate(report):
        rows = result.get("calls")
        for row in rows if isinstance(rows, list) else ():
            if isinstance(row, dict) and isinstance(row.get("function"), int):
                shown = row.get("shown") is True
                end = row["end"] if isinstance(row.get("end"), int) else -1
                found.append(Call(row["function"], str(row.get("args", "")), _ended(row), number, shown, end))
    return tuple(found)


def _ended(row: Mapping[str, object]) -> str:
    if "raised" in row:
        return f"raised {row['raised']}"
    if "returned" in row:
        return f"returned {row['returned']}"
    yielded = row.get("yielded")
    if isinstance(yielded, list):
        return "yielded " + ", ".join(str(v) for v in yielded) if yielded else "yielded nothing"
    return "did not return"


@cache
def driver_source() -> str:
    return resources.files("snaffle.agentless").joinpath("snippet_driver.py").read_text(encoding="utf-8")


def _note(path: Path) -> str:
    """A note the driver left (the snippet shares its directory, so it may have written one too): one short line."""
    try:
        with path.open("rb") as handle:
            head = handle.read(4 * SHORT_OUTPUT)
    except OSError:
        return ""
    return cut_line(head.decode("utf-8", errors="replace"))


def _read_json(path: Path) -> list[dict[str, object]]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [r for r in loaded if isinstance(r, dict)] if isinstance(loaded, list) else []


def observation(
    snippet: Snippet,
    report: list[dict[str, object]],
    output: str,
    timed_out: bool,
    cut: int,
    seconds: float,
    executed: Mapping[str, frozenset[int]],
    root: Path,
) -> Observation:
    """The record of one run from the driver's report (statement results in order)."""
    exceptions = [r["exception"] for r in report if isinstance(r.get("exception"), dict)]
    raised = _raised(exceptions[0], root) if exceptions else None  # type: ignore[arg-type]  # later ones cascade
    values = tuple(str(r["value"]) if "value" in r else None for r in report)
    met = tuple(_met(report, e.statement) for e in snippet.expectations)
    return Observation(raised, values, met, output, timed_out, cut, seconds, executed)


def _met(report: list[dict[str, object]], statement: int) -> bool | None:
    if statement >= len(report) or "met" not in report[statement]:
        return None
    return bool(report[statement]["met"])


def _raised(exception: Mapping[str, object], root: Path) -> Raised:
    frames = exception.get("frames")
    rows = [f for f in frames if isinstance(f, list) and len(f) == 3] if isinstance(frames, list) else []
    in_repo = tuple((rel, int(line), str(name)) for path, line, name in rows if (rel := repo_relative(str(path), root)))
    return Raised(str(exception.get("type", "")), str(exception.get("message", "")), in_repo)


def repo_relative(path: str, root: Path) -> str | None:
    """A frame's file as a repo-relative path, or None outside the repository (the standard library, site-packages)."""
    try:
        relative = Path(path).resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return None
    return relative.as_posix()


def covered(data_file: Path, root: Path) -> dict[str, frozenset[int]]:
    """Per repo-relative non-test file, the lines coverage.py saw run by the snippet's statements other than its
    imports (the driver labels each statement's context `import` or `run`)."""
    if not data_file.exists():
        return {}
    from coverage import CoverageData

    measured = CoverageData(basename=str(data_file))
    try:
        measured.read()
    except Exception:  # a torn data file (the snippet was killed while it was written): no coverage, not a crash
        return {}
    found: dict[str, frozenset[int]] = {}
    for name in measured.measured_files():
        rel = repo_relative(name, root)
        if rel is not None and not is_test_file(rel):
            by_line = measured.contexts_by_lineno(name)
            found[rel] = frozenset(line for line, contexts in by_line.items() if "run" in contexts)
    return found


def reproduces(snippet: Snippet, seen: Observation, issue: str) -> str:
    """Why this run reproduces the issue ("" when it does not): an exception the issue names, raised from the
    repository, or a stated expectation that did not hold."""
    if any(m is False for m in seen.met):
        return "wrong_value"
    raised = seen.raised
    if raised is None or raised.type in NOT_REPRODUCTIONS or not raised.type:
        return ""
    named = re.search(rf"\b{re.escape(raised.type)}\b", issue) is not None
    return "raised" if named and (raised.repo_frames or snippet.kind == "session") else ""


def shown_reproduced(snippet: Snippet, seen: Observation) -> bool | None:
    """The values the user's session showed came back (spacing aside); None when it showed none."""
    pairs = [
        (s.shown, seen.values[i] if i < len(seen.values) else None)
        for i, s in enumerate(snippet.statements)
        if s.shown and i in snippet.expression_lines()
    ]
    if not pairs:
        return None
    return all(got is not None and _squash(got) == _squash(shown) for shown, got in pairs)


def _squash(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class SnippetRun:
    """One snippet, what it did on the original tree, and why that reproduces the issue ("" if it does not)."""

    number: int
    snippet: Snippet
    seen: Observation
    reason: str
    shown_reproduced: bool | None
    imports_added: tuple[str, ...] = ()
    """The import lines put before the issue's snippet so that it runs (`completed`)."""


@dataclass(frozen=True)
class ExecutionFacts:
    """Every snippet's run on the original tree, and the stated expectations left out as ambiguous."""

    runs: tuple[SnippetRun, ...]
    ambiguous: tuple[str, ...]
    seconds: float

    @property
    def reproducing(self) -> tuple[SnippetRun, ...]:
        return tuple(r for r in self.runs if r.reason)

    def evidence(self) -> list[SnippetEvidence]:
        return [SnippetEvidence(r) for r in self.reproducing]

    def executed(self) -> dict[str, frozenset[int]]:
        """Per repo-relative file, the lines the reproducing snippets ran (empty without coverage)."""
        return merged_lines(run.seen.executed for run in self.reproducing)

    @property
    def coverage_missing(self) -> str:
        """Why the snippets' coverage measured nothing ("" when it measured, or was not asked for)."""
        return next((run.seen.coverage_missing for run in self.runs if run.seen.coverage_missing), "")


def merged_lines(parts: Iterable[Mapping[str, frozenset[int]]]) -> dict[str, frozenset[int]]:
    """Per file, the union of the lines each part says ran."""
    lines: dict[str, frozenset[int]] = {}
    for part in parts:
        for path, ran in part.items():
            lines[path] = lines.get(path, frozenset()) | ran
    return lines


def gather(issue: str, root: Path, sandbox: Sandbox, limits: SnippetLimits | None = None) -> ExecutionFacts:
    """Extract the issue's snippets and run each on the tree at `root`."""
    started = time.monotonic()
    limits = limits or snippet_limits()
    extracted: Extracted = extract(issue, limits.reading())
    imports = RepoImports.read(root, issue) if limits.infer_imports else None
    runs = []
    for number, snippet in enumerate(extracted.snippets, 1):
        snippet, seen, added = completed(snippet, root, sandbox, limits, imports)
        reason = reproduces(snippet, seen, issue)
        runs.append(SnippetRun(number, snippet, seen, reason, shown_reproduced(snippet, seen), added))
    return ExecutionFacts(tuple(runs), extracted.ambiguous, time.monotonic() - started)


def completed(
    snippet: Snippet, root: Path, sandbox: Sandbox, limits: SnippetLimits, imports: RepoImports | None
) -> tuple[Snippet, Observation, tuple[str, ...]]:
    """Run `snippet`; while it stops at a name the repository provides (`imports`), again with that import first
    (at most `limits.max_imports`); a snippet still stopped at an undefined name gets the star import."""
    seen = run_snippet(snippet, root, sandbox, limits)
    added: list[str] = []
    while imports is not None and len(added) < limits.max_imports:
        line = imports.import_for(missing) if (missing := missing_name(seen)) else None
        if line is None or line in added:
            break
        tried = with_prelude(snippet, Statement(line))
        again = run_snippet(tried, root, sandbox, limits)
        if missing_name(again) == missing:
            break
        snippet, seen, added = tried, again, [*added, line]
    if (starred := star_imported(snippet, seen, root)) is not None:
        retried = run_snippet(starred, root, sandbox, limits)
        if not _undefined(retried):
            return starred, retried, tuple(added)
    return snippet, seen, tuple(added)


def missing_name(seen: Observation) -> str | None:
    """The undefined name a snippet's own code stopped at (a NameError with no repository frame), else None."""
    return undefined_name(seen.raised.message) if _undefined(seen) and seen.raised is not None else None


def _undefined(seen: Observation) -> bool:
    """The snippet stopped at a name of its own code that nothing defined (no repository frame)."""
    return seen.raised is not None and seen.raised.type == "NameError" and not seen.raised.repo_frames


def with_prelude(snippet: Snippet, prelude: Statement) -> Snippet:
    """`snippet` with `prelude` as its first statement (its expectations move one statement down)."""
    moved = tuple(Expectation(e.statement + 1, e.expected, e.said) for e in snippet.expectations)
    return Snippet(snippet.kind, (prelude, *snippet.statements), moved)


def star_imported(snippet: Snippet, seen: Observation, root: Path) -> Snippet | None:
    """The snippet with `from PKG import *` first, when it stopped at an undefined name and the repository has one
    top-level package: a session pasted without its imports (sympy's users write `Point(1, 2)`) runs as the
    reporter ran it. None otherwise."""
    packages = top_packages(root)
    if not _undefined(seen) or len(packages) != 1 or snippet.kind == "command":
        return None
    return with_prelude(snippet, Statement(f"from {packages[0]} import *"))


def top_packages(root: Path) -> list[str]:
    """The repository's importable top-level packages, test and documentation packages aside."""
    found = []
    for base in import_roots(root):
        for init in sorted(base.glob("*/__init__.py")):
            name = init.parent.name
            if name.isidentifier() and not name.startswith(("test", "doc", "_")) and name not in ("examples", "bench"):
                found.append(name)
    return found


class SnippetEvidence:
    """A snippet that raised (or showed a wrong value) on the original tree, asked again of a patched copy."""

    def __init__(self, run: SnippetRun, limits: SnippetLimits | None = None) -> None:
        self.run, self.limits = run, limits

    @property
    def name(self) -> str:
        return f"snippet {self.run.number}"

    def judge(self, clone: Workspace, sandbox: Sandbox) -> Verdict:
        """Fails when the same exception comes back or an expectation still fails; passes when neither does; cannot
        tell when the patched tree raises something else or the snippet does not finish."""
        after = run_snippet(self.run.snippet, clone.root, sandbox, self.limits)
        return judged(self.name, self.run, after)

    def bounded(self, timeout_s: float) -> SnippetEvidence:
        limits = replace(self.limits or snippet_limits(), timeout_s=timeout_s, coverage=False)
        return SnippetEvidence(self.run, limits)


def judged(name: str, run: SnippetRun, after: Observation) -> Verdict:
    """The verdict on `after`, a patched tree's run of the snippet that reproduced the issue in `run`."""
    before = run.seen
    if after.timed_out:
        return Verdict(name, None, f"{name} did not finish in time on the patched code")
    wrong = [e for e, m in zip(run.snippet.expectations, after.met, strict=False) if m is False]
    if wrong:
        got = after.values[wrong[0].statement] if wrong[0].statement < len(after.values) else None
        failure = f"{name}: `{statement_of(run, wrong[0].statement)}` gives {got}, expected {wrong[0].expected}"
        return Verdict(name, False, failure, progress=newly_met(before.met, after.met))
    if after.raised is None:
        return Verdict(name, True)
    same = before.raised is not None and (before.raised.type, before.raised.message) == (
        after.raised.type,
        after.raised.message,
    )
    if same or (before.raised is not None and before.raised.type == after.raised.type):
        return Verdict(name, False, f"{name} still raises {cut_line(after.raised.line)}{where(after.raised)}")
    return Verdict(name, None, f"{name} now raises {cut_line(after.raised.line)}{where(after.raised)}")


def newly_met(before: Sequence[bool | None], after: Sequence[bool | None]) -> bool:
    """An expectation that failed on the original tree holds on the patched one."""
    return any(was is False and now is True for was, now in zip(before, after, strict=False))


def statement_of(run: SnippetRun, number: int) -> str:
    return run.snippet.statements[number].source.strip() if number < len(run.snippet.statements) else ""


def where(raised: Raised) -> str:
    if not raised.repo_frames:
        return ""
    path, line, function = raised.repo_frames[-1]
    return f" (in {function}, {path} line {line})"


def cut_line(text: str, cap: int = SHORT_OUTPUT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= cap else text[: cap - 3] + "..."


def raised_scores(facts: ExecutionFacts, index: RepoIndex) -> dict[Entity, float]:
    """The innermost repo frame of each reproduced exception scores 1, outer frames decay (test files skipped)."""
    scores: dict[Entity, float] = {}
    for run in facts.reproducing:
        raised = run.seen.raised
        frames = [f for f in (raised.repo_frames if raised else ()) if not is_test_file(f[0])]
        for depth, (path, line, _) in enumerate(reversed(frames)):
            entity = innermost(index.entities(path), line - 1) if _indexed(index, path) else None
            if entity is not None and entity.qualname:
                scores[entity] = max(scores.get(entity, 0.0), FRAME_DECAY**depth)
    return scores


def executed_scores(facts: ExecutionFacts, index: RepoIndex) -> dict[Entity, float]:
    """Functions and methods whose body the snippets ran (not only their `def` at import), 1/log2(1 + n) each."""
    ran = {e for run in facts.runs for e in ran_entities(run.seen, index)}
    value = 1.0 / math.log2(1 + len(ran)) if ran else 0.0
    return {entity: min(1.0, value) for entity in ran}


def ran_entities(seen: Observation, index: RepoIndex) -> list[Entity]:
    """The functions and methods whose body a run ran, by coverage (not only their `def` at import), in file order."""
    ran: dict[Entity, None] = {}
    indexed = set(index.files())
    for path, lines in sorted(seen.executed.items()):
        if path not in indexed:
            continue
        entities = [e for e in index.entities(path) if e.kind in ("function", "method")]
        for line in sorted(lines):
            owner = innermost(entities, line - 1)
            if owner is not None and line - 1 >= owner.body_start_line:
                ran[owner] = None
    return list(ran)


def _indexed(index: RepoIndex, path: str) -> bool:
    return path in set(index.files())


def signals(facts: ExecutionFacts, index: RepoIndex) -> dict[str, dict[Entity, float]]:
    """The execution signals `Localizer.localize` weighs beside the static ones."""
    return {"raised": raised_scores(facts, index), "executed": executed_scores(facts, index)}


def facts_fields(facts: ExecutionFacts) -> dict[str, object]:
    """The `issue_facts` stage's fields: per snippet what it did, and the expectations left out."""
    rows = []
    for run in facts.runs:
        seen = run.seen
        rows.append(
            {
                "snippet": run.number,
                "kind": run.snippet.kind,
                "lines": len(run.snippet.statements),
                "code": cut_line(run.snippet.code.replace("\n", "; "), 200),
                "did": seen.summary(),
                "imports_added": list(run.imports_added),
                "repo_frames": [f"{p}:{n} in {f}" for p, n, f in seen.raised.repo_frames] if seen.raised else [],
                "values": [v for v in seen.values if v is not None][:5],
                "shown_reproduced": run.shown_reproduced,
                "expectations": [
                    {"line": statement_of(run, e.statement), "expected": e.expected, "met": m}
                    for e, m in zip(run.snippet.expectations, seen.met, strict=False)
                ],
                "reproduces": run.reason,
                "seconds": round(seen.seconds, 2),
            }
        )
    missing = {"coverage_missing": facts.coverage_missing} if facts.coverage_missing else {}
    return {"snippets": rows, "ambiguous": list(facts.ambiguous), "seconds": round(facts.seconds, 2), **missing}


def decision(facts: ExecutionFacts) -> str:
    if not facts.runs:
        return "no runnable snippet"
    ran = f"{len(facts.runs)} snippets run, {len(facts.reproducing)} reproduce the issue"
    if facts.coverage_missing:
        return f"{ran}; coverage unavailable in this Python ({facts.coverage_missing}): no `executed` signal"
    return ran


def observed_text(facts: ExecutionFacts) -> str:
    """What the reproducing snippets did, for the reproduction prompt: what happened and what was expected."""
    lines = []
    for run in facts.reproducing:
        code = run.snippet.code.strip()
        lines.append(f"Running this code from the issue on the current code:\n```python\n{code}\n```")
        lines.append(f"it {run.seen.summary()}{where(run.seen.raised) if run.seen.raised else ''}.")
        for e, m in zip(run.snippet.expectations, run.seen.met, strict=False):
            got = run.seen.values[e.statement] if e.statement < len(run.seen.values) else None
            if m is False:
                lines.append(f"`{statement_of(run, e.statement)}` gives {got}; the issue expects {e.expected}.")
    return "\n".join(lines)


def snippet_test(facts: ExecutionFacts) -> str | None:
    """A pytest file made from the first reproducing snippet (zero tokens): its statements, then an assert per
    expectation; None when no snippet reproduces the issue or its code cannot sit in a function."""
    for run in facts.reproducing:
        body = _test_body(run.snippet)
        if body is not None:
            head = f'"""Made by snaffle from the issue\'s snippet {run.number}."""\n'
            return f"{head}\n\ndef test_issue_snippet():\n{body}\n"
    return None


def _test_body(snippet: Snippet) -> str | None:
    if "import *" in snippet.code:
        return None
    expected = {e.statement: e.expected for e in snippet.expectations}
    lines: list[str] = []
    for number, statement in enumerate(snippet.statements):
        source = statement.source
        if number in expected:
            source = f"assert ({source}) == ({expected[number]})"
        lines.extend("    " + line if line.strip() else "" for line in source.splitlines())
    return "\n".join(lines) if lines else None


MAX_FAILING_SHARE = 0.5
"""Nor is a related-test baseline where more than this share of the tests fail."""


def existing_failures(before: TestOutcomes, index: RepoIndex, cap: int, by_function: bool = False) -> tuple[str, ...]:
    """Related tests that failed an assertion on the original (errors, collection errors and import failures are
    not evidence), as pytest node ids; none when more than `cap` fail, or over `MAX_FAILING_SHARE` of them, so that
    the environment is the likelier cause. With `by_function` the cap counts test functions: a parametrized test's
    failing cases count once."""
    failed = sorted(before.asserted)
    ran = len(before.passed) + len(failed)
    counted = len({test_function(name) for name in failed}) if by_function else len(failed)
    if not failed or counted > cap or len(failed) > MAX_FAILING_SHARE * ran:
        return ()
    files = set(index.files())
    return tuple(node for name in failed if (node := node_id(name, files)) is not None)


def test_function(junit_name: str) -> str:
    """`tests.test_x::test_one[3-4]` -> `tests.test_x::test_one`: the function a parametrized case belongs to."""
    return junit_name.split("[", 1)[0]


def node_id(junit_name: str, files: set[str]) -> str | None:
    """`tests.test_calc.TestAdd::test_one` (junit's classname::name) -> tests/test_calc.py::TestAdd::test_one."""
    classname, _, name = junit_name.partition("::")
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if path in files:
            return "::".join([path, *parts[end:], name])
    return None


def combined(reproduces: bool | None, verdicts: Sequence[Verdict]) -> bool | None:
    """The reproduction test's result and the snippets' verdicts as one: any failure fails, else any pass passes."""
    results = [r for r in (reproduces, *(v.passed for v in verdicts)) if r is not None]
    if not results:
        return None
    return all(results)
