"""One task, end to end: open the repo, build the arm, run the loop, write trajectory, patch and result."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from snaffle import scratch
from snaffle.agentless.config import PipelineConfig
from snaffle.agentless.fixed_context import fixed_context
from snaffle.agentless.pipeline import Pipeline
from snaffle.agentless.validate import collect_only
from snaffle.arms import ArmSetup, ArmSpec, Parts, arm_spec, start
from snaffle.cache import cache_dir
from snaffle.exceptions import StateError, UserError
from snaffle.harness import Loop, LoopConfig, Outcome, Pricer
from snaffle.index.repo import RepoIndex
from snaffle.interpreter import Interpreter, PythonChoice, choose, prepare
from snaffle.model.client import ModelConfig, OpenAIModel
from snaffle.observations import PolicyConfig
from snaffle.primitives.reader import RepoView
from snaffle.sandbox import CallCaps, Sandbox
from snaffle.tools import Registry
from snaffle.trajectory import (
    PATCH_FILE,
    RESULT_FILE,
    TRAJECTORY_FILE,
    TrajectoryWriter,
    exit_event,
    header_event,
    retry_event,
    write_patch,
    write_result,
)
from snaffle.types import Attempt, Event, Limits, Mechanisms, Task, Usage
from snaffle.workspace import Workspace, classify_patch

APPLIED_STATUSES = ("submitted", "validated")
"""The exit statuses whose patch `--apply` writes into the user's tree (a capped or failed run's is left aside)."""
LEDGER_FILE = "ledger.sqlite"
RUN_FILES = frozenset(
    {
        TRAJECTORY_FILE,
        PATCH_FILE,
        RESULT_FILE,
        f"{RESULT_FILE}.tmp",
        *(LEDGER_FILE + x for x in ("", "-wal", "-shm", "-journal")),
    }
)
"""Everything a run writes into its directory: `--overwrite` clears a directory holding only these."""
COLLECT_TIMEOUT_S = 120
PYTEST_COLLECTED_NOTHING = (4, 5)
"""pytest's exit codes for `not found` (a usage error) and `no tests collected`."""


@dataclass(frozen=True)
class SolveConfig:
    """Everything a run needs besides the task."""

    arm: str
    model: ModelConfig
    limits: Limits
    out: Path
    pricer: Pricer
    observer: Callable[[Event], None] | None = None
    observations: PolicyConfig | None = None
    """None: the arm's default (the minimal control arm never collapses or compacts)."""
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    shim_ledger_url: str | None = None
    """The metering shim's ledger for this instance; its totals go into result.json beside the harness's."""
    mechanisms: Mechanisms = field(default_factory=Mechanisms)
    """Which of snaffle's mechanisms are on (all, unless an ablation switches one off)."""
    secrets: tuple[str, ...] = ()
    """Values redacted from every file written (the upstream API key when a shim holds it)."""
    apply: bool = False
    """Apply the patch to the user's tree when the run finishes (refused when that tree changed meanwhile)."""
    private_copy: bool = True
    """Work in a private copy of the repo; False only for a checkout that is private already (SWE-bench's)."""
    sandbox: str = "bubblewrap"
    """How model-caused processes are confined: `bubblewrap`, or `none` (unconfined; unsafe)."""
    caps: CallCaps = field(default_factory=CallCaps)
    """What one model-caused call may use (memory, disk); unset: data/sandbox.toml's."""
    settings: Mapping[str, object] = field(default_factory=dict)
    """The command line's resolved settings and where each came from (`{key: {value, from}}`), for the header."""
    python: PythonChoice | None = None
    """The interpreter for the repository's code; None: the repo's own venv, else snaffle's (`interpreter.choose`)."""


def zero_pricer(model: str, usage: Usage) -> float:
    """Pricing for unknown or local models: free."""
    return 0.0


