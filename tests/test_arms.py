"""The arm table: every arm's prompts and tools are real, and what `prompt-size` counts is what a run sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from snaffle import prompts
from snaffle.agentless.repair import GreenStop
from snaffle.arms import ARMS, CONTROL, DEFAULT_ARM, KEEP_WHOLE, TOOLS, Parts, arm_spec, toolbox
from snaffle.exceptions import UserError
from snaffle.model.client import ModelConfig
from snaffle.observations import policy_for
from snaffle.primitives.run_test import PytestRunner
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.sandbox import Sandbox
from snaffle.tools import Registry, schema_of
from snaffle.trajectory import read_trajectory
from snaffle.types import ALL_MECHANISMS, Limits, Task
from snaffle.workspace import Workspace
from tests.helpers import CALC_ISSUE, Start


def test_the_table_names_real_prompts_and_tools() -> None:
    assert tuple(ARMS) == ("agentless", "structured", "minimal") and DEFAULT_ARM == "agentless"
    assert CONTROL == "minimal" and not ARMS[CONTROL].indexed and ARMS["structured"].indexed
    assert all(name == tool.method.__name__ for name, tool in TOOLS.items())
    for name, spec in ARMS.items():
        assert spec.name == name and set(spec.tools) <= set(TOOLS)
        assert prompts.load(spec.system_file) and prompts.load(spec.task_file)
        assert spec.example["name"] in spec.tools
    assert [arm for arm in ARMS.values() if arm.pipeline] == [ARMS["agentless"]]
    assert not ARMS["agentless"].refuse_early_done and ARMS["structured"].refuse_early_done


def test_the_control_arm_keeps_every_observation_whole() -> None:
    ablated = ALL_MECHANISMS.without("collapse")
    assert ARMS[CONTROL].policy(ALL_MECHANISMS) == KEEP_WHOLE == ARMS[CONTROL].policy(ablated)
    assert ARMS["structured"].policy(ablated) == policy_for(ablated) != KEEP_WHOLE


def test_an_unknown_arm_is_a_user_error_that_lists_the_arms() -> None:
    with pytest.raises(UserError, match="unknown arm 'vibes'; choose one of: agentless, structured, minimal"):
        arm_spec("vibes")


@pytest.mark.parametrize(("arm", "protocol"), [("minimal", "native"), ("structured", "text")])
def test_prompt_size_counts_what_a_run_sends(
    calc_repo: Path, scripted: Start, tmp_path: Path, arm: str, protocol: str
) -> None:
    server = scripted([{"content": "DONE"}, {"content": "DONE"}])
    model = ModelConfig(server.base_url, "scripted", tool_protocol=protocol)
    solve(Task(calc_repo, CALC_ISSUE), SolveConfig(arm, model, Limits(max_turns=2), tmp_path / "run", zero_pricer))
    spec, body = ARMS[arm], server.requests[0].body
    assert body["messages"][0]["content"] == spec.system_prompt(protocol)
    assert [t["function"] for t in body.get("tools", [])] == (spec.schemas() if protocol == "native" else [])
    header = read_trajectory(tmp_path / "run" / "trajectory.jsonl").header
    assert header is not None and header["fixed_context_tokens"] == spec.fixed_context(protocol)["fixed_context_tokens"]


def test_an_override_must_keep_its_tools_schema(calc_repo: Path, tmp_path: Path) -> None:
    assert schema_of(GreenStop.run_test) == schema_of(PytestRunner.run_test)  # the repair loop's run_test override

    def bash(cmd: str) -> str:
        return cmd

    workspace = Workspace.open(calc_repo)
    parts = Parts(workspace, Sandbox.create(tmp_path / "sandbox"), None)
    try:
        with pytest.raises(ValueError, match="the override of bash changes its schema"):
            toolbox(ARMS[CONTROL], parts, Registry(), {"bash": bash})
        with pytest.raises(ValueError, match="reads the repository index"):
            toolbox(ARMS["structured"], parts, Registry())
        assert toolbox(ARMS[CONTROL], parts, Registry()).names == ["bash", "str_replace_editor"]
    finally:
        workspace.close()
