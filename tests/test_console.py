"""What `snaffle solve` shows, run as a user runs it: on a terminal (a real pty) a live status and the summary;
piped, a plain line per stage, sample and model call; `--quiet` nothing; `--json` one line for scripts."""

from __future__ import annotations

import fcntl
import io
import json
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from snaffle.console import Progress, call_line
from snaffle.trajectory import header_event, model_call_event, read_trajectory, stage_event
from snaffle.types import Limits, ModelReply, Task, Usage
from tests.helpers import CALC_ISSUE, Start

FIXED_ADD = '```python\ndef add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n```'
ROOT = Path(__file__).resolve().parents[1]


def solve_argv(repo: Path, base_url: str, out: Path, *extra: str) -> list[str]:
    args = ["solve", "--repo", str(repo), "--issue", CALC_ISSUE, "--base-url", base_url, "--model", "scripted"]
    agentless = ["--one-shot", "--samples", "2", "--no-reproduce", "--no-early-stop", "--no-line-repair"]
    agentless += ["--max-turns", "9"]
    agentless += ["--timeout", "600"]  # both samples drawn: the lines per sample are what is shown
    return [sys.executable, "-m", "snaffle.cli", *args, *agentless, "--out", str(out), *extra]


def piped(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})


def on_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run with stdin, stdout and stderr on a new pty (120 x 40); returns the exit code and everything written."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CI", "TERM")} | {"TERM": "xterm-256color"}
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", errors="replace")


def test_on_a_terminal_solve_shows_a_live_status_then_the_summary(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    server = scripted([{"content": FIXED_ADD, "delay": 1.5, "repeat": 2}])
    code, screen = on_a_terminal(solve_argv(calc_repo, server.base_url, tmp_path / "run"))
    assert code == 0, screen
    assert "\x1b[?25l" in screen  # the live display hides the cursor while it redraws the status
    status = [line for line in screen.replace("\r", "\n").split("\n") if " · left: " in line]
    assert any("repair · sample 0 of 2 · turn" in line for line in status), screen
    assert any("tokens · $ unknown · " in line and "left: " in line and "turns" in line for line in status)
    assert "exit status: validated" in screen and "tests after: 0 regressions" in screen
    assert "return a + b" in screen and "model calls 2 · tokens " in screen and f"run dir: {tmp_path}" in screen
    assert screen.count("no price for model 'scripted'") == 1


def test_piped_solve_prints_a_plain_line_per_stage_sample_and_call(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    server = scripted([{"content": FIXED_ADD, "repeat": 2}])
    out = tmp_path / "run"
    proc = piped(solve_argv(calc_repo, server.base_url, out))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and " · left: " not in proc.stdout  # no live status, no colour codes
    events = read_trajectory(out / "trajectory.jsonl").events
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    stages = [e for e in events if e["type"] == "stage"]
    calls = [e for e in events if e["type"] == "model_call"]
    assert len(progress) == 1 + len(stages) + len(calls)  # the header's line, one per stage and one per call
    assert sum(" validation: valid " in line for line in progress) == 2 and len(calls) == len(server.requests) == 2
    assert any(line.endswith("select: sample 0") for line in progress)
    summary = proc.stdout.split("\n\n", 1)[1]
    assert summary.startswith("exit status: validated — sample 0 selected")
    assert f"patch: 2 changed lines, in {out / 'patch.diff'}" in summary and "+    return a + b" in summary
    assert "tests before: 1 passing tests in 1 related files" in summary
    assert "model calls 2 · tokens " in summary and "cost $ unknown" in summary
    assert f"report: snaffle trace html {out.resolve()}" in summary
    assert proc.stderr.count("no price for model 'scripted'") == 1  # one table for harness and shim: once


def test_quiet_prints_nothing_and_json_prints_one_line(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": FIXED_ADD, "repeat": 4}])
    quiet = piped(solve_argv(calc_repo, server.base_url, tmp_path / "quiet", "--quiet"))
    assert quiet.returncode == 0 and quiet.stdout == ""
    assert quiet.stderr.count("\n") == 1 and "no price for model" in quiet.stderr  # warnings still say themselves
    as_json = piped(solve_argv(calc_repo, server.base_url, tmp_path / "json", "--json", "--quiet"))
    assert as_json.returncode == 0 and as_json.stdout.count("\n") == 1
    line = json.loads(as_json.stdout)
    result = json.loads((tmp_path / "json" / "result.json").read_text())
    assert line == {
        "exit_status": result["exit_status"],
        "run_dir": str(tmp_path / "json"),
        "patch_lines": len((tmp_path / "json" / "patch.diff").read_text().splitlines()),
        "applied": False,
    }
    assert result["exit_status"] == "validated"


def test_the_status_tracks_phase_sample_tokens_dollars_and_caps_left_from_events() -> None:
    now = [100.0]
    shown = io.StringIO()
    progress = Progress("lines", shown, clock=lambda: now[0])
    caps = Limits(max_turns=5, max_tokens=1000, timeout_s=60)
    task = Task(Path("/repo"), "x", "calc")
    progress(header_event(task, "agentless", "m", "http://127.0.0.1:1/v1", caps, None, {"pipeline": {"samples": 2}}))
    progress(stage_event("localize", "2 candidates", candidates=["a.py::f", "a.py::g"]))
    progress(stage_event("regression_baseline", "3 passing tests in 1 related files"))
    reply = ModelReply("ok", (), None, Usage(300, 50), 1.0, "stop", "native")
    progress({**model_call_event(1, [], 0, reply, Usage(300, 50).with_dollars(0.01), {}), "sample": 0})
    now[0] = 130.0
    expected = "repair · sample 0 of 2 · turn 1 · 350 tokens · $0.0100 · 30s · left: 4 turns, 650 tokens, 30s"
    assert progress.state.status(now[0]) == expected
    progress({**model_call_event(1, [], 0, reply, Usage(300, 50).with_dollars(None), {}), "sample": 1})
    assert " · $ unknown · " in progress.state.status(now[0])  # one unpriced call makes the total unknown
    progress(stage_event("repair", "submitted", sample=1, patch_lines=2))
    assert progress.state.status(now[0]).startswith("validate · ")
    lines = shown.getvalue().splitlines()
    assert lines[1] == "[   0.0s] localize: 2 candidates (a.py::f, a.py::g)"
    assert lines[-1] == "[  30.0s] sample 1: submitted, 2 changed lines" and len(lines) == 6


def test_the_reproduction_call_is_named_as_such_and_a_sample_by_its_turn() -> None:
    usage = {"prompt_tokens": 684, "completion_tokens": 112}
    reproduce = {"type": "model_call", "stage": "reproduce", "turn": 1, "usage": usage, "latency_s": 32.13}
    repair = {"type": "model_call", "sample": 0, "turn": 1, "usage": usage, "latency_s": 25.26}
    assert call_line(reproduce) == "reproduce call 1: 684 prompt + 112 output tokens, 32.1s"
    assert call_line(repair) == "sample 0 turn 1: 684 prompt + 112 output tokens, 25.3s"
