"""The `run_test` primitive: pytest through the sandbox, summarized to counts and the failing tests' tracebacks."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from snaffle.sandbox import Sandbox, time_left
from snaffle.workspace import Workspace

TEST_TIMEOUT_S = 120.0
TRACEBACK_CAP = 1_500
FAILURES_SHOWN = 3
SUMMARY_RE = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in [\d.]+s", re.MULTILINE)
FAILED_RE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


@dataclass(frozen=True)
class PytestRun:
    """A summarized pytest run, remembered with the repo state it ran on."""

    target: str
    state: str
    passed: bool
    observation: str


class PytestRunner:
    """`run_test`: pytest in a subprocess; the same target with nothing changed returns the last result, labelled."""

    def __init__(self, workspace: Workspace, sandbox: Sandbox, deadline: float | None) -> None:
        self.workspace, self.sandbox, self.deadline = workspace, sandbox, deadline
        self.last: dict[str, PytestRun] = {}

    def run_test(self, target: str) -> str:
        """Run tests with pytest and summarize: counts, then the failing tests' short tracebacks.

        Args:
          target: a pytest node id (tests/test_x.py::test_y), a test file, or "-k expression"
        """
        state = self.workspace.fingerprint()
        previous = self.last.get(target)
        if previous is not None and previous.state == state:
            return f"(unchanged since last run; not re-run)\n{previous.observation}"
        run = self.run(target, state)
        self.last[target] = run
        return run.observation

    def run(self, target: str, state: str) -> PytestRun:
        args = ["-k", target[3:].strip()] if target.startswith("-k ") else shlex.split(target)
        command = [self.sandbox.python, "-m", "pytest", "-q", "-rfE", "--tb=short", "-p", "no:cacheprovider", *args]
        root = self.workspace.root
        timeout = time_left(TEST_TIMEOUT_S, self.deadline)
        done = self.sandbox.run(command, root, timeout, writable=root, env=self.sandbox.env_for(root))
        if done.timed_out:
            return PytestRun(target, state, False, f"tests timed out after {TEST_TIMEOUT_S:.0f} s")
        return PytestRun(target, state, done.returncode == 0, summarize_pytest(done.output, done.returncode))


def summarize_pytest(output: str, returncode: int | None) -> str:
    """Counts, the failing node ids and their short tracebacks, cut to a small observation."""
    summary = SUMMARY_RE.findall(output)
    counts = summary[-1] if summary else f"no summary line (exit code {returncode})"
    if returncode == 0:
        return f"passed: {counts}"
    failed = FAILED_RE.findall(output)
    body = _failure_sections(output) or output[-TRACEBACK_CAP:]
    listed = "\n".join(failed[:10])
    return f"FAILED: {counts}\n{listed}\n{body[:TRACEBACK_CAP]}".strip()


def _failure_sections(output: str) -> str:
    marker = re.search(r"^=+ (FAILURES|ERRORS) =+$", output, re.MULTILINE)
    if marker is None:
        return ""
    section = output[marker.end() :]
    end = re.search(r"^=+ short test summary info =+$", section, re.MULTILINE)
    section = section[: end.start()] if end else section
    parts = re.split(r"^_{3,} (.+?) _{3,}$", section, flags=re.MULTILINE)
    blocks = [f"--- {parts[i]}\n{parts[i + 1].strip()[-600:]}" for i in range(1, len(parts) - 1, 2)]
    return "\n".join(blocks[:FAILURES_SHOWN])
