"""The trace tests' runs (the `trace_runs` fixture in conftest.py) end as each scenario scripted them."""

from __future__ import annotations

from pathlib import Path

import pytest

from snaffle.trajectory import read_trajectory
from tests.trace_scenarios import SCENARIOS


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_ends_as_scripted(trace_runs: dict[str, Path], name: str) -> None:
    trajectory = read_trajectory(trace_runs[name] / "trajectory.jsonl")
    assert trajectory.exit is not None and trajectory.exit["status"] == SCENARIOS[name].status
    assert not trajectory.torn


def test_the_torn_copy_has_a_torn_last_line(trace_runs: dict[str, Path]) -> None:
    trajectory = read_trajectory(trace_runs["torn"] / "trajectory.jsonl")
    assert trajectory.torn and trajectory.exit is None and trajectory.header is not None
