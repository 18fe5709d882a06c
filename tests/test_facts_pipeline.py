"""The agentless arm with issue facts, scripted model and real sandbox: snippet evidence picks the fix, a failing
existing test drives SBFL and validation, and a reproducing snippet becomes the reproduction test (no call)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from snaffle.agentless.config import PipelineConfig, switch_defaults
from snaffle.model.client import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.types import Attempt, Limits, Task
from tests.helpers import Start, make_repo, stage_events
from tests.test_facts import RAISING_ISSUE, SHELF_FILES

DONE = {"content": "DONE"}
FIX = ' or key.startswith("f")'


def edit(selector: str, search: str, replace_with: str) -> dict[str, Any]:
    arguments = {"selector": selector, "search": search, "replace": replace_with}
    return {"tool_calls": [{"name": "edit_entity", "arguments": arguments}]}


def run(repo: Path, issue: str, url: str, out: Path, **switches: bool) -> Attempt:
    pipeline = PipelineConfig(
        samples=2, line_repair=False, mutation=False, switches=replace(switch_defaults(), **switches), reproduce=False
    )
    config = SolveConfig(
        "agentless", ModelConfig(url, "scripted"), Limits(max_turns=40), out, zero_pricer, pipeline=pipeline
    )
    return solve(Task(repo=repo, issue=issue), config)


def test_the_snippet_localizes_and_its_evidence_picks_the_fix_over_a_cosmetic_patch(
    scripted: Start, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "shelf", SHELF_FILES)
    selector = "shelf/core.py::Shelf.__setitem__"
    cosmetic = edit(selector, "is frozen", "is frozen (sorry)")
    right = edit(selector, FIX, "")
    server = scripted([cosmetic, DONE, right, DONE])
    out = tmp_path / "run"
    attempt = run(repo, RAISING_ISSUE, server.base_url, out)
    (facts,) = stage_events(out, "issue_facts")
    assert facts["decision"] == "1 snippets run, 1 reproduce the issue"
    assert facts["snippets"][0]["repo_frames"][-1].startswith("shelf/core.py:")
    assert stage_events(out, "localize")[0]["candidates"][0] == selector
    verdicts = [v["snippets"][0]["passed"] for v in stage_events(out, "validate")]
    assert verdicts == [False, True]
    assert attempt.exit_status == "validated" and "-        if key in self.frozen or" in attempt.patch
    assert stage_events(out, "select")[0]["decision"] == "sample 1"


def test_without_issue_facts_no_snippet_runs(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shelf", SHELF_FILES)
    server = scripted([edit("shelf/core.py::Shelf.__setitem__", FIX, ""), DONE])
    out = tmp_path / "run"
    pipeline = PipelineConfig(
        samples=1,
        line_repair=False,
        mutation=False,
        switches=replace(switch_defaults(), issue_facts=False),
        reproduce=False,
    )
    config = SolveConfig(
        "agentless", ModelConfig(server.base_url, "scripted"), Limits(max_turns=40), out, zero_pricer, pipeline=pipeline
    )
    solve(Task(repo=repo, issue=RAISING_ISSUE), config)
    assert stage_events(out, "issue_facts") == []
    assert stage_events(out, "validate")[0]["snippets"] == []


TOTAL_FILES: dict[str, str | bytes] = {
    **SHELF_FILES,
    "tests/test_core.py": (
        "from shelf import Shelf, describe\n\n\n"
        "def test_keys():\n    s = Shelf()\n    s['a'] = 1\n    assert s.keys() == ['a']\n\n\n"
        "def test_describe():\n    s = Shelf()\n    s['b'] = 2\n    assert describe(s) == 'b=2'\n\n\n"
        "def test_sum_of_slots():\n    s = Shelf()\n    s['a'] = 2\n    assert s.total() == 2\n"
    ),
}
PROSE_ISSUE = "The numbers a shelf reports are off: adding up its slots gives one more than it should."


def test_a_related_test_failing_on_the_original_drives_sbfl_and_is_required(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shelf", TOTAL_FILES)
    elsewhere = edit("shelf/core.py::Shelf.total", "sum(self.slots.values()) + 1", "sum(self.slots.values(), 1)")
    right = edit("shelf/core.py::Shelf.total", " + 1\n", "\n")
    server = scripted([elsewhere, DONE, right, DONE])
    out = tmp_path / "run"
    attempt = run(repo, PROSE_ISSUE, server.base_url, out, failing_existing=True)
    (failing,) = stage_events(out, "failing_tests")
    assert failing["tests"] == ["tests/test_core.py::test_sum_of_slots"]
    first, second = stage_events(out, "localize")
    assert second["candidates"][0] == "shelf/core.py::Shelf.total"
    validate = stage_events(out, "validate")
    assert [v["fixes_failing"] for v in validate] == [False, True]
    assert [v["decision"] for v in validate] == ["invalid", "valid"]
    assert attempt.exit_status == "validated"


def test_by_default_a_patch_leaving_a_failing_related_test_draws_another_sample(
    scripted: Start, tmp_path: Path
) -> None:
    """The packaged default (session 19's A/B: toolz-tail's patch passed the issue's snippet while the two toolz tests
    that failed on the original still failed, and was `validated`): the failing related test is required, and with
    nothing validated after `samples` draws another sample is drawn."""
    assert PipelineConfig().extra_samples and PipelineConfig().uses("failing_existing")
    repo = make_repo(tmp_path / "shelf", TOTAL_FILES)
    elsewhere = edit("shelf/core.py::Shelf.total", "sum(self.slots.values()) + 1", "sum(self.slots.values(), 1)")
    right = edit("shelf/core.py::Shelf.total", " + 1\n", "\n")
    server = scripted([elsewhere, DONE, right, DONE])
    out = tmp_path / "run"
    pipeline = PipelineConfig(samples=1, one_shot=False, reproduce=False, line_repair=False, mutation=False)
    config = SolveConfig(
        "agentless", ModelConfig(server.base_url, "scripted"), Limits(max_turns=40), out, zero_pricer, pipeline=pipeline
    )
    attempt = solve(Task(repo=repo, issue=PROSE_ISSUE), config)
    validate = stage_events(out, "validate")
    assert [v["decision"] for v in validate] == ["invalid", "valid"]
    assert stage_events(out, "sampling")[-1]["decision"] == "2 of 4 samples: sample 1 is validated"
    assert attempt.exit_status == "validated"


def test_a_reproducing_snippet_becomes_the_reproduction_test_without_a_model_call(
    scripted: Start, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "shelf", SHELF_FILES)
    server = scripted([edit("shelf/core.py::Shelf.__setitem__", FIX, ""), DONE])
    out = tmp_path / "run"
    pipeline = PipelineConfig(
        samples=1,
        line_repair=False,
        mutation=False,
        switches=replace(switch_defaults(), snippet_test=True),
        reproduce=True,
    )
    config = SolveConfig(
        "agentless", ModelConfig(server.base_url, "scripted"), Limits(max_turns=40), out, zero_pricer, pipeline=pipeline
    )
    attempt = solve(Task(repo=repo, issue=RAISING_ISSUE), config)
    (reproduce,) = stage_events(out, "reproduce")
    assert (reproduce["decision"], reproduce["source"]) == ("kept", "issue snippet")
    assert reproduce["usage"]["completion_tokens"] == 0 and len(server.requests) == 2  # the repair sample's two calls
    assert stage_events(out, "validate")[0]["reproduces"] is True and attempt.exit_status == "validated"


def test_the_reproduction_prompt_says_what_the_snippet_did(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shelf", SHELF_FILES)
    repro = (
        "```python\nimport pytest\nfrom shelf import Shelf\n\n\ndef test_fish():\n    s = Shelf()\n"
        "    s['fish'] = 1\n    assert s['fish'] == 1\n```"
    )
    told = "it raised ValueError: slot 'fish' is frozen (in __setitem__, shelf/core.py line 16)."
    server = scripted(
        [{"content": repro, "expect_contains": told}, edit("shelf/core.py::Shelf.__setitem__", FIX, ""), DONE]
    )
    out = tmp_path / "run"
    switches = replace(switch_defaults(), reproduce_facts=True, snippet_test=False)  # the model writes the test
    pipeline = PipelineConfig(samples=1, line_repair=False, mutation=False, switches=switches, reproduce=True)
    config = SolveConfig(
        "agentless", ModelConfig(server.base_url, "scripted"), Limits(max_turns=40), out, zero_pricer, pipeline=pipeline
    )
    solve(Task(repo=repo, issue=RAISING_ISSUE), config)
    (reproduce,) = stage_events(out, "reproduce")
    assert (reproduce["decision"], reproduce["source"]) == ("kept", "model")
