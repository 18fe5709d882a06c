"""Snippet extraction from issue texts: each form, the output the user saw, and expectations kept only when sure."""

from __future__ import annotations

import pytest

from snaffle.agentless.snippets import Reading, Statement, extract

SESSION_ISSUE = """Assigning to a frozen key fails:

    >>> from shelf import Shelf
    >>> s = Shelf()
    >>> for key in ("a",
    ...             "b"):
    ...     s[key] = 1
    >>> s["a"]
    1
    >>> s["frozen"] = 2
    Traceback (most recent call last):
      ...
    ValueError: frozen

Odd.
"""


def test_a_session_gives_statements_continuations_and_the_output_shown() -> None:
    (snippet,) = extract(SESSION_ISSUE).snippets
    assert snippet.kind == "session"
    assert [s.source for s in snippet.statements] == [
        "from shelf import Shelf",
        "s = Shelf()",
        'for key in ("a",\n            "b"):\n    s[key] = 1',
        's["a"]',
        's["frozen"] = 2',
    ]
    assert snippet.statements[3] == Statement('s["a"]', "1")
    assert snippet.statements[4].shown.splitlines()[-1] == "ValueError: frozen"
    assert snippet.expression_lines() == [3]  # the traceback line prints no value


def test_fenced_scripts_and_python_c_lines_are_snippets_but_tracebacks_and_other_languages_are_not() -> None:
    issue = (
        "Run this:\n\n```python\nimport calc\nprint(calc.add(2, 3))\n```\n\n"
        'or `python -c "import calc; print(calc.add(1, 1))"` from a shell.\n\n'
        '```\nTraceback (most recent call last):\n  File "x.py", line 1, in <module>\nValueError: no\n```\n\n'
        "```bash\npip install calc\n```\n\n```python\nthis is not python(\n```\n"
    )
    found = extract(issue).snippets
    assert [(s.kind, s.code) for s in found] == [
        ("script", "import calc\nprint(calc.add(2, 3))"),
        ("command", "import calc; print(calc.add(1, 1))"),
    ]


def test_a_session_inside_a_pycon_fence_is_one_session() -> None:
    issue = "```pycon\n>>> from calc import add\n>>> add(2, 3)\n-1\n```\n"
    (snippet,) = extract(issue).snippets
    assert (snippet.kind, [s.shown for s in snippet.statements]) == ("session", ["", "-1"])


def test_an_explicit_expectation_is_kept_on_the_line_it_names() -> None:
    issue = ">>> from calc import add\n>>> add(2, 3)\n-1\n>>> add(1, 1)\n0\n\nI expected `add(2, 3)` to return `5`.\n"
    extracted = extract(issue)
    (snippet,) = extracted.snippets
    assert [(e.statement, e.expected) for e in snippet.expectations] == [(1, "5")]
    assert extracted.ambiguous == ()


def test_an_implicit_expectation_is_kept_when_one_line_shows_a_value() -> None:
    issue = ">>> from calc import add\n>>> add(2, 3)\n-1\n\nIt should return `5`.\n"
    (snippet,) = extract(issue).snippets
    assert [(e.statement, e.expected) for e in snippet.expectations] == [(1, "5")]


@pytest.mark.parametrize(
    ("issue", "why"),
    [
        (">>> from calc import add\n>>> add(2, 3)\n-1\n>>> add(1, 1)\n0\n\nI expected `5`.\n", "two value lines"),
        (">>> from calc import add\n>>> add(2, 3)\n-1\n\nI expected `add(4, 4)` to be `8`.\n", "a line not shown"),
        (">>> from calc import add\n>>> add(2, 3)\n-1\n\nIt should return `five`... or `5`, expected `5`\n", "two"),
    ],
)
def test_an_ambiguous_expectation_is_left_out(issue: str, why: str) -> None:
    extracted = extract(issue)
    assert all(not s.expectations for s in extracted.snippets), why
    assert extracted.ambiguous, why


def test_the_same_snippet_twice_is_run_once_and_prose_alone_gives_none() -> None:
    block = "```python\nimport calc\ncalc.add(1, 2)\n```\n"
    assert len(extract(block + "again:\n" + block).snippets) == 1
    assert extract("add(2, 3) returns -1 instead of 5. The add function seems to subtract.").snippets == ()


def test_windows_line_ends_are_read_as_line_ends() -> None:
    (snippet,) = extract(">>> from calc import add\r\n>>> add(2, 3)\r\n-1\r\n").snippets
    assert [(s.source, s.shown) for s in snippet.statements] == [("from calc import add", ""), ("add(2, 3)", "-1")]


