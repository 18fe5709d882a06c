"""Issue 17's named-entity split and the generic-file prior, on small repositories built here: a named entry point's
weight for its file apart from its weight for itself (`named_file`), what it calls or contains (`reach`,
`reach_file`), and the hubness of files that match any text about the repository (priors.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from snaffle.agentless.documents import FileBm25, build_documents
from snaffle.agentless.issue_text import parse_issue
from snaffle.agentless.localize import Localizer, Signals, Weights, rank
from snaffle.agentless.priors import discount, hubness
from snaffle.index.parse import parse_source
from snaffle.index.repo import RepoIndex
from tests.helpers import make_repo, only_signals, packaged_with

PRINTING = (
    "def render(expr, **settings):\n"
    '    """Render an expression as text."""\n'
    "    return TextPrinter(settings).doprint(expr)\n"
    "\n\n"
    "class TextPrinter:\n"
    "    def __init__(self, settings):\n"
    "        self.settings = settings\n"
    "\n"
    "    def doprint(self, expr):\n"
    "        return getattr(self, '_print_' + type(expr).__name__)(expr)\n"
    "\n"
    "    def _print_Sum(self, expr):\n"
    "        return ' + '.join(map(str, expr.terms))\n"
    "\n"
    "    def _print_Product(self, expr):\n"
    "        return ' * '.join(map(str, expr.terms))\n"
    "\n\n"
    "def unrelated_helper(value):\n"
    "    return value\n"
)
FILES: dict[str, str | bytes] = {
    "calc/__init__.py": "",
    "calc/printing.py": PRINTING,
    "calc/terms.py": "class Sum:\n    def __init__(self, *terms):\n        self.terms = terms\n",
}
ISSUE = "`render(total)` prints the terms of a sum in the wrong order.\n"


def localizer(tmp_path: Path) -> Localizer:
    return Localizer(RepoIndex(make_repo(tmp_path / "calc", FILES)))


def selectors(scores: dict) -> dict[str, float]:  # type: ignore[type-arg]
    return {e.selector: round(v, 4) for e, v in scores.items()}


def test_reach_flows_from_a_named_entry_point_to_the_class_it_calls_and_its_methods(tmp_path: Path) -> None:
    found = localizer(tmp_path)
    named = found.identifier(parse_issue(ISSUE))
    reach = selectors(found.reach(named))
    assert "calc/printing.py::render" not in reach  # the seed itself is not what it reaches
    assert reach["calc/printing.py::TextPrinter"] > reach["calc/printing.py::TextPrinter._print_Sum"] > 0
    assert reach["calc/printing.py::TextPrinter._print_Sum"] == reach["calc/printing.py::TextPrinter._print_Product"]
    assert "calc/printing.py::unrelated_helper" not in reach


def test_reach_of_a_named_class_is_its_methods(tmp_path: Path) -> None:
    found = localizer(tmp_path)
    issue = "The `TextPrinter` class loses the settings.\n"
    reach = selectors(found.reach(found.identifier(parse_issue(issue))))
    methods = {s for s in reach if s.startswith("calc/printing.py::TextPrinter.")}
    assert {"calc/printing.py::TextPrinter.__init__", "calc/printing.py::TextPrinter._print_Sum"} <= methods


def test_named_file_is_the_files_evidence_apart_from_the_entitys(tmp_path: Path) -> None:
    """With `identifier` at 0, the named entry point is no candidate, yet its file still ranks first on the name."""
    found = localizer(tmp_path).prepare()
    signals = found.signals(parse_issue(ISSUE), every=True)
    assert signals.file["named_file"]["calc/printing.py"] == pytest.approx(
        max(v for e, v in signals.entity["identifier"].items() if e.path == "calc/printing.py")
    )
    files, entities = rank(signals, only_signals(named_file=1.0, reach=1.0), 5)
    assert files[0][0] == "calc/printing.py"
    assert "calc/printing.py::render" not in [e.selector for e in entities]
    assert entities[0].selector == "calc/printing.py::TextPrinter"
    _, named_first = rank(signals, only_signals(identifier=1.0, reach=1.0), 5)
    assert named_first[0].selector == "calc/printing.py::render"


def test_reach_file_points_at_the_callees_file(tmp_path: Path) -> None:
    files = dict(FILES)
    files["calc/api.py"] = (
        "from calc.printing import TextPrinter\n\n\ndef show(expr):\n    return TextPrinter({}).doprint(expr)\n"
    )
    found = Localizer(RepoIndex(make_repo(tmp_path / "calc", files))).prepare()
    signals = found.signals(parse_issue("`show(total)` is wrong.\n"), every=True)
    assert set(signals.file["reach_file"]) == {"calc/printing.py"}
    assert "calc/api.py" not in signals.file["reach_file"]


def test_the_new_signals_at_zero_leave_the_ranking_unchanged(tmp_path: Path) -> None:
    found = hub_localizer(tmp_path)
    packaged = packaged_with(dict.fromkeys(("named_file", "reach", "reach_file"), 0.0))
    assert packaged.tuning.generic_prior == 0.0
    issue = "`load_theme` ignores the language: the project theme is the default.\n"
    signals = found.signals(parse_issue(issue), every=True)
    assert signals.generic["site/quickstart.py"] == 1.0  # computed for the bench: every scorer
    bare = replace(
        signals, generic={}, file={n: s for n, s in signals.file.items() if n not in ("named_file", "reach_file")}
    )
    assert rank(signals, packaged, 10) == rank(bare, packaged, 10)
    assert found.signals(parse_issue(issue)).generic == {}  # not computed when its prior is off


HUB = (
    '"""Project generator: asks for the project name, the author, the version, the language, the theme, the '
    'extensions, the builder, the source and build directories, the master document, the templates."""\n\n\n'
    "def ask_project_name_author_version():\n    return 'name author version'\n\n\n"
    "def ask_language_theme_extensions():\n    return 'language theme extensions'\n\n\n"
    "def ask_builder_source_build_directories():\n    return 'builder source build directories'\n\n\n"
    "def ask_master_document_templates():\n    return 'master document templates'\n"
)
TOPICS = {
    "author": ("format_author", "author, version", "The author and the version, formatted."),
    "theme": ("load_theme", "theme, language", "Load a theme for a language."),
    "builder": ("run_builder", "builder, source, build", "Run a builder from the source to the build directory."),
    "document": ("read_document", "master, document", "Read the master document."),
    "templates": ("find_templates", "templates, directories", "Find the templates in the directories."),
    "project": ("new_project", "project, name", "A new project of this name."),
    "extensions": ("add_extensions", "extensions, builder", "Add extensions to a builder."),
}
"""Small files of one topic each: a function, its parameters, its docstring."""


