"""Line repair: the harness names each line, the model rewrites that one line, the issue's evidence screens.

A weak model finds the wrong line of a function poorly (the `line_diff` answer form: 3 of 24 A/B tasks) and
rewrites whole definitions expensively, but told which line is wrong it often corrects it in a dozen tokens
(session 31, 1.5B: each statement of the planted function called wrong in turn, one greedy call each; some answer
passed the hidden test in 9 of the 17 A/B tasks tried). So the search over lines is the harness's:
each statement of the first-ranked function (`line_entities`: of the functions among the first N candidates) that
the screening evidence ran is shown as "this line is wrong" (or, in an insert pass, "a line is missing right after
this line"), one call each, in a conversation whose prefix (the issue, the code) stays the same so the server
reuses it. Each answer becomes a `Mutant` (agentless/mutants.py) screened like mutation's (agentless/mutation.py):
a correct line that was never wrong changes behaviour, and the evidence rejects it.

Pure: source text in, spans, prompts and mutants out; the pipeline makes the calls.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Collection
from dataclasses import dataclass
from functools import cache

from snaffle import data, prompts
from snaffle.agentless.config import token_bound
from snaffle.agentless.mutants import Mutant, Source, parses
from snaffle.agentless.normalize import is_docstring
from snaffle.index.parse import Entity
from snaffle.primitives.extract import code_blocks
from snaffle.types import Message

DATA_FILE = "agentless.toml"
OPERATOR = "line repair"
INSERT_OPERATOR = "line insert"


@dataclass(frozen=True)
class LineLimits:
    """snaffle/data/agentless.toml [line_repair]: how many lines are asked about, and each answer's bound."""

    max_lines: int
    """Statements asked about, in file order (the run's turn cap may allow fewer: the samples keep theirs)."""
    chars_per_token: float
    token_factor: float
    token_slack: int

    def max_tokens(self, span: str) -> int:
        """Tokens enough for a corrected `span`, grown by the factor, plus the fence and slack."""
        return token_bound(len(span.strip()), self.chars_per_token, self.token_factor, self.token_slack)


@cache
def line_limits() -> LineLimits:
    return data.load_record(LineLimits, DATA_FILE, "line_repair")


@dataclass(frozen=True)
class Span:
    """One statement of a file: 1-based lines `start`..`end` (a compound statement's header only), its text."""

    path: str
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Target:
    """One statement to ask about, with its file's source, its function's code (shown) and that function's
    selector."""

    span: Span
    source: str
    code: str
    selector: str


def statement_spans(
    source: str, entity: Entity, executed: Collection[int] | None = None, nested: bool = False
) -> list[Span]:
    """The statements of `entity`'s body in file order: a simple statement whole, a compound one's header (`if`,
    `for`, `try:`, `except ...:`), its docstring left out; only those with a line in `executed` when given. A nested
    function's statements (not its `def`) are the entity's too when `nested`: its code is shown with them."""
    lines = source.split("\n")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    node = _defined_at(tree, entity.start_line + 1)
    if node is None:
        return []
    found = sorted(set(_statements(node.body, nested)))
    ran = set(executed) if executed is not None else None
    return [
        Span(entity.path, a, b, "\n".join(lines[a - 1 : b]))
        for a, b in found
        if ran is None or ran.intersection(range(a, b + 1))
    ]


