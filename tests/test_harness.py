"""The loop end to end: the minimal arm against the scripted model server on real git repos."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from snaffle.exceptions import ToolFailure
from snaffle.harness import Loop, LoopConfig
from snaffle.model.client import ModelConfig, OpenAIModel, Sleep
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.testing import ScriptedServer
from snaffle.tools import Registry
from snaffle.trajectory import TrajectoryWriter, read_trajectory
from snaffle.types import Attempt, GateResult, Limits, Task, ToolRun, Usage
from tests.helpers import CALC_ISSUE, FIX_SCRIPT, Start, bash, git, repo_tests_pass


def text_protocol(script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same script, with each tool call written in the reply as a <tool_call> block."""
    converted = []
    for entry in script:
        blocks = [f"<tool_call>{json.dumps(c)}</tool_call>" for c in entry.get("tool_calls", [])]
        converted.append({"content": "\n".join([entry.get("content", ""), *blocks]).strip()})
    return converted


def run(
    repo: Path,
    server: ScriptedServer,
    out: Path,
    limits: Limits | None = None,
    protocol: str = "native",
    pricer: Callable[[str, Usage], float] = zero_pricer,
    retry_sleep: Sleep = time.sleep,
) -> Attempt:
    model = ModelConfig(base_url=server.base_url, model="scripted", tool_protocol=protocol, retry_sleep=retry_sleep)
    config = SolveConfig("minimal", model, limits or Limits(max_turns=20), out, pricer, apply=True)
    return solve(Task(repo=repo, issue=CALC_ISSUE), config)


@pytest.mark.parametrize("protocol", ["native", "text"])
def test_minimal_arm_fixes_planted_bug(calc_repo: Path, scripted: Start, tmp_path: Path, protocol: str) -> None:
    script = FIX_SCRIPT if protocol == "native" else text_protocol(FIX_SCRIPT)
    server = scripted(script)
    out = tmp_path / "run"
    attempt = run(calc_repo, server, out, protocol=protocol)
    assert attempt.exit_status == "submitted"
    assert "+    return a + b" in attempt.patch
    assert repo_tests_pass(calc_repo)
    git(calc_repo, "stash", "-u")
    assert not repo_tests_pass(calc_repo)
    git(calc_repo, "apply", str(out / "patch.diff"))
    assert repo_tests_pass(calc_repo)
    trajectory = read_trajectory(out / "trajectory.jsonl")
    kinds = [e["type"] for e in trajectory.events]
    assert kinds[0] == "header" and kinds[-1] == "exit"
    assert kinds.count("model_call") == 5 and kinds.count("tool_call") == 4 and kinds.count("tool_result") == 4
    assert trajectory.exit is not None and trajectory.exit["status"] == "submitted"
    result = json.loads((out / "result.json").read_text())
    assert result["exit_status"] == "submitted" and result["patch_kind"] == "patch"
    first_result = next(trajectory.of_type("tool_result"))
    assert "1 failed" in first_result["output"]


