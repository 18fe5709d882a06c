"""Where a wrong value was born (agentless/origin.py), in the real sandbox: the helper that first returned the wrong
part of a session line's value is localized first, though the issue names only the function around it; a value that
merely contains the same digit, a hanging repr and a flood are no origin, and the run goes on."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from snaffle.agentless import facts, origin
from snaffle.index.repo import RepoIndex
from snaffle.sandbox import Sandbox
from tests.helpers import Start, make_repo, stage_events
from tests.test_facts import FAST
from tests.test_facts_pipeline import DONE, edit, run

VERSION_SOURCE = '''"""Versions with a numbered pre-release."""


def major_of(text):
    return int(text.split(".")[0])


def _increment(label):
    """rc.1 -> rc.2"""
    head, number = label.rsplit(".", 1)
    return head + "." + number + "1"


def bump(text):
    """The next pre-release of `text`."""
    release, label = text.split("-")
    if major_of(release) < 0:
        raise ValueError(text)
    return release + "-" + _increment(label)


def shout(text):
    return text.upper()
'''
VERSION_FILES: dict[str, str | bytes] = {
    "ver/__init__.py": "from ver.core import bump, shout\n",
    "ver/core.py": VERSION_SOURCE,
}
ISSUE = """bump gives garbage

    >>> from ver import bump
    >>> bump("1.2.3-rc.1")
    '1.2.3-rc.11'

I expected `'1.2.3-rc.2'`.
"""
QUICK = replace(FAST, ordered_expectations=True)


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox.create(tmp_path / "sandbox")


def test_the_wrong_part_of_a_value_is_what_differs_from_the_expected_one() -> None:
    assert origin.wrong_parts("1.2.3-rc.11", "1.2.3-rc.2") == [(9, 11)]
    assert origin.wrong_parts("11st", "11th") == [(2, 4)]
    assert origin.wrong_parts("[1, 2]", "[1, 2, 3]") == [(4, 5)]  # a missing part: the character before it
    assert origin.text_of("'rc.11'") == "rc.11" and origin.text_of("[1]") == "[1]" and origin.text_of("<x>") == "<x>"


def test_a_piece_covers_the_wrong_part_only_where_it_overlaps_it_and_a_lone_digit_never() -> None:
    spans = origin.wrong_parts("1.2.3-rc.11", "1.2.3-rc.2")
    assert origin.covers("rc.11", "1.2.3-rc.11", spans)
    assert not origin.covers("1.2.3", "1.2.3-rc.11", spans)  # right part of the value
    assert not origin.covers("1", "1.2.3-rc.11", spans)  # too short to be a piece of a longer value
    assert origin.covers("3", "3", origin.wrong_parts("3", "1"))  # the whole value is no piece


def test_the_helper_that_first_returned_the_wrong_part_is_the_origin(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = make_repo(tmp_path / "ver", VERSION_FILES)
    found = facts.gather(ISSUE, repo, sandbox, QUICK)
    assert [r.reason for r in found.reproducing] == ["wrong_value"]
    located = origin.origins(found, RepoIndex(repo), repo, sandbox, QUICK)
    # bump only carried the value out; major_of returned 1, no piece of the wrong part
    assert [o.entity.selector for o in located] == ["ver/core.py::_increment"]
    assert located[0].line == "_increment(label='rc.1') returned 'rc.11'"


def test_a_line_that_met_its_expectation_or_raised_has_no_origin(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = make_repo(tmp_path / "ver", VERSION_FILES)
    index = RepoIndex(repo)
    fixed = VERSION_SOURCE.replace('number + "1"', "str(int(number) + 1)")
    right = make_repo(tmp_path / "right", {**VERSION_FILES, "ver/core.py": fixed})
    assert not facts.gather(ISSUE, right, sandbox, QUICK).reproducing
    raising = ISSUE.replace('bump("1.2.3-rc.1")', 'bump("-1.0-rc.1")').replace("'1.2.3-rc.11'", "ValueError: -1.0")
    found = facts.gather(raising, repo, sandbox, QUICK)
    assert found.runs and origin.origins(found, index, repo, sandbox, QUICK) == []


SEMANTIC_SOURCE = """class Ver:
    def __init__(self, major, minor, patch):
        self.major, self.minor, self.patch = major, minor, patch

    def bump_minor(self):
        return Ver(self.major, self.minor + 1, self.patch)

    def __str__(self):
        return f"{self.major}.{self.minor}.{self.patch}"
"""
FORMATTED_ISSUE = """bump_minor keeps the patch

    >>> from ver.semantic import Ver
    >>> str(Ver(1, 2, 3).bump_minor())
    '1.3.3'

