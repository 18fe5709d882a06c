"""The Python-literal dialect of JSON small models write, and the tool calls found in it."""

from __future__ import annotations

import pytest

from snaffle.model.lenient_json import loads, matching_brace, objects
from snaffle.model.text_protocol import decode_text_calls, parse_arguments

# the shape of a reply recorded from Qwen2.5-Coder-1.5B (structured arm, text protocol): a raw string in "JSON"
RAW_STRING_REPLY = (
    '```json\n{\n  "name": "search_code",\n  "arguments": {\n    "query": r"\\bparse_date\\b.*?print\\(\\w+\\)",\n'
    '    "path": "./pkg.py",\n    "cap": 10\n  }\n}\n```'
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ("{'a': 'it\\'s', 'b': [1, 2,],}", {"a": "it's", "b": [1, 2]}),
        ('{"ok": true, "none": null, "no": false}', {"ok": True, "none": None, "no": False}),
        ('{"ok": True, "none": None}', {"ok": True, "none": None}),
        ('{"q": r"\\d+"}', {"q": "\\d+"}),
        ('{"q": "\\d+"}', {"q": "\\d+"}),  # an invalid JSON escape, kept as written
        ('{"s": "true"}', {"s": "true"}),  # names inside strings stay strings
    ],
)
def test_loads_accepts_json_and_its_python_dialect(text: str, value: object) -> None:
    assert loads(text) == value


@pytest.mark.parametrize("text", ['{"a": 1', '{"a": __import__("os")}', '{"a": f(1)}', "{a: 1}", ""])
def test_loads_refuses_what_is_neither(text: str) -> None:
    with pytest.raises(ValueError):
        loads(text)


def test_braces_inside_strings_do_not_count() -> None:
    text = 'x {"a": "}{", \'b\': "\\"}"} y {"c": 1}'
    spans = [text[s:e] for s, e in objects(text)]
    assert spans[0] == '{"a": "}{", \'b\': "\\"}"}' and spans[-1] == '{"c": 1}'
    assert [loads(span) for span in spans if span in (spans[0], spans[-1])] == [{"a": "}{", "b": '"}'}, {"c": 1}]
    assert matching_brace('{"a": {', 0) is None


def test_a_raw_string_tool_call_is_decoded() -> None:
    (call,) = decode_text_calls(RAW_STRING_REPLY)
    assert call.error is None and call.name == "search_code"
    assert call.arguments == {"query": "\\bparse_date\\b.*?print\\(\\w+\\)", "path": "./pkg.py", "cap": 10}


def test_truncated_arguments_still_report_the_json_error() -> None:
    arguments, error = parse_arguments('{"command": "ls')
    assert arguments == {} and error is not None and "position" in error
