"""Docstring examples as the related tests of a repository that ships no test file (`doctest_fallback`): found in
the located source files, run by every pytest run of the run (PYTEST_ADDOPTS), and screening line repair's answers
as related tests do; the scripted model, the real sandbox and pytest."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from snaffle.agentless.config import switch_defaults
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


def test_options_are_appended_to_pytest_addopts() -> None:
    assert with_addopts({"HOME": "/h"}, "--doctest-modules") == {"HOME": "/h", "PYTEST_ADDOPTS": "--doctest-modules"}
    merged = with_addopts({"PYTEST_ADDOPTS": "--doctest-modules"}, "-o addopts=")
    assert merged["PYTEST_ADDOPTS"] == "--doctest-modules -o addopts="


@pytest.mark.parametrize("doctests", [False, True])
def test_the_examples_of_a_repository_without_tests_reject_a_line_fix_the_issue_alone_accepts(
    scripted: Start, tmp_path: Path, doctests: bool
) -> None:
    repo = make_repo(tmp_path / "stack", STACK_FILES)
    server = scripted([REPEAT_FIRST, REPEAT_SECOND, WRONG_RETURN, RIGHT_SAMPLE])
    out = tmp_path / "run"
    switches = replace(switch_defaults(), failing_existing=True)
    options = {"samples": 1, "one_shot": True, "line_repair": True, "line_untested": True, "switches": switches}
    attempt = agentless(repo, ISSUE, server.base_url, out, doctest_fallback=doctests, **options)
    baseline = stage_events(out, "regression_baseline")[0]
    screened = [e["decision"] for e in stage_events(out, "line_repair")]
    assert attempt.exit_status == "validated"
    if not doctests:
        assert baseline["files"] == [] and "doctests" not in baseline
        assert screened[-1].startswith("1 of 1 mutants pass"), "the issue alone cannot tell"
        assert "+        return self.items[-1]\n" in attempt.patch, "a wrong fix, validated"
        assert len(server.requests) == 3, "decisive: no sample"
        return
    assert baseline["files"] == ["stack/core.py"] and baseline["doctests"] is True
    assert baseline["passed"] == 3 and baseline["failed"] == 2
    failing = stage_events(out, "failing_tests")[0]["tests"]
    assert failing == ["stack/core.py::stack.core.Stack", "stack/core.py::stack.core.Stack.pop"]
    assert screened[-1].startswith("0 of 1 mutants pass"), "the class's example still fails"
    assert "+        return self.items.pop()\n" in attempt.patch and len(server.requests) == 4
