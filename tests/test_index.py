"""Tests for snaffle.index: entities, selectors, skeletons and the per-file cache, on real files."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from tree_sitter import Parser, Query, QueryCursor, Tree

from snaffle.cache import cache_dir
from snaffle.index import parse
from snaffle.index import repo as index_repo
from snaffle.index.parse import EntityOptions, ParsedSource, parse_source
from snaffle.index.repo import RepoIndex
from snaffle.index.selectors import CLOSE_MATCHES, SelectorError
from snaffle.index.skeleton import DECODE_NOTE, render_skeleton

FIXTURE = Path(__file__).parent / "fixtures" / "structpkg"
GENERATED_CLASSES = 180
GENERATED_METHODS = 8


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A writable copy of the fixture package."""
    target = tmp_path / "repo"
    shutil.copytree(FIXTURE, target)
    return target


@pytest.fixture
def index() -> RepoIndex:
    return RepoIndex(FIXTURE)


def _record_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths parsed from now on, in order."""
    calls: list[str] = []
    real = index_repo.parse_source

    def counting(
        path: str, source: bytes, previous: tuple[bytes, Tree] | None = None, options: EntityOptions | None = None
    ) -> ParsedSource:
        calls.append(path)
        return real(path, source, previous, options)

    monkeypatch.setattr(index_repo, "parse_source", counting)
    return calls


def _bump_mtime(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


# ---------------------------------------------------------------------------------------------- entities


def test_entities_in_source_order_with_kinds(index: RepoIndex) -> None:
    found = [(e.qualname, e.kind) for e in index.entities("shapes.py")]
    assert found[:16] == [
        ("", "module"),
        ("_register", "function"),
        ("Shape", "class"),
        ("Shape.__init__", "method"),
        ("Shape.name", "method"),
        ("Shape.name", "method"),
        ("Shape.name", "method"),
        ("Shape.unit", "method"),
        ("Shape.blank", "method"),
        ("Shape.describe", "method"),
        ("Shape.Meta", "class"),
        ("Shape.Meta.Inner", "class"),
        ("Shape.Meta.Inner.deepest", "method"),
        ("Shape.Meta.option", "method"),
        ("Square", "class"),
        ("Square.__init__", "method"),
    ]
    assert ("outer.inner.innermost", "function") in found
    assert ("outer.Local.method", "method") in found
    assert [q for q, _ in found].count("maybe") == 2  # both branches of an if/else
    assert ("loads", "function") in found  # a def under `except ImportError:`


@pytest.mark.parametrize(
    ("selector", "signature"),
    (
        ("shapes.py::Shape", "@_register\nclass Shape:"),
        ("shapes.py::Shape.name@1", "@property\ndef name(self) -> str:"),
        ("shapes.py::Shape.describe", "async def describe(self, *, loud: bool = False) -> str:"),
        ("shapes.py::fetch", "async def fetch(url: str, retries: int = 3) -> bytes:"),
        ("shapes.py::Shape.Meta.Inner.deepest", "def deepest(self) -> int:"),
        (
            "shapes.py::Square.__init__",
            'def __init__(\n    self,\n    side: float,\n    *,\n    name: str = "square",\n) -> None:',
        ),
        (
            "shapes.py::Square.area",
            "@functools.cached_property\n# a comment between the decorator and the def\ndef area(self) -> float:",
        ),
        ("shapes.py::one_liner", "def one_liner():"),
        ("shapes.py::Square", "class Square(Shape):"),
    ),
)
def test_signature_text(index: RepoIndex, selector: str, signature: str) -> None:
    assert index.resolve(selector).signature == signature


def test_spans_cover_decorators_and_body(index: RepoIndex) -> None:
    source = index.source("shapes.py")
    lines = source.decode().split("\n")
    getter = index.resolve("shapes.py::Shape.name")
    assert lines[getter.start_line] == "    @property"
    assert lines[getter.body_start_line].strip() == '"""The shape\'s name."""'
    assert lines[getter.end_line] == "        return self._name"
    text = source[getter.start_byte : getter.end_byte].decode()
    assert text.startswith("@property\n") and text.endswith("return self._name")
    assert getter.indent == "    "
    deepest = index.resolve("shapes.py::Shape.Meta.Inner.deepest")
    assert deepest.indent == " " * 12 and lines[deepest.end_line] == " " * 16 + "return 3"
    one = index.resolve("shapes.py::one_liner")
    assert one.start_line == one.end_line == one.body_start_line
    module = index.resolve("shapes.py")
    assert (module.kind, module.start_line, module.end_line) == ("module", 0, len(lines) - 2)
    assert module.end_byte == len(source)


