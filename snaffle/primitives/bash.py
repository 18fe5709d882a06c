"""`bash`, the control arm's shell: one command in the repository root through the sandbox."""

from __future__ import annotations

from snaffle.sandbox import BASH_TIMEOUT_S, OUTPUT_CAP, Sandbox, time_left
from snaffle.workspace import Workspace


class Bash:
    """The control arm's shell: confined in the sandbox, writing only the copy; its process tree ends with it."""

    def __init__(self, workspace: Workspace, sandbox: Sandbox, deadline: float | None) -> None:
        self.workspace, self.sandbox, self.deadline = workspace, sandbox, deadline

    def bash(self, command: str) -> str:
        """Run a bash command in the repository root and return its output (stdout and stderr, cut if long).

        Args:
          command: the command line to run
        """
        timeout = time_left(BASH_TIMEOUT_S, self.deadline)
        root = self.workspace.root
        done = self.sandbox.run(command, root, timeout, writable=root, output_cap=OUTPUT_CAP)
        output = done.output if done.output.strip() else "(no output)"
        if done.timed_out:
            return f"{output}\n[timed out after {timeout:.0f} s; the process group was killed]"
        return output if done.returncode == 0 else f"{output}\n[exit code {done.returncode}]"
