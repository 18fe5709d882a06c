"""The trajectory file: one flushed line per event, torn last lines tolerated, secrets redacted; one builder per
event type, matching docs/trajectory.md, and no event assembled anywhere else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import snaffle
from snaffle import trajectory
from snaffle.exceptions import StateError
from snaffle.trajectory import (
    FORMAT,
    TrajectoryWriter,
    collapse_event,
    compaction_event,
    exit_event,
    gate_event,
    header_event,
    model_call_event,
    read_trajectory,
    retry_event,
    stage_event,
    tool_call_event,
    tool_result_event,
)
from snaffle.types import Event, GateResult, Limits, ModelReply, Task, ToolCall, ToolResult, Usage

PACKAGE = Path(snaffle.__file__).parent
DOCS = (PACKAGE.parent / "docs" / "trajectory.md").read_text(encoding="utf-8")
ROWS = dict(re.findall(r"^\| `(\w+)` \| (.+) \|$", DOCS, re.MULTILINE))
"""Each documented event type and its fields column."""
CALL = ToolCall("c1", "bash", {"command": "ls"}, raw_arguments='{"command": "ls"}')


def test_lines_are_numbered_flushed_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = TrajectoryWriter(path, secrets=("sk-secret-1234",))
    writer.write({"type": "header", "format": FORMAT})
    writer.write({"type": "model_call", "note": "key sk-secret-1234 here"})
    assert len(path.read_text().splitlines()) == 2  # visible before close: flushed per line
    writer.close()
    trajectory = read_trajectory(path)
    assert [e["seq"] for e in trajectory.events] == [0, 1] and not trajectory.torn
    assert trajectory.events[1]["note"] == "key [redacted] here"


def test_a_torn_last_line_is_skipped_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"type": "header"}\n{"type": "model_call", "tur')
    trajectory = read_trajectory(path)
    assert trajectory.torn and len(trajectory.events) == 1 and trajectory.header is not None


def test_a_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"type": "header"}\n{broken\n{"type": "exit"}\n')
    with pytest.raises(ValueError, match=":2: corrupt"):
        read_trajectory(path)


def test_a_failed_save_is_a_state_error(tmp_path: Path) -> None:
    writer = TrajectoryWriter(tmp_path / "t.jsonl")
    writer.close()
    with pytest.raises(StateError):
        writer.write({"type": "model_call"})
    with pytest.raises(StateError):
        TrajectoryWriter(Path("/proc/forbidden/t.jsonl"))


def test_a_trajectory_is_never_appended_to(tmp_path: Path) -> None:
    TrajectoryWriter(tmp_path / "t.jsonl").close()
    with pytest.raises(StateError, match="a run directory holds one run"):
        TrajectoryWriter(tmp_path / "t.jsonl")


def test_every_writer_redacts_the_same_way(tmp_path: Path) -> None:
    key, short = "sk-the-key-0123", "abc"
    assert trajectory.redact(f"a {key} b sk-the-key-0123456 {short}", [key, f"{key}456", short]) == (
        f"a [redacted] b [redacted] {short}"
    )
    assert trajectory.redact_bytes(f"\0{key}".encode(), [key]) == b"\0[redacted]"
    writer = TrajectoryWriter(tmp_path / "t.jsonl", (key,))
    writer.write({"type": "stage", "decision": key})
    writer.close()
    assert trajectory.write_patch(tmp_path, f"+{key}\n", [key]) == "+[redacted]\n"
    trajectory.write_result(tmp_path, {"message": key}, [key])
    for name in ("t.jsonl", "patch.diff", "result.json"):
        text = (tmp_path / name).read_text()
        assert key not in text and "[redacted]" in text, name


def documented_fields(kind: str) -> set[str]:
    """The top-level fields docs/trajectory.md names for an event type (nested ones and notes left out)."""
    text = ROWS[kind].split(" plus stage-specific")[0]
    while True:
        shorter = re.sub(r"\([^()]*\)|\[[^\[\]]*\]|\{[^{}]*\}", "", text)
        if shorter == text:
            return set(re.findall(r"`(\w+)`", text))
        text = shorter


def one_of_each() -> dict[str, Event]:
    reply = ModelReply("look", (CALL,), None, Usage(3, 1), 0.25, "tool_calls", "native")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    return {
        "header": header_event(
            Task(Path("/repo"), "issue"),
            "minimal",
            "m",
            "http://x",
            Limits(3),
            10,
            {},
            {"samples": {"value": 3, "from": "default"}},
            fixed_context={"reproduce": 8, "repair": 10},
            interpreter={"path": "/usr/bin/python3", "version": "3.11.7", "chosen": "snaffle's own"},
        ),
        "model_call": model_call_event(1, messages, 1, reply, Usage(3, 1), {"turns": 1}, stage="reproduce"),
        "retry": retry_event(1, "APIConnectionError: refused", 1.23456),
        "tool_call": tool_call_event(1, CALL, None),
        "gate": gate_event(1, "c1", GateResult("lint", False, "syntax error")),
        "tool_result": tool_result_event(1, ToolResult("c1", "bash", "a.py"), 0.1),
        "collapse": collapse_event(2, "c1", "bash", "[collapsed] bash ls (1 lines)"),
        "compaction": compaction_event(2, 100, 50, "[summary] collapsed 1 older observations"),
        "stage": stage_event("select", "sample 0", votes={"k": 1}, test_runs=2),
        "exit": exit_event("submitted", "the model wrote DONE", "", {"turns": 1}),
    }


def test_one_builder_per_documented_event_type_with_the_documented_fields() -> None:
    events = one_of_each()
    builders = {name.removesuffix("_event") for name in vars(trajectory) if name.endswith("_event")}
    assert set(events) == set(ROWS) == builders
    for kind, event in events.items():
        assert event["type"] == kind
        assert documented_fields(kind) <= set(event) - {"type"}
        assert kind == "stage" or documented_fields(kind) == set(event) - {"type"}, kind


def test_builders_keep_what_the_format_promises() -> None:
    events = one_of_each()
    assert FORMAT in DOCS.splitlines()[0] and events["header"]["format"] == FORMAT
    assert events["model_call"]["messages_delta"] == [{"role": "user", "content": "task"}]
    assert events["model_call"]["n_messages"] == 2 and len(events["model_call"]["messages_digest"]) == 16
    assert events["model_call"]["response"]["tool_calls"] == [
        {"id": "c1", "name": "bash", "arguments": '{"command": "ls"}'}
    ]
    assert events["tool_call"]["arguments"] == {"command": "ls"} and events["tool_call"]["valid"] is True
    rejected = tool_call_event(1, CALL, "unknown tool 'bash'")
    assert rejected["arguments"] == '{"command": "ls"}' and rejected["valid"] is False
    assert events["retry"]["wait_s"] == 1.235 and "sample" not in events["retry"]
    assert retry_event(1, "e", 0.0, sample=2)["sample"] == 2
    assert events["stage"]["votes"] == {"k": 1}


def test_no_event_is_assembled_outside_trajectory_py() -> None:
    """Every `{"type": <event type>, ...}` in the package is built by trajectory.py's builders."""
    handmade = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "trajectory.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if _event_type(node) in ROWS:
                handmade.append(f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', 0)}")
    assert handmade == []


def _event_type(node: ast.AST) -> object:
    """The constant `type` of a dict literal or a `dict(type=...)` call; None for anything else."""
    if isinstance(node, ast.Dict):
        pairs = zip(node.keys, node.values, strict=True)
        return next((v.value for k, v in pairs if _constant(k) == "type" and isinstance(v, ast.Constant)), None)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return next((_constant(k.value) for k in node.keywords if k.arg == "type"), None)
    return None


def _constant(node: ast.AST | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None
