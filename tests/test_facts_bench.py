"""bench/facts_bench.py on a tiny planted task built in the test (no network): the trees, the rows per variant with
the real sandbox, a true oracle and a false one told apart, and the tables."""

from __future__ import annotations

import importlib
import io
import sys
import tarfile
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from snaffle.agentless import facts
from snaffle.sandbox import Sandbox

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def load_bench() -> ModuleType:
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))  # as when run as a script: its siblings import by name
    return importlib.import_module("facts_bench")


fb = load_bench()
TINY_SOURCE = '''"""Tiny names."""


def snake(name):
    """`snake("a-b")` is "a_b"."""
    return name.replace("-", "_").lower()
'''
RIGHT_ISSUE = """snake() keeps dashes

    >>> tiny.snake("a-b")
    'a-b'
    >>> tiny.snake("X-Y")
    'x-y'

Expected 'a_b' and 'x_y'.
"""
WRONG_ISSUE = RIGHT_ISSUE.replace("'a_b' and 'x_y'", "'a__b' and 'x__y'")
"""The user expected values the correct code does not give either: evidence from it fails on the pristine tree."""


def tiny_task(cache: Path, issue: str) -> Any:
    """A planted-bug task over a package sdist the test builds into the bench's download cache."""
    dest = cache / "dists" / "tiny-1.0"
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest / "tiny-1.0.tar.gz", "w:gz") as sdist:
        for name, text in {
            "tiny/__init__.py": TINY_SOURCE,
            "tests/test_tiny.py": "def test_nothing():\n    pass\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(f"tiny-1.0/{name}")
            info.size = len(data)
            sdist.addfile(info, io.BytesIO(data))
    package = fb.ab.Package("tiny", "1.0")
    return fb.ab.BenchTask("tiny-snake", package, "tiny/__init__.py", '.replace("-", "_")', "", issue, "", "dev")


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox.create(tmp_path / "sandbox")


def rows_for(issue: str, tmp_path: Path, sandbox: Sandbox) -> dict[str, Any]:
    task = tiny_task(tmp_path / "cache", issue)
    trees = fb.trees_for(task, tmp_path / "cache", tmp_path / "work", {})
    base = replace(facts.snippet_limits(), timeout_s=10.0)
    return {v: fb.measure(task, v, fb.variant_limits(base, v), trees, sandbox) for v in fb.VARIANTS}


def test_the_trees_are_the_planted_and_the_pristine_package(tmp_path: Path) -> None:
    task = tiny_task(tmp_path / "cache", RIGHT_ISSUE)
    trees = fb.trees_for(task, tmp_path / "cache", tmp_path / "work", {})
    assert '.replace("-", "_")' not in (trees.planted / "tiny" / "__init__.py").read_text()
    assert (trees.pristine / "tiny" / "__init__.py").read_text() == TINY_SOURCE
    assert (trees.planted / ".git").is_dir() and (trees.pristine / ".git").is_dir()


def test_a_session_without_its_import_becomes_a_true_oracle_only_with_inference_and_ordered_values(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    rows = rows_for(RIGHT_ISSUE, tmp_path, sandbox)
    today, both = rows["today"], rows["+all"]
    assert (today.snippets, today.ran, today.reproduced, fb.oracle(today), today.snippet_test) == (1, 0, 0, "-", "none")
    assert (rows["+imports"].ran, rows["+imports"].reproduced, rows["+imports"].imports_added) == (1, 0, 1)
    assert rows["+ordered"].expectations == 2 and rows["+ordered"].reproduced == 0  # it stops at the NameError
    assert (both.ran, both.reproduced, both.oracle_true, fb.oracle(both), both.snippet_test) == (
        1,
        1,
        1,
        "true",
        "true",
    )


def test_evidence_that_fails_on_the_correct_code_is_a_false_oracle(tmp_path: Path, sandbox: Sandbox) -> None:
    both = rows_for(WRONG_ISSUE, tmp_path, sandbox)["+all"]
    assert (both.reproduced, both.oracle_false, fb.oracle(both), both.snippet_test) == (1, 1, "FALSE", "false")


def row(variant: str, split: str = "dev", **fields: Any) -> Any:
    values = {
        "snippets": 1,
        "ran": 1,
        "raised_in_repo": 0,
        "reproduced": 0,
        "oracle_true": 0,
        "oracle_false": 0,
        "oracle_unknown": 0,
        "imports_added": 0,
        "expectations": 0,
        "snippet_test": "none",
        "seconds": 1.0,
    }
    return fb.TaskRow("t", split, variant, **{**values, **fields})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, "-"),
        ({"reproduced": 2, "oracle_true": 2}, "true"),
        ({"reproduced": 2, "oracle_true": 1, "oracle_false": 1}, "FALSE"),
        ({"reproduced": 2, "oracle_true": 1, "oracle_unknown": 1}, "unknown"),
    ],
)
def test_a_task_is_a_true_oracle_only_when_every_reproducing_snippet_passes_on_the_pristine_tree(
    fields: dict[str, Any], expected: str
) -> None:
    assert fb.oracle(row("today", **fields)) == expected


def test_the_totals_count_tasks_per_split_and_variant() -> None:
    rows = [
        row("today", reproduced=1, oracle_true=1, snippet_test="true"),
        row("today", ran=0, reproduced=1, oracle_false=1),
        row("+imports", snippets=2, ran=2),
        row("today", split="test"),
    ]
    lines = fb.totals(rows).splitlines()
    assert lines[2:] == [
        "dev | today | 2 | 1/2 | 2 | 1 | 1 | 1",
        "dev | +imports | 1 | 2/2 | 0 | 0 | 0 | 0",
        "test | today | 1 | 1/1 | 0 | 0 | 0 | 0",
    ]
    assert fb.table(rows).splitlines()[2].startswith("t | dev | today | 1 | 1 | 0 | 1 | true |")


def test_a_filter_that_matches_nothing_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert fb.main(["--tasks", "no-such-task", "--work", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "facts_bench: no task matches; see --help\n"
