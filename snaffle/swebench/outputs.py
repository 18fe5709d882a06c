"""The batch's files: `predictions.jsonl` (SWE-bench's format), `exit_statuses.json`, each instance's run directory.

An instance is done when its `result.json` exists with a status other than `crashed` or `interrupted`; a rerun
skips it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from snaffle.trajectory import PATCH_FILE, RESULT_FILE, TRAJECTORY_FILE, write_result

PREDICTIONS = "predictions.jsonl"
EXIT_STATUSES = "exit_statuses.json"
CRASHED = "crashed"
RERUN = (CRASHED, "interrupted")
"""Statuses that are not results: a rerun of the batch runs these instances again."""


def instance_dir(out: Path, instance_id: str) -> Path:
    return out / instance_id.replace("/", "__")


def read_result(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / RESULT_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def is_done(run_dir: Path) -> bool:
    result = read_result(run_dir)
    return result is not None and result.get("exit_status") not in (None, *RERUN)


def read_patch(run_dir: Path) -> str:
    try:
        return (run_dir / PATCH_FILE).read_text(encoding="utf-8")
    except OSError:
        return ""


def prediction(instance_id: str, model_name: str, patch: str) -> dict[str, str]:
    return {"instance_id": instance_id, "model_name_or_path": model_name, "model_patch": patch}


def read_predictions(path: Path) -> dict[str, dict[str, Any]]:
    """Predictions by instance id (JSON lines or a JSON list); a torn or foreign line is skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    if text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = []
        for line in text.splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return {str(r["instance_id"]): r for r in rows if isinstance(r, dict) and "instance_id" in r}


def write_predictions(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Rewrite the file atomically."""
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(dict(r)) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


def append_prediction(path: Path, row: Mapping[str, Any]) -> None:
    """Append one line and make it durable before the next instance is reported."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(dict(row)) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def write_exit_statuses(out: Path, statuses: Mapping[str, str]) -> None:
    """`{"instances_by_exit_status": {status: [ids]}, "counts": {...}, "total": n}`, written atomically."""
    by_status: dict[str, list[str]] = {}
    for instance_id, status in sorted(statuses.items()):
        by_status.setdefault(status, []).append(instance_id)
    body = {"instances_by_exit_status": by_status, "counts": dict(Counter(statuses.values())), "total": len(statuses)}
    tmp = out / f"{EXIT_STATUSES}.tmp"
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(out / EXIT_STATUSES)


def collect_statuses(out: Path) -> dict[str, str]:
    """Exit status of every instance with a result under `out` (earlier runs of the batch included)."""
    statuses = {}
    for result_path in sorted(out.glob(f"*/{RESULT_FILE}")):
        result = read_result(result_path.parent)
        if result is not None and "instance_id" in result:
            statuses[str(result["instance_id"])] = str(result.get("exit_status"))
    return statuses


def write_crash(run_dir: Path, instance_id: str, arm: str, model: str, error: str) -> None:
    """A crashed instance: its traceback in result.json, an empty patch (so predictions stay valid)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / PATCH_FILE).write_text("", encoding="utf-8")
    lines = error.strip().splitlines()
    write_result(run_dir, {
        "instance_id": instance_id, "arm": arm, "model": model, "exit_status": CRASHED,
        "message": lines[-1] if lines else "crashed", "traceback": error, "patch_kind": "empty",
        "patch_path": PATCH_FILE, "trajectory_path": TRAJECTORY_FILE, "totals": {}, "shim": None,
        "usage_disagreement": False,
    })  # fmt: skip


def merge_result(run_dir: Path, extra: Mapping[str, Any]) -> None:
    """Add batch-level facts (checkout, shim totals, elapsed) to an instance's result.json."""
    result = read_result(run_dir)
    if result is not None:
        result.pop("format", None)
        write_result(run_dir, {**result, **extra})


def unpack(run_dir: Path, files: Mapping[str, bytes]) -> None:
    """Write a shipped run directory; result.json last, so a kill never leaves a done-looking partial copy."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    for name in sorted(files, key=lambda n: n == RESULT_FILE):
        target = run_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(files[name])