@pytest.mark.parametrize(
    ("selector", "doc"),
    (
        ("shapes.py", "Shapes with properties, nested classes, async methods and conditional definitions."),
        ("shapes.py::Shape", "Base of every shape."),
        ("shapes.py::Shape.describe", "Describe the shape, asynchronously."),
        ("small.py::total", "Sum at most `limit` items."),
        ("shapes.py::Shape.unit", ""),
        ("unicode_names.py::größe", "Gibt die Größe zurück — ✓."),
    ),
)
def test_first_docstring_line(index: RepoIndex, selector: str, doc: str) -> None:
    assert index.resolve(selector).doc == doc


def test_definitions_under_every_compound_statement(index: RepoIndex) -> None:
    names = [e.qualname for e in index.entities("control.py")[1:]]
    assert names == [
        "in_for",
        "in_for_else",
        "in_while",
        "in_with",
        "in_try",
        "in_except_group",
        "in_finally",
        "in_case",
        "in_default_case",
        "in_if",
        "in_elif",
        "defaults",
        "nested_behind_a_tab",
        "nested_behind_a_tab.tabbed",
    ]


def test_walk_finds_every_definition_a_query_finds(index: RepoIndex) -> None:
    """The index walks only statement nodes (and skips bodies without `def`/`class`): check it misses none."""
    language = parse.python_language()
    query = Query(language, "(function_definition) @d (class_definition) @d")
    for path in index.files():
        source = index.source(path)
        tree = Parser(language).parse(source)
        expected = len(QueryCursor(query).captures(tree.root_node).get("d", []))
        assert len(index.entities(path)) - 1 == expected, path  # all but the module entity


def test_unicode_names_and_byte_offsets(index: RepoIndex) -> None:
    source = index.source("unicode_names.py")
    method = index.resolve("unicode_names.py::Ÿ.面积")
    assert method.kind == "method"
    assert source[method.start_byte : method.end_byte].decode().startswith("def 面积(self) -> str:")
    after = index.resolve("unicode_names.py::after_unicode")
    assert source[after.start_byte : after.end_byte].decode().endswith('return "✓✓✓"')
    assert index.parse_errors("unicode_names.py") == 0


def test_every_selector_round_trips(index: RepoIndex) -> None:
    for entity in index.all_entities():
        assert index.resolve(entity.selector) == entity


# ---------------------------------------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    ("selector", "expected"),
    (
        ("shapes.py::Shape.name", "shapes.py::Shape.name@1"),  # a property family means its getter
        ("shapes.py::Shape.name@2", "shapes.py::Shape.name@2"),
        ("shapes.py::scale", "shapes.py::scale@3"),  # overloads mean the implementation
        ("shapes.py::Shape::describe", "shapes.py::Shape.describe"),  # pytest node-id style
        ("./shapes.py::outer.inner.innermost", "shapes.py::outer.inner.innermost"),
        ("shapes.py::fetch()", "shapes.py::fetch"),
        ("sub/deep.py::helper", "sub/deep.py::helper"),
        (" sub/deep.py ", "sub/deep.py"),
    ),
)
def test_resolve(index: RepoIndex, selector: str, expected: str) -> None:
    assert index.resolve(selector).selector == expected


