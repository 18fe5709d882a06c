"""`edit_entity`: exact search/replace inside one entity, or the entity's whole new text; gated before it lands.

Nothing is written until the test-file guard, the evidence gate and the lint gate have passed.
"""

from __future__ import annotations

import ast
import difflib
import re
import textwrap
from pathlib import Path

from snaffle.exceptions import ToolFailure
from snaffle.gates import evidence_gate, guard_test_files, lint_gate
from snaffle.index.parse import Entity
from snaffle.primitives.extract import code_blocks, isolate_definition, pick_block
from snaffle.primitives.reader import RepoView
from snaffle.types import ALL_MECHANISMS, GateResult, Mechanisms, ToolRun
from snaffle.workspace import PathEscape

DIFF_CONTEXT = 2
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class GateFailure(ToolFailure):
    """A gate refused the edit; the repository is unchanged."""


def _given(field: str | None) -> str | None:
    """A blank field is no answer: weak models fill every field of the schema (`"new_source": ""` beside a search
    and replace)."""
    return field if field is not None and field.strip() else None


def _form_error(search: str | None, replace: str | None, new_source: str | None) -> str:
    """What is wrong with the fields of an `edit_entity` call that is neither form."""
    if new_source is not None:
        return "give either search and replace, or new_source, not both"
    if search is not None:
        return "search without replace: give the text that replaces it (empty to delete it)"
    if replace:
        return "replace without search: give the exact text it replaces"
    return "give either search and replace, or new_source"


class UnparsableAnswer(ToolFailure):
    """The answer's code does not parse."""


class EntityEditor:
    """Applies `edit_entity` calls to the files of one `RepoView`."""

    def __init__(self, view: RepoView, mechanisms: Mechanisms = ALL_MECHANISMS) -> None:
        self.view = view
        self.guard_tests, self.require_evidence = mechanisms.test_file_guard, mechanisms.evidence_gate
        self.lint = mechanisms.lint_gate

    def edit_entity(
        self, selector: str, search: str | None = None, replace: str | None = None, new_source: str | None = None
    ) -> ToolRun:
        """Change one entity: replace an exact snippet inside it, or give its whole new text.

        Args:
          selector: the entity to change, as read_entity showed it (file path::name)
          search: exact text inside the entity to replace; must occur exactly once
          replace: the text that replaces `search`
          new_source: instead of search/replace, the complete new definition of the entity
        """
        entity = self.view.entity(selector)
        self._check(entity)
        text = self._text(entity.path)
        lines = text.splitlines(keepends=True)
        old = "".join(lines[entity.start_line : entity.end_line + 1])
        notes: list[GateResult] = []
        search, new_source = _given(search), _given(new_source)
        if new_source is not None and search is None and not replace:
            new = self._rewrite(entity, old, new_source, notes)
        elif search is not None and replace is not None and new_source is None:
            new = replace_once(entity, old, search, replace)
        else:
            raise ToolFailure(_form_error(search, replace, new_source))
        after = "".join(lines[: entity.start_line]) + new + "".join(lines[entity.end_line + 1 :])
        if self.lint:
            after = self._linted(entity.path, text, after, new_source if search is None else None, notes)
        self._target(entity.path).write_text(after, encoding="utf-8")
        self.view.index.refresh(entity.path)
        self.view.edits += 1
        return ToolRun(f"edited {entity.selector}:\n{entity_diff(old, new)}", tuple(notes))

    def _check(self, entity: Entity) -> None:
        if self.guard_tests:
            _gate(guard_test_files(entity.path), [])
        if self.require_evidence:
            _gate(evidence_gate(entity.selector, self.view.shown), [])

    def _rewrite(self, entity: Entity, old: str, new_source: str, notes: list[GateResult]) -> str:
        """`rewrite`; when the answer's block does not parse as a whole, its definition of the entity alone (noted
        as an `edit_recovery`)."""
        try:
            return rewrite(entity, old, new_source)
        except UnparsableAnswer:
            name = entity.name
            alone = isolate_definition(pick_block(new_source, name), name)
            if alone is None:
                raise
            new = rewrite(entity, old, alone)
            note = f"the answer's block does not parse as a whole; its definition of {name} alone does"
            notes.append(GateResult("edit_recovery", True, note))
            return new

    def _linted(self, path: str, before: str, after: str, answer: str | None, notes: list[GateResult]) -> str:
        """`after` if it passes the lint gate; else, for a rewrite whose answer imported names the file lacks, the
        file with those imports added when that passes (noted as an `edit_recovery`); else the gate's refusal."""
        verdict = lint_gate(path, before, after)
        imports = answer_imports(answer, after) if answer is not None and not verdict.ok else []
        if imports:
            recovered = insert_imports(after, imports)
            if lint_gate(path, before, recovered).ok:
                notes.append(GateResult("edit_recovery", True, "added the answer's imports: " + "; ".join(imports)))
                return recovered
        _gate(verdict, notes)
        return after

    def _target(self, path: str) -> Path:
        """The file to write, checked again at the moment of writing: never a symlink out of the repository."""
        try:
            return self.view.workspace.resolve(path)
        except PathEscape as exc:
            raise ToolFailure(str(exc)) from exc

    def _text(self, path: str) -> str:
        try:
            return self._target(path).read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolFailure(f"{path} is not valid UTF-8; editing refused") from exc


