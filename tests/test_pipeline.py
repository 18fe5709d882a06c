"""The agentless arm end to end with the scripted model: three planted bugs, validation, vote, no_valid_patch."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from snaffle.agentless.config import PipelineConfig
from snaffle.agentless.options import add_pipeline_args, pipeline_config
from snaffle.agentless.validate import normalize_source, stopped_by
from snaffle.index.imports import module_name
from snaffle.model.client import ModelConfig
from snaffle.primitives.extract import one_shot_for
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.sandbox import Completed, Sandbox, import_roots
from snaffle.trajectory import read_trajectory
from snaffle.types import Attempt, Limits, Task
from tests.helpers import (
    CALC_ISSUE,
    CALC_SOURCE,
    CALC_TEST,
    Start,
    make_repo,
    repo_tests_pass,
    scripted_pipeline,
    stage_events,
)

DONE = {"content": "DONE"}


def edit(selector: str, search: str, replace: str) -> dict[str, Any]:
    arguments = {"selector": selector, "search": search, "replace": replace}
    return {"tool_calls": [{"name": "edit_entity", "arguments": arguments}]}


def agentless(
    repo: Path,
    issue: str,
    server_url: str,
    out: Path,
    *,
    timeout_s: float = 0.0,
    failing_test: str | None = None,
    **pipeline: Any,
) -> Attempt:
    config = SolveConfig(
        "agentless",
        ModelConfig(server_url, "scripted"),
        Limits(max_turns=40, timeout_s=timeout_s),
        out,
        zero_pricer,
        pipeline=scripted_pipeline(**pipeline),
        apply=True,  # the tests below check the fix in the repo
    )
    return solve(Task(repo=repo, issue=issue, failing_test=failing_test), config)


def stages(out: Path) -> list[tuple[str, str]]:
    return [(e["stage"], e["decision"]) for e in read_trajectory(out / "trajectory.jsonl").of_type("stage")]


TRACEBACK_ISSUE = """add() gives wrong results:

Traceback (most recent call last):
  File "report.py", line 12, in <module>
    assert add(2, 3) == 5
  File "/venv/lib/python3.11/site-packages/calc/__init__.py", line 6, in add
    return a - b
