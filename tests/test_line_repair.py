"""Line repair (agentless/line_repair.py): the harness names each line the issue's evidence ran, the scripted model
corrects it, and the corrections are screened in the real sandbox like mutants; a correction that hangs is stopped."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from snaffle.agentless import line_repair
from snaffle.agentless.config import MAX_LINE_PASSES, PipelineConfig, switch_defaults
from snaffle.agentless.line_repair import Span, statement_spans
from snaffle.exceptions import UserError
from snaffle.index.parse import Entity
from snaffle.index.repo import RepoIndex
from snaffle.testing.scripted_server import ScriptedServer
from snaffle.types import Attempt
from tests.helpers import Start, make_repo, stage_events
from tests.test_facts import RAISING_ISSUE, SHELF_FILES, SHELF_SOURCE, WRONG_VALUE_ISSUE
from tests.test_pipeline import agentless, stages

IF_LINE = '        if key in self.frozen or key.startswith("f"):'
RAISE_LINE = '            raise ValueError(f"slot {key!r} is frozen")'
RIGHT_IF = {"content": "```python\nif key in self.frozen:\n```"}
WRONG_IF = {"content": '```python\nif key in self.frozen or key.startswith("fi"):\n```'}
WRONG_RAISE = {"content": '```python\nraise ValueError(f"slot {key} is frozen")\n```'}
SAMPLE = {"content": "```python\ndef __setitem__(self, key, value):\n    self.slots[key] = value\n```"}

FUNCTION = '''def pick(items, n=2):
    """Docstring, never asked about."""
    out = []
    for item in items:
        if item > n:
            out.append(
                item,
            )
        else:
            continue

    def inner():
        return 1

    try:
        out.sort()
    except TypeError:
        pass
    return out
'''


def shelf_run(
    scripted: Start, tmp_path: Path, script: list[dict[str, Any]], issue: str = RAISING_ISSUE, **options: Any
) -> tuple[Attempt, ScriptedServer, Path]:
    """One one-shot sample on the shelf repository after line repair (on unless `options` say otherwise), the model
    answering `script`: the run's attempt, the server and the run's directory."""
    repo = make_repo(tmp_path / "shelf", SHELF_FILES)
    server = scripted(script)
    out = tmp_path / "run"
    pipeline = {"samples": 1, "one_shot": True, "line_repair": True, **options}
    return agentless(repo, issue, server.base_url, out, **pipeline), server, out


def entity(tmp_path: Path, source: str, selector: str) -> Entity:
    repo = make_repo(tmp_path / "repo", {"mod.py": source})
    return RepoIndex(repo).resolve(selector)


def test_a_function_is_asked_about_statement_by_statement_headers_alone(tmp_path: Path) -> None:
    spans = statement_spans(FUNCTION, entity(tmp_path, FUNCTION, "mod.py::pick"))
    assert [(s.start, s.end) for s in spans] == [
        (3, 3),
        (4, 4),
        (5, 5),
        (6, 8),
        (10, 10),
        (15, 15),
        (16, 16),
        (17, 17),
        (18, 18),
        (19, 19),
    ]
    assert spans[3].text == "            out.append(\n                item,\n            )"


def test_a_nested_functions_statements_are_asked_about_only_with_nested(tmp_path: Path) -> None:
    pick = entity(tmp_path, FUNCTION, "mod.py::pick")
    flat = [(s.start, s.end) for s in statement_spans(FUNCTION, pick)]
    nested = [(s.start, s.end) for s in statement_spans(FUNCTION, pick, nested=True)]
    assert (13, 13) not in flat, "inner()'s `return 1` is its own entity's line"
    assert nested == sorted([*flat, (13, 13)]), "with nested: in file order, its header still left out"
    assert statement_spans(FUNCTION, pick, frozenset({13}), nested=True)[0].text == "        return 1"


def test_only_the_statements_the_evidence_ran_are_asked_about(tmp_path: Path) -> None:
    spans = statement_spans(FUNCTION, entity(tmp_path, FUNCTION, "mod.py::pick"), executed={4, 5, 7, 19})
    assert [s.start for s in spans] == [4, 5, 6, 19]


def test_a_correction_takes_the_lines_place_at_its_indentation() -> None:
    span = Span("shelf/core.py", 15, 15, IF_LINE)
    changed = line_repair.mutant(SHELF_SOURCE, span, "Here:\n```python\n  if key in self.frozen:\n```")
    assert changed is not None and changed.after == "        if key in self.frozen:"
    fixed = changed.apply(SHELF_SOURCE.encode()).decode()
    assert fixed == SHELF_SOURCE.replace(IF_LINE, "        if key in self.frozen:")


def test_a_correction_of_several_lines_keeps_their_relative_indentation() -> None:
    span = Span("shelf/core.py", 16, 16, RAISE_LINE)
    answer = '```python\nif value is None:\n    raise ValueError("no value")\n```'
    changed = line_repair.mutant(SHELF_SOURCE, span, answer)
    assert changed is not None
    assert changed.after == '            if value is None:\n                raise ValueError("no value")'


def test_an_unchanged_empty_or_unparsable_correction_is_no_mutant() -> None:
    span = Span("shelf/core.py", 15, 15, IF_LINE)
    assert line_repair.mutant(SHELF_SOURCE, span, f"```python\n{IF_LINE.strip()}\n```") is None
    assert line_repair.mutant(SHELF_SOURCE, span, "```python\n```") is None
    assert line_repair.mutant(SHELF_SOURCE, span, "```python\nif key in (:\n```") is None


def test_the_prompt_keeps_the_issue_and_code_first_and_the_line_last() -> None:
    span = Span("shelf/core.py", 15, 15, IF_LINE)
    first, second = line_repair.messages("Issue text", "def f(): ...", span)
    assert first["role"] == "system" and second["role"] == "user"
    text = str(second["content"])
    assert text.index("Issue text") < text.index("def f(): ...") < text.index(IF_LINE.strip())


def test_the_right_correction_of_a_line_the_snippet_ran_ends_the_run_without_a_rewrite(
    scripted: Start, tmp_path: Path
) -> None:
    attempt, server, out = shelf_run(scripted, tmp_path, [RIGHT_IF, WRONG_RAISE, SAMPLE])
    assert attempt.exit_status == "validated", stages(out)
    assert f"-{IF_LINE}\n+        if key in self.frozen:\n" in attempt.patch
    asked = [str(r.body["messages"][-1]["content"]) for r in server.requests]
    assert len(asked) == 2  # the two lines the snippet ran; `self.slots[key] = value` never ran; no rewrite sample
    assert IF_LINE.strip() in asked[0].split("This line is wrong:")[1]
    assert RAISE_LINE.strip() in asked[1].split("This line is wrong:")[1]
    decisions = [e["decision"] for e in stage_events(out, "line_repair")]
    assert decisions[0] == "2 corrections of 2 lines asked" and decisions[1].startswith("1 of 2 mutants pass")


def test_corrections_that_leave_the_issue_reproduced_go_on_to_the_samples(scripted: Start, tmp_path: Path) -> None:
    attempt, server, out = shelf_run(scripted, tmp_path, [WRONG_IF, WRONG_RAISE, SAMPLE])
    assert len(server.requests) == 3  # two lines, then the rewrite sample
    assert [e["decision"] for e in stage_events(out, "line_repair")][1].startswith("0 of 2 mutants pass")
    assert attempt.exit_status == "validated" and stages(out)[-1] == ("select", "sample 0")


def test_a_correction_that_hangs_is_stopped_and_the_run_goes_on(scripted: Start, tmp_path: Path) -> None:
    hang = {"content": '```python\nif __import__("time").sleep(600) or key in self.frozen:\n```'}
    attempt, server, out = shelf_run(scripted, tmp_path, [hang, WRONG_RAISE, SAMPLE])
    screened = stage_events(out, "line_repair")[1]
    assert screened["decision"].startswith("0 of 2 mutants pass") and screened["seconds"] < 60
    assert attempt.exit_status == "validated" and len(server.requests) == 3


def test_without_the_switch_no_line_is_asked_about(scripted: Start, tmp_path: Path) -> None:
    _, server, out = shelf_run(scripted, tmp_path, [SAMPLE], line_repair=False)
    assert stage_events(out, "line_repair") == [] and len(server.requests) == 1


def test_a_span_that_is_not_the_sources_makes_no_mutant() -> None:
    span = Span("shelf/core.py", 16, 16, IF_LINE)
    assert line_repair.mutant(SHELF_SOURCE, span, "```python\nif key in self.frozen:\n```") is None


@pytest.mark.parametrize("untested", [False, True])
def test_a_repository_without_tests_is_screened_by_the_issue_alone_only_with_the_switch(
    scripted: Start, tmp_path: Path, untested: bool
) -> None:
    files = {name: text for name, text in SHELF_FILES.items() if not name.startswith("tests/")}
    repo = make_repo(tmp_path / "shelf", files)
    server = scripted([RIGHT_IF, WRONG_RAISE, SAMPLE] if untested else [SAMPLE])
    out = tmp_path / "run"
    options = {"samples": 1, "one_shot": True, "line_repair": True, "line_untested": untested}
    attempt = agentless(repo, RAISING_ISSUE, server.base_url, out, **options)
    decisions = [e["decision"] for e in stage_events(out, "line_repair")]
    if not untested:
        assert decisions == ["no related test passes on the original"] and len(server.requests) == 1
        return
    assert decisions[:2] == [
        "no related test file: screened by the issue's evidence alone",
        "2 corrections of 2 lines asked",
    ]
    assert attempt.exit_status == "validated" and len(server.requests) == 2, "no rewrite sample"
    assert f"-{IF_LINE}\n+        if key in self.frozen:\n" in attempt.patch


def test_related_tests_that_never_pass_still_refuse_line_repair_with_the_switch(
    scripted: Start, tmp_path: Path
) -> None:
    broken = "from shelf import Shelf\nimport not_installed_anywhere\n\n\ndef test_keys():\n    assert Shelf()\n"
    repo = make_repo(tmp_path / "shelf", {**SHELF_FILES, "tests/test_core.py": broken})
    server = scripted([SAMPLE])
    out = tmp_path / "run"
    options = {"samples": 1, "one_shot": True, "line_repair": True, "line_untested": True}
    agentless(repo, RAISING_ISSUE, server.base_url, out, **options)
    assert [e["decision"] for e in stage_events(out, "line_repair")] == ["no related test passes on the original"]
    assert len(server.requests) == 1, "the one rewrite sample, no line question"


def test_a_related_test_failing_on_the_original_screens_the_corrections_of_a_prose_issue(
    scripted: Start, tmp_path: Path
) -> None:
    total_test = "\n\ndef test_total():\n    s = Shelf()\n    s['a'] = 2\n    assert s.total() == 2\n"
    files = {**SHELF_FILES, "tests/test_core.py": str(SHELF_FILES["tests/test_core.py"]) + total_test}
    repo = make_repo(tmp_path / "shelf", files)
    right = {"content": "```python\nreturn sum(self.slots.values())\n```"}
    server = scripted([right, SAMPLE])
    out = tmp_path / "run"
    prose = "Shelf.total in shelf/core.py is one more than the sum of the slots."
    switches = replace(switch_defaults(), failing_existing=True)
    options = {"samples": 1, "one_shot": True, "line_repair": True, "reproduce": False, "switches": switches}
    attempt = agentless(repo, prose, server.base_url, out, **options)
    assert [e["decision"] for e in stage_events(out, "failing_tests")] == ["1 related tests fail on the original"]
    decisions = [e["decision"] for e in stage_events(out, "line_repair")]
    assert decisions[0] == "1 corrections of 1 lines asked", decisions  # the one line the failing test ran
    assert stage_events(out, "line_repair")[1]["evidence"] == ["failing_existing"]
    assert attempt.exit_status == "validated" and len(server.requests) == 1
    assert "+        return sum(self.slots.values())\n" in attempt.patch


def test_a_second_pass_asks_each_line_again_at_the_sample_temperature(scripted: Start, tmp_path: Path) -> None:
    script = [WRONG_IF, WRONG_RAISE, RIGHT_IF, WRONG_RAISE]
    attempt, server, out = shelf_run(scripted, tmp_path, script, line_passes=2, temperature=0.8)
    assert [r.body.get("temperature") for r in server.requests] == [0.0, 0.0, 0.8, 0.8]
    asked = [e for e in stage_events(out, "line_repair") if "lines asked" in e["decision"]]
    assert [(e["decision"], e["temperature"]) for e in asked] == [
        ("2 corrections of 2 lines asked", 0.0),
        ("1 corrections of 2 lines asked", 0.8),  # the repeated wrong `raise` is not screened twice
    ]
    assert attempt.exit_status == "validated" and f"-{IF_LINE}\n+        if key in self.frozen:\n" in attempt.patch


def test_a_third_pass_asks_each_line_again_while_nothing_is_decisive(scripted: Start, tmp_path: Path) -> None:
    script = [WRONG_IF, WRONG_RAISE, WRONG_IF, WRONG_RAISE, RIGHT_IF, WRONG_RAISE]
    attempt, server, out = shelf_run(scripted, tmp_path, script, line_passes=3, temperature=0.8)
    assert [r.body.get("temperature") for r in server.requests] == [0.0, 0.0, 0.8, 0.8, 0.8, 0.8]
    asked = [e["decision"] for e in stage_events(out, "line_repair") if "lines asked" in e["decision"]]
    assert asked == [
        "2 corrections of 2 lines asked",
        "0 corrections of 2 lines asked",
        "1 corrections of 2 lines asked",
    ]
    assert attempt.exit_status == "validated" and f"-{IF_LINE}\n+        if key in self.frozen:\n" in attempt.patch


def test_a_missing_line_goes_after_the_line_asked_about_at_the_indentation_of_its_block() -> None:
    source = "def f(x):\n    if x:\n        x = 1\n    return x\n"
    header = Span("m.py", 2, 2, "    if x:")
    after_header = line_repair.mutant(source, header, "```python\nx += 1\n```", "insert")
    assert after_header is not None and after_header.line == 3
    assert (
        after_header.apply(source.encode()).decode()
        == "def f(x):\n    if x:\n        x += 1\n        x = 1\n    return x\n"
    )
    simple = Span("m.py", 3, 3, "        x = 1")
    after_simple = line_repair.mutant(source, simple, "```python\nx += 1\n```", "insert")
    assert after_simple is not None
    assert (
        after_simple.apply(source.encode()).decode()
        == "def f(x):\n    if x:\n        x = 1\n        x += 1\n    return x\n"
    )
    assert after_simple.describe() == "m.py:4 line insert: `(nothing)` -> `x += 1`"


def test_an_insert_opens_the_block_by_what_parses_not_by_a_trailing_colon() -> None:
    source = (
        "def f(d):\n    try:\n        x = d[0]\n    except KeyError:\n        # none\n        x = 0\n"
        "    return x  # x:\n"
    )
    handler = Span("m.py", 4, 5, "    except KeyError:\n        # none")
    in_block = line_repair.mutant(source, handler, "```python\nx = 1\n```", "insert")
    assert in_block is not None
    assert in_block.apply(source.encode()).decode().split("\n")[5] == "        x = 1", "a header with its comment"
    simple = Span("m.py", 7, 7, "    return x  # x:")
    source_more = source + "\n\ndef g():\n    pass\n"
    after = line_repair.mutant(source_more, simple, "```python\nx += 1\n```", "insert")
    assert after is not None
    assert after.apply(source_more.encode()).decode().split("\n")[7] == "    x += 1", "a comment ending in a colon"


def test_an_inserted_line_that_repeats_its_neighbour_is_no_mutant() -> None:
    source = "def f(x):\n    x = 1\n    return x\n"
    span = Span("m.py", 2, 2, "    x = 1")
    assert line_repair.mutant(source, span, "```python\nx = 1\n```", "insert") is None
    assert line_repair.mutant(source, span, "```python\nreturn x\n```", "insert") is None


CLEAN_FILES: dict[str, str | bytes] = {
    "words/__init__.py": "from words.core import clean\n",
    "words/core.py": (
        'def clean(word):\n    """Lower case, dashes as underscores."""\n'
        "    word = word.strip()\n    return word.lower()\n"
    ),
    "tests/test_core.py": "from words import clean\n\n\ndef test_strip():\n    assert clean(' A ') == 'a'\n",
}
CLEAN_ISSUE = """clean keeps dashes

    >>> from words import clean
    >>> clean("a-b")
    'a-b'

