"""Docstrings shown apart from the code a weak model rewrites (agentless/docstrings.py): the rendering, and a real
one-shot run with the scripted model whose answer leaves the docstring out and keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from snaffle.agentless.docstrings import docstring_apart
from tests.helpers import CALC_ISSUE, Start, repo_tests_pass
from tests.test_feedback import RIGHT
from tests.test_pipeline import agentless, stages

METHOD = '''    @cached
    def area(self, scale=1,
             exact=False):
        """Return the area.

        >>> Square(2).area()
        4
        """
        return self.side ** 2 * scale
'''.splitlines()


def test_a_methods_docstring_goes_above_its_decorators_and_the_code_keeps_the_rest() -> None:
    shown = docstring_apart(METHOD)
    assert shown[:5] == ["# | Return the area.", "# |", "# | >>> Square(2).area()", "# | 4", "    @cached"]
    assert shown[5:] == [METHOD[1], METHOD[2], "        return self.side ** 2 * scale"]


@pytest.mark.parametrize(
    "source",
    [
        'def f(x):\n    """Only a docstring."""\n',  # the whole body: without it, no definition
        'def f(x): "doc"; return x\n',  # shares its line with the header
        'def f(x):\n    "doc"; return x\n',  # shares its line with code
        "def f(x):\n    return x\n",  # none
        'def f(x:\n    """broken',  # does not parse alone
        'X = 1\n"""a module string"""\n',  # not a definition
    ],
)
def test_what_cannot_move_stays_as_it_is(source: str) -> None:
    assert docstring_apart(source.splitlines()) == source.splitlines()


def test_a_class_moves_its_own_docstring_only() -> None:
    source = 'class A:\n    """The class."""\n\n    def m(self):\n        """The method."""\n        return 1\n'
    shown = docstring_apart(source.splitlines())
    assert shown[0] == "# | The class." and '        """The method."""' in shown and "The class." not in shown[1:]


def test_a_rewrite_is_shown_without_the_docstring_and_keeps_it(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    server = scripted([{"content": RIGHT}])
    out = tmp_path / "run"
    options = {"one_shot": True, "samples": 1, "top_k": 1, "reproduce": False, "edit_format": "rewrite"}
    attempt = agentless(calc_repo, CALC_ISSUE, server.base_url, out, **options, docstrings_apart=True)
    assert attempt.exit_status == "validated" and repo_tests_pass(calc_repo), stages(out)
    prompt = server.requests[0].body["messages"][0]["content"]
    assert "# | Return the sum of a and b.\ndef add(a, b):\n    return a - b" in prompt
    assert '"""Return the sum' not in prompt
    assert '    """Return the sum of a and b."""\n' in (calc_repo / "calc" / "__init__.py").read_text()


def test_a_search_replace_answer_sees_the_lines_as_the_file_has_them(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    answer = "calc/__init__.py::add\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE"
    server = scripted([{"content": answer}])
    out = tmp_path / "run"
    options = {"one_shot": True, "samples": 1, "top_k": 1, "reproduce": False, "edit_format": "search_replace"}
    attempt = agentless(calc_repo, CALC_ISSUE, server.base_url, out, **options, docstrings_apart=True)
    assert attempt.exit_status == "validated", stages(out)
    assert '    """Return the sum of a and b."""\n    return a - b' in server.requests[0].body["messages"][0]["content"]
