"""read_entity, search_symbol, search_code and edit_entity on a real repo with a real tree-sitter index."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from snaffle.exceptions import ToolFailure
from snaffle.index.repo import RepoIndex
from snaffle.primitives.edit import EntityEditor, GateFailure, keep_docstring, nearest_candidate
from snaffle.primitives.reader import Reader, RepoView, symbol_rank
from snaffle.types import Mechanisms
from snaffle.workspace import Workspace
from tests.helpers import make_repo

SHAPES = (
    '''"""Shapes and their areas."""

import math


class Shape:
    """A base shape."""

    def area(self):
        raise NotImplementedError

    class Meta:
        def describe(self):
            return "meta"


class Circle(Shape):
    def __init__(self, r):
        self.r = r

    @property
    def area(self):
        """Area of the circle."""
        return math.pi * self.r ** 2

    def scaled(self, k):
        return Circle(self.r * k)


def parse_shape(text):
    kind, _, size = text.partition(":")
    if kind == "circle":
        return Circle(float(size))
    raise ValueError(f"unknown shape {kind}")


def long_function():
'''
    + "".join(f"    x{i} = {i}\n" for i in range(150))
    + "    return x0\n"
)


@pytest.fixture
def view(tmp_path: Path) -> RepoView:
    files: dict[str, str | bytes] = {
        "geo/shapes.py": SHAPES,
        "geo/__init__.py": "from geo.shapes import Circle, parse_shape\n",
        "tests/test_shapes.py": "from geo import parse_shape\n\n\ndef test_parse():\n    assert parse_shape('c:1')\n",
        "README.md": "Use parse_shape to read shapes.\n",
    }
    workspace = Workspace.open(make_repo(tmp_path / "repo", files))
    return RepoView(workspace, RepoIndex(workspace.root))


def test_read_entity_shows_small_entities_whole_and_no_line_numbers(view: RepoView) -> None:
    out = Reader(view).read_entity("geo/shapes.py::parse_shape")
    assert out.startswith("# geo/shapes.py::parse_shape (function, 5 lines, whole)")
    assert 'raise ValueError(f"unknown shape {kind}")' in out
    assert not re.search(r"^\s*\d+\s*[:|\t]", out, re.MULTILINE)
    assert "geo/shapes.py::parse_shape" in view.shown


def test_read_entity_outlines_modules_and_pages_long_bodies(view: RepoView) -> None:
    reader = Reader(view)
    module = reader.read_entity("geo/shapes.py")
    assert "class Circle(Shape):" in module and "math.pi" not in module
    long = reader.read_entity("geo/shapes.py::long_function")
    assert "window=0..1" in long and "x5 = 5" not in long
    assert "geo/shapes.py::long_function" not in view.shown
    second = reader.read_entity("geo/shapes.py::long_function", window=1)
    assert "x120 = 120" in second and "x5 = 5" not in second and len(second.splitlines()) <= 101
    with pytest.raises(ToolFailure, match="windows 0..1"):
        reader.read_entity("geo/shapes.py::long_function", window=2)


def test_read_entity_keywords_group_by_entity(view: RepoView) -> None:
    out = Reader(view).read_entity("geo/shapes.py", keywords=["self.r"])
    assert "# geo/shapes.py::Circle.__init__" in out and "# geo/shapes.py::Circle.area" in out
    assert "parse_shape" not in out


def test_read_entity_nested_class_method_and_unknown_selectors(view: RepoView) -> None:
    assert 'return "meta"' in Reader(view).read_entity("geo/shapes.py::Shape.Meta.describe")
    with pytest.raises(ToolFailure):
        Reader(view).read_entity("geo/shapes.py::Circel")


@pytest.mark.parametrize(
    ("needle", "qualname", "rank"),
    [
        ("area", "circle.area", 0),
        ("circle.area", "circle.area", 0),
        ("par", "parse_shape", 1),
        ("shape", "parse_shape", 2),
        ("shape parse", "parse_shape", 3),
        ("square", "parse_shape", None),
    ],
)
def test_symbol_rank(needle: str, qualname: str, rank: int | None) -> None:
    tokens = set(re.split(r"[\W_]+", needle)) - {""}
    assert symbol_rank(needle, tokens, qualname) == rank


def test_search_symbol_ranks_and_caps(view: RepoView) -> None:
    lines = Reader(view).search_symbol("area").splitlines()
    assert lines[0].startswith("geo/shapes.py::Circle.area") or lines[0].startswith("geo/shapes.py::Shape.area")
    assert Reader(view).search_symbol("shape", kind="class").splitlines()[0].startswith("geo/shapes.py::Shape")
    assert "no symbol matches" in Reader(view).search_symbol("zzz")


def test_search_code_summarizes_per_entity(view: RepoView) -> None:
    out = Reader(view).search_code("parse_shape")
    assert out.startswith("5 matches in 4 files")
    assert "tests/test_shapes.py::test_parse (1)" in out and "README.md" in out
    only = Reader(view).search_code("self.r", path="geo")
    assert "geo/shapes.py::Circle.__init__" in only
    too_many = Reader(view).search_code(r"x\d+ =")
    assert "too many to show" in too_many and "Narrow" in too_many


def test_edit_entity_search_replace_and_its_failures(view: RepoView) -> None:
    reader, editor = Reader(view), EntityEditor(view)
    reader.read_entity("geo/shapes.py::Circle.scaled")
    out = editor.edit_entity("geo/shapes.py::Circle.scaled", search="self.r * k", replace="self.r * abs(k)")
    assert "+        return Circle(self.r * abs(k))" in out.output
    with pytest.raises(ToolFailure, match=r"0 matches\)\nthe closest text .*\n.*return Circle"):
        editor.edit_entity("geo/shapes.py::Circle.scaled", search="return  Circle(self.r*k)", replace="x")
    reader.read_entity("geo/shapes.py::long_function", window=0)
    with pytest.raises(ToolFailure, match="occurs 150 times"):
        editor.edit_entity("geo/shapes.py::long_function", search="    x", replace="    y")


def test_blank_fields_the_model_filled_in_count_as_absent(view: RepoView) -> None:
    """A weak model fills every field of the schema (Qwen2.5-Coder-1.5B, the A/B bench: `"new_source": ""` beside its
    search and replace, in every call of a sample): a blank field is no answer, so the other form applies."""
    reader, editor = Reader(view), EntityEditor(view)
    reader.read_entity("geo/shapes.py::Circle.scaled")
    out = editor.edit_entity(
        "geo/shapes.py::Circle.scaled", search="self.r * k", replace="self.r * abs(k)", new_source="  \n"
    )
    assert "+        return Circle(self.r * abs(k))" in out.output
    answer = "def scaled(self, k):\n    return Circle(self.r * k * 2)\n"
    out = editor.edit_entity("geo/shapes.py::Circle.scaled", search="", replace="", new_source=answer)
    assert "+        return Circle(self.r * k * 2)" in out.output


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"search": "self.r * k", "replace": "x", "new_source": "def scaled(self, k):\n    return 1\n"}, "not both"),
        ({"search": "self.r * k"}, "search without replace"),
        ({"replace": "x"}, "replace without search"),
        ({"search": "", "replace": "", "new_source": ""}, "give either search and replace, or new_source"),
    ],
)
def test_edit_entity_says_which_fields_are_wrong(view: RepoView, fields: dict[str, str], message: str) -> None:
    path = view.workspace.root / "geo" / "shapes.py"
    before = path.read_bytes()
    Reader(view).read_entity("geo/shapes.py::Circle.scaled")
    with pytest.raises(ToolFailure, match=message):
        EntityEditor(view).edit_entity("geo/shapes.py::Circle.scaled", **fields)
    assert path.read_bytes() == before


def test_a_rejected_edit_leaves_the_file_byte_for_byte(view: RepoView) -> None:
    path = view.workspace.root / "geo" / "shapes.py"
    before = path.read_bytes()
    Reader(view).read_entity("geo/shapes.py::parse_shape")
    with pytest.raises(GateFailure, match="syntax error") as refused:
        EntityEditor(view).edit_entity(
            "geo/shapes.py::parse_shape", search='if kind == "circle":', replace="if kind =="
        )
    assert path.read_bytes() == before
    assert [g.gate for g in refused.value.gates] == ["lint"]


def test_edit_entity_rewrites_a_method_and_reindents(view: RepoView) -> None:
    Reader(view).read_entity("geo/shapes.py::Circle.scaled")
    answer = "Here is the fix:\n```python\ndef scaled(self, k):\n    if k < 0:\n        raise ValueError(k)\n"
    answer += "    return Circle(self.r * k)\n```\n"
    EntityEditor(view).edit_entity("geo/shapes.py::Circle.scaled", new_source=answer)
    text = (view.workspace.root / "geo" / "shapes.py").read_text()
    assert "    def scaled(self, k):\n        if k < 0:\n            raise ValueError(k)\n" in text
    assert view.index.resolve("geo/shapes.py::Circle.scaled").kind == "method"


def test_rewrite_keeps_decorators_the_answer_dropped(view: RepoView) -> None:
    Reader(view).read_entity("geo/shapes.py::Circle.area")
    EntityEditor(view).edit_entity(
        "geo/shapes.py::Circle.area", new_source="def area(self):\n    return 3.0 * self.r\n"
    )
    text = (view.workspace.root / "geo" / "shapes.py").read_text()
    expected = '    @property\n    def area(self):\n        """Area of the circle."""\n        return 3.0 * self.r\n'
    assert expected in text


@pytest.mark.parametrize(
    ("selector", "new_source", "message"),
    [
        ("geo/shapes.py::parse_shape", "def read_shape(text):\n    return None\n", "renaming"),
        ("geo/shapes.py::parse_shape", "class parse_shape:\n    pass\n", "into a class"),
        ("geo/shapes.py::Shape", "class Shape:\n    def area(self):\n        return 0\n", "drops Meta, describe"),
        ("geo/shapes.py::parse_shape", "def parse_shape(text:\n", "does not parse"),
        ("geo/shapes.py::Circle.scaled", "def scaled(self):\n    return self\n", "drops parameter k of"),
        ("geo/shapes.py::Circle.scaled", "def scaled(self, factor):\n    return self\n", "drops parameter k of"),
    ],
)
def test_rewrite_rejections(view: RepoView, selector: str, new_source: str, message: str) -> None:
    Reader(view).read_entity(selector, window=0)
    with pytest.raises(ToolFailure, match=message):
        EntityEditor(view).edit_entity(selector, new_source=new_source)


def test_a_rewrite_may_add_a_parameter(view: RepoView) -> None:
    Reader(view).read_entity("geo/shapes.py::Circle.scaled", window=0)
    answer = "def scaled(self, k, copy=True):\n    return Circle(self.r * k)\n"
    EntityEditor(view).edit_entity("geo/shapes.py::Circle.scaled", new_source=answer)
    assert "def scaled(self, k, copy=True):" in (view.workspace.root / "geo" / "shapes.py").read_text()


def test_nearest_candidate_ignores_whitespace() -> None:
    text = "def f():\n    a = 1\n    return a + 2\n"
    assert nearest_candidate(text, "return a+2") == "    return a + 2"
    assert nearest_candidate(text, "completely different words here") == ""


def test_search_code_falls_back_to_python_when_rg_rejects_the_pattern(view: RepoView) -> None:
    out = Reader(view).search_code(r"def (?=parse)")
    assert out.startswith("1 matches in 1 files") and "geo/shapes.py::parse_shape" in out


def test_rewrite_taken_from_a_whole_class_answer_with_a_column_0_string(view: RepoView) -> None:
    Reader(view).read_entity("geo/shapes.py::Circle.scaled")
    answer = 'class Circle(Shape):\n    def scaled(self, k):\n        note = """\nscaled copy"""\n'
    answer += "        return Circle(self.r * k * 1)\n"
    EntityEditor(view).edit_entity("geo/shapes.py::Circle.scaled", new_source=answer)
    text = (view.workspace.root / "geo" / "shapes.py").read_text()
    assert '    def scaled(self, k):\n        note = """\n' in text and "return Circle(self.r * k * 1)" in text


