"""A fix the evidence shows, in a file whose own test module could not even be collected on the original: nothing
checked what else the patch changes there, so with `unguarded_submitted` the run says `submitted` and names the
module, never `validated` (real pytest in the sandbox, the scripted model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from snaffle.agentless import validate
from snaffle.agentless.validate import unguarded
from snaffle.trajectory import read_trajectory
from tests.helpers import Start, make_repo, stage_events
from tests.test_facts import RAISING_ISSUE, SHELF_FILES
from tests.test_pipeline import agentless

RIGHT = {"content": "```python\ndef __setitem__(self, key, value):\n    self.slots[key] = value\n```"}
BROKEN_IMPORT = (
    "import not_installed_anywhere\nfrom shelf import Shelf\n\n\ndef test_keys():\n    assert Shelf().keys() == []\n"
)


def outcomes(errored: set[str]) -> validate.TestOutcomes:
    return validate.TestOutcomes(frozenset({"tests.test_more::test_one"}), frozenset(errored), True, frozenset(errored))


RELATED = ["tests/test_core.py", "tests/test_more.py", "tests/test_other.py", "tests/test_shelf_core.py"]


def test_a_test_module_named_for_a_patched_file_that_was_not_collected_is_a_hole() -> None:
    before = outcomes({"::tests.test_core", "::tests.test_other", "tests.test_more::test_fixture"})
    assert unguarded(before, RELATED, ["shelf/core.py"]) == ["tests/test_core.py"]
    both = ["shelf/other.py", "shelf/core.py"]
    assert unguarded(before, RELATED, both) == ["tests/test_core.py", "tests/test_other.py"]
    assert unguarded(before, ["tests/test_other.py"], ["shelf/core.py"]) == [], "only the related files ran"


@pytest.mark.parametrize("errors", [set(), {"tests.test_more::test_fixture"}, {"::tests.test_shelf_core"}])
def test_no_hole_without_a_collection_error_of_that_files_own_test_module(errors: set[str]) -> None:
    hole = unguarded(outcomes(errors), RELATED, ["shelf/core.py"])
    assert hole == [], "a fixture error, another module: not this hole"


def run(scripted: Start, tmp_path: Path, files: dict[str, str | bytes], on: bool) -> tuple[Any, Path]:
    repo = make_repo(tmp_path / "shelf", files)
    server = scripted([RIGHT])
    out = tmp_path / "run"
    options = {"samples": 1, "one_shot": True, "line_repair": False, "reproduce": False}
    return agentless(repo, RAISING_ISSUE, server.base_url, out, unguarded_submitted=on, **options), out


@pytest.mark.parametrize("on", [False, True])
def test_a_shown_fix_whose_files_tests_never_ran_is_submitted_with_the_module_named(
    scripted: Start, tmp_path: Path, on: bool
) -> None:
    files = {
        **SHELF_FILES,
        "tests/test_core.py": BROKEN_IMPORT,
        "tests/test_shelf.py": SHELF_FILES["tests/test_core.py"],
    }
    attempt, out = run(scripted, tmp_path, files, on)
    (validate,) = stage_events(out, "validate")
    assert validate["passed"] == ["snippet 1"], "the issue's snippet shows the fix either way"
    if not on:
        assert attempt.exit_status == "validated"
        return
    assert attempt.exit_status == "submitted"
    (guard,) = stage_events(out, "unguarded")
    assert guard["modules"] == ["tests/test_core.py"]
    (end,) = read_trajectory(out / "trajectory.jsonl").of_type("exit")
    assert "tests/test_core.py could not be collected on the original" in end["message"]
    assert "self.slots[key] = value" in attempt.patch, "the patch is kept: only the claim is weaker"


def test_with_every_test_module_collected_the_shown_fix_stays_validated(scripted: Start, tmp_path: Path) -> None:
    attempt, out = run(scripted, tmp_path, dict(SHELF_FILES), True)
    assert attempt.exit_status == "validated" and stage_events(out, "unguarded") == []
