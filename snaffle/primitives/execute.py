"""The `execute` primitive: a Python snippet through the sandbox with rlimits and no network, in a fresh scratch
directory; under bubblewrap the working copy is read-only, so nothing it writes persists."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from snaffle import data
from snaffle.sandbox import Completed, Rlimits, Sandbox, time_left
from snaffle.workspace import Workspace

NETWORK_GUARD = """import socket as _socket


def _blocked(*args, **kwargs):
    raise OSError("network access is disabled in snaffle's execute sandbox")


_socket.socket.connect = _blocked
_socket.socket.connect_ex = _blocked
_socket.create_connection = _blocked
_socket.getaddrinfo = _blocked
"""
"""Only for `--sandbox none` without `unshare`: a courtesy that `_socket` bypasses, not a boundary."""


@dataclass(frozen=True)
class ExecuteLimits:
    """`execute`'s limits per call (`data/sandbox.toml` [execute]; every key required)."""

    timeout_s: float
    cpu_s: int
    memory_bytes: int
    file_bytes: int
    output_cap_bytes: int

    def rlimits(self) -> Rlimits:
        return Rlimits(cpu_s=self.cpu_s, memory_bytes=self.memory_bytes, file_bytes=self.file_bytes)


@cache
def execute_limits() -> ExecuteLimits:
    return data.load_record(ExecuteLimits, "sandbox.toml", "execute")


class SnippetRunner:
    """`execute`: Python in the sandbox with rlimits, no network, a fresh scratch cwd; the copy stays unchanged."""

    def __init__(
        self,
        workspace: Workspace,
        sandbox: Sandbox,
        deadline: float | None,
        isolate_network: bool,
        timeout_s: float | None = None,
    ) -> None:
        self.workspace, self.sandbox, self.deadline = workspace, sandbox, deadline
        self.unshare = isolate_network and sandbox.mode == "none" and unshare_available()
        self.limits = execute_limits()
        self.timeout_s = self.limits.timeout_s if timeout_s is None else timeout_s

    def execute(self, code: str) -> str:
        """Run a Python snippet to compute or reproduce something (not to edit files); prints are returned.

        Args:
          code: Python source; the repository's packages are importable; print what you want to see
        """
        before = self.workspace.fingerprint()
        with tempfile.TemporaryDirectory(prefix="snaffle-exec-", dir=self.sandbox.scratch) as scratch:
            done = self._run(code, Path(scratch))
        reverted = self.workspace.restore(before)
        output = done.output.strip() or "(no output)"
        status = "timed out" if done.timed_out else f"exit code {done.returncode}"
        note = f"\n[reverted changes to: {', '.join(reverted)}; use edit_entity to change files]" if reverted else ""
        return f"{output}\n[{status}]{note}"

    def _run(self, code: str, scratch: Path) -> Completed:
        guard = []
        if self.sandbox.mode == "none" and not self.unshare:
            (scratch / "guard").mkdir()
            (scratch / "guard" / "sitecustomize.py").write_text(NETWORK_GUARD)
            guard = [str(scratch / "guard")]
        env = self.sandbox.env_for(self.workspace.root, *guard)
        command = [self.sandbox.python, "-c", code]
        if self.unshare:
            command = ["unshare", "--net", "--", *command]
        timeout = time_left(self.timeout_s, self.deadline)
        root = self.workspace.root
        return self.sandbox.run(
            command,
            scratch,
            timeout,
            writable=root,
            env=env,
            limits=self.limits.rlimits(),
            output_cap=self.limits.output_cap_bytes,
            readonly=True,
        )


def unshare_available() -> bool:
    """Whether this process may create a network namespace (root, or user namespaces allowed); for mode none."""
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--net", "--", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