def test_a_rewrite_that_needs_its_answers_import_gets_it_as_a_logged_recovery(view: RepoView) -> None:
    Reader(view).read_entity("geo/shapes.py::parse_shape")
    answer = "```python\nfrom typing import Optional\nimport os\n\ndef parse_shape(text: str) -> Optional[Circle]:\n"
    answer += (
        '    kind, _, size = text.partition(":")\n    return Circle(float(size)) if kind == "circle" else None\n```'
    )
    run = EntityEditor(view).edit_entity("geo/shapes.py::parse_shape", new_source=answer)
    text = (view.workspace.root / "geo" / "shapes.py").read_text()
    assert text.startswith('"""Shapes and their areas."""\n\nimport math\nfrom typing import Optional\n\n')
    assert "import os" not in text  # only what the edited module needs
    assert [(g.gate, g.ok) for g in run.gates] == [("edit_recovery", True)]
    assert "from typing import Optional" in run.gates[0].reason


@pytest.mark.parametrize("lint", [True, False])
def test_imports_do_not_rescue_other_undefined_names(view: RepoView, lint: bool) -> None:
    Reader(view).read_entity("geo/shapes.py::parse_shape")
    answer = "from typing import Optional\n\ndef parse_shape(text) -> Optional[int]:\n    return helper(text)\n"
    editor = EntityEditor(view, Mechanisms(lint_gate=lint))
    before = (view.workspace.root / "geo" / "shapes.py").read_text()
    if lint:
        with pytest.raises(GateFailure, match="helper"):
            editor.edit_entity("geo/shapes.py::parse_shape", new_source=answer)
        assert (view.workspace.root / "geo" / "shapes.py").read_text() == before
    else:  # the gate switched off: no lint and no recovery, the edit lands as given
        editor.edit_entity("geo/shapes.py::parse_shape", new_source=answer)
        assert "from typing" not in (view.workspace.root / "geo" / "shapes.py").read_text()


