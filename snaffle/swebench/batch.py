"""The batch runner: plan (skip what is done), start the shim in front of the model, run the jobs on a pool,
and write predictions, exit statuses and each instance's run directory as results land."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from snaffle.adapters import AdapterSpec
from snaffle.cache import cache_dir
from snaffle.swebench import outputs
from snaffle.swebench.environments import Prepared, env_key, prepare_all
from snaffle.swebench.instances import Instance
from snaffle.swebench.jobs import InstanceRecord, Job
from snaffle.swebench.pools import make_pool
from snaffle.swebench.progress import BatchState, ProgressView, ledger_usage, make_view
from snaffle.swebench.workspaces import Sources
from snaffle.trajectory import secret_values
from snaffle.types import Limits, Usage

LEDGER_FILE = "ledger.sqlite"
ENVIRONMENTS_FILE = "environments.json"


@dataclass(frozen=True)
class ShimSettings:
    """The metering shim in front of every instance of the batch (one ledger under the output directory)."""

    pricing: Path | None = None
    max_in_flight: int = 0
    tokens_per_minute: int = 0
    run_max_dollars: float = 0.0


@dataclass(frozen=True)
class BatchConfig:
    """One batch: what to run, against which model, where, and how."""

    instances: tuple[Instance, ...]
    adapter: AdapterSpec
    base_url: str
    out: Path
    limits: Limits
    sources: Sources
    workers: int = 1
    executor: str = "local"
    ray_address: str | None = None
    redo: bool = False
    shim: ShimSettings | None = None
    run_name: str = ""
    model_name: str = ""
    work_root: Path | None = None
    keep_workdirs: bool = False
    environments: bool = True
    """Solve each instance in its (repo, version) environment (the grader's); False: snaffle's own interpreter."""
    env_dir: Path | None = None
    """Where the environments are kept; None: the user cache's `swebench-envs`."""

    @property
    def prediction_model(self) -> str:
        return self.model_name or f"snaffle-{self.adapter.name}__{self.adapter.model}".replace("/", "__")

    @property
    def secrets(self) -> tuple[str, ...]:
        """Redacted from every file the batch writes: the upstream API key."""
        return secret_values(self.adapter.api_key())


@dataclass(frozen=True)
class BatchSummary:
    """What a batch did: instances run now, skipped as already done, and every known exit status."""

    ran: tuple[str, ...]
    skipped: tuple[str, ...]
    statuses: dict[str, str]


def run_batch(config: BatchConfig, view: ProgressView | None = None) -> BatchSummary:
    config.out.mkdir(parents=True, exist_ok=True)
    todo, done = plan(config)
    prepare_outputs(config, todo, done)
    run_name = config.run_name or time.strftime("%Y%m%d-%H%M%S")
    envs = prepare_envs(config, todo)
    view = view or make_view(len(todo))
    driver = Driver(config, run_name, view, BatchState(total=len(todo)), envs)
    try:
        with shim_for(config) as shim:
            driver.shim = shim
            jobs = [job_for(config, instance, shim, run_name, envs.get(env_key(instance))) for instance in todo]
            make_pool(config.executor, config.workers, config.ray_address).run(jobs, driver.done, driver.tick)
    finally:
        view.close()
    statuses = outputs.collect_statuses(config.out)
    outputs.write_exit_statuses(config.out, statuses)
    return BatchSummary(tuple(i.instance_id for i in todo), tuple(i.instance_id for i in done), statuses)


def plan(config: BatchConfig) -> tuple[list[Instance], list[Instance]]:
    """Split into instances to run and instances already done (kept unless --redo)."""
    todo: list[Instance] = []
    done: list[Instance] = []
    for instance in config.instances:
        finished = outputs.is_done(outputs.instance_dir(config.out, instance.instance_id))
        (done if finished and not config.redo else todo).append(instance)
    return todo, done


def prepare_outputs(config: BatchConfig, todo: Sequence[Instance], done: Sequence[Instance]) -> None:
    """Clear the run directories about to be rerun; keep one prediction per done instance, drop the rest."""
    for instance in todo:
        shutil.rmtree(outputs.instance_dir(config.out, instance.instance_id), ignore_errors=True)
    path = config.out / outputs.PREDICTIONS
    rows = outputs.read_predictions(path)
    for instance in todo:
        rows.pop(instance.instance_id, None)
    for instance in done:
        patch = outputs.read_patch(outputs.instance_dir(config.out, instance.instance_id))
        rows[instance.instance_id] = outputs.prediction(instance.instance_id, config.prediction_model, patch)
    outputs.write_predictions(path, rows.values(), config.secrets)


def prepare_envs(config: BatchConfig, todo: Sequence[Instance]) -> dict[str, Prepared]:
    """Every environment the instances to run need, built or reused once each (`environments.json` says how)."""
    if not config.environments or not todo:
        return {}
    envs = prepare_all(todo, config.env_dir or cache_dir("swebench-envs"), config.sources, say_env)
    body = {key: prepared.describe() for key, prepared in envs.items()}
    (config.out / ENVIRONMENTS_FILE).write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    return envs


def say_env(prepared: Prepared) -> None:
    """One stderr line per environment as it becomes ready (a build can take minutes)."""
    state = f"unavailable: {prepared.reason}" if prepared.reason else f"ready: {prepared.python.path}"
    print(f"[swebench] environment {prepared.key} {state} ({prepared.seconds:.1f} s)", file=sys.stderr, flush=True)


def job_for(config: BatchConfig, instance: Instance, shim: Any, run_name: str, env: Prepared | None = None) -> Job:
    base_url = shim.base_url_for(run_name, instance.instance_id) if shim is not None else config.base_url
    return Job(
        instance,
        replace(config.adapter, python=env.python) if env is not None else config.adapter,
        base_url,
        config.limits,
        config.sources,
        outputs.instance_dir(config.out, instance.instance_id),
        config.work_root,
        config.keep_workdirs,
    )


@contextmanager
def shim_for(config: BatchConfig) -> Iterator[Any]:
    """The shim on loopback for the whole batch, or None with --no-shim."""
    if config.shim is None:
        yield None
        return
    from snaffle.shim.server import ShimConfig, start_shim

    key_env = config.adapter.api_key_env if os.environ.get(config.adapter.api_key_env) else None
    settings = config.shim
    shim_config = ShimConfig(
        upstream=config.base_url,
        db=config.out / LEDGER_FILE,
        api_key_env=key_env,
        pricing=settings.pricing,
        limits=config.limits,
        run_max_dollars=settings.run_max_dollars,
        max_in_flight=settings.max_in_flight,
        tokens_per_minute=settings.tokens_per_minute,
    )
    handle = start_shim(shim_config)
    try:
        yield handle
    finally:
        handle.stop()


class Driver:
    """The driver's side of the batch: writes each record's outputs as it lands and keeps the view current."""

    def __init__(
        self,
        config: BatchConfig,
        run_name: str,
        view: ProgressView,
        state: BatchState,
        envs: dict[str, Prepared] | None = None,
    ) -> None:
        self.config, self.run_name, self.view, self.state = config, run_name, view, state
        self.envs = envs or {}
        self.shim: Any = None

    def done(self, job: Job, record: InstanceRecord) -> None:
        if record.files:
            outputs.unpack(job.out, record.files, self.config.secrets)
        extra: dict[str, Any] = {"batch_run": self.run_name, "elapsed_s": round(record.elapsed_s, 3)}
        if record.checkout is not None:
            extra["checkout"] = record.checkout
        if env_key(job.instance) in self.envs:
            extra["environment"] = self.envs[env_key(job.instance)].describe()
        if self.shim is not None:
            extra["shim"] = self.shim_totals(job.instance.instance_id)
            extra["usage_disagreement"] = disagrees(outputs.read_result(job.out), extra["shim"])
        outputs.merge_result(job.out, extra, self.config.secrets)
        row = outputs.prediction(record.instance_id, self.config.prediction_model, record.patch)
        outputs.append_prediction(self.config.out / outputs.PREDICTIONS, row, self.config.secrets)
        outputs.write_exit_statuses(self.config.out, outputs.collect_statuses(self.config.out))
        usage = record.usage if self.shim is None else Usage()  # with the shim, its ledger is the authority
        self.state = self.state.finished(record.instance_id, record.exit_status, usage)

    def tick(self, running: int) -> None:
        """Called by the pool after each round of finished records, and about once a second."""
        self.state = replace(self.state, running=running)
        if self.shim is not None:
            metered = ledger_usage(self.config.out / LEDGER_FILE, self.run_name)
            if metered is not None:
                self.state = replace(self.state, tokens=metered[0], dollars=metered[1])
        self.view.show(self.state)

    def shim_totals(self, instance_id: str) -> dict[str, Any] | None:
        try:
            answer = httpx.get(self.shim.ledger_url(self.run_name, instance_id), timeout=10.0, trust_env=False)
            answer.raise_for_status()
        except httpx.HTTPError:
            return None
        totals: dict[str, Any] = answer.json()
        return totals


def disagrees(result: dict[str, Any] | None, shim: dict[str, Any] | None) -> bool:
    """The harness's own token counts differ from the shim's (the shim is the authority)."""
    if not result or not shim or not result.get("totals"):
        return False
    totals = result["totals"]
    return any(int(totals.get(key) or 0) != int(shim.get(key) or 0) for key in ("prompt_tokens", "completion_tokens"))
