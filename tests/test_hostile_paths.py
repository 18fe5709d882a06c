"""Hostile paths and arguments (issue 14 items 2, 3, 5): symlinks out of the repo, flag injection into ripgrep, and
tool arguments that used to crash a whole run — each refused as an observation while the run goes on."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from snaffle.agentless.config import PipelineConfig
from snaffle.agentless.repair import RepairContext, apply_answer
from snaffle.exceptions import ToolFailure
from snaffle.index.repo import RepoIndex
from snaffle.model.client import ModelConfig
from snaffle.primitives.edit import EntityEditor
from snaffle.primitives.editor import Editor
from snaffle.primitives.reader import Reader, RepoView
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.trajectory import TrajectoryWriter, read_trajectory
from snaffle.types import ALL_MECHANISMS, Attempt, Limits, Task
from snaffle.workspace import Workspace
from tests.helpers import CALC_ISSUE, CALC_SOURCE, CALC_TEST, Start, git, make_repo

SECRET = 'def stolen():\n    """The secret outside the repository."""\n    return "TOPSECRET"\n'
BAD_NAME = b"calc/b\xffd.py"
"""A file name that is not UTF-8."""
BAD_SOURCE = b"def add_twice(a):\n    return add(a, a)\n"
DONE = {"content": "DONE"}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the repository holding a secret Python file."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.py").write_text(SECRET, encoding="utf-8")
    return folder


@pytest.fixture
def linked_repo(tmp_path: Path, outside: Path) -> Path:
    """The calc repo with a committed file symlink and a directory symlink, both leading outside it."""
    repo = make_repo(tmp_path / "calc", {"calc/__init__.py": CALC_SOURCE, "tests/test_calc.py": CALC_TEST})
    os.symlink(outside / "secret.py", repo / "calc" / "evil.py")
    os.symlink(outside, repo / "calc" / "linked")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "links")
    return repo


@pytest.fixture
def bad_name_repo(tmp_path: Path) -> Path:
    """The calc repo with a committed Python file whose name is not UTF-8."""
    repo = make_repo(tmp_path / "calc", {"calc/__init__.py": CALC_SOURCE, "tests/test_calc.py": CALC_TEST})
    (Path(os.fsdecode(bytes(repo) + b"/" + BAD_NAME))).write_bytes(BAD_SOURCE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "bad name")
    return repo


def view_of(repo: Path) -> RepoView:
    return RepoView(Workspace.open(repo), RepoIndex(repo))


# ------------------------------------------------------------------ symlinks out of the repository (item 2)


@pytest.mark.parametrize("selector", ["calc/evil.py", "calc/evil.py::stolen", "calc/linked/secret.py::stolen"])
def test_read_entity_does_not_follow_a_symlink_out_of_the_repo(linked_repo: Path, selector: str) -> None:
    with pytest.raises(ToolFailure, match="outside the repository"):
        Reader(view_of(linked_repo)).read_entity(selector)


@pytest.mark.parametrize("selector", ["calc/evil.py::stolen", "calc/linked/secret.py::stolen"])
def test_edit_entity_never_rewrites_a_file_outside_through_a_symlink(
    linked_repo: Path, outside: Path, selector: str
) -> None:
    view = view_of(linked_repo)
    view.shown.add(selector)
    with pytest.raises(ToolFailure, match="outside the repository"):
        EntityEditor(view).edit_entity(selector, search='return "TOPSECRET"', replace='return "owned"')
    assert (outside / "secret.py").read_text(encoding="utf-8") == SECRET


def test_the_index_skips_symlinks_that_lead_outside(linked_repo: Path) -> None:
    index = RepoIndex(linked_repo)
    assert index.files() == ["calc/__init__.py", "tests/test_calc.py"]
    assert all(e.name != "stolen" for e in index.all_entities())
    assert Reader(view_of(linked_repo)).search_symbol("stolen").startswith("no symbol matches")


def test_the_index_of_a_tree_without_git_skips_symlinks_that_lead_outside(tmp_path: Path, outside: Path) -> None:
    tree = tmp_path / "plain"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_text("def f():\n    return 1\n", encoding="utf-8")
    os.symlink(outside / "secret.py", tree / "pkg" / "evil.py")
    os.symlink(outside, tree / "linked")
    os.symlink(tree / "pkg" / "mod.py", tree / "pkg" / "alias.py")  # inside: kept
    assert RepoIndex(tree).files() == ["pkg/alias.py", "pkg/mod.py"]


def test_search_code_does_not_follow_a_symlink_out_of_the_repo(linked_repo: Path) -> None:
    reader = Reader(view_of(linked_repo))
    assert reader.search_code("TOPSECRET").startswith("no match")
    for path in ("calc/evil.py", "calc/linked", "calc/linked/secret.py"):
        with pytest.raises(ToolFailure, match="outside the repository"):
            reader.search_code("TOPSECRET", path=path)


def test_editor_lists_a_repo_with_links_to_outside_without_following_them(linked_repo: Path) -> None:
    listing = Editor(Workspace.open(linked_repo)).str_replace_editor("view", ".")
    assert "calc/__init__.py" in listing and "calc/linked" in listing and "calc/evil.py" in listing
    assert "secret.py" not in listing and "TOPSECRET" not in listing
    with pytest.raises(ToolFailure, match="outside the repository"):
        Editor(Workspace.open(linked_repo)).str_replace_editor("view", "calc/evil.py")


# ------------------------------------------------------------------ flag injection (item 3)


def test_search_code_path_is_never_a_ripgrep_flag(calc_repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    script = tmp_path / "pre.sh"
    script.write_text(f'#!/bin/sh\ntouch {marker}\ncat "$1"\n', encoding="utf-8")
    script.chmod(0o755)
    reader = Reader(view_of(calc_repo))
    for path in (f"--pre={script}", "--pre", f"-e{script}"):
        try:
            reader.search_code("add", path=path)
        except ToolFailure:
            pass
    assert not marker.exists()


def test_search_code_query_is_never_a_ripgrep_flag(calc_repo: Path) -> None:
    reader = Reader(view_of(calc_repo))
    assert reader.search_code("--files").startswith("no match")
    assert "calc/__init__.py::add" in reader.search_code("return a - b")


# ------------------------------------------------------------------ a tool's exception is its observation (item 5)


def structured(repo: Path, server_url: str, out: Path) -> Attempt:
    config = SolveConfig("structured", ModelConfig(server_url, "scripted"), Limits(max_turns=20), out, zero_pricer)
    return solve(Task(repo=repo, issue=CALC_ISSUE), config)


def minimal(repo: Path, server_url: str, out: Path) -> Attempt:
    config = SolveConfig("minimal", ModelConfig(server_url, "scripted"), Limits(max_turns=20), out, zero_pricer)
    return solve(Task(repo=repo, issue=CALC_ISSUE), config)


def finished(out: Path) -> list[dict[str, Any]]:
    """The run's tool results, after checking it ended with its exit event and result.json."""
    trajectory = read_trajectory(out / "trajectory.jsonl")
    assert trajectory.exit is not None
    result = json.loads((out / "result.json").read_text(encoding="utf-8"))
    assert result["exit_status"] == trajectory.exit["status"]
    return list(trajectory.of_type("tool_result"))


