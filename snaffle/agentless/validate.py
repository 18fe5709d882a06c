"""Deterministic validation and selection: regression and reproduction tests, AST-normalized majority vote."""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from snaffle.agentless.junit import read_cases
from snaffle.agentless.normalize import normalize_source
from snaffle.gates import is_test_file
from snaffle.index.imports import imported_modules, module_name
from snaffle.index.repo import RepoIndex
from snaffle.sandbox import Completed, Sandbox
from snaffle.workspace import Workspace

TESTS_TIMEOUT_S = 300.0
MAX_RELATED_TEST_FILES = 6


@dataclass(frozen=True)
class TestOutcomes:
    """Per-test pass/fail of one pytest run (`file::Class::name`), and whether pytest ran at all."""

    passed: frozenset[str]
    failed: frozenset[str]
    ran: bool
    errored: frozenset[str] = frozenset()
    """Tests that errored (collection or fixture errors) rather than failed an assertion; also in `failed`."""
    stopped: str = ""
    """Why pytest did not finish ('' when it did): the call's memory cap, or its time."""

    @property
    def asserted(self) -> frozenset[str]:
        """Tests that failed an assertion (not an error): what can be evidence of a bug."""
        return self.failed - self.errored


@dataclass(frozen=True)
class CandidatePatch:
    """One repair sample's patch and what validation found."""

    sample: int
    patch: str
    key: str
    changed_lines: int
    regressions: tuple[str, ...] = ()
    fixes_failing: bool | None = None
    """The given failing test passes (None: no failing test was given). A hard requirement."""
    reproduces: bool | None = None
    """The model-written reproduction test passes (None: there is none). A ranking signal only: a weak model's
    reproduction test can be wrong, and must not veto a right patch."""
    fixed: int = 0
    """Tests of the related files that failed before and pass with the patch. A ranking signal."""
    semantic: bool = True
    """False when the patch changes only comments, docstrings or formatting: nothing it does can fix a bug."""
    against: tuple[str, ...] = ()
    """The evidence that reproduced the issue on the original tree and still fails with this patch."""
    passed: tuple[str, ...] = ()
    """The evidence that reproduced the issue on the original tree and passes with this patch."""
    unfixed: int = 0
    """Tests of the related files that failed an assertion before and still do with the patch."""
    origin: str = ""
    """Where the patch came from when not from the model: `mutant path:line operator: ...` (agentless/mutation.py)."""

    @property
    def label(self) -> str:
        """How messages name it: `sample 2`, or `sample 6 (mutant inflection/__init__.py:12 relational: ...)`."""
        return f"sample {self.sample}" + (f" ({self.origin})" if self.origin else "")

    @property
    def valid(self) -> bool:
        return bool(self.patch.strip()) and self.semantic and not self.regressions and self.fixes_failing is not False

    @property
    def part_of_fix(self) -> bool:
        """It fixes some related tests that failed on the original and leaves others failing."""
        return bool(self.fixed and self.unfixed)

    @property
    def evidenced(self) -> bool:
        """Some test shows the patch fixes something, not only that it breaks nothing."""
        return bool(self.fixes_failing or self.reproduces or self.fixed)


def related_tests(index: RepoIndex, files: Sequence[str]) -> list[str]:
    """Test files that import one of `files`' modules or are named after one (test_<stem>.py)."""
    modules = {module_name(index.root, f) for f in files}
    stems = {Path(f).stem for f in files}
    found: list[str] = []
    for test in (f for f in index.files() if is_test_file(f) and Path(f).name.startswith("test")):
        imports = set(imported_modules(index.source(test)))
        named = named_after(test, stems)
        if named or imports & modules or any(i.startswith(m + ".") for i in imports for m in modules):
            found.append(test)
    return sorted(found, key=lambda t: (not named_after(t, stems), t))[:MAX_RELATED_TEST_FILES]


DOCTEST_ADDOPTS = "--doctest-modules"
"""pytest's option that collects the docstring examples of the .py files it is given (`doctest_modules`)."""
DOCTEST_RE = re.compile(r"^\s*>>> ", re.MULTILINE)


