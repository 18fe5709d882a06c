"""The shape of a `snaffle-trajectory/1` file and of result.json, as data, and the check every trace command reads
through: what is not such a file is a UserError naming the file, the line and what is wrong.

A field may be absent or null (unknown); when it is present it has its kind. Extra fields and unknown event types
pass, so a reader of this version still reads what a later writer of the same version adds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snaffle.exceptions import UserError
from snaffle.trajectory import FORMAT, Trajectory, read_trajectory

SNIFF_BYTES = 8192
"""How much of a file that fails to read is looked at to tell a binary file from a corrupt trajectory."""


@dataclass(frozen=True)
class Kind:
    """A JSON kind a field may hold, named as an error message says it."""

    name: str
    types: tuple[type, ...]

    def admits(self, value: object) -> bool:
        # JSON's true and false are not numbers, though Python's bool is an int
        return value is None or (isinstance(value, self.types) and (bool in self.types or not isinstance(value, bool)))


TEXT = Kind("a string", (str,))
INTEGER = Kind("an integer", (int,))
NUMBER = Kind("a number", (int, float))
FLAG = Kind("true or false", (bool,))
OBJECT = Kind("an object", (dict,))
LIST = Kind("a list", (list,))
ARGUMENTS = Kind("an object (a string only for a rejected call)", (dict, str))

Fields = Mapping[str, Kind]
USAGE: Fields = dict.fromkeys(
    ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "dollars"), NUMBER
)
COUNTS = ("turns", "elapsed_s", "tool_calls", "rejected_calls", "malformed_turns")
TOTALS: Fields = {**USAGE, **dict.fromkeys(COUNTS, NUMBER)}
EVERY_EVENT: Fields = {"type": TEXT, "seq": INTEGER, "t": NUMBER, "turn": INTEGER}
EVENTS: Mapping[str, Fields] = {
    "header": {
        "format": TEXT,
        "snaffle_version": TEXT,
        "task": OBJECT,
        "arm": TEXT,
        "model": TEXT,
        "caps": OBJECT,
        "fixed_context_tokens": NUMBER,
        "config": OBJECT,
    },
    "model_call": {
        "messages_delta": LIST,
        "n_messages": INTEGER,
        "prompt_estimate": NUMBER,
        "response": OBJECT,
        "usage": OBJECT,
        "latency_s": NUMBER,
        "cumulative": OBJECT,
        "shim": OBJECT,
    },
    "retry": {"attempt": INTEGER, "error": TEXT, "wait_s": NUMBER},
    "tool_call": {"id": TEXT, "name": TEXT, "arguments": ARGUMENTS, "valid": FLAG, "error": TEXT},
    "gate": {"call_id": TEXT, "gate": TEXT, "ok": FLAG, "reason": TEXT},
    "tool_result": {"call_id": TEXT, "name": TEXT, "output": TEXT, "ok": FLAG, "changed": FLAG, "elapsed_s": NUMBER},
    "collapse": {"call_id": TEXT, "name": TEXT, "label": TEXT},
    "compaction": {"before_tokens": NUMBER, "after_tokens": NUMBER, "summary": TEXT},
    "stage": {"stage": TEXT, "decision": TEXT},
    "exit": {"status": TEXT, "message": TEXT, "patch": TEXT, "totals": OBJECT},
}
"""Each event type's fields and their kinds (docs/trajectory.md), besides EVERY_EVENT's."""
NESTED: Mapping[str, Mapping[str, Fields]] = {
    "header": {
        "task": {"instance_id": TEXT, "repo": TEXT, "issue": TEXT},
        "caps": dict.fromkeys(("max_turns", "max_tokens", "max_dollars", "timeout_s"), NUMBER),
    },
    "model_call": {
        "response": {"content": TEXT, "reasoning_content": TEXT, "tool_calls": LIST},
        "usage": USAGE,
        "cumulative": {**USAGE, "turns": INTEGER},
    },
    "exit": {"totals": TOTALS},
}
"""The fields of an event's object-valued fields, by event type and field."""
_FIELDS: Mapping[str, Fields] = {kind: {**EVERY_EVENT, **fields} for kind, fields in EVENTS.items()}
RESULT: Fields = {
    "instance_id": TEXT,
    "arm": TEXT,
    "model": TEXT,
    "exit_status": TEXT,
    "totals": OBJECT,
    "shim": OBJECT,
    "resolved": FLAG,
}
RESULT_NESTED: Mapping[str, Fields] = {"totals": TOTALS}


