"""What the candidates' calls did when the issue's snippet ran (agentless/calls.py), in the real sandbox: values
returned, yielded and raised, hostile values cut, and the repair prompt showing it when the switch is on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from snaffle.agentless import calls, facts
from snaffle.agentless.config import PipelineConfig, switch_defaults
from snaffle.index.repo import RepoIndex
from snaffle.model.client import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.sandbox import Sandbox
from snaffle.testing import ScriptedServer
from snaffle.types import Limits, Task
from tests.helpers import Start, make_repo, stage_events
from tests.test_facts import FAST, RAISING_ISSUE, SHELF_FILES, WRONG_VALUE_ISSUE
from tests.test_facts_pipeline import DONE, FIX, edit

WATCHED = ("Shelf.__setitem__", "Shelf.total", "Shelf.keys", "describe", "Shelf")


def traced(repo: Path, issue: str, sandbox: Sandbox, qualnames: tuple[str, ...] = WATCHED) -> calls.CallFacts:
    found = facts.gather(issue, repo, sandbox, FAST)
    index = RepoIndex(repo)
    return calls.trace(found, [index.resolve(f"shelf/core.py::{q}") for q in qualnames], repo, sandbox, FAST)


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox.create(tmp_path / "sandbox")


def test_each_candidates_calls_say_what_they_returned(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = make_repo(tmp_path / "shelf", SHELF_FILES)
    found = traced(repo, WRONG_VALUE_ISSUE, sandbox)
    assert found.lines == {
        "shelf/core.py::Shelf.__setitem__": ("Shelf.__setitem__(key='a', value=2) returned None",),
        "shelf/core.py::Shelf.total": ("Shelf.total() returned 3",),
    }  # keys and describe never ran; a class is not watched


def test_the_exception_that_left_a_call_is_said_and_one_handled_inside_is_not(tmp_path: Path, sandbox: Sandbox) -> None:
    source = SHELF_FILES["shelf/core.py"]
    assert isinstance(source, str)
    handled = source.replace(
        "    def keys(self):\n        return sorted(self.slots)",
        "    def keys(self):\n        try:\n            int('x')\n        except ValueError:\n            pass\n"
        "        return sorted(self.slots)",
    )
    repo = make_repo(tmp_path / "shelf", {**SHELF_FILES, "shelf/core.py": handled})
    issue = RAISING_ISSUE.replace('    >>> s["fish"] = 1', '    >>> s.keys()\n    []\n    >>> s["fish"] = 1')
    found = traced(repo, issue, sandbox)
    assert found.lines["shelf/core.py::Shelf.__setitem__"] == (
        "Shelf.__setitem__(key='fish', value=1) raised ValueError: slot 'fish' is frozen",
    )
    assert found.lines["shelf/core.py::Shelf.keys"] == ("Shelf.keys() returned []",)


def test_an_exception_that_passes_an_except_of_another_type_or_a_finally_is_said(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    files: dict[str, str | bytes] = {
        "suffix/__init__.py": (
            "def second_last(text):\n    try:\n        return text[-2]\n    except KeyError:\n        return ''\n\n\n"
            "def suffix(text):\n    try:\n        return second_last(text) + 'x'\n    finally:\n        text = None\n"
        ),
    }
    repo = make_repo(tmp_path / "suffix", files)
    issue = (
        "suffix fails on one letter\n\n    >>> from suffix import suffix\n    >>> suffix('a')\n"
        "    Traceback (most recent call last):\n      ...\n    IndexError: string index out of range\n"
    )
    found = facts.gather(issue, repo, sandbox, FAST)
    assert found.reproducing
    index = RepoIndex(repo)
    entities = [index.resolve(f"suffix/__init__.py::{q}") for q in ("second_last", "suffix")]
    lines = calls.trace(found, entities, repo, sandbox, FAST).lines
    assert lines == {
        "suffix/__init__.py::second_last": ("second_last(text='a') raised IndexError: string index out of range",),
        "suffix/__init__.py::suffix": ("suffix(text='a') raised IndexError: string index out of range",),
    }  # the except clause's line and the finally's run between the raise and the frame's end


SHOUT_FILES: dict[str, str | bytes] = {
    "shout/__init__.py": (
        "def shout(word):\n    return _joined(word.split('-')).upper()\n\n\n"
        "def _joined(parts):\n    return '-'.join(parts)\n\n\n"
        "def loud(word):\n    return _same(word)\n\n\n"
        "def _same(word):\n    return word\n"
    ),
}
SHOUT_ISSUE = """shout keeps the dash and loud is quiet

    >>> from shout import shout, loud
    >>> shout('a-b')
    'A-B'
    >>> loud('x')
    'x'

