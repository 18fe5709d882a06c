"""The two primitives that run code: `run_test` (pytest, summarized) and `execute` (sandboxed Python)."""

from __future__ import annotations

import re
import resource
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from snaffle.sandbox import Completed, Sandbox, run_command, time_left
from snaffle.workspace import Workspace

TEST_TIMEOUT_S = 120.0
EXECUTE_TIMEOUT_S = 30.0
EXECUTE_CPU_S = 30
EXECUTE_MEMORY_BYTES = 2 * 1024**3
EXECUTE_FILE_BYTES = 50 * 1024**2
EXECUTE_PROCESSES = 256
TRACEBACK_CAP = 1_500
FAILURES_SHOWN = 3
EXECUTE_OUTPUT_CAP = 3_000
SUMMARY_RE = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in [\d.]+s", re.MULTILINE)
FAILED_RE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)
NETWORK_GUARD = """import socket as _socket


def _blocked(*args, **kwargs):
    raise OSError("network access is disabled in snaffle's execute sandbox")


_socket.socket.connect = _blocked
_socket.socket.connect_ex = _blocked
_socket.create_connection = _blocked
_socket.getaddrinfo = _blocked
"""


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
        command = [sys.executable, "-m", "pytest", "-q", "-rfE", "--tb=short", "-p", "no:cacheprovider", *args]
        env = self.sandbox.env_for(self.workspace.root)
        done = run_command(command, self.workspace.root, env, time_left(TEST_TIMEOUT_S, self.deadline))
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


class Executor:
    """`execute`: Python in a subprocess with rlimits, no network, a scratch cwd; repo changes are reverted."""

    def __init__(
        self,
        workspace: Workspace,
        sandbox: Sandbox,
        deadline: float | None,
        isolate_network: bool,
        timeout_s: float = EXECUTE_TIMEOUT_S,
    ) -> None:
        self.workspace, self.sandbox, self.deadline = workspace, sandbox, deadline
        self.isolate_network = isolate_network and unshare_available()
        self.timeout_s = timeout_s

    def execute(self, code: str) -> str:
        """Run a Python snippet to compute or reproduce something (not to edit files); prints are returned.

        Args:
          code: Python source; the repository's packages are importable; print what you want to see
        """
        before = self.workspace.fingerprint()
        with tempfile.TemporaryDirectory(prefix="snaffle-exec-") as scratch:
            done = self._run(code, Path(scratch))
        reverted = self.workspace.restore(before)
        output = done.output.strip() or "(no output)"
        if len(output) > EXECUTE_OUTPUT_CAP:
            output = output[:EXECUTE_OUTPUT_CAP] + f"\n[... {len(output) - EXECUTE_OUTPUT_CAP} characters cut ...]"
        status = "timed out" if done.timed_out else f"exit code {done.returncode}"
        note = f"\n[reverted changes to: {', '.join(reverted)}; use edit_entity to change files]" if reverted else ""
        return f"{output}\n[{status}]{note}"

    def _run(self, code: str, scratch: Path) -> Completed:
        guard = []
        if not self.isolate_network:
            (scratch / "guard").mkdir()
            (scratch / "guard" / "sitecustomize.py").write_text(NETWORK_GUARD)
            guard = [str(scratch / "guard")]
        env = self.sandbox.env_for(self.workspace.root, *guard)
        command = [sys.executable, "-c", code]
        if self.isolate_network:
            command = ["unshare", "--net", "--", *command]
        timeout = time_left(self.timeout_s, self.deadline)
        return run_command(command, scratch, env, timeout, preexec_fn=_limits)


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (EXECUTE_CPU_S, EXECUTE_CPU_S))
    resource.setrlimit(resource.RLIMIT_AS, (EXECUTE_MEMORY_BYTES, EXECUTE_MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (EXECUTE_FILE_BYTES, EXECUTE_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_NPROC, (EXECUTE_PROCESSES, EXECUTE_PROCESSES))


def unshare_available() -> bool:
    """Whether this process may create a network namespace (root, or user namespaces allowed)."""
    if shutil.which("unshare") is None:
        return False
    done = run_command(["unshare", "--net", "--", "true"], Path("/"), {"PATH": "/usr/bin:/bin"}, 10)
    return done.returncode == 0