def kind_of(value: object) -> str:
    """The JSON kind of a value, as an error message names it."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    for kind in (TEXT, NUMBER, OBJECT, LIST):
        if kind.admits(value):
            return kind.name
    return type(value).__name__


def field_problem(
    record: Mapping[str, Any], fields: Fields, nested: Mapping[str, Fields] | None = None, prefix: str = ""
) -> str | None:
    """The first field of `record` that does not hold its kind (`nested`: objects checked one level down), or None."""
    for name, kind in fields.items():
        value = record.get(name)
        if not kind.admits(value):
            shown = json.dumps(value)
            shown = shown if len(shown) <= 40 else shown[:39] + "…"
            return f'"{prefix}{name}" is {kind_of(value)} ({shown}), expected {kind.name}'
    for name, inner in (nested or {}).items():
        value = record.get(name)
        wrong = field_problem(value, inner, None, f"{prefix}{name}.") if isinstance(value, dict) else None
        if wrong is not None:
            return wrong
    return None


def event_problem(event: object, first: bool) -> str | None:
    """What is wrong with one decoded line of a trajectory (`first`: it must be the header), or None."""
    if not isinstance(event, dict):
        return f"expected a JSON object, got {kind_of(event)}"
    kind = event.get("type")
    if not isinstance(kind, str):
        return 'no "type" (every trajectory line has one, a string)'
    wrong = field_problem(event, _FIELDS.get(kind, EVERY_EVENT), NESTED.get(kind))
    if wrong is not None:
        return f"{kind} line: {wrong}"
    if kind == "tool_call" and event.get("valid", True) and isinstance(event.get("arguments"), str):
        return 'tool_call line: "arguments" of a valid call is a string, expected an object'
    return header_problem(event) if first else None


def header_problem(event: Mapping[str, Any]) -> str | None:
    if event.get("type") != "header":
        return f'no header: a snaffle trajectory starts with {{"type": "header", "format": "{FORMAT}"}}'
    found = event.get("format")
    if found is None:
        return f"the header names no format (this snaffle reads {FORMAT})"
    if found != FORMAT:
        return f"unsupported trajectory format {found} (this snaffle reads {FORMAT})"
    return None


def load_trajectory(path: Path) -> Trajectory:
    """Read and check a trajectory; a torn last line is skipped (and `torn` says so), anything else wrong refused."""
    try:
        trajectory = read_trajectory(path)
    except (OSError, ValueError, RecursionError) as exc:
        raise UserError(unreadable(path, exc)) from exc
    if not trajectory.events:
        raise UserError(empty(path))
    for index, event in enumerate(trajectory.events):
        wrong = event_problem(event, first=index == 0)
        if wrong is not None:
            raise UserError(f"{path}:{line_number(path, index)}: {wrong}")
    return trajectory


def unreadable(path: Path, exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return f"cannot read the trajectory {path}: {exc.strerror or exc}"
    if looks_binary(path):
        return binary(path)
    text = str(exc) or exc.__class__.__name__
    return text if text.startswith(f"{path}:") else f"{path}: {text}"


def empty(path: Path) -> str:
    """Why a file yielded no event: binary, empty, or one torn line."""
    if looks_binary(path):
        return binary(path)
    if not path.read_text(encoding="utf-8", errors="replace").strip():
        return f"{path}: empty file, not a trajectory (a trajectory starts with its header line)"
    return f"{path}:1: the only line is incomplete (torn) or not JSON; no header, so not a trajectory"


def binary(path: Path) -> str:
    return f"{path}: a binary file, not a trajectory (pass a trajectory.jsonl, a run dir or a batch dir)"


def looks_binary(path: Path) -> bool:
    """A NUL byte, or bytes that are not UTF-8, near the start (a character cut at the sniff's end aside)."""
    try:
        with path.open("rb") as file:
            head = file.read(SNIFF_BYTES)
    except OSError:
        return False
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 3
    return False


def line_number(path: Path, index: int) -> int:
    """The line of the `index`-th event: the reader skips blank lines, so count the others (only on an error)."""
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    filled = (number for number, line in enumerate(lines, start=1) if line.strip())
    return next((number for i, number in enumerate(filled) if i == index), index + 1)


def load_result(path: Path) -> dict[str, Any]:
    """A run's result.json, checked ({} when there is none)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise UserError(f"cannot read {path}: {exc}; a result.json is one JSON object (snaffle-result/1)") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path}: a result.json is a JSON object, got {kind_of(data)}")
    wrong = field_problem(data, RESULT, RESULT_NESTED)
    if wrong is not None:
        raise UserError(f"{path}: {wrong}")
    return data