def test_resolve_absolute_path(index: RepoIndex) -> None:
    assert index.resolve(f"{FIXTURE / 'small.py'}::total").selector == "small.py::total"


@pytest.mark.parametrize(
    ("selector", "message", "listed"),
    (
        ("shapes.py::maybe", "shapes.py::maybe is ambiguous: 2 definitions", ["shapes.py::maybe@1"]),
        ("shapes.py::twice", "is ambiguous", ["shapes.py::twice@1  def twice():", "shapes.py::twice@2"]),
        ("shapes.py::Shape.name@7", "there are 3 definitions", ["@name.deleter def name(self) -> None:"]),
        ("shapes.py::Shape.describ", "no Shape.describ in shapes.py", ["shapes.py::Shape.describe"]),
        ("shapes.py::deepest", "no deepest in shapes.py", ["shapes.py::Shape.Meta.Inner.deepest"]),
        ("shapes.py::Inner.deepest", "no Inner.deepest", ["shapes.py::Shape.Meta.Inner.deepest"]),
        ("shape.py", "no file shape.py in the repository", ["shapes.py"]),
        ("deep.py::helper", "no file deep.py", ["sub/deep.py"]),
        ("notes.md", "not a Python file", ["search_code"]),
        ("../outside.py", "outside the repository", []),
        ("::func", "no file given", []),
        ("sub/../../outside.py::f", "outside the repository", []),
        ("shapes.py::zzzzzzzz", "no zzzzzzzz in shapes.py; no close matches", []),
    ),
)
def test_selector_errors(index: RepoIndex, selector: str, message: str, listed: list[str]) -> None:
    with pytest.raises(SelectorError) as caught:
        index.resolve(selector)
    text = str(caught.value)
    assert message in text
    for line in listed:
        assert line in text
    assert len(text.splitlines()) <= 1 + CLOSE_MATCHES


def test_close_matches_are_capped(index: RepoIndex) -> None:
    with pytest.raises(SelectorError) as caught:
        index.resolve("shapes.py::Shape.x")
    assert len(str(caught.value).splitlines()) <= 1 + CLOSE_MATCHES


# ---------------------------------------------------------------------------------------------- skeletons


def test_skeleton_exact(index: RepoIndex) -> None:
    assert index.skeleton("small.py") == (
        '"""Small module whose skeleton the tests compare exactly."""\n'
        "class Counter:\n"
        '    """Count things."""\n'
        "    def __init__(self, start: int = 0) -> None:\n"
        "        ...\n"
        "    @property\n"
        "    def double(self) -> int:\n"
        "        ...\n"
        "    class Error(ValueError):\n"
        "        ...\n"
        "def total(items: list[int],\n"
        "          limit: int = LIMIT) -> int:\n"
        '    """Sum at most `limit` items."""\n'
        "    ...\n"
        "    def clip(n: int) -> int:\n"
        "        ...\n"
    )


def test_skeleton_elides_bodies_and_keeps_order(index: RepoIndex) -> None:
    skeleton = index.skeleton("shapes.py")
    assert "return" not in skeleton and "sides = 0" not in skeleton
    order = ["class Shape:", "    class Meta:", "        class Inner:", "class Square(Shape):", "def twice():"]
    positions = [skeleton.index(line) for line in order]
    assert positions == sorted(positions)
    assert "        def innermost() -> int:\n            ...\n" in skeleton


def test_render_skeleton_escapes_docstring_quotes() -> None:
    parsed = parse_source("q.py", b'def f():\n    """Say \\"\\"\\" loudly."""\n')
    assert '"""' not in render_skeleton(parsed.entities).split("\n")[1].strip()[3:-3]


# --------------------------------------------------------------------------------- errors and encodings


