"""One-point mutants of a Python file's localized lines: the zero-token repair candidates (operators as data).

A bug that is one operator, constant, sign, name or statement away from its fix is found by trying each such change
where the issue's evidence can tell (agentless/mutation.py runs them). The operators are the classic ones of
mutation testing: relational, arithmetic and boolean operator replacement, a unary `-` or `not` removed or added, an
integer one off (a returned one negated), a `+ 1`/`- 1` term dropped or added to an index or range bound, a name
swapped for its symmetric partner and an exception for its sibling (both tables in snaffle/data/mutation.toml), one
simple statement deleted. Pure: source text in, mutants out; nothing here runs code.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import cache

from snaffle import data
from snaffle.agentless.normalize import is_docstring

DATA_FILE = "mutation.toml"


@dataclass(frozen=True)
class Operators:
    """snaffle/data/mutation.toml [operators]: the symmetric name pairs and the exception siblings."""

    pairs: tuple[tuple[str, str], ...]
    exceptions: tuple[tuple[str, str], ...]
    max_constant: int
    """Integer constants above this are not stepped (a port number or a mask is not off by one)."""

    def partner(self, word: str) -> str | None:
        return next((b if a == word else a for a, b in self.pairs if word in (a, b)), None)

    def siblings(self, name: str) -> list[str]:
        return [b if a == name else a for a, b in self.exceptions if name in (a, b)]


@cache
def operators() -> Operators:
    """The packaged operator tables (read on first use)."""
    record = data.load_record(Operators, DATA_FILE, "operators")
    return Operators(
        tuple((str(a), str(b)) for a, b in record.pairs),
        tuple((str(a), str(b)) for a, b in record.exceptions),
        record.max_constant,
    )


@dataclass(frozen=True)
class Mutant:
    """One change of one file: bytes `start:end` (of its UTF-8 text) become `after`."""

    path: str
    line: int
    operator: str
    start: int
    end: int
    before: str
    after: str

    def apply(self, text: bytes) -> bytes:
        return text[: self.start] + self.after.encode() + text[self.end :]

    def describe(self) -> str:
        before = " ".join(self.before.split()) or "(nothing)"
        after = " ".join(self.after.split()) or "(deleted)"
        return f"{self.path}:{self.line} {self.operator}: `{_cut(before)}` -> `{_cut(after)}`"


def _cut(text: str, cap: int = 60) -> str:
    return text if len(text) <= cap else text[: cap - 3] + "..."


COMPARE = ("<", "<=", ">", ">=", "==", "!=")
MEMBERSHIP = {"in": "not in", "not in": "in", "is": "is not", "is not": "is"}
ARITHMETIC = {"+": "-", "-": "+", "*": "/", "/": "*", "//": "/", "<<": ">>", ">>": "<<", "&": "|", "|": "&"}
BOOLEAN = {"and": "or", "or": "and"}
OPERATOR_TOKEN = re.compile(
    rb"^[\s()\\]*(<=|>=|==|!=|<<|>>|//|\*\*|not\s+in|is\s+not|and|or|in|is|[<>+\-*/%&|^@])[\s()\\]*$"
)
ATOMIC = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)
DELETABLE = (ast.Return, ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Break, ast.Continue)


class Source:
    """A file's text as UTF-8 bytes, with the offsets `ast` positions point at (its columns count bytes)."""

    def __init__(self, text: str) -> None:
        self.data = text.encode()
        self.starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, column: int) -> int:
        return self.starts[line - 1] + column

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode()


Change = tuple[int, int, str, str]
"""start, end, replacement, operator."""


