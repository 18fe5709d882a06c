"""Feedback rounds for partial fixes only (`feedback_partial`): an answer that makes one of the issue's stated
expectations hold while another still fails is shown the one that fails; an answer that changes nothing the
evidence sees gets no round. Real agentless runs: scripted model, real git, pytest and bubblewrap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from snaffle.agentless.evidence import Verdict
from snaffle.agentless.facts import newly_met
from snaffle.agentless.feedback import halt_reason
from snaffle.testing import ScriptedServer
from snaffle.trajectory import read_trajectory
from snaffle.types import Attempt
from tests.helpers import Start, make_repo
from tests.test_pipeline import agentless, stages

NUMS = {
    "nums/__init__.py": "from nums.ordinal import ordinal\n",
    "nums/ordinal.py": (
        "def ordinal(n):\n"
        '    """The number with its English suffix."""\n'
        "    if n % 10 in (11, 12, 13):\n"
        '        return f"{n}th"\n'
        '    return f"{n}" + {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")\n'
    ),
    "tests/test_ordinal.py": "from nums import ordinal\n\n\ndef test_first():\n    assert ordinal(1) == '1st'\n",
}
ISSUE = """ordinal() gives the wrong suffix for the teens

    >>> from nums import ordinal
    >>> ordinal(11)
    '11st'
    >>> ordinal(112)
    '112nd'

Expected '11th' and '112th'.
"""


def answer(condition: str) -> dict[str, Any]:
    body = (
        "def ordinal(n):\n"
        f"    if {condition}:\n"
        '        return f"{n}th"\n'
        '    return f"{n}" + {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")\n'
    )
    return {"content": f"```python\n{body}```"}


PARTIAL = answer("n in (11, 12, 13)")  # 11 is right now, 112 still is not
NOTHING = answer("n % 10 in (11, 12, 13) and n > 0")  # every value as before
RIGHT = answer("n % 100 in (11, 12, 13)")
ONE_SHOT: dict[str, Any] = {"one_shot": True, "samples": 1, "top_k": 1, "reproduce": False}


def feedback_stages(out: Path) -> list[dict[str, Any]]:
    found = read_trajectory(out / "trajectory.jsonl").of_type("stage")
    return [dict(e) for e in found if e["stage"] == "feedback"]


def one_sample(
    scripted: Start, tmp_path: Path, answers: list[dict[str, Any]], **pipeline: Any
) -> tuple[Attempt, ScriptedServer, Path]:
    """One one-shot sample on the nums repository, the model answering `answers` in turn."""
    repo = make_repo(tmp_path / "nums", NUMS)
    server = scripted(answers)
    out = tmp_path / "run"
    return agentless(repo, ISSUE, server.base_url, out, **ONE_SHOT, **pipeline), server, out


def test_a_partial_fix_is_shown_the_expectation_that_still_fails(scripted: Start, tmp_path: Path) -> None:
    attempt, server, out = one_sample(scripted, tmp_path, [PARTIAL, RIGHT], feedback_partial=True, feedback_rounds=2)
    assert attempt.exit_status == "validated", stages(out)
    assert "n % 100 in (11, 12, 13)" in attempt.patch
    request = server.requests[1].body["messages"][-1]["content"]
    assert "`ordinal(112)` gives '112nd', expected '112th'" in request
    rounds = feedback_stages(out)
    assert [r["decision"] for r in rounds] == ["asked again", "evidence passes"]


def test_an_answer_that_moves_nothing_gets_no_round(scripted: Start, tmp_path: Path) -> None:
    attempt, server, out = one_sample(scripted, tmp_path, [NOTHING, RIGHT], feedback_partial=True, feedback_rounds=2)
    assert len(server.requests) == 1 and attempt.exit_status == "no_valid_patch", stages(out)
    assert [r["decision"] for r in feedback_stages(out)] == ["no partial fix"]


def test_without_the_switch_a_partial_fix_gets_no_round(scripted: Start, tmp_path: Path) -> None:
    attempt, server, out = one_sample(scripted, tmp_path, [PARTIAL, RIGHT], feedback_partial=False, feedback=False)
    assert len(server.requests) == 1 and attempt.exit_status == "no_valid_patch", stages(out)
    assert feedback_stages(out) == []


def test_progress_is_an_expectation_that_failed_and_now_holds() -> None:
    assert newly_met((False, False), (True, False))
    assert not newly_met((False, False), (False, False))
    assert not newly_met((True, False), (True, False))  # held before: no progress
    assert not newly_met((None, False), (True, False))  # could not tell before: no progress
    failing = Verdict("snippet 1", False, "`f(2)` gives 3, expected 4")
    partial = frozenset({"partial"})
    assert halt_reason("", [], None, partial) == "evidence passes"
    assert halt_reason("x", [failing], None, partial) == "no partial fix"
    assert halt_reason("x", [Verdict("snippet 1", False, "x", progress=True)], None, partial) == ""
    assert halt_reason("x", [failing], None, frozenset()) == ""
