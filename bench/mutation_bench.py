"""Mutation alone on the A/B tasks, zero tokens: does a decisive mutant appear, and is it right?

    python bench/mutation_bench.py [--split all|dev|test] [--tasks REGEX] [--handler-least-change] [--compose]
        [--cache DIR] [--work DIR] [--results FILE]

Each task of bench/ab_tasks.toml is solved by the agentless arm with `mutation` on and a scripted model that never
gives an edit (so every resolve is a mutant's; the snippet-made reproduction test is off, the issue's snippets and
the related tests still judge), and the run's patch is judged by the task's hidden test, as the A/B bench does.
Per task: how the mutation stage ended (no evidence, no working related test, no survivor, not decisive, decisive),
the mutants made and tried, the screening's seconds, the exit status, and whether the patch is right. A decisive
mutant that is wrong is the figure to watch: it ends a run `validated` with no model call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ab_bench as ab

from snaffle.agentless.config import PipelineConfig
from snaffle.model.client import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.testing import ScriptedServer
from snaffle.trajectory import read_trajectory
from snaffle.types import Limits, Task

NO_EDIT = {"content": "I could not find the bug.", "repeat": 1000}
"""What the scripted model answers to every call: no code block, so no sample ever changes anything."""


def run_task(
    task: ab.BenchTask, cache: Path, work: Path, url: str, handler: bool = False, compose: bool = False
) -> dict[str, Any]:
    pristine = ab.pristine_repo(task, cache)
    base = work / task.id
    repo = ab.working_copy(pristine, base)
    pipeline = PipelineConfig(
        samples=1, one_shot=True, mutation=True, reproduce=False, handler_least_change=handler, mutation_compose=compose
    )
    config = SolveConfig(
        "agentless",
        ModelConfig(url, "scripted"),
        Limits(max_turns=6, timeout_s=600),
        base / "run",
        zero_pricer,
        pipeline=pipeline,
    )
    started = time.monotonic()
    attempt = solve(Task(repo, task.issue, task.id), config)
    seconds = time.monotonic() - started
    trajectory = read_trajectory(base / "run" / "trajectory.jsonl")
    stages = [e for e in trajectory.of_type("stage") if e["stage"] == "mutation"]
    screened = next((s for s in stages if "tried" in s), {})  # the screening's own line (the other says why not)
    exit_event = list(trajectory.of_type("exit"))[-1]
    by_mutant = "(mutant " in str(exit_event.get("message", ""))
    right = ab.fails_when_planted(task, pristine) and ab.judge_patched(task, repo, base)
    return {
        "task": task.id,
        "split": task.split,
        "status": attempt.exit_status,
        "mutation": outcome(stages),
        "generated": int(screened.get("generated", 0)),
        "tried": int(screened.get("tried", 0)),
        "survivors": list(screened.get("survivors", [])),
        "screen_s": float(screened.get("seconds", 0.0)),
        "by_mutant": by_mutant,
        "right": bool(right and by_mutant),
        "wall_s": round(seconds, 1),
    }


def outcome(stages: Sequence[dict[str, Any]]) -> str:
    """One word for how the mutation stage ended."""
    decisions = [str(s.get("decision", "")) for s in stages if "set aside" not in str(s.get("decision", ""))]
    if not decisions:
        return "not run"
    last = decisions[-1]
    if last.startswith("not decisive"):
        return "partial" if "not all" in last else "tie" if "behaviour" in last or "none is" in last else "cut short"
    if last.startswith("no related test"):
        return "no working tests"
    if last.startswith("nothing from the issue"):
        return "no evidence"
    return "decisive" if not last.startswith("0 of") else "no survivor"


def report(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| split | tasks | decisive | right | wrong | tie | partial | cut short | no survivor | no working tests | no "
        "evidence | median screening s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for split in ("dev", "test", "all"):
        group = [r for r in rows if split == "all" or r["split"] == split]
        if not group:
            continue
        count = {
            k: sum(1 for r in group if r["mutation"] == k)
            for k in ("decisive", "tie", "partial", "cut short", "no survivor", "no working tests", "no evidence")
        }
        right = sum(1 for r in group if r["right"])
        wrong = sum(1 for r in group if r["by_mutant"] and not r["right"])
        screened = [r["screen_s"] for r in group if r["tried"]]
        median = f"{statistics.median(screened):.1f}" if screened else "-"
        lines.append(
            f"| {split} | {len(group)} | {count['decisive']} | {right} | {wrong} | {count['tie']} | "
            f"{count['partial']} | {count['cut short']} | {count['no survivor']} | {count['no working tests']} | "
            f"{count['no evidence']} | {median} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="all", choices=("all", *ab.SPLITS))
    parser.add_argument("--tasks", default="")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "snaffle" / "bench"))
    parser.add_argument("--work", default="/tmp/mutation_bench")
    parser.add_argument("--results", default="/tmp/mutation_bench/rows.jsonl")
    parser.add_argument(
        "--handler-least-change",
        action="store_true",
        help="set aside the handler changes another change of the same except clause keeps more of and adds less to",
    )
    parser.add_argument(
        "--compose", action="store_true", help="a mutant that is part of a fix gets a second point (mutation_compose)"
    )
    args = parser.parse_args(argv)
    tasks = ab.select_tasks(ab.load_tasks(), args.tasks, 0, args.split)
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    server = ScriptedServer([NO_EDIT]).start()
    try:
        for task in tasks:
            row = run_task(
                task, Path(args.cache), Path(args.work), server.base_url, args.handler_least_change, args.compose
            )
            rows.append(row)
            with results.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
            survivors = "; ".join(row["survivors"][:3])
            ab.log(
                f"{task.id}: {row['mutation']} right={row['right']} tried={row['tried']}/{row['generated']} "
                f"{row['screen_s']}s {survivors}"
            )
    finally:
        server.stop()
    print()
    print(report(rows))
    print()
    for row in rows:
        mark = "right" if row["right"] else ("WRONG" if row["by_mutant"] else "-")
        print(f"{row['task']}: {row['mutation']}, {mark}, {row['status']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
