"""Parsing one Python source with tree-sitter: its `Entity` records (module, classes, functions, methods and, when
`EntityOptions` say so, module- and class-level assignments) in source order, its syntax errors, and `innermost`,
the entity that holds a line."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from tree_sitter import Language, Node, Parser, Tree

from snaffle import data

DEFINITION_TYPES = frozenset({"function_definition", "class_definition"})
DECORATED = "decorated_definition"
CONTAINER_TYPES = frozenset(
    """module block if_statement elif_clause else_clause try_statement except_clause except_group_clause
    finally_clause for_statement while_statement with_statement match_statement case_clause ERROR""".split()
)
"""Statements whose blocks may hold definitions (conditional defs, try/except imports), and error nodes."""
DESCEND_TYPES = CONTAINER_TYPES | DEFINITION_TYPES | {DECORATED}
SKIPPED_IN_DOCSTRING_SEARCH = frozenset({"comment"})
DEFINITION_KEYWORDS = (b"def", b"class")
ASSIGNMENT_STATEMENT = "expression_statement"
ASSIGNMENT_KINDS = frozenset({"module", "class"})
"""Assignments are entities only where they bind a module's or a class's name, never a function's local."""
VALUE_CUT = " ..."
OVERLOAD_DECORATOR = re.compile(r"^@(\w+\.)*overload\b", re.MULTILINE)
INDEX_DATA = "index.toml"


@dataclass(frozen=True, slots=True)
class EntityOptions:
    """Which statements besides classes and functions become entities (snaffle/data/index.toml [entities])."""

    assignments: bool
    fold_overloads: bool
    value_head_chars: int

    @property
    def key(self) -> str:
        """A short name of these options, part of every cache key that holds entities."""
        return f"a{int(self.assignments)}o{int(self.fold_overloads)}v{self.value_head_chars}"


@cache
def entity_options() -> EntityOptions:
    """The packaged options (read on first use, never at import)."""
    return data.load_record(EntityOptions, INDEX_DATA, "entities")


@dataclass(frozen=True, slots=True)
class Entity:
    """One module, class, function or method of a Python file."""

    path: str
    qualname: str
    kind: str
    start_line: int
    end_line: int
    start_byte: int
    end_byte: int
    body_start_line: int
    indent: str
    signature: str
    doc: str
    occurrence: int = 0
    """0 when the qualname is unique in its file, else its 1-based rank among the same-named definitions."""

    @property
    def name(self) -> str:
        """The last part of the qualname, as a def or class statement spells it (`Class.method@2` → `method`)."""
        return self.qualname.rsplit(".", 1)[-1].split("@")[0]

    @property
    def selector(self) -> str:
        if not self.qualname:
            return self.path
        suffix = f"@{self.occurrence}" if self.occurrence else ""
        return f"{self.path}::{self.qualname}{suffix}"


@dataclass(frozen=True, slots=True)
class ParsedSource:
    """The entities of one source text, with its count of syntax errors and its tree."""

    entities: tuple[Entity, ...]
    parse_errors: int
    decode_errors: bool
    lines: int
    tree: Tree


@cache
def python_language() -> Language:
    import tree_sitter_python

    return Language(tree_sitter_python.language())


def parse_source(
    path: str, source: bytes, previous: tuple[bytes, Tree] | None = None, options: EntityOptions | None = None
) -> ParsedSource:
    """Index one source text: entities in source order (module first) and its syntax errors. `previous`,
    an earlier version of the text and its tree, makes the parse incremental; `options` default to the data's."""
    options = options or entity_options()
    tree = _reparse(source, *previous) if previous is not None else Parser(python_language()).parse(source)
    root = tree.root_node
    rows = [_module_row(source, root)]
    rows.extend(_row(source, options, *found) for found in _walk(root, source, options.assignments))
    if options.fold_overloads:
        rows = _fold_overloads(rows)
    entities = tuple(Entity(path, *row) for row in _number_duplicates(rows))
    errors = count_parse_errors(root)
    return ParsedSource(entities, errors, _has_decode_errors(source), _line_count(source), tree)


def _reparse(source: bytes, old_source: bytes, old_tree: Tree) -> Tree:
    """Parse `source` reusing the tree of `old_source`, told the one byte range in which they differ."""
    start, old_end, new_end = _changed_span(old_source, source)
    old_tree.edit(
        start_byte=start,
        old_end_byte=old_end,
        new_end_byte=new_end,
        start_point=_point(old_source, start),
        old_end_point=_point(old_source, old_end),
        new_end_point=_point(source, new_end),
    )
    return Parser(python_language()).parse(source, old_tree)


