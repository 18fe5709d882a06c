"""How many samples a run draws (agentless/sampling.py), driven through real agentless runs with the scripted model
(real git, pytest and bubblewrap): early stop on a validated sample, extra samples while none is, and their bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from snaffle.agentless.config import PipelineConfig
from snaffle.model.client import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.types import Limits, Task
from tests.helpers import CALC_SOURCE, Start, make_repo
from tests.test_feedback import REPRO, RIGHT, WRONG
from tests.test_pipeline import TRACEBACK_ISSUE, agentless, stages

THREE: dict[str, Any] = {"one_shot": True, "samples": 3, "top_k": 1, "max_samples": 5, "mutation": False}


def sampling(out: Path) -> list[str]:
    return [decision for stage, decision in stages(out) if stage == "sampling"]


def test_a_validated_sample_ends_the_draws(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": REPRO}, {"content": RIGHT}, {"content": WRONG}, {"content": WRONG}])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **THREE, early_stop=True)
    assert attempt.exit_status == "validated" and "+    return a + b\n" in attempt.patch, stages(out)
    assert len(server.requests) == 2  # the reproduction call and sample 0: samples 1 and 2 never asked
    assert sampling(out) == ["1 of 3 samples: sample 0 is validated"]


def test_without_the_plan_every_sample_is_drawn_first(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": REPRO}, {"content": RIGHT}, {"content": WRONG}, {"content": WRONG}])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **THREE, early_stop=False)
    assert attempt.exit_status == "validated" and len(server.requests) == 4 and sampling(out) == []
    names = [stage for stage, _ in stages(out) if stage in ("repair", "validate")]
    assert names == ["repair"] * 3 + ["validate"] * 3  # today's order, byte for byte


def test_extra_samples_are_drawn_until_one_is_validated(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    script = [{"content": REPRO}, *[{"content": WRONG}] * 3, {"content": RIGHT}, {"content": WRONG}]
    server = scripted(script)
    out = tmp_path / "run"
    options = {**THREE, "early_stop": True, "extra_samples": True}
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **options)
    assert attempt.exit_status == "validated" and "+    return a + b\n" in attempt.patch, stages(out)
    assert len(server.requests) == 5 and sampling(out) == ["4 of 5 samples: sample 3 is validated"]
    temperatures = [r.body.get("temperature") for r in server.requests[1:]]
    assert temperatures[0] == 0.0 and set(temperatures[1:]) == {0.8}  # extra samples are sampled, not greedy


def test_without_extra_samples_the_run_stops_at_samples(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    script = [{"content": REPRO}, *[{"content": WRONG}] * 3, {"content": RIGHT}]
    server = scripted(script)
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **THREE, early_stop=True)
    assert attempt.exit_status == "no_valid_patch" and len(server.requests) == 4, stages(out)
    assert sampling(out) == ["3 of 3 samples: no sample is validated"]


def test_extra_samples_stop_at_their_ceiling(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": REPRO}, *[{"content": WRONG}] * 6, {"content": RIGHT}])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **THREE, extra_samples=True)
    assert attempt.exit_status == "no_valid_patch" and len(server.requests) == 6, stages(out)
    assert sampling(out) == ["5 of 5 samples: no sample is validated"]


def test_no_extra_samples_when_nothing_could_validate_them(tmp_path: Path, scripted: Start) -> None:
    only_mul = "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
    repo = make_repo(tmp_path / "calc", {"calc/__init__.py": CALC_SOURCE, "tests/test_calc.py": only_mul})
    server = scripted([{"content": WRONG}] * 5)
    out = tmp_path / "run"
    issue = "add in calc/__init__.py looks odd to me, please have a look."
    options = {**THREE, "early_stop": True, "extra_samples": True, "reproduce": False}
    attempt = agentless(repo, issue, server.base_url, out, **options)
    assert len(server.requests) == 3 and attempt.exit_status == "submitted", stages(out)
    assert sampling(out) == ["3 of 3 samples: nothing could validate more"]


def test_a_cap_ends_the_extra_samples_not_the_run(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": REPRO}, *[{"content": WRONG}] * 3, {"content": RIGHT}])
    out = tmp_path / "run"
    pipeline = PipelineConfig(**THREE, extra_samples=True, early_stop=True)
    model = ModelConfig(server.base_url, "scripted")
    config = SolveConfig("agentless", model, Limits(max_turns=4), out, zero_pricer, pipeline=pipeline, apply=True)
    attempt = solve(Task(repo=calc_repo, issue=TRACEBACK_ISSUE), config)
    assert len(server.requests) == 4 and attempt.exit_status == "no_valid_patch", stages(out)
    assert sampling(out) == ["3 of 5 samples: turn cap reached (4)"]
