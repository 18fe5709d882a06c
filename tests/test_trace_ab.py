"""`snaffle ab`: two batch dirs of real-loop runs side by side, head-to-head, and the bootstrap interval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from snaffle.trace.ab import BOOTSTRAP_RESAMPLES, bootstrap_difference, compare
from snaffle.trace.analysis import analyze
from snaffle.trace.cli import main
from snaffle.trace.runs import load_runs

Runs = dict[str, Path]
ARM_A = {"i1": "clean", "i2": "redundant_test_runs", "i3": "looping", "i4": "clean"}
ARM_B = {"i1": "clean", "i2": "gave_up_early", "i3": "wrong_location"}


def batch(root: Path, arm: dict[str, str], trace_runs: Runs) -> Path:
    """A batch dir as the SWE-bench runner lays it out: DIR/<instance_id>/ per instance, predictions.jsonl."""
    root.mkdir()
    for instance, scenario in arm.items():
        (root / instance).symlink_to(trace_runs[scenario])
    (root / "predictions.jsonl").write_text("")
    return root


@pytest.fixture
def arms(trace_runs: Runs, tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    a, b = batch(tmp_path / "arm_a", ARM_A, trace_runs), batch(tmp_path / "arm_b", ARM_B, trace_runs)
    report_a, report_b = tmp_path / "report_a.json", tmp_path / "report_b.json"
    report_a.write_text(json.dumps({"resolved_ids": ["i1", "i2", "i4"], "unresolved_ids": ["i3"]}))
    report_b.write_text(json.dumps({"i1": {"resolved": True}, "i2": {"resolved": False}, "i3": {"resolved": False}}))
    return a, b, report_a, report_b


def test_markdown_table_head_to_head_and_interval(
    arms: tuple[Path, Path, Path, Path], gold_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, report_a, report_b = arms
    args = [
        "ab",
        str(a),
        str(b),
        "--md",
        "--report",
        str(report_a),
        "--report",
        str(report_b),
        "--gold",
        str(gold_file),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if line.startswith("| ")}
    assert rows["metric"] == "| metric | arm_a | arm_b |"
    assert rows["attempts"] == "| attempts | 4 (4 finished) | 3 (3 finished) |"
    assert rows["resolved"] == "| resolved | 3/4 (75.0%) | 1/3 (33.3%) |"
    assert rows["label: looping"] == "| label: looping | 1 (25%) | 0 (0%) |"
    assert rows["label: wrong_location"] == "| label: wrong_location | 0 (0%) | 1 (33%) |"
    assert rows["label: gave_up_early"] == "| label: gave_up_early | 0 (0%) | 2 (67%) |"
    assert (
        rows["re-runs, nothing changed (mean)"]
        == "| re-runs, nothing changed (mean) | 0.50 (2 in all) | 0.00 (0 in all) |"
    )
    for name in (
        "cost per resolved",
        "cost per attempt",
        "agent time median (s)",
        "calls median",
        "fixed context (tokens)",
        "prompt tokens per call",
        "output tokens (mean)",
        "test runs (mean)",
        "test-file edits (mean)",
    ):
        assert name in rows
    assert "resolved by both 1, only arm_a 1, only arm_b 0, neither 1" in out
    assert "Graded in arm_a only: 1" in out
    assert "Resolve-rate difference arm_a − arm_b: +33.3 points, 95% bootstrap CI [" in out


def test_json_and_terminal_table(arms: tuple[Path, Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b, report_a, report_b = arms
    assert main(["ab", str(a), str(b), "--json", "--report", str(report_a), "--report", str(report_b)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["head_to_head"] == {"both": 1, "only_a": 1, "only_b": 0, "neither": 1, "not_in_b": 1, "not_in_a": 0}
    assert data["runs"]["arm_a"]["resolved"] == 3 and data["runs"]["arm_b"]["labels"]["gave_up_early"] == 2
    assert data["resolve_rate_difference"]["n"] == 3
    assert main(["ab", str(a), str(b), "--names", "minimal", "agentless"]) == 0
    out = capsys.readouterr().out
    assert "minimal" in out and "agentless" in out and "Not graded: pass --report" in out


def test_the_same_report_can_grade_both(
    arms: tuple[Path, Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, report_a, _ = arms
    assert main(["ab", str(a), str(a), "--json", "--report", str(report_a)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["resolve_rate_difference"] == {"estimate": 0.0, "low": 0.0, "high": 0.0, "n": 4, "confidence": 0.95}


def test_bootstrap_is_deterministic_and_brackets_the_estimate() -> None:
    pairs = [(True, False)] * 12 + [(False, True)] * 4 + [(True, True)] * 10 + [(False, False)] * 14
    first, second = bootstrap_difference(pairs), bootstrap_difference(pairs)
    assert first == second and first.estimate == pytest.approx(0.2) and first.n == 40
    assert first.low < 0.2 < first.high and -0.1 < first.low and first.high < 0.45
    assert bootstrap_difference([(True, False)] * 5).low == 1.0
    assert BOOTSTRAP_RESAMPLES >= 1000


def test_compare_without_grades_has_no_head_to_head(trace_runs: Runs) -> None:
    a = analyze(load_runs([trace_runs["clean"]]))
    comparison = compare(a, a)
    assert comparison.head_to_head is None and comparison.difference is None
    assert comparison.summaries[0].attempts == 1


def test_too_many_reports_is_a_user_error(
    arms: tuple[Path, Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, report_a, _ = arms
    assert main(["ab", str(a), str(b), *["--report", str(report_a)] * 3]) == 2
    assert "once" in capsys.readouterr().err
