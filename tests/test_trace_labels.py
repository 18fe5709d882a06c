"""Failure labels on real-loop trajectories (one scenario per label), each threshold at its edge, and the
helpers they rest on: test-run detection, test paths, diff hunks mapped to entities."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from snaffle.trace import labels as labels_module
from snaffle.trace.analysis import analyze
from snaffle.trace.calls import is_test_path, key_of_test_run, output_passes, runs_tests
from snaffle.trace.labels import label
from snaffle.trace.locate import LocationCheck, entities, git_source, hunks
from snaffle.trace.runs import load_gold, load_runs
from snaffle.trace.stats import AttemptStats, attempt_stats
from tests.trace_scenarios import SCENARIOS

Runs = dict[str, Path]
WITH_GOLD = {"test_file_edits": {"wrong_location"}}
"""Labels a scenario earns on top of its own once the gold patch is known (it edits only the test file)."""


def labels_of(run_dir: Path, gold: Path | None = None) -> set[str]:
    gold_patches = load_gold(gold) if gold else None
    (analysis,) = analyze(load_runs([run_dir]), gold=gold_patches)
    return {lab.name for lab in analysis.labels}


@pytest.mark.parametrize("name", sorted(set(SCENARIOS) - {"wrong_location"}))
def test_each_scenario_earns_exactly_its_labels(trace_runs: Runs, name: str) -> None:
    assert labels_of(trace_runs[name]) == SCENARIOS[name].labels - {"wrong_location"}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_with_the_gold_patch_wrong_location_joins(trace_runs: Runs, gold_file: Path, name: str) -> None:
    expected = SCENARIOS[name].labels | WITH_GOLD.get(name, set())
    assert labels_of(trace_runs[name], gold_file) == expected


def test_every_label_has_a_scenario() -> None:
    earned = set().union(*(s.labels for s in SCENARIOS.values()))
    assert earned == set(labels_module.LABELS)


def test_a_torn_trajectory_is_labelled_without_its_exit(trace_runs: Runs) -> None:
    assert labels_of(trace_runs["torn"]) == set()


def test_wrong_location_names_both_entity_sets(trace_runs: Runs, gold_file: Path) -> None:
    (analysis,) = analyze(load_runs([trace_runs["wrong_location"]]), gold=load_gold(gold_file))
    assert analysis.location == LocationCheck(
        frozenset({"calc/__init__.py::mul"}), frozenset({"calc/__init__.py::add"})
    )


def test_gold_from_swebench_instances_jsonl(trace_runs: Runs, gold_file: Path, tmp_path: Path) -> None:
    instances = tmp_path / "instances.jsonl"
    line = {"instance_id": "wrong_location", "patch": gold_file.read_text(), "base_commit": "x"}
    instances.write_text(json.dumps(line) + "\n" + json.dumps({**line, "instance_id": "other"}) + "\n")
    assert "wrong_location" in labels_of(trace_runs["wrong_location"], instances)
    assert "wrong_location" not in labels_of(trace_runs["clean"], instances)  # no gold for instance "clean"


# --- each threshold at its edge -------------------------------------------------------------------


def base_stats(trace_runs: Runs) -> AttemptStats:
    return attempt_stats(load_runs([trace_runs["clean"]])[0])


@pytest.mark.parametrize(
    ("field", "constant", "name"),
    [
        ("longest_repeat", "LOOP_CALLS", "looping"),
        ("test_reruns_unchanged", "REDUNDANT_TEST_RERUNS", "redundant_test_runs"),
        ("test_file_edits", "TEST_FILE_EDITS", "test_file_edits"),
        ("malformed_turns", "MALFORMED_STORM_TURNS", "malformed_storm"),
    ],
)
def test_threshold_edges(trace_runs: Runs, field: str, constant: str, name: str) -> None:
    threshold = getattr(labels_module, constant)
    stats = base_stats(trace_runs)
    below = dataclasses.replace(stats, **{field: threshold - 1})
    at = dataclasses.replace(stats, **{field: threshold})
    assert name not in {lab.name for lab in label(below)}
    assert name in {lab.name for lab in label(at)}


def test_gave_up_early_needs_budget_left(trace_runs: Runs) -> None:
    stats = dataclasses.replace(base_stats(trace_runs), patch_lines=0, changed_calls=0)
    assert "gave_up_early" in {lab.name for lab in label(stats)}
    out_of_turns = dataclasses.replace(stats, calls=stats.turn_cap)
    assert "gave_up_early" not in {lab.name for lab in label(out_of_turns)}
    capped = dataclasses.replace(stats, status="max_turns_exceeded")
    assert "gave_up_early" not in {lab.name for lab in label(capped)}


def test_context_pressure_is_any_compaction(trace_runs: Runs) -> None:
    stats = base_stats(trace_runs)
    assert not label(stats)
    assert [lab.name for lab in label(dataclasses.replace(stats, compactions=1))] == ["context_pressure"]


# --- test runs, test paths, passing outputs -------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("pytest", True),
        ("python -m pytest -q tests/test_x.py::test_y", True),
        ("cd repo && PYTHONPATH=. python3 -m pytest -x", True),
        ("timeout 60 pytest tests", True),
        ("python -m unittest discover", True),
        ("tox -e py311", True),
        ("./tests/runtests.py queries", True),
        ("python tests/runtests.py", True),
        ("/usr/bin/python3.11 -X dev -m pytest", True),
        ("pip install pytest", False),
        ("grep -rn pytest setup.cfg", False),
        ("cat tests/test_calc.py", False),
        ("python -c 'import pytest'", False),
        ("ls tests | head", False),
        ("echo 'unbalanced", False),
    ],
)
def test_runs_tests(command: str, expected: bool) -> None:
    assert runs_tests(command) is expected


def test_tests_run_by() -> None:
    assert key_of_test_run("bash", {"command": "  pytest -q "}) == "bash pytest -q"
    assert key_of_test_run("run_test", {"target": "a.py::t"}) == key_of_test_run("run_test", {"target": "a.py::t"})
    assert key_of_test_run("bash", {"command": "ls"}) is None
    assert key_of_test_run("read_entity", {"selector": "tests/test_a.py"}) is None


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("tests/test_calc.py", True),
        ("pkg/tests/helpers.py", True),
        ("test_thing.py", True),
        ("src/thing_test.py", True),
        ("conftest.py", True),
        ("calc/__init__.py", False),
        ("src/testing_utils.py", False),
        ("contest.py", False),
    ],
)
def test_is_test_path(path: str, expected: bool) -> None:
    assert is_test_path(path) is expected


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("..\n2 passed in 0.02s", True),
        ("F.\n1 failed, 1 passed in 0.02s\n[exit code 1]", False),
        ("Ran 3 tests in 0.001s\n\nOK", True),
        ("1 passed, 1 error in 0.1s", False),
        ("Refused: this exact call already ran and nothing has changed since", False),
        ("no tests ran", False),
    ],
)
def test_test_passed(output: str, expected: bool) -> None:
    assert output_passes(output) is expected


# --- diff hunks to entities -----------------------------------------------------------------------

BASE = """import os