def topic(name: str, parameters: str, doc: str) -> str:
    return f'def {name}({parameters}):\n    """{doc}"""\n    return {parameters.split(",")[0]}\n'


def hub_repository() -> tuple[list[str], list, list[str]]:  # type: ignore[type-arg]
    """The generator and the topic files: paths, documents, and each file's docstrings (the hubness queries)."""
    paths = ["site/quickstart.py", *(f"site/{name}.py" for name in TOPICS)]
    texts = [HUB, *(topic(*v) for v in TOPICS.values())]
    parsed = [parse_source(p, t.encode()) for p, t in zip(paths, texts, strict=True)]
    documents = [build_documents(t.encode(), f.entities) for t, f in zip(texts, parsed, strict=True)]
    return paths, documents, [" ".join(e.doc for e in f.entities) for f in parsed]


def test_a_file_that_matches_every_other_files_words_is_the_hub() -> None:
    paths, documents, prose = hub_repository()
    hubs = hubness(paths, FileBm25(paths, documents, Weights.load().file_bm25), prose)
    assert hubs["site/quickstart.py"] == 1.0
    assert all(v < 1.0 for p, v in hubs.items() if p != "site/quickstart.py")


def hub_localizer(tmp_path: Path) -> Localizer:
    files: dict[str, str | bytes] = {"site/__init__.py": "", "site/quickstart.py": HUB}
    files.update({f"site/{name}.py": topic(*values) for name, values in TOPICS.items()})
    return Localizer(RepoIndex(make_repo(tmp_path / "site", files))).prepare()


def test_the_generic_prior_moves_the_hub_below_the_file_it_outranked(tmp_path: Path) -> None:
    """Attack: a generic file outranks the one an issue is about on shared words; the prior (from the repository
    alone) discounts it."""
    found = hub_localizer(tmp_path)
    issue = "The theme is ignored when the project has a language set.\n"
    signals = found.signals(parse_issue(issue), every=True)
    weights = only_signals(bm25=1.0, bm25_file=1.0)
    before, _ = rank(signals, weights, 5)
    assert before[0][0] == "site/quickstart.py"
    after, _ = rank(signals, replace(weights, tuning=replace(weights.tuning, generic_prior=0.75)), 5)
    assert after[0][0] == "site/theme.py"


def test_discount_is_one_when_the_prior_is_off() -> None:
    assert discount(1.0, 0.0) == 1.0
    assert discount(0.5, 0.5) == 0.75


def test_a_repository_smaller_than_the_depth_has_no_hubs() -> None:
    paths, documents, prose = hub_repository()
    assert hubness(paths[:5], FileBm25(paths[:5], documents[:5], Weights.load().file_bm25), prose[:5]) == {}


def test_the_first_files_best_entity_leads_when_it_scores_close_enough(tmp_path: Path) -> None:
    """`pkg/a.py` is the file the issue names, yet `beta` of another file scores higher on words alone."""
    repo = make_repo(
        tmp_path / "pkg", {"pkg/a.py": "def alpha():\n    return 1\n", "pkg/b.py": "def beta():\n    return 2\n"}
    )
    index = RepoIndex(repo)
    alpha, beta = index.entities("pkg/a.py")[1], index.entities("pkg/b.py")[1]
    signals = Signals({"bm25": {alpha: 0.5, beta: 1.0}}, {"path_mention": {"pkg/a.py": 1.0}})
    weights = only_signals(bm25=1.0, path_mention=3.0)
    weights = replace(weights, tuning=replace(weights.tuning, file_to_entity=0.0))

    def first(lead: float) -> str:
        files, entities = rank(signals, replace(weights, tuning=replace(weights.tuning, top_file_lead=lead)), 5)
        assert files[0][0] == "pkg/a.py"
        return entities[0].selector

    assert first(0.0) == "pkg/b.py::beta"
    assert first(0.25) == "pkg/b.py::beta"  # 0.5 is below 1 - 0.25 of beta's 1.0
    assert first(0.5) == first(1.0) == "pkg/a.py::alpha"
    assert [
        e.selector for e in rank(signals, replace(weights, tuning=replace(weights.tuning, top_file_lead=1.0)), 5)[1]
    ] == [
        "pkg/a.py::alpha",
        "pkg/b.py::beta",
    ]
