"""The regression baseline's verdict: how many related tests were collected, passed, failed and errored before any
edit, and "no working tests: <why>" when none of them could run (so validation is known to be blind)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from snaffle.agentless.validate import TestOutcomes, collect_only
from snaffle.sandbox import Sandbox
from snaffle.workspace import Workspace

NO_WORKING_TESTS = "no working tests"
RELAXATIONS: tuple[tuple[str, str], ...] = (
    ("addopts_dropped", "-o addopts="),
    ("conftest_dropped", "-o addopts= --noconftest"),
)
"""When no related test runs, the pytest options tried next (appended to PYTEST_ADDOPTS), in order, each named by
the baseline field it sets: the repository's ini `addopts` left out (`-o` empties them; they often name a plugin
this environment lacks), then its conftest.py files too (an older repository's hook this pytest refuses,
`pytest_ignore_collect(path, ...)`, stops every test; tests that need its fixtures then error, and only the others
count)."""
WHY_TIMEOUT_S = 120.0
ERROR_LINES = (
    re.compile(r"^E\s+((?:[\w.]+(?:Error|Exception)\b|No module named\b).*)$"),
    re.compile(r"^((?:[\w.]+(?:Error|Exception)\b|.*No module named\b).*)$"),
)
"""Lines naming the error that stopped the tests, most telling first: pytest's `E   ModuleNotFoundError: ...`,
then any `...Error: ...` line (`ImportError while importing test module`, `No module named pytest`)."""


def counts(outcomes: TestOutcomes) -> dict[str, int]:
    """Collected, passed, failed (an assertion) and errored (import, collection, fixture) test counts."""
    errored = len(outcomes.errored)
    return {
        "collected": len(outcomes.passed | outcomes.failed),
        "passed": len(outcomes.passed),
        "failed": len(outcomes.failed) - errored,
        "errored": errored,
    }


def works(outcomes: TestOutcomes) -> bool:
    """Some related test ran to a verdict: it passed, or failed an assertion (an error is no verdict)."""
    return outcomes.ran and bool(outcomes.passed or outcomes.asserted)


def verdict(
    outcomes: TestOutcomes, files: Sequence[str], workspace: Workspace, sandbox: Sandbox
) -> tuple[str, dict[str, object]]:
    """The baseline stage's decision and its fields; with no working tests, why (asked of pytest once more)."""
    fields: dict[str, object] = {**counts(outcomes), "python": sandbox.python}
    if not files or works(outcomes):
        return f"{len(outcomes.passed)} passing tests in {len(files)} related files", fields
    reason = why_no_tests(workspace, sandbox, files)
    return f"{NO_WORKING_TESTS}: {reason}", {**fields, "reason": reason}


def why_no_tests(workspace: Workspace, sandbox: Sandbox, files: Sequence[str]) -> str:
    """The first error line of collecting `files` in the sandbox (e.g. an ImportError), else its last line."""
    done = collect_only(workspace.root, sandbox, files, WHY_TIMEOUT_S)
    return first_error(done.output) or f"pytest exited {done.returncode} and ran no test"


def first_error(output: str) -> str:
    """The first line of `output` that names an error, cut to 200 characters; '' when there is none."""
    lines = [line.strip() for line in output.splitlines()]
    for pattern in ERROR_LINES:
        for line in lines:
            match = pattern.match(line)
            if match:
                return match.group(1)[:200]
    return ""
