"""The `execute` primitive: a Python snippet in a subprocess with rlimits, no network and a scratch directory;
changes it makes to the repository are reverted."""

from __future__ import annotations

import resource
import shutil
import sys
import tempfile
from pathlib import Path

from snaffle.sandbox import Completed, Sandbox, run_command, time_left
from snaffle.workspace import Workspace

EXECUTE_TIMEOUT_S = 30.0
EXECUTE_CPU_S = 30
EXECUTE_MEMORY_BYTES = 2 * 1024**3
EXECUTE_FILE_BYTES = 50 * 1024**2
EXECUTE_PROCESSES = 256
EXECUTE_OUTPUT_CAP = 3_000
NETWORK_GUARD = """import socket as _socket


def _blocked(*args, **kwargs):
    raise OSError("network access is disabled in snaffle's execute sandbox")


_socket.socket.connect = _blocked
_socket.socket.connect_ex = _blocked
_socket.create_connection = _blocked
_socket.getaddrinfo = _blocked
"""


class SnippetRunner:
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