class FileMutants:
    """One file parsed once: the mutants within any of its line ranges, none twice however the ranges overlap (a
    method lies inside its class)."""

    def __init__(self, text: str, path: str, table: Operators | None = None) -> None:
        self.path, self.source, self.table = path, Source(text), table or operators()
        self.seen: set[bytes] = set()
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            self.nodes: list[ast.AST] = []
            return
        self.names = bound_names(tree)
        self.terms = frozenset(id(n.right) for n in ast.walk(tree) if isinstance(n, ast.BinOp) and _small_int(n.right))
        positioned = [n for n in ast.walk(tree) if getattr(n, "end_lineno", None) is not None]
        self.nodes = sorted(positioned, key=lambda n: (n.lineno, n.col_offset))  # type: ignore[attr-defined]

    def within(self, first: int, last: int, lines: Collection[int] | None = None) -> list[Mutant]:
        """The mutants of nodes inside lines first..last (1-based, inclusive) whose own lines meet `lines` (None:
        any), in source order, each still valid Python and not made before by this file."""
        found = []
        for node in self.nodes:
            start, end = node.lineno, node.end_lineno  # type: ignore[attr-defined]
            if (
                start < first
                or end > last
                or (lines is not None and not any(n in lines for n in range(start, end + 1)))
            ):
                continue
            for begin, stop, after, operator in _changes(node, self.source, self.table, self.names, self.terms):
                line = self.source.data.count(b"\n", 0, begin) + 1
                mutant = Mutant(self.path, line, operator, begin, stop, self.source.text(begin, stop), after)
                result = mutant.apply(self.source.data)
                if result not in self.seen and parses(result):
                    self.seen.add(result)
                    found.append(mutant)
        return found


def mutants(
    text: str,
    path: str,
    spans: Sequence[tuple[int, int]],
    lines: Collection[int] | None = None,
    table: Operators | None = None,
) -> list[Mutant]:
    """Every one-point mutant of the code in `spans` (1-based inclusive line ranges, in the order to try them) whose
    statement touches one of `lines` (None: every line), each still valid Python, none twice."""
    file = FileMutants(text, path, table)
    return [mutant for first, last in spans for mutant in file.within(first, last, lines)]


def parses(data: bytes) -> bool:
    try:
        ast.parse(data)
    except (SyntaxError, ValueError):
        return False
    return True


def bound_names(tree: ast.AST) -> frozenset[str]:
    """Every name the file binds or uses, and the builtins: a swapped name must be one of them (a swap to a name
    nothing defines only raises NameError)."""
    found = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.alias):
            found.add((node.asname or node.name).split(".")[0])
    return frozenset(found)


def _changes(
    node: ast.AST, source: Source, table: Operators, names: frozenset[str], terms: frozenset[int]
) -> Iterator[Change]:
    if isinstance(node, ast.Compare):
        yield from _compare(node, source)
    elif isinstance(node, ast.BinOp):
        yield from _binop(node, source)
    elif isinstance(node, ast.BoolOp):
        yield from _boolop(node, source)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        start, end = source.span(node)
        yield start, end, _operand(node.operand, source), "unary_removed"
    elif isinstance(node, ast.Constant):
        yield from _constant(node, source, table, id(node) in terms)
    elif isinstance(node, (ast.Name, ast.Attribute)):
        yield from _swap(node, source, table, names)
    elif isinstance(node, ast.ExceptHandler) and node.type is not None:
        yield from _exception(node.type, source, table)
    elif isinstance(node, (ast.Slice, ast.Subscript, ast.Call)):
        yield from _bounds(node, source)
    if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        yield from _negated(node.test, source)
    if isinstance(node, ast.Return) and _positive_int(node.value):
        start, end = source.span(node.value)  # type: ignore[arg-type]
        yield start, end, f"-{source.text(start, end)}", "sign_added"  # `unary_removed`'s inverse: a cmp's -1 and 1
    if isinstance(node, DELETABLE):
        yield from _deleted(node, source)


