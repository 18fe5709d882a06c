"""Spectrum-based fault localization: Ochiai over per-test coverage contexts from coverage.py.

The failing test and the other tests of its file run once under coverage with one context per test function;
pytest's junit XML gives each test's outcome. A line covered by failing tests and few passing ones is suspicious.
"""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from snaffle.agentless.baseline import first_error
from snaffle.agentless.junit import read_cases
from snaffle.gates import is_test_file
from snaffle.index.parse import Entity, innermost
from snaffle.index.repo import RepoIndex
from snaffle.sandbox import Sandbox

SBFL_TIMEOUT_S = 300.0
COVERAGE_RC = "[run]\ndynamic_context = test_function\nrelative_files = true\n"


def ochiai(failed_cover: int, passed_cover: int, total_failed: int) -> float:
    """ef / sqrt(total_failed * (ef + ep)); 0 when nothing failed or the line was never run."""
    if not failed_cover or not total_failed:
        return 0.0
    return failed_cover / math.sqrt(total_failed * (failed_cover + passed_cover))


@dataclass(frozen=True)
class Spectrum:
    """One covered run's findings: each entity's suspiciousness, and the lines the failing tests ran."""

    scores: dict[Entity, float]
    failing_lines: dict[str, frozenset[int]]
    """Per repo-relative non-test file, the 1-based lines at least one failing test ran."""
    tests_run: int = 0
    tests_failed: int = 0
    unavailable: str = ""
    """Why the run measured no coverage (the interpreter cannot import coverage.py, the run was stopped); "" when it
    measured."""

    def decision(self) -> str:
        """The `sbfl` stage's one line: what the covered run found, or why it found nothing."""
        if self.unavailable:
            return f"no coverage measured: {self.unavailable}"
        scored = sum(1 for s in self.scores.values() if s > 0)
        return f"{self.tests_failed} of {self.tests_run} tests failed under coverage; {scored} entities scored"


def sbfl_scores(index: RepoIndex, failing_test: str | Sequence[str], sandbox: Sandbox) -> dict[Entity, float]:
    """Entity suspiciousness (max over its lines) from one covered run of the failing tests' files."""
    return spectrum(index, failing_test, sandbox).scores


def spectrum(index: RepoIndex, failing_test: str | Sequence[str], sandbox: Sandbox) -> Spectrum:
    """One covered run of the failing tests' files: suspiciousness per entity and the lines the failures ran."""
    tests = [failing_test] if isinstance(failing_test, str) else list(failing_test)
    test_files = list(dict.fromkeys(t.split("::", 1)[0] for t in tests))
    with tempfile.TemporaryDirectory(prefix="snaffle-sbfl-", dir=sandbox.scratch) as tmp:
        scratch = Path(tmp)
        (scratch / "coveragerc").write_text(COVERAGE_RC)
        command = [
            sandbox.python,
            "-m",
            "coverage",
            "run",
            f"--rcfile={scratch / 'coveragerc'}",
            f"--data-file={scratch / 'coverage'}",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={scratch / 'junit.xml'}",
            *test_files,
        ]
        done = sandbox.run(command, index.root, SBFL_TIMEOUT_S, writable=index.root, env=sandbox.env_for(index.root))
        outcomes = junit_outcomes(scratch / "junit.xml")
        measured = (scratch / "coverage").exists()
        lines = covered_lines(scratch / "coverage", index.root) if measured else {}
    failed = {name for name, ok in outcomes.items() if not ok}
    ran = {path: frozenset(n for n, tests in by_line.items() if tests & failed) for path, by_line in lines.items()}
    scores = entity_suspiciousness(index, lines, failed, len(failed))
    unavailable = "" if measured else why_unmeasured(done.timed_out, done.output)
    return Spectrum(scores, {p: r for p, r in ran.items() if r}, len(outcomes), len(failed), unavailable)


def why_unmeasured(timed_out: bool, output: str) -> str:
    if timed_out:
        return f"the covered run did not finish in {SBFL_TIMEOUT_S:.0f} s"
    return first_error(output) or "coverage wrote no data"


def junit_outcomes(path: Path) -> dict[str, bool]:
    """`module.function` -> passed, from pytest's junit XML (parametrized ids folded into their function)."""
    outcomes: dict[str, bool] = {}
    for case in read_cases(path) or []:
        name = test_key(f"{case.classname}.{case.name.split('[', 1)[0]}")
        outcomes[name] = outcomes.get(name, True) and not case.failed
    return outcomes


def test_key(dotted: str) -> str:
    """`Class.test` or `module.test`: coverage and junit qualify the module differently (rootdir vs package)."""
    return ".".join(dotted.split(".")[-2:])


def covered_lines(data_file: Path, root: Path) -> dict[str, dict[int, set[str]]]:
    """Per repo-relative file, per 1-based line, the test contexts that ran it."""
    from coverage import CoverageData

    data = CoverageData(basename=str(data_file))
    data.read()
    found: dict[str, dict[int, set[str]]] = {}
    for measured in data.measured_files():
        path = Path(measured)
        rel = (path if not path.is_absolute() else path.resolve().relative_to(root.resolve())).as_posix()
        if rel.startswith("..") or is_test_file(rel):
            continue
        by_line = data.contexts_by_lineno(measured)
        found[rel] = {line: {test_key(c.split("|")[0]) for c in ctx if c} for line, ctx in by_line.items()}
    return found


def entity_suspiciousness(
    index: RepoIndex, lines: dict[str, dict[int, set[str]]], failed: set[str], total_failed: int
) -> dict[Entity, float]:
    """Ochiai per line, maximum per innermost entity."""
    scores: dict[Entity, float] = defaultdict(float)
    known = set(index.files())
    for path, by_line in lines.items():
        entities = index.entities(path) if path in known else []
        for line, contexts in by_line.items():
            ef = len(contexts & failed)
            score = ochiai(ef, len(contexts) - ef, total_failed)
            owner = innermost(entities, line - 1)
            if owner is not None and owner.qualname and score > scores[owner]:
                scores[owner] = score
    return dict(scores)