AssertionError
"""


def test_traceback_issue_is_fixed_by_vote(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    fix = edit("calc/__init__.py::add", "return a - b", "return a + b")
    same_fix_commented = edit("calc/__init__.py::add", "return a - b", "return a + b  # was a subtraction")
    other_fix = edit("calc/__init__.py::add", "return a - b", "return sum((a, b))")
    script = [
        {**fix, "expect": {"temperature": 0.0}},
        DONE,
        {**other_fix, "expect": {"temperature": 0.8}},
        DONE,
        same_fix_commented,
        DONE,
    ]
    server = scripted(script)
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, reproduce=False, early_stop=False)
    assert attempt.exit_status == "validated", stages(out)
    assert "+    return a + b\n" in attempt.patch and repo_tests_pass(calc_repo)
    trajectory = read_trajectory(out / "trajectory.jsonl")
    localize = next(trajectory.of_type("stage"))
    assert localize["candidates"][0] == "calc/__init__.py::add"
    select = [e for e in trajectory.of_type("stage") if e["stage"] == "select"][0]
    assert sorted(select["votes"].values()) == [1, 2]
    assert {e["sample"] for e in trajectory.of_type("model_call")} == {0, 1, 2}
    assert json.loads((out / "result.json").read_text())["exit_status"] == "validated"


TEXT_FILES: dict[str, str | bytes] = {
    "textkit/__init__.py": "from textkit.titles import title_case\n",
    "textkit/titles.py": (
        '"""Headline helpers."""\n\nSMALL_WORDS = {"a", "an", "and", "of", "the", "in"}\n\n\n'
        "def title_case(text):\n"
        '    """Capitalize each word except small words that are not first."""\n'
        "    words = text.split()\n"
        "    out = []\n"
        "    for i, word in enumerate(words):\n"
        "        if i > 0 and word in SMALL_WORDS:\n"
        "            out.append(word.capitalize())\n"
        "        else:\n"
        "            out.append(word.capitalize())\n"
        '    return " ".join(out)\n'
    ),
    "tests/test_titles.py": (
        "from textkit import title_case\n\n\n"
        "def test_simple():\n    assert title_case('hello world') == 'Hello World'\n"
    ),
}
BEHAVIOUR_ISSUE = (
    "Headlines look wrong: small words such as 'of' and 'the' get capitalized in the middle of a title. "
    "I expected 'The Lord of the Rings' but got 'The Lord Of The Rings'."
)
REPRO_TEST = (
    "```python\nfrom textkit import title_case\n\n\ndef test_small_words():\n"
    "    assert title_case('the lord of the rings') == 'The Lord of the Rings'\n```"
)


def test_behaviour_issue_with_a_reproduction_test(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "textkit", TEXT_FILES)
    wrong = edit("textkit/titles.py::title_case", 'return " ".join(out)', 'return " ".join(out).title()')
    right = edit(
        "textkit/titles.py::title_case",
        "            out.append(word.capitalize())\n        else:",
        "            out.append(word)\n        else:",
    )
    server = scripted([{"content": REPRO_TEST}, wrong, DONE, right, DONE])
    out = tmp_path / "run"
    attempt = agentless(repo, BEHAVIOUR_ISSUE, server.base_url, out, samples=2)
    assert attempt.exit_status == "validated", stages(out)
    assert "+            out.append(word)\n" in attempt.patch
    decisions = stages(out)
    assert ("reproduce", "kept") in decisions
    assert [d for s, d in decisions if s == "validate"] == ["valid", "valid"]  # the wrong fix breaks nothing...
    assert ("select", "sample 1") in decisions  # ...but only the right one passes the reproduction test


NESTED_FILES: dict[str, str | bytes] = {
    "depot/__init__.py": "",
    "depot/store.py": (
        "class Store:\n"
        "    class Shelf:\n"
        "        def __init__(self, items):\n"
        "            self.items = items\n\n"
        "        def count(self, name):\n"
        '            """How many units of `name` are on the shelf."""\n'
        "            return sum(1 for item in self.items if item != name)\n\n"
        "    def __init__(self):\n"
        "        self.shelves = []\n"
    ),
    "tests/test_store.py": (
        "from depot.store import Store\n\n\ndef test_empty():\n    assert Store.Shelf([]).count('x') == 0\n"
    ),
}


def test_nested_class_method_fix(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "depot", NESTED_FILES)
    issue = "`Store.Shelf.count('apple')` counts every item that is NOT an apple. It should count the apples."
    fix = edit("depot/store.py::Store.Shelf.count", "item != name", "item == name")
    server = scripted([fix, DONE])
    out = tmp_path / "run"
    attempt = agentless(repo, issue, server.base_url, out, samples=1, reproduce=False)
    assert attempt.exit_status == "submitted", stages(out)  # the repo's tests break nothing but show nothing
    assert "item == name" in (repo / "depot" / "store.py").read_text()


def test_no_valid_patch_leaves_the_repo_unchanged(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    breaks_mul = {"tool_calls": [{"name": "read_entity", "arguments": {"selector": "calc/__init__.py::mul"}}]}
    bad = edit("calc/__init__.py::mul", "return a * b", "return a ** b")
    server = scripted([breaks_mul, bad, DONE])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, samples=1, reproduce=False)
    assert attempt.exit_status == "no_valid_patch" and attempt.patch == ""
    validate = [e for e in read_trajectory(out / "trajectory.jsonl").of_type("stage") if e["stage"] == "validate"]
    assert validate[0]["regressions"] == ["tests.test_calc::test_mul"]


def test_a_patch_whose_tests_flood_memory_is_invalid_and_the_run_goes_on(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    """The attack: a patch that allocates without end when the tests call it (session 20: 21 GB, the host's OOM
    killer). The call's memory cap kills it inside the sandbox; the sample is invalid, the next one validated."""
    flood = edit("calc/__init__.py::add", "return a - b", "return [bytearray(2**26) for _ in iter(int, 1)]")
    fix = edit("calc/__init__.py::add", "return a - b", "return a + b")
    server = scripted([flood, DONE, fix, DONE])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, reproduce=False, samples=2, early_stop=False)
    assert attempt.exit_status == "validated", stages(out)
    assert "+    return a + b\n" in attempt.patch and repo_tests_pass(calc_repo)
    validations = [e for e in read_trajectory(out / "trajectory.jsonl").of_type("stage") if e["stage"] == "validate"]
    assert [e["decision"] for e in validations] == ["invalid", "valid"]
    assert validations[0]["stopped"].startswith("killed at the memory cap of ") and "stopped" not in validations[1]