I expected `clean("a-b")` to return `'a_b'`.
"""


def test_an_insert_pass_finds_the_missing_line_after_the_corrections_found_nothing(
    scripted: Start, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "words", CLEAN_FILES)
    script = [
        {"content": "```python\nword = word.strip()\n```"},  # unchanged: no mutant
        {"content": "```python\nreturn word.upper()\n```"},  # fails the issue's expectation
        {"content": "```python\nword = word.replace('-', '_')\n```"},
        {"content": "```python\nreturn word\n```"},
    ]
    server = scripted(script)
    out = tmp_path / "run"
    options = {"samples": 1, "one_shot": True, "line_repair": True, "line_insert": True}
    attempt = agentless(repo, CLEAN_ISSUE, server.base_url, out, **options)
    asked = [e for e in stage_events(out, "line_repair") if "lines asked" in e["decision"]]
    assert [(e["decision"], e["question"]) for e in asked] == [
        ("1 corrections of 2 lines asked", "replace"),
        ("2 corrections of 2 lines asked", "insert"),
    ]
    assert "A line is missing right after this line:" in str(server.requests[2].body["messages"][-1]["content"])
    assert attempt.exit_status == "validated" and len(server.requests) == 4
    assert "     word = word.strip()\n+    word = word.replace('-', '_')\n" in attempt.patch


def test_the_functions_among_the_first_candidates_are_asked_about_in_rank_order(
    scripted: Start, tmp_path: Path
) -> None:
    unchanged = {"content": "```python\npass\n```"}
    script = [unchanged] * 8 + [SAMPLE]
    _, server, out = shelf_run(scripted, tmp_path, script, WRONG_VALUE_ISSUE, line_entities=3, top_k=3)
    (asked,) = [e for e in stage_events(out, "line_repair") if "lines asked" in e["decision"]]
    located = stage_events(out, "localize")[-1]["candidates"]
    assert located[1] == "shelf/core.py::Shelf"  # a class: no statements of its own are asked about
    assert asked["entities"] == [located[0], located[2]], (asked, located)
    lines = int(asked["decision"].split(" of ")[1].split()[0])
    assert len(server.requests) == lines + 1  # one call a line, then the rewrite sample


def test_a_pipeline_of_no_line_pass_or_more_than_the_most_is_refused() -> None:
    for passes in (0, MAX_LINE_PASSES + 1):
        with pytest.raises(UserError, match=f"line_passes = {passes}: expected 1 to {MAX_LINE_PASSES}"):
            PipelineConfig(line_passes=passes)


ORIGIN_ISSUE = """describe() shows the wrong values

    >>> from shelf import Shelf, describe
    >>> s = Shelf()
    >>> s["a"] = "apple"
    >>> describe(s)
    'a=APPLE'

