"""The structural and name-exact localization signals on small repositories built here: frames matched by
function name, qualified names, messages where the code raises, the def/ref graph (callers, callees, PageRank),
and the code a named test exercises."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from snaffle.agentless.graph import RefGraph, pagerank
from snaffle.agentless.issue_text import Frame, parse_issue
from snaffle.agentless.localize import Localizer, frame_entity
from snaffle.index.repo import RepoIndex
from tests.helpers import make_repo

SESSION = (
    "class Session:\n"
    "    def put(self, url):\n"
    "        return self.request('PUT', url)\n"
    "\n"
    "    def request(self, method, url):\n"
    "        return self.send(method)\n"
    "\n"
    "    def send(self, method):\n"
    "        if method not in ('GET', 'PUT'):\n"
    "            raise ValueError('the method is not allowed here: %s' % method)\n"
    "        return method\n"
)
CHAIN = (
    "def entry(x):\n    return middle_step(x)\n\n\n"
    "def middle_step(x):\n    return leaf_helper(x) + 1\n\n\n"
    "def leaf_helper(x):\n    return x * 2\n\n\n"
    "def unrelated(y):\n    return y\n"
)
FILES: dict[str, str | bytes] = {
    "web/__init__.py": "",
    "web/sessions.py": SESSION,
    "web/chain.py": CHAIN,
    "web/messages.py": "HELP = 'the method is not allowed here: see the docs'\n\n\ndef describe():\n    return HELP\n",
    "tests/test_chain.py": "from web.chain import entry\n\n\ndef test_entry_doubles():\n    assert entry(2) == 5\n",
}


def localizer(tmp_path: Path) -> Localizer:
    return Localizer(RepoIndex(make_repo(tmp_path / "web", FILES)))


def selectors(scores: dict) -> dict[str, float]:  # type: ignore[type-arg]
    return {e.selector: v for e, v in scores.items()}


def test_a_frame_is_matched_by_function_name_when_its_line_points_elsewhere(tmp_path: Path) -> None:
    """Line 3 of sessions.py is in `Session.put` today; the printed frame ran `send` (another version)."""
    issue = 'Traceback (most recent call last):\n  File "/site/web/sessions.py", line 3, in send\nValueError: no\n'
    scores = selectors(localizer(tmp_path).traceback(parse_issue(issue)))
    assert scores == {"web/sessions.py::Session.send": 1.0}


def test_a_frame_whose_function_is_not_in_the_file_keeps_its_line_at_half_weight(tmp_path: Path) -> None:
    index = RepoIndex(make_repo(tmp_path / "web", FILES))
    entity, named = frame_entity(index.entities("web/sessions.py"), Frame("web/sessions.py", 3, "renamed"))
    assert entity is not None and entity.selector == "web/sessions.py::Session.put" and not named
    issue = 'Traceback:\n  File "web/sessions.py", line 3, in renamed\n'
    assert selectors(Localizer(index).traceback(parse_issue(issue))) == {"web/sessions.py::Session.put": 0.5}


def test_a_qualified_name_resolves_to_its_one_entity(tmp_path: Path) -> None:
    located = localizer(tmp_path)
    scores = selectors(located.qualified(parse_issue("`web.sessions.Session.send` drops the body")))
    assert scores == {"web/sessions.py::Session.send": 1.0}
    assert located.qualified(parse_issue("`web.nowhere.Session.send` and `os.path.join`")) == {}


def test_a_name_a_package_re_exports_resolves_where_it_is_defined(tmp_path: Path) -> None:
    """`web.send_all` is defined in web/chain.py as `entry` and re-exported twice: `web` -> `web.api` -> chain."""
    files = {
        **FILES,
        "web/__init__.py": "from .api import send_all, Session\n",
        "web/api.py": "from .chain import entry as send_all\nfrom web.sessions import Session\n",
    }
    located = Localizer(RepoIndex(make_repo(tmp_path / "web", files)))
    for issue in (
        "`web.send_all(2)` is off by one",
        "```\nimport web as w\nw.send_all(2)\n```",
        "```\nfrom web import send_all\nsend_all(2)\n```",
    ):
        assert selectors(located.qualified(parse_issue(issue))) == {"web/chain.py::entry": 1.0}, issue
    assert selectors(located.qualified(parse_issue("`web.Session.send` drops it"))) == {
        "web/sessions.py::Session.send": 1.0
    }
    assert located.qualified(parse_issue("`web.missing` and `web.api.nothing`")) == {}


def test_an_imported_name_counts_for_the_one_definition_it_resolves_to(tmp_path: Path) -> None:
    """Two `entry`s: the issue's import says which one it ran; a bare name is shared out as before."""
    files = {**FILES, "web/__init__.py": "from .chain import entry\n", "web/other.py": "def entry(x):\n    return x\n"}
    located = Localizer(RepoIndex(make_repo(tmp_path / "web", files)))
    resolved = selectors(located.identifier(parse_issue("```\nfrom web import entry\nentry(2)\n```")))
    assert resolved == {"web/chain.py::entry": 1.0}
    assert selectors(located.identifier(parse_issue("`web.chain.entry` is off"))) == {"web/chain.py::entry": 1.0}
    shared = selectors(located.identifier(parse_issue("`entry(2)` is off")))
    assert shared == {
        "web/chain.py::entry": pytest.approx(0.63, abs=0.01),
        "web/other.py::entry": pytest.approx(0.63, abs=0.01),
    }