def _gate(result: GateResult, notes: list[GateResult]) -> None:
    """Refuse the edit when the gate did: the refusal carries the notes taken so far and the gate's verdict."""
    if not result.ok:
        raise GateFailure(result.reason, (*notes, result))


def replace_once(entity: Entity, old: str, search: str, replace: str) -> str:
    """Replace the single occurrence of `search` in the entity text; otherwise say how many and what's close."""
    if not search:
        raise ToolFailure("search is empty; copy the exact lines to change from read_entity")
    count = old.count(search)
    if count == 1:
        return old.replace(search, replace, 1)
    if count > 1:
        raise ToolFailure(f"search occurs {count} times in {entity.selector}; include more surrounding lines")
    candidate = nearest_candidate(old, search)
    hint = f"\nthe closest text in the entity is:\n{candidate}" if candidate else ""
    raise ToolFailure(f"search was not found in {entity.selector} (0 matches){hint}")


def nearest_candidate(text: str, search: str) -> str:
    """The run of lines in `text` most like `search`, comparing with whitespace ignored."""
    lines = text.splitlines()
    size = max(1, len(search.strip("\n").splitlines()))
    wanted = " ".join(search.split())
    best, best_score = "", 0.0
    for start in range(max(1, len(lines) - size + 1)):
        chunk = "\n".join(lines[start : start + size])
        score = difflib.SequenceMatcher(None, " ".join(chunk.split()), wanted).ratio()
        if score > best_score:
            best, best_score = chunk, score
    return best if best_score >= 0.5 else ""


def rewrite(entity: Entity, old: str, new_source: str) -> str:
    """The entity's new text from an answer: its def/class (or, for an assignment, its `NAME = ...` statement)
    taken out, checked and re-indented to fit."""
    name = entity.name
    code = pick_block(new_source, name)
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise UnparsableAnswer(f"new_source does not parse: {exc.msg} (line {exc.lineno} of new_source)") from exc
    if entity.kind == "assignment":
        return _indented(_segment(code, assignment_statement(tree, entity)), entity.indent)
    node = _definition(tree, name, entity)
    segment = _segment(code, node)
    if not getattr(node, "decorator_list", None) and old.lstrip().startswith("@"):
        segment = _decorators(old) + segment
    segment = keep_docstring(old, segment)
    _check_kept(entity, old, node)
    return _indented(segment, entity.indent)


def _indented(segment: str, indent: str) -> str:
    body = textwrap.indent(segment, indent, lambda line: bool(line.strip()))
    return body if body.endswith("\n") else body + "\n"


def assignment_statement(tree: ast.Module, entity: Entity) -> ast.stmt:
    """The answer's statement that assigns the entity's name where the entity lives: at the top level (the usual
    answer: the table alone), else in the body of a class of the entity's owner's name (the answer gave the class)."""
    name, owner = entity.name, entity.qualname.split("@")[0].rpartition(".")[0].rpartition(".")[2]
    scopes: list[list[ast.stmt]] = [tree.body]
    scopes += [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and owner and n.name == owner]
    for body in scopes:
        found = next((node for node in _flat(body) if name in _assigned(node)), None)
        if found is not None:
            return found
    raise ToolFailure(f"new_source must assign {name} (`{name} = ...`) at the top level; renaming is not allowed")


