"""The within-file naming signals on small repositories built here: a method named with its class (or called on an
object the issue's code built), an entity's own name spelled by the issue's words, a parameter the issue names,
and the class prior that lets a method outrank the class holding it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from snaffle.agentless.issue_text import parse_issue
from snaffle.agentless.localize import ENTITY_SIGNALS, FILE_SIGNALS, Localizer, Scores, Signals, Weights, rank
from snaffle.index.repo import RepoIndex
from tests.helpers import make_repo, packaged_with

TABLE = (
    "class HtmlWriter:\n"
    '    """Writes a table out as HTML."""\n\n'
    "    def write(self, table, formats=None, fill_values=None):\n"
    "        return [self.cell(v) for v in table]\n\n"
    "    def cell(self, value):\n"
    "        return '<td>%s</td>' % value\n\n\n"
    "class CsvWriter:\n"
    "    def write(self, table):\n"
    "        return ','.join(table)\n\n"
    "    def header(self, names):\n"
    "        return ','.join(names)\n"
)
FILES: dict[str, str | bytes] = {
    "tables/__init__.py": "",
    "tables/html.py": TABLE,
    "tables/units.py": "def convert(value, unit):\n    return value\n\n\ndef write_unit(unit):\n    return str(unit)\n",
    "tests/test_html.py": "from tables.html import HtmlWriter\n\n\ndef write(x):\n    return x\n",
}


@pytest.fixture
def localizer(tmp_path: Path) -> Localizer:
    return Localizer(RepoIndex(make_repo(tmp_path / "tables", FILES)))


def selectors(scores: Scores) -> dict[str, float]:
    return {e.selector: v for e, v in scores.items()}


def test_the_issue_code_binds_variables_to_the_callable_that_built_them() -> None:
    facts = parse_issue("```\n>>> w = tables.HtmlWriter(x)\n>>> rows = w.write([1])\ny = 3\n```")
    assert facts.bound == (("w", "HtmlWriter"), ("rows", "write"))  # `write` names no class: it resolves nothing
    assert parse_issue("`w.write()` then").bound == ()


def test_named_member_resolves_a_method_called_on_an_object_the_issue_built(localizer: Localizer) -> None:
    issue = "```\nw = HtmlWriter()\nw.write(rows)\n```\nThe output is wrong."
    assert selectors(localizer.named_member(parse_issue(issue))) == {"tables/html.py::HtmlWriter.write": 1.0}


def test_named_member_pairs_a_method_with_its_class_named_apart(localizer: Localizer) -> None:
    """`write()` beside `HtmlWriter`: HtmlWriter.write, not CsvWriter.write (its class is not named)."""
    found = selectors(localizer.named_member(parse_issue("`HtmlWriter` ignores `formats` in `write()`")))
    assert found == {"tables/html.py::HtmlWriter.write": 1.0}
    both = selectors(localizer.named_member(parse_issue("`HtmlWriter` and `CsvWriter` differ: `write()`")))
    assert both == {
        f"tables/{m}": pytest.approx(2**-0.5) for m in ("html.py::HtmlWriter.write", "html.py::CsvWriter.write")
    }
    assert localizer.named_member(parse_issue("`write()` is broken")) == {}


def test_named_member_takes_a_method_written_with_its_class(localizer: Localizer) -> None:
    """`HtmlWriter.write(...)`: the class is named in the dotted name itself, so CsvWriter.write is not it."""
    found = selectors(localizer.named_member(parse_issue("```\n>>> HtmlWriter.write(t)\n```\nraises")))
    assert found == {"tables/html.py::HtmlWriter.write": 1.0}


def test_named_member_leaves_a_traceback_frames_qualified_name_to_the_traceback(localizer: Localizer) -> None:
    """IPython prints `in HtmlWriter.write(self)`: where the error passed, weighed by the traceback signal's decay."""
    issue = "```\nFile ~/site-packages/tables/html.py:5, in HtmlWriter.write(self, table)\nKeyError: 1\n```"
    facts = parse_issue(issue)
    assert "HtmlWriter.write" in facts.code_identifiers
    assert localizer.named_member(facts) == {}
    assert selectors(localizer.traceback(facts)) == {"tables/html.py::HtmlWriter.write": 1.0}


def test_own_name_scores_the_share_of_a_name_the_issue_spells(localizer: Localizer) -> None:
    facts = parse_issue("The html writer does not write the formats of a table")
    found = selectors(localizer.signals(facts, every=True).entity["own_name"])
    assert found["tables/html.py::HtmlWriter.write"] == 1.0 and found["tables/html.py::CsvWriter.write"] == 1.0
    assert found["tables/html.py::HtmlWriter"] == pytest.approx(2 / 3)  # html, writer of html, writer, htmlwriter
    assert found["tables/units.py::write_unit"] == pytest.approx(1 / 3)
    assert "tables/html.py::HtmlWriter.cell" not in found and not any(s.startswith("tests/") for s in found)


def test_own_name_looks_only_inside_the_files_the_issue_points_at(tmp_path: Path) -> None:
    """Ten files the issue's words fit better than tables/units.py: its `write_unit` is not looked at."""
    crowd = {
        f"tables/html{n}.py": f"def html_table_{n}(writer):\n    return 'html table formats written by write'\n"
        for n in range(10)
    }
    localizer = Localizer(RepoIndex(make_repo(tmp_path / "crowd", {**FILES, **crowd})))
    found = selectors(localizer.signals(parse_issue("html table writer formats: write"), every=True).entity["own_name"])
    assert "tables/html3.py::html_table_3" in found and "tables/units.py::write_unit" not in found