Expected 'A_B' and 'X'.
"""


@pytest.mark.parametrize("expected", [True, False])
def test_the_call_whose_value_a_line_showed_says_what_the_issue_expected(
    tmp_path: Path, sandbox: Sandbox, expected: bool
) -> None:
    repo = make_repo(tmp_path / "shout", SHOUT_FILES)
    reading = replace(FAST, ordered_expectations=True)
    found = facts.gather(SHOUT_ISSUE, repo, sandbox, reading)
    assert found.reproducing
    index = RepoIndex(repo)
    entities = [index.resolve(f"shout/__init__.py::{q}") for q in ("shout", "_joined", "loud", "_same")]
    lines = calls.trace(found, entities, repo, sandbox, reading, expected=expected).lines
    told = ", the issue expects 'A_B'" if expected else ""
    assert lines["shout/__init__.py::shout"] == (f"shout(word='a-b') returned 'A-B'{told}",)
    assert lines["shout/__init__.py::_joined"] == ("_joined(parts=['a', 'b']) returned 'a-b'",)  # not the line's value
    told = ", the issue expects 'X'" if expected else ""
    assert lines["shout/__init__.py::loud"] == (f"loud(word='x') returned 'x'{told}",)
    assert lines["shout/__init__.py::_same"] == ("_same(word='x') returned 'x'",)  # the same object, but called inside


GENERATOR_FILES: dict[str, str | bytes] = {
    "tally/__init__.py": (
        "def evens(limit):\n    for n in range(limit):\n        if n % 2 == 1:\n            yield n\n\n\n"
        "def loud(items):\n    return [Loud(i) for i in items]\n\n\n"
        "class Loud:\n    def __init__(self, i):\n        self.i = i\n\n    def __repr__(self):\n"
        "        return '{{call}}' + 'L' * 10_000\n\n\n"
        "def count(things):\n    return len(things) + 1\n"
    ),
}
GENERATOR_ISSUE = """evens gives odd numbers

    >>> from tally import evens, loud, count
    >>> list(evens(7))
    [1, 3, 5]
    >>> count(loud([1, 2]))
    3

I expected `[0, 2, 4, 6]` and `2`.
"""


def test_a_generator_says_what_it_yielded_and_a_huge_value_is_cut(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = make_repo(tmp_path / "tally", GENERATOR_FILES)
    found = facts.gather(GENERATOR_ISSUE, repo, sandbox, replace(FAST, ordered_expectations=True))
    assert found.reproducing
    index = RepoIndex(repo)
    entities = [index.resolve(f"tally/__init__.py::{q}") for q in ("evens", "count", "loud")]
    lines = calls.trace(found, entities, repo, sandbox, FAST).lines
    assert lines["tally/__init__.py::evens"] == ("evens(limit=7) yielded 1, 3, 5",)
    (counted,) = lines["tally/__init__.py::count"]
    assert counted.startswith("count(things=[{{call}}LLLL") and counted.endswith("...) returned 3")
    assert len(counted) < 120
    shown = calls.comment_lines(lines["tally/__init__.py::loud"])
    assert shown[0].startswith("# When the issue's example ran: loud(items=[1, 2]) returned [{{call}}LL")  # kept


def test_a_call_that_never_ends_is_stopped_by_the_snippet_timeout(tmp_path: Path, sandbox: Sandbox) -> None:
    files: dict[str, str | bytes] = {"spin/__init__.py": "def spin(n):\n    while True:\n        n += 1\n"}
    repo = make_repo(tmp_path / "spin", files)
    issue = "spin never returns\n\n    >>> from spin import spin\n    >>> spin(1)\n    2\n\nI expected `2`.\n"
    quick = replace(FAST, timeout_s=2.0)
    found = facts.gather(issue, repo, sandbox, quick)
    found = replace(found, runs=tuple(replace(r, reason=r.reason or "stopped") for r in found.runs))
    index = RepoIndex(repo)
    traced_calls = calls.trace(found, [index.resolve("spin/__init__.py::spin")], repo, sandbox, quick)
    assert traced_calls.lines == {"spin/__init__.py::spin": ("spin(n=1) did not return",)}


def first_prompt(server: ScriptedServer, repo: Path, issue: str, out: Path, **switched: bool) -> str:
    """Run the agentless arm (one sample) with `switched` [mechanisms] set; it must end `validated`. The first
    request's messages, joined."""
    switches = replace(switch_defaults(), failing_existing=False, **switched)
    pipeline = PipelineConfig(
        samples=1, switches=switches, reproduce=False, extra_samples=False, line_repair=False, mutation=False
    )
    model = ModelConfig(server.base_url, "scripted")
    config = SolveConfig("agentless", model, Limits(max_turns=40), out, zero_pricer, pipeline=pipeline)
    assert solve(Task(repo=repo, issue=issue), config).exit_status == "validated"
    return "\n".join(m["content"] or "" for m in server.requests[0].body["messages"])


