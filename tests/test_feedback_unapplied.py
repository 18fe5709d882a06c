"""Feedback rounds for answers that were not applied only (`feedback_unapplied`): an answer that repeats the code
unchanged (or that a gate refuses) is told so, with what still fails, and asked once more; an applied answer that
is wrong gets no round. Real agentless runs: scripted model, real git, pytest and bubblewrap."""

from __future__ import annotations

from pathlib import Path

from snaffle.agentless.evidence import Verdict
from snaffle.agentless.feedback import Answer, halt_reason
from tests.helpers import Start
from tests.test_feedback_partial import NOTHING, RIGHT, answer, feedback_stages, one_sample
from tests.test_pipeline import stages

UNCHANGED = answer("n % 10 in (11, 12, 13)")  # the original code, its docstring left out as asked


def test_an_answer_that_repeats_the_code_is_told_so_and_asked_again(scripted: Start, tmp_path: Path) -> None:
    attempt, server, out = one_sample(
        scripted, tmp_path, [UNCHANGED, RIGHT], feedback_unapplied=True, feedback_rounds=2
    )
    assert attempt.exit_status == "validated", stages(out)
    assert "n % 100 in (11, 12, 13)" in attempt.patch
    request = server.requests[1].body["messages"][-1]["content"]
    assert "could not be applied (the answer repeats the definitions unchanged)" in request
    assert "`ordinal(11)` gives '11st', expected '11th'" in request
    assert [r["decision"] for r in feedback_stages(out)] == ["asked again", "evidence passes"]


def test_an_applied_wrong_answer_gets_no_round(scripted: Start, tmp_path: Path) -> None:
    attempt, server, out = one_sample(scripted, tmp_path, [NOTHING, RIGHT], feedback_unapplied=True, feedback_rounds=2)
    assert len(server.requests) == 1 and attempt.exit_status == "no_valid_patch", stages(out)
    assert [r["decision"] for r in feedback_stages(out)] == ["its answer was applied"]


def test_without_the_switch_an_unchanged_answer_gets_no_round(scripted: Start, tmp_path: Path) -> None:
    attempt, server, out = one_sample(scripted, tmp_path, [UNCHANGED, RIGHT], feedback_unapplied=False, feedback=False)
    assert len(server.requests) == 1 and attempt.exit_status == "no_valid_patch", stages(out)
    assert feedback_stages(out) == []


def test_the_scopes_say_why_no_round_is_asked() -> None:
    failing = [Verdict("snippet 1", False, "`f(2)` gives 3, expected 4")]
    moved = [Verdict("snippet 1", False, "x", progress=True)]
    applied, unchanged = Answer("submitted", "applied"), Answer("no_edit", "unchanged")
    assert halt_reason("x", failing, applied, frozenset({"unapplied"})) == "its answer was applied"
    assert halt_reason("x", failing, unchanged, frozenset({"unapplied"})) == ""
    assert halt_reason("x", failing, applied, frozenset({"partial", "unapplied"})) == "no partial fix"
    assert halt_reason("x", moved, applied, frozenset({"partial", "unapplied"})) == ""
    assert halt_reason("x", failing, unchanged, frozenset({"partial", "unapplied"})) == ""
    assert halt_reason("x", failing, applied, frozenset()) == ""
    assert halt_reason("", failing, unchanged, frozenset({"unapplied"})) == "evidence passes"
