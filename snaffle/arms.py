"""Arms: the prompt and tools each configuration of the loop starts with. `minimal` is the fixed control arm."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from snaffle import prompts
from snaffle.index.repo import RepoIndex
from snaffle.model import tokens
from snaffle.primitives.edit import EntityEditor
from snaffle.primitives.editor import Editor
from snaffle.primitives.reader import Reader, RepoView
from snaffle.primitives.runners import Executor, PytestRunner
from snaffle.sandbox import BASH_TIMEOUT_S, Sandbox, cut, run_command, time_left
from snaffle.tools import Registry
from snaffle.types import ALL_MECHANISMS, Mechanisms, Message
from snaffle.workspace import Workspace

STRUCTURED_EXAMPLE = {"name": "search_symbol", "arguments": {"query": "parse"}}
REPAIR_EXAMPLE = {"name": "run_test", "arguments": {"target": "tests"}}
"""Examples are real, valid calls (weak models copy them); a repair prompt uses its first candidate instead."""


@dataclass(frozen=True)
class ArmSetup:
    """What an arm hands the loop: its tools and its opening messages."""

    registry: Registry
    messages: tuple[Message, ...]

    def fixed_context_tokens(self, protocol: str) -> int:
        """System prompt plus tool schemas: what every call pays before any observation (estimate)."""
        schemas = tokens.count_schemas(self.registry.schemas()) if protocol == "native" else 0
        return tokens.count(str(self.messages[0]["content"])) + schemas


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


MINIMAL_EXAMPLE = {"name": "bash", "arguments": {"command": "ls"}}


def minimal_arm(workspace: Workspace, sandbox: Sandbox, issue: str, protocol: str, deadline: float | None) -> ArmSetup:
    """bash and str_replace_editor, the four-step prompt, and the issue."""
    registry = Registry()
    registry.register(Bash(workspace, sandbox, deadline).bash)
    registry.register(Editor(workspace).str_replace_editor)
    return ArmSetup(registry, minimal_messages(registry, issue, protocol))


def minimal_messages(registry: Registry, issue: str, protocol: str) -> tuple[Message, ...]:
    system = system_prompt(prompts.load("minimal_system.md"), registry.schemas(), protocol, MINIMAL_EXAMPLE)
    task = prompts.render(prompts.load("minimal_task.md"), issue=issue.strip())
    return ({"role": "system", "content": system}, {"role": "user", "content": task})


def structured_arm(
    workspace: Workspace,
    sandbox: Sandbox,
    issue: str,
    protocol: str,
    deadline: float | None,
    index: RepoIndex,
    mechanisms: Mechanisms = ALL_MECHANISMS,
) -> ArmSetup:
    """The six primitives instead of bash and the editor; same loop, same caps."""
    registry = Registry()
    view = RepoView(workspace, index)
    reader = Reader(view, skeletons=mechanisms.skeletons)
    for tool in (reader.read_entity, reader.search_symbol, reader.search_code,
                 EntityEditor(view, mechanisms).edit_entity,
                 PytestRunner(workspace, sandbox, deadline).run_test,
                 Executor(workspace, sandbox, deadline, isolate_network=True).execute):  # fmt: skip
        registry.register(tool)
    return ArmSetup(registry, structured_messages(registry, issue, protocol))


def structured_messages(registry: Registry, issue: str, protocol: str) -> tuple[Message, ...]:
    system = system_prompt(prompts.load("structured_system.md"), registry.schemas(), protocol, STRUCTURED_EXAMPLE)
    task = prompts.render(prompts.load("minimal_task.md"), issue=issue.strip())
    return ({"role": "system", "content": system}, {"role": "user", "content": task})


def fixed_context(arm: str, protocol: str) -> dict[str, Any]:
    """An arm's fixed context in estimated tokens, without a repository (schemas come from the signatures)."""
    registry = Registry()
    if arm == "minimal":
        registry.register(Bash.bash)
        registry.register(Editor.str_replace_editor)
        setup = ArmSetup(registry, minimal_messages(registry, "", protocol))
    elif arm == "structured":
        for tool in (Reader.read_entity, Reader.search_symbol, Reader.search_code, EntityEditor.edit_entity,
                     PytestRunner.run_test, Executor.execute):  # fmt: skip
            registry.register(tool)
        setup = ArmSetup(registry, structured_messages(registry, "", protocol))
    else:
        for tool in (Reader.read_entity, Reader.search_symbol, Reader.search_code, EntityEditor.edit_entity,
                     PytestRunner.run_test):  # fmt: skip
            registry.register(tool)
        system = system_prompt(prompts.load("repair_system.md"), registry.schemas(), protocol, REPAIR_EXAMPLE)
        setup = ArmSetup(registry, ({"role": "system", "content": system},))
    schema_tokens = tokens.count_schemas(registry.schemas()) if protocol == "native" else 0
    system_tokens = tokens.count(str(setup.messages[0]["content"]))
    return {"arm": arm, "tool_protocol": protocol, "system_tokens": system_tokens,
            "schema_tokens": schema_tokens, "fixed_context_tokens": system_tokens + schema_tokens}  # fmt: skip


def system_prompt(base: str, schemas: Sequence[Mapping[str, Any]], protocol: str, example: Mapping[str, Any]) -> str:
    """The system prompt; with the text protocol it also describes the tools and the call format."""
    if protocol != "text":
        return base.strip()
    described = "\n".join(json.dumps(schema, separators=(",", ":")) for schema in schemas)
    protocol_text = prompts.render(
        prompts.load("text_protocol.md"),
        example_name=str(example["name"]),
        example_arguments=json.dumps(example["arguments"]),
        tools=described,
    )
    return f"{base.strip()}\n\n{protocol_text.strip()}"