I expected `describe(s)` to return `'a=apple'`.
"""
GETITEM_LINE = "        return self.slots[key]"


@pytest.mark.parametrize("origin_first", [False, True])
def test_origin_first_asks_first_about_the_function_the_wrong_value_came_from(
    scripted: Start, tmp_path: Path, origin_first: bool
) -> None:
    files = dict(SHELF_FILES)
    files["shelf/core.py"] = SHELF_SOURCE.replace(GETITEM_LINE, GETITEM_LINE + ".upper()")
    repo = make_repo(tmp_path / "shelf", files)
    right = {"content": "```python\nreturn self.slots[key]\n```"}
    server = scripted([right, right, SAMPLE])
    out = tmp_path / "run"
    options = {"samples": 1, "one_shot": True, "line_repair": True, "line_passes": 1}
    attempt = agentless(repo, ORIGIN_ISSUE, server.base_url, out, line_origin_first=origin_first, **options)
    (origin,) = stage_events(out, "value_origin")
    assert list(origin["calls"]) == ["shelf/core.py::Shelf.__getitem__"]
    located = stage_events(out, "localize")[-1]["candidates"]
    assert located[0] == "shelf/core.py::describe", "the issue names describe(): it ranks first"
    asked = [e for e in stage_events(out, "line_repair") if "lines asked" in e["decision"]][0]
    if not origin_first:
        assert asked["entities"] == ["shelf/core.py::describe"]
        return
    assert asked["entities"] == ["shelf/core.py::Shelf.__getitem__"]
    assert attempt.exit_status == "validated" and len(server.requests) == 1, "the one line, corrected: no sample"
    assert (repo / "shelf" / "core.py").read_text() == SHELF_SOURCE


PAIRS_SOURCE = '''def parse_pairs(text):
    """`a=1,b=2` as a dict; a pair without `=` is refused."""

    def pair(item):
        key, sep, value = item.partition("=")
        if not sep and not key:
            raise ValueError(f"no '=' in {item!r}")
        return key, value

    return dict(pair(item) for item in text.split(","))
'''
PAIRS_TESTS = """from pairs import parse_pairs