I expected `'1.3.0'`.
"""


def test_a_method_that_only_formats_an_object_is_no_origin(tmp_path: Path, sandbox: Sandbox) -> None:
    repo = make_repo(tmp_path / "ver", {**VERSION_FILES, "ver/semantic.py": SEMANTIC_SOURCE})
    found = facts.gather(FORMATTED_ISSUE, repo, sandbox, QUICK)
    assert [r.reason for r in found.reproducing] == ["wrong_value"]
    # __str__ returned '1.3.3', the line's whole value, first; the wrong patch was made where the object was built
    assert origin.origins(found, RepoIndex(repo), repo, sandbox, QUICK) == []


def test_a_hanging_repr_or_a_flood_in_the_watched_run_costs_the_run_nothing(tmp_path: Path, sandbox: Sandbox) -> None:
    hostile = VERSION_SOURCE + (
        "\n\nclass Stuck:\n    def __repr__(self):\n        import time\n        time.sleep(3600)\n\n\n"
        "def stuck():\n    return Stuck()\n\n\ndef flood():\n    print('x' * 10_000_000)\n    return 'flood'\n"
    )
    hostile = hostile.replace('    return release + "-"', '    stuck()\n    flood()\n    return release + "-"')
    repo = make_repo(tmp_path / "ver", {**VERSION_FILES, "ver/core.py": hostile})
    quick = replace(QUICK, timeout_s=4.0)
    found = facts.gather(ISSUE, repo, sandbox, quick)
    assert found.reproducing
    located = origin.origins(found, RepoIndex(repo), repo, sandbox, quick)
    assert [o.entity.selector for o in located][:1] in ([], ["ver/core.py::_increment"])


def test_the_origin_is_the_first_candidate_and_the_greedy_sample_rewrites_it(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ver", VERSION_FILES)
    fix = edit("ver/core.py::_increment", 'number + "1"', "str(int(number) + 1)")
    for on in (True, False):
        server = scripted([fix, DONE, fix, DONE])
        out = tmp_path / f"run-{on}"
        run(repo, ISSUE, server.base_url, out, value_origin=on)
        candidates = stage_events(out, "localize")[0]["candidates"]
        staged = stage_events(out, "value_origin")
        if on:
            assert candidates[0] == "ver/core.py::_increment"
            assert staged[0]["calls"]["ver/core.py::_increment"] == "_increment(label='rc.1') returned 'rc.11'"
        else:
            assert candidates[0] == "ver/core.py::bump" and staged == []


def test_a_run_watching_hundreds_of_busy_functions_finishes_and_finds_the_origin(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """12,000 watched calls: the report is not rewritten at each one (it once took the whole snippet timeout)."""
    functions = "".join(f"def f{i}(x):\n    return x + {i % 2}\n\n\n" for i in range(400))
    run_all = (
        "def run():\n    total = 0\n    for _ in range(30):\n        for i in range(400):\n"
        "            total = globals()[f'f{i}'](total)\n    return str(total) + 'x'\n"
    )
    repo = make_repo(tmp_path / "heavy", {"heavy/__init__.py": functions + run_all})
    issue = "run is wrong\n\n    >>> from heavy import run\n    >>> run()\n    '6000x'\n\nI expected `'6001y'`.\n"
    found = facts.gather(issue, repo, sandbox, QUICK)
    located = origin.origins(found, RepoIndex(repo), repo, sandbox, QUICK)
    assert [o.line for o in located] == ["f399(x=5999) returned 6000"]


def test_a_snippet_that_forges_the_watched_runs_report_cannot_break_the_run(tmp_path: Path, sandbox: Sandbox) -> None:
    """The snippet runs inside the driver's process: in the watched run it silences the driver's report and writes
    its own, naming a function far outside the watch list."""
    repo = make_repo(tmp_path / "ver", VERSION_FILES)
    forged = (
        '[{}, {}, {}, {"value": "\'1.2.3-rc.11\'", "met": false, "calls": '
        '[{"function": 1000000, "args": "", "returned": "\'rc.11\'", "end": 0}, '
        '{"function": -1, "args": "", "returned": "\'rc.11\'", "end": 1}]}]'
    )
    issue = ISSUE.replace(
        "    >>> from ver import bump\n",
        "    >>> from ver import bump\n"
        "    >>> import __main__, json; job = json.load(open('job.json')); forge = bool(job['watch'])\n"
        "    >>> _ = forge and setattr(__main__, 'save', lambda *a: open('report.json', 'w').write(FORGED))\n".replace(
            "FORGED", repr(forged)
        ),
    )
    found = facts.gather(issue, repo, sandbox, QUICK)
    assert [r.reason for r in found.reproducing] == ["wrong_value"]
    assert origin.origins(found, RepoIndex(repo), repo, sandbox, QUICK) == []


def test_the_watched_run_is_bounded_by_the_first_runs_time(tmp_path: Path, sandbox: Sandbox) -> None:
    """A snippet slow only when watched (it reads job.json) is stopped at the bound, not at its own timeout."""
    limits = replace(QUICK, timeout_s=60.0)
    assert origin.watch_limits(limits, 0.2).timeout_s == origin.MIN_TIMEOUT_S
    assert origin.watch_limits(limits, 2.0).timeout_s == 20.0 and origin.watch_limits(limits, 30.0).timeout_s == 60.0
    repo = make_repo(tmp_path / "ver", VERSION_FILES)
    issue = ISSUE.replace(
        "    >>> from ver import bump\n",
        "    >>> from ver import bump\n    >>> import json, time\n"
        "    >>> _ = json.load(open('job.json'))['watch'] and time.sleep(50)\n",
    )
    found = facts.gather(issue, repo, sandbox, limits)
    assert [r.reason for r in found.reproducing] == ["wrong_value"]
    started = time.monotonic()
    assert origin.origins(found, RepoIndex(repo), repo, sandbox, limits) == []
    assert time.monotonic() - started < 30  # 50 s of sleep, a 60 s snippet timeout: the bound stopped it