def test_param_name_finds_the_function_taking_the_named_argument(localizer: Localizer) -> None:
    facts = parse_issue("The `formats` argument of the html table writer is ignored, and `fill_values` too")
    found = selectors(localizer.signals(facts, every=True).entity["param_name"])
    assert found == {"tables/html.py::HtmlWriter.write": 0.75}
    assert localizer.signals(parse_issue("the `self` of the html writer"), every=True).entity["param_name"] == {}


def test_the_signals_are_switched_off_at_weight_zero(localizer: Localizer) -> None:
    facts = parse_issue("`HtmlWriter` ignores `formats` in `write()`")
    weights = packaged_with({"named_member": 0.0, "own_name": 0.0})
    off = Localizer(localizer.index, weights).signals(facts).entity
    assert "named_member" not in off and "own_name" not in off


def test_the_class_prior_lets_a_method_outrank_its_class(localizer: Localizer) -> None:
    entities = {e.selector: e for e in localizer.index.all_entities()}
    writer, write = entities["tables/html.py::HtmlWriter"], entities["tables/html.py::HtmlWriter.write"]
    signals = Signals({"bm25": {writer: 1.0, write: 0.8}}, {})
    packaged = Weights.load()
    only = {**dict.fromkeys((*ENTITY_SIGNALS, *FILE_SIGNALS), 0.0), "bm25": 1.0}
    neutral = replace(packaged, weights=only, tuning=replace(packaged.tuning, class_prior=1.0))
    assert [e.selector for e in rank(signals, neutral, 5)[1]] == [writer.selector, write.selector]
    scaled = replace(neutral, tuning=replace(neutral.tuning, class_prior=0.5))
    files, ranked = rank(signals, scaled, 5)
    assert [e.selector for e in ranked] == [write.selector, writer.selector]
    assert ranked[1].score == pytest.approx(0.5 * (1.0 + packaged.tuning.file_to_entity))  # the first file's share
    assert files == rank(signals, neutral, 5)[0]  # the prior ranks entities; the files keep their scores


def test_the_function_prior_scales_functions_and_leaves_methods(localizer: Localizer) -> None:
    entities = {e.selector: e for e in localizer.index.all_entities()}
    convert, write = entities["tables/units.py::convert"], entities["tables/html.py::HtmlWriter.write"]
    signals = Signals({"bm25": {convert: 1.0, write: 0.8}}, {})
    packaged = Weights.load()
    only = {**dict.fromkeys((*ENTITY_SIGNALS, *FILE_SIGNALS), 0.0), "bm25": 1.0}
    tuning = replace(packaged.tuning, class_prior=1.0, function_prior=0.5, file_to_entity=0.0)
    ranked = rank(signals, replace(packaged, weights=only, tuning=tuning), 5)[1]
    assert [(e.selector, e.score) for e in ranked] == [(write.selector, 0.8), (convert.selector, 0.5)]


CLIENT: dict[str, str | bytes] = {
    "net/__init__.py": "",
    "net/client.py": (
        "class Client:\n"
        "    def __init__(self, config):\n"
        "        self.config = config\n\n"
        "    def send(self, request):\n"
        "        for attempt in range(self.config.max_retries):\n"
        "            if request.ok:\n"
        "                raise ValueError(attempt)\n\n"
        "    def close(self):\n"
        "        return None\n"
    ),
    "net/settings.py": "DEFAULTS = {'max_retries': 3}\n\n\ndef describe(value):\n    return str(value)\n",
    "net/crowd.py": "".join(f"def job_{n}(total):\n    return total.time_out\n\n\n" for n in range(31)),
}


def test_uses_finds_the_body_reading_a_name_nothing_defines(tmp_path: Path) -> None:
    """`max_retries` is a setting: no definition bears it, the body that reads it is where it acts."""
    located = Localizer(RepoIndex(make_repo(tmp_path / "net", CLIENT)))
    found = selectors(located.signals(parse_issue("`max_retries` is ignored by the client"), every=True).entity["uses"])
    assert found == {"net/client.py::Client.send": 1.0}  # settings.py spells it in a module constant: no body


def test_uses_reads_a_setting_the_reporter_assigns(tmp_path: Path) -> None:
    """`max_retries = 2` in the reporter's config: the name the repository reads, not a variable of their own."""
    located = Localizer(RepoIndex(make_repo(tmp_path / "net", CLIENT)))
    found = selectors(located.uses(parse_issue("```\nmax_retries = 2\nclient = Client(config)\n```")))
    assert found == {"net/client.py::Client.send": 1.0}


def test_uses_skips_builtins_another_librarys_names_and_a_name_every_body_uses(tmp_path: Path) -> None:
    located = Localizer(RepoIndex(make_repo(tmp_path / "net", CLIENT)))
    assert located.uses(parse_issue("It raises `ValueError` in `send`")) == {}  # Python's name, not the repository's
    assert located.uses(parse_issue("```\nfrom other import max_retries\nmax_retries()\n```")) == {}  # theirs
    assert located.uses(parse_issue("`time_out` is wrong")) == {}  # 31 bodies read it: says nothing
    weak = selectors(located.uses(parse_issue("the max_retries setting is ignored")))  # prose: half of a code span
    assert weak == {"net/client.py::Client.send": 0.5}
