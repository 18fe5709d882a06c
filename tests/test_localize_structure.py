"""Issue 17's structural switches on small repositories built here: a container yields its place to a member that
scores close below it, a handler named for a type the issue uses (`_print_MatAdd`), and the query words read
without an issue template's skeleton. Each is off in the packaged data, and off ranks as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from snaffle.agentless.issue_text import parse_issue, without_template
from snaffle.agentless.localize import (
    ENTITY_SIGNALS,
    FILE_SIGNALS,
    Localizer,
    Scores,
    Signals,
    Weights,
    container_selectors,
    rank,
)
from snaffle.data import DataError, load
from snaffle.index.repo import RepoIndex
from tests.helpers import make_repo, packaged_with

AUTH = (
    "class DigestAuth:\n"
    '    """Digest authentication: the header built from the challenge."""\n\n'
    "    def build_header(self, method, url):\n"
    "        return 'Digest %s %s' % (method, url)\n\n"
    "    def handle_401(self, response):\n"
    "        def retry():\n"
    "            return response\n"
    "        return retry()\n"
)
PRINTER = (
    "class Printer:\n"
    "    def doprint(self, expr):\n"
    "        return getattr(self, '_print_' + type(expr).__name__)(expr)\n\n"
    "    def _print_MatAdd(self, expr):\n"
    "        return ' + '.join(expr.args)\n\n"
    "    def _print_Add(self, expr):\n"
    "        return '+'.join(expr.args)\n\n"
    "    def _eval_is_zero(self):\n"
    "        return False\n\n"
    "    def __eq__(self, other):\n"
    "        return True\n\n\n"
    "def latex(expr):\n"
    "    return Printer().doprint(expr)\n"
)
FILES: dict[str, str | bytes] = {
    "web/__init__.py": "",
    "web/auth.py": AUTH,
    "web/printing.py": PRINTER,
    "web/other.py": "class Other:\n    def _print_MatAdd(self, expr):\n        return str(expr)\n",
    "tests/test_printing.py": "def _print_MatAdd(x):\n    return x\n",
}
TEMPLATED = (
    "Digest header drops the qop\n"
    "**Describe the bug**\n"
    "A clear and concise description of what the bug is.\n"
    "The digest header lacks the `qop` value.\n\n"
    "**To Reproduce**\n"
    "Steps to reproduce the behavior:\n"
    "```\n- Python version: inside code stays\n```\n"
    "![image](https://example.invalid/shot.png) <img width=612 alt='Screen Shot'>\n\n"
    "### Environment info\n"
    "- OS: Linux\n"
    "- Python version: 3.9.0\n"
    "- Sphinx extensions: [e.g. sphinx.ext.autodoc] autodoc\n"
    "- Note: the header is built twice\n"
)


@pytest.fixture
def localizer(tmp_path: Path) -> Localizer:
    return Localizer(RepoIndex(make_repo(tmp_path / "web", FILES)))


def selectors(scores: Scores) -> dict[str, float]:
    return {e.selector: v for e, v in scores.items()}


def only_bm25(member_yield: float) -> Weights:
    weights = {**dict.fromkeys((*ENTITY_SIGNALS, *FILE_SIGNALS), 0.0), "bm25": 1.0}
    return packaged_with(weights, member_yield=member_yield, entity_to_file=0.5, file_to_entity=0.25, top_file_lead=0.0)


def test_a_class_yields_to_its_method_scoring_close_below_it(localizer: Localizer) -> None:
    """requests-1766's shape: the class's text holds its method's, so BM25 ranks the class first."""
    entities = {e.selector: e for e in localizer.index.all_entities()}
    auth, build = entities["web/auth.py::DigestAuth"], entities["web/auth.py::DigestAuth.build_header"]
    latex = entities["web/printing.py::latex"]
    signals = Signals({"bm25": {auth: 1.0, build: 0.8, latex: 0.85}}, {})
    off = [(e.selector, e.score) for e in rank(signals, only_bm25(0.0), 5)[1]]
    assert [s for s, _ in off] == [auth.selector, latex.selector, build.selector]
    ranked = rank(signals, only_bm25(0.25), 5)[1]
    assert [e.selector for e in ranked] == [latex.selector, build.selector, auth.selector]
    assert ranked[1].score > ranked[2].score == pytest.approx(ranked[1].score)  # just below its member
    far = rank(Signals({"bm25": {auth: 1.0, build: 0.5}}, {}), only_bm25(0.25), 5)[1]
    assert [e.selector for e in far] == [auth.selector, build.selector]  # a member far below: no yield


