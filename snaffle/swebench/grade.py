"""Grading predictions: SWE-bench's own Docker harness when a daemon answers, else locally in a virtualenv per
(repo, version). Locally each instance is checked out, installed, patched, given its test patch, and its tests run
with the repo's test command; SWE-bench's parsers and report code decide. An environment that cannot be built
here, or in which the instance's gold patch does not resolve, is reported as `env_unavailable`, never as a failure
of the patch."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snaffle.cache import cache_dir
from snaffle.exceptions import UserError
from snaffle.swebench import outputs
from snaffle.swebench.envs import PythonEnv, install, prepared_env, read_marker
from snaffle.swebench.instances import Instance
from snaffle.swebench.local_eval import Evaluation, evaluate, isolation_prefix
from snaffle.swebench.specs import EnvSpec, EnvUnavailable, env_spec
from snaffle.swebench.workspaces import (
    Sources,
    WorkspaceUnavailable,
    check_source,
    docker_available,
    prepare_checkout,
)

STATUSES = ("resolved", "unresolved", "error", "env_unavailable")


@dataclass(frozen=True)
class GradeConfig:
    """What to grade and how; `predictions` may be the word `gold` (each instance's own patch)."""

    instances: tuple[Instance, ...]
    predictions: Path
    out: Path
    sources: Sources
    grader: str = "auto"
    env_dir: Path | None = None
    """None: the user cache's `swebench-envs` (see `env_root`)."""
    test_timeout_s: float = 1800.0
    isolate_network: str = "auto"
    run_id: str = "snaffle"
    workers: int = 1
    instances_file: Path | None = None
    calibrate: bool = True
    """Check first that each instance's gold patch resolves here; if not, the instance is env_unavailable."""


@dataclass(frozen=True)
class Graded:
    """One instance's verdict, and SWE-bench's report for it (`{instance_id: {...}}`)."""

    instance_id: str
    status: str
    report: dict[str, Any]
    reason: str = ""


def grade(config: GradeConfig) -> dict[str, Any]:
    """Grade every selected instance that has a prediction; write and return the run report."""
    submitted = load_predictions(config)
    config.out.mkdir(parents=True, exist_ok=True)
    if choose_grader(config.grader) == "docker":
        return grade_with_docker(config, submitted)
    prefix = isolation_prefix(config.isolate_network)
    results = [
        grade_one(config, i, submitted[i.instance_id], prefix) for i in config.instances if i.instance_id in submitted
    ]
    summary = summarize(config, submitted, results, "local")
    write_json(config.out / "report.json", summary)
    return summary


def load_predictions(config: GradeConfig) -> dict[str, str]:
    if str(config.predictions) == "gold":
        return {i.instance_id: i.patch for i in config.instances}
    if not config.predictions.is_file():
        raise UserError(f"predictions file not found: {config.predictions}")
    return outputs.prediction_patches(config.predictions)


def choose_grader(grader: str) -> str:
    if grader == "local":
        return "local"
    available = docker_available()
    if grader == "docker" and not available:
        raise UserError("--grader docker: no Docker daemon answers here; use --grader local")
    return "docker" if available else "local"


def grade_one(config: GradeConfig, instance: Instance, patch: str, prefix: list[str]) -> Graded:
    """Env, calibration (the gold patch must resolve here first), then the prediction in a fresh checkout."""
    run_dir = outputs.instance_dir(config.out, instance.instance_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "run_instance.log"
    log.write_text(f"grading {instance.instance_id} ({instance.repo} {instance.version})\n", encoding="utf-8")
    try:
        spec = env_spec(instance.repo, instance.version)
        check_source(instance.repo, config.sources)
        env = prepared_env(spec, instance, env_root(config), config.sources, log)
        if config.calibrate and instance.patch:
            gold_report = calibrate(config, instance, spec, env, prefix, run_dir)
            if patch == instance.patch:
                return record(run_dir, Graded(instance.instance_id, "resolved", gold_report))
        return record(run_dir, run_patch(config, instance, patch, spec, env, prefix, run_dir))
    except (EnvUnavailable, WorkspaceUnavailable) as exc:
        return record(run_dir, unavailable(instance, patch, str(exc)))


def env_root(config: GradeConfig) -> Path:
    """Where the virtualenvs per (repo, version) are kept: `--env-dir`, else the user cache (read now)."""
    return config.env_dir or cache_dir("swebench-envs")


def run_patch(
    config: GradeConfig,
    instance: Instance,
    patch: str,
    spec: EnvSpec,
    env: PythonEnv,
    prefix: list[str],
    run_dir: Path,
) -> Graded:
    """A fresh checkout at the base commit, installed, then SWE-bench's evaluation of `patch`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="snaffle-grade-") as scratch:
        checkout = prepare_checkout(instance.repo, instance.base_commit, Path(scratch) / "repo", config.sources)
        install(checkout.path, spec, env, run_dir / "run_instance.log", required=True)
        evaluation = Evaluation(instance, patch, checkout.path, spec, env, run_dir, config.test_timeout_s, prefix)
        return verdict(instance, evaluate(evaluation))


def calibrate(
    config: GradeConfig, instance: Instance, spec: EnvSpec, env: PythonEnv, prefix: list[str], run_dir: Path
) -> dict[str, Any]:
    """The gold patch's report; EnvUnavailable unless it resolves in this environment (cached per env recipe)."""
    cache = env.root.parent / "calibration" / f"{instance.instance_id}.json"
    recipe = read_marker(env.root)
    known = read_json(cache)
    if known is None or known.get("recipe") != recipe:
        gold = run_patch(config, instance, instance.patch, spec, env, prefix, run_dir / "gold")
        tests = gold.report.get(instance.instance_id, {}).get("tests_status", {})
        failing = [t for kind in ("FAIL_TO_PASS", "PASS_TO_PASS") for t in tests.get(kind, {}).get("failure", [])]
        known = {
            "recipe": recipe,
            "status": gold.status,
            "failing": failing,
            "reason": gold.reason,
            "report": gold.report,
        }
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_json(cache, known)
    if known["status"] != "resolved":
        failing = known.get("failing") or []
        shown = ", ".join(failing[:3]) + (f" and {len(failing) - 3} more" if len(failing) > 3 else "")
        raise EnvUnavailable(
            f"the gold patch does not resolve here ({known['status']}: {shown or known['reason']}); "
            "this environment differs from SWE-bench's (network, system packages?)"
        )
    report: dict[str, Any] = known.get("report") or {}
    return report


def verdict(instance: Instance, outcome: tuple[dict[str, Any], str]) -> Graded:
    report, error = outcome
    entry = report.get(instance.instance_id, {})
    if error:
        return Graded(instance.instance_id, "error", report, error)
    return Graded(instance.instance_id, "resolved" if entry.get("resolved") else "unresolved", report)


def unavailable(instance: Instance, patch: str, reason: str) -> Graded:
    entry = {
        "patch_is_None": False,
        "patch_exists": bool(patch.strip()),
        "patch_successfully_applied": False,
        "resolved": False,
        "env_unavailable": reason,
    }
    return Graded(instance.instance_id, "env_unavailable", {instance.instance_id: entry}, reason)


def record(run_dir: Path, graded: Graded) -> Graded:
    write_json(run_dir / "report.json", graded.report)
    write_json(
        run_dir / "status.json", {"instance_id": graded.instance_id, "status": graded.status, "reason": graded.reason}
    )
    with (run_dir / "run_instance.log").open("a", encoding="utf-8") as log:
        log.write(f"status: {graded.status} {graded.reason}\n")
    return graded


def summarize(config: GradeConfig, submitted: dict[str, str], results: list[Graded], grader: str) -> dict[str, Any]:
    """SWE-bench's run report fields, plus `env_unavailable` and the status and reason of each instance."""
    ids = {status: sorted(g.instance_id for g in results if g.status == status) for status in STATUSES}
    graded = {g.instance_id for g in results}
    empty = sorted(i for i in graded if not submitted[i].strip())
    return {
        "total_instances": len(config.instances),
        "submitted_instances": len(graded),
        "completed_instances": len(ids["resolved"]) + len(ids["unresolved"]),
        "resolved_instances": len(ids["resolved"]),
        "unresolved_instances": len(ids["unresolved"]),
        "empty_patch_instances": len(empty),
        "error_instances": len(ids["error"]),
        "env_unavailable_instances": len(ids["env_unavailable"]),
        "completed_ids": sorted(ids["resolved"] + ids["unresolved"]),
        "incomplete_ids": sorted(i.instance_id for i in config.instances if i.instance_id not in graded),
        "empty_patch_ids": empty,
        "submitted_ids": sorted(graded),
        "resolved_ids": ids["resolved"],
        "unresolved_ids": ids["unresolved"],
        "error_ids": ids["error"],
        "env_unavailable_ids": ids["env_unavailable"],
        "statuses": {g.instance_id: g.status for g in results},
        "reasons": {g.instance_id: g.reason for g in results if g.reason},
        "schema_version": 2,
        "grader": grader,
    }


def grade_with_docker(config: GradeConfig, submitted: dict[str, str]) -> dict[str, Any]:
    """SWE-bench's `swebench.harness.run_evaluation` on the selected instances and their predictions."""
    dataset = config.out / "instances.json"
    write_json(dataset, [i.as_swebench() for i in config.instances])
    predictions = config.out / "predictions.json"
    write_json(
        predictions,
        [{"instance_id": k, "model_name_or_path": "snaffle", "model_patch": v} for k, v in submitted.items()],
    )
    command = [
        sys.executable,
        "-m",
        "swebench.harness.run_evaluation",
        "--dataset_name",
        str(dataset),
        "--predictions_path",
        str(predictions),
        "--max_workers",
        str(config.workers),
        "--run_id",
        config.run_id,
        "--report_dir",
        str(config.out),
    ]
    proc = subprocess.run(command, cwd=config.out)
    report_path = config.out / f"snaffle.{config.run_id}.json"
    if proc.returncode != 0 or not report_path.is_file():
        raise UserError(f"SWE-bench's run_evaluation failed (exit {proc.returncode}); see the logs in {config.out}")
    summary: dict[str, Any] = {**json.loads(report_path.read_text(encoding="utf-8")), "grader": "docker"}
    write_json(config.out / "report.json", summary)
    return summary


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, body: object) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