def test_history_is_append_only_and_results_bind_to_call_ids(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted(FIX_SCRIPT)
    run(calc_repo, server, tmp_path / "run")
    bodies = [r.body["messages"] for r in server.requests]
    for earlier, later in zip(bodies, bodies[1:], strict=False):
        assert later[: len(earlier)] == earlier
    last = bodies[-1]
    call_ids = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    result_ids = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert call_ids == result_ids and len(call_ids) == 4


def test_temperature_sent_only_when_configured(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": "DONE", "expect": {"temperature": None}}, {"content": "DONE"}])
    attempt = run(calc_repo, server, tmp_path / "run")
    assert attempt.exit_status == "submitted"


def test_model_call_lines_carry_usage_and_cumulative(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    script = [{**e, "usage": {"prompt_tokens": 100, "completion_tokens": 10}} for e in FIX_SCRIPT]
    server = scripted(script)
    out = tmp_path / "run"
    run(calc_repo, server, out, pricer=lambda model, usage: usage.prompt_tokens * 1e-6)
    calls = list(read_trajectory(out / "trajectory.jsonl").of_type("model_call"))
    assert [c["cumulative"]["prompt_tokens"] for c in calls] == [100, 200, 300, 400, 500]
    assert calls[-1]["cumulative"]["dollars"] == pytest.approx(500e-6)
    assert all(c["latency_s"] >= 0 and c["messages_digest"] for c in calls)
    assert calls[0]["messages_delta"][0]["role"] == "system"
    assert calls[1]["messages_delta"][0]["role"] == "tool"


BASH_LS = {"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}


def statuses(out: Path) -> tuple[str, int]:
    trajectory = read_trajectory(out / "trajectory.jsonl")
    assert trajectory.exit is not None
    return trajectory.exit["status"], len(list(trajectory.of_type("model_call")))


def test_turn_cap_halts_before_the_next_call(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([bash(f"echo {i}") for i in range(5)])
    run(calc_repo, server, tmp_path / "run", Limits(max_turns=2))
    assert statuses(tmp_path / "run") == ("max_turns_exceeded", 2)
    assert server.remaining == 3


def test_token_cap_counts_prompt_and_completion(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    usage = {"prompt_tokens": 300, "completion_tokens": 50}
    server = scripted([{**bash(f"echo {i}"), "usage": usage} for i in range(5)])
    run(calc_repo, server, tmp_path / "run", Limits(max_tokens=1000))
    assert statuses(tmp_path / "run") == ("budget_exceeded", 3)


def test_dollar_cap_uses_the_pricer(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([bash(f"echo {i}") for i in range(5)])
    run(calc_repo, server, tmp_path / "run", Limits(max_dollars=0.25), pricer=lambda m, u: 0.1)
    assert statuses(tmp_path / "run") == ("budget_exceeded", 3)


def test_wall_clock_cap_cuts_a_slow_call(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([bash("echo 1"), {**bash("echo 2"), "delay": 10}])
    attempt = run(calc_repo, server, tmp_path / "run", Limits(timeout_s=2.5))
    assert attempt.exit_status == "timeout"
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["totals"]["elapsed_s"] < 6


def test_retries_on_429_and_500_then_succeed(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted(
        [
            {"status": 429, "headers": {"retry-after": "0"}},
            {"status": 500},
            {"content": "DONE"},
            {"content": "DONE"},
        ]
    )
    slept: list[float] = []
    attempt = run(calc_repo, server, tmp_path / "run", retry_sleep=slept.append)
    assert attempt.exit_status == "submitted"
    retries = list(read_trajectory(tmp_path / "run" / "trajectory.jsonl").of_type("retry"))
    assert [r["attempt"] for r in retries] == [1, 2]
    assert all(1.0 <= r["wait_s"] <= 12.0 for r in retries)
    assert slept == pytest.approx([r["wait_s"] for r in retries], abs=1e-3)


def test_retries_stop_at_the_wall_clock_cap(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"status": 503, "repeat": 50}])
    attempt = run(calc_repo, server, tmp_path / "run", Limits(timeout_s=3))
    assert attempt.exit_status == "timeout"
    assert 2 <= len(server.requests) <= 4


def test_a_client_error_is_not_retried(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"status": 401, "error": {"message": "bad key", "type": "auth"}}])
    attempt = run(calc_repo, server, tmp_path / "run")
    assert attempt.exit_status == "model_error" and len(server.requests) == 1


def test_three_malformed_turns_end_the_run(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    truncated = {"tool_calls": [{"name": "bash", "arguments": '{"command": "ls'}]}
    server = scripted([truncated, {"content": "I think the bug is in add."}, truncated, BASH_LS])
    run(calc_repo, server, tmp_path / "run")
    assert statuses(tmp_path / "run") == ("malformed_tool_calls", 3)
    results = list(read_trajectory(tmp_path / "run" / "trajectory.jsonl").of_type("tool_result"))
    assert "could not be decoded" in results[0]["output"] and "position" in results[0]["output"]


def test_a_valid_turn_resets_the_malformed_count(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    bad = {"tool_calls": [{"name": "no_such_tool", "arguments": {}}]}
    server = scripted([bad, bad, BASH_LS, bad, bad, {"content": "DONE"}])
    attempt = run(calc_repo, server, tmp_path / "run")
    assert attempt.exit_status == "submitted"


def test_a_rejected_call_leaves_the_repo_unchanged(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    before = (calc_repo / "calc" / "__init__.py").read_bytes()
    wrong = {"command": "replace", "path": "calc/__init__.py", "old_str": "a - b", "new_str": "a + b"}
    extra = {
        "command": "str_replace",
        "path": "calc/__init__.py",
        "old_str": "a - b",
        "new_str": "a + b",
        "x": 1,
    }
    server = scripted(
        [
            {"tool_calls": [{"name": "str_replace_editor", "arguments": wrong}]},
            {"tool_calls": [{"name": "str_replace_editor", "arguments": extra}]},
            {"tool_calls": [{"name": "bash", "arguments": {"cmd": "rm -rf calc"}}]},
        ]
    )
    attempt = run(calc_repo, server, tmp_path / "run")
    assert attempt.exit_status == "malformed_tool_calls" and attempt.patch == ""
    assert (calc_repo / "calc" / "__init__.py").read_bytes() == before
    outputs = [r["output"] for r in read_trajectory(tmp_path / "run" / "trajectory.jsonl").of_type("tool_result")]
    assert "must be one of" in outputs[0] and "unknown argument" in outputs[1] and "missing" in outputs[2]


def test_identical_calls_with_nothing_changed_are_refused_then_looping(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    server = scripted([BASH_LS, BASH_LS, BASH_LS, BASH_LS, BASH_LS])
    run(calc_repo, server, tmp_path / "run")
    assert statuses(tmp_path / "run") == ("looping", 4)
    gates = [g["gate"] for g in read_trajectory(tmp_path / "run" / "trajectory.jsonl").of_type("gate")]
    assert gates == ["repeat", "repeat", "repeat"]


def test_a_repeat_after_a_change_runs(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([BASH_LS, bash("touch new_file.txt"), BASH_LS, {"content": "DONE"}])
    attempt = run(calc_repo, server, tmp_path / "run")
    assert attempt.exit_status == "submitted"
    outputs = [r["output"] for r in read_trajectory(tmp_path / "run" / "trajectory.jsonl").of_type("tool_result")]
    assert "new_file.txt" in outputs[2]


def test_done_before_any_work_is_refused_once(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": "DONE"}, {"content": "DONE"}])
    attempt = run(calc_repo, server, tmp_path / "run")
    assert attempt.exit_status == "submitted" and len(server.requests) == 2
    assert "Not done yet" in server.requests[1].body["messages"][-1]["content"]


def test_script_exhaustion_is_a_model_error(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([BASH_LS])
    attempt = run(calc_repo, server, tmp_path / "run")
    assert attempt.exit_status == "model_error"
    assert json.loads((tmp_path / "run" / "result.json").read_text())["patch_kind"] == "empty"


def test_a_python_literal_tool_call_in_text_is_run(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    # what small models write instead of JSON: single quotes and a raw string, untagged in a fence
    call = "```json\n{'name': 'bash', 'arguments': {'command': r'grep -c \"a - b\" calc/__init__.py'}}\n```"
    server = scripted([{"content": call}, {"content": "DONE"}])
    out = tmp_path / "run"
    run(calc_repo, server, out, protocol="text")
    trajectory = read_trajectory(out / "trajectory.jsonl")
    (tool_call,) = trajectory.of_type("tool_call")
    assert tool_call["valid"] and tool_call["arguments"] == {"command": 'grep -c "a - b" calc/__init__.py'}
    (result,) = trajectory.of_type("tool_result")
    assert result["ok"] and result["output"].strip() == "1"


def test_gate_decisions_travel_with_the_tool_run_and_the_failure(scripted: Start, tmp_path: Path) -> None:
    """A tool's gates land in the trajectory bound to its call, whether it returned or refused."""

    def note(text: str) -> ToolRun:
        """Accept, noting a recovery."""
        return ToolRun(f"noted {text}", (GateResult("edit_recovery", True, "re-indented"),))

    def refuse(text: str) -> str:
        """Refuse at a gate."""
        raise ToolFailure(f"refused {text}", (GateResult("lint", False, "syntax error"),))

    toolbox = Registry()
    toolbox.register(note)
    toolbox.register(refuse)
    calls = [
        {"name": "note", "arguments": {"text": "a"}, "id": "c1"},
        {"name": "refuse", "arguments": {"text": "b"}, "id": "c2"},
    ]
    server = scripted([{"tool_calls": calls}, {"content": "DONE"}])
    model = OpenAIModel(ModelConfig(server.base_url, "scripted"))
    writer = TrajectoryWriter(tmp_path / "trajectory.jsonl")
    loop = Loop(model, toolbox, writer, LoopConfig("test", Limits(max_turns=5)), lambda: "", zero_pricer)
    outcome = loop.run([{"role": "user", "content": "go"}])
    writer.close()
    assert outcome.status == "submitted"
    trajectory = read_trajectory(tmp_path / "trajectory.jsonl")
    gates = [(g["call_id"], g["gate"], g["ok"]) for g in trajectory.of_type("gate")]
    assert gates == [("c1", "edit_recovery", True), ("c2", "lint", False)]
    outputs = [(r["output"], r["ok"]) for r in trajectory.of_type("tool_result")]
    assert outputs == [("noted a", True), ("Error: refused b", False)]


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (ValueError("bad value"), "Error: ValueError: bad value"),
        (OSError(36, "File name too long"), "Error: OSError: [Errno 36] File name too long"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), "Error: UnicodeDecodeError: 'utf-8' codec"),
        (RuntimeError("name \udcff"), "Error: RuntimeError: name \\xff"),
    ],
)
def test_any_exception_of_a_tool_is_its_observation_and_the_run_goes_on(
    scripted: Start, tmp_path: Path, error: Exception, shown: str
) -> None:
    def crash(text: str) -> str:
        """Crash.

        Args:
          text: anything
        """
        raise error

    def note(text: str) -> str:
        """Note.

        Args:
          text: anything
        """
        return f"noted {text}"

    toolbox = Registry()
    toolbox.register(crash)
    toolbox.register(note)
    script = [{"tool_calls": [{"name": "crash", "arguments": {"text": "a"}}]}]
    script += [{"tool_calls": [{"name": "note", "arguments": {"text": "b"}}]}, {"content": "DONE"}]
    model = OpenAIModel(ModelConfig(scripted(script).base_url, "scripted"))
    writer = TrajectoryWriter(tmp_path / "trajectory.jsonl")
    outcome = Loop(model, toolbox, writer, LoopConfig("test", Limits(max_turns=5)), lambda: "", zero_pricer).run([])
    writer.close()
    assert outcome.status == "submitted"
    results = list(read_trajectory(tmp_path / "trajectory.jsonl").of_type("tool_result"))
    assert results[0]["output"].startswith(shown) and not results[0]["ok"]
    assert (results[1]["output"], results[1]["ok"]) == ("noted b", True)
