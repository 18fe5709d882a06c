"""Arms: one table (`ARMS`) of the prompts, tools, example call and loop options each arm starts with.

`minimal` is the fixed control arm; `agentless` runs the pipeline, whose repair samples run its loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from snaffle import prompts
from snaffle.exceptions import UserError
from snaffle.model import tokens
from snaffle.observations import PolicyConfig, policy_for
from snaffle.primitives.bash import Bash
from snaffle.primitives.edit import EntityEditor
from snaffle.primitives.editor import Editor
from snaffle.primitives.execute import SnippetRunner
from snaffle.primitives.reader import Reader, RepoView
from snaffle.primitives.run_test import PytestRunner
from snaffle.sandbox import Sandbox
from snaffle.tools import Registry, ToolFn, schema_of
from snaffle.types import ALL_MECHANISMS, Mechanisms, Message
from snaffle.workspace import Workspace

KEEP_WHOLE = PolicyConfig(keep_full=0, compact_at=0.0)
"""The control arm's observation policy: nothing collapsed, nothing compacted."""


@dataclass(frozen=True)
class Parts:
    """What an arm's tools are built over; `view` (the repository index) only for arms whose tools read it."""

    workspace: Workspace
    sandbox: Sandbox
    deadline: float | None
    mechanisms: Mechanisms = ALL_MECHANISMS
    view: RepoView | None = None

    def repo_view(self) -> RepoView:
        if self.view is None:
            raise ValueError("this tool reads the repository index: build the arm's Parts with a RepoView")
        return self.view


@dataclass(frozen=True)
class ToolDef:
    """A tool an arm may hold: its unbound method (the schema comes from its signature) and how to bind it."""

    method: ToolFn
    build: Callable[[Parts], ToolFn]
    indexed: bool = False
    """Whether it reads the repository index (`Parts.view`)."""

    @property
    def name(self) -> str:
        return self.method.__name__


def _reader(parts: Parts) -> Reader:
    return Reader(parts.repo_view(), skeletons=parts.mechanisms.skeletons)


def _entity_editor(parts: Parts) -> EntityEditor:
    return EntityEditor(parts.repo_view(), parts.mechanisms)


def _executor(parts: Parts) -> SnippetRunner:
    return SnippetRunner(parts.workspace, parts.sandbox, parts.deadline, isolate_network=True)


def _by_name(*tools: ToolDef) -> Mapping[str, ToolDef]:
    return MappingProxyType({tool.name: tool for tool in tools})


TOOLS = _by_name(
    ToolDef(Bash.bash, lambda p: Bash(p.workspace, p.sandbox, p.deadline).bash),
    ToolDef(Editor.str_replace_editor, lambda p: Editor(p.workspace).str_replace_editor),
    ToolDef(Reader.read_entity, lambda p: _reader(p).read_entity, indexed=True),
    ToolDef(Reader.search_symbol, lambda p: _reader(p).search_symbol, indexed=True),
    ToolDef(Reader.search_code, lambda p: _reader(p).search_code, indexed=True),
    ToolDef(EntityEditor.edit_entity, lambda p: _entity_editor(p).edit_entity, indexed=True),
    ToolDef(PytestRunner.run_test, lambda p: PytestRunner(p.workspace, p.sandbox, p.deadline).run_test),
    ToolDef(SnippetRunner.execute, lambda p: _executor(p).execute),
)
"""Every tool an arm can be given, by name."""