def _defined_at(tree: ast.AST, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if line in (first, node.lineno):
                return node
    return None


def _statements(body: list[ast.stmt], nested: bool = False) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += _statements(statement.body, nested) if nested else []
            continue
        if is_docstring(statement) or isinstance(statement, ast.ClassDef):
            continue
        blocks = _blocks(statement)
        if not blocks:
            found.append((statement.lineno, statement.end_lineno or statement.lineno))
            continue
        found.append((statement.lineno, max(statement.lineno, blocks[0][0].lineno - 1)))
        for block in blocks:
            found += _statements(block, nested)
        for handler in getattr(statement, "handlers", []):
            found.append((handler.lineno, max(handler.lineno, handler.body[0].lineno - 1)))
            found += _statements(handler.body, nested)
    return found


def _blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
    return [b for f in ("body", "orelse", "finalbody") if (b := getattr(statement, f, None))]


QUESTIONS = {"replace": "line_repair.md", "insert": "line_insert.md"}
"""The prompt of each question about a line: it is wrong (its correction replaces it), or a line is missing right
after it (the answer is inserted there)."""


def messages(issue: str, code: str, span: Span, kind: str = "replace") -> list[Message]:
    """The call for one line: the issue and the code first (the same for every line of the entity, so the server
    reuses their KV cache), the line and the question last."""
    template = prompts.load(QUESTIONS[kind])
    line = textwrap.dedent(span.text).strip()
    text = prompts.render(template, issue=issue.strip(), code=code, line=line)
    system = prompts.load("line_repair_system.md").strip()
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def mutant(source: str, span: Span, answer: str, kind: str = "replace", header_only: bool = False) -> Mutant | None:
    """The answer's first code block in the span's place (`replace`) or on new lines right after it (`insert`: at
    the indentation of the block a header opens, else the span's), re-indented; None when it is empty, changes
    nothing, leaves the file unparsable, or the span is not `source`'s. `header_only`: a compound statement's
    header asked about is replaced by the answer's header alone (`header_answer`)."""
    block = textwrap.dedent(code_blocks(answer)[0]).strip("\n")
    lines = source.split("\n")
    if not block.strip() or "\n".join(lines[span.start - 1 : span.end]) != span.text:
        return None
    if header_only and kind == "replace" and (cut := header_answer(span.text, block)) is not None:
        block = cut
    starts = Source(source).starts
    if kind == "insert":
        following = next((line for line in lines[span.end :] if line.strip()), "")
        opens = header_lines(span.text) is not None
        added = _indented(block, _indent(following) if opens else _indent(span.text))
        if added.split() in (span.text.split(), following.split()):
            return None  # the answer repeats the line it was shown or the one after it
        at = starts[span.end]
        change = Mutant(span.path, span.end + 1, INSERT_OPERATOR, at, at, "", added + "\n")
    else:
        after = _indented(block, _indent(span.text))
        if after.split() == span.text.split():
            return None
        at = starts[span.start - 1]
        change = Mutant(span.path, span.start, OPERATOR, at, at + len(span.text.encode()), span.text, after)
    return change if parses(change.apply(source.encode())) else None


HEADER_CONTEXTS = ("", "try:\n    pass\n", "if x:\n    pass\n")
"""What a header may need before it to parse: nothing (`if`, `for`, `try:`), a `try` (`except`, `finally`), an `if`
(`elif`, `else`)."""


def header_lines(code: str) -> int | None:
    """How many of `code`'s first lines make a compound statement's header (they parse with an indented `pass`
    after them); None when no prefix is one (a simple statement)."""
    lines = textwrap.dedent(code).split("\n")
    for count in range(1, len(lines) + 1):
        head = "\n".join(lines[:count])
        if any(parses(f"{before}{head}\n    pass\n".encode()) for before in HEADER_CONTEXTS):
            return count
    return None


def header_answer(span: str, block: str) -> str | None:
    """When `span` is a compound statement's header: the answer's own header followed by the span's lines after
    its header (the comments standing between it and the block), dedented as `span` is; None when `span` is no
    header (nothing to cut) or the answer is none (it cannot replace one)."""
    asked, answered = header_lines(span), header_lines(block)
    if asked is None or answered is None:
        return None
    kept = textwrap.dedent(span).split("\n")[asked:]
    return "\n".join(block.split("\n")[:answered] + kept)


def _indent(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def _indented(block: str, indent: str) -> str:
    return "\n".join(indent + line if line.strip() else "" for line in block.split("\n"))
