"""One task, end to end: open the repo, build the arm, run the loop, write trajectory, patch and result."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from snaffle.agentless.config import PipelineConfig
from snaffle.agentless.pipeline import Pipeline
from snaffle.arms import ArmSetup, ArmSpec, Parts, arm_spec, start
from snaffle.cache import cache_dir
from snaffle.exceptions import StateError
from snaffle.harness import Loop, LoopConfig, Outcome, Pricer
from snaffle.index.repo import RepoIndex
from snaffle.model.client import ModelConfig, OpenAIModel
from snaffle.observations import PolicyConfig
from snaffle.primitives.reader import RepoView
from snaffle.sandbox import Sandbox
from snaffle.tools import Registry
from snaffle.trajectory import (
    PATCH_FILE,
    TRAJECTORY_FILE,
    TrajectoryWriter,
    exit_event,
    header_event,
    retry_event,
    write_result,
)
from snaffle.types import Attempt, Event, Limits, Mechanisms, Task, Usage
from snaffle.workspace import Workspace, classify_patch


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
    """Values redacted from every line written (the upstream API key when a shim holds it)."""
    sandbox: str = "bubblewrap"
    """How model-caused processes are confined: `bubblewrap`, or `none` (unconfined; unsafe)."""


def zero_pricer(model: str, usage: Usage) -> float:
    """Pricing for unknown or local models: free."""
    return 0.0


def solve(task: Task, config: SolveConfig) -> Attempt:
    """Run one arm on one task; every outcome (including model and state errors) ends in result.json."""
    workspace = Workspace.open(task.repo)
    config.out.mkdir(parents=True, exist_ok=True)
    writer = TrajectoryWriter(config.out / TRAJECTORY_FILE, (config.model.api_key, *config.secrets), config.observer)
    started = time.monotonic()
    deadline = started + config.limits.timeout_s if config.limits.timeout_s else None
    config = replace(config, pipeline=config.pipeline.for_model(config.model.model))
    try:
        with tempfile.TemporaryDirectory(prefix="snaffle-scratch-") as scratch:
            spec = arm_spec(config.arm)
            sandbox = Sandbox.create(Path(scratch) / "sandbox", config.sandbox)
            if spec.pipeline:
                writer.write(header(task, config, spec))
                pipeline = Pipeline(
                    task,
                    workspace,
                    sandbox,
                    config.model,
                    config.limits,
                    writer,
                    config.pricer,
                    config.pipeline.ablated(config.mechanisms),
                    Path(scratch),
                )
                return finish(task, config, workspace, writer, pipeline.run())
            arm = build_arm(spec, config, workspace, sandbox, task, deadline)
            writer.write(header(task, config, spec))
            outcome = run_loop(config, workspace, writer, arm, deadline)
            return finish(task, config, workspace, writer, outcome)
    finally:
        writer.close()
        workspace.close()


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


def header(task: Task, config: SolveConfig, spec: ArmSpec) -> Event:
    model = config.model
    fixed_context = None if spec.pipeline else spec.fixed_context(model.tool_protocol)["fixed_context_tokens"]
    settings = {
        "tool_protocol": model.tool_protocol,
        "temperature": model.temperature,
        "sandbox": config.sandbox,
        **({"pipeline": asdict(config.pipeline)} if spec.pipeline else {}),
    }
    return header_event(task, config.arm, model.model, model.base_url, config.limits, fixed_context, settings)


def finish(
    task: Task, config: SolveConfig, workspace: Workspace, writer: TrajectoryWriter, outcome: Outcome
) -> Attempt:
    """Write the exit line, patch.diff and result.json; a trajectory that cannot be saved turns into state_error."""
    patch = workspace.patch()
    (config.out / PATCH_FILE).write_text(patch, encoding="utf-8")
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
    shim = shim_totals(config.shim_ledger_url)
    write_result(
        config.out,
        {
            "instance_id": task.instance_id,
            "arm": config.arm,
            "model": config.model.model,
            "exit_status": status,
            "message": message,
            "patch_kind": classify_patch(patch),
            "patch_path": PATCH_FILE,
            "trajectory_path": TRAJECTORY_FILE,
            "totals": totals,
            "shim": shim,
            "usage_disagreement": disagrees(outcome.usage, shim),
        },
    )
    return Attempt(patch, status, config.out / TRAJECTORY_FILE, outcome.usage)


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