def test_a_valid_patch_is_kept_when_the_wall_clock_runs_out_validating_the_next(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    """Test runs end at the run's wall clock; that must not throw away a valid patch found before."""
    fix = edit("calc/__init__.py::add", "return a - b", "return a + b")
    hang = edit("calc/__init__.py::add", "return a - b", "return __import__('time').sleep(3600)")
    server = scripted([fix, DONE, hang, DONE])
    out = tmp_path / "run"
    options = {"reproduce": False, "samples": 2, "early_stop": False, "stop_after_green": False}
    failing = "tests/test_calc.py::test_add"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, timeout_s=25, failing_test=failing, **options)
    assert attempt.exit_status == "validated" and "+    return a + b\n" in attempt.patch, stages(out)
    assert ("validate", "not validated") in stages(out)


@pytest.mark.parametrize(
    ("done", "said"),
    [
        (Completed("", -9, False, memory_exceeded=True), "killed at the memory cap of 300 MB"),
        (Completed("", None, False, disk_exceeded=True), "stopped at the disk budget of 200 MB"),
        (Completed("", None, True), "stopped after 12.5 s"),
        (Completed("", 1, False), ""),
    ],
)
def test_a_test_run_that_did_not_finish_says_why(done: Completed, said: str, tmp_path: Path) -> None:
    box = replace(Sandbox.create(tmp_path / "scratch", "none"), memory_mb=300, disk_mb=200)
    assert stopped_by(done, box, 12.5) == said


def test_a_patch_whose_tests_hang_ends_the_run_at_its_wall_clock_cap(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    """A test run is bounded by what is left of the run's wall clock, not by its own 300 s (session 20: a bench
    task capped at 300 s ran 401 s, in validation)."""
    hang = edit("calc/__init__.py::add", "return a - b", "return __import__('time').sleep(3600)")
    server = scripted([hang, DONE, hang, DONE])
    started = time.monotonic()
    options = {"reproduce": False, "samples": 2, "early_stop": False}
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, tmp_path / "run", timeout_s=20, **options)
    assert attempt.exit_status == "timeout", stages(tmp_path / "run")
    assert time.monotonic() - started < 20 + 15
    ending = next(read_trajectory(tmp_path / "run" / "trajectory.jsonl").of_type("exit"))
    assert "wall-clock cap reached (20 s)" in ending["message"]


def test_one_shot_rewrite_of_a_method(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "depot", NESTED_FILES)
    issue = "`Store.Shelf.count('apple')` counts every item that is NOT an apple."
    answer = (
        "The comparison is inverted. Here is the corrected method:\n\n```python\n"
        "def count(self, name):\n"
        '    """How many units of `name` are on the shelf."""\n'
        "    return sum(1 for item in self.items if item == name)\n```\n"
    )
    server = scripted([{"content": answer}])
    out = tmp_path / "run"
    attempt = agentless(repo, issue, server.base_url, out, samples=1, reproduce=False, one_shot=True)
    assert attempt.exit_status == "submitted", stages(out)
    assert "        def count(self, name):\n" in (repo / "depot" / "store.py").read_text()
    assert "item == name" in attempt.patch


VERS_FILES: dict[str, str | bytes] = {
    "vers/__init__.py": "from vers._old import parse\nfrom vers.version import Version\n",
    "vers/_old.py": (
        "from vers.version import Version\n\n\n"
        'def parse(text):\n    """Deprecated: use Version.parse (parse a version string)."""\n'
        "    return Version.parse(text)\n"
    ),
    "vers/version.py": (
        "class Version:\n"
        "    def __init__(self, major, minor):\n        self.major, self.minor = major, minor\n\n"
        "    @classmethod\n    def parse(cls, text):\n"
        '        major, minor = text.split(".")\n        return cls(int(minor), int(major))\n'
    ),
}


def test_a_rewrite_of_a_method_is_applied_to_it_not_to_a_namesake_ranked_first(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "vers", VERS_FILES)
    issue = "The deprecated `vers._old.parse('1.2')` gives major 2: parse swaps the major and minor parts."
    answer = (
        "```python\n@classmethod\ndef parse(cls, text):\n"
        '    major, minor = text.split(".")\n    return cls(int(major), int(minor))\n```\n'
    )
    server = scripted([{"content": answer}])
    out = tmp_path / "run"
    attempt = agentless(repo, issue, server.base_url, out, samples=1, reproduce=False, one_shot=True)
    localize = next(read_trajectory(out / "trajectory.jsonl").of_type("stage"))
    assert localize["candidates"][:2] == ["vers/_old.py::parse", "vers/version.py::Version.parse"]
    assert attempt.exit_status == "submitted", stages(out)
    assert "return cls(int(major), int(minor))" in (repo / "vers" / "version.py").read_text()
    assert "vers/_old.py" not in attempt.patch