def solve(task: Task, config: SolveConfig) -> Attempt:
    """Run one arm on one task in a private copy of the repo; every outcome ends in patch.diff and result.json.
    First, the scratch copies of runs that were killed are removed (snaffle/scratch.py)."""
    scratch.sweep()
    user = Workspace.open(task.repo)
    config.out.mkdir(parents=True, exist_ok=True)
    writer = TrajectoryWriter(config.out / TRAJECTORY_FILE, (config.model.api_key, *config.secrets), config.observer)
    started = time.monotonic()
    deadline = started + config.limits.timeout_s if config.limits.timeout_s else None
    config = replace(config, pipeline=config.pipeline.for_model(config.model.model))
    try:
        with scratch.scratch_dir("snaffle-scratch-") as work:
            workspace = user.clone(work / "work") if config.private_copy else user
            spec = arm_spec(config.arm)
            choice = config.python or choose(task.repo, None)
            sandbox, interpreter = prepare(choice, work / "sandbox", config.sandbox)
            sandbox = config.caps.applied(sandbox)
            if spec.pipeline:
                writer.write(header(task, config, spec, interpreter))
                pipeline = Pipeline(
                    task,
                    workspace,
                    sandbox,
                    config.model,
                    config.limits,
                    writer,
                    config.pricer,
                    config.pipeline.ablated(config.mechanisms),
                    work,
                )
                return finish(task, config, Copy(user, workspace), writer, pipeline.run())
            arm = build_arm(spec, config, workspace, sandbox, task, deadline)
            writer.write(header(task, config, spec, interpreter))
            outcome = run_loop(config, workspace, writer, arm, deadline)
            return finish(task, config, Copy(user, workspace), writer, outcome)
    finally:
        writer.close()
        user.close()


def build_arm(
    spec: ArmSpec, config: SolveConfig, workspace: Workspace, sandbox: Sandbox, task: Task, deadline: float | None
) -> ArmSetup:
    """The arm's tools over this workspace (with a repository index when its tools read one) and its messages."""
    registry = Registry()
    index = RepoIndex(workspace.root, cache_dir=cache_dir("structure")) if spec.indexed else None
    view = RepoView(workspace, index) if index is not None else None
    parts = Parts(workspace, sandbox, deadline, config.mechanisms, view)
    return start(spec, parts, registry, task.issue, config.model.tool_protocol)


def run_loop(
    config: SolveConfig, workspace: Workspace, writer: TrajectoryWriter, arm: ArmSetup, deadline: float | None
) -> Outcome:
    def on_retry(attempt: int, error: str, wait_s: float) -> None:
        writer.write(retry_event(attempt, error, wait_s))

    model = OpenAIModel(config.model, deadline=deadline, on_retry=on_retry)
    spec = arm.spec
    policy = config.observations or spec.policy(config.mechanisms)
    loop_config = LoopConfig(spec.name, config.limits, refuse_early_done=spec.refuse_early_done, observations=policy)
    loop = Loop(model, arm.registry, writer, loop_config, workspace.fingerprint, config.pricer)
    return loop.run(arm.messages)


def header(task: Task, config: SolveConfig, spec: ArmSpec, interpreter: Interpreter) -> Event:
    model = config.model
    if spec.pipeline:
        pipeline = config.pipeline.ablated(config.mechanisms)
        parts = fixed_context(pipeline, model.model, model.tool_protocol, task.failing_test)
        fixed, parts_or_none = min(parts.values()), parts
    else:
        fixed, parts_or_none = spec.fixed_context(model.tool_protocol)["fixed_context_tokens"], None
    settings = {
        "tool_protocol": model.tool_protocol,
        "temperature": model.temperature,
        "sandbox": config.sandbox,
        **({"pipeline": asdict(config.pipeline)} if spec.pipeline else {}),
    }
    return header_event(
        task,
        config.arm,
        model.model,
        model.base_url,
        config.limits,
        fixed,
        settings,
        config.settings,
        fixed_context=parts_or_none,
        interpreter=interpreter.describe(),
    )


def finish(task: Task, config: SolveConfig, copy: Copy, writer: TrajectoryWriter, outcome: Outcome) -> Attempt:
    """Write patch.diff, the exit line and result.json (all redacted), then apply the patch if asked; a trajectory
    that cannot be saved turns into state_error."""
    patch = write_patch(config.out, copy.work.patch(), writer.secrets)
    status, message = outcome.status, outcome.message
    totals = {
        **outcome.usage.as_dict(),
        "turns": outcome.turns,
        "elapsed_s": round(outcome.elapsed_s, 3),
        **outcome.counters,
    }
    try:
        writer.write(exit_event(status, message, patch, totals))
    except StateError as exc:
        status, message = "state_error", str(exc)
    delivery = deliver(copy, patch, status) if config.apply else Delivery(False, "")
    shim = shim_totals(config.shim_ledger_url)
    result = {
        "instance_id": task.instance_id,
        "arm": config.arm,
        "model": config.model.model,
        "exit_status": status,
        "message": message,
        "patch_kind": classify_patch(patch),
        "patch_path": PATCH_FILE,
        "trajectory_path": TRAJECTORY_FILE,
        "applied": delivery.applied,
        "not_applied": delivery.refused or None,
        "totals": totals,
        "shim": shim,
        "usage_disagreement": disagrees(outcome.usage, shim),
    }
    write_result(config.out, result, writer.secrets)
    return Attempt(patch, status, config.out / TRAJECTORY_FILE, outcome.usage)