def _flat(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of a body, those of its if/try blocks included (never a function's)."""
    found: list[ast.stmt] = []
    for node in body:
        found.append(node)
        if isinstance(node, ast.If | ast.Try):
            for block in (node.body, node.orelse, getattr(node, "finalbody", [])):
                found += _flat(block)
            for handler in getattr(node, "handlers", []):
                found += _flat(handler.body)
    return found


def _assigned(node: ast.stmt) -> set[str]:
    """The one name `NAME = ...`, `NAME: T = ...` or `NAME = OTHER = ...` binds first; empty for anything else."""
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return {node.targets[0].id}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def keep_docstring(old: str, segment: str) -> str:
    """The rewritten definition with the old docstring put back when the answer left it out (a weak model spends
    fewer output tokens when it may skip docstrings; a fix never needs to delete one)."""
    dedented = textwrap.dedent(old)
    try:
        old_node, new_node = _first_definition(dedented), _first_definition(segment)
    except SyntaxError:
        return segment
    if old_node is None or new_node is None or ast.get_docstring(new_node) is not None:
        return segment
    if ast.get_docstring(old_node) is None or new_node.body[0].lineno == new_node.lineno:
        return segment
    doc = old_node.body[0]
    old_lines = dedented.splitlines(keepends=True)[doc.lineno - 1 : doc.end_lineno]
    pad = " " * new_node.body[0].col_offset
    moved = [_reindented(line, doc.col_offset, pad) for line in old_lines]
    lines = segment.splitlines(keepends=True)
    at = new_node.body[0].lineno - 1
    return "".join(lines[:at] + moved + lines[at:])


def _reindented(line: str, column: int, pad: str) -> str:
    """A docstring line moved from `column` to `pad`'s width; a blank line stays as it is (cutting its indentation
    would cut its newline too), and so does one that starts left of `column`."""
    if not line.strip() or not line[:column].isspace():
        return line
    return pad + line[column:]


def _first_definition(code: str) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None:
    return next((n for n in ast.parse(code).body if isinstance(n, DEFINITIONS)), None)


def _definition(tree: ast.Module, name: str, entity: Entity) -> ast.stmt:
    found = [n for n in ast.walk(tree) if isinstance(n, DEFINITIONS)]
    named = [n for n in found if n.name == name]
    if not named:
        others = ", ".join(n.name for n in found[:3]) or "no def or class"
        raise ToolFailure(f"new_source must define {name} (found: {others}); renaming an entity is not allowed")
    node = named[0]
    is_class = isinstance(node, ast.ClassDef)
    if is_class != (entity.kind == "class"):
        raise ToolFailure(f"new_source turns {entity.kind} {name} into a {'class' if is_class else 'function'}")
    return node


def _segment(code: str, node: ast.stmt) -> str:
    """The definition's own lines, moved to column 0 by its own indentation (not by the least-indented line: a
    multi-line string at column 0 inside a nested definition would stop `textwrap.dedent`)."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    lines = code.splitlines(keepends=True)[first - 1 : node.end_lineno]
    indent = node.col_offset
    segment = "".join(line[indent:] if line[:indent].isspace() else line for line in lines)
    try:
        ast.parse(segment)
    except SyntaxError as exc:
        raise ToolFailure(f"the definition in new_source does not stand on its own: {exc.msg}") from exc
    return segment


def _decorators(old: str) -> str:
    lines = textwrap.dedent(old).splitlines(keepends=True)
    return "".join(line for line in lines[: _first_def_line(lines)])


def _first_def_line(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if re.match(r"\s*(async\s+def|def|class)\b", line))


def _check_kept(entity: Entity, old: str, node: ast.AST) -> None:
    """`node`, the rewritten definition, against the `old` text: a rewrite may change members but not drop nested
    definitions the entity had; a rewritten function keeps every parameter it had (callers pass them, by position
    or by name) and may add some — the prompt says to keep the signature, and a weak model's answers drop
    parameters they do not use."""
    try:
        before = ast.parse(textwrap.dedent(old))
    except SyntaxError:  # the old text did not parse on its own (e.g. a multi-line string at column 0)
        return
    names = {n.name for n in ast.walk(before) if isinstance(n, DEFINITIONS)}
    dropped = sorted(names - {n.name for n in ast.walk(node) if isinstance(n, DEFINITIONS)})  # `segment`'s own
    if dropped:
        raise ToolFailure(f"new_source drops {', '.join(dropped)} from {entity.selector}; keep every definition")
    old_function = next((n for n in before.body if isinstance(n, DEFINITIONS)), None)
    if isinstance(node, FUNCTIONS) and isinstance(old_function, FUNCTIONS):
        kept = set(_parameters(node))
        lost = [name for name in _parameters(old_function) if name not in kept]
        if lost:
            raise ToolFailure(f"new_source drops parameter {', '.join(lost)} of {entity.selector}; keep its signature")


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = node.args
    named = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, (args.vararg, args.kwarg))]
    return [a.arg for a in named]


def answer_imports(answer: str, module: str) -> list[str]:
    """The top-level import statements of the answer's code blocks that bind a name the edited module uses but
    does not bind."""
    try:
        tree = ast.parse(module)
    except SyntaxError:
        return []
    bound = {n for node in tree.body for n in bound_names(node)}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    wanted = [
        node
        for block in code_blocks(answer)
        for node in _statements(block)
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    return [ast.unparse(node) for node in wanted if any(n in used and n not in bound for n in bound_names(node))]


def _statements(code: str) -> list[ast.stmt]:
    try:
        return ast.parse(textwrap.dedent(code)).body
    except SyntaxError:
        return []


def bound_names(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds (imports, definitions, assignment targets)."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, DEFINITIONS):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


def insert_imports(module: str, imports: list[str]) -> str:
    """`module` with `imports` added after its leading docstring and import statements."""
    tree = ast.parse(module)
    end = 0
    for index, node in enumerate(tree.body):
        docstring = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if not (docstring or isinstance(node, ast.Import | ast.ImportFrom)):
            break
        end = node.end_lineno or end
    lines = module.splitlines(keepends=True)
    return "".join(lines[:end]) + "".join(f"{line}\n" for line in imports) + "".join(lines[end:])


def entity_diff(old: str, new: str) -> str:
    """A small unified diff of the entity, without line numbers."""
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=DIFF_CONTEXT)
    body = [line if not line.startswith("@@") else "..." for line in list(diff)[2:]]
    return "\n".join(body) or "(no change)"