def test_syntax_error_file_indexes_what_parses(index: RepoIndex) -> None:
    assert index.parse_errors("broken.py") > 0
    assert index.resolve("broken.py::before").doc == "Parses fine."
    assert index.resolve("broken.py::Survivor.method").kind == "method"
    assert index.resolve("broken.py::broken").signature == "def broken(a, b:"  # cut at the broken line
    skeleton = index.skeleton("broken.py")
    assert skeleton.startswith("# snaffle: ") and "syntax error" in skeleton.splitlines()[0]
    assert index.parse_errors("shapes.py") == 0


def test_non_utf8_file_is_indexed_with_replacement(repo: Path) -> None:
    (repo / "legacy.py").write_bytes(b'"""Caf\xe9 module."""\n\n\ndef caf\xe9():\n    pass\n\n\ndef ok():\n    pass\n')
    index = RepoIndex(repo)
    info = index.info("legacy.py")
    assert info.decode_errors and info.parse_errors >= 0
    assert index.resolve("legacy.py").doc == "Caf\ufffd module."
    assert index.resolve("legacy.py::ok").kind == "function"
    assert DECODE_NOTE in index.skeleton("legacy.py")


def test_generated_5000_line_module(tmp_path: Path) -> None:
    lines = ['"""Generated."""', ""]
    for c in range(GENERATED_CLASSES):
        lines += [f"class C{c}:", f'    """Class {c}."""']
        for m in range(GENERATED_METHODS):
            lines += ["    @staticmethod", f"    def m{m}(x: int = {m}) -> int:", "        return x + 1"]
        lines += ["    async def run(self):", "        return None", ""]
    assert len(lines) > 5000
    (tmp_path / "big.py").write_text("\n".join(lines) + "\n")
    index = RepoIndex(tmp_path)
    started = time.perf_counter()
    entities = index.entities("big.py")
    elapsed = time.perf_counter() - started
    assert len(entities) == 1 + GENERATED_CLASSES * (GENERATED_METHODS + 2)
    last = index.resolve(f"big.py::C{GENERATED_CLASSES - 1}.run")
    assert last.end_line == len(lines) - 2 and last.signature == "async def run(self):"
    assert index.resolve("big.py::C7.m3").signature == "@staticmethod\ndef m3(x: int = 3) -> int:"
    assert elapsed < 2.0, elapsed  # generous: about 0.05 s on 2 cores


# ----------------------------------------------------------------------------------- listing and caching


def test_walk_skips_tool_and_build_directories(repo: Path) -> None:
    for skipped in (".venv/lib", "node_modules/x", "__pycache__", "build", "sub/.tox"):
        (repo / skipped).mkdir(parents=True)
        (repo / skipped / "junk.py").write_text("def junk(): pass\n")
    (repo / "sub" / "build").mkdir()
    (repo / "sub" / "build" / "kept.py").write_text("def kept(): pass\n")
    files = RepoIndex(repo).files()
    assert not any("junk.py" in f for f in files)
    assert "sub/build/kept.py" in files and "notes.md" not in files
    assert files == sorted(files)


