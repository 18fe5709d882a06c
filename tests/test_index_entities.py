"""Assignments as entities and folded overloads (snaffle/data/index.toml [entities]), on real files: selected,
read, rewritten through edit_entity and the one-shot path, shown compactly in skeletons; and the content-keyed
cache that a second checkout at another commit reuses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from snaffle import data
from snaffle.agentless.repair import RepairContext, apply_answer
from snaffle.exceptions import ToolFailure
from snaffle.index.parse import EntityOptions, entity_options, parse_source
from snaffle.index.repo import RepoIndex
from snaffle.index.selectors import SelectorError
from snaffle.index.skeleton import ASSIGNMENT_RUN, render_skeleton
from snaffle.primitives.edit import EntityEditor, GateFailure
from snaffle.primitives.reader import INLINE_BODY_LINES, Reader, RepoView
from snaffle.trajectory import TrajectoryWriter, read_trajectory
from snaffle.types import ALL_MECHANISMS
from snaffle.workspace import Workspace
from tests.helpers import git, make_repo

ON = EntityOptions(assignments=True, fold_overloads=True, value_head_chars=60)
OFF = EntityOptions(assignments=False, fold_overloads=False, value_head_chars=60)
TABLE_ROWS = 200
PARSER = (
    '''"""A tiny expression parser."""

from typing import overload

import typing

MAX_DEPTH = 32
LIMIT: int = 10
HOOKS: list
first = second = 0
a, b = 1, 2
settings = {}
settings.debug = False
MAX_DEPTH += 1

try:
    import fast as backend
    HAVE_FAST = True
except ImportError:
    HAVE_FAST = False


class Parser:
    """Operators and their precedence."""

    PRECEDENCE = {
        "+": 1,
        "-": 1,
        "*": 2,
        "/": 1,
    }
    name: str = "expr"

    def binding(self, op):
        local = self.PRECEDENCE[op]
        return local

    @overload
    def parse(self, text: str) -> int: ...
    @typing.overload
    def parse(self, text: bytes) -> int: ...
    def parse(self, text):
        return len(text)


UNICODE = {
'''
    + "".join(f'    "u{i:04x}": {i},\n' for i in range(TABLE_ROWS))
    + "}\n"
)
SELECTORS_ON = [
    ("mod.py::MAX_DEPTH", "assignment"),
    ("mod.py::LIMIT", "assignment"),
    ("mod.py::HOOKS", "assignment"),
    ("mod.py::first", "assignment"),
    ("mod.py::settings", "assignment"),
    ("mod.py::HAVE_FAST@1", "assignment"),
    ("mod.py::HAVE_FAST@2", "assignment"),
    ("mod.py::Parser", "class"),
    ("mod.py::Parser.PRECEDENCE", "assignment"),
    ("mod.py::Parser.name", "assignment"),
    ("mod.py::Parser.binding", "method"),
    ("mod.py::Parser.parse", "method"),
    ("mod.py::UNICODE", "assignment"),
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/mod.py": PARSER})


def view_of(repo: Path, options: EntityOptions = ON) -> RepoView:
    return RepoView(Workspace.open(repo), RepoIndex(repo, options=options))


def selectors(source: str, options: EntityOptions) -> list[tuple[str, str]]:
    return [(e.selector, e.kind) for e in parse_source("mod.py", source.encode(), options=options).entities[1:]]


# ------------------------------------------------------------------------------------------------- parsing


def test_module_and_class_level_assignments_are_entities_and_locals_are_not() -> None:
    assert selectors(PARSER, ON) == SELECTORS_ON  # no `a, b`, `settings.debug`, `+=` or a function's `local`


def test_options_off_index_exactly_the_definitions() -> None:
    kinds = {kind for _, kind in selectors(PARSER, OFF)}
    assert kinds == {"class", "method"}
    assert [s for s, _ in selectors(PARSER, OFF) if "parse" in s] == [f"mod.py::Parser.parse@{n}" for n in (1, 2, 3)]


def test_overload_stubs_fold_into_their_implementation() -> None:
    [parse] = [e for e in parse_source("m.py", PARSER.encode(), options=ON).entities if e.name == "parse"]
    assert (parse.selector, parse.signature) == ("m.py::Parser.parse", "def parse(self, text):")
    stubs_only = "from typing import overload\n@overload\ndef f(x: int) -> int: ...\n@overload\ndef f(x: str): ...\n"
    assert [s for s, _ in selectors(stubs_only, ON)] == ["mod.py::f@1", "mod.py::f@2"]  # nothing to fold into


def test_an_assignment_signature_is_its_first_line_cut_to_the_value_head() -> None:
    short = EntityOptions(assignments=True, fold_overloads=True, value_head_chars=16)
    entities = {e.qualname: e for e in parse_source("m.py", PARSER.encode(), options=short).entities}
    assert entities["MAX_DEPTH"].signature == "MAX_DEPTH = 32"
    assert entities["LIMIT"].signature == "LIMIT: int = 10"
    assert entities["Parser.name"].signature == 'name: str = "exp ...'
    assert entities["Parser.PRECEDENCE"].signature == "PRECEDENCE = { ..."
    table = entities["UNICODE"]
    assert (table.start_line, table.end_line - table.start_line) == (
        PARSER.count("\n", 0, PARSER.index("UNICODE")),
        TABLE_ROWS + 1,
    )


def test_the_packaged_options_are_data_with_required_keys() -> None:
    assert entity_options() == data.load_record(EntityOptions, "index.toml", "entities")
    tables = data.load("index.toml")
    del tables["entities"]["fold_overloads"]
    with pytest.raises(data.DataError, match="lacks the required key 'fold_overloads'"):
        data.record(EntityOptions, tables["entities"], "snaffle/data/index.toml [entities]")


def test_a_line_of_a_class_table_belongs_to_the_table(repo: Path) -> None:
    from snaffle.index.parse import innermost

    index = RepoIndex(repo, options=ON)
    line = PARSER.splitlines().index('        "*": 2,')
    assert innermost(index.entities("pkg/mod.py"), line).selector == "pkg/mod.py::Parser.PRECEDENCE"  # type: ignore[union-attr]
    assert index.resolve("pkg/mod.py::Parser::PRECEDENCE").kind == "assignment"
    with pytest.raises(SelectorError, match="HAVE_FAST is ambiguous: 2 definitions"):
        index.resolve("pkg/mod.py::HAVE_FAST")


# ------------------------------------------------------------------------------------------ skeletons, reads


def test_skeleton_shows_a_table_as_one_line(repo: Path) -> None:
    skeleton = RepoIndex(repo, options=ON).skeleton("pkg/mod.py")
    assert "UNICODE = { ...\n" in skeleton and "u0001" not in skeleton
    assert '    PRECEDENCE = { ...\n    name: str = "expr"\n    def binding(self, op):\n' in skeleton
    assert len(skeleton.splitlines()) < 40


def test_a_module_of_thousands_of_assignments_has_a_bounded_skeleton(tmp_path: Path) -> None:
    """A hostile (or generated) module: 5000 constants must not become a 5000-line observation."""
    source = "".join(f"NAME_{i} = {i}\n" for i in range(5000)) + "def tail():\n    return NAME_0\n"
    repo = make_repo(tmp_path / "big", {"consts.py": source})
    out = Reader(view_of(repo)).read_entity("consts.py")
    assert len(out.splitlines()) <= ASSIGNMENT_RUN + 4
    assert "NAME_0 = 0" in out and "def tail():" in out and "4992 more assignments" in out
    assert RepoIndex(repo, options=ON).resolve("consts.py::NAME_4999").signature == "NAME_4999 = 4999"


def test_render_skeleton_keeps_short_runs_whole() -> None:
    source = "".join(f"C{i} = {i}\n" for i in range(ASSIGNMENT_RUN)).encode()
    assert render_skeleton(parse_source("m.py", source, options=ON).entities).splitlines() == [
        f"C{i} = {i}" for i in range(ASSIGNMENT_RUN)
    ]


def test_read_entity_shows_a_class_table_and_outlines_a_long_one(repo: Path) -> None:
    reader = Reader(view_of(repo))
    table = reader.read_entity("pkg/mod.py::Parser.PRECEDENCE")
    assert table.startswith("# pkg/mod.py::Parser.PRECEDENCE (assignment, 6 lines, whole)\n    PRECEDENCE = {")
    assert TABLE_ROWS + 2 > INLINE_BODY_LINES
    outline = reader.read_entity("pkg/mod.py::UNICODE")
    assert outline.splitlines() == [
        "# pkg/mod.py::UNICODE (assignment, 202 lines; read the body with window=0..2)",
        "UNICODE = { ...",
    ]
    assert '"u00c7": 199' in reader.read_entity("pkg/mod.py::UNICODE", window=2)
    assert reader.read_entity("pkg/mod.py::UNICODE", keywords=["u0042"]).startswith("# pkg/mod.py::UNICODE\n")
    found = reader.search_symbol("PRECEDENCE", kind="assignment")
    assert found == "pkg/mod.py::Parser.PRECEDENCE  PRECEDENCE = { ..."
    assert reader.search_symbol("Parser.parse", kind="method") == "pkg/mod.py::Parser.parse  def parse(self, text):"


# -------------------------------------------------------------------------------------------------- edits


def test_edit_entity_search_replace_inside_a_table(repo: Path) -> None:
    view = view_of(repo)
    view.shown.add("pkg/mod.py::Parser.PRECEDENCE")
    run = EntityEditor(view).edit_entity("pkg/mod.py::Parser.PRECEDENCE", search='"/": 1', replace='"/": 2')
    assert '-        "/": 1,\n+        "/": 2,' in run.output
    with pytest.raises(ToolFailure, match="search occurs 2 times"):
        EntityEditor(view).edit_entity("pkg/mod.py::Parser.PRECEDENCE", search=": 1", replace=": 3")


@pytest.mark.parametrize(
    "answer",
    [
        'PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}\n',
        '```python\nclass Parser:\n    PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}\n\n'
        "    def binding(self, op):\n        return 0\n```\n",
    ],
)
def test_edit_entity_new_source_rewrites_a_class_table(repo: Path, answer: str) -> None:
    view = view_of(repo)
    view.shown.add("pkg/mod.py::Parser.PRECEDENCE")
    EntityEditor(view).edit_entity("pkg/mod.py::Parser.PRECEDENCE", new_source=answer)
    after = (repo / "pkg/mod.py").read_text()
    assert '\n    PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}\n    name: str = "expr"\n' in after
    assert "local = self.PRECEDENCE[op]" in after  # only the table changed, not the method the answer also gave


def test_edit_entity_new_source_rewrites_a_module_constant(repo: Path) -> None:
    view = view_of(repo)
    view.shown.add("pkg/mod.py::MAX_DEPTH")
    EntityEditor(view).edit_entity("pkg/mod.py::MAX_DEPTH", new_source="```python\nMAX_DEPTH = 64  # deeper\n```")
    assert "\nMAX_DEPTH = 64  # deeper\nLIMIT: int = 10\n" in (repo / "pkg/mod.py").read_text()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("OTHER = 1\n", "new_source must assign MAX_DEPTH"),
        ("def MAX_DEPTH():\n    return 64\n", "new_source must assign MAX_DEPTH"),
        ("def f():\n    MAX_DEPTH = 64\n    return MAX_DEPTH\n", "new_source must assign MAX_DEPTH"),
        ("MAX_DEPTH = (\n", "new_source does not parse"),
    ],
)
def test_a_rewrite_that_renames_or_hides_the_assignment_is_refused(repo: Path, answer: str, message: str) -> None:
    view = view_of(repo)
    view.shown.add("pkg/mod.py::MAX_DEPTH")
    with pytest.raises(ToolFailure, match=message):
        EntityEditor(view).edit_entity("pkg/mod.py::MAX_DEPTH", new_source=answer)
    assert (repo / "pkg/mod.py").read_text() == PARSER


def test_a_table_rewrite_with_an_undefined_name_is_reverted_by_the_lint_gate(repo: Path) -> None:
    view = view_of(repo)
    view.shown.add("pkg/mod.py::Parser.PRECEDENCE")
    with pytest.raises(GateFailure, match="undefined name"):
        EntityEditor(view).edit_entity("pkg/mod.py::Parser.PRECEDENCE", new_source="PRECEDENCE = {'+': ONE}\n")
    assert (repo / "pkg/mod.py").read_text() == PARSER


def test_an_assignment_must_be_shown_before_it_is_edited(repo: Path) -> None:
    with pytest.raises(GateFailure, match="read"):
        EntityEditor(view_of(repo)).edit_entity("pkg/mod.py::MAX_DEPTH", new_source="MAX_DEPTH = 1\n")


def test_the_one_shot_path_rewrites_a_class_table_from_a_fenced_block(repo: Path, tmp_path: Path) -> None:
    view = view_of(repo)
    context = RepairContext(
        ("pkg/mod.py::Parser.binding", "pkg/mod.py::Parser.PRECEDENCE"), ("binding", "PRECEDENCE"), ""
    )
    view.shown.update(context.selectors)
    table = 'PRECEDENCE = {\n    "+": 1,\n    "-": 1,\n    "*": 2,\n    "/": 2,\n}\n'
    answer = f"The division operator binds as tightly as `*`:\n```python\n{table}```\n"
    writer = TrajectoryWriter(tmp_path / "trajectory.jsonl")
    status, message = apply_answer(view, context, answer, writer, ALL_MECHANISMS)
    writer.close()
    assert (status, message) == ("submitted", "applied a rewrite of pkg/mod.py::Parser.PRECEDENCE")
    assert '        "/": 2,\n    }\n    name: str' in (repo / "pkg/mod.py").read_text()
    assert git(repo, "diff", "--stat").strip().endswith("1 file changed, 1 insertion(+), 1 deletion(-)")
    assert [g["ok"] for g in read_trajectory(tmp_path / "trajectory.jsonl").of_type("gate")] == []


# -------------------------------------------------------------------------------------------------- cache


def test_a_second_checkout_at_another_commit_reuses_the_cache_by_content(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {f"pkg/m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(6)}
    first = make_repo(tmp_path / "first", files)
    cache = tmp_path / "cache"
    assert RepoIndex(first, cache, ON).build(workers=1).parsed == 6
    second = tmp_path / "second"  # another path, another commit: one file changed
    shutil.copytree(first, second)
    (second / "pkg/m0.py").write_text("def f0():\n    return 100\n")
    stats = RepoIndex(second, cache, ON).build(workers=1)
    assert (stats.parsed, stats.cached) == (1, 5)
    third = tmp_path / "third"  # a third checkout back at the first commit: both versions of m0 are cached
    shutil.copytree(first, third)
    assert RepoIndex(third, cache, ON).build(workers=1).parsed == 0
    assert RepoIndex(second, cache, ON).build(workers=1).parsed == 0
    assert RepoIndex(second, cache, ON).resolve("pkg/m0.py::f0").path == "pkg/m0.py"


def test_records_of_other_entity_options_are_not_reused(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    RepoIndex(repo, cache, OFF).build(workers=1)
    index = RepoIndex(repo, cache, ON)
    assert index.build(workers=1).parsed == 2
    assert index.resolve("pkg/mod.py::MAX_DEPTH").kind == "assignment"
    assert RepoIndex(repo, cache, OFF).build(workers=1).parsed == 0


def test_a_poisoned_manifest_hash_is_ignored(repo: Path, tmp_path: Path) -> None:
    """A manifest naming a hash that is a path (`../../..`) must never lead a read outside the cache."""
    cache = tmp_path / "cache"
    RepoIndex(repo, cache, ON).build(workers=1)
    [manifest] = cache.rglob("checkouts/*.json")
    text = manifest.read_text()
    sha = RepoIndex(repo, cache, ON).info("pkg/mod.py").sha1
    outside = tmp_path / "outside.json"
    outside.write_text('{"format":"snaffle-structure/2","sha1":"x","file":[1,0,false],"entities":[]}')
    manifest.write_text(text.replace(sha, "../../../../../outside"))
    index = RepoIndex(repo, cache, ON)
    assert index.build(workers=1).cached == 2
    assert index.resolve("pkg/mod.py::Parser.PRECEDENCE").kind == "assignment"


def test_a_build_of_some_paths_parses_only_them_and_records_the_checkout(tmp_path: Path) -> None:
    from snaffle.index.cache import load_manifest

    files: dict[str, str | bytes] = {"pkg/a.py": "A = 1\n", "tests/test_a.py": "def test_a():\n    pass\n"}
    repo, cache = make_repo(tmp_path / "repo", files), tmp_path / "cache"
    index = RepoIndex(repo, cache, ON)
    stats = index.build(workers=1, paths=["pkg/a.py", "pkg/gone.py"])
    assert (stats.files, stats.parsed) == (1, 1)
    assert set(load_manifest(cache, str(repo.resolve()))) == {"pkg/a.py"}
    assert RepoIndex(repo, cache, ON).build(workers=1).parsed == 1  # the test file, never built before
    assert set(load_manifest(cache, str(repo.resolve()))) == {"pkg/a.py", "tests/test_a.py"}