def test_a_re_export_cycle_ends(tmp_path: Path) -> None:
    files = {**FILES, "web/__init__.py": "from .api import loop\n", "web/api.py": "from web import loop\n"}
    located = Localizer(RepoIndex(make_repo(tmp_path / "web", files)))
    assert located.qualified(parse_issue("`web.loop` hangs")) == {}


def test_a_quoted_error_message_points_at_the_raise_not_at_a_mention(tmp_path: Path) -> None:
    issue = "```\nValueError: the method is not allowed here: 'PATCH'\n```"
    located = localizer(tmp_path)
    assert set(selectors(located.quote(parse_issue(issue)))) == {
        "web/sessions.py::Session.send",
    }  # module-level text (HELP) is no entity: the plain quote signal agrees here
    assert selectors(located.raises(parse_issue(issue))) == {"web/sessions.py::Session.send": 1.0}
    issue_b = "```\nthe method is not allowed here: see the docs\n```"
    assert located.raises(parse_issue(issue_b)) == {}


def test_the_def_ref_graph_follows_a_chain(tmp_path: Path) -> None:
    located = localizer(tmp_path)
    graph = located.graph
    entry, middle, leaf = (located.index.resolve(f"web/chain.py::{n}") for n in ("entry", "middle_step", "leaf_helper"))
    assert [e for e, _ in graph.callees(entry)] == [middle]
    assert [e for e, _ in graph.callers(leaf)] == [middle]
    ranked = selectors(pagerank(graph, {entry: 1.0}))
    assert ranked["web/chain.py::entry"] == 1.0 and ranked["web/chain.py::middle_step"] == 1.0
    assert 0 < ranked["web/chain.py::leaf_helper"] < 1.0 and "web/chain.py::unrelated" not in ranked


def test_callers_and_pagerank_signals_from_a_named_entity(tmp_path: Path) -> None:
    located = localizer(tmp_path)
    named = located.identifier(parse_issue("`leaf_helper` returns the wrong value"))
    assert set(selectors(located.caller(named))) == {"web/chain.py::middle_step"}
    spread = selectors(located.pagerank(named))
    assert "web/chain.py::leaf_helper" not in spread  # the seed itself is the identifier signal's
    assert spread["web/chain.py::middle_step"] > spread.get("web/chain.py::entry", 0.0) > 0


def test_a_named_test_points_at_the_code_it_calls(tmp_path: Path) -> None:
    located = localizer(tmp_path)
    scores = selectors(located.test_callee(parse_issue("`test_entry_doubles` fails since 2.0")))
    assert scores == {"web/chain.py::entry": 1.0}
    assert located.test_callee(parse_issue("`test_nothing_like_it` fails")) == {}


def test_a_name_defined_too_often_is_not_followed(tmp_path: Path) -> None:
    many = {f"pkg/m{i}.py": "def get(x):\n    return x\n\n\ndef use():\n    return get(1)\n" for i in range(25)}
    index = RepoIndex(make_repo(tmp_path / "many", many))
    graph = RefGraph([index.entities(p) for p in sorted(many)], Localizer(index).tables.documents)
    assert graph.callees(index.resolve("pkg/m0.py::use")) == []
    assert isinstance(graph, RefGraph)


def test_the_import_graph_reaches_the_files_a_named_file_imports(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {
        **FILES,
        "web/api.py": "from web.sessions import Session\nimport web.chain\n\n\ndef get(url):\n    return Session()\n",
    }
    located = Localizer(RepoIndex(make_repo(tmp_path / "web", files)))
    facts = parse_issue("web/api.py misbehaves")
    scores = located.imported(located.path_mention(facts), {})
    assert scores == {"web/sessions.py": 1 / 2**0.5, "web/chain.py": 1 / 2**0.5}
    assert located.imported({}, {}) == {}


def test_an_issue_of_endless_dotted_names_is_read_in_bounded_time(tmp_path: Path) -> None:
    """A hostile issue: 100 KB of 2,000-part dotted chains (30 s to localize before: the path and call patterns
    backtracked over each chain from every position, and each chain was looked up as a module at every length)."""
    chains = "\n".join(".".join(f"web{n}x{i}" for i in range(2000)) for n in range(5))
    issue = f"```\n{chains}\nweb.sessions.Session.send(x)\n```\nand `web.chain.entry` in web/chain.py"
    located = localizer(tmp_path)
    started = time.monotonic()
    facts = parse_issue(issue)
    found = located.localize(issue)
    assert time.monotonic() - started < 5.0
    assert facts.paths == ("web/chain.py",) and "web.sessions.Session.send" in facts.code_identifiers
    assert "web/sessions.py::Session.send" in {c.selector for c in found.entities}
