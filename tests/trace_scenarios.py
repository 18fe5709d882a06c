"""The trace tests' scenarios: scripted model runs of the real loop (minimal arm) on the calc repo, one per failure
label plus a clean fix, the agentless arm's one-shot runs (one validated, one whose edits validation rejects),
and the torn copy a SIGKILL mid-write leaves."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snaffle.agentless.config import PipelineConfig
from snaffle.model.client import ModelConfig
from snaffle.observations import PolicyConfig
from snaffle.run import SolveConfig, solve
from snaffle.testing import ScriptedServer
from snaffle.types import Limits, Task, Usage
from tests.helpers import CALC_ISSUE, CALC_SOURCE, CALC_TEST, make_repo, scripted_pipeline

PYTEST = "python -m pytest -q -p no:cacheprovider tests"
PYTEST_FILE = "python -m pytest -q -p no:cacheprovider tests/test_calc.py"
PARALLEL_RUNS = 4
SMALL_WINDOW = PolicyConfig(keep_full=1, batch=1, context_window=400, compact_at=0.8)
"""Only the structured arm uses it (the minimal control arm never collapses): a window small enough that the
calc run's observations push the estimated context past it, so compaction runs for real."""


def bash(command: str, **extra: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}], **extra}


def tool(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def editor(**arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "str_replace_editor", "arguments": arguments}]}


VIEW = editor(command="view", path="calc/__init__.py")
FIX = editor(command="str_replace", path="calc/__init__.py", old_str="return a - b", new_str="return a + b")
DONE = {"content": "The tests pass.\nDONE"}
TRUNCATED = {"tool_calls": [{"name": "bash", "arguments": '{"command": "ls'}]}
REASONING = "The issue says add subtracts.\n" + "\n".join(f"thought {i}" for i in range(20))
CLEAN = [bash(PYTEST, reasoning_content=REASONING), VIEW, FIX, bash(PYTEST), DONE]


REPRO = {"content": "```python\nfrom calc import add\n\n\ndef test_add_sums():\n    assert add(2, 3) == 5\n```"}
ADD_FIXED = {"content": "The sum was a difference.\n\n```python\ndef add(a, b):\n    return a + b\n```"}
MUL_BROKEN = {"content": "```python\ndef mul(a, b):\n    return a ** b\n```"}
ONE_SHOT = scripted_pipeline(samples=2, one_shot=True, top_k=2, early_stop=False)  # both samples drawn and traced
"""The agentless arm as the weak model runs it: a reproduction call, then two one-shot samples."""


@dataclass(frozen=True)
class Scenario:
    """A scripted model's run on the calc repo: the exit status it must reach and the labels it must earn."""

    script: list[dict[str, Any]]
    status: str
    labels: frozenset[str]
    max_turns: int = 20
    arm: str = "minimal"
    pricer: Callable[[str, Usage], float] = field(default=lambda model, usage: usage.prompt_tokens * 1e-6)
    pipeline: PipelineConfig | None = None
    """The agentless arm's configuration (None: the arm is not agentless)."""


