"""The observation policy: older tool results collapse to one labelled line; compaction when the context is full.

Collapsing rewrites history, which costs the server its cached prefix from that point on. So it happens in batches:
only when more than `keep_full + batch` observations are whole, down to `keep_full`. Between batches the history
only grows and the prefix cache holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from snaffle.model import tokens
from snaffle.trajectory import collapse_event, compaction_event
from snaffle.types import Event, Mechanisms, Message, ToolCall, ToolResult

COLLAPSED = "[collapsed]"
SUMMARY = "[summary]"
KEEP_ASSISTANT_CHARS = 300


@dataclass(frozen=True)
class PolicyConfig:
    """When to collapse and compact; 0 turns a mechanism off."""

    keep_full: int = 4
    batch: int = 4
    context_window: int = 32_768
    compact_at: float = 0.8


def policy_for(mechanisms: Mechanisms) -> PolicyConfig:
    """The default policy, with collapse or compaction off when an ablation switches them off."""
    default = PolicyConfig()
    return PolicyConfig(
        keep_full=default.keep_full if mechanisms.collapse else 0,
        compact_at=default.compact_at if mechanisms.compaction else 0.0,
    )


@dataclass
class _Observation:
    index: int
    part: int
    call: ToolCall
    result: ToolResult
    collapsed: bool = False


class ObservationPolicy:
    """Tracks which messages hold observations and shrinks the oldest ones when the policy says so."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self._seen: list[_Observation] = []

    def track(self, first_index: int, calls: Sequence[ToolCall], results: Sequence[ToolResult], native: bool) -> None:
        """Remember where this turn's results sit: one message each (native) or parts of one message (text)."""
        for part, (call, result) in enumerate(zip(calls, results, strict=True)):
            self._seen.append(_Observation(first_index + part if native else first_index, part, call, result))

    def collapse(self, messages: list[Message], turn: int) -> list[Event]:
        """Collapse old observations in one batch; returns one `collapse` event each."""
        whole = [o for o in self._seen if not o.collapsed]
        keep, batch = self.config.keep_full, self.config.batch
        if not keep or len(whole) <= keep + batch:
            return []
        return [self._collapse_one(messages, o, turn) for o in whole[: len(whole) - keep]]

    def compact(self, messages: list[Message], turn: int, estimate: Callable[[list[Message]], int]) -> list[Event]:
        """Deterministic compaction when the estimated context passes `compact_at` of the window: its `collapse`
        events, then one `compaction` event; nothing when under the threshold."""
        limit = int(self.config.context_window * self.config.compact_at)
        before = estimate(messages)
        if not self.config.compact_at or before <= limit:
            return []
        events = [self._collapse_one(messages, o, turn) for o in [o for o in self._seen if not o.collapsed][:-1]]
        shortened = _shorten_old_assistant_turns(messages)
        after = estimate(messages)
        summary = f"{SUMMARY} collapsed {len(events)} older observations; shortened {shortened} older replies"
        return [*events, compaction_event(turn, before, after, summary)]

    def _collapse_one(self, messages: list[Message], observation: _Observation, turn: int) -> Event:
        label = collapse_label(observation.call, observation.result)
        message = messages[observation.index]
        if message["role"] == "tool":
            message["content"] = label
        else:
            message["content"] = _replace_part(str(message["content"]), observation.part, label)
        observation.collapsed = True
        return collapse_event(turn, observation.call.id, observation.call.name, label)


def collapse_label(call: ToolCall, result: ToolResult) -> str:
    """One line that stands for an observation: `[collapsed] read_entity a.py::f (64 lines)`."""
    arguments = " ".join(str(v) for v in call.arguments.values() if isinstance(v, str | int))
    arguments = arguments if len(arguments) <= 80 else arguments[:77] + "..."
    return f"{COLLAPSED} {call.name} {arguments} ({len(result.output.splitlines())} lines)"


def _replace_part(content: str, part: int, label: str) -> str:
    blocks = content.split("</tool_response>")
    if part < len(blocks) - 1:
        lead = "\n" if part else ""
        blocks[part] = f"{lead}<tool_response>\n{label}\n"
    return "</tool_response>".join(blocks)


def _shorten_old_assistant_turns(messages: list[Message], keep_last: int = 2) -> int:
    assistants = [m for m in messages if m["role"] == "assistant"][:-keep_last]
    shortened = 0
    for message in assistants:
        content = str(message.get("content") or "")
        if len(content) > KEEP_ASSISTANT_CHARS and not content.startswith(SUMMARY):
            message["content"] = f"{SUMMARY} {content[:KEEP_ASSISTANT_CHARS]}..."
            shortened += 1
    return shortened


def estimate_context(messages: list[Message]) -> int:
    """Estimated prompt tokens of the messages (cl100k; an estimate, not the server's count)."""
    return tokens.count_messages(messages)
