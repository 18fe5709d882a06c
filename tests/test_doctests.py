"""Docstring examples as the related tests of a repository that ships no test file (`doctest_fallback`): found in
the located source files, run by every pytest run of the run (PYTEST_ADDOPTS), and screening line repair's answers
as related tests do; the scripted model, the real sandbox and pytest."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from snaffle.agentless.config import switch_defaults
from snaffle.agentless.junit import read_cases
from snaffle.agentless.validate import doctest_modules, with_addopts
from snaffle.index.repo import RepoIndex
from tests.helpers import Start, make_repo, stage_events
from tests.test_pipeline import agentless

STACK = '''class Stack:
    """Last in, first out.

    >>> s = Stack()
    >>> s.push(1)
    >>> s.push(2)
    >>> s.pop()
    2
    >>> s.items
    [1]
    """

    def __init__(self):
        self.items = []

    def push(self, item):
        """
        >>> s = Stack(); s.push(3); s.items
        [3]
        """
        self.items.append(item)

    def __len__(self):
        """
        >>> len(Stack())
        0
        """
        return len(self.items)

    def empty(self):
        """
        >>> Stack().empty()
        True
        """
        return not self.items

    def pop(self):
        """The item pushed last, removed.

        >>> s = Stack(); s.push("a"); s.push("b")
        >>> s.pop()
        'b'
        """
        item = self.items[0]
        self.items.remove(item)
        return item
'''
STACK_FILES: dict[str, str | bytes] = {"stack/__init__.py": "from stack.core import Stack\n", "stack/core.py": STACK}
ISSUE = """Stack.pop returns the oldest item

    >>> from stack import Stack
    >>> s = Stack()
    >>> s.push(1)
    >>> s.push(2)
    >>> s.pop()
    1

I expected `s.pop()` to return `2`.
"""
REPEAT_FIRST = {"content": "```python\nitem = self.items[0]\n```"}
REPEAT_SECOND = {"content": "```python\nself.items.remove(item)\n```"}
WRONG_RETURN = {"content": "```python\nreturn self.items[-1]\n```"}
"""Returns 2 as the issue expects, but leaves [2] on the stack: only the class's own example can tell."""
RIGHT_SAMPLE = {"content": "```python\ndef pop(self):\n    return self.items.pop()\n```"}


def test_the_doctest_modules_are_the_located_sources_with_an_example(tmp_path: Path) -> None:
    files = {
        **STACK_FILES,
        "stack/plain.py": "def f():\n    return 1  # >>> is no example here\n",
        "tests/test_core.py": 'def test_x():\n    """>>> 1\n    1\n    """\n',
    }
    index = RepoIndex(make_repo(tmp_path / "stack", files))
    located = ["stack/plain.py", "tests/test_core.py", "stack/core.py", "README.md"]
    assert doctest_modules(index, located) == ["stack/core.py"]


def test_a_test_modules_docstring_examples_are_no_test_cases(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    cases = [
        ("tests.test_core", "test_push"),
        ("tests.test_core", "tests.test_core"),
        ("tests.test_core", "tests.test_core.Helper"),
        ("tests.test_core", "test_core.Helper"),
        ("stack.core", "stack.core.Stack.pop"),
        ("stack.core", "stack.core"),
        ("tests.test_core.TestStack", "test_pop[a.b]"),
        ("tests.test_core", "test_core"),
    ]
    body = "".join(f'<testcase classname="{c}" name="{n}"><failure/></testcase>' for c, n in cases)
    junit.write_text(f"<testsuites><testsuite>{body}</testsuite></testsuites>")
    kept = [(c.classname, c.name) for c in read_cases(junit) or []]
    assert kept == [cases[0], cases[4], cases[5], cases[6], cases[7]], "a name without a dot is a test's"


def test_options_are_appended_to_pytest_addopts() -> None:
    assert with_addopts({"HOME": "/h"}, "--doctest-modules") == {"HOME": "/h", "PYTEST_ADDOPTS": "--doctest-modules"}
    merged = with_addopts({"PYTEST_ADDOPTS": "--doctest-modules"}, "-o addopts=")
    assert merged["PYTEST_ADDOPTS"] == "--doctest-modules -o addopts="


PUSH_TEST = """from stack import Stack


class Helper:
    \"\"\"Prose, not a test:

    >>> Stack().pop()
    99
    \"\"\"


def test_push():
    s = Stack()
    s.push(1)
    assert s.items == [1]
"""
WITH_TESTS = {**STACK_FILES, "tests/test_core.py": PUSH_TEST}


@pytest.mark.parametrize(
    ("files", "switch", "on"),
    [
        (STACK_FILES, "doctest_fallback", False),
        (STACK_FILES, "doctest_fallback", True),
        (WITH_TESTS, "doctest_always", False),
        (WITH_TESTS, "doctest_always", True),
    ],
)
def test_the_examples_reject_a_line_fix_that_the_issue_and_the_test_files_accept(
    scripted: Start, tmp_path: Path, files: dict[str, str | bytes], switch: str, on: bool
) -> None:
    repo = make_repo(tmp_path / "stack", files)
    server = scripted([REPEAT_FIRST, REPEAT_SECOND, WRONG_RETURN, RIGHT_SAMPLE])
    out = tmp_path / "run"
    switches = replace(switch_defaults(), failing_existing=True)
    options = {"samples": 1, "one_shot": True, "line_repair": True, "line_untested": True, "switches": switches}
    attempt = agentless(repo, ISSUE, server.base_url, out, **{switch: on}, **options)
    baseline = stage_events(out, "regression_baseline")[0]
    screened = [e["decision"] for e in stage_events(out, "line_repair")]
    test_files = [name for name in files if name.startswith("tests/")]
    assert attempt.exit_status == "validated"
    if not on:
        assert baseline["files"] == test_files and "doctests" not in baseline
        assert screened[-1].startswith("1 of 1 mutants pass"), "the issue and the test files cannot tell"
        assert "+        return self.items[-1]\n" in attempt.patch, "a wrong fix, validated"
        assert len(server.requests) == 3, "decisive: no sample"
        return
    assert baseline["files"] == [*test_files, "stack/core.py"] and baseline["doctests"] == ["stack/core.py"]
    assert baseline["passed"] == 3 + len(test_files) and baseline["failed"] == 2
    failing = stage_events(out, "failing_tests")[0]["tests"]
    assert failing == ["stack/core.py::stack.core.Stack", "stack/core.py::stack.core.Stack.pop"]
    assert screened[-1].startswith("0 of 1 mutants pass"), "the class's example still fails"
    assert "+        return self.items.pop()\n" in attempt.patch and len(server.requests) == 4