@dataclass(frozen=True)
class Copy:
    """The user's repository (only read, and written by `--apply`) and the private copy the run worked in."""

    user: Workspace
    work: Workspace


@dataclass(frozen=True)
class Delivery:
    """What became of the patch at the end of a run: applied to the user's tree, or why not."""

    applied: bool
    refused: str
    """Why the patch was not applied ('' when it was, or when applying was not asked for or had nothing to do)."""


def deliver(copy: Copy, patch: str, status: str) -> Delivery:
    """Apply the (redacted) patch to the user's tree, unless the run did not finish or that tree changed meanwhile."""
    if not patch.strip():
        return Delivery(False, "")
    if status not in APPLIED_STATUSES:
        return Delivery(False, f"the run ended {status}, so its patch was not applied")
    if copy.user.root == copy.work.root:
        return Delivery(True, "")  # no private copy (a checkout that is private already): the patch is in place
    changed = copy.user.changed_since_start()
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        return Delivery(False, f"{copy.user.root} changed since the run started ({shown})")
    try:
        copy.user.apply(patch)
    except UserError as exc:
        return Delivery(False, str(exc))
    return Delivery(True, "")


def shim_totals(ledger_url: str | None) -> dict[str, Any] | None:
    """The shim's cumulative figures for this instance (the authority for metering), or None without a shim."""
    if ledger_url is None:
        return None
    try:
        answer = httpx.get(ledger_url, timeout=10)
        answer.raise_for_status()
        return dict(answer.json())
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": f"ledger unavailable: {type(exc).__name__}"}


def disagrees(usage: Usage, shim: dict[str, Any] | None) -> bool:
    """Whether the harness's token counts differ from the shim's (they are a cross-check, never the authority)."""
    if not shim or "prompt_tokens" not in shim:
        return False
    return (usage.prompt_tokens, usage.completion_tokens) != (shim["prompt_tokens"], shim["completion_tokens"])


def collect_failing_test(task: Task, sandbox_mode: str, python: PythonChoice | None = None) -> None:
    """Refuse a `failing_test` that pytest does not collect, asked in the sandbox on a private copy with the
    interpreter the run will use (before any model call); a file that errors at collection is not refused (the bug
    itself may break its import)."""
    if task.failing_test is None:
        return
    with Workspace.open(task.repo) as user, scratch.scratch_dir("snaffle-collect-") as work:
        copy = user.clone(work / "work")
        choice = python or choose(task.repo, None)
        sandbox, _ = prepare(choice, work / "sandbox", sandbox_mode)
        done = collect_only(copy.root, sandbox, [task.failing_test], COLLECT_TIMEOUT_S)
    if done.returncode in PYTEST_COLLECTED_NOTHING:
        raise UserError(
            f"--failing-test {task.failing_test!r}: pytest collects no such test in {task.repo}: "
            "pass the node id of an existing test, such as tests/test_x.py::test_y"
        )


def check_run_dir(out: Path, overwrite: bool) -> tuple[Path, ...]:
    """Refuse an `--out` that is a file, or that holds files unless `overwrite`, and then unless all it holds is a
    previous run's files; returns those files (for `clear_run_dir`: nothing else is ever deleted)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; pass a directory for the run (a new or empty one)")
    entries = tuple(sorted(out.iterdir())) if out.is_dir() else ()
    if not entries:
        return ()
    if not overwrite:
        raise UserError(f"--out {out} is not empty; pass another --out, or --overwrite to replace the run in it")
    foreign = [e.name for e in entries if e.name not in RUN_FILES or e.is_dir()]
    if foreign:
        shown = ", ".join(foreign[:3]) + (" …" if len(foreign) > 3 else "")
        raise UserError(f"--out {out} holds files that are not a snaffle run's ({shown}); refusing to clear it")
    return entries


def clear_run_dir(files: tuple[Path, ...]) -> None:
    """Remove a previous run's files (as `check_run_dir` found them)."""
    for path in files:
        path.unlink(missing_ok=True)
