"""`bash`, the control arm's shell: one command in the repository root through the sandbox."""

from __future__ import annotations

from snaffle.sandbox import BASH_TIMEOUT_S, Sandbox, cut, run_command, time_left
from snaffle.workspace import Workspace


class Bash:
    """The control arm's shell: runs in the repo with the sandbox's environment, killed as a group on timeout."""

    def __init__(self, workspace: Workspace, sandbox: Sandbox, deadline: float | None) -> None:
        self.workspace, self.sandbox, self.deadline = workspace, sandbox, deadline

    def bash(self, command: str) -> str:
        """Run a bash command in the repository root and return its output (stdout and stderr, cut if long).

        Args:
          command: the command line to run
        """
        timeout = time_left(BASH_TIMEOUT_S, self.deadline)
        done = run_command(command, self.workspace.root, self.sandbox.env, timeout)
        output = cut(done.output) if done.output.strip() else "(no output)"
        if done.timed_out:
            return f"{output}\n[timed out after {timeout:.0f} s; the process group was killed]"
        return output if done.returncode == 0 else f"{output}\n[exit code {done.returncode}]"
