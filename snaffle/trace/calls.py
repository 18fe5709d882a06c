"""What a tool call is, seen from outside the arm: a test run, a test-file edit, a passing test output.

Minimal-arm test runs are bash commands that run a test runner; structured-arm ones are `run_test` calls.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

TEST_PROGRAMS = frozenset({"pytest", "py.test", "tox", "nox"})
TEST_MODULES = frozenset({"pytest", "unittest"})
TEST_SCRIPTS = ("runtests.py",)  # Django's and others' own runners
COMMAND_WRAPPERS = frozenset({"time", "timeout", "env", "nice", "command", "exec", "xvfb-run", "coverage"})
PYTHON_RE = re.compile(r"python(\d+(\.\d+)?)?")
ENV_ASSIGNMENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
SEGMENT_SEPARATOR_RE = re.compile(r"&&|\|\||[;|\n]")
TEST_DIRS = frozenset({"tests", "test"})
EDIT_COMMANDS = frozenset({"create", "str_replace", "insert"})
PASSED_RE = re.compile(r"\b\d+ passed\b|^OK\b", re.MULTILINE)
FAILED_RE = re.compile(r"\b\d+ (failed|errors?)\b|^FAILED\b|^\[exit code \d+\]|^Refused\b", re.MULTILINE)


def key_of_test_run(name: str, arguments: Mapping[str, Any]) -> str | None:
    """A key identifying the test run this call makes (equal keys = the same run), or None if it runs no tests."""
    if name == "run_test":
        return "run_test " + json.dumps(dict(arguments), sort_keys=True)
    command = arguments.get("command") if name == "bash" else None
    if isinstance(command, str) and runs_tests(command):
        return "bash " + command.strip()
    return None


def runs_tests(command: str) -> bool:
    """Does a shell command run a test runner (pytest, python -m pytest/unittest, tox, nox, runtests.py)?"""
    return any(_segment_runs_tests(segment) for segment in SEGMENT_SEPARATOR_RE.split(command))


def _segment_runs_tests(segment: str) -> bool:
    words = _program_words(segment)
    if not words:
        return False
    program = words[0].rsplit("/", 1)[-1]
    if program in TEST_PROGRAMS or program.endswith(TEST_SCRIPTS):
        return True
    if not PYTHON_RE.fullmatch(program):
        return False
    rest = words[1:]
    if "-m" in rest:
        at = rest.index("-m")
        return at + 1 < len(rest) and rest[at + 1] in TEST_MODULES
    scripts = [w for w in rest if not w.startswith("-")]
    return bool(scripts) and scripts[0].endswith(TEST_SCRIPTS)


def _program_words(segment: str) -> list[str]:
    """The words of one simple command, without leading `VAR=value`s, wrappers and their numeric arguments."""
    try:
        words = shlex.split(segment)
    except ValueError:
        words = segment.split()
    while words and (ENV_ASSIGNMENT_RE.fullmatch(words[0]) or words[0] in COMMAND_WRAPPERS or _numeric(words[0])):
        words = words[1:]
    return words


def _numeric(word: str) -> bool:
    return bool(re.fullmatch(r"-?[\d.]+[smhd]?|-[a-zA-Z]+", word))


def edited_path(name: str, arguments: Mapping[str, Any]) -> str | None:
    """The file an editing call targets (str_replace_editor create/str_replace/insert, edit_entity), else None."""
    command = arguments.get("command")
    if name == "str_replace_editor" and isinstance(command, str) and command in EDIT_COMMANDS:
        path = arguments.get("path")
        return path if isinstance(path, str) else None
    if name == "edit_entity":
        selector = arguments.get("selector")
        return selector.split("::", 1)[0] if isinstance(selector, str) else None
    return None


def is_test_path(path: str) -> bool:
    """tests/ or test/ anywhere in the path, test_*.py, *_test.py, conftest.py."""
    parts = PurePosixPath(path.strip()).parts
    if not parts:
        return False
    name = parts[-1]
    in_test_dir = any(part in TEST_DIRS for part in parts[:-1])
    test_module = name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
    return in_test_dir or test_module or name == "conftest.py"


def output_passes(output: str) -> bool:
    """A test output that reports passes and no failure, error, non-zero exit or refusal."""
    return bool(PASSED_RE.search(output)) and not FAILED_RE.search(output)


def call_key(name: str, arguments: object) -> str:
    """Identity of a call for repeat detection: the name and the arguments, key order ignored."""
    return json.dumps([name, arguments], sort_keys=True, default=str)


def describe(name: str, arguments: object, width: int = 100) -> str:
    """A one-line rendering of a call: `bash: ls -la`, `str_replace_editor: view calc/__init__.py`."""
    if isinstance(arguments, Mapping):
        if name == "bash" and isinstance(arguments.get("command"), str):
            text = arguments["command"]
        else:
            text = " ".join(_short(v) for v in arguments.values())
    else:
        text = str(arguments)
    text = " ".join(text.split())
    return f"{name}: {text}" if len(text) <= width else f"{name}: {text[: width - 1]}…"


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"
