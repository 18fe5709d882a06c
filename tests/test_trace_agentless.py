"""Agentless trajectories read right: one `model_call` line per request the model server received (counted on the
server's side), every call addressable by sample and turn, the fixed context in the header, the harness's own test
runs counted, labels that know the arm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from snaffle.agentless.config import PipelineConfig
from snaffle.model.client import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.trace.analysis import analyze
from snaffle.trace.cli import main
from snaffle.trace.runs import load_runs
from snaffle.trajectory import instance_name, read_trajectory
from snaffle.types import Limits, Task
from tests.helpers import CALC_ISSUE, CALC_SOURCE, CALC_TEST, FIX_SCRIPT, Start, make_repo, scripted_pipeline
from tests.trace_scenarios import ADD_FIXED, MUL_BROKEN, REPRO

Runs = dict[str, Path]
EDIT_ADD = {
    "tool_calls": [
        {
            "name": "edit_entity",
            "arguments": {"selector": "calc/__init__.py::add", "search": "return a - b", "replace": "return a + b"},
        }
    ]
}


def run_agentless(repo: Path, server_url: str, out: Path, pipeline: PipelineConfig) -> dict[str, object]:
    model = ModelConfig(server_url, "scripted")
    config = SolveConfig("agentless", model, Limits(max_turns=20), out, zero_pricer, pipeline=pipeline)
    solve(Task(repo=repo, issue=CALC_ISSUE, instance_id="calc"), config)
    return dict(json.loads((out / "result.json").read_text()))


@pytest.mark.parametrize(
    ("script", "pipeline"),
    [
        ([REPRO, ADD_FIXED, MUL_BROKEN], scripted_pipeline(samples=2, one_shot=True, top_k=2, early_stop=False)),
        ([REPRO, EDIT_ADD, {"content": "DONE"}], scripted_pipeline(samples=1, one_shot=False)),
    ],
    ids=["one-shot", "loop"],
)
def test_one_model_call_line_per_request_the_server_received(
    calc_repo: Path, scripted: Start, tmp_path: Path, script: list[dict[str, object]], pipeline: PipelineConfig
) -> None:
    server = scripted(script)
    result = run_agentless(calc_repo, server.base_url, tmp_path / "run", pipeline)
    requests = [r for r in server.requests if r.path.endswith("/chat/completions")]
    calls = list(read_trajectory(tmp_path / "run" / "trajectory.jsonl").of_type("model_call"))
    assert len(requests) == len(script) == len(calls)
    assert calls[0]["stage"] == "reproduce" and all(c.get("sample") is not None for c in calls[1:])
    assert [c["messages_delta"][-1]["content"] for c in calls[:1]] == [requests[0].body["messages"][-1]["content"]]
    (stats,) = [x.stats for x in analyze(load_runs([tmp_path / "run"]))]
    totals = result["totals"]
    assert isinstance(totals, dict) and stats.calls == len(requests) == totals["turns"]
    assert (stats.prompt_tokens, stats.output_tokens) == (totals["prompt_tokens"], totals["completion_tokens"])


def test_calls_are_addressed_by_sample_and_turn(trace_runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(trace_runs["agentless_rejected"])
    assert main(["trace", "show", run, "--sample", "1", "--turn", "1"]) == 0
    out = capsys.readouterr().out
    assert "sample 1 · turn 1" in out and "sample 0" not in out and "reproduce" not in out
    assert "return a ** b" in out
    assert main(["trace", "show", run, "--stage", "reproduce"]) == 0
    out = capsys.readouterr().out
    assert "reproduce · call 1" in out and "def test_add_sums" in out and "sample 1" not in out
    assert main(["trace", "show", run, "--sample", "1", "--turn", "2"]) == 2
    err = capsys.readouterr().err
    assert "no sample 1 turn 2" in err and "--sample 1: turns 1..1" in err and "--stage reproduce" in err


def test_the_header_and_the_issue_are_shown_once(trace_runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "show", str(trace_runs["agentless_validated"])]) == 0
    out = capsys.readouterr().out
    assert out.count(CALC_ISSUE) == 1 and "fixed context None" not in out
    header = read_trajectory(trace_runs["agentless_validated"] / "trajectory.jsonl").header
    assert header is not None and header["fixed_context_tokens"] > 0
    assert set(header["fixed_context"]) == {"reproduce", "repair"}
    assert f"fixed context {header['fixed_context_tokens']} tokens (reproduce " in out
    assert "instance agentless_validated · arm agentless" in out


def test_stats_count_the_harness_test_runs(trace_runs: Runs) -> None:
    (x,) = analyze(load_runs([trace_runs["agentless_rejected"]]))
    stages = list(x.run.trajectory.of_type("stage"))
    assert x.stats.harness_test_runs == sum(e.get("test_runs", 0) for e in stages) == 1 + 1 + 2 * 2
    assert x.stats.test_runs == 0 and x.stats.calls == 3  # the reproduction call is counted
    assert (x.stats.samples, x.stats.edited_samples, x.stats.valid_samples) == (2, 2, 0)
    assert x.stats.regressions == ("tests.test_calc::test_mul",)


def test_a_one_shot_run_with_rejected_edits_is_labelled_so(
    trace_runs: Runs, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trace", "labels", str(trace_runs["agentless_rejected"])]) == 0
    out = capsys.readouterr().out
    assert "unvalidated_edits: 2 of 2 samples applied edits; validation accepted none" in out
    assert "tests.test_calc::test_mul" in out
    assert "gave_up_early" not in out and "no_edit" not in out and "turns left" not in out


@pytest.mark.parametrize(
    ("path", "name"),
    [("work/requests/repo", "requests"), ("x/flask/src/checkout", "flask"), ("x/calc", "calc"), ("tmp/repo", "tmp")],
)
def test_instances_are_named_after_a_directory_that_says_something(tmp_path: Path, path: str, name: str) -> None:
    where = tmp_path / path
    where.mkdir(parents=True)
    assert instance_name(where) == name


def test_solve_names_a_checkout_in_repo_after_its_parent(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "requests" / "repo", {"calc/__init__.py": CALC_SOURCE, "tests/test_calc.py": CALC_TEST})
    server = scripted(FIX_SCRIPT)
    out = tmp_path / "run"
    args = ["solve", "--arm", "minimal", "--repo", str(repo), "--issue", CALC_ISSUE, "--base-url", server.base_url]
    proc = subprocess.run(
        [sys.executable, "-m", "snaffle.cli", *args, "--out", str(out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    header = read_trajectory(out / "trajectory.jsonl").header
    assert header is not None and header["task"]["instance_id"] == "requests"
    assert json.loads((out / "result.json").read_text())["instance_id"] == "requests"