def test_one_shot_rewrite_gets_its_answers_import_and_the_recovery_is_in_the_trajectory(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    answer = "```python\nfrom numbers import Number\n\ndef add(a: Number, b: Number) -> Number:\n    return a + b\n```"
    server = scripted([{"content": answer}])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, samples=1, reproduce=False, one_shot=True)
    assert attempt.exit_status == "validated", stages(out)
    assert "+from numbers import Number\n" in attempt.patch and "+    return a + b\n" in attempt.patch
    gates = [(g["gate"], g["ok"]) for g in read_trajectory(out / "trajectory.jsonl").of_type("gate")]
    assert gates == [("edit_recovery", True)]


def test_one_shot_answer_repeating_several_candidates_applies_the_one_it_changed(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    mul = "def mul(a, b):\n    return a * b\n"
    add = 'def add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n'
    server = scripted([{"content": f"```python\n{mul}\n\n{add}```"}])  # mul first, unchanged; add fixed
    out = tmp_path / "run"
    issue = "add(2, 3) returns -1 instead of 5, while mul(2, 3) is fine."
    attempt = agentless(calc_repo, issue, server.base_url, out, samples=1, reproduce=False, one_shot=True, top_k=2)
    assert attempt.exit_status == "validated", stages(out)
    assert "+    return a + b\n" in attempt.patch
    stage = {e["stage"]: e for e in read_trajectory(out / "trajectory.jsonl").of_type("stage")}
    assert stage["localize"]["candidates"][0] == "calc/__init__.py::mul"  # named first, repeated unchanged
    assert stage["repair"]["patch_lines"] == 2
    assert stage["repair"]["message"] == "applied a rewrite of calc/__init__.py::add"


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("def f(x):\n    return x + 1\n", "def f(x):\n    # add one\n    return x+1\n", True),
        ("def f(x):\n    '''Doc.'''\n    return x\n", "def f(x):\n    return x\n", True),
        ("def f(x):\n    return x + 1\n", "def f(x):\n    return 1 + x\n", False),
    ],
)
def test_normalization_ignores_comments_docstrings_and_spacing(a: str, b: str, same: bool) -> None:
    assert (normalize_source(a) == normalize_source(b)) is same


def test_one_shot_search_replace_with_stripped_indentation_is_recovered(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "depot", NESTED_FILES)
    issue = "`Store.Shelf.count('apple')` counts every item that is NOT an apple."
    docstring = '"""How many units of `name` are on the shelf."""\n'
    answer = (
        f"depot/store.py::Store.Shelf.count\n<<<<<<< SEARCH\n{docstring}"
        "return sum(1 for item in self.items if item != name)\n=======\n"
        f"{docstring}return sum(1 for item in self.items if item == name)\n>>>>>>> REPLACE\n"
    )
    server = scripted([{"content": answer}])
    out = tmp_path / "run"
    attempt = agentless(
        repo, issue, server.base_url, out, samples=1, reproduce=False, one_shot=True, edit_format="search_replace"
    )
    assert attempt.exit_status == "submitted", stages(out)
    assert "+            return sum(1 for item in self.items if item == name)\n" in attempt.patch
    gates = [g["gate"] for g in read_trajectory(out / "trajectory.jsonl").of_type("gate")]
    assert gates == ["edit_recovery"]
    assert "<<<<<<< SEARCH" in server.requests[0].body["messages"][0]["content"]