def test_git_listing_includes_untracked_but_not_ignored(repo: Path) -> None:
    (repo / ".gitignore").write_text("ignored.py\n")
    (repo / "ignored.py").write_text("x = 1\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "shapes.py", "small.py"], cwd=repo, check=True)
    (repo / "untracked.py").write_text("y = 2\n")
    files = RepoIndex(repo).files()
    assert {"shapes.py", "small.py", "untracked.py", "sub/deep.py"} <= set(files)
    assert "ignored.py" not in files


def test_warm_build_reuses_the_disk_cache(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold = RepoIndex(repo, cache)
    first = cold.build(workers=1)
    assert (first.files, first.cached, first.parsed) == (len(cold.files()), 0, len(cold.files()))
    warm = RepoIndex(repo, cache)
    second = warm.build()
    assert (second.cached, second.parsed) == (second.files, 0)
    assert list(warm.all_entities()) == list(cold.all_entities())


def test_touched_file_is_hashed_not_reparsed(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    RepoIndex(repo, cache).build(workers=1)
    _bump_mtime(repo / "shapes.py")
    calls = _record_parses(monkeypatch)
    stats = RepoIndex(repo, cache).build(workers=1)
    assert stats.parsed == 0 and calls == []


def test_cache_from_another_checkout_is_verified_by_content(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    RepoIndex(repo, cache).build(workers=1)
    other = tmp_path / "other"
    shutil.copytree(repo, other)  # same mtimes and sizes (copy2)
    edited, original = other / "small.py", repo / "small.py"
    edited.write_text(edited.read_text().replace("def total(", "def summa("))  # same size
    os.utime(edited, ns=(original.stat().st_atime_ns, original.stat().st_mtime_ns))
    index = RepoIndex(other, cache)
    stats = index.build(workers=1)
    assert (stats.parsed, stats.cached) == (1, stats.files - 1)  # the others were reused after hashing
    assert index.resolve("small.py::summa").kind == "function"


def test_corrupt_cache_records_are_ignored(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    RepoIndex(repo, cache).build(workers=1)
    for record in cache.rglob("*.json"):
        record.write_text('{"format": "snaffle-structure/1", "info": [')
    index = RepoIndex(repo, cache)
    assert index.build(workers=1).parsed == len(index.files())


def test_refresh_reindexes_only_the_edited_file(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = RepoIndex(repo, tmp_path / "cache")
    index.build(workers=1)
    calls = _record_parses(monkeypatch)
    path = repo / "small.py"
    path.write_text(path.read_text() + "\n\ndef added(x):\n    return x\n")
    index.refresh("small.py")
    assert calls == ["small.py"]
    assert index.resolve("small.py::added").kind == "function"
    assert RepoIndex(repo, tmp_path / "cache").build().parsed == 0  # the refresh reached the disk cache


INCREMENTAL_EDITS = (
    ("def twice():  # noqa: F811\n    return 2\n", ""),  # delete at the end
    ("class Square(Shape):", "class Square(Shape, object):"),  # change a header in the middle
    ("async def fetch(", "async def fetch_all("),  # rename
    ("def one_liner(): return 1", "def one_liner(:"),  # break the syntax
    ("def one_liner(:", "def one_liner(): return 1"),  # and mend it
    ('"""Shapes with', '"""Shäpes with'),  # multi-byte text at the top
)


def test_repeated_refreshes_reparse_incrementally_and_match_a_full_parse(repo: Path) -> None:
    index = RepoIndex(repo)
    index.entities("shapes.py")
    path = repo / "shapes.py"
    for old, new in INCREMENTAL_EDITS:
        text = path.read_text()
        assert old in text
        path.write_bytes(text.replace(old, new).encode())
        index.refresh("shapes.py")
        assert "shapes.py" in index._trees  # the next refresh starts from this tree
        assert index.entities("shapes.py") == list(parse_source("shapes.py", path.read_bytes()).entities)
        assert index.parse_errors("shapes.py") == parse_source("shapes.py", path.read_bytes()).parse_errors


@pytest.mark.parametrize(
    ("old", "new", "span"),
    (
        (b"abcdef", b"abXYef", (2, 4, 4)),
        (b"abc", b"abc", (3, 3, 3)),
        (b"aaa", b"aaaa", (3, 3, 4)),
        (b"", b"x", (0, 0, 1)),
    ),
)
def test_changed_span(old: bytes, new: bytes, span: tuple[int, int, int]) -> None:
    assert parse._changed_span(old, new) == span


def test_same_size_same_mtime_edit_is_seen_by_refresh(repo: Path) -> None:
    index = RepoIndex(repo)
    path = repo / "sub" / "deep.py"
    assert index.resolve("sub/deep.py::helper")
    stat = path.stat()
    path.write_text(path.read_text().replace("helper", "helpme"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    index.refresh("sub/deep.py")
    assert index.resolve("sub/deep.py::helpme").doc == "Help."


def test_external_edit_is_noticed_without_refresh(repo: Path) -> None:
    index = RepoIndex(repo)
    assert len(index.entities("sub/deep.py")) == 2
    path = repo / "sub" / "deep.py"
    path.write_text(path.read_text() + "\n\ndef second():\n    pass\n")
    _bump_mtime(path)
    assert [e.qualname for e in index.entities("sub/deep.py")] == ["", "helper", "second"]


def test_refresh_handles_new_and_deleted_files(repo: Path) -> None:
    index = RepoIndex(repo)
    assert "new.py" not in index.files()
    (repo / "new.py").write_text("def fresh():\n    pass\n")
    index.refresh("new.py")
    assert "new.py" in index.files() and index.resolve("new.py::fresh")
    (repo / "new.py").unlink()
    index.refresh("new.py")
    assert "new.py" not in index.files()
    with pytest.raises(SelectorError, match="no file new.py"):
        index.resolve("new.py::fresh")


def test_parallel_build_matches_serial(repo: Path, tmp_path: Path) -> None:
    serial = RepoIndex(repo)
    serial.build(workers=1)
    parallel = RepoIndex(repo, tmp_path / "cache")
    stats = parallel.build(workers=2)
    assert stats.workers == 2 and stats.parsed == len(serial.files())
    assert list(parallel.all_entities()) == list(serial.all_entities())
    assert RepoIndex(repo, tmp_path / "cache").build().cached == stats.files  # workers wrote the cache


def test_parse_source_without_a_repository() -> None:
    parsed = parse_source("x.py", b"class A:\n    def f(self):\n        pass\n")
    assert [e.selector for e in parsed.entities] == ["x.py", "x.py::A", "x.py::A.f"]
    assert (parsed.parse_errors, parsed.decode_errors, parsed.lines) == (0, False, 3)


def test_build_falls_back_to_serial_when_no_pool_can_start(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_repo, "START_METHOD", "no-such-start-method")
    monkeypatch.setattr(index_repo, "SINGLE_THREAD_START_METHOD", "no-such-start-method")
    index = RepoIndex(repo)
    stats = index.build(workers=2)
    assert (stats.workers, stats.parsed) == (1, len(index.files()))


def test_the_index_cache_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SNAFFLE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir("structure") == tmp_path / "snaffle" / "structure"


def test_empty_module(index: RepoIndex) -> None:
    (module,) = index.entities("sub/__init__.py")
    assert (module.kind, module.start_line, module.end_line, module.end_byte, module.doc) == ("module", 0, 0, 0, "")
    assert index.skeleton("sub/__init__.py") == ""


def test_a_module_path_for_a_package_or_a_src_path_resolves_to_the_one_file_it_means(tmp_path: Path) -> None:
    files = {
        "inflect/__init__.py": "def ordinal(n):\n    return 'th'\n",
        "src/semv/version.py": "def bump():\n    pass\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    index = RepoIndex(tmp_path)
    assert index.resolve("./inflect.py::ordinal").selector == "inflect/__init__.py::ordinal"
    assert index.resolve("semv/version.py::bump").selector == "src/semv/version.py::bump"
    (tmp_path / "lib" / "semv").mkdir(parents=True)
    (tmp_path / "lib" / "semv" / "version.py").write_text("def bump():\n    pass\n")
    with pytest.raises(SelectorError, match="no file semv/version.py"):  # two readings: no guess
        index.resolve("semv/version.py::bump")


def test_the_grammar_version_read_beside_the_package_is_the_installed_one() -> None:
    from importlib import metadata

    from snaffle.index.cache import _grammar_version

    assert _grammar_version() == metadata.version("tree-sitter-python")