def doctest_modules(index: RepoIndex, files: Sequence[str]) -> list[str]:
    """Of `files`, the source modules (no test files) with a docstring example (`>>> `) in them: related tests when
    run with `DOCTEST_ADDOPTS` (`doctest_fallback`, `doctest_always`)."""
    sources = [f for f in files if f.endswith(".py") and not is_test_file(f)]
    return [f for f in sources if DOCTEST_RE.search(index.source(f).decode("utf-8", errors="replace"))]


def with_addopts(env: Mapping[str, str], options: str) -> dict[str, str]:
    """`env` with `options` appended to its PYTEST_ADDOPTS (every pytest run in that environment takes them)."""
    joined = " ".join(part for part in (env.get("PYTEST_ADDOPTS", ""), options) if part)
    return {**env, "PYTEST_ADDOPTS": joined}


def named_after(test: str, stems: Collection[str]) -> bool:
    """Whether test file `test` is named after one of the source `stems` (test_<stem>.py)."""
    return Path(test).stem.removeprefix("test_") in stems


def collect_only(root: Path, sandbox: Sandbox, targets: Sequence[str], timeout_s: float) -> Completed:
    """pytest's `--collect-only` of `targets` in the sandbox, on the copy at `root` (nothing runs but imports)."""
    argv = [sandbox.python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", f"--rootdir={root}"]
    return sandbox.run([*argv, "--", *targets], root, timeout_s, writable=root, env=sandbox.env_for(root))


def run_tests(
    workspace: Workspace,
    sandbox: Sandbox,
    targets: Sequence[str],
    extra_paths: Sequence[str] = (),
    timeout_s: float = TESTS_TIMEOUT_S,
) -> TestOutcomes:
    """Run pytest on `targets` (and test files outside the repo) and read each test's outcome from junit XML."""
    if not targets and not extra_paths:
        return TestOutcomes(frozenset(), frozenset(), False)
    with tempfile.TemporaryDirectory(prefix="snaffle-validate-", dir=sandbox.scratch) as tmp:
        junit = Path(tmp) / "junit.xml"
        env = sandbox.env_for(workspace.root)
        command = [
            sandbox.python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "--continue-on-collection-errors",
            f"--rootdir={workspace.root}",
            *targets,
            *extra_paths,
        ]
        done = sandbox.run(command, workspace.root, timeout_s, writable=workspace.root, env=env)
        return replace(read_junit(junit), stopped=stopped_by(done, sandbox, timeout_s))


def stopped_by(done: Completed, sandbox: Sandbox, timeout_s: float) -> str:
    """Why a test run ended before pytest did, in a few words ('' when pytest ended)."""
    if done.memory_exceeded:
        return f"killed at the memory cap of {sandbox.memory_mb} MB"
    if done.disk_exceeded:
        return f"stopped at the disk budget of {sandbox.disk_mb} MB"
    return f"stopped after {timeout_s:g} s" if done.timed_out else ""


def read_junit(path: Path) -> TestOutcomes:
    cases = read_cases(path)
    if cases is None:
        return TestOutcomes(frozenset(), frozenset(), False)
    names = {c: f"{c.classname}::{c.name}" for c in cases}
    return TestOutcomes(
        passed=frozenset(names[c] for c in cases if c.outcome == "passed"),
        failed=frozenset(names[c] for c in cases if c.failed),
        ran=True,
        errored=frozenset(names[c] for c in cases if c.outcome == "error"),
    )


def normalized_key(workspace: Workspace, patch: str) -> str:
    """A digest of the patched files with what cannot change behaviour normalized away (agentless/normalize.py)."""
    if not patch.strip():
        return "empty"
    parts = []
    for path in sorted(patched_files(patch)):
        file = workspace.root / path
        source = file.read_text(encoding="utf-8", errors="replace") if file.exists() else ""
        package = module_name(workspace.root, path).split(".")[0] if Path(path).name == "__init__.py" else None
        text = normalize_source(source, package) if path.endswith(".py") else source
        parts.append(f"{path}\n{text}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def patched_files(patch: str) -> list[str]:
    """Paths a git patch changes: the new side, or the old side for deleted files."""
    lines = patch.splitlines()
    found = []
    for old, new in zip(lines, lines[1:], strict=False):
        if old.startswith("--- ") and new.startswith("+++ "):
            found.append(new[6:] if new.startswith("+++ b/") else old[6:])
    return found


def unguarded(before: TestOutcomes, related: Sequence[str], files: Sequence[str]) -> list[str]:
    """The related test files named after a patched file (`named_after`: test_core.py for core.py) that `before`
    could not collect (pytest's collection error for tests/test_core.py is `::tests.test_core`): their tests never
    ran, so nothing checked what else the patch changes in that file."""
    stems = {Path(path).stem for path in files if path.endswith(".py")}
    errored = {name.removeprefix("::") for name in before.errored if name.startswith("::")}
    return sorted(t for t in related if named_after(t, stems) and t.removesuffix(".py").replace("/", ".") in errored)


def changed_lines(patch: str) -> int:
    return sum(1 for line in patch.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---"))


def select(candidates: Sequence[CandidatePatch]) -> CandidatePatch | None:
    """Among valid candidates: the least evidence left failing, then the most evidence passing (the failing test,
    the reproduction test, the issue's snippets), then more related tests that failed before and pass now, then
    the majority of behaviour-normalized patches, then the fewest changed lines, then the lowest sample number."""
    valid = [c for c in candidates if c.valid]
    if not valid:
        return None
    votes = Counter(c.key for c in valid)
    return min(valid, key=lambda c: (*evidence_rank(c), -votes[c.key], c.changed_lines, c.sample))


def evidence_rank(candidate: CandidatePatch) -> tuple[int, int, int]:
    """What the evidence says of a candidate, best lowest: left failing, passing, related tests newly passing."""
    return len(candidate.against), -len(candidate.passed), -candidate.fixed


def evidence_named(
    fixes_failing: bool | None, reproduces: bool | None, others: Sequence[tuple[str, bool | None]], passed: bool
) -> tuple[str, ...]:
    """The names of the evidence whose verdict is `passed` (False: left failing): the given failing test, the kept
    reproduction test, and any other evidence (a snippet, failing existing tests); `None` (could not tell) is
    neither."""
    named = [("failing_test", fixes_failing), ("reproduction", reproduces), *others]
    return tuple(name for name, verdict in named if verdict is passed)


@dataclass(frozen=True)
class Ending:
    """How an agentless run ends, from what validation found of the chosen patch."""

    status: str
    message: str
    keep: bool
    """The chosen patch stays in the run's copy (patch.diff); `--apply` writes it only for `validated`/`submitted`."""


OVERRIDABLE_EVIDENCE = frozenset({"reproduction"})
"""Evidence a related test that now passes outweighs: the model wrote the reproduction test, and it can be wrong.
The issue's own snippets (what the user ran and expected) are outweighed only by the given failing test."""


def ending(chosen: CandidatePatch | None, samples: int, veto: bool) -> Ending:
    """`validated`: a test or snippet shows the fix and none that reproduced the issue still fails (or the given
    failing test passes; or a related test that failed before now passes and only the model's reproduction test
    still fails); `submitted`: nothing broke, nothing shows the fix either way; `no_valid_patch`: no candidate was
    valid, or the chosen one leaves reproduced evidence failing. That patch is kept as the best guess unless `veto`
    drops it."""
    if chosen is None:
        return Ending("no_valid_patch", f"none of {samples} samples passed validation", False)
    binding = [name for name in chosen.against if name not in OVERRIDABLE_EVIDENCE]
    if chosen.against and not chosen.fixes_failing and (binding or not chosen.fixed):
        failing = ", ".join(chosen.against)
        kept = "dropped" if veto else "kept in patch.diff as a best guess, not applied"
        return Ending(
            "no_valid_patch",
            f"{chosen.label} leaves the reproduced failure failing ({failing}): {kept}",
            not veto,
        )
    if chosen.evidenced:
        return Ending("validated", f"{chosen.label} selected: tests show the fix", True)
    return Ending("submitted", f"{chosen.label} selected: no test shows the fix; nothing it touches broke", True)
