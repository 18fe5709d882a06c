"""The batch's files: `predictions.jsonl` (SWE-bench's format), `exit_statuses.json`, each instance's run directory.

An instance is done when its `result.json` exists with a status other than `crashed` or `interrupted`; a rerun
skips it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from snaffle.exceptions import UserError
from snaffle.trajectory import PATCH_FILE, RESULT_FILE, TRAJECTORY_FILE, redact, redact_bytes, write_result

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


def prediction_patches(path: Path) -> dict[str, str]:
    """The patch of each prediction to grade (JSON lines or a JSON list; a null patch is empty), checked: bad input
    is a UserError naming the file and line; only a torn last line (a batch killed mid-write) is skipped."""
    text = _predictions_text(path)
    rows = _json_list(path, text) if text.lstrip().startswith("[") else _json_lines(path, text)
    if not rows:
        raise UserError(f'{path}: no predictions; expected JSON lines of {{"instance_id": ..., "model_patch": ...}}')
    patches: dict[str, str] = {}
    first_at: dict[str, str] = {}
    for where, row in rows:
        instance_id, patch = _prediction(where, row)
        if instance_id in first_at:
            raise UserError(f"{where}: instance_id {instance_id!r} appears twice (first at {first_at[instance_id]})")
        first_at[instance_id], patches[instance_id] = where, patch
    return patches


def _predictions_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read the predictions {path}: {exc.strerror or exc}") from exc
    try:
        if b"\0" not in data:
            return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    raise UserError(f"{path}: not UTF-8 text (a binary file?); predictions are JSON lines or a JSON list")


def _json_list(path: Path, text: str) -> list[tuple[str, object]]:
    try:
        rows = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UserError(f"{path}:{getattr(exc, 'lineno', 1)}: not valid JSON ({getattr(exc, 'msg', exc)})") from exc
    if not isinstance(rows, list):
        raise UserError(f"{path}: expected a JSON list of predictions")
    return [(f"{path}[{n}]", row) for n, row in enumerate(rows)]


def _json_lines(path: Path, text: str) -> list[tuple[str, object]]:
    lines = text.split("\n")
    last = max((n for n, line in enumerate(lines, start=1) if line.strip()), default=0)
    rows: list[tuple[str, object]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append((f"{path}:{number}", json.loads(line)))
        except (ValueError, RecursionError) as exc:
            if number == last == len(lines) and rows:
                break  # torn: the last line, with no newline after it
            raise UserError(f"{path}:{number}: not valid JSON ({getattr(exc, 'msg', exc)})") from exc
    return rows


def _prediction(where: str, row: object) -> tuple[str, str]:
    if not isinstance(row, dict):
        raise UserError(f"{where}: a prediction is a JSON object, got {_shown(row)}")
    instance_id = row.get("instance_id")
    if not isinstance(instance_id, str) or not instance_id:
        raise UserError(f'{where}: a prediction has an "instance_id" (a non-empty string); got {_shown(instance_id)}')
    if "model_patch" not in row:
        raise UserError(f'{where}: the prediction for {instance_id!r} has no "model_patch" (a diff, or null for none)')
    patch = row["model_patch"]
    if patch is not None and not isinstance(patch, str):
        raise UserError(f'{where}: "model_patch" of {instance_id!r} is {_shown(patch)}, expected a diff (a string)')
    return instance_id, patch or ""


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def write_predictions(path: Path, rows: Iterable[Mapping[str, Any]], secrets: Sequence[str] = ()) -> None:
    """Rewrite the file atomically, redacted."""
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text(redact("".join(json.dumps(dict(r)) + "\n" for r in rows), secrets), encoding="utf-8")
    tmp.replace(path)


def append_prediction(path: Path, row: Mapping[str, Any], secrets: Sequence[str] = ()) -> None:
    """Append one line (redacted) and make it durable before the next instance is reported."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(redact(json.dumps(dict(row)), secrets) + "\n")
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
    write_result(
        run_dir,
        {
            "instance_id": instance_id,
            "arm": arm,
            "model": model,
            "exit_status": CRASHED,
            "message": lines[-1] if lines else "crashed",
            "traceback": error,
            "patch_kind": "empty",
            "patch_path": PATCH_FILE,
            "trajectory_path": TRAJECTORY_FILE,
            "totals": {},
            "shim": None,
            "usage_disagreement": False,
        },
    )


def merge_result(run_dir: Path, extra: Mapping[str, Any], secrets: Sequence[str] = ()) -> None:
    """Add batch-level facts (checkout, shim totals, elapsed) to an instance's result.json."""
    result = read_result(run_dir)
    if result is not None:
        result.pop("format", None)
        write_result(run_dir, {**result, **extra}, secrets)


def unpack(run_dir: Path, files: Mapping[str, bytes], secrets: Sequence[str] = ()) -> None:
    """Write a shipped run directory (redacted); result.json last, so a kill never leaves a done-looking partial
    copy."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    for name in sorted(files, key=lambda n: n == RESULT_FILE):
        target = run_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(redact_bytes(files[name], secrets))
