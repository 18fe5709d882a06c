"""Records passed between snaffle's boundaries, and the seams (Protocols) they plug into."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol

Message = dict[str, Any]
"""An OpenAI chat message, kept as a plain dict: it is a wire format."""

Event = dict[str, Any]
"""One trajectory line, kept as a plain dict: it is a wire format."""


@dataclass(frozen=True)
class Usage:
    """Token and dollar usage of one model call, or a sum of them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    dollars: float = 0.0
    """Dollars of the priced calls; `known_dollars` is None when any call's price is unknown."""
    unpriced: int = 0
    """Calls whose model has no known price (their cost is unknown, never counted as $0)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.dollars + other.dollars,
            self.unpriced + other.unpriced,
        )

    def with_dollars(self, dollars: float | None) -> Usage:
        """This call's usage priced at `dollars` (None: its price is unknown)."""
        return replace(self, dollars=dollars or 0.0, unpriced=int(dollars is None))

    @property
    def known_dollars(self) -> float | None:
        """The dollars, or None when a call's price is unknown."""
        return None if self.unpriced else self.dollars

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "dollars": None if self.unpriced else round(self.dollars, 8),
        }


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for; `error` is set when its arguments could not be decoded."""

    id: str
    name: str
    arguments: Mapping[str, Any]
    error: str | None = None
    raw_arguments: str = ""


@dataclass(frozen=True)
class ToolResult:
    """The observation bound to one tool call."""

    call_id: str
    name: str
    output: str
    ok: bool = True
    changed: bool = False


@dataclass(frozen=True)
class ModelReply:
    """One decoded chat-completions response."""

    content: str
    tool_calls: tuple[ToolCall, ...]
    reasoning: str | None
    usage: Usage
    latency_s: float
    finish_reason: str | None
    protocol: str
    """`native` when the server returned `tool_calls`, `text` when they were parsed from the content."""
    shim: Mapping[str, Any] = field(default_factory=dict)
    """Cumulative usage reported by the metering shim's `x-snaffle-*` headers, when present."""


@dataclass(frozen=True)
class GateResult:
    """A gate's verdict on a proposed change: `ok`, or the reason it was refused."""

    gate: str
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class ToolRun:
    """What one tool call produced: the observation, and the gate decisions taken while it ran."""

    output: str
    gates: tuple[GateResult, ...] = ()


@dataclass(frozen=True)
class Limits:
    """Hard caps of one run; 0 means off."""

    max_turns: int = 0
    max_tokens: int = 0
    max_dollars: float = 0.0
    timeout_s: float = 0.0


@dataclass(frozen=True)
class Mechanisms:
    """snaffle's mechanisms, each switchable off for ablations (`bench/ab_bench.py --ablate NAME`)."""

    lint_gate: bool = True
    evidence_gate: bool = True
    test_file_guard: bool = True
    stop_after_green: bool = True
    collapse: bool = True
    compaction: bool = True
    skeletons: bool = True
    sbfl: bool = True
    sampling: bool = True
    reproduction: bool = True
    issue_facts: bool = True
    execution_localize: bool = True
    failing_existing: bool = True
    snippet_evidence: bool = True
    snippet_test: bool = True
    reproduce_facts: bool = True
    call_trace: bool = True
    call_expected: bool = True
    value_origin: bool = True
    """The execution-grounded ones above are on when data/agentless.toml [mechanisms] says so, unless ablated."""

    def without(self, name: str) -> Mechanisms:
        """The same mechanisms with `name` switched off."""
        if name not in MECHANISMS:
            raise ValueError(f"unknown mechanism {name!r}; one of: {', '.join(MECHANISMS)}")
        return replace(self, **{name: False})


MECHANISMS = tuple(f.name for f in fields(Mechanisms))

SOURCE_DIRS = ("src", "lib")
"""Directories that hold a repository's packages in a src layout (not packages themselves)."""
ALL_MECHANISMS = Mechanisms()


@dataclass(frozen=True)
class Task:
    """What to solve: a repository and an issue text."""

    repo: Path
    issue: str
    instance_id: str = "task"
    failing_test: str | None = None


@dataclass(frozen=True)
class Attempt:
    """What an adapter returns for one task."""

    patch: str
    exit_status: str
    trajectory_path: Path
    usage: Usage


class Model(Protocol):
    """The model boundary: one chat-completions call, retried and decoded."""

    @property
    def name(self) -> str: ...

    @property
    def protocol(self) -> str:
        """How tool calls travel: `native` (the request's `tools`) or `text` (described in the system prompt)."""

    def complete(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> ModelReply: ...


class Toolbox(Protocol):
    """The execution boundary the loop calls: schemas to offer, a check before anything runs, the run itself.

    `run` raises `snaffle.tools.ToolFailure` (carrying its gates) when the tool could not do what was asked."""

    def schemas(self) -> list[Mapping[str, Any]]: ...

    def check(self, call: ToolCall) -> str | None: ...

    def run(self, call: ToolCall) -> ToolRun: ...


class TrajectorySink(Protocol):
    """Where trajectory events go, one at a time, durably."""

    def write(self, event: Event) -> None: ...

    def close(self) -> None: ...


class Adapter(Protocol):
    """Runs one harness (snaffle's arms or an external CLI) on one task."""

    name: str

    def run(self, task: Task, workdir: Path, limits: Limits, base_url: str) -> Attempt: ...
