"""bench/mutation_reach.py and bench/mutation_bench.py's pure parts: a gold patch one operator away is found (and
one that is not, is not), a lone clause parses through its wrapper, and each mutation stage maps to its outcome."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def load(name: str) -> ModuleType:
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))  # as when run as a script: its siblings import by name
    return importlib.import_module(name)


reach = load("mutation_reach")
bench = load("mutation_bench")


def patch(old: str, new: str, path: str = "pkg/core.py") -> str:
    head = f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -10,3 +10,3 @@ def f():\n"
    return f"{head}     x = 1\n-{old}\n+{new}\n     return x\n"


@pytest.mark.parametrize(
    ("old", "new", "operator"),
    [
        ("        if not m and p < 0:", "        if not m and p <= 0:", "relational"),
        ("        elif n > limit:", "        elif n >= limit:", "relational"),
        ("    except KeyError:", "    except (KeyError, IndexError):", "exception_widened"),
        ("        return seq[n:]", "        return seq[-n:]", "sign_added"),
        ("        return a - b", "        return a + b", "arithmetic"),
        ("        return bisect_left(a, x)", "        return bisect_right(a, x)", "name_swapped"),
        ("        total = count + 1", "        total = count", "term_dropped"),
        ("        name = name.upper()", "        name = name.strip().upper()", None),
        ("        if x:", "        if x and y:", None),
    ],
)
def test_a_gold_change_one_operator_away_is_found(old: str, new: str, operator: str | None) -> None:
    (change,) = reach.changes(patch(old, new))
    assert reach.reach(change) == operator


def test_test_files_and_several_changes_are_not_one_change() -> None:
    assert reach.changes(patch("    a = 1", "    a = 2", "tests/test_core.py")) == []
    two = patch("    a = 1", "    a = 2") + patch("    b = 1", "    b = 2", "pkg/other.py")
    assert len(reach.changes(two)) == 2


@pytest.mark.parametrize(
    ("decisions", "outcome"),
    [
        ([], "not run"),
        (["nothing from the issue could tell a fix"], "no evidence"),
        (["no related test passes on the original"], "no working tests"),
        (["0 of 11 mutants pass the evidence, of 11 made"], "no survivor"),
        (["1 of 3 mutants pass the evidence, of 3 made"], "decisive"),
        (
            ["2 of 9 mutants pass", "not decisive: no one behaviour has the best evidence; the model's samples decide"],
            "tie",
        ),
        (
            [
                "2 of 9 mutants pass",
                "not decisive: the best mutant fixes 5 of the related tests failing on the original, not all; x",
            ],
            "partial",
        ),
        (["4 of 8 mutants pass", "not decisive: screening stopped early (12 survivors); x"], "cut short"),
    ],
)
def test_each_mutation_stage_maps_to_its_outcome(decisions: list[str], outcome: str) -> None:
    assert bench.outcome([{"decision": d} for d in decisions]) == outcome
