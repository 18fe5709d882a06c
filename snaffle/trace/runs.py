"""Finding and loading attempts on disk (a run dir, a batch dir of run dirs, a trajectory file), grading
reports and gold patches."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snaffle.exceptions import UserError
from snaffle.trajectory import PATCH_FILE, RESULT_FILE, TRAJECTORY_FILE, Trajectory, read_trajectory
from snaffle.types import Event

ANY_INSTANCE = "*"
"""The key of a gold patch given as a plain diff: it applies to every attempt."""
REPORT_ID_LISTS = (
    "submitted_ids",
    "completed_ids",
    "incomplete_ids",
    "resolved_ids",
    "unresolved_ids",
    "empty_patch_ids",
    "error_ids",
)


@dataclass(frozen=True)
class Run:
    """One attempt on disk: its trajectory, its result.json (empty when absent) and its final patch."""

    path: Path
    instance_id: str
    trajectory: Trajectory
    result: Mapping[str, Any] = field(default_factory=dict)
    patch: str = ""

    @property
    def header(self) -> Event:
        return self.trajectory.header or {}

    @property
    def exit(self) -> Event:
        return self.trajectory.exit or {}


def locate(paths: Sequence[Path]) -> list[tuple[Path, str | None]]:
    """Trajectory files named by `paths`, each with the instance id its batch dir gives it (or None)."""
    found: list[tuple[Path, str | None]] = []
    for path in paths:
        found.extend(_locate_one(path))
    if not found:
        raise UserError(f"no trajectory found in {', '.join(map(str, paths))}: pass a run dir, a batch dir or a file")
    return found


def _locate_one(path: Path) -> Iterator[tuple[Path, str | None]]:
    if path.is_file():
        yield path, None
    elif (path / TRAJECTORY_FILE).is_file():
        yield path / TRAJECTORY_FILE, None
    elif path.is_dir():
        # a batch dir holds one run dir per instance: DIR/<instance_id>/trajectory.jsonl
        for child in sorted(path.iterdir()):
            if (child / TRAJECTORY_FILE).is_file():
                yield child / TRAJECTORY_FILE, child.name
    else:
        raise UserError(f"not found: {path} (pass a run dir, a batch dir or a trajectory.jsonl)")


def load_runs(paths: Sequence[Path]) -> list[Run]:
    """Every attempt under `paths`, in order."""
    return [load_run(file, instance_id) for file, instance_id in locate(paths)]


def load_run(file: Path, instance_id: str | None = None) -> Run:
    """One attempt: the trajectory (a torn last line tolerated) and, beside it, result.json and patch.diff."""
    try:
        trajectory = read_trajectory(file)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the trajectory {file}: {exc}") from exc
    result = _read_json(file.parent / RESULT_FILE) if file.name == TRAJECTORY_FILE else {}
    patch_file = file.parent / PATCH_FILE
    exit_event = trajectory.exit or {}
    if file.name == TRAJECTORY_FILE and patch_file.is_file():
        patch = patch_file.read_text(encoding="utf-8", errors="replace")
    else:
        patch = str(exit_event.get("patch") or "")
    header_task = (trajectory.header or {}).get("task") or {}
    name = instance_id or result.get("instance_id") or header_task.get("instance_id") or file.parent.name
    return Run(file.parent, str(name), trajectory, result, patch)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_report(path: Path) -> dict[str, bool]:
    """Instance id -> resolved, from a SWE-bench report: `{"resolved_ids": [...], ...}` or `{"<id>": {"resolved"}}`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the report {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path}: a report is a JSON object (SWE-bench's run report or per-instance report)")
    if "resolved_ids" in data:
        resolved = {str(i) for i in data["resolved_ids"]}
        graded = {str(i) for key in REPORT_ID_LISTS for i in data.get(key) or ()}
        return {i: i in resolved for i in sorted(graded | resolved)}
    graded_items = {k: v for k, v in data.items() if isinstance(v, dict) and "resolved" in v}
    if not graded_items:
        raise UserError(f"{path}: no `resolved_ids` and no per-instance `resolved` fields; is it a SWE-bench report?")
    return {str(k): bool(v["resolved"]) for k, v in graded_items.items()}


def load_reports(paths: Sequence[Path] | None) -> dict[str, bool]:
    """Several reports merged (later ones win)."""
    merged: dict[str, bool] = {}
    for path in paths or ():
        merged.update(load_report(path))
    return merged


def resolved(run: Run, report: Mapping[str, bool]) -> bool | None:
    """Graded outcome: the report's verdict, else a boolean `resolved` in result.json, else unknown (None)."""
    if run.instance_id in report:
        return report[run.instance_id]
    value = run.result.get("resolved")
    return value if isinstance(value, bool) else None


def load_gold(path: Path) -> dict[str, str]:
    """Gold patches: a plain diff (for any instance) or SWE-bench instances (JSON list, JSONL, or {id: patch})."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"cannot read the gold patch file {path}: {exc}") from exc
    stripped = text.lstrip()
    if not stripped.startswith(("[", "{")):
        return {ANY_INSTANCE: text}
    try:
        data: Any = json.loads(stripped)
    except ValueError:
        data = _json_lines(path, stripped)
    if isinstance(data, dict) and all(isinstance(v, str) for v in data.values()):
        return {str(k): v for k, v in data.items()}
    items = data if isinstance(data, list) else [data]
    gold = {str(i["instance_id"]): str(i["patch"]) for i in items if isinstance(i, dict) and "patch" in i}
    if not gold:
        raise UserError(f"{path}: no gold patch found; pass a diff or SWE-bench instances with `patch` fields")
    return gold


def _json_lines(path: Path, text: str) -> list[Any]:
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise UserError(f"{path}: neither a diff, nor JSON, nor JSON lines ({exc})") from exc


def gold_for(run: Run, gold: Mapping[str, str]) -> str | None:
    return gold.get(run.instance_id, gold.get(ANY_INSTANCE))
