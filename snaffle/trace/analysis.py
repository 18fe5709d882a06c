"""An attempt read back: its run, its profile, its failure labels (with the gold patch's location when known)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from snaffle.trace.labels import Label, label
from snaffle.trace.locate import BaseSource, LocationCheck, check_location, git_source
from snaffle.trace.runs import Run, gold_for
from snaffle.trace.stats import AttemptStats, attempt_stats


@dataclass(frozen=True)
class Analysis:
    """One attempt: where it is on disk, its profile and its labels."""

    run: Run
    stats: AttemptStats
    labels: tuple[Label, ...]
    location: LocationCheck | None


def analyze(
    runs: Sequence[Run],
    report: Mapping[str, bool] | None = None,
    gold: Mapping[str, str] | None = None,
    repo: Path | None = None,
) -> list[Analysis]:
    """Profile and label each attempt; `repo` (a checkout at the base) overrides the repo named in the header."""
    analyses = []
    for run in runs:
        stats = attempt_stats(run, report)
        gold_patch = gold_for(run, gold) if gold else None
        where = check_location(run.patch, gold_patch, base_source(run, repo)) if gold_patch is not None else None
        analyses.append(Analysis(run, stats, label(stats, where), where))
    return analyses


def base_source(run: Run, repo: Path | None) -> BaseSource | None:
    """Files at the base: `repo` if given, else the task's repo from the header when it is still on disk."""
    if repo is not None:
        return git_source(repo)
    task_repo = (run.header.get("task") or {}).get("repo")
    if isinstance(task_repo, str) and Path(task_repo).is_dir():
        return git_source(Path(task_repo))
    return None
