"""Runnable snippets of an issue text: fenced python blocks, `>>>` sessions (with the output the user saw) and
`python -c` lines, and the expected values the issue states for a session line when the mapping is unambiguous.

Zero tokens and no execution here: `facts.py` runs what this module extracts.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

from snaffle.agentless.issue_text import HTML_COMMENT_RE

FENCE_RE = re.compile(r"^[ \t]*```[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
PYTHON_LANGS = frozenset({"", "python", "py", "python3", "pycon", "ipython", "pytb"})
PROMPT_RE = re.compile(r"^(?P<indent>[ \t>]*?)>>>(?: |$)(?P<code>.*)$")
CONTINUATION_RE = re.compile(r"^\.\.\.(?: |$)(?P<code>.*)$")
COMMAND_RE = re.compile(r"""\bpython[\d.]*\s+-c\s+(?P<quote>["'])(?P<code>.+?)(?P=quote)""")
TRACEBACK_HEAD = "Traceback (most recent call last)"
EXPECT_VERBS = r"(?:return|returns|give|gives|be|output|print|equal|evaluate to|yield)"
EXPLICIT_RE = re.compile(
    rf"`(?P<expr>[^`\n]+)`\s+(?:should|would|to|must|ought to)\s+(?:have\s+)?{EXPECT_VERBS}\s+`(?P<value>[^`\n]+)`"
)
"""`f(1)` should return `2`; I expected `f(1)` to be `2`: the expression is named, so the mapping is sure."""
IMPLICIT_RE = re.compile(
    rf"(?:expected(?:\s+(?:output|result|value))?\s*:?|should\s+{EXPECT_VERBS}|instead\s+of)"
    r"\s*`(?P<value>[^`\n]+)`",
    re.IGNORECASE,
)
"""I expected `[1, 2]`; should return `2`: sure only when the issue shows exactly one value-printing line."""
STATED_RE = re.compile(
    rf"(?:\bexpected(?:\s+(?:output|outputs|result|results|value|values))?|\bshould\s+{EXPECT_VERBS}|\binstead\s+of)"
    r"[ \t]*:?\s*",
    re.IGNORECASE,
)
"""Expected 'a' and 'b'; should be 3; expected: [1, 2]: where stated values start (read by `stated_values`)."""
SEPARATOR_RE = re.compile(r"[ \t]*(?:,[ \t]*(?:and[ \t]+)?|[ \t]+and[ \t]+)")
END_RE = re.compile(r"[ \t]*(?:\Z|\n|[.,;:!?](?:\s|\Z)|\(|--|\u2014)")
"""What may follow the last stated value: the end of a line or sentence, a parenthesis, a dash (never a word)."""
NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?j?(?!\w|\.\d)|(?:True|False|None)\b")
MAX_LITERAL_CHARS = 300
MAX_SNIPPETS = 8
MAX_SNIPPET_CHARS = 4_000


@dataclass(frozen=True)
class Statement:
    """One statement of a snippet, and the output the user showed for it (a session's lines; '' if none)."""

    source: str
    shown: str = ""


@dataclass(frozen=True)
class Expectation:
    """The value the issue says statement `statement` of its snippet should show (a Python expression's text)."""

    statement: int
    expected: str
    said: str


@dataclass(frozen=True)
class Snippet:
    """A runnable piece of the issue: `session` statements run one by one as a REPL would, else as one script."""

    kind: str
    statements: tuple[Statement, ...]
    expectations: tuple[Expectation, ...] = ()

    @property
    def code(self) -> str:
        return "\n".join(s.source for s in self.statements)

    def expression_lines(self) -> list[int]:
        """Statements that are bare expressions with shown output that is not a traceback (they print a value)."""
        return [i for i, s in enumerate(self.statements) if s.shown and not is_traceback(s.shown) and is_expr(s.source)]


@dataclass(frozen=True)
class Extracted:
    """The snippets of one issue, and the stated expectations left out because their mapping was not sure."""

    snippets: tuple[Snippet, ...]
    ambiguous: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reading:
    """How an issue's text is read (data/agentless.toml [snippets], `SnippetLimits.reading`); all off: the first
    reading, explicit expectations and the one-line implicit one only."""

    ordered: bool = False
    """Stated values map in order onto as many session lines (`ordered_expectations`)."""
    indented: bool = False
    """Markdown's indented code blocks are scripts too (`indented_blocks`)."""
    by_kind: bool = False
    """With `ordered`: one stated value maps onto the only line shown a value of its kind (`_only_of_kind`)."""
    raised: bool = False
    """With `ordered`: one stated literal maps onto the line a session ends raising at (`_raising_line`)."""


def extract(text: str, reading: Reading = Reading()) -> Extracted:
    """Sessions first (wherever they stand: fenced, indented or bare), then fenced scripts (and, by `reading`,
    Markdown's indented code blocks), then `python -c`; expectations attached as `reading` says."""
    text = HTML_COMMENT_RE.sub(" ", text.replace("\r\n", "\n"))
    found: list[Snippet] = [Snippet("session", s) for s in sessions(text)]
    for match in FENCE_RE.finditer(text):
        body = match["body"]
        if match["lang"].lower() in PYTHON_LANGS and ">>>" not in body and runnable(body):
            found.append(Snippet("script", (Statement(body.strip("\n")),)))
    if reading.indented:
        found += [Snippet("script", (Statement(code),)) for code in indented_blocks(text) if acts(code)]
    found += [Snippet("command", (Statement(code),)) for code in commands(text)]
    unique = list({s.code: s for s in found if len(s.code) <= MAX_SNIPPET_CHARS}.values())[:MAX_SNIPPETS]
    return attach_expectations(unique, text, reading)


def sessions(text: str) -> list[tuple[Statement, ...]]:
    """Every run of `>>>` lines: statements (with `...` continuations) and the output lines after each."""
    found: list[tuple[Statement, ...]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if PROMPT_RE.match(lines[i]) is None:
            i += 1
            continue
        statements, i = _session(lines, i)
        if statements:
            found.append(statements)
    return found


def _session(lines: list[str], i: int) -> tuple[tuple[Statement, ...], int]:
    """The session starting at line `i` (a prompt line): its statements and the index after it."""
    indent = len(PROMPT_RE.match(lines[i])["indent"])  # type: ignore[index]
    statements: list[Statement] = []
    while i < len(lines) and (prompt := PROMPT_RE.match(lines[i])) is not None:
        source, i = [prompt["code"]], i + 1
        while i < len(lines) and (more := CONTINUATION_RE.match(lines[i][indent:])) is not None:
            source.append(more["code"])
            i += 1
        shown: list[str] = []
        while i < len(lines) and lines[i].strip() and not _ends_output(lines[i]):
            shown.append(lines[i][indent:] if lines[i][:indent].strip(" \t>") == "" else lines[i])
            i += 1
        code = "\n".join(source).rstrip()
        if code.strip():
            statements.append(Statement(code, "\n".join(shown)))
        if i < len(lines) and not lines[i].strip() and not _prompt_after_blank(lines, i):
            break
    kept = tuple(s for s in statements if runnable(s.source))
    return (kept if len(kept) == len(statements) else ()), i


def _ends_output(line: str) -> bool:
    return PROMPT_RE.match(line) is not None or line.lstrip().startswith("```")


def _prompt_after_blank(lines: list[str], i: int) -> bool:
    """Blank lines between two prompts stay inside one session."""
    while i < len(lines) and not lines[i].strip():
        i += 1
    return i < len(lines) and PROMPT_RE.match(lines[i]) is not None


def indented_blocks(text: str) -> list[str]:
    """Markdown's indented code blocks outside fences (lines indented by 4 spaces or a tab after a blank line),
    dedented and cut before a pasted traceback; sessions (`>>>`) are read elsewhere."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    blank = True
    for line in FENCE_RE.sub("", text).splitlines():
        if line.strip() and line.startswith(("    ", "\t")):
            if current is None and blank:
                current = []
                blocks.append(current)
            if current is not None:  # else an indented line right after prose: the paragraph goes on
                current.append(line)
        elif not line.strip():
            if current is not None:
                current.append("")
        else:
            current = None
        blank = not line.strip()
    return [code for block in blocks if (code := _before_traceback(block)) and ">>>" not in code]


def _before_traceback(block: list[str]) -> str:
    """The block's text (dedented) up to its first paragraph that starts a traceback."""
    kept: list[str] = []
    for number, line in enumerate(block):
        starts_paragraph = number == 0 or not block[number - 1].strip()
        if starts_paragraph and TRACEBACK_HEAD in line:
            break
        kept.append(line)
    return textwrap.dedent("\n".join(kept)).strip("\n")


def acts(code: str) -> bool:
    """Runnable, and does something a reproduction does: imports, assigns or calls (a lone name or word is prose)."""
    if not runnable(code):
        return False
    nodes = ast.walk(ast.parse(code))
    return any(isinstance(n, (ast.Import, ast.ImportFrom, ast.Assign, ast.Call)) for n in nodes)


def commands(text: str) -> list[str]:
    """The code of `python -c "..."` command lines that parses as Python."""
    return [m["code"] for m in COMMAND_RE.finditer(text) if runnable(m["code"])]


def runnable(code: str) -> bool:
    """Parses as Python, is not a pasted traceback, and does something (not only a comment or a literal)."""
    if TRACEBACK_HEAD in code or not code.strip():
        return False
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in tree.body)


def is_expr(code: str) -> bool:
    try:
        ast.parse(code, mode="eval")
    except SyntaxError:
        return False
    return True


def is_traceback(shown: str) -> bool:
    return TRACEBACK_HEAD in shown or bool(re.search(r"^\w*(?:Error|Exception)\b", shown, re.MULTILINE))


def attach_expectations(snippets: list[Snippet], text: str, reading: Reading = Reading()) -> Extracted:
    """Explicit expectations (the expression named) go to the one session line holding that expression; implicit
    ones only when the whole issue shows exactly one value-printing session line (`reading.ordered`: the one
    statement of values, mapped in order onto as many lines, see `ordered_expectations`). Everything else is left
    out."""
    keyed: dict[int, list[Expectation]] = {}
    ambiguous: list[str] = []
    taken: set[tuple[int, int]] = set()
    for match in EXPLICIT_RE.finditer(text):
        spot = _statement_holding(snippets, match["expr"])
        if spot is None or not is_expr(match["value"]):
            ambiguous.append(match[0])
            continue
        taken.add(spot)
        keyed.setdefault(spot[0], []).append(Expectation(spot[1], match["value"].strip(), match[0]))
    lines = [(n, i) for n, s in enumerate(snippets) if s.kind == "session" for i in s.expression_lines()]
    lines = [spot for spot in lines if spot not in taken]
    found, left_out = (
        ordered_expectations(snippets, text, lines, reading) if reading.ordered else _implicit(snippets, text, lines)
    )
    for snippet, expectation in found:
        keyed.setdefault(snippet, []).append(expectation)
    with_expectations = [Snippet(s.kind, s.statements, tuple(keyed.get(n, ()))) for n, s in enumerate(snippets)]
    return Extracted(tuple(with_expectations), (*ambiguous, *left_out))


Mapped = tuple[list[tuple[int, Expectation]], list[str]]
"""Expectations by snippet number, and the statements left out as ambiguous."""


def _implicit(snippets: list[Snippet], text: str, lines: list[tuple[int, int]]) -> Mapped:
    """A backticked value after "expected"/"should return", kept when it is the issue's only one and the issue
    shows exactly one value-printing session line."""
    implicit = [m for m in IMPLICIT_RE.finditer(text) if not _covering(text, m)]
    if len(lines) != 1 or len(implicit) != 1 or not is_expr(implicit[0]["value"]):
        return [], [m[0] for m in implicit]
    (snippet, line), match = lines[0], implicit[0]
    return [(snippet, Expectation(line, match["value"].strip(), match[0]))], []


def ordered_expectations(
    snippets: list[Snippet], text: str, lines: list[tuple[int, int]], reading: Reading = Reading()
) -> Mapped:
    """ "Expected A and B." onto the issue's value-printing session lines in order: sure only when the issue states
    values once (a value followed by more words is a statement too, never mapped), as many as those lines, in
    sessions that show no traceback (an expectation may be about the line that raised), and each value differs from
    the one the user was shown and is of its kind. `reading.by_kind`: one value and several lines maps onto the
    only line the user was shown a literal of the value's kind for (`Expected 3.` after `count(2)` showed `0` and
    `2 in sl` showed `True`). `reading.raised`: in sessions that show one traceback, one stated literal maps onto the
    line that raised when no session line comes after it (`_raising_line`)."""
    starts = [m for m in STATED_RE.finditer(text) if not _covering(text, m) and _value_at(text, m.end())]
    stated = [(m, stated_values(text, m.end())) for m in starts]
    said = [text[m.start() : m.end()] + (", ".join(v) or text[m.end() :].split("\n")[0][:80]) for m, v in stated]
    if not stated:
        return [], []
    values = stated[0][1]
    if len(stated) != 1:
        return [], said
    if reading.raised and (spot := _raising_line(snippets, values)):
        return [(spot[0], Expectation(spot[1], values[0], said[0]))], []
    if _shows_traceback(snippets, lines):
        return [], said
    if len(values) != len(lines):
        spot = _only_of_kind(snippets, lines, values) if reading.by_kind else None
        return ([(spot[0], Expectation(spot[1], values[0], said[0]))], []) if spot else ([], said)
    pairs = list(zip(lines, values, strict=True))
    if not all(_plausible(snippets[n].statements[i].shown, value) for (n, i), value in pairs):
        return [], said
    return [(n, Expectation(i, value, said[0])) for (n, i), value in pairs], []


def _only_of_kind(
    snippets: list[Snippet], lines: list[tuple[int, int]], values: tuple[str, ...]
) -> tuple[int, int] | None:
    """The one line (of several) the user was shown a literal of the kind of the one stated value, and not that
    value; None when there are more values, or none or several such lines."""
    wanted = _literal_kind(values[0]) if len(values) == 1 else None
    if wanted is None:
        return None
    spots = [
        (n, i)
        for n, i in lines
        if _literal_kind(snippets[n].statements[i].shown) == wanted
        and _plausible(snippets[n].statements[i].shown, values[0])
    ]
    return spots[0] if len(spots) == 1 else None


def _raising_line(snippets: list[Snippet], values: tuple[str, ...]) -> tuple[int, int] | None:
    """The expression line a session stopped at with a traceback, when the one value stated is a literal (`'1st'`,
    `[]`, not a name such as `ValueError`), no other session line shows a traceback, and no session line comes after
    it; None otherwise."""
    if len(values) != 1 or _literal_kind(values[0]) is None:
        return None
    sessions = [n for n, s in enumerate(snippets) if s.kind == "session"]
    raising = [(n, i) for n in sessions for i, line in enumerate(snippets[n].statements) if is_traceback(line.shown)]
    if len(raising) != 1:
        return None
    n, i = raising[0]
    statements = snippets[n].statements
    last = n == sessions[-1] and i == len(statements) - 1
    return raising[0] if last and is_expr(statements[i].source) else None


def _shows_traceback(snippets: list[Snippet], lines: list[tuple[int, int]]) -> bool:
    return any(is_traceback(s.shown) for n in {n for n, _ in lines} for s in snippets[n].statements)


def _plausible(shown: str, expected: str) -> bool:
    """The user was shown something else, and (when what they were shown is a literal) of the same kind."""
    if _squash(shown) == _squash(expected):
        return False
    seen, wanted = _literal_kind(shown), _literal_kind(expected)
    return seen is None or seen == wanted


def _literal_kind(code: str) -> str | None:
    try:
        value = ast.literal_eval(code.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if isinstance(value, bool) or value is None:
        return repr(value) if value is None else "bool"
    return "number" if isinstance(value, (int, float, complex)) else type(value).__name__


def stated_values(text: str, start: int) -> tuple[str, ...]:
    """The values stated at `start`: `A`, `A and B`, `A, B and C`, each backticked code or a bare Python literal,
    then the end of the sentence; () when a word or anything else follows."""
    values: list[str] = []
    position = start
    while (value := _value_at(text, position)) is not None:
        values.append(value[0])
        position = value[1]
        separator = SEPARATOR_RE.match(text, position)
        if separator is None or _value_at(text, separator.end()) is None:
            break
        position = separator.end()
    return tuple(values) if values and END_RE.match(text, position) else ()


def _value_at(text: str, start: int) -> tuple[str, int] | None:
    """The value at `start` and where it ends: backticked code that parses, or a bare literal that evaluates."""
    if text.startswith("`", start):
        end = text.find("`", start + 1)
        code = text[start + 1 : end] if end > start else ""
        return (code.strip(), end + 1) if code.strip() and "\n" not in code and is_expr(code) else None
    bare = _literal_end(text, start)
    if bare is None or _literal_kind(text[start:bare]) is None:
        return None
    return text[start:bare], bare


def _literal_end(text: str, start: int) -> int | None:
    """Where a bare literal starting at `start` ends: a quoted string, a bracketed display, a number or a
    constant (one line, at most `MAX_LITERAL_CHARS`)."""
    if (number := NUMBER_RE.match(text, start)) is not None:
        return number.end()
    closing = {"[": "]", "{": "}", "(": ")"}
    stack: list[str] = []
    quote = ""
    for position in range(start, min(len(text), start + MAX_LITERAL_CHARS)):
        char = text[position]
        if char == "\n":
            return None
        if quote:
            quote = "" if char == quote and text[position - 1] != "\\" else quote
        elif char in "'\"":
            quote = char
        elif char in closing:
            stack.append(closing[char])
        elif stack and char == stack[-1]:
            stack.pop()
        elif not stack and position > start:
            return None
        if not quote and not stack:
            return position + 1
    return None


def _covering(text: str, match: re.Match[str]) -> list[re.Match[str]]:
    """Explicit matches that overlap `match` (the same sentence read twice)."""
    return [e for e in EXPLICIT_RE.finditer(text) if e.start() < match.end() and match.start() < e.end()]


def _statement_holding(snippets: list[Snippet], expr: str) -> tuple[int, int] | None:
    """The one session statement whose source is `expr` (spacing aside); None when none or several are."""
    wanted = _squash(expr)
    spots = [
        (n, i)
        for n, s in enumerate(snippets)
        if s.kind == "session"
        for i, st in enumerate(s.statements)
        if _squash(st.source) == wanted
    ]
    return spots[0] if len(spots) == 1 else None


def _squash(code: str) -> str:
    return re.sub(r"\s+", "", code)
