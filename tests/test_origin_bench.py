"""bench/origin_bench.py on the tiny planted task of tests/test_facts_bench.py (no network): the gold entity of a
plant that deletes its line, the origin found in the real sandbox, the ranks, and the table and totals."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from snaffle.sandbox import Sandbox
from tests.test_facts_bench import BENCH_DIR, RIGHT_ISSUE, tiny_task

if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))  # as when run as a script: its siblings import by name
ob = importlib.import_module("origin_bench")


def test_a_deleting_plants_gold_is_read_from_the_pristine_tree_and_the_origin_ranks_it(tmp_path: Path) -> None:
    task = tiny_task(tmp_path / "cache", RIGHT_ISSUE)
    trees = ob.fb.trees_for(task, tmp_path / "cache", tmp_path / "work", {})
    row = ob.measure(task, trees, Sandbox.create(tmp_path / "sandbox"))
    assert (row.task, row.gold, row.origin, row.without, row.with_origin) == ("tiny-snake", "snake", "snake", 1, 1)
    shown = ob.table([row]) + "\n" + ob.totals([row])
    assert "tiny-snake" in shown
    assert "dev: 1 tasks, origin found in 1 (the gold entity in 1); gold ranked first 1 without, 1 with" in shown


def test_ranks_beyond_the_depth_count_as_misses() -> None:
    rows = [ob.OriginRow("a", "dev", "f", "-", None, 3, 0.0), ob.OriginRow("b", "test", "g", "g", 1, 1, 0.1)]
    assert (ob.within(rows, "without", 1), ob.within(rows, "with_origin", 3)) == (1, 2)
    assert ob.rank_of("x", ["y", "x"]) == 2 and ob.rank_of("z", ["y"]) is None