def _changed_span(old: bytes, new: bytes) -> tuple[int, int, int]:
    """(start, old end, new end): the bytes outside old[start:old_end] and new[start:new_end] are equal."""
    limit = min(len(old), len(new))
    start = _common_length(limit, lambda n: old[:n] == new[:n])
    suffix = _common_length(limit - start, lambda n: old[len(old) - n :] == new[len(new) - n :])
    return start, len(old) - suffix, len(new) - suffix


def _common_length(limit: int, equal: Callable[[int], bool]) -> int:
    """The largest n <= limit with equal(n), for a predicate true up to some n and false after it."""
    low, high = 0, limit
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if equal(middle) else (low, middle - 1)
    return low


def _point(source: bytes, offset: int) -> tuple[int, int]:
    """(row, byte column) of a byte offset, as tree-sitter counts them."""
    return source.count(b"\n", 0, offset), offset - (source.rfind(b"\n", 0, offset) + 1)


def _walk(root: Node, source: bytes, assignments: bool) -> Iterator[tuple[Node, Node, str, str]]:
    """(outer node incl. decorators, definition, qualname, kind) for every class and def, in source order, and
    with `assignments` (statement, assignment, qualname, "assignment") for each module- or class-level `NAME = ...`."""
    descend = DESCEND_TYPES | {ASSIGNMENT_STATEMENT} if assignments else DESCEND_TYPES
    stack: list[tuple[Node, str, str]] = [(root, "", "module")]
    while stack:
        node, prefix, parent_kind = stack.pop()
        if node.type == ASSIGNMENT_STATEMENT:
            if parent_kind in ASSIGNMENT_KINDS and (found := _assigned_name(node)) is not None:
                yield node, found[0], prefix + found[1], "assignment"
            continue
        definition = node.child_by_field_name("definition") if node.type == DECORATED else node
        name = definition.child_by_field_name("name") if definition is not None else None
        if definition is None or name is None or definition.type not in DEFINITION_TYPES:
            children, inner_prefix, inner_kind = node.children, prefix, parent_kind
        else:
            kind = _kind(definition.type, parent_kind)
            qualname = prefix + _text(name)
            yield node, definition, qualname, kind
            if not _may_hold_definitions(source, definition, kind):
                continue
            children, inner_prefix, inner_kind = definition.children, qualname + ".", kind
        stack.extend((c, inner_prefix, inner_kind) for c in reversed(children) if c.type in descend)


def _assigned_name(statement: Node) -> tuple[Node, str] | None:
    """(the assignment, its one target name) for `NAME = ...`, `NAME: T = ...`, `NAME: T` or `NAME = OTHER = ...`
    (the first name); None for any other statement (a call, a tuple or attribute target, `+=`)."""
    if statement.named_child_count != 1:
        return None
    assignment = statement.named_children[0]
    if assignment.type != "assignment":
        return None
    target = assignment.child_by_field_name("left")
    if target is None or target.type != "identifier":
        return None
    return assignment, _text(target)


def _may_hold_definitions(source: bytes, definition: Node, kind: str) -> bool:
    """Classes do; a function only if its body has the word `def` or `class` (a false positive such as
    `default` merely costs a visit) or it did not parse cleanly."""
    body = definition.child_by_field_name("body")
    if kind == "class" or body is None or definition.has_error:
        return True
    return any(source.find(keyword, body.start_byte, body.end_byte) >= 0 for keyword in DEFINITION_KEYWORDS)


def _kind(node_type: str, parent_kind: str) -> str:
    if node_type == "class_definition":
        return "class"
    return "method" if parent_kind == "class" else "function"


def _row(source: bytes, options: EntityOptions, outer: Node, node: Node, qualname: str, kind: str) -> tuple[Any, ...]:
    if kind == "assignment":
        return _assignment_row(source, outer, qualname, options.value_head_chars)
    return _definition_row(source, outer, node, qualname, kind)


def _assignment_row(source: bytes, statement: Node, qualname: str, head_chars: int) -> tuple[Any, ...]:
    """An assignment's row: its signature is the statement's first line, cut to `head_chars` (a 200-line table
    shows as `NAME = {` and a mark that more follows)."""
    text = _decode(source[statement.start_byte : statement.end_byte])
    first, _, rest = text.partition("\n")
    head = first.rstrip()
    cut = len(head) > head_chars or bool(rest.strip())
    signature = (head[:head_chars].rstrip() + VALUE_CUT) if cut else head
    row = statement.start_point.row
    indent = _indent(source, statement.start_byte)
    end = _last_line(statement)
    return (qualname, "assignment", row, end, statement.start_byte, statement.end_byte, row, indent, signature, "")