def test_one_shot_line_diff_is_applied_where_its_removed_line_is(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "depot", NESTED_FILES)
    issue = "`Store.Shelf.count('apple')` counts every item that is NOT an apple."
    answer = (
        "```diff\n- `return sum(1 for item in self.items if item != name)`\n"
        "+ `return sum(1 for item in self.items if item == name)`\n```"
    )
    server = scripted([{"content": answer}, {"content": "```diff\n- return len(self.items)\n+ return 0\n```"}])
    options = {"samples": 1, "reproduce": False, "one_shot": True, "edit_format": "line_diff"}
    out = tmp_path / "run"
    attempt = agentless(repo, issue, server.base_url, out, **options)
    assert attempt.exit_status == "submitted", stages(out)
    assert "+            return sum(1 for item in self.items if item == name)\n" in attempt.patch
    [repair] = [e for e in read_trajectory(out / "trajectory.jsonl").of_type("stage") if e["stage"] == "repair"]
    assert repair["message"] == "applied 1 line change(s)"
    prompt = server.requests[0].body["messages"][0]["content"]
    assert "```diff block" in prompt and "# | How many units" in prompt
    missing = agentless(repo, issue, server.base_url, tmp_path / "again", **options)
    assert missing.exit_status == "no_valid_patch" and not missing.patch
    [refused] = [
        e for e in read_trajectory(tmp_path / "again" / "trajectory.jsonl").of_type("stage") if e["stage"] == "repair"
    ]
    assert refused["message"] == "the lines to replace match none of the candidate entities"