HOSTILE_PATHS = ["/", "../x", "calc/\x00.py", "a" * 5000, "x/" * 2500]


def test_hostile_search_paths_are_observations_and_the_run_goes_on(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    calls = [call("search_code", query="add", path=path) for path in HOSTILE_PATHS]
    calls += [call("read_entity", selector=path) for path in HOSTILE_PATHS]
    fix = call("edit_entity", selector="calc/__init__.py::add", search="return a - b", replace="return a + b")
    server = scripted([*calls, call("read_entity", selector="calc/__init__.py::add"), fix, DONE, DONE])
    out = tmp_path / "run"
    attempt = structured(calc_repo, server.base_url, out)
    assert attempt.exit_status == "submitted" and "+    return a + b" in attempt.patch
    results = finished(out)
    assert [r["ok"] for r in results] == [False] * len(calls) + [True, True]
    assert all(r["output"].startswith("Error: ") for r in results[: len(calls)])


def test_editor_view_of_a_repo_with_links_to_outside_in_a_run(
    linked_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    views = [call("str_replace_editor", command="view", path=p) for p in (".", "calc", "calc/linked", "calc/evil.py")]
    server = scripted([*views, DONE, DONE])
    out = tmp_path / "run"
    minimal(linked_repo, server.base_url, out)
    results = finished(out)
    assert [r["ok"] for r in results] == [True, True, False, False]
    assert not any("TOPSECRET" in r["output"] or "secret.py" in r["output"] for r in results)


def test_a_file_name_that_is_not_utf8_is_shown_escaped(bad_name_repo: Path) -> None:
    view = view_of(bad_name_repo)
    assert "calc/__init__.py" in view.index.files()
    found = Reader(view).search_code("add")
    assert "calc/b\\xffd.py" in found and "calc/__init__.py::add" in found
    listing = Editor(view.workspace).str_replace_editor("view", ".")
    assert "calc/b\\xffd.py" in listing


def test_a_file_name_that_is_not_utf8_in_a_structured_run(bad_name_repo: Path, scripted: Start, tmp_path: Path) -> None:
    calls = [call("search_symbol", query="add"), call("search_code", query="add"), call("read_entity", selector="calc")]
    calls += [call("read_entity", selector="calc/b\\xffd.py"), call("search_code", query="add", path="calc/b\\xffd.py")]
    server = scripted([*calls, DONE, DONE])
    out = tmp_path / "run"
    structured(bad_name_repo, server.base_url, out)
    results = finished(out)
    assert len(results) == len(calls) and results[0]["ok"] and results[1]["ok"]
    assert "calc/b\\xffd.py" in results[1]["output"]


def test_a_file_name_that_is_not_utf8_in_a_minimal_run(bad_name_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([call("str_replace_editor", command="view", path="."), DONE, DONE])
    out = tmp_path / "run"
    minimal(bad_name_repo, server.base_url, out)
    (listing,) = finished(out)
    assert listing["ok"] and "calc/b\\xffd.py" in listing["output"]


def test_a_file_name_that_is_not_utf8_in_an_agentless_run(bad_name_repo: Path, scripted: Start, tmp_path: Path) -> None:
    answer = "```python\ndef add(a, b):\n    return a + b\n```"
    server = scripted([{"content": answer}])
    out = tmp_path / "run"
    pipeline = PipelineConfig(samples=1, reproduce=False, one_shot=True, line_repair=False, mutation=False)
    model = ModelConfig(server.base_url, "scripted")
    config = SolveConfig("agentless", model, Limits(max_turns=40), out, zero_pricer, pipeline=pipeline)
    attempt = solve(Task(repo=bad_name_repo, issue=CALC_ISSUE), config)
    finished(out)
    assert attempt.exit_status in ("validated", "submitted") and "+    return a + b" in attempt.patch


def test_an_exception_while_applying_a_one_shot_answer_is_recorded_and_undoes_its_edits(
    calc_repo: Path, tmp_path: Path
) -> None:
    view = view_of(calc_repo)
    context = RepairContext(("calc/__init__.py::add", "calc/gone.py::add"), ("add", "add"), "")
    view.shown.update(context.selectors)
    fix = "<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"
    stale = "<<<<<<< SEARCH\n    return a % b\n=======\n    return a // b\n>>>>>>> REPLACE\n"
    writer = TrajectoryWriter(tmp_path / "trajectory.jsonl")
    status, message = apply_answer(view, context, fix + stale, writer, ALL_MECHANISMS)
    writer.close()
    assert status == "no_edit" and message.startswith("SelectorError: no file calc/gone.py")
    assert (calc_repo / "calc" / "__init__.py").read_text(encoding="utf-8") == CALC_SOURCE
    gates = [(g["gate"], g["ok"]) for g in read_trajectory(tmp_path / "trajectory.jsonl").of_type("gate")]
    assert gates[-1] == ("apply", False)