def _positive_int(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value > 0


def _gap_operator(source: Source, left: ast.AST, right: ast.AST) -> tuple[int, int, str] | None:
    """The operator token between two operands (parentheses and line breaks around it allowed)."""
    start, end = source.span(left)[1], source.span(right)[0]
    match = OPERATOR_TOKEN.match(source.data[start:end])
    if match is None:
        return None
    token = " ".join(match.group(1).decode().split())
    return start + match.start(1), start + match.end(1), token


def _compare(node: ast.Compare, source: Source) -> Iterator[Change]:
    operands = [node.left, *node.comparators]
    for left, right in zip(operands, operands[1:], strict=False):
        found = _gap_operator(source, left, right)
        if found is None:
            continue
        start, end, token = found
        if token in MEMBERSHIP:
            yield start, end, MEMBERSHIP[token], "membership"
        elif token in COMPARE:
            for other in COMPARE:
                if other != token:
                    yield start, end, other, "relational"


def _binop(node: ast.BinOp, source: Source) -> Iterator[Change]:
    found = _gap_operator(source, node.left, node.right)
    if found is not None and found[2] in ARITHMETIC:
        yield found[0], found[1], ARITHMETIC[found[2]], "arithmetic"
    if isinstance(node.op, (ast.Add, ast.Sub)) and _small_int(node.right):
        start, end = source.span(node)
        yield start, end, source.text(*source.span(node.left)), "term_dropped"


def _small_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value in (1, 2)


def _boolop(node: ast.BoolOp, source: Source) -> Iterator[Change]:
    for left, right in zip(node.values, node.values[1:], strict=False):
        found = _gap_operator(source, left, right)
        if found is not None and found[2] in BOOLEAN:
            yield found[0], found[1], BOOLEAN[found[2]], "boolean"


def _operand(node: ast.AST, source: Source) -> str:
    text = source.text(*source.span(node))
    return text if isinstance(node, ATOMIC) else f"({text})"


def _constant(node: ast.Constant, source: Source, table: Operators, term: bool) -> Iterator[Change]:
    """True and False swapped; an integer one up and one down (a term's step to 0 is the term dropped: not twice)."""
    start, end = source.span(node)
    if type(node.value) is bool:
        yield start, end, str(not node.value), "constant"
    elif type(node.value) is int and 0 <= node.value <= table.max_constant:
        for value in (node.value + 1, node.value - 1):
            if not (term and value == 0):
                yield start, end, str(value) if value >= 0 else f"({value})", "constant"


def _swap(node: ast.Name | ast.Attribute, source: Source, table: Operators, names: frozenset[str]) -> Iterator[Change]:
    name = node.id if isinstance(node, ast.Name) else node.attr
    end = source.span(node)[1]
    start = end - len(name.encode())
    if source.text(start, end) != name:
        return
    parts = name.split("_")
    for i, part in enumerate(parts):
        partner = table.partner(part)
        swapped = "_".join([*parts[:i], partner, *parts[i + 1 :]]) if partner is not None else None
        if swapped is not None and (isinstance(node, ast.Attribute) or swapped in names):
            yield start, end, swapped, "name_swapped"


def _exception(node: ast.AST, source: Source, table: Operators) -> Iterator[Change]:
    names = node.elts if isinstance(node, ast.Tuple) else [node]
    present = {n.id for n in names if isinstance(n, ast.Name)}
    for name in names:
        if not isinstance(name, ast.Name):
            continue
        start, end = source.span(name)
        for sibling in table.siblings(name.id):
            if sibling in present:
                continue
            yield start, end, sibling, "exception_swapped"
            widened = f"{name.id}, {sibling}" if isinstance(node, ast.Tuple) else f"({name.id}, {sibling})"
            yield start, end, widened, "exception_widened"


def _bounds(node: ast.Slice | ast.Subscript | ast.Call, source: Source) -> Iterator[Change]:
    """A slice bound, an index or a `range` argument negated, or one added to or taken from it."""
    if isinstance(node, ast.Slice):
        targets = [b for b in (node.lower, node.upper) if b is not None]
    elif isinstance(node, ast.Subscript):
        targets = [] if isinstance(node.slice, (ast.Slice, ast.Tuple)) else [node.slice]
    else:
        targets = list(node.args) if isinstance(node.func, ast.Name) and node.func.id == "range" else []
    for bound in targets:
        start, end = source.span(bound)
        text = source.text(start, end)
        negated = isinstance(bound, ast.UnaryOp) and isinstance(bound.op, ast.USub)
        zero = isinstance(bound, ast.Constant) and bound.value in (0, None)
        if not negated and not zero and not isinstance(node, ast.Call):
            yield start, end, f"-{_operand(bound, source)}", "sign_added"
        if not isinstance(bound, ast.Constant):
            yield start, end, f"{text} + 1", "term_added"
            yield start, end, f"{text} - 1", "term_added"


def _negated(test: ast.AST, source: Source) -> Iterator[Change]:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return  # removing the `not` is the unary operator's mutant
    start, end = source.span(test)
    yield start, end, f"not {_operand(test, source)}", "condition_negated"


def _deleted(node: ast.stmt, source: Source) -> Iterator[Change]:
    """A simple statement alone on its lines, not a docstring, not its block's only statement."""
    if is_docstring(node):
        return
    start, end = source.span(node)
    line_start, line_end = source.starts[node.lineno - 1], source.starts[node.end_lineno or node.lineno]
    if source.data[line_start:start].strip() or source.data[end:line_end].strip(b" \t\r\n;"):
        return
    yield line_start, line_end, "", "statement_deleted"
