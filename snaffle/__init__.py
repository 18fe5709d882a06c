"""snaffle: a light harness for weak language models fixing bugs in Python repositories.

The Python API (docs/api.md): `solve` one issue in a repository, `localize` an issue without a model, and the typed
configs they take. The modules behind them load on first use, so `import snaffle` stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snaffle.version import __version__

if TYPE_CHECKING:
    from snaffle.agentless.config import PipelineConfig
    from snaffle.agentless.localize import Localization
    from snaffle.model.client import ModelConfig
    from snaffle.run import SolveConfig
    from snaffle.types import Attempt, Event, Limits, Mechanisms, Task

__all__ = [
    "Attempt",
    "Event",
    "Limits",
    "Localization",
    "Mechanisms",
    "ModelConfig",
    "PipelineConfig",
    "SolveConfig",
    "Task",
    "__version__",
    "localize",
    "solve",
]

EXPORTS = {
    "Attempt": "snaffle.types",
    "Event": "snaffle.types",
    "Limits": "snaffle.types",
    "Mechanisms": "snaffle.types",
    "Task": "snaffle.types",
    "ModelConfig": "snaffle.model.client",
    "PipelineConfig": "snaffle.agentless.config",
    "Localization": "snaffle.agentless.localize",
    "SolveConfig": "snaffle.run",
}
"""The API's types, each loaded from its module when first asked for (`snaffle.ModelConfig`)."""


def __getattr__(name: str) -> Any:
    if name not in EXPORTS:
        raise AttributeError(f"module 'snaffle' has no attribute {name!r}")
    return getattr(importlib.import_module(EXPORTS[name]), name)


def solve(
    repo: Path | str,
    issue: str,
    model: ModelConfig,
    out: Path | str,
    *,
    failing_test: str | None = None,
    arm: str = "agentless",  # snaffle.arms.DEFAULT_ARM (a test holds them equal)
    limits: Limits | None = None,
    pipeline: PipelineConfig | None = None,
    observer: Callable[[Event], None] | None = None,
    apply: bool = False,
    sandbox: str = "bubblewrap",
) -> Attempt:
    """Solve `issue` in the git repository `repo` with `arm`, on a private copy; `out` (new or empty) receives
    trajectory.jsonl, patch.diff and result.json; `observer` is called with every trajectory event as it is
    written. Caps default to `snaffle solve`'s (data/limits.toml); `apply` writes the patch into `repo` at the end.
    Bad input raises `snaffle.exceptions.UserError` (one line that says how to fix it) before any model call."""
    from snaffle import data
    from snaffle.agentless.config import PipelineConfig
    from snaffle.run import SolveConfig, check_run_dir, collect_failing_test
    from snaffle.run import solve as run_solve
    from snaffle.shim.pricing import load_pricing
    from snaffle.types import Limits, Task
    from snaffle.workspace import repo_root

    root, out = repo_root(Path(repo)), Path(out)
    task = Task(root, issue, root.name, failing_test=failing_test)
    check_run_dir(out, overwrite=False)
    collect_failing_test(task, sandbox)
    caps = limits if limits is not None else data.load_record(Limits, "limits.toml", "run")
    config = SolveConfig(
        arm,
        model,
        caps,
        out,
        load_pricing(None).dollars,
        observer=observer,
        pipeline=pipeline or PipelineConfig(),
        apply=apply,
        sandbox=sandbox,
    )
    return run_solve(task, config)


def localize(repo: Path | str, issue: str, *, failing_test: str | None = None, top: int | None = None) -> Localization:
    """Rank the files and entities (`path.py::Class.method`) of `repo` that `issue` is about, without a model
    (`top` of each, default `snaffle localize`'s); a `failing_test` adds spectrum-based fault localization from
    its coverage (run in the sandbox)."""
    from snaffle.agentless.localize import TOP, localize_repo
    from snaffle.exceptions import UserError
    from snaffle.workspace import repo_root

    if top is not None and top < 1:
        raise UserError("top must be at least 1")
    return localize_repo(repo_root(Path(repo)), issue, failing_test, TOP if top is None else top)