def test_a_method_yields_to_its_nested_function_and_selectors_name_their_containers(localizer: Localizer) -> None:
    entities = {e.selector: e for e in localizer.index.all_entities()}
    handle, retry = entities["web/auth.py::DigestAuth.handle_401"], entities["web/auth.py::DigestAuth.handle_401.retry"]
    assert container_selectors(retry.selector) == ["web/auth.py::DigestAuth", handle.selector]
    assert container_selectors("web/x.py::f@2") == [] and container_selectors("web/x.py::A.f@2") == ["web/x.py::A"]
    ranked = rank(Signals({"bm25": {handle: 1.0, retry: 0.9}}, {}), only_bm25(0.5), 5)[1]
    assert [e.selector for e in ranked] == [retry.selector, handle.selector]


def test_the_dispatch_signal_finds_the_handler_of_a_type_the_issue_uses(localizer: Localizer) -> None:
    facts = parse_issue("```\n>>> latex(MatAdd(A, B))\n```\nand `is_zero` is wrong")
    found = selectors(localizer.signals(facts, every=True).entity["dispatch"])
    shared = pytest.approx(1 / 1.584962500721156)  # two handlers of MatAdd: 1/log2(3)
    assert found == {
        "web/printing.py::Printer._print_MatAdd": shared,
        "web/other.py::Other._print_MatAdd": shared,
        "web/printing.py::Printer._eval_is_zero": 1.0,
    }  # not _print_Add (another type), not a test file's function, not `__eq__`
    again = localizer.signals(parse_issue("`Add` and `Ma`"), every=True).entity["dispatch"]
    assert selectors(again) == {"web/printing.py::Printer._print_Add": 1.0}  # `Ma`: too short to be a type
    off = packaged_with({"dispatch": 0.0})
    assert "dispatch" not in Localizer(localizer.index, off).signals(facts).entity  # weight 0: not run


def test_without_template_keeps_the_reporters_words_and_the_code() -> None:
    stripped = without_template(TEMPLATED)
    for gone in ("Describe the bug", "clear and concise", "To Reproduce", "Steps to reproduce", "Environment info"):
        assert gone not in stripped
    for gone in ("OS: Linux", "Python version: 3.9", "Sphinx extensions", "image", "Screen Shot"):
        assert gone not in stripped
    assert "The digest header lacks the `qop` value." in stripped
    assert "- Python version: inside code stays" in stripped  # fenced code is the reporter's own
    assert "- Note: the header is built twice" in stripped  # a list item about the bug, not the environment
    words = set(parse_issue(TEMPLATED, strip_template=True).words)
    assert {"digest", "header", "qop", "built", "twice"} <= words
    assert not {"describe", "reproduce", "screenshots", "linux", "extensions"} & words
    assert {"describe", "reproduce", "linux"} <= set(parse_issue(TEMPLATED).words)  # off: as before


def test_the_template_switch_is_read_from_data_and_required(localizer: Localizer) -> None:
    assert Weights.load().strip_template is False
    tables = load("localize.toml")
    tables["issue"]["strip_template"] = True
    on = Localizer(localizer.index, Weights.from_tables(tables))
    ranked = on.localize(TEMPLATED)
    assert ranked.entities[0].path == "web/auth.py"
    del tables["issue"]["strip_template"]
    with pytest.raises(DataError, match=r"\[issue\] lacks the required key 'strip_template'"):
        Weights.from_tables(tables)


def test_the_switches_off_rank_as_before(localizer: Localizer) -> None:
    """member_yield 0 and dispatch 0: the ranking of the signals without them."""
    packaged = packaged_with({"dispatch": 0.0}, member_yield=0.0)
    facts = parse_issue("`DigestAuth.build_header` and `latex(MatAdd(a))` print the digest header wrong")
    found = localizer.signals(facts, every=True)
    without = Signals({n: s for n, s in found.entity.items() if n != "dispatch"}, found.file)
    assert rank(found, packaged, 10) == rank(without, packaged, 10)
