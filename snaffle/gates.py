"""Gates: the checks that stand between a proposed change and the repository, each deciding `GateResult`.

Each decides from its inputs; only the lint gate computes one of them itself, by running ruff over the before and
after texts on stdin (snaffle's own command line, never one a model wrote)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Collection
from pathlib import PurePosixPath

from snaffle.types import GateResult

FATAL_RULES = ("F821", "F822", "F823")
"""Undefined names; ruff reports syntax errors (incl. duplicate arguments, the old F831) as `invalid-syntax`."""
SYNTAX_CODES = frozenset({"invalid-syntax", "E999", ""})
LINT_TIMEOUT_S = 30
TEST_DIR_NAMES = frozenset({"test", "tests", "testing"})
"""Directory names whose files are all test code (fixtures and helpers too)."""
TEST_FILE_RE = re.compile(r"^(test_.*\.py|.*_test\.py|conftest\.py)$")
MAX_REPORTED = 3


def fatal_diagnostics(source: str, filename: str) -> Counter[tuple[str, str]]:
    """Syntax errors and undefined names in `source`, as (code, message) pairs (no line numbers)."""
    command = [
        sys.executable,
        "-m",
        "ruff",
        "check",
        "--no-cache",
        "--isolated",
        "--select",
        ",".join(FATAL_RULES),
        "--output-format",
        "json",
        "--stdin-filename",
        filename,
        "-",
    ]
    proc = subprocess.run(command, input=source, capture_output=True, text=True, timeout=LINT_TIMEOUT_S)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"ruff failed on {filename}: {proc.stderr.strip()[:200]}")
    found = json.loads(proc.stdout or "[]")
    return Counter((str(d.get("code") or "invalid-syntax"), str(d["message"])) for d in found)


def lint_gate(filename: str, before: str, after: str) -> GateResult:
    """Reject an edit that adds a syntax error or an undefined name; errors already there don't block."""
    new = fatal_diagnostics(after, filename) - fatal_diagnostics(before, filename)
    if not new:
        return GateResult("lint", True)
    listed = "; ".join(f"{code}: {message}" for code, message in list(new)[:MAX_REPORTED])
    syntax = any(code in SYNTAX_CODES for code, _ in new)
    kind = "a syntax error" if syntax else "an undefined name"
    return GateResult("lint", False, f"edit reverted: it introduces {kind} ({listed})")


def is_test_file(path: str) -> bool:
    """tests/ (or test/, testing/) directories, test_*.py, *_test.py and conftest.py."""
    parts = PurePosixPath(path).parts
    return bool(TEST_FILE_RE.match(parts[-1])) or any(p in TEST_DIR_NAMES for p in parts[:-1])


def guard_test_files(path: str) -> GateResult:
    """Repair arms fix the source, never the tests that judge it."""
    if is_test_file(path):
        return GateResult("test_file", False, f"edit refused: {path} is a test file; fix the source instead")
    return GateResult("test_file", True)


def evidence_gate(selector: str, shown: Collection[str]) -> GateResult:
    """An edit is accepted only on an entity that a read or search showed earlier in this run."""
    if selector in shown:
        return GateResult("evidence", True)
    return GateResult("evidence", False, f"edit refused: read {selector} with read_entity before editing it")


def stop_after_green(edited: bool, target: str, passed: bool, failing_test: str | None) -> bool:
    """After an accepted edit, a passing run of the known failing test (or of its file) ends the attempt."""
    if not edited or not passed or failing_test is None:
        return False
    return target == failing_test or failing_test.startswith(target + "::")
