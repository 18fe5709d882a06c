"""`snaffle trace export --format mini-swe-agent`: real runs exported, read back through snaffle's own reader of
mini-swe-agent trajectories (the round trip keeps every call's messages, answer and usage), and opened in
mini-swe-agent's inspector."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from snaffle.adapters.mini_trajectory import MiniConverter
from snaffle.trace.cli import main
from snaffle.trajectory import read_trajectory

Runs = dict[str, Path]
ROUND_TRIP = (
    "clean",
    "redundant_test_runs",
    "malformed_storm",
    "context_pressure",
    "agentless_validated",
    "agentless_rejected",
)
CALL_FIELDS = ("messages_delta", "n_messages", "usage")


def export(capsys: pytest.CaptureFixture[str], out: Path, *runs: Path) -> list[Path]:
    assert main(["trace", "export", "--format", "mini-swe-agent", *map(str, runs), str(out)]) == 0
    assert "mini-extra inspector" in capsys.readouterr().out
    return sorted(out.rglob("*.traj.json"))


def calls_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("type") == "model_call"]


def answer(call: dict[str, Any]) -> tuple[object, ...]:
    response = call["response"]
    tool_calls = [(c["id"], c["name"], c["arguments"]) for c in response["tool_calls"]]
    return response["content"], tool_calls, response["reasoning_content"], response["finish_reason"]


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_the_export_round_trips(
    trace_runs: Runs, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    files = export(capsys, tmp_path / "out", trace_runs[name])
    events = list(read_trajectory(trace_runs[name] / "trajectory.jsonl").events)
    original = calls_of(events)
    # the digest covers the whole history: equal unless an observation was collapsed in place (the export keeps
    # what each call appended, in full) or the answers carry reasoning (mini keeps it in the message)
    same_history = not any(e["type"] in ("collapse", "compaction") for e in events) and not any(
        c["response"]["reasoning_content"] for c in original
    )
    back: list[dict[str, Any]] = []
    for file in files:
        data = json.loads(file.read_text())
        assert data["trajectory_format"] == "mini-swe-agent-1.1" and data["messages"][-1]["role"] == "exit"
        back.extend(calls_of(MiniConverter(data["messages"][:-1]).convert()))
    by_order = sorted(original, key=lambda c: (c.get("stage") is None, c.get("sample", -1)))
    assert len(back) == len(original) > 0
    for mine, theirs in zip(by_order, back, strict=True):
        assert [mine[k] for k in CALL_FIELDS] == [theirs[k] for k in CALL_FIELDS]
        assert answer(mine) == answer(theirs)
        if same_history:
            assert mine["messages_digest"] == theirs["messages_digest"]


def test_an_agentless_run_is_one_file_per_conversation(
    trace_runs: Runs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = (trace_runs["agentless_rejected"], trace_runs["clean"], trace_runs["no_edit"])
    files = export(capsys, tmp_path / "out", *runs)
    assert [f.relative_to(tmp_path / "out").as_posix() for f in files] == [
        "agentless_rejected/agentless_rejected.reproduce.traj.json",
        "agentless_rejected/agentless_rejected.sample-0.traj.json",
        "agentless_rejected/agentless_rejected.sample-1.traj.json",
        "clean/clean.traj.json",
        "no_edit/no_edit.traj.json",
    ]
    sample = json.loads(files[1].read_text())
    assert sample["info"]["exit_status"] == "invalid" and sample["info"]["model_stats"]["api_calls"] == 1
    assert "repair: applied a rewrite of calc/__init__.py::mul" in sample["messages"][-1]["content"]
    clean = json.loads(files[3].read_text())
    assert clean["info"]["exit_status"] == "submitted" and "+    return a + b" in clean["info"]["submission"]
    capped = json.loads(files[4].read_text())
    assert capped["info"]["exit_status"] == "max_turns_exceeded"
    assert capped["messages"][-2]["role"] == "tool"  # the last call's results, never sent to the model, are kept
    assert "1 failed, 1 passed" in capped["messages"][-2]["content"]


def test_export_into_a_file_is_a_user_error(
    trace_runs: Runs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["trace", "export", str(trace_runs["clean"]), str(target)]) == 2
    assert "is a file" in capsys.readouterr().err and target.read_text() == "x"


@pytest.mark.skipif(
    importlib.util.find_spec("minisweagent") is None, reason="needs mini-swe-agent (pip install mini-swe-agent)"
)
def test_mini_swe_agents_inspector_browses_the_export(
    trace_runs: Runs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from minisweagent.run.utilities.inspector import TrajectoryInspector

    files = export(capsys, tmp_path / "out", trace_runs["clean"], trace_runs["agentless_validated"])
    seen: list[tuple[str, int, str]] = []

    async def browse() -> None:
        app = TrajectoryInspector(files)
        async with app.run_test() as pilot:
            for _ in files:
                last = app.messages[-1]["extra"]["exit_status"]
                seen.append((app.current_trajectory_name, len(app.steps), last))
                await pilot.press("L")

    asyncio.run(browse())
    assert seen == [
        ("agentless_validated.reproduce.traj.json", 2, "kept"),
        ("agentless_validated.sample-0.traj.json", 2, "valid"),
        ("agentless_validated.sample-1.traj.json", 2, "invalid"),
        ("clean.traj.json", 6, "submitted"),
    ]