def test_the_repair_prompt_shows_the_calls_only_with_the_switch(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shelf", SHELF_FILES)
    told = "# When the issue's example ran: Shelf.__setitem__(key='fish', value=1) raised ValueError: slot 'fish' is"
    for on in (True, False):
        right = edit("shelf/core.py::Shelf.__setitem__", FIX, "")
        server = scripted([{**right, "expect_contains": told} if on else right, DONE])
        out = tmp_path / f"run-{on}"
        assert (told in first_prompt(server, repo, RAISING_ISSUE, out, call_trace=on)) is on
        staged = stage_events(out, "call_trace")
        assert [s["decision"] for s in staged] == (["1 calls of 1 candidates"] if on else [])


def test_the_repair_prompt_says_the_expected_value_only_with_its_switch(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shelf", SHELF_FILES)
    told = "# When the issue's example ran: Shelf.total() returned 3, the issue expects 2"
    fixed = edit("shelf/core.py::Shelf.total", "return sum(self.slots.values()) + 1", "return sum(self.slots.values())")
    for on in (True, False):
        server = scripted([{**fixed, "expect_contains": told} if on else fixed, DONE])
        sent = first_prompt(server, repo, WRONG_VALUE_ISSUE, tmp_path / f"run-{on}", call_trace=True, call_expected=on)
        assert (told in sent) is on
        assert "# When the issue's example ran: Shelf.total() returned 3" in sent


HOSTILE_FILES: dict[str, str | bytes] = {
    "odd/__init__.py": (
        "import time\n\n\nclass Broken:\n    def __repr__(self):\n        raise RuntimeError('no')\n\n\n"
        "class Stuck:\n    def __repr__(self):\n        time.sleep(3600)\n\n\n"
        "def first(x):\n    return 1\n\n\ndef second(x):\n    return 2\n"
    ),
}
HOSTILE_ISSUE = """first is wrong

    >>> from odd import first, second, Broken, Stuck
    >>> first(Broken())
    1
    >>> second(Stuck())
    2

I expected `0` and `0`.
"""


def test_a_value_whose_repr_fails_or_hangs_costs_the_run_nothing(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = make_repo(tmp_path / "odd", HOSTILE_FILES)
    quick = replace(FAST, timeout_s=3.0, ordered_expectations=True)
    found = facts.gather(HOSTILE_ISSUE, repo, sandbox, quick)
    assert found.reproducing
    index = RepoIndex(repo)
    entities = [index.resolve(f"odd/__init__.py::{q}") for q in ("first", "second")]
    lines = calls.trace(found, entities, repo, sandbox, quick).lines
    assert lines == {"odd/__init__.py::first": ("first(x=<repr failed: RuntimeError>) returned 1",)}


def test_a_memory_address_is_left_out_so_the_prompt_is_the_same_run_to_run(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = make_repo(tmp_path / "apply", {"apply/__init__.py": "def apply(f, x):\n    return f(x) + 1\n"})
    issue = (
        "apply adds one\n\n    >>> from apply import apply\n    >>> apply(lambda v: v, 1)\n    2\n\nI expected `1`.\n"
    )
    found = facts.gather(issue, repo, sandbox, FAST)
    assert found.reproducing
    entity = RepoIndex(repo).resolve("apply/__init__.py::apply")
    lines = calls.trace(found, [entity], repo, sandbox, FAST).lines
    assert lines == {"apply/__init__.py::apply": ("apply(f=<function <lambda>>, x=1) returned 2",)}