@dataclass(frozen=True)
class ArmSpec:
    """One arm: its prompt files, its tools (names in `TOOLS`), its example call and how it drives the loop."""

    name: str
    system_file: str
    task_file: str
    tools: tuple[str, ...]
    example: Mapping[str, Any]
    """A real, valid call (weak models copy it); a repair prompt passes its first candidate instead."""
    collapses: bool = True
    """Observations are collapsed and compacted as the mechanisms say; False keeps every one whole."""
    refuse_early_done: bool = True
    pipeline: bool = False
    """`run.solve` starts the agentless pipeline, whose repair samples run this loop."""

    @property
    def indexed(self) -> bool:
        """Whether a tool reads the repository index, so the arm needs a `RepoView`."""
        return any(TOOLS[name].indexed for name in self.tools)

    def schemas(self) -> list[Mapping[str, Any]]:
        """The tools' schemas, from the unbound methods (no repository needed)."""
        return [schema_of(TOOLS[name].method) for name in self.tools]

    def system_prompt(self, protocol: str, example: Mapping[str, Any] | None = None) -> str:
        """The system prompt; with the text protocol the tools and `example` (else the arm's own) are appended."""
        return prompts.system_prompt(prompts.load(self.system_file), self.schemas(), protocol, example or self.example)

    def messages(self, protocol: str, example: Mapping[str, Any] | None = None, **slots: str) -> tuple[Message, ...]:
        """The opening messages: the system prompt, then the task template with `slots` filled."""
        task = prompts.render(prompts.load(self.task_file), **slots)
        return ({"role": "system", "content": self.system_prompt(protocol, example)}, {"role": "user", "content": task})

    def policy(self, mechanisms: Mechanisms) -> PolicyConfig:
        """The default observation policy of this arm under `mechanisms`."""
        return policy_for(mechanisms) if self.collapses else KEEP_WHOLE

    def fixed_context(self, protocol: str) -> dict[str, Any]:
        """The fixed context every call pays, in estimated tokens: system prompt plus (native) tool schemas."""
        schema_tokens = tokens.count_schemas(self.schemas()) if protocol == "native" else 0
        system_tokens = tokens.count(self.system_prompt(protocol))
        return {
            "arm": self.name,
            "tool_protocol": protocol,
            "system_tokens": system_tokens,
            "schema_tokens": schema_tokens,
            "fixed_context_tokens": system_tokens + schema_tokens,
        }


REPAIR_TOOLS = ("read_entity", "search_symbol", "search_code", "edit_entity", "run_test")
"""The agentless arm's repair tools; the structured arm adds `execute`."""

AGENTLESS = ArmSpec(
    name="agentless",
    system_file="repair_system.md",
    task_file="repair_task.md",
    tools=REPAIR_TOOLS,
    example={"name": "run_test", "arguments": {"target": "tests"}},
    refuse_early_done=False,
    pipeline=True,
)
STRUCTURED = ArmSpec(
    name="structured",
    system_file="structured_system.md",
    task_file="minimal_task.md",
    tools=(*REPAIR_TOOLS, "execute"),
    example={"name": "search_symbol", "arguments": {"query": "parse"}},
)
MINIMAL = ArmSpec(
    name="minimal",
    system_file="minimal_system.md",
    task_file="minimal_task.md",
    tools=("bash", "str_replace_editor"),
    example={"name": "bash", "arguments": {"command": "ls"}},
    collapses=False,
)
ARMS: Mapping[str, ArmSpec] = MappingProxyType({spec.name: spec for spec in (AGENTLESS, STRUCTURED, MINIMAL)})
"""snaffle's own arms, by name."""
DEFAULT_ARM = AGENTLESS.name
"""The arm `snaffle solve` and `snaffle swebench run` use unless told otherwise."""
CONTROL = MINIMAL.name
"""The fixed control arm: the baseline the other arms are compared against."""


def arm_spec(name: str) -> ArmSpec:
    """The arm called `name`; an unknown name is a user error that lists the arms."""
    if name not in ARMS:
        raise UserError(f"unknown arm {name!r}; choose one of: {', '.join(ARMS)}")
    return ARMS[name]


@dataclass(frozen=True)
class ArmSetup:
    """What an arm hands the loop: its table entry, its tools and its opening messages."""

    spec: ArmSpec
    registry: Registry
    messages: tuple[Message, ...]


def toolbox(spec: ArmSpec, parts: Parts, registry: Registry, overrides: Mapping[str, ToolFn] | None = None) -> Registry:
    """Register the arm's tools, built over `parts`, in table order; an override must keep its tool's schema."""
    for name in spec.tools:
        tool = (overrides or {}).get(name) or TOOLS[name].build(parts)
        if schema_of(tool) != schema_of(TOOLS[name].method):
            raise ValueError(f"the override of {name} changes its schema, so the prompt would misdescribe it")
        registry.register(tool)
    return registry


def start(spec: ArmSpec, parts: Parts, registry: Registry, issue: str, protocol: str) -> ArmSetup:
    """A loop arm ready to run: its toolbox and the opening messages for `issue`."""
    return ArmSetup(spec, toolbox(spec, parts, registry), spec.messages(protocol, issue=issue.strip()))