SCENARIOS: dict[str, Scenario] = {
    "clean": Scenario(CLEAN, "submitted", frozenset()),
    "looping": Scenario([bash("ls")] * 5, "looping", frozenset({"looping", "no_edit"})),
    "redundant_test_runs": Scenario(
        [bash(PYTEST), bash(PYTEST), bash(PYTEST_FILE), bash(PYTEST_FILE), FIX, bash(PYTEST), DONE],
        "submitted",
        frozenset({"redundant_test_runs"}),
    ),
    "test_file_edits": Scenario(
        [editor(command="str_replace", path="tests/test_calc.py", old_str="== 5", new_str="== -1"), bash(PYTEST), DONE],
        "submitted",
        frozenset({"test_file_edits"}),
    ),
    "malformed_storm": Scenario(
        [TRUNCATED, {"content": "I think the bug is in add."}, TRUNCATED],
        "malformed_tool_calls",
        frozenset({"malformed_storm", "no_edit"}),
    ),
    "gave_up_early": Scenario([VIEW, DONE], "submitted", frozenset({"gave_up_early", "no_edit"})),
    "gave_up_untested": Scenario([VIEW, FIX, DONE], "submitted", frozenset({"gave_up_early"})),
    "no_edit": Scenario([bash("ls"), VIEW, bash(PYTEST)], "max_turns_exceeded", frozenset({"no_edit"}), max_turns=3),
    "wrong_location": Scenario(
        [
            VIEW,
            editor(command="str_replace", path="calc/__init__.py", old_str="a * b", new_str="b * a"),
            bash(PYTEST),
            DONE,
        ],
        "submitted",
        frozenset({"wrong_location", "gave_up_early"}),  # its tests still fail after the edit
    ),
    "context_pressure": Scenario(
        [
            tool("run_test", target="tests/test_calc.py"),
            tool("read_entity", selector="calc/__init__.py::add"),
            tool("edit_entity", selector="calc/__init__.py::add", search="return a - b", replace="return a + c"),
            tool("edit_entity", selector="calc/__init__.py::add", search="return a - b", replace="return a + b"),
            tool("run_test", target="tests/test_calc.py"),
            DONE,
        ],
        "submitted",
        frozenset({"context_pressure"}),
        arm="structured",
    ),
    "agentless_validated": Scenario(
        [REPRO, ADD_FIXED, MUL_BROKEN], "validated", frozenset(), arm="agentless", pipeline=ONE_SHOT
    ),
    "agentless_rejected": Scenario(
        [REPRO, MUL_BROKEN, MUL_BROKEN],
        "no_valid_patch",
        frozenset({"unvalidated_edits"}),
        arm="agentless",
        pipeline=ONE_SHOT,
        pricer=lambda model, usage: 0.0,
    ),
    "shim_dollars": Scenario(
        [{**e, "headers": {"x-snaffle-dollars": f"{0.25 * (i + 1)}"}} for i, e in enumerate(CLEAN)],
        "submitted",
        frozenset(),
    ),
}


def run_scenario(name: str, out: Path, repo_root: Path) -> Path:
    """Run one scenario with the real loop into `out`; returns `out`."""
    scenario = SCENARIOS[name]
    repo = make_repo(repo_root / name, {"calc/__init__.py": CALC_SOURCE, "tests/test_calc.py": CALC_TEST})
    server = ScriptedServer(scenario.script)
    server.start()
    try:
        model = ModelConfig(base_url=server.base_url, model="scripted")
        limits = Limits(max_turns=scenario.max_turns)
        policy = SMALL_WINDOW if scenario.arm == "structured" else None
        pipeline = {"pipeline": scenario.pipeline} if scenario.pipeline else {}
        config = SolveConfig(
            scenario.arm, model, limits, out, scenario.pricer, observations=policy, apply=True, **pipeline
        )
        solve(Task(repo=repo, issue=CALC_ISSUE, instance_id=name), config)
    finally:
        server.stop()
    return out


def tear(source: Path, out: Path) -> Path:
    """A copy of a run's trajectory cut in the middle of its last line, as a SIGKILL mid-write leaves it."""
    out.mkdir(parents=True, exist_ok=True)
    text = (source / "trajectory.jsonl").read_text(encoding="utf-8")
    last_start = text.rstrip("\n").rfind("\n") + 1
    (out / "trajectory.jsonl").write_text(text[: last_start + 40], encoding="utf-8")
    return out


def make_runs(root: Path) -> dict[str, Path]:
    """name -> run dir under `root` for every scenario, plus `torn`; runs already on disk are kept."""
    runs = {name: root / "runs" / name for name in SCENARIOS}
    missing = [name for name, out in runs.items() if not (out / "result.json").is_file()]
    for name in missing:
        shutil.rmtree(runs[name], ignore_errors=True)
    # the runs wait on subprocesses, so threads overlap them
    with ThreadPoolExecutor(max_workers=PARALLEL_RUNS) as pool:
        list(pool.map(lambda name: run_scenario(name, runs[name], root / "repos"), missing))
    runs["torn"] = root / "runs" / "torn"
    if not (runs["torn"] / "trajectory.jsonl").is_file():
        tear(runs["clean"], runs["torn"])
    return runs
