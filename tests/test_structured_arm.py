"""The structured arm end to end: only the six primitives, gates in the trajectory, collapsed observations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from snaffle.model.client import ModelConfig
from snaffle.observations import PolicyConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.trajectory import read_trajectory
from snaffle.types import Limits, Task
from tests.helpers import CALC_ISSUE, Start, repo_tests_pass


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


STRUCTURED_FIX = [
    call("search_symbol", query="add"),
    call("read_entity", selector="calc/__init__.py::add"),
    call("run_test", target="tests/test_calc.py"),
    call("edit_entity", selector="calc/__init__.py::add", search="return a - b", replace="return a + c"),
    call("edit_entity", selector="calc/__init__.py::add", search="return a - b", replace="return a + b"),
    call("run_test", target="tests/test_calc.py"),
    {"content": "Fixed and verified.\nDONE"},
]


def test_structured_arm_fixes_the_planted_bug(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted(STRUCTURED_FIX)
    out = tmp_path / "run"
    model = ModelConfig(base_url=server.base_url, model="scripted")
    policy = PolicyConfig(keep_full=2, batch=1)
    config = SolveConfig("structured", model, Limits(max_turns=20), out, zero_pricer, observations=policy, apply=True)
    attempt = solve(Task(repo=calc_repo, issue=CALC_ISSUE), config)
    assert attempt.exit_status == "submitted" and repo_tests_pass(calc_repo)
    trajectory = read_trajectory(out / "trajectory.jsonl")
    gates = list(trajectory.of_type("gate"))
    assert [(g["gate"], g["ok"]) for g in gates] == [("lint", False)]
    assert "undefined name" in gates[0]["reason"] and "`c`" in gates[0]["reason"]
    collapses = list(trajectory.of_type("collapse"))
    assert collapses and collapses[0]["label"].startswith("[collapsed] search_symbol add")
    last_request = server.requests[-1].body["messages"]
    assert any(m["role"] == "tool" and m["content"].startswith("[collapsed]") for m in last_request)
    results = [r["output"] for r in trajectory.of_type("tool_result")]
    assert "calc/__init__.py::add" in results[0] and results[5].startswith("passed: 2 passed")
    header = trajectory.header
    assert header is not None and header["fixed_context_tokens"] <= 1500
    assert json.loads((out / "result.json").read_text())["patch_kind"] == "patch"


def test_edit_without_reading_is_refused_by_the_evidence_gate(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    edit = call("edit_entity", selector="calc/__init__.py::add", search="return a - b", replace="return a + b")
    test_edit = call("edit_entity", selector="tests/test_calc.py::test_add", search="5", replace="-1")
    server = scripted([edit, test_edit, {"content": "DONE"}, {"content": "DONE"}])
    out = tmp_path / "run"
    config = SolveConfig("structured", ModelConfig(server.base_url, "scripted"), Limits(max_turns=5), out, zero_pricer)
    attempt = solve(Task(repo=calc_repo, issue=CALC_ISSUE), config)
    assert attempt.patch == ""
    gates = [(g["gate"], g["ok"]) for g in read_trajectory(out / "trajectory.jsonl").of_type("gate")]
    assert gates[:2] == [("evidence", False), ("test_file", False)]


def test_ablations_switch_gates_off(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    from snaffle.types import ALL_MECHANISMS

    edit = call("edit_entity", selector="calc/__init__.py::add", search="return a - b", replace="return a + c")
    server = scripted([edit, {"content": "DONE"}])
    out = tmp_path / "run"
    mechanisms = ALL_MECHANISMS.without("lint_gate").without("evidence_gate")
    config = SolveConfig(
        "structured",
        ModelConfig(server.base_url, "scripted"),
        Limits(max_turns=5),
        out,
        zero_pricer,
        mechanisms=mechanisms,
    )
    attempt = solve(Task(repo=calc_repo, issue=CALC_ISSUE), config)
    assert "return a + c" in attempt.patch  # neither the evidence gate nor the lint gate stood in the way
    assert list(read_trajectory(out / "trajectory.jsonl").of_type("gate")) == []


def test_unknown_mechanism_is_refused() -> None:
    import pytest

    from snaffle.types import ALL_MECHANISMS

    with pytest.raises(ValueError, match="unknown mechanism 'vibes'"):
        ALL_MECHANISMS.without("vibes")