def test_a_rewrite_without_the_docstring_keeps_the_old_one(view: RepoView) -> None:
    Reader(view).read_entity("geo/shapes.py::Circle.area")
    EntityEditor(view).edit_entity("geo/shapes.py::Circle.area", new_source="def area(self):\n    return 3 * self.r\n")
    text = (view.workspace.root / "geo" / "shapes.py").read_text()
    assert '    def area(self):\n        """Area of the circle."""\n        return 3 * self.r\n' in text
    # an answer with its own docstring keeps that one; a one-line body is left alone
    EntityEditor(view).edit_entity(
        "geo/shapes.py::Circle.area", new_source='def area(self):\n    """Area."""\n    return 2 * self.r\n'
    )
    text = (view.workspace.root / "geo" / "shapes.py").read_text()
    assert '"""Area."""\n        return 2 * self.r\n' in text and "Area of the circle" not in text
    EntityEditor(view).edit_entity("geo/shapes.py::Circle.area", new_source="def area(self): return self.r\n")
    assert "    def area(self): return self.r\n" in (view.workspace.root / "geo" / "shapes.py").read_text()


PARAGRAPHS = (
    "    def pop(self, index=-1):\n"
    '        """Remove and return the value at `index`.\n'
    "\n"
    "        Negative indices are supported.\n"
    "    \n"
    "        >>> SortedList('ab').pop()\n"
    "        'b'\n"
    '        """\n'
    "        return self._pop(index)\n"
)


