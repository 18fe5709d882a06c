"""The adapter contract: snaffle's arms and mini-swe-agent, driven by the scripted model on real git repos."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from snaffle.adapters import AdapterSpec, ArmAdapter, MiniSweAgentAdapter, build_adapter
from snaffle.adapters.mini_trajectory import MiniConverter, exit_status
from snaffle.exceptions import UserError
from snaffle.swebench.batch import BatchConfig, run_batch
from snaffle.swebench.instances import load_instances
from snaffle.swebench.progress import LineProgress
from snaffle.swebench.workspaces import Sources
from snaffle.trajectory import FORMAT, read_trajectory
from snaffle.types import Limits, Task
from tests.helpers import CALC_ISSUE, FIX_SCRIPT, Start
from tests.swebench_helpers import (
    FIX_COMMAND,
    assert_hidden_fields_unseen,
    make_mirror,
    read_jsonl,
    three_instances,
    write_jsonl,
)

EVENT_TYPES = {
    "header",
    "model_call",
    "retry",
    "tool_call",
    "gate",
    "tool_result",
    "collapse",
    "compaction",
    "stage",
    "exit",
}


def check_schema(path: Path) -> list[dict[str, Any]]:
    """The snaffle-trajectory/1 invariants every adapter's trajectory keeps."""
    trajectory = read_trajectory(path)
    events = list(trajectory.events)
    assert events[0]["type"] == "header" and events[0]["format"] == FORMAT
    assert events[-1]["type"] == "exit" and not trajectory.torn
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert {e["type"] for e in events} <= EVENT_TYPES
    calls = [e["id"] for e in events if e["type"] == "tool_call"]
    assert [e["call_id"] for e in events if e["type"] == "tool_result"] == calls
    turns = [e["turn"] for e in events if e["type"] == "model_call"]
    assert turns == list(range(1, len(turns) + 1))
    return events


def test_arm_adapter_runs_the_minimal_arm(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted(FIX_SCRIPT)
    adapter = build_adapter(AdapterSpec("minimal", "scripted"), tmp_path / "run")
    assert isinstance(adapter, ArmAdapter) and adapter.name == "minimal"
    attempt = adapter.run(Task(tmp_path, CALC_ISSUE, "calc-1"), calc_repo, Limits(max_turns=10), server.base_url)
    assert attempt.exit_status == "submitted" and "+    return a + b" in attempt.patch
    assert attempt.trajectory_path == tmp_path / "run" / "trajectory.jsonl"
    events = check_schema(attempt.trajectory_path)
    assert events[0]["task"]["repo"] == str(calc_repo) and events[0]["arm"] == "minimal"
    assert json.loads((tmp_path / "run" / "result.json").read_text())["instance_id"] == "calc-1"


def test_arm_name_is_passed_through_to_the_harness(calc_repo: Path, tmp_path: Path) -> None:
    adapter = build_adapter(AdapterSpec("no-such-arm", "m"), tmp_path / "run")
    with pytest.raises(UserError, match="no-such-arm"):
        adapter.run(Task(calc_repo, CALC_ISSUE), calc_repo, Limits(), "http://127.0.0.1:9/v1")
    assert isinstance(build_adapter(AdapterSpec("mini-swe-agent", "m"), tmp_path), MiniSweAgentAdapter)


def mini_traj(exit_extra: dict[str, Any]) -> dict[str, Any]:
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 40}}
    call = {"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    return {
        "info": {"exit_status": exit_extra.get("exit_status"), "model_stats": {"api_calls": 2}},
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task", "extra": {}},
            {
                "role": "assistant",
                "content": "look",
                "tool_calls": [call],
                "extra": {
                    "actions": [{"command": "ls", "tool_call_id": "call_a"}],
                    "cost": 0.5,
                    "timestamp": 10.0,
                    "response": {"usage": usage, "choices": [{"finish_reason": "tool_calls"}]},
                },
            },
            {
                "role": "tool",
                "tool_call_id": "call_a",
                "content": "a.py",
                "extra": {"raw_output": "a.py", "returncode": 0, "timestamp": 11.0},
            },
            {"role": "assistant", "content": "no call", "extra": {"timestamp": 13.5, "response": {"usage": usage}}},
            {"role": "user", "content": "Format error", "extra": {"interrupt_type": "FormatError"}},
            {"role": "exit", "content": "", "extra": exit_extra},
        ],
    }


