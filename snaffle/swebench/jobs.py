"""One instance of a batch, end to end: checkout, adapter, record. `run_job` is the batch boundary of one instance.

Jobs and records are picklable, so the same function runs in a local process pool and as a Ray task.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from snaffle.adapters import AdapterSpec, build_adapter
from snaffle.swebench.instances import Instance
from snaffle.swebench.outputs import CRASHED, write_crash
from snaffle.swebench.workspaces import Sources, prepare_checkout
from snaffle.types import Limits, Usage


@dataclass(frozen=True)
class Job:
    """Everything one instance needs; `out` is its run directory on the machine that writes the batch."""

    instance: Instance
    adapter: AdapterSpec
    base_url: str
    limits: Limits
    sources: Sources
    out: Path
    work_root: Path | None = None
    keep_workdir: bool = False


@dataclass(frozen=True)
class InstanceRecord:
    """How one instance ended; `error` holds the traceback of a crash, `files` the run directory when shipped."""

    instance_id: str
    exit_status: str
    patch: str
    usage: Usage
    elapsed_s: float
    checkout: dict[str, Any] | None = None
    error: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)


def run_job(job: Job) -> InstanceRecord:
    """Run one instance; any error is recorded in its run directory with the traceback, never raised."""
    started = time.monotonic()
    job.out.mkdir(parents=True, exist_ok=True)
    try:
        return attempt(job, started)
    except Exception:  # the batch boundary: this instance is recorded as crashed and the batch goes on
        error = traceback.format_exc()
        write_crash(job.out, job.instance.instance_id, job.adapter.name, job.adapter.model, error)
        return InstanceRecord(job.instance.instance_id, CRASHED, "", Usage(), time.monotonic() - started, error=error)


def attempt(job: Job, started: float) -> InstanceRecord:
    instance = job.instance
    if job.work_root is not None:
        job.work_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="snaffle-instance-", dir=job.work_root))
    try:
        checkout = prepare_checkout(
            instance.repo, instance.base_commit, scratch / "repo", job.sources, instance.instance_id
        )
        adapter = build_adapter(job.adapter, job.out)
        result = adapter.run(instance.task(checkout.path), checkout.path, job.limits, job.base_url)
        elapsed = time.monotonic() - started
        return InstanceRecord(
            instance.instance_id, result.exit_status, result.patch, result.usage, elapsed, checkout.describe()
        )
    finally:
        if not job.keep_workdir:
            shutil.rmtree(scratch, ignore_errors=True)


def run_job_shipped(job: Job) -> InstanceRecord:
    """Run in a node-local directory and return the run directory's files with the record (Ray, remote nodes)."""
    with tempfile.TemporaryDirectory(prefix="snaffle-shipped-") as local:
        record = run_job(replace(job, out=Path(local) / "run"))
        root = Path(local) / "run"
        files = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    return replace(record, files=files)