def test_a_kept_docstring_keeps_its_blank_lines_and_indentation() -> None:
    """Found in session 7's A/B: every blank line of a put-back docstring was lost and the next line indented twice
    (the blank line's newline was cut with its indentation)."""
    answer = "def pop(self, index=-1):\n    return self._pop(index or -1)\n"
    kept = keep_docstring(PARAGRAPHS, answer)
    doc = PARAGRAPHS.splitlines(keepends=True)[1:8]
    expected = ["    " + line[8:] if line.strip() else line.lstrip(" ") for line in doc]
    assert kept.splitlines(keepends=True) == [
        answer.splitlines(keepends=True)[0],
        *expected,
        "    return self._pop(index or -1)\n",
    ]
    assert "\n\n    Negative indices" in kept and "\n\n    >>> SortedList" in kept


def test_a_block_cut_off_after_the_entity_still_gives_the_entity(view: RepoView) -> None:
    Reader(view).read_entity("geo/shapes.py::parse_shape")
    answer = (
        "```python\ndef parse_shape(text):\n    kind, _, size = text.partition(':')\n    if kind == 'circle':\n"
        "        return Circle(float(size))\n    return None\n\ndef long_function():\n    '''A docstring the model"
        " never closed.\n    x0 = 0\n```"
    )
    run = EntityEditor(view).edit_entity("geo/shapes.py::parse_shape", new_source=answer)
    text = (view.workspace.root / "geo" / "shapes.py").read_text()
    assert "        return Circle(float(size))\n    return None\n" in text and "never closed" not in text
    assert [g.gate for g in run.gates] == ["edit_recovery"]
    Reader(view).read_entity("geo/shapes.py::long_function", window=0)
    with pytest.raises(ToolFailure, match="does not parse"):  # the entity itself cut off: still refused
        EntityEditor(view).edit_entity("geo/shapes.py::long_function", new_source=answer)


def test_a_refused_edit_carries_the_recoveries_made_before_the_refusal(view: RepoView) -> None:
    Reader(view).read_entity("geo/shapes.py::parse_shape")
    answer = "```python\ndef parse_shape(text):\n    return helper(text)\n\ndef long_function():\n    '''cut\n```"
    with pytest.raises(GateFailure, match="helper") as refused:
        EntityEditor(view).edit_entity("geo/shapes.py::parse_shape", new_source=answer)
    assert [(g.gate, g.ok) for g in refused.value.gates] == [("edit_recovery", True), ("lint", False)]