TWO_LINES = ">>> from calc import name\n>>> name('a-b')\n'a-b'\n>>> name('X-Y')\n'x-y'\n\n"


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("Expected 'a_b' and 'x_y'.", ["'a_b'", "'x_y'"]),
        ("I expected 'a_b', and 'x_y' (dashes become underscores).", ["'a_b'", "'x_y'"]),
        ("They should be `'a_b'`, `'x_y'`", ["'a_b'", "'x_y'"]),
        ("Expected: 'a_b' and 'x_y' -- as documented.", ["'a_b'", "'x_y'"]),
    ],
)
def test_stated_values_map_in_order_onto_as_many_session_lines(said: str, expected: list[str]) -> None:
    extracted = extract(TWO_LINES + said + "\n", Reading(ordered=True))
    (snippet,) = extracted.snippets
    assert [(e.statement, e.expected) for e in snippet.expectations] == list(zip([1, 2], expected, strict=True))
    assert extracted.ambiguous == ()
    assert extract(TWO_LINES + said + "\n").snippets[0].expectations == ()  # not without the switch


@pytest.mark.parametrize(
    ("issue", "why"),
    [
        (">>> from calc import add\n>>> add(2, 3)\n-1\n\nExpected: 5\n", "one value, one line"),
        (">>> from calc import add\n>>> add(2, 3)\n-1\n\nThis should be 5.\n", "should be"),
        (">>> from calc import tail\n>>> tail(2, [1, 2, 3])\n[2, 3]\n\nExpected [3].\n", "a list"),
        (">>> from calc import ok\n>>> ok(1)\nFalse\n\nso I expected True (as documented).\n", "a constant"),
    ],
)
def test_one_stated_value_maps_onto_the_one_session_line(issue: str, why: str) -> None:
    (snippet,) = extract(issue, Reading(ordered=True)).snippets
    assert [e.statement for e in snippet.expectations] == [1], why


@pytest.mark.parametrize(
    ("issue", "why"),
    [
        (TWO_LINES + "Expected 'a_b'.\n", "one value for two lines"),
        (TWO_LINES + "Expected 'a_b', 'x_y' and 'z'.\n", "three values for two lines"),
        (TWO_LINES + "Expected 'a_b' and 'x_y'. It should be 'q' and 'r'.\n", "values stated twice"),
        (TWO_LINES + "Expected 'a-b' and 'x_y'.\n", "the first value is what the user saw"),
        (TWO_LINES + "Expected 1 and 2.\n", "numbers where strings were shown"),
        (TWO_LINES + "Expected 'a_b' and 'x_y' both times.\n", "a word follows"),
        (
            ">>> from calc import ordinal\n>>> ordinal(42)\n'42nd'\n>>> ordinal(1)\n"
            "Traceback (most recent call last):\nIndexError: string index out of range\n\nExpected '1st'.\n",
            "the session also raises: the value may be the raising line's",
        ),
    ],
)
def test_stated_values_that_do_not_map_surely_are_left_out(issue: str, why: str) -> None:
    extracted = extract(issue, Reading(ordered=True))
    assert all(not s.expectations for s in extracted.snippets), why
    assert extracted.ambiguous, why


def test_prose_that_names_no_value_is_no_statement_of_values() -> None:
    issue = TWO_LINES + "I expected a ValueError here, as expected by the docs.\n"
    extracted = extract(issue, Reading(ordered=True))
    assert (extracted.snippets[0].expectations, extracted.ambiguous) == ((), ())


INDENTED_ISSUE = """get_in crashes:

    from calc import get_in
    order = {"items": [1]}

    get_in(["items", 10], order)

    Traceback (most recent call last):
      File "example.py", line 3, in <module>
    IndexError: list index out of range

Expected None. Note that
    this indented line continues the sentence, and so does
    get_in(this)

    Also
"""


def test_an_indented_code_block_is_a_script_cut_before_its_traceback_when_switched_on() -> None:
    assert extract(INDENTED_ISSUE).snippets == ()
    (snippet,) = extract(INDENTED_ISSUE, Reading(indented=True)).snippets
    assert (snippet.kind, snippet.code) == (
        "script",
        'from calc import get_in\norder = {"items": [1]}\n\nget_in(["items", 10], order)',
    )


