"""The batch runner on a mirror directory of small repos, with the scripted model, the shim on and off."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from snaffle.adapters import AdapterSpec
from snaffle.swebench import jobs as jobs_module
from snaffle.swebench.batch import BatchConfig, ShimSettings, run_batch
from snaffle.swebench.instances import load_instances
from snaffle.swebench.jobs import Job, run_job
from snaffle.swebench.progress import LineProgress
from snaffle.swebench.workspaces import Sources
from snaffle.testing import ScriptedServer
from snaffle.trajectory import read_trajectory
from snaffle.types import Limits
from tests.helpers import Start
from tests.swebench_helpers import (
    ONE_SHOT_FIX,
    assert_hidden_fields_unseen,
    instance,
    make_mirror,
    read_jsonl,
    three_instances,
    write_jsonl,
)

HAS_SHIM = (Path(__file__).parents[1] / "snaffle" / "shim" / "server.py").is_file()


def batch(tmp_path: Path, rows: list[dict[str, Any]], server: ScriptedServer, mirror: Path, **kw: Any) -> BatchConfig:
    instances = load_instances(write_jsonl(tmp_path / "instances.jsonl", rows))
    settings: dict[str, Any] = {
        "instances": instances,
        "adapter": AdapterSpec("minimal", "scripted"),
        "base_url": server.base_url,
        "out": tmp_path / "out",
        "limits": Limits(max_turns=5),
        "sources": Sources(repos=mirror),
        "workers": 2,
        "work_root": tmp_path / "work",
    }
    return BatchConfig(**{**settings, **kw})


def check_predictions(out: Path, ids: list[str]) -> dict[str, dict[str, Any]]:
    rows = read_jsonl(out / "predictions.jsonl")
    assert sorted(r["instance_id"] for r in rows) == sorted(ids)
    for row in rows:
        assert set(row) == {"instance_id", "model_name_or_path", "model_patch"}
        assert row["model_name_or_path"] == "snaffle-minimal__scripted"
    return {r["instance_id"]: r for r in rows}


@pytest.mark.skipif(not HAS_SHIM, reason="the shim is not in this checkout")
def test_three_instances_two_workers_behind_the_shim(tmp_path: Path, scripted: Start) -> None:
    mirror, commits = make_mirror(tmp_path)
    server = scripted([{**ONE_SHOT_FIX, "repeat": 3}])
    config = batch(tmp_path, three_instances(commits), server, mirror, shim=ShimSettings())
    summary = run_batch(config, LineProgress(open(os.devnull, "w")))  # noqa: SIM115
    out = config.out
    assert summary.statuses == {i: "submitted" for i in ("acme__calc-1", "acme__calc-2", "acme__shapes-1")}
    predictions = check_predictions(out, list(summary.statuses))
    assert all("+    return a + b" in p["model_patch"] for p in predictions.values())
    statuses = json.loads((out / "exit_statuses.json").read_text())
    assert statuses["instances_by_exit_status"] == {"submitted": sorted(summary.statuses)}
    for instance_id in summary.statuses:
        result = json.loads((out / instance_id / "result.json").read_text())
        assert result["checkout"] == {"source": "mirror", "missing_files": []}
        assert result["shim"]["calls"] == 1 and result["shim"]["instance"] == instance_id
        assert result["usage_disagreement"] is False
        trajectory = read_trajectory(out / instance_id / "trajectory.jsonl")
        assert trajectory.header is not None and trajectory.header["task"]["instance_id"] == instance_id
        assert "/i/" in trajectory.header["base_url"]
    assert (out / "ledger.sqlite").is_file()
    assert_hidden_fields_unseen([r.body for r in server.requests])
    assert not list((tmp_path / "work").iterdir())


def test_without_the_shim_a_crash_is_recorded_and_the_batch_goes_on(tmp_path: Path, scripted: Start) -> None:
    mirror, commits = make_mirror(tmp_path)
    server = scripted([{**ONE_SHOT_FIX, "repeat": 3}])
    rows = [*three_instances(commits), instance("acme__calc-9", "acme/calc", "0" * 40)]
    lines = io.StringIO()
    config = batch(tmp_path, rows, server, mirror, shim=None)
    summary = run_batch(config, LineProgress(lines))
    assert summary.statuses["acme__calc-9"] == "crashed"
    assert {summary.statuses[i] for i in summary.statuses if i != "acme__calc-9"} == {"submitted"}
    assert "done 4/4" in lines.getvalue() and "crashed=1" in lines.getvalue()
    result = json.loads((config.out / "acme__calc-9" / "result.json").read_text())
    assert "Traceback" in result["traceback"] and "WorkspaceUnavailable" in result["traceback"]
    assert "not in the mirror" in result["message"] and result["shim"] is None
    predictions = check_predictions(config.out, list(summary.statuses))
    assert predictions["acme__calc-9"]["model_patch"] == ""
    assert all("return a + b" in p["model_patch"] for i, p in predictions.items() if i != "acme__calc-9")
    assert_hidden_fields_unseen([r.body for r in server.requests])
    rerun = run_batch(config, LineProgress(io.StringIO()))
    assert rerun.ran == ("acme__calc-9",) and len(rerun.skipped) == 3 and server.remaining == 0
    check_predictions(config.out, list(summary.statuses))


def test_an_adapter_that_raises_is_recorded_with_its_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror, commits = make_mirror(tmp_path)

    def broken(spec: AdapterSpec, out: Path) -> None:
        raise RuntimeError("adapter exploded")

    monkeypatch.setattr(jobs_module, "build_adapter", broken)
    row = load_instances(write_jsonl(tmp_path / "i.jsonl", three_instances(commits)[:1]))[0]
    job = Job(row, AdapterSpec("minimal", "m"), "http://127.0.0.1:9/v1", Limits(), Sources(mirror), tmp_path / "o")
    record = run_job(job)
    assert record.exit_status == "crashed" and record.error is not None and "adapter exploded" in record.error
    result = json.loads((tmp_path / "o" / "result.json").read_text())
    assert result["exit_status"] == "crashed" and "RuntimeError: adapter exploded" in result["traceback"]


def swebench_cli(*args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "snaffle.swebench.cli", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_a_killed_batch_resumes_where_it_stopped(tmp_path: Path) -> None:
    mirror, commits = make_mirror(tmp_path)
    instances = write_jsonl(tmp_path / "instances.jsonl", three_instances(commits))
    out = tmp_path / "out"
    args = [
        "run",
        "--instances",
        str(instances),
        "--repos",
        str(mirror),
        "--model",
        "scripted",
        "--arm",
        "minimal",
        "--workers",
        "1",
        "--out",
        str(out),
        "--max-turns",
        "5",
        *([] if HAS_SHIM else ["--no-shim"]),
    ]
    with ScriptedServer([ONE_SHOT_FIX, {**ONE_SHOT_FIX, "delay": 60}]) as first:
        proc = swebench_cli(*args, "--base-url", first.base_url)
        deadline = time.monotonic() + 90
        while len(first.requests) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert len(first.requests) == 2, proc.stderr.read() if proc.stderr else ""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len(read_jsonl(out / "predictions.jsonl")) == 1
    with ScriptedServer([{**ONE_SHOT_FIX, "repeat": 2}]) as second:
        proc = swebench_cli(*args, "--base-url", second.base_url)
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        assert len(second.requests) == 2 and second.remaining == 0
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["ran"] == 2 and summary["skipped"] == 1 and summary["exit_statuses"] == {"submitted": 2}
    rows = read_jsonl(out / "predictions.jsonl")
    assert len(rows) == 3 and all("return a + b" in r["model_patch"] for r in rows)
    for row in rows:
        trajectory = read_trajectory(out / row["instance_id"] / "trajectory.jsonl")
        assert [e["type"] for e in trajectory.events].count("header") == 1 and not trajectory.torn


@pytest.mark.slow
def test_ray_executor_gives_the_same_predictions_as_local(tmp_path: Path, scripted: Start) -> None:
    pytest.importorskip("ray")
    mirror, commits = make_mirror(tmp_path)
    predictions = {}
    for executor in ("local", "ray"):
        server = scripted([{**ONE_SHOT_FIX, "repeat": 3}])
        (tmp_path / executor).mkdir()
        config = batch(tmp_path / executor, three_instances(commits), server, mirror, executor=executor)
        summary = run_batch(config, LineProgress(open(os.devnull, "w")))  # noqa: SIM115
        assert set(summary.statuses.values()) == {"submitted"}
        predictions[executor] = sorted(read_jsonl(config.out / "predictions.jsonl"), key=lambda r: r["instance_id"])
        assert (config.out / "acme__calc-1" / "trajectory.jsonl").is_file()
    assert predictions["local"] == predictions["ray"]


def test_swebench_run_passes_the_agentless_options_to_each_instance(tmp_path: Path, scripted: Start) -> None:
    mirror, commits = make_mirror(tmp_path)
    fix = '```python\ndef add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n```'
    server = scripted([{"content": fix}])
    rows = [instance("acme__calc-1", "acme/calc", commits["calc-1"])]
    command = [
        sys.executable,
        "-m",
        "snaffle.cli",
        "swebench",
        "run",
        "--instances",
        str(write_jsonl(tmp_path / "i.jsonl", rows)),
        "--repos",
        str(mirror),
        "--base-url",
        server.base_url,
        "--model",
        "scripted",
        "--out",
        str(tmp_path / "out"),
        "--work-dir",
        str(tmp_path / "work"),
        "--no-line-repair",
        "--arm",
        "agentless",
        "--one-shot",
        "--samples",
        "1",
        "--no-reproduce",
        "--no-shim",
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(server.requests) == 1  # one sample, one call, no reproduction test
    assert "tools" not in server.requests[0].body  # one-shot: an answer, not a tool loop
    (prediction,) = read_jsonl(tmp_path / "out" / "predictions.jsonl")
    assert "+    return a + b" in prediction["model_patch"]
    bad = subprocess.run([*command[:-7], "--samples", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--samples" in bad.stderr.strip().splitlines()[-1]