def test_pairs():
    assert parse_pairs("a=1,b=2") == {"a": "1", "b": "2"}


def test_a_pair_without_equals_is_refused():
    try:
        parse_pairs("a=1,b")
    except ValueError:
        return
    assert False, "no ValueError"
"""
PAIRS_ISSUE = """parse_pairs accepts a pair without '='

parse_pairs("a=1,b") gives me {'a': '1', 'b': ''} instead of refusing the second pair, as its docstring says.
"""
WRONG_IF_LINE = "        if not sep and not key:"


@pytest.mark.parametrize("nested", [False, True])
def test_a_wrong_line_in_a_nested_function_is_asked_about_and_corrected_only_with_nested(
    scripted: Start, tmp_path: Path, nested: bool
) -> None:
    files = {"pairs.py": PAIRS_SOURCE, "tests/test_pairs.py": PAIRS_TESTS}
    repo = make_repo(tmp_path / "pairs", files)
    other = {"content": "```python\npass\n```"}
    right = {"content": "```python\nif not sep:\n```"}
    wrong_rewrite = {"content": "```python\ndef parse_pairs(text):\n    return {}\n```"}
    script = [other, right, other, other, wrong_rewrite] if nested else [right, wrong_rewrite]
    server = scripted(script)
    out = tmp_path / "run"
    switches = replace(switch_defaults(), failing_existing=True)
    options = {"samples": 1, "one_shot": True, "line_repair": True, "line_passes": 1, "reproduce": False}
    attempt = agentless(repo, PAIRS_ISSUE, server.base_url, out, switches=switches, line_nested=nested, **options)
    (asked,) = [e for e in stage_events(out, "line_repair") if "lines asked" in e["decision"]]
    assert asked["entities"] == ["pairs.py::parse_pairs"]
    if not nested:
        assert "of 1 lines asked" in asked["decision"], "only parse_pairs' own `return`"
        assert attempt.exit_status != "validated"
        return
    assert "of 4 lines asked" in asked["decision"], "pair()'s statements the failing test ran, then the `return`"
    assert WRONG_IF_LINE.strip() in str(server.requests[1].body["messages"][-1]["content"])
    assert attempt.exit_status == "validated" and len(server.requests) == 4, "the nested line, corrected: no sample"
    assert f"-{WRONG_IF_LINE}\n+        if not sep:\n" in attempt.patch


FIRST_SOURCE = '''def first(items, default=None):
    """The first item, or `default` when there is none."""
    try:
        return items[0]
    except KeyError:
        # an empty sequence
        return default
'''
FIRST_TESTS = """from first import first


