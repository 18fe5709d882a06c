"""Each gate rejects what it must and lets through what it must, with real ruff."""

from __future__ import annotations

import pytest

from snaffle.gates import evidence_gate, guard_test_files, is_test_file, lint_gate, stop_after_green

CLEAN = "import os\n\n\ndef f(x):\n    return os.path.join(x, 'a')\n"


@pytest.mark.parametrize(
    ("after", "ok", "reason"),
    [
        (CLEAN.replace("'a'", "'b'"), True, ""),
        (CLEAN.replace("return", "return ("), False, "syntax error"),
        (CLEAN.replace("os.path", "pathlib.Path"), False, "undefined name (F821: Undefined name `pathlib`)"),
        (CLEAN.replace("def f(x)", "def f(x, x)"), False, "syntax error"),
        (CLEAN + "__all__ = ['g']\n", False, "F822"),
    ],
)
def test_lint_gate_blocks_new_fatal_errors(after: str, ok: bool, reason: str) -> None:
    result = lint_gate("pkg/mod.py", CLEAN, after)
    assert result.ok is ok and reason in result.reason


def test_lint_gate_ignores_pre_existing_errors() -> None:
    broken = CLEAN + "\n\ndef g():\n    return undefined_thing\n"
    assert lint_gate("m.py", broken, broken.replace("'a'", "'c'")).ok
    still = broken.replace("return undefined_thing", "return undefined_thing + other_missing")
    assert not lint_gate("m.py", broken, still).ok


def test_lint_gate_counts_shifted_lines_as_the_same_error() -> None:
    broken = "def g():\n    return missing\n"
    assert lint_gate("m.py", broken, "import os\n\n" + broken).ok


@pytest.mark.parametrize(
    ("path", "is_test"),
    [
        ("tests/test_a.py", True),
        ("pkg/tests/helpers.py", True),
        ("test_x.py", True),
        ("pkg/x_test.py", True),
        ("conftest.py", True),
        ("src/testing/util.py", True),
        ("pkg/contest.py", False),
        ("pkg/latest.py", False),
        ("pkg/attestation/test_data.json", False),
        ("src/pkg/mod.py", False),
    ],
)
def test_test_file_guard(path: str, is_test: bool) -> None:
    assert is_test_file(path) is is_test
    assert guard_test_files(path).ok is not is_test


def test_evidence_gate() -> None:
    assert evidence_gate("a.py::f", {"a.py::f", "a.py::g"}).ok
    refused = evidence_gate("a.py::h", {"a.py::f"})
    assert not refused.ok and "read a.py::h" in refused.reason


@pytest.mark.parametrize(
    ("edited", "target", "passed", "failing", "stop"),
    [
        (True, "tests/t.py::test_a", True, "tests/t.py::test_a", True),
        (True, "tests/t.py", True, "tests/t.py::test_a", True),
        (False, "tests/t.py::test_a", True, "tests/t.py::test_a", False),
        (True, "tests/t.py::test_a", False, "tests/t.py::test_a", False),
        (True, "tests/other.py", True, "tests/t.py::test_a", False),
        (True, "tests/t.py", True, None, False),
    ],
)
def test_stop_after_green(edited: bool, target: str, passed: bool, failing: str | None, stop: bool) -> None:
    assert stop_after_green(edited, target, passed, failing) is stop