def test_failing_test_drives_sbfl_stop_after_green_and_validation(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    fix = edit("calc/__init__.py::add", "return a - b", "return a + b")
    green = {"tool_calls": [{"name": "run_test", "arguments": {"target": "tests/test_calc.py::test_add"}}]}
    server = scripted([fix, green])
    out = tmp_path / "run"
    config = SolveConfig(
        "agentless",
        ModelConfig(server.base_url, "scripted"),
        Limits(max_turns=10),
        out,
        zero_pricer,
        pipeline=PipelineConfig(samples=1, line_repair=False, mutation=False),
    )
    task = Task(repo=calc_repo, issue="add is wrong", failing_test="tests/test_calc.py::test_add")
    attempt = solve(task, config)
    assert attempt.exit_status == "validated", stages(out)
    trajectory = read_trajectory(out / "trajectory.jsonl")
    stage_events = {e["stage"]: e for e in trajectory.of_type("stage")}
    assert stage_events["localize"]["candidates"][0] == "calc/__init__.py::add"
    assert stage_events["repair"]["decision"] == "submitted" and stage_events["validate"]["fixes_failing"] is True
    results = list(trajectory.of_type("tool_result"))
    assert results[-1]["output"].startswith("stop-after-green") and len(server.requests) == 2


def test_a_wrong_reproduction_test_does_not_veto_a_right_patch(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    wrong_repro = "```python\nfrom calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 7\n```"
    server = scripted([{"content": wrong_repro}, edit("calc/__init__.py::add", "return a - b", "return a + b"), DONE])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, samples=1)
    assert attempt.exit_status == "validated", stages(out)  # the repo's failing test_add now passes
    validate = [e for e in read_trajectory(out / "trajectory.jsonl").of_type("stage") if e["stage"] == "validate"]
    assert validate[0]["reproduces"] is False and validate[0]["fixed"] == 1


def test_a_docstring_only_patch_is_not_a_fix(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    doc_only = edit("calc/__init__.py::add", '"""Return the sum of a and b."""', '"""Return a plus b."""')
    server = scripted([doc_only, DONE])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, samples=1, reproduce=False)
    assert attempt.exit_status == "no_valid_patch" and attempt.patch == ""
    validate = [e for e in read_trajectory(out / "trajectory.jsonl").of_type("stage") if e["stage"] == "validate"]
    assert validate[0]["semantic"] is False


def test_a_src_layout_repo_is_validated_by_its_own_tests(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "proj",
        {
            "src/calc/__init__.py": CALC_SOURCE,
            "tests/test_calc.py": CALC_TEST,
            "pyproject.toml": "[project]\nname = 'calc'\n",
        },
    )
    fix = '```python\ndef add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n```'
    server = scripted([{"content": fix}])
    out = tmp_path / "run"
    attempt = agentless(repo, TRACEBACK_ISSUE, server.base_url, out, samples=1, reproduce=False, one_shot=True)
    stage = {e["stage"]: e for e in read_trajectory(out / "trajectory.jsonl").of_type("stage")}
    assert stage["regression_baseline"]["files"] == ["tests/test_calc.py"]  # `import calc` is src/calc
    assert stage["regression_baseline"]["decision"].startswith("1 passing tests")  # test_mul imports and passes
    assert attempt.exit_status == "validated" and stage["validate"]["fixed"] == 1


def test_module_names_count_from_the_first_directory_that_is_not_a_package(tmp_path: Path) -> None:
    for name in ("src/pkg/__init__.py", "src/pkg/sub/__init__.py", "flat/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert module_name(tmp_path, "src/pkg/sub/mod.py") == "pkg.sub.mod"
    assert module_name(tmp_path, "src/pkg/__init__.py") == "pkg"
    assert module_name(tmp_path, "flat/core.py") == "flat.core"
    assert module_name(tmp_path, "setup.py") == "setup"
    assert import_roots(tmp_path) == [tmp_path, tmp_path / "src"]


def test_a_model_measured_to_do_better_one_shot_gets_it_by_default(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    assert one_shot_for("qwen2.5-coder-1.5b-instruct-q4_k_m") and not one_shot_for("gpt-4o")
    fix = '```python\ndef add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n```'
    server = scripted([{"content": fix}])
    out = tmp_path / "run"
    model = ModelConfig(server.base_url, "qwen2.5-coder-1.5b-instruct-q4_k_m")
    config = SolveConfig(
        "agentless",
        model,
        Limits(max_turns=5),
        out,
        zero_pricer,
        pipeline=PipelineConfig(samples=1, reproduce=False, line_repair=False, mutation=False),
    )
    attempt = solve(Task(calc_repo, TRACEBACK_ISSUE), config)
    assert attempt.exit_status == "validated" and len(server.requests) == 1
    assert "tools" not in server.requests[0].body
    header = read_trajectory(out / "trajectory.jsonl").header
    assert header is not None and header["config"]["pipeline"]["one_shot"] is True


def test_the_switch_flags_reach_the_pipeline_config() -> None:
    parser = argparse.ArgumentParser()
    add_pipeline_args(parser)
    assert pipeline_config(parser.parse_args([])) == PipelineConfig(one_shot=None)  # the data's defaults
    chosen = pipeline_config(
        parser.parse_args(["--early-stop", "--extra-samples", "--max-samples", "5", "--no-feedback"])
    )
    assert (chosen.early_stop, chosen.extra_samples, chosen.max_samples, chosen.feedback) == (True, True, 5, False)


@pytest.mark.parametrize(("flags", "one_shot"), [([], None), (["--one-shot"], True), (["--loop"], False)])
def test_one_shot_and_loop_flags(flags: list[str], one_shot: bool | None) -> None:
    parser = argparse.ArgumentParser()
    add_pipeline_args(parser)
    assert pipeline_config(parser.parse_args(flags)).one_shot is one_shot
    with pytest.raises(SystemExit):
        parser.parse_args(["--one-shot", "--loop"])


BLIND_PYTEST: list[tuple[str, str, str]] = [
    # `addopts = --cov=calc` without pytest-cov is a usage error: pytest runs nothing, and validation is blind.
    ("pytest.ini", "[pytest]\naddopts = --an-option-of-a-plugin-that-is-not-installed=calc\n", "addopts_dropped"),
    # boltons on the A/B bench: its conftest implements `pytest_ignore_collect(path, config)`, a hook argument
    # pytest 8 removed; the plugin is refused, no test runs, and validation is blind.
    ("tests/conftest.py", "def pytest_ignore_collect(path, config):\n    return None\n", "conftest_dropped"),
]


@pytest.mark.parametrize(("name", "text", "relaxed"), BLIND_PYTEST, ids=["addopts", "conftest"])
def test_what_stops_every_related_test_is_left_out_so_they_run(
    scripted: Start, tmp_path: Path, name: str, text: str, relaxed: str
) -> None:
    files: dict[str, str | bytes] = {"calc/__init__.py": CALC_SOURCE, "tests/test_calc.py": CALC_TEST, name: text}
    repo = make_repo(tmp_path / "calc", files)
    server = scripted([{"content": "```python\ndef add(a, b):\n    return a + b\n```"}])
    out = tmp_path / "run"
    attempt = agentless(repo, CALC_ISSUE, server.base_url, out, samples=1, one_shot=True, reproduce=False)
    (before,) = stage_events(out, "regression_baseline")
    assert before["decision"] == "1 passing tests in 1 related files" and before[relaxed] is True
    assert {"addopts_dropped", "conftest_dropped"} & set(before) == {relaxed}  # the first relaxation that works
    (validated,) = stage_events(out, "validate")
    assert validated["fixed"] == 1 and attempt.exit_status == "validated"  # test_add, failing before, passes now
