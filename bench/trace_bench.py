"""Benchmark `snaffle trace` on a long trajectory: a 2,000-turn run must be read by `stats` in under a second.

Run: .venv/bin/python bench/trace_bench.py [--turns 2000] [--repeat 7] [--mode loop|replay] [--cache DIR]

`--mode loop` (default) makes the trajectory by running the real loop (minimal arm) against the scripted model
server with a script of N distinct `bash echo` calls and max_turns N; it takes minutes, so the run dir is cached
(default /tmp/snaffle-trace-bench/loop-N) and reused. `--mode replay` runs the real loop for 20 turns and repeats
those real events, renumbered (turn, seq, call ids, cumulative usage), up to N turns: seconds instead of minutes.
The output says which one made the file. Timings are medians over `--repeat` runs, each in this process.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from snaffle.model.client import ModelConfig  # noqa: E402
from snaffle.run import SolveConfig, solve, zero_pricer  # noqa: E402
from snaffle.testing import ScriptedServer  # noqa: E402
from snaffle.trace.analysis import analyze  # noqa: E402
from snaffle.trace.cli import main as trace_main  # noqa: E402
from snaffle.trace.runs import load_runs  # noqa: E402
from snaffle.trajectory import read_trajectory  # noqa: E402
from snaffle.types import Limits, Task  # noqa: E402

REPLAY_SEED_TURNS = 20
GIT = ["git", "-c", "user.email=bench@snaffle.invalid", "-c", "user.name=bench", "-c", "commit.gpgsign=false"]


def make_repo(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text("bench repo\n")
    subprocess.run([*GIT, "init", "-q", "-b", "main"], cwd=root, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=root, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "initial"], cwd=root, check=True)
    return root


def run_loop(turns: int, out: Path) -> float:
    """The real loop: `turns` distinct echo calls, capped at `turns` model calls. Returns seconds taken."""
    script = [{"tool_calls": [{"name": "bash", "arguments": {"command": f"echo step {i}"}}]} for i in range(turns)]
    server = ScriptedServer(script)
    server.start()
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="trace-bench-repo-") as scratch:
            model = ModelConfig(base_url=server.base_url, model="scripted")
            config = SolveConfig("minimal", model, Limits(max_turns=turns), out, zero_pricer)
            solve(Task(repo=make_repo(Path(scratch) / "repo"), issue="Echo the steps.", instance_id="bench"), config)
    finally:
        server.stop()
    return time.monotonic() - started


def replay(seed_dir: Path, turns: int, out: Path) -> None:
    """Repeat the seed run's turns (real events) until there are `turns`, renumbering as the loop would."""
    events = list(read_trajectory(seed_dir / "trajectory.jsonl").events)
    header, exit_event = events[0], events[-1]
    body = [e for e in events[1:-1] if e.get("turn")]
    per_turn = max(e["turn"] for e in body)
    out.mkdir(parents=True, exist_ok=True)
    seq, cumulative = 0, {"prompt_tokens": 0, "completion_tokens": 0, "dollars": 0.0}
    with (out / "trajectory.jsonl").open("w", encoding="utf-8") as file:
        for event in [header, *_renumbered(body, per_turn, turns, cumulative), exit_event]:
            file.write(json.dumps({**event, "seq": seq}) + "\n")
            seq += 1
    (out / "patch.diff").write_text((seed_dir / "patch.diff").read_text())


def _renumbered(body: list[dict[str, Any]], per_turn: int, turns: int, cumulative: dict[str, Any]) -> Any:
    for round_ in range(-(-turns // per_turn)):
        for event in body:
            turn = event["turn"] + round_ * per_turn
            if turn > turns:
                return
            copy = {**event, "turn": turn}
            for key in ("id", "call_id"):
                if key in copy:
                    copy[key] = f"call_{turn}_0"
            if copy["type"] == "model_call":
                for key in ("prompt_tokens", "completion_tokens", "dollars"):
                    cumulative[key] += copy["usage"].get(key, 0)
                copy["cumulative"] = {**copy["cumulative"], **cumulative, "turns": turn}
            yield copy


def trajectory_for(mode: str, turns: int, cache: Path) -> tuple[Path, str]:
    out = cache / f"{mode}-{turns}"
    if (out / "trajectory.jsonl").is_file() and (mode == "replay" or (out / "result.json").is_file()):
        return out, "cached"
    if mode == "loop":
        seconds = run_loop(turns, out)
        return out, f"made by the real loop in {seconds:.0f} s"
    seed = cache / f"seed-{REPLAY_SEED_TURNS}"
    if not (seed / "result.json").is_file():
        run_loop(REPLAY_SEED_TURNS, seed)
    replay(seed, turns, out)
    return out, f"replayed from a real {REPLAY_SEED_TURNS}-turn run"


def median_s(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def quietly(argv: list[str]) -> Callable[[], object]:
    def run() -> object:
        with contextlib.redirect_stdout(io.StringIO()):
            return trace_main(argv)

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--mode", choices=("loop", "replay"), default="loop")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "snaffle-trace-bench")
    args = parser.parse_args()
    run_dir, origin = trajectory_for(args.mode, args.turns, args.cache)
    trajectory = read_trajectory(run_dir / "trajectory.jsonl")
    calls = sum(1 for _ in trajectory.of_type("model_call"))
    size_mb = (run_dir / "trajectory.jsonl").stat().st_size / 1e6
    print(
        f"trajectory: {run_dir} ({origin}; mode {args.mode}): {calls} model calls, "
        f"{len(trajectory.events)} events, {size_mb:.1f} MB"
    )
    html_out = str(run_dir / "report.html")
    timings = {
        "read_trajectory": median_s(lambda: read_trajectory(run_dir / "trajectory.jsonl"), args.repeat),
        "load + profile + labels (stats' work)": median_s(lambda: analyze(load_runs([run_dir])), args.repeat),
        "trace stats --json (whole command)": median_s(
            quietly(["trace", "stats", str(run_dir), "--json"]), args.repeat
        ),
        "trace stats (table)": median_s(quietly(["trace", "stats", str(run_dir)]), args.repeat),
        "trace labels": median_s(quietly(["trace", "labels", str(run_dir)]), args.repeat),
        "trace html": median_s(quietly(["trace", "html", str(run_dir), "-o", html_out]), max(3, args.repeat // 2)),
    }
    for name, seconds in timings.items():
        print(f"  {name:40s} median {seconds * 1000:8.1f} ms")
    verdict = timings["trace stats --json (whole command)"] < 1.0
    print(f"stats under one second on {calls} turns: {'yes' if verdict else 'NO'}")
    return 0 if verdict else 1


if __name__ == "__main__":
    raise SystemExit(main())