def _fold_overloads(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Drop the `typing.overload` stubs of a function that has an implementation: they only declare it."""
    implemented = {row[0] for row in rows if _callable(row) and not OVERLOAD_DECORATOR.search(row[8])}
    return [row for row in rows if not (_callable(row) and row[0] in implemented and OVERLOAD_DECORATOR.search(row[8]))]


def _callable(row: tuple[Any, ...]) -> bool:
    return row[1] in ("function", "method")


def _definition_row(source: bytes, outer: Node, node: Node, qualname: str, kind: str) -> tuple[Any, ...]:
    body = node.child_by_field_name("body")
    indent = _indent(source, outer.start_byte)
    header_end = _header_end(source, node, body)
    signature = _dedent(_decode(source[outer.start_byte : header_end]), indent)
    body_line = body.start_point.row if body is not None else _last_line(node)
    return (
        qualname,
        kind,
        outer.start_point.row,
        _last_line(outer),
        outer.start_byte,
        outer.end_byte,
        body_line,
        indent,
        signature,
        _docstring(body),
    )


def _module_row(source: bytes, root: Node) -> tuple[Any, ...]:
    last = max(0, _line_count(source) - 1)
    return ("", "module", 0, last, 0, len(source), 0, "", "", _docstring(root))


def _number_duplicates(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Append each row's occurrence: 0 for a unique qualname, else 1, 2, ... in source order."""
    totals = Counter(row[0] for row in rows)
    seen: Counter[str] = Counter()
    numbered = []
    for row in rows:
        seen[row[0]] += 1
        numbered.append((*row, seen[row[0]] if totals[row[0]] > 1 else 0))
    return numbered


def _header_end(source: bytes, node: Node, body: Node | None) -> int:
    """End byte of the header: its ':', else its last token before the body; a broken header ends with
    the line it breaks on, since error recovery may have swallowed the definitions that follow."""
    end = node.start_byte
    for child in node.children:
        if body is not None and child.start_byte >= body.start_byte:
            break
        if child.has_error:
            line_end = source.find(b"\n", child.start_byte)
            return len(source) if line_end < 0 else line_end
        if child.type == ":":
            return child.end_byte
        if not child.is_extra:
            end = child.end_byte
    return end


def _docstring(body: Node | None) -> str:
    """First non-blank line of the docstring opening `body`, or ""."""
    if body is None:
        return ""
    for statement in body.children:
        if statement.type in SKIPPED_IN_DOCSTRING_SEARCH:
            continue
        if statement.type != "expression_statement" or statement.named_child_count != 1:
            return ""
        string = statement.named_children[0]
        if string.type == "concatenated_string":
            string = string.named_children[0]
        return _string_first_line(string) if string.type == "string" else ""
    return ""


def _string_first_line(string: Node) -> str:
    parts = string.children
    if len(parts) < 2:
        return ""
    raw = string.text or b""
    text = raw[parts[0].end_byte - string.start_byte : parts[-1].start_byte - string.start_byte]
    for line in _decode(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def count_parse_errors(root: Node) -> int:
    """Number of ERROR and MISSING nodes under `root` (0 = clean); visits only subtrees that hold errors."""
    count = 0
    stack = [root] if root.has_error else []
    while stack:
        node = stack.pop()
        count += node.is_error or node.is_missing
        stack.extend(child for child in node.children if child.has_error)
    return count


def _text(node: Node) -> str:
    return _decode(node.text or b"")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _has_decode_errors(source: bytes) -> bool:
    try:
        source.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _line_count(source: bytes) -> int:
    return source.count(b"\n") + (1 if source and not source.endswith(b"\n") else 0)


def _last_line(node: Node) -> int:
    row, column = node.end_point
    return row - 1 if column == 0 and row > node.start_point.row else row


def _indent(source: bytes, start: int) -> str:
    line_start = source.rfind(b"\n", 0, start) + 1
    prefix = _decode(source[line_start:start])
    return prefix[: len(prefix) - len(prefix.lstrip())]


def _dedent(text: str, indent: str) -> str:
    if not indent:
        return text
    lines = text.split("\n")
    return "\n".join([lines[0], *(line.removeprefix(indent) for line in lines[1:])])


def innermost(entities: Iterable[Entity], line: int) -> Entity | None:
    """The most deeply nested entity whose span holds `line` (the module when nothing else does)."""
    best: Entity | None = None
    for entity in entities:
        if entity.start_line <= line <= entity.end_line:
            if best is None or entity.start_line >= best.start_line:
                best = entity
    return best
