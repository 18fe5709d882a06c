"""JSON as small models write it: strict JSON first, then the Python-literal dialect they drift into.

Qwen-class models writing tool calls as text often produce objects that are not JSON but are Python literals:
raw strings (`r"\\bword"`), single quotes, invalid escapes like `"\\d"`, trailing commas, `True`/`None`. `loads`
accepts those (mapping `true`/`false`/`null` outside strings), and nothing else: no repair of truncated text.
"""

from __future__ import annotations

import ast
import io
import json
import tokenize
import warnings
from collections.abc import Iterator
from typing import Any

JSON_NAMES = {"true": "True", "false": "False", "null": "None"}


def loads(text: str) -> Any:
    """Strict JSON, else the same text as a Python literal; raises `ValueError` with JSON's message."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as strict:
        try:
            return python_literal(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, tokenize.TokenError):
            raise ValueError(f"{strict.msg} at position {strict.pos} of {len(text)} characters") from strict


def python_literal(text: str) -> Any:
    """`text` as a Python literal, with JSON's `true`/`false`/`null` names accepted."""
    tokens = [
        tok._replace(string=JSON_NAMES.get(tok.string, tok.string)) if tok.type == tokenize.NAME else tok
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "\d" in a non-raw string: an invalid escape, kept as written
        return ast.literal_eval(tokenize.untokenize(tokens))


def objects(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each balanced `{...}` span, outermost first, with quoted braces ignored."""
    position = text.find("{")
    while position != -1:
        end = matching_brace(text, position)
        if end is None:
            position = text.find("{", position + 1)
            continue
        yield position, end
        position = text.find("{", position + 1)


def matching_brace(text: str, start: int) -> int | None:
    """The index after the `}` closing the `{` at `start`, skipping '...' and "..." strings; None if unclosed."""
    depth, quote, index = 0, "", start
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return None
