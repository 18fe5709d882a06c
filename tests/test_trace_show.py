"""`snaffle trace show`: turn-by-turn rendering of real-loop trajectories, windowing and folding, one turn,
a torn file, and `--follow` on a file the loop is still writing."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from snaffle.model.client import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.trace.cli import main
from snaffle.trace.show import Tail, window
from snaffle.types import Limits, Task
from tests.helpers import CALC_ISSUE
from tests.trace_scenarios import CLEAN, PYTEST

Runs = dict[str, Path]


def show(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["trace", "show", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_every_turn_with_its_calls_results_usage_and_exit(trace_runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = show(capsys, str(trace_runs["clean"]))
    assert code == 0
    for n in range(1, 6):
        assert f"turn {n}" in out
    assert f"→ bash: {PYTEST}" in out and "→ str_replace_editor: view calc/__init__.py" in out
    assert "1 failed, 1 passed" in out and "changed the repo" in out and "The tests pass." in out
    assert "prompt " in out and "cumulative" in out
    assert out.rstrip().splitlines()[-2] == "submitted: the model wrote DONE"


def test_reasoning_is_folded_unless_full(trace_runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    _, folded, _ = show(capsys, str(trace_runs["clean"]))
    assert "reasoning folded: " in folded and "thought 19" not in folded
    _, full, _ = show(capsys, str(trace_runs["clean"]), "--full")
    assert "thought 19" in full and "reasoning folded" not in full


def test_gates_and_rejections_are_shown(trace_runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    _, looping, _ = show(capsys, str(trace_runs["looping"]))
    assert looping.count("⛔ gate repeat: Refused") == 3 and "looping: 3 refused repeats" in looping
    _, malformed, _ = show(capsys, str(trace_runs["malformed_storm"]))
    assert "✗ bash:" in malformed and "rejected:" in malformed and "⛔ gate format" in malformed
    _, pressure, _ = show(capsys, str(trace_runs["context_pressure"]))
    assert re.search(r"⇣ compaction before turn \d+: \d+ → \d+ tokens", pressure) and "⇢ collapsed" in pressure
    assert "⛔ gate lint: edit reverted" in pressure


def test_one_turn(trace_runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = show(capsys, str(trace_runs["clean"] / "trajectory.jsonl"), "--turn", "3")
    assert code == 0 and "turn 3" in out and "turn 2" not in out and "exit" not in out
    assert "str_replace calc/__init__.py" in out
    code, _, err = show(capsys, str(trace_runs["clean"]), "--turn", "9")
    assert code == 2 and "no turn 9" in err and "1..5" in err


def test_a_torn_file_renders_and_says_so(trace_runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = show(capsys, str(trace_runs["torn"]))
    assert code == 0 and "turn 5" in out and "torn last line skipped" in out
    assert "submitted: the model wrote DONE" not in out


def test_missing_file_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = show(capsys, str(tmp_path))
    assert code == 2 and "--follow" in err


def test_window_keeps_head_and_tail() -> None:
    text = "\n".join(f"line {i}" for i in range(100))
    shown = window(text, full=False, head=3, tail=2)
    assert shown.splitlines() == [
        "line 0",
        "line 1",
        "line 2",
        "… 95 lines hidden (--full shows all) …",
        "line 98",
        "line 99",
    ]
    assert window(text, full=True) == text
    assert window("x" * 1000, full=False).endswith(" …") and len(window("x" * 1000, full=False)) < 500


def test_follow_renders_a_file_the_loop_is_still_writing(
    calc_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from snaffle.testing import ScriptedServer

    server = ScriptedServer([{**entry, "delay": 0.3} for entry in CLEAN])
    server.start()
    out_dir = tmp_path / "run"
    model = ModelConfig(base_url=server.base_url, model="scripted")
    config = SolveConfig("minimal", model, Limits(max_turns=10), out_dir, zero_pricer)
    worker = threading.Thread(target=solve, args=(Task(repo=calc_repo, issue=CALC_ISSUE), config))
    started = time.monotonic()
    worker.start()
    try:
        code, out, _ = show(capsys, str(out_dir), "--follow", "--idle-timeout", "20")
    finally:
        worker.join(30)
        server.stop()
    assert code == 0 and "turn 5" in out and "submitted: the model wrote DONE" in out
    assert time.monotonic() - started < 20  # ended at the exit line, not on the idle timeout


def test_tail_waits_for_a_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "trajectory.jsonl"
    path.write_text('{"type": "header", "seq": 0, "format": "snaffle-trajectory/1"}\n{"type": "model_call", "tur')
    tail = Tail(path, poll_s=0.01, idle_timeout_s=0.2)
    events = list(tail.events())
    assert [e["type"] for e in events] == ["header"] and tail.torn
    with path.open("a") as file:
        file.write('n": 1}\n{"type": "exit", "status": "submitted"}\n')
    assert [e["type"] for e in tail.events()] == ["model_call", "exit"] and not tail.torn
