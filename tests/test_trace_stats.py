"""`snaffle trace stats`: each figure of the efficiency profile, read from real-loop trajectories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from snaffle.trace.cli import main
from snaffle.trace.runs import load_report, load_run, load_runs
from snaffle.trace.stats import AttemptStats, attempt_stats, patch_lines, summarize
from snaffle.trajectory import read_trajectory

Runs = dict[str, Path]


def stats_of(run_dir: Path) -> AttemptStats:
    return attempt_stats(load_run(run_dir / "trajectory.jsonl"))


def test_clean_run_profile_matches_its_trajectory(trace_runs: Runs) -> None:
    s = stats_of(trace_runs["clean"])
    trajectory = read_trajectory(trace_runs["clean"] / "trajectory.jsonl")
    assert trajectory.exit is not None and trajectory.header is not None
    totals = trajectory.exit["totals"]
    assert (s.status, s.calls, s.tool_calls, s.test_runs, s.test_reruns_unchanged) == ("submitted", 5, 4, 2, 0)
    assert s.fixed_context == trajectory.header["fixed_context_tokens"] > 0
    assert s.prompt_tokens == totals["prompt_tokens"] and s.output_tokens == totals["completion_tokens"]
    assert s.prompt_per_call == pytest.approx(totals["prompt_tokens"] / 5)
    assert s.wall_s == totals["elapsed_s"] and s.dollars == pytest.approx(totals["dollars"])
    assert s.dollars_source == "harness" and s.changed_calls == 1 and s.patch_lines == 2
    assert s.tested_after_last_change and not s.torn and s.turn_cap == 20
    assert (s.rejected_calls, s.malformed_turns, s.lint_rejections, s.collapsed, s.compactions) == (0, 0, 0, 0, 0)


def test_reruns_with_nothing_changed_count_refused_repeats(trace_runs: Runs) -> None:
    s = stats_of(trace_runs["redundant_test_runs"])
    assert (s.test_runs, s.test_reruns_unchanged, s.refusals) == (5, 2, {"repeat": 2})
    assert s.longest_repeat == 2


def test_rejected_and_malformed(trace_runs: Runs) -> None:
    s = stats_of(trace_runs["malformed_storm"])
    assert (s.rejected_calls, s.malformed_turns, s.refusals) == (2, 3, {"format": 1})


def test_test_file_edits_and_looping_counts(trace_runs: Runs) -> None:
    assert stats_of(trace_runs["test_file_edits"]).test_file_edits == 1
    looping = stats_of(trace_runs["looping"])
    assert (looping.longest_repeat, looping.longest_repeat_call, looping.status) == (4, "bash: ls", "looping")


def test_policy_events_lint_collapse_compaction(trace_runs: Runs) -> None:
    s = stats_of(trace_runs["context_pressure"])
    events = [e["type"] for e in read_trajectory(trace_runs["context_pressure"] / "trajectory.jsonl").events]
    assert s.lint_rejections == 1 and s.compactions == events.count("compaction") >= 1
    assert s.collapsed == events.count("collapse") >= 1


def test_dollars_prefer_the_shims_figures(trace_runs: Runs) -> None:
    s = stats_of(trace_runs["shim_dollars"])
    assert (s.dollars, s.dollars_source) == (1.25, "shim")


def test_a_torn_trajectory_still_profiles(trace_runs: Runs) -> None:
    torn, clean = stats_of(trace_runs["torn"]), stats_of(trace_runs["clean"])
    assert torn.torn and torn.status == "incomplete"
    assert (torn.calls, torn.prompt_tokens, torn.test_runs) == (clean.calls, clean.prompt_tokens, clean.test_runs)
    stamps = [e["t"] for e in read_trajectory(trace_runs["torn"] / "trajectory.jsonl").events]
    assert 0 < torn.wall_s == round(stamps[-1] - stamps[0], 3)  # no exit line: the span of the stamps


def test_summary_medians_means_and_pooled_prompt_per_call(trace_runs: Runs) -> None:
    stats = [stats_of(trace_runs[n]) for n in ("clean", "looping", "gave_up_early")]
    summary = summarize(stats)
    assert summary.attempts == 3 and summary.metrics["calls"].median == 4
    assert summary.metrics["calls"].total == sum(s.calls for s in stats)
    pooled = sum(s.prompt_tokens for s in stats) / sum(s.calls for s in stats)
    assert summary.metrics["prompt_per_call"].mean == pytest.approx(pooled)
    assert summary.graded == 0 and summary.resolve_rate is None


def test_patch_lines_ignores_file_headers() -> None:
    assert patch_lines("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n context\n") == 2


@pytest.mark.parametrize(
    "report",
    [
        {"resolved_ids": ["clean"], "unresolved_ids": ["looping"], "submitted_ids": ["clean", "looping"]},
        {"clean": {"resolved": True}, "looping": {"resolved": False}},
    ],
)
def test_reports_in_both_swebench_formats(trace_runs: Runs, tmp_path: Path, report: dict[str, object]) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    assert load_report(path) == {"clean": True, "looping": False}
    runs = load_runs([trace_runs["clean"], trace_runs["looping"], trace_runs["no_edit"]])
    graded = [attempt_stats(r, load_report(path)).resolved for r in runs]
    assert graded == [True, False, None]


def test_stats_command_json_and_table(trace_runs: Runs, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"resolved_ids": ["clean"], "unresolved_ids": ["looping"]}))
    dirs = [str(trace_runs[n]) for n in ("clean", "looping", "torn")]
    assert main(["trace", "stats", *dirs, "--json", "--report", str(report)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [a["instance_id"] for a in data["attempts"]] == ["clean", "looping", "clean"]
    assert data["aggregate"]["attempts"] == 3 and data["aggregate"]["complete"] == 2
    assert data["aggregate"]["resolved"] == 2 and data["aggregate"]["graded"] == 3  # torn copy is instance clean
    assert main(["trace", "stats", *dirs]) == 0
    out = capsys.readouterr().out
    assert "incomplete (torn)" in out and "looping" in out and "3 attempts (2 finished)" in out


def test_a_batch_dir_names_instances_by_their_dirs(trace_runs: Runs, tmp_path: Path) -> None:
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "predictions.jsonl").write_text("")
    for name in ("clean", "looping"):
        (batch / f"repo__{name}-1").symlink_to(trace_runs[name])
    assert [r.instance_id for r in load_runs([batch])] == ["repo__clean-1", "repo__looping-1"]


def test_missing_paths_and_corrupt_files_are_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "stats", str(tmp_path / "nope")]) == 2
    assert "not found" in capsys.readouterr().err
    (tmp_path / "trajectory.jsonl").write_text('{"type": "header"}\n{broken\n{"type": "exit"}\n')
    assert main(["trace", "stats", str(tmp_path)]) == 2
    assert "corrupt trajectory line" in capsys.readouterr().err