def test_first():
    assert first([3, 4]) == 3


def test_first_of_nothing_is_the_default():
    assert first([], 5) == 5
"""
FIRST_ISSUE = "first([]) raises IndexError instead of returning the default."
HANDLER_AND_MORE = {
    "content": "```python\nexcept IndexError:\n    # an empty sequence\n    raise LookupError('empty')\n```"
}


def test_a_header_answer_is_cut_to_its_header_and_the_comment_under_the_asked_header_stays() -> None:
    source = "def f(d):\n    try:\n        return d[0]\n    except KeyError:\n        # none\n        return 1\n"
    header = Span("m.py", 4, 5, "    except KeyError:\n        # none")
    answer = "```python\nexcept IndexError:\n    # none\n    raise LookupError\n    return 1\n```"
    cut = line_repair.mutant(source, header, answer, header_only=True)
    assert cut is not None
    assert cut.apply(source.encode()).decode() == source.replace("except KeyError:", "except IndexError:")
    whole = line_repair.mutant(source, header, answer)
    assert whole is not None and "raise LookupError" in whole.apply(source.encode()).decode()
    repeated = "```python\nexcept KeyError:\n    # none\n    return 1\n```"
    assert line_repair.mutant(source, header, repeated, header_only=True) is None, "the header unchanged"
    simple = Span("m.py", 3, 3, "        return d[0]")
    two = line_repair.mutant(source, simple, "```python\nx = d[0]\nreturn x\n```", header_only=True)
    assert two is not None and "x = d[0]" in two.after, "a simple statement's answer is never cut"


@pytest.mark.parametrize("header_only", [False, True])
def test_a_handler_answer_that_goes_on_past_its_header_is_validated_only_cut_to_the_header(
    scripted: Start, tmp_path: Path, header_only: bool
) -> None:
    repo = make_repo(tmp_path / "first", {"first.py": FIRST_SOURCE, "tests/test_first.py": FIRST_TESTS})
    unchanged = {"content": "```python\nreturn items[0]\n```"}
    wrong_rewrite = {"content": "```python\ndef first(items, default=None):\n    return items[0]\n```"}
    server = scripted([{"content": "```python\ntry:\n```"}, unchanged, HANDLER_AND_MORE, wrong_rewrite])
    out = tmp_path / "run"
    switches = replace(switch_defaults(), failing_existing=True)
    options = {"samples": 1, "one_shot": True, "line_repair": True, "line_passes": 1, "reproduce": False}
    attempt = agentless(
        repo, FIRST_ISSUE, server.base_url, out, switches=switches, line_header_only=header_only, **options
    )
    (asked,) = [e for e in stage_events(out, "line_repair") if "lines asked" in e["decision"]]
    assert "of 3 lines asked" in asked["decision"], asked
    if not header_only:
        assert attempt.exit_status != "validated", "the added `raise` still fails the test"
        return
    assert attempt.exit_status == "validated" and len(server.requests) == 3, "the header alone fixes it: no sample"
    assert "-    except KeyError:\n+    except IndexError:\n" in attempt.patch
    assert "LookupError" not in attempt.patch
