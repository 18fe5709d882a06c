"""Finding and loading attempts on disk (a run dir, a batch dir of run dirs, a trajectory file), grading
reports and gold patches."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snaffle.exceptions import UserError
from snaffle.trace.schema import kind_of, load_result, load_trajectory
from snaffle.trajectory import PATCH_FILE, RESULT_FILE, TRAJECTORY_FILE, Trajectory
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
    trajectory = load_trajectory(file)
    result = load_result(file.parent / RESULT_FILE) if file.name == TRAJECTORY_FILE else {}
    patch = _patch(file) if file.name == TRAJECTORY_FILE else None
    if patch is None:
        patch = str((trajectory.exit or {}).get("patch") or "")
    header_task = (trajectory.header or {}).get("task") or {}
    name = instance_id or result.get("instance_id") or header_task.get("instance_id") or file.parent.name
    return Run(file.parent, str(name), trajectory, result, patch)


def _patch(file: Path) -> str | None:
    """patch.diff beside the trajectory, or None when there is none."""
    path = file.parent / PATCH_FILE
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"cannot read the patch {path}: {exc.strerror or exc}") from exc


def run_names(runs: Sequence[Run]) -> list[str]:
    """Each run's name from its directory: the fewest last path parts that tell it apart from the others."""
    paths = [run.path.resolve() for run in runs]
    for depth in range(1, max((len(p.parts) for p in paths), default=1) + 1):
        names = ["/".join(p.parts[-depth:]) for p in paths]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def load_report(path: Path) -> dict[str, bool]:
    """Instance id -> resolved, from a SWE-bench report: `{"resolved_ids": [...], ...}` or `{"<id>": {"resolved"}}`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the report {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path}: a report is a JSON object (SWE-bench's run report or per-instance report)")
    if "resolved_ids" in data:
        lists = {key: _id_list(path, data, key) for key in REPORT_ID_LISTS}
        resolved = set(lists["resolved_ids"])
        graded = {i for ids in lists.values() for i in ids}
        return {i: i in resolved for i in sorted(graded | resolved)}
    graded_items = {k: v for k, v in data.items() if isinstance(v, dict) and "resolved" in v}
    if not graded_items:
        raise UserError(f"{path}: no `resolved_ids` and no per-instance `resolved` fields; is it a SWE-bench report?")
    for key, entry in graded_items.items():
        if not isinstance(entry["resolved"], bool):
            raise UserError(f'{path}: "{key}.resolved" is {kind_of(entry["resolved"])}, expected true or false')
    return {str(k): v["resolved"] for k, v in graded_items.items()}


def _id_list(path: Path, data: Mapping[str, Any], key: str) -> list[str]:
    ids = data.get(key) or []
    if not isinstance(ids, list):
        raise UserError(f'{path}: "{key}" is {kind_of(ids)}, expected a list of instance ids')
    return [str(i) for i in ids]


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
    if isinstance(data, dict) and "patch" not in data:
        return _patches_by_id(path, data)
    items = data if isinstance(data, list) else [data]
    gold = dict(_gold_item(f"{path}[{n}]", item) for n, item in enumerate(items))
    if not gold:
        raise UserError(f"{path}: no gold patch found; pass a diff or SWE-bench instances with `patch` fields")
    return gold


def _patches_by_id(path: Path, data: Mapping[str, Any]) -> dict[str, str]:
    """`{instance_id: patch}`."""
    for key, patch in data.items():
        if not isinstance(patch, str):
            raise UserError(f'{path}: the gold patch of "{key}" is {kind_of(patch)}, expected a string (a diff)')
    return dict(data)


def _gold_item(where: str, item: object) -> tuple[str, str]:
    """One SWE-bench instance's id and gold patch."""
    if not isinstance(item, dict):
        raise UserError(f"{where}: an instance is a JSON object, got {kind_of(item)}")
    instance_id, patch = item.get("instance_id"), item.get("patch")
    if not isinstance(instance_id, str) or not isinstance(patch, str):
        raise UserError(f'{where}: an instance has "instance_id" and "patch" (strings); this one has not')
    return instance_id, patch


def _json_lines(path: Path, text: str) -> list[Any]:
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise UserError(f"{path}: neither a diff, nor JSON, nor JSON lines ({exc})") from exc


def gold_for(run: Run, gold: Mapping[str, str]) -> str | None:
    return gold.get(run.instance_id, gold.get(ANY_INSTANCE))