def test_mini_trajectory_converts_to_snaffle_events() -> None:
    data = mini_traj({"exit_status": "Submitted", "submission": ""})
    events = MiniConverter(data["messages"]).convert()
    assert [e["type"] for e in events] == ["model_call", "tool_call", "tool_result", "model_call", "gate"]
    first, call, result, second = events[:4]
    assert [m["role"] for m in first["messages_delta"]] == ["system", "user"] and first["latency_s"] == 0.0
    assert first["usage"] == {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "cached_tokens": 40,
        "reasoning_tokens": 0,
        "dollars": 0.5,
    }
    assert call["id"] == result["call_id"] == "call_a" and call["arguments"] == {"command": "ls"}
    assert result["ok"] is True and result["output"] == "a.py"
    assert second["latency_s"] == 2.5 and second["cumulative"]["prompt_tokens"] == 200
    assert [m["role"] for m in second["messages_delta"]] == ["tool"]
    assert all("extra" not in m for m in first["messages_delta"])


@pytest.mark.parametrize(
    ("status", "calls", "exception", "expected"),
    [
        ("Submitted", 1, "", "submitted"),
        ("LimitsExceeded", 5, "", "max_turns_exceeded"),
        ("LimitsExceeded", 2, "", "budget_exceeded"),
        ("TimeExceeded", 1, "", "timeout"),
        ("RepeatedFormatError", 3, "", "malformed_tool_calls"),
        ("RateLimitError", 1, "budget_exceeded", "budget_exceeded"),
        ("APIConnectionError", 1, "refused", "model_error"),
        ("", 0, "", "interrupted"),
    ],
)
def test_mini_exit_statuses(status: str, calls: int, exception: str, expected: str) -> None:
    info = {"exit_status": status, "model_stats": {"api_calls": calls}}
    assert exit_status(info, exception, step_limit=5) == expected


def test_mini_swe_agent_in_a_batch(tmp_path: Path, scripted: Start) -> None:
    pytest.importorskip("minisweagent")
    mirror, commits = make_mirror(tmp_path)
    submit = {"name": "bash", "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}
    server = scripted(
        [
            {
                "content": "Fix, then submit.",
                "tool_calls": [{"name": "bash", "arguments": {"command": FIX_COMMAND}}, submit],
            }
        ]
    )
    instances = load_instances(write_jsonl(tmp_path / "i.jsonl", three_instances(commits)[:1]))
    config = BatchConfig(
        instances,
        AdapterSpec("mini-swe-agent", "scripted"),
        server.base_url,
        tmp_path / "out",
        Limits(max_turns=5, timeout_s=120),
        Sources(mirror),
    )
    summary = run_batch(config, LineProgress(io.StringIO()))
    assert summary.statuses == {"acme__calc-1": "submitted"}
    (row,) = read_jsonl(tmp_path / "out" / "predictions.jsonl")
    assert "+    return a + b" in row["model_patch"]
    assert row["model_name_or_path"] == "snaffle-mini-swe-agent__scripted"
    run_dir = tmp_path / "out" / "acme__calc-1"
    events = check_schema(run_dir / "trajectory.jsonl")
    assert events[0]["arm"] == "mini-swe-agent" and events[-1]["status"] == "submitted"
    assert [e["name"] for e in events if e["type"] == "tool_call"] == ["bash", "bash"]
    assert (run_dir / "mini.traj.json").is_file() and (run_dir / "patch.diff").read_text() == row["model_patch"]
    assert_hidden_fields_unseen([r.body for r in server.requests])
    if importlib.util.find_spec("snaffle.trace") is not None:
        shown = subprocess.run(
            [sys.executable, "-m", "snaffle.trace.cli", "trace", "show", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0 and "submitted" in shown.stdout, shown.stderr