class Box:
    size = 1

    def grow(self, n):
        self.size += n
        return self.size

    @property
    def area(self):
        return self.size ** 2


def helper():
    return os.sep
"""

PATCH = "\n".join(
    [
        "diff --git a/box.py b/box.py",
        "index 1111111..2222222 100644",
        "--- a/box.py",
        "+++ b/box.py",
        "@@ -7,7 +7,7 @@ class Box:",
        "     def grow(self, n):",
        "         self.size += n",
        "-        return self.size",
        "+        return int(self.size)",
        " ",
        "     @property",
        "     def area(self):",
        "@@ -13,3 +13,4 @@ class Box:",
        "         return self.size ** 2",
        " ",
        " ",
        "+X = 1",
        "diff --git a/new_mod.py b/new_mod.py",
        "new file mode 100644",
        "index 0000000..3333333",
        "--- /dev/null",
        "+++ b/new_mod.py",
        "@@ -0,0 +1 @@",
        "+VALUE = 2",
        "",
    ]
)


def test_hunks_touch_old_lines() -> None:
    found = list(hunks(PATCH))
    assert [(h.path, h.lines) for h in found] == [("box.py", (9, 9)), ("box.py", (15,)), ("new_mod.py", (1,))]
    assert found[0].header == "class Box:"


def test_entities_with_the_base_file_are_qualified_names() -> None:
    def source(path: str) -> str | None:
        return BASE if path == "box.py" else None

    assert entities(PATCH, source) == {"box.py::Box.grow", "box.py::<module>", "new_mod.py::<module>"}


def test_entities_without_the_base_file_fall_back_to_hunk_headers() -> None:
    assert entities(PATCH) == {"box.py::Box", "new_mod.py::<module>"}


def test_git_source_reads_the_base_not_the_working_tree(trace_runs: Runs) -> None:
    from snaffle.trace.runs import load_run

    run = load_run(trace_runs["clean"] / "trajectory.jsonl")
    repo = Path(run.header["task"]["repo"])
    base = git_source(repo)("calc/__init__.py")
    assert base is not None and "return a - b" in base
    assert "return a + b" in (repo / "calc" / "__init__.py").read_text()
    assert git_source(repo)("no/such.py") is None


def test_labels_command_text_and_json(
    trace_runs: Runs, gold_file: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from snaffle.trace.cli import main

    assert main(["trace", "labels", str(trace_runs["looping"])]) == 0
    out = capsys.readouterr().out
    assert "looping (looping): looping, no_edit" in out and "'bash: ls' made 4 times" in out
    assert "wrong_location not checked" in out
    assert main(["trace", "labels", str(trace_runs["wrong_location"]), "--gold", str(gold_file), "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert [lab["name"] for lab in record["labels"]] == ["gave_up_early", "wrong_location"]
    assert record["location"] == {"edited": ["calc/__init__.py::mul"], "gold": ["calc/__init__.py::add"]}
    bad = tmp_path / "gold.json"
    bad.write_text("{not json\n")
    assert main(["trace", "labels", str(trace_runs["clean"]), "--gold", str(bad)]) == 2
    assert "neither a diff" in capsys.readouterr().err
    assert main(["trace"]) == 2 and "show" in capsys.readouterr().out