def test_indented_sessions_and_fenced_blocks_are_not_read_twice_as_indented_scripts() -> None:
    issue = SESSION_ISSUE + "\n```text\n\n    import calc\n    calc.add(1, 2)\n```\n"
    assert [s.kind for s in extract(issue, Reading(indented=True)).snippets] == [
        "session"
    ]  # a fence's text is the fence's


MIXED = ">>> from bag import Bag\n>>> b = Bag([1, 2, 2])\n>>> b.count(2)\n0\n>>> 2 in b\nTrue\n\n"


@pytest.mark.parametrize(
    ("issue", "line", "why"),
    [
        (MIXED + "Expected 2.\n", 2, "a number: only count(2) was shown a number"),
        (MIXED + "Expected False.\n", 3, "a bool: only `2 in b` was shown one"),
        (MIXED[:-1] + ">>> sorted(b)\n[1, 2]\n\nI expected [1, 2, 2].\n", 4, "a list among a number and a bool"),
    ],
)
def test_by_kind_one_value_maps_onto_the_only_line_shown_its_kind(issue: str, line: int, why: str) -> None:
    extracted = extract(issue, Reading(ordered=True, by_kind=True))
    (snippet,) = extracted.snippets
    assert [e.statement for e in snippet.expectations] == [line], why
    assert extracted.ambiguous == (), why
    assert extract(issue, Reading(ordered=True)).snippets[0].expectations == (), "not without the switch"


@pytest.mark.parametrize(
    ("issue", "why"),
    [
        (TWO_LINES + "Expected 'a_b'.\n", "two lines were shown strings"),
        (MIXED + "Expected 'two'.\n", "no line was shown a string"),
        (MIXED + "Expected True.\n", "the only bool line already shows it"),
        (MIXED + "Expected 2, False and 3.\n", "three values for two lines"),
        (MIXED + "Expected 2 once the bag is fixed.\n", "a word follows: a statement, not a value"),
        (
            MIXED[:-1] + ">>> b.total()\nTraceback (most recent call last):\nValueError: empty\n\nExpected 3.\n",
            "the session raises: the value may be the raising line's",
        ),
    ],
)
def test_by_kind_leaves_out_what_does_not_single_out_one_line(issue: str, why: str) -> None:
    extracted = extract(issue, Reading(ordered=True, by_kind=True))
    assert all(not s.expectations for s in extracted.snippets), why
    assert extracted.ambiguous, why


RAISES = (
    ">>> from calc import ordinal\n>>> ordinal(42)\n'42nd'\n>>> ordinal(1)\n"
    "Traceback (most recent call last):\nIndexError: string index out of range\n\n"
)


@pytest.mark.parametrize(
    ("issue", "line", "expected"),
    [
        (RAISES + "Expected '1st'.\n", 2, "'1st'"),
        (RAISES + "Expected '1st' (and '3rd', '7th' ...). Longer numbers work.\n", 2, "'1st'"),
        (
            ">>> import calc\n>>> calc.mean([])\nTraceback (most recent call last):\nZeroDivisionError\n\n"
            "It should return 0.\n",
            1,
            "0",
        ),
    ],
)
def test_raised_one_literal_maps_onto_the_line_the_session_stopped_at(issue: str, line: int, expected: str) -> None:
    extracted = extract(issue, Reading(ordered=True, raised=True))
    (snippet,) = extracted.snippets
    assert [(e.statement, e.expected) for e in snippet.expectations] == [(line, expected)]
    assert extracted.ambiguous == ()
    assert extract(issue, Reading(ordered=True)).snippets[0].expectations == (), "not without the switch"


@pytest.mark.parametrize(
    ("issue", "why"),
    [
        (RAISES + "Expected `IndexError` to be a ValueError.\n", "a word follows the value"),
        (RAISES + "Expected `ValueError`.\n", "a name, not a literal: not the raising line's value"),
        (RAISES + "Expected '1st' and '2nd'.\n", "two values for one raising line"),
        (RAISES + ">>> ordinal(2)\n'2nd'\n\nExpected '1st'.\n", "a session line follows the one that raised"),
        (
            RAISES + "and\n\n>>> from calc import ordinal\n>>> ordinal(3)\n"
            "Traceback (most recent call last):\nIndexError: string index out of range\n\nExpected '1st'.\n",
            "two sessions raise: which one the value is for is a guess",
        ),
    ],
)
def test_raised_leaves_out_what_does_not_single_out_the_raising_line(issue: str, why: str) -> None:
    extracted = extract(issue, Reading(ordered=True, raised=True))
    assert all(not s.expectations for s in extracted.snippets), why
    assert extracted.ambiguous, why
