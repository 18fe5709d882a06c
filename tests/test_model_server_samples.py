"""Samples decoded together: the agentless arm runs its samples at once against the scripted server (real threads,
real HTTP, requests that overlap in time), after the reproduction call; the trajectory stays whole lines in order;
and the run's caps (turns, tokens, wall clock) still bound samples that run together (agentless/budget.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from snaffle.agentless.budget import Budget
from snaffle.agentless.config import PipelineConfig
from snaffle.cli import main
from snaffle.exceptions import LimitsExceeded
from snaffle.model.client import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.trajectory import read_trajectory
from snaffle.types import Attempt, Event, Limits, Task, Usage
from tests.helpers import Start
from tests.test_pipeline import TRACEBACK_ISSUE

ISSUE = TRACEBACK_ISSUE
FIX = '```python\ndef add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n```'
REPRO = "```python\nfrom calc import add\n\n\ndef test_add_sums():\n    assert add(2, 3) == 5\n```"
CALL_DELAY_S = 1.5


DEFAULT_LIMITS = Limits(max_turns=40)


def run(repo: Path, url: str, out: Path, limits: Limits = DEFAULT_LIMITS, **pipeline: Any) -> Attempt:
    options = {"one_shot": True, "edit_format": "rewrite", "reproduce": False, "early_stop": False, **pipeline}
    config = SolveConfig(
        "agentless",
        ModelConfig(url, "scripted"),
        limits,
        out,
        zero_pricer,
        pipeline=PipelineConfig(**{"line_repair": False, "mutation": False, **options}),
    )
    return solve(Task(repo=repo, issue=ISSUE), config)


def sample_calls(out: Path) -> list[Event]:
    return [e for e in read_trajectory(out / "trajectory.jsonl").of_type("model_call") if "sample" in e]


def spans(calls: list[Event]) -> list[tuple[float, float]]:
    """(started, ended) of each call, from the time its line was written and its latency."""
    return sorted((float(c["t"]) - float(c["latency_s"]), float(c["t"])) for c in calls)


def overlap_all(intervals: list[tuple[float, float]]) -> bool:
    return max(s for s, _ in intervals) < min(e for _, e in intervals)


def test_samples_run_at_once_after_the_reproduction_call(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    fix = {"content": FIX, "delay": CALL_DELAY_S}
    server = scripted([{"content": REPRO}, fix, fix, fix])
    out = tmp_path / "run"
    attempt = run(calc_repo, server.base_url, out, samples=3, concurrency=3, reproduce=True)
    assert attempt.exit_status == "validated"
    calls = sample_calls(out)
    assert sorted(c["sample"] for c in calls) == [0, 1, 2]
    assert overlap_all(spans(calls)), spans(calls)  # the three requests were in flight together
    events = read_trajectory(out / "trajectory.jsonl").events
    reproduce = next(e for e in events if e["type"] == "model_call" and e.get("stage") == "reproduce")
    assert float(reproduce["t"]) <= min(s for s, _ in spans(calls))  # the reproduction call came first, alone
    assert [r.body.get("temperature") for r in server.requests[1:]].count(0.0) == 1  # one greedy sample


def test_concurrent_samples_write_whole_lines_in_order(
    calc_repo: Path, scripted: Start, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fix = {"content": FIX, "delay": CALL_DELAY_S, "usage": {"completion_tokens": 30}}
    server = scripted([fix] * 3)
    out = tmp_path / "run"
    run(calc_repo, server.base_url, out, samples=3, concurrency=3)
    lines = (out / "trajectory.jsonl").read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]  # every line is one whole JSON object
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events) == list(range(len(events)))
    assert events[-1]["type"] == "exit" and events[-1]["totals"]["completion_tokens"] == 90
    assert {e["sample"] for e in events if e["type"] in ("model_call", "gate")} == {0, 1, 2}
    capsys.readouterr()
    assert main(["trace", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert all(f"sample {n} · turn 1" in shown for n in range(3)) and "validated: sample" in shown, shown


def test_auto_concurrency_stays_sequential_on_a_one_slot_endpoint(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    """concurrency 0 asks the endpoint for its slots; the scripted server, like llama-cpp-python, has no /props."""
    fix = {"content": FIX, "delay": 0.5}
    server = scripted([fix] * 3)
    out = tmp_path / "run"
    run(calc_repo, server.base_url, out, samples=3, concurrency=0)
    intervals = spans(sample_calls(out))
    assert len(intervals) == 3
    assert all(a[1] <= b[0] + 0.01 for a, b in zip(intervals, intervals[1:], strict=False)), intervals


COSTLY = {"content": FIX, "delay": 0.3, "usage": {"prompt_tokens": 1000, "completion_tokens": 1000}}


def test_a_token_cap_bounds_samples_running_together(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    """6 samples, 3 at once, 2,000 tokens a call, a 5,000-token cap: the three running ones each hold a third;
    once they spent 6,000 no further sample starts (one at a time, 3 calls too: 2,000 + 2,000 + 2,000)."""
    server = scripted([COSTLY] * 6)
    out = tmp_path / "run"
    attempt = run(calc_repo, server.base_url, out, Limits(max_tokens=5000), samples=6, concurrency=3)
    assert attempt.exit_status == "budget_exceeded"
    assert len(server.requests) == 3 and len(sample_calls(out)) == 3
    assert attempt.usage.total_tokens == 6000


def test_a_turn_cap_bounds_samples_running_together(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([COSTLY] * 3)
    out = tmp_path / "run"
    attempt = run(calc_repo, server.base_url, out, Limits(max_turns=2), samples=3, concurrency=3)
    assert attempt.exit_status == "max_turns_exceeded"
    assert len(server.requests) == 2


def test_the_wall_clock_cap_ends_samples_running_together(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    slow = {"content": FIX, "delay": 120}
    server = scripted([slow] * 6)
    out = tmp_path / "run"
    started = time.monotonic()
    attempt = run(calc_repo, server.base_url, out, Limits(timeout_s=15), samples=6, concurrency=3)
    assert attempt.exit_status == "timeout"
    assert time.monotonic() - started < 60  # not 2 x 120 s: the calls in flight were cut at the deadline
    assert len(server.requests) <= 3


# --- the shares themselves ------------------------------------------------------------------------------------


def test_shares_split_what_is_left_among_the_free_slots() -> None:
    budget = Budget(Limits(max_turns=10, max_tokens=9000, max_dollars=0.9), deadline=None)
    first = budget.share(3, 8)
    assert (first.max_turns, first.max_tokens, first.max_dollars) == (3, 3000, pytest.approx(0.3))
    second, third = budget.share(3, 8), budget.share(3, 8)
    assert (second.max_tokens, third.max_tokens) == (3000, 3000)
    budget.spend(Usage(prompt_tokens=500, completion_tokens=500, dollars=0.1), 1)
    budget.release(first)  # first spent 1,000 of its 3,000: 2,000 are free again
    assert budget.share(3, 8).max_tokens == 2000


def test_one_sample_at_a_time_gets_all_that_is_left() -> None:
    budget = Budget(Limits(max_turns=30, max_tokens=9000), deadline=None)
    budget.spend(Usage(prompt_tokens=4000), 25)
    share = budget.share(1, 8)
    assert (share.max_turns, share.max_tokens, share.max_dollars, share.timeout_s) == (5, 5000, 0.0, 0.0)


@pytest.mark.parametrize(
    ("limits", "spent", "status"),
    (
        (Limits(max_turns=2), (Usage(), 2), "max_turns_exceeded"),
        (Limits(max_tokens=100), (Usage(completion_tokens=100), 1), "budget_exceeded"),
        (Limits(max_dollars=0.5), (Usage(dollars=0.5), 1), "budget_exceeded"),
    ),
)
def test_a_reached_cap_starts_no_sample(limits: Limits, spent: tuple[Usage, int], status: str) -> None:
    budget = Budget(limits, deadline=None)
    budget.spend(*spent)
    with pytest.raises(LimitsExceeded) as caught:
        budget.share(3, 8)
    assert caught.value.status == status


def test_a_passed_deadline_starts_no_sample_and_a_live_one_is_every_shares() -> None:
    with pytest.raises(LimitsExceeded) as caught:
        Budget(Limits(timeout_s=1), deadline=time.monotonic() - 1).share(2, 8)
    assert caught.value.status == "timeout"
    live = Budget(Limits(timeout_s=60), deadline=time.monotonic() + 60)
    assert 59 < live.share(3, 8).timeout_s <= 60 and 59 < live.share(3, 8).timeout_s <= 60


def test_while_anything_is_left_a_sample_gets_at_least_one() -> None:
    budget = Budget(Limits(max_turns=2), deadline=None)
    assert [budget.share(3, 8).max_turns, budget.share(3, 8).max_turns] == [1, 1]
    with pytest.raises(LimitsExceeded):
        budget.share(3, 8)  # the two running samples hold both turns
