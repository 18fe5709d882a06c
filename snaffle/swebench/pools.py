"""Where instances run: a local process pool, or Ray tasks on a cluster. Both report each record as it lands."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from snaffle.exceptions import UserError
from snaffle.swebench.jobs import InstanceRecord, Job, run_job, run_job_shipped
from snaffle.swebench.outputs import CRASHED, write_crash
from snaffle.types import Usage

OnDone = Callable[[Job, InstanceRecord], None]
OnTick = Callable[[int], None]
"""Called after each round of finished records, and about once a second, with the number still running."""
TICK_S = 1.0


class JobPool(Protocol):
    """Runs jobs, calling `on_done` in the driver as each finishes, in completion order."""

    def run(self, jobs: Sequence[Job], on_done: OnDone, on_tick: OnTick) -> None: ...


def lost(job: Job, started: float, error: str) -> InstanceRecord:
    """A record for an instance whose worker died (so `run_job` could not record it itself)."""
    write_crash(job.out, job.instance.instance_id, job.adapter.name, job.adapter.model, error)
    return InstanceRecord(job.instance.instance_id, CRASHED, "", Usage(), time.monotonic() - started, error=error)


class ProcessPool:
    """A pool of `workers` processes (spawned, so the driver's threads, e.g. the shim, are not forked)."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)

    def run(self, jobs: Sequence[Job], on_done: OnDone, on_tick: OnTick) -> None:
        context = multiprocessing.get_context("spawn")
        started = time.monotonic()
        with cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=context) as pool:
            pending = {pool.submit(run_job, job): job for job in jobs}
            while pending:
                finished, _ = cf.wait(pending, timeout=TICK_S, return_when=cf.FIRST_COMPLETED)
                for future in finished:
                    job = pending.pop(future)
                    on_done(job, self.outcome(future, job, started))
                on_tick(min(self.workers, len(pending)))

    @staticmethod
    def outcome(future: cf.Future[InstanceRecord], job: Job, started: float) -> InstanceRecord:
        try:
            return future.result()
        except Exception:  # the batch boundary: the worker process died; record it and go on
            return lost(job, started, traceback.format_exc())


class RayPool:
    """Each instance is one Ray task (`ray.init(address=...)`; no address starts a local Ray)."""

    def __init__(self, workers: int, address: str | None) -> None:
        self.workers, self.address = max(1, workers), address

    def run(self, jobs: Sequence[Job], on_done: OnDone, on_tick: OnTick) -> None:
        ray = import_ray()
        started_here = not ray.is_initialized()
        if started_here:
            cpus = None if self.address else self.workers
            ray.init(address=self.address, num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        try:
            self.drive(ray, jobs, on_done, on_tick)
        finally:
            if started_here:
                ray.shutdown()

    def drive(self, ray: Any, jobs: Sequence[Job], on_done: OnDone, on_tick: OnTick) -> None:
        task = ray.remote(num_cpus=1, max_retries=0)(run_job_shipped)
        queue, started = list(jobs), time.monotonic()
        pending: dict[Any, Job] = {}
        while queue or pending:
            while queue and len(pending) < self.workers:
                job = queue.pop(0)
                pending[task.remote(job)] = job
            finished, _ = ray.wait(list(pending), num_returns=1, timeout=TICK_S)
            for ref in finished:
                job = pending.pop(ref)
                on_done(job, self.outcome(ray, ref, job, started))
            on_tick(len(pending))

    @staticmethod
    def outcome(ray: Any, ref: Any, job: Job, started: float) -> InstanceRecord:
        try:
            record: InstanceRecord = ray.get(ref)
            return record
        except Exception:  # the batch boundary: the task or its node failed; record it and go on
            return lost(job, started, traceback.format_exc())


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise UserError("--executor ray needs Ray: pip install 'snaffle[ray]'") from exc
    return ray


def make_pool(kind: str, workers: int, ray_address: str | None) -> JobPool:
    """The pool `--executor` names: local worker processes, or Ray tasks."""
    if kind == "local":
        return ProcessPool(workers)
    if kind == "ray":
        import_ray()
        return RayPool(workers, ray_address)
    raise UserError(f"unknown executor {kind!r}; choose local or ray")
