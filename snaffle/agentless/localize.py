"""Deterministic localization, zero model tokens: named scorers with weights from data, summed per entity.

Entity scorers: traceback frames (by file and function name), identifiers matched to entity names, qualified names
resolved to one entity, BM25F over entity documents, verbatim quotes of messages and code (and where the code raises
them), the lines the issue links to (permalink.py), what the changes it refers to touched (`#7215`: referenced.py),
the methods of named classes, the def/ref graph around named entities (callees, callers, a personalized PageRank:
graph.py), the definitions named tests call, and Ochiai SBFL from per-test coverage when a failing test is given; what
the named entities call or contain (`reach`). File scorers: paths and dotted modules named in the issue, imports of the
tests it names, BM25F over whole files, the files that named files import, the files holding the named entities
(`named_file`: a name's weight for its file apart from its weight for itself) and what they reach, and the files past
commits changed whose messages read like the issue (history.py; it ranks files, and passes its entities only
`[tuning] history_to_entity` of it). A prior learned from the repository alone discounts generic files (priors.py).
Test files are never candidates.
"""

from __future__ import annotations

import builtins
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from snaffle import data
from snaffle.agentless.documents import Bm25Params, DocumentStore, EntityBm25, FileBm25, FileDocuments
from snaffle.agentless.generated import GeneratedRule, generated_files
from snaffle.agentless.graph import RefGraph, pagerank
from snaffle.agentless.history import CommitStore, History, HistoryParams
from snaffle.agentless.issue_text import IDENTIFIER_RE, Frame, IssueFacts, identifier_pieces, parse_issue, tokenize
from snaffle.agentless.permalink import linked_entities
from snaffle.agentless.priors import discount, hubness
from snaffle.agentless.referenced import referenced_scores
from snaffle.cache import cache_dir
from snaffle.gates import is_test_file
from snaffle.index.cache import IndexedFile
from snaffle.index.imports import imported_modules, imported_names, module_name
from snaffle.index.parse import Entity, innermost
from snaffle.index.repo import RepoIndex

Scores = dict[Entity, float]
FileScores = dict[str, float]
TOP = 10
"""Files and entities ranked unless asked otherwise (`snaffle localize --top`)."""
BM25_ENTITY_TOP = 1000
"""Entities kept from BM25 (the rest score too little to matter once file scores are shared out)."""
QUOTE_MAX_FILES = 3
"""A quote found in more files than this is boilerplate, not a pointer."""
CALLEE_SEEDS = 5
"""The named entities whose callees (and callers) get a share of their score."""
REACH_MEMBERS = 0.5
"""What the methods of a class that a named entity calls get of the class's reach (one step further down)."""
PAGERANK_SEEDS = 10
"""The named entities the PageRank restarts at."""
FRAME_NAME_MISS = 0.5
"""A frame whose function is not defined in its file counts this much at the entity of its line."""
DISPATCH_MIN_CHARS = 3
"""The shortest name the dispatch signal matches after a handler's prefix (`_print_` + `Add`)."""
DOTTED_PARTS_CAP = 12
"""A dotted name longer than this names no module path and qualname (sympy's deepest: 7); a longer one is not looked
up (each length of it would be: quadratic in a hostile issue's endless chains)."""
REEXPORT_HOPS = 3
"""How many `from x import name` a dotted name is followed through (`pkg` -> `pkg.sub` -> `pkg.sub.mod`)."""
USES_CAP = 30
"""A name more bodies use than this (`dtype`, `node_id`) says nothing about which of them reads it."""
BUILTINS = frozenset(dir(builtins))
"""`ValueError`, `isinstance`: Python's names, not the repository's."""
OWN_NAME_FILES = 10
"""The files (ranked by their file-level signals) whose entities the own-name and parameter signals look at."""
SELF_NAMES = frozenset({"self", "cls", "args", "kwargs"})
RAISE_WINDOW = 3
"""Lines before a quoted message within which a `raise` or warning makes it the raised text."""
RAISE_MARKERS = ("raise ", "warn(", "warnings.warn", "Error(", "Exception(")
PERIPHERAL_DIRS = frozenset(
    "doc docs documentation example examples gallery tutorials scripts script tools bin benchmarks benchmark "
    "asv_bench bench ci dev devtools release".split()
)
"""Top-level directories whose files are rarely where an issue's fix goes."""
PERIPHERAL_FILES = frozenset("setup.py conf.py noxfile.py tasks.py fabfile.py versioneer.py".split())
"""Top-level files of the same kind."""


@dataclass(frozen=True)
class RankedEntity:
    """A ranked entity and the signals that fired for it."""

    selector: str
    path: str
    score: float
    signals: tuple[str, ...]


@dataclass(frozen=True)
class Localization:
    """Ranked files and entities."""

    files: tuple[tuple[str, float], ...]
    entities: tuple[RankedEntity, ...]
    elapsed_s: float

    def as_json(self) -> dict[str, Any]:
        return {
            "files": [{"path": p, "score": round(s, 4)} for p, s in self.files],
            "entities": [
                {"selector": c.selector, "path": c.path, "score": round(c.score, 4), "signals": list(c.signals)}
                for c in self.entities
            ],
            "elapsed_s": round(self.elapsed_s, 3),
        }


EXECUTION_SIGNALS = ("raised", "executed", "origin")
"""From running the issue's snippets (agentless/facts.py, origin.py): the raising repo frames, the entities they ran,
the calls that first returned a wrong value's wrong part."""
ENTITY_SIGNALS = (
    "traceback",
    "identifier",
    "qualified",
    "bm25",
    "quote",
    "raises",
    "permalink",
    "referenced",
    "member",
    "callee",
    "caller",
    "pagerank",
    "test_callee",
    "named_member",
    "own_name",
    "param_name",
    "dispatch",
    "uses",
    "reach",
    "title",
    "title_named",
    "sbfl",
    *EXECUTION_SIGNALS,
)
KIND_PRIORS = MappingProxyType({"class": "class_prior", "function": "function_prior"})
"""Entity kinds whose ranking score a [tuning] prior scales (methods, the commonest home of a fix, are the unit)."""
FILE_SIGNALS = (
    "path_mention",
    "test_import",
    "bm25_file",
    "imported",
    "named_file",
    "reach_file",
    "title_file",
    "history",
)
FILE_PRIORS = ("generic",)
"""Per-file values in [0, 1] that scale a file's score (a [tuning] strength each) instead of adding to it."""
WEIGHTS_FILE = "localize.toml"


@dataclass(frozen=True)
class Tuning:
    """The constants of the [tuning] table of snaffle/data/localize.toml (its comments say what each does)."""

    traceback_decay: float
    prose_identifier: float
    dotted_module: float
    dotted_package: float
    entity_to_file: float
    file_to_entity: float
    peripheral_prior: float
    class_prior: float
    function_prior: float
    member_yield: float
    generic_prior: float
    top_file_lead: float
    history_to_entity: float


@dataclass(frozen=True)
class Weights:
    """Signal weights, tuning constants and BM25F parameters: snaffle/data/localize.toml, every key required."""

    weights: Mapping[str, float]
    """One per signal of `ENTITY_SIGNALS` and `FILE_SIGNALS`."""
    tuning: Tuning
    entity_bm25: Bm25Params
    file_bm25: Bm25Params
    history: HistoryParams
    strip_template: bool
    """[issue]: drop an issue template's headings, stock sentences and environment lines from the query words."""
    defined_foreign: bool
    """[issue]: the names the issue's code defines are the reporter's own, not names of the repository's entities."""
    generated: GeneratedRule
    """[generated]: files a tool wrote, left out of the ranking."""

    @classmethod
    def load(cls) -> Weights:
        """The packaged weights (read now, not at import)."""
        return cls.from_tables(data.load(WEIGHTS_FILE))

    @classmethod
    def from_tables(cls, tables: Mapping[str, Any]) -> Weights:
        """The record from the file's tables; a missing (or unknown) key is a `DataError` naming it."""
        where = f"snaffle/data/{WEIGHTS_FILE}"

        def part(key: str) -> Mapping[str, Any]:
            return data.table(tables, key, where)

        weights = data.required(part("weights"), (*ENTITY_SIGNALS, *FILE_SIGNALS), f"{where} [weights]")
        issue = data.required(part("issue"), ("strip_template", "defined_foreign"), f"{where} [issue]")
        return cls(
            MappingProxyType(weights),
            data.record(Tuning, part("tuning"), f"{where} [tuning]"),
            data.record(Bm25Params, part("entity_bm25"), f"{where} [entity_bm25]"),
            data.record(Bm25Params, part("file_bm25"), f"{where} [file_bm25]"),
            data.record(HistoryParams, part("history"), f"{where} [history]"),
            bool(issue["strip_template"]),
            bool(issue["defined_foreign"]),
            GeneratedRule.from_table(part("generated"), f"{where} [generated]"),
        )


@dataclass(frozen=True)
class Tables:
    """What `Localizer.prepare` builds once per repository; the tables only some signals read are built when first
    read (a signal weighted 0 is not run: a new checkout's `localize` would pay for them all)."""

    paths: list[str]
    path_set: frozenset[str]
    documents: list[FileDocuments]
    candidates: list[Entity]
    records: list[IndexedFile]
    entity_bm25: EntityBm25
    file_bm25: FileBm25
    by_name: dict[str, list[Entity]]
    members: dict[Entity, list[Entity]]
    files_by_name: dict[str, list[str]]

    @cached_property
    def by_token(self) -> dict[str, list[Entity]]:
        return _token_table(self.candidates)

    @cached_property
    def by_suffix(self) -> dict[str, list[Entity]]:
        return _suffix_table(self.candidates)

    @cached_property
    def numbers(self) -> dict[Entity, tuple[int, int]]:
        """Each entity's file number and its number within the file."""
        return {e: (n, local) for n, record in enumerate(self.records) for local, e in enumerate(record.entities)}


@dataclass(frozen=True)
class Signals:
    """Each scorer's values for one issue, in [0, 1]: per entity, and per file."""

    entity: Mapping[str, Scores]
    file: Mapping[str, FileScores]
    generic: Mapping[str, float] = field(default_factory=dict)
    """Each file's hubness (priors.py): how generic it is, from the repository alone."""


class Localizer:
    """Ranks the entities of one indexed repository against an issue."""

    def __init__(self, index: RepoIndex, weights: Weights | None = None) -> None:
        self.index = index
        self.weights = weights or Weights.load()
        self._tables: Tables | None = None
        self._graph: RefGraph | None = None
        self._generic: dict[str, float] | None = None
        self._history: History | None = None
        self._imports: dict[str, dict[str, str]] = {}
        self._modules: dict[str, str | None] = {}
        self._loaded: dict[str, FileDocuments] = {}

    def prepare(self, store: DocumentStore | None = None) -> Localizer:
        """The per-repository work, done once: every non-test file's documents (cached by content hash next to
        the structure cache), the BM25 tables and the name tables."""
        store = store or DocumentStore(self.index.cache_dir)
        files = self.index.files()
        paths = ranked_paths(self.index, self.weights.generated)
        # New files are parsed by worker processes (their documents built there too) while the documents of the
        # files seen before are loaded here; records the manifest.
        self.index.build(paths=paths, companion=store.companion(), meanwhile=partial(self._documents, store))
        records = [self.index.record(path) for path in paths]
        loaded, self._loaded = self._loaded, {}
        self._modules = {}  # module paths are read off the files found now
        documents = [loaded.get(r.info.path) or self._document(store, r) for r in records]
        candidates = [entity for record in records for entity in record.entities]
        store.report_damaged()
        self._tables = Tables(
            paths=paths,
            path_set=frozenset(paths),
            documents=documents,
            candidates=candidates,
            records=records,
            entity_bm25=EntityBm25(paths, documents, self.weights.entity_bm25),
            file_bm25=FileBm25(paths, documents, self.weights.file_bm25),
            by_name=_name_table(candidates),
            members=_member_table(candidates),
            files_by_name=_group_by_basename(files),
        )
        return self

    def _documents(self, store: DocumentStore, paths: Sequence[str]) -> None:
        """Load the documents of indexed files (a build's work beside its parsing), for `prepare` to take."""
        for path in paths:
            self._loaded[path] = self._document(store, self.index.record(path))

    def _document(self, store: DocumentStore, record: IndexedFile) -> FileDocuments:
        """One file's documents, from the store (which keeps them in memory for the next call)."""
        return store.get(record.info.sha1, record.entities, partial(self.index.source, record.info.path))

    @property
    def tables(self) -> Tables:
        """The prepared tables (prepared on first use)."""
        if self._tables is None:
            self.prepare()
        assert self._tables is not None
        return self._tables

    @property
    def graph(self) -> RefGraph:
        """The def/ref graph of the candidates (built on first use: only graph signals need it)."""
        if self._graph is None:
            tables = self.tables
            self._graph = RefGraph([self.index.entities(p) for p in tables.paths], tables.documents)
        return self._graph

    @property
    def generic(self) -> Mapping[str, float]:
        """Each file's hubness (priors.py; computed on first use: only the generic prior needs it)."""
        if self._generic is None:
            tables = self.tables
            prose = [" ".join(e.doc for e in self.index.entities(p)) for p in tables.paths]
            self._generic = hubness(tables.paths, tables.file_bm25, prose)
        return self._generic

    @property
    def history(self) -> History:
        """The repository's first-parent commits and their messages' BM25 (read on first use)."""
        if self._history is None:
            self._history = CommitStore(self.index.cache_dir).history(self.index.root, self.weights.history)
        return self._history

    def localize(
        self, issue: str, sbfl: Scores | None = None, top: int = TOP, execution: Mapping[str, Scores] | None = None
    ) -> Localization:
        """`execution`: scores per signal of `EXECUTION_SIGNALS`, from running the issue's snippets."""
        started = time.monotonic()
        found = self.signals(parse_issue(issue, self.weights.strip_template), sbfl)
        if execution:
            executed = {k: execution.get(k, {}) for k in EXECUTION_SIGNALS}
            found = Signals({**found.entity, **executed}, found.file, found.generic)
        files, entities = rank(found, self.weights, top)
        return Localization(files, entities, time.monotonic() - started)

    def signals(
        self, facts: IssueFacts, sbfl: Scores | None = None, every: bool = False, skip: Iterable[str] = ()
    ) -> Signals:
        """Every weighted scorer's output for one issue (a scorer weighted 0 is not run, unless `every`: the
        bench fits weights to all of them but those it `skip`s)."""
        skipped = frozenset(skip)
        run = partial(_unless, skipped) if every else self._weighted
        file = {
            "path_mention": (mentioned := self.path_mention(facts)),
            "test_import": self.test_import(facts),
            "bm25_file": self.bm25_file(facts.words),
        }
        entity = {
            "traceback": self.traceback(facts),
            "identifier": (identified := self.identifier(facts)),
            "bm25": self.bm25(facts.words),
            "quote": self.quote(facts) if run("quote") else {},
            "sbfl": sbfl or {},
        }
        entity.update(self._optional(facts, entity, file, run))
        if run("imported"):
            file["imported"] = self.imported(mentioned, {**identified, **entity["traceback"]})
        if run("named_file"):
            file["named_file"] = per_file(identified)
        if run("title_file"):
            file["title_file"] = self.bm25_file(facts.title_words)
        if run("history"):
            file["history"] = self.history.file_scores(facts.words, self.tables.path_set)
        if run("reach_file"):
            file["reach_file"] = per_file(entity["reach"] if "reach" in entity else self.reach(identified))
        wanted = ("generic" not in skipped) if every else self.weights.tuning.generic_prior > 0
        return Signals(entity, file, self.generic if wanted else {})

    def _optional(
        self,
        facts: IssueFacts,
        found: Mapping[str, Scores],
        files: Mapping[str, FileScores],
        run: Callable[[str], bool],
    ) -> dict[str, Scores]:
        """The entity scorers a weight of 0 switches off (they are not run then)."""
        named = found["identifier"]
        scorers: dict[str, Callable[[], Scores]] = {
            "qualified": lambda: self.qualified(facts),
            "raises": lambda: self.raises(facts),
            "permalink": lambda: self.permalink(facts),
            "referenced": lambda: referenced_scores(self.index, self.history, facts.references, facts.commits),
            "member": lambda: self.member(named),
            "callee": lambda: self.callee(named),
            "caller": lambda: self.caller(named),
            "pagerank": lambda: self.pagerank({**named, **found["traceback"]}),
            "test_callee": lambda: self.test_callee(facts),
            "named_member": lambda: self.named_member(facts),
            "own_name": lambda: self.own_name(facts, files),
            "param_name": lambda: self.param_name(facts, files),
            "dispatch": lambda: self.dispatch(facts),
            "uses": lambda: self.uses(facts),
            "reach": lambda: self.reach(named),
            "title": lambda: self.bm25(facts.title_words),
            "title_named": lambda: self.identifier(
                replace(facts, code_identifiers=facts.title_identifiers, prose_identifiers=())
            ),
        }
        return {name: scorer() for name, scorer in scorers.items() if run(name)}

    def _weighted(self, signal: str) -> bool:
        return self.weights.weights[signal] > 0

    def traceback(self, facts: IssueFacts) -> Scores:
        """Frames mapped to repo files and, within a file, to the entity of the frame's function name; the
        innermost frame in the repo scores 1, outer ones decay."""
        decay = self.weights.tuning.traceback_decay
        scores: Scores = {}
        in_repo = [(found, f) for f in facts.frames if (found := self.printed_path(f.path))]
        for depth, ((path, sure), frame) in enumerate(reversed(in_repo)):
            entity, named = frame_entity(self.index.entities(path), frame)
            if entity is not None and not is_test_file(path):
                value = sure * decay**depth * (1.0 if named else FRAME_NAME_MISS)
                scores[entity] = max(scores.get(entity, 0.0), value)
        return scores

    def permalink(self, facts: IssueFacts) -> Scores:
        """The entities at the lines the issue links to (permalink.py): each scores 1."""
        return dict.fromkeys(linked_entities(self.index, self.tables.path_set, facts.permalinks), 1.0)

    def qualified(self, facts: IssueFacts) -> Scores:
        """Dotted names that resolve to a module and a qualname in it (`pkg.mod.Class.meth`): that one entity. A
        name the issue's code imported stands for its module's (`xr.where` after `import xarray as xr`, `where`
        after `from xarray import where`: xarray.where, re-exported from xarray.core.computation)."""
        imported = dict(facts.imports)
        scores: Scores = {}
        for identifier in facts.code_identifiers + facts.prose_identifiers:
            if entity := self.resolve_named(identifier, imported):
                scores[entity] = 1.0
        return scores

    def resolve_named(self, identifier: str, imported: Mapping[str, str]) -> Entity | None:
        """The one definition a name of the issue stands for, when its import (`imported`: local name -> module
        or module.name, from the issue's code) or its dotted form says which (`resolve_dotted`)."""
        head, dot, rest = identifier.partition(".")
        dotted = f"{imported[head]}{dot}{rest}" if head in imported else identifier
        return self.resolve_dotted(dotted) if "." in dotted else None

    def resolve_dotted(self, dotted: str, hops: int = REEXPORT_HOPS) -> Entity | None:
        """`pkg.mod.Class.meth` -> that entity of pkg/mod.py, when the module part is a repository file; a name
        the module imports rather than defines (a package's `__init__` re-exporting it) is followed there."""
        parts = dotted.split(".")
        for end, path in self._module_files(parts, len(parts) - 1):
            if is_test_file(path):
                continue
            qualname = ".".join(parts[end:])
            found = [e for e in self.index.entities(path) if e.qualname.split("@")[0] == qualname]
            if found:
                return found[0]
            target = self._imported_names(path).get(parts[end]) if hops else None
            if target and (entity := self.resolve_dotted(".".join([target, *parts[end + 1 :]]), hops - 1)):
                return entity
        return None

    def _imported_names(self, path: str) -> Mapping[str, str]:
        """What a repository file's `from` imports bind (`imports.imported_names`), read once per file."""
        if path not in self._imports:
            package = module_name(self.index.root, path)
            package = package if path.endswith("__init__.py") else package.rpartition(".")[0]
            self._imports[path] = imported_names(self.index.source(path), package)
        return self._imports[path]

    def raises(self, facts: IssueFacts) -> Scores:
        """Quoted messages found verbatim where the code raises or warns (within `RAISE_WINDOW` lines before
        the text): the entity that produced the error the issue shows."""
        scores: Scores = {}
        sources: dict[str, str] = {}
        for text in facts.quotes:
            hits = self._verbatim(text, sources, raising=True)
            if hits and len({e.path for e in hits}) <= QUOTE_MAX_FILES:
                for entity in hits:
                    scores[entity] = min(1.0, scores.get(entity, 0.0) + 1.0 / len(hits))
        return scores

    def caller(self, named: Scores) -> Scores:
        """Entities whose bodies reference the entities the issue names most surely (a bug shown at a helper
        often lives in the code that calls it)."""
        scores: Scores = {}
        seeds = sorted(named.items(), key=lambda pair: (-pair[1], pair[0].selector))[:CALLEE_SEEDS]
        for seed, strength in seeds:
            for entity, share in self.graph.callers(seed):
                scores[entity] = max(scores.get(entity, 0.0), strength * share)
        return scores

    def pagerank(self, seeds: Scores) -> Scores:
        """Personalized PageRank over the def/ref graph from the entities the issue names or its frames hit."""
        top = dict(sorted(seeds.items(), key=lambda pair: (-pair[1], pair[0].selector))[:PAGERANK_SEEDS])
        return {e: v for e, v in pagerank(self.graph, top).items() if e not in top}

    def test_callee(self, facts: IssueFacts) -> Scores:
        """The definitions called by the test functions the issue names (`test_foo` in a test file)."""
        names = {i.rsplit(".", 1)[-1].split("::")[-1] for i in facts.code_identifiers + facts.prose_identifiers}
        names = {n for n in names if n.startswith("test")}
        scores: Scores = {}
        for path in (p for p in self.index.files() if is_test_file(p)) if names else ():
            for test in (e for e in self.index.entities(path) if e.qualname and e.name in names):
                body = self.index.source(path)[test.start_byte : test.end_byte].decode("utf-8", "replace")
                for term in set(tokenize(body)):
                    targets = self.graph.definitions.get(term, [])
                    for target in targets:
                        scores[target] = max(scores.get(target, 0.0), 1.0 / len(targets))
        return scores

    def identifier(self, facts: IssueFacts) -> Scores:
        """Names from the issue equal to entity names, weighted down when a name is common (IDF-like). The
        reporter's own variables and names reached through a third-party import (`np.array`) are skipped, and with
        `[issue] defined_foreign` the names the issue's code defines (`Basket`, `self.width`)."""
        scores: Scores = {}
        weighted = self._weighted_names(facts)
        defined = set(facts.defined) if self.weights.defined_foreign else set()
        foreign = self._foreign_names(facts) | defined
        imported = dict(facts.imports)
        for identifier, weight in weighted:
            if identifier in foreign or identifier.split(".")[0] in foreign or identifier.rsplit(".", 1)[-1] in defined:
                continue
            if resolved := self.resolve_named(identifier, imported):
                scores[resolved] = min(1.0, scores.get(resolved, 0.0) + weight)
                continue
            for name in _name_forms(identifier):
                matches = self.tables.by_name.get(name, [])
                for entity in matches:
                    value = weight / math.log2(1 + len(matches))
                    scores[entity] = min(1.0, scores.get(entity, 0.0) + value)
        return scores

    def _weighted_names(self, facts: IssueFacts) -> list[tuple[str, float]]:
        """The issue's identifiers with what each counts: 1 from code, `[tuning] prose_identifier` from prose."""
        prose = self.weights.tuning.prose_identifier
        return [(i, 1.0) for i in facts.code_identifiers] + [(i, prose) for i in facts.prose_identifiers]

    def _foreign_names(self, facts: IssueFacts) -> set[str]:
        """Local names bound to modules outside the repository, and the reporter's assigned variables."""
        return self._foreign_imports(facts) | set(facts.assigned)

    def _foreign_imports(self, facts: IssueFacts) -> set[str]:
        """Local names the issue's code binds to modules outside the repository (`np`, `from attr import s`)."""
        return {name for name, module in facts.imports if self.module_path(module.split(".")[0]) is None}

    def named_member(self, facts: IssueFacts) -> Scores:
        """Methods the issue names with their class: `Class.meth`, or `obj.meth` on an `obj = Class(...)` of its
        code (1), or a method name beside its class's name anywhere in the issue (shared out over all such pairs)."""
        identifiers = [i for i in (*facts.code_identifiers, *facts.prose_identifiers) if not i.startswith("_")]
        names = {i.rsplit(".", 1)[-1] for i in identifiers}
        bound = dict(facts.bound)
        ran = {frame.function for frame in facts.frames}  # where a traceback ran, not what the reporter named
        dotted = [p for i in identifiers if len(p := i.split(".")) >= 2 and i not in ran]
        resolved = {(bound.get(p[-2], p[-2]), p[-1]) for p in dotted}
        owners = names | {owner for owner, _ in resolved}
        scores: Scores = {}
        mentioned: list[Entity] = []
        for owner in (e for n in owners for e in self.tables.by_name.get(n, []) if e.kind == "class"):
            for method in self.tables.members.get(owner, []):
                if (owner.name, method.name) in resolved:
                    scores[method] = 1.0
                elif method.name in names:
                    mentioned.append(method)
        for method in mentioned:
            scores[method] = max(scores.get(method, 0.0), 1.0 / math.sqrt(len(mentioned)))
        return scores

    def uses(self, facts: IssueFacts) -> Scores:
        """Entities whose bodies use a compound name the issue writes that no definition bears (`autodoc_typehints`,
        a setting read as `config.autodoc_typehints`; `max_depth`, an attribute): the code that reads it. A name
        many bodies use counts less (as `identifier`); names bound to another library and Python's builtins are
        skipped. A name the issue's code assigns counts: `autodoc_typehints = "description"` in a reporter's
        conf.py is the setting the repository reads."""
        foreign = self._foreign_imports(facts)
        terms: dict[str, float] = {}
        for identifier, weight in self._weighted_names(facts):
            name = identifier.rsplit(".", 1)[-1]
            if (
                identifier.split(".")[0] in foreign
                or name in foreign
                or name in self.tables.by_name
                or name in BUILTINS
            ):
                continue
            if len(identifier_pieces(name)) > 1:  # `autodoc_typehints`: its pieces and itself, one word
                term = name.lower().strip("_")
                terms[term] = max(terms.get(term, 0.0), weight)
        scores: Scores = {}
        for term, weight in terms.items():
            tables = zip(self.tables.paths, self.tables.documents, strict=True)
            files = [(path, doc.body(term)[0::2]) for path, doc in tables if term in doc.bodies]
            count = sum(len(locals_) for _, locals_ in files)
            if count > USES_CAP:
                continue
            for path, locals_ in files:
                entities = self.index.entities(path)
                for entity in (entities[local] for local in locals_):
                    scores[entity] = min(1.0, scores.get(entity, 0.0) + weight / math.log2(1 + count))
        return scores

    def own_name(self, facts: IssueFacts, files: Mapping[str, FileScores]) -> Scores:
        """Within the files the file-level signals rank first, entities whose own name the issue's words spell:
        the share of the name's word pieces among them (`write` 1, `build_digest_header` 1/4 for `digest`)."""
        words = set(facts.words)
        found: Scores = {}
        for entity in self._pointed_entities(files):
            pieces = identifier_pieces(entity.name)
            if share := sum(piece in words for piece in pieces) / max(1, len(pieces)):
                found[entity] = share
        return found

    def param_name(self, facts: IssueFacts, files: Mapping[str, FileScores]) -> Scores:
        """Within the files the file-level signals rank first, functions with a parameter the issue names (the
        `formats` argument): 1/2 for one such name, 3/4 for two, and so on."""
        names = {i.rsplit(".", 1)[-1] for i in (*facts.code_identifiers, *facts.prose_identifiers)} - SELF_NAMES
        found: Scores = {}
        for entity in (e for e in self._pointed_entities(files) if e.kind in ("function", "method")):
            parameters = set(IDENTIFIER_RE.findall(entity.signature.partition("(")[2])) - {entity.name}
            if matched := len(parameters & names):
                found[entity] = 1.0 - 0.5**matched
        return found

    def dispatch(self, facts: IssueFacts) -> Scores:
        """Functions and methods named for a type or name the issue uses, after a prefix (`_print_MatAdd`,
        `visit_literal`, `_eval_is_zero` for `MatAdd`, `literal`, `is_zero`): the handler a dispatcher picks for
        it. A name that many entities handle counts less (as `identifier`)."""
        names = {i.rsplit(".", 1)[-1] for i in (*facts.code_identifiers, *facts.prose_identifiers)}
        scores: Scores = {}
        for name in (n for n in names if len(n) >= DISPATCH_MIN_CHARS):
            matches = self.tables.by_suffix.get(name, [])
            for entity in matches:
                scores[entity] = max(scores.get(entity, 0.0), 1.0 / math.log2(1 + len(matches)))
        return scores

    def _pointed_entities(self, files: Mapping[str, FileScores]) -> list[Entity]:
        """The entities of the `OWN_NAME_FILES` non-test files with the highest sum of file-level signals."""
        totals: FileScores = defaultdict(float)
        for scores in files.values():
            for path, value in scores.items():
                totals[path] += value
        pointed = sorted((p for p in totals if not is_test_file(p)), key=lambda p: (-totals[p], p))[:OWN_NAME_FILES]
        return [e for p in pointed for e in self.index.entities(p) if e.qualname]

    def member(self, identified: Scores) -> Scores:
        """Methods of the classes the issue names: a class's identifier score, spread over its methods."""
        scores: Scores = {}
        for owner, value in identified.items():
            methods = self.tables.members.get(owner, [])
            for method in methods:
                scores[method] = max(scores.get(method, 0.0), value / math.sqrt(len(methods)))
        return scores

    def callee(self, named: Scores) -> Scores:
        """Functions called by the entities the issue names most surely: a bug reported at an API often lives in
        a helper it calls. A called name shared by many entities counts less."""
        tables = self.tables
        scores: Scores = {}
        seeds = sorted(named.items(), key=lambda pair: (-pair[1], pair[0].selector))[:CALLEE_SEEDS]
        for seed, strength in seeds:
            for term in self._body_terms(seed):
                matches = tables.by_token.get(term, [])
                for entity in matches:
                    if entity != seed:
                        scores[entity] = max(scores.get(entity, 0.0), strength / len(matches))
        return scores

    def reach(self, named: Scores) -> Scores:
        """What the entities the issue names most surely call or contain, one step down the def/ref graph: their
        callees (a name shared by n definitions: 1/n), shared out over what each seed reaches (1/sqrt(count)),
        the methods of a named class, and `REACH_MEMBERS` of a called class's reach to each of its methods (an
        entry point the issue names, `latex(...)`, while the fix is in the printer class it calls)."""
        scores: Scores = {}
        seeds = sorted(named.items(), key=lambda pair: (-pair[1], pair[0].selector))[:CALLEE_SEEDS]
        for seed, strength in seeds:
            reached = [(t, w) for t, w in self.graph.callees(seed) if t != seed]
            reached += [(m, 1.0) for m in self.tables.members.get(seed, [])]
            for target, share in reached:
                value = strength * share / math.sqrt(len(reached))
                scores[target] = max(scores.get(target, 0.0), value)
                methods = self.tables.members.get(target, []) if target.kind == "class" else []
                for method in methods:
                    lower = REACH_MEMBERS * value / math.sqrt(len(methods))
                    scores[method] = max(scores.get(method, 0.0), lower)
        return scores

    def _body_terms(self, entity: Entity) -> list[str]:
        """The terms of an entity's body document (read back from its file's inverted postings)."""
        tables = self.tables
        number = tables.numbers.get(entity)
        if number is None:
            return []
        file_number, local = number
        document = tables.documents[file_number]
        return [term for term in document.bodies if local in document.body(term)[0::2]]

    def bm25(self, words: Sequence[str]) -> Scores:
        """BM25F of the issue's words against entity documents (path, head, body), normalized to the best."""
        if not words or not self.tables.candidates:
            return {}
        raw = self.tables.entity_bm25.scores(words)
        best = float(raw.max()) if raw.size else 0.0
        if best <= 0:
            return {}
        top = np.argsort(-raw)[:BM25_ENTITY_TOP]
        return {self.tables.candidates[i]: float(raw[i]) / best for i in top if raw[i] > 0}

    def quote(self, facts: IssueFacts) -> Scores:
        """Text the issue quotes (message runs, code lines) found verbatim in at most `QUOTE_MAX_FILES` files:
        the entities holding it share the quote's point."""
        scores: Scores = {}
        sources: dict[str, str] = {}
        for text in facts.quotes:
            hits = self._verbatim(text, sources)
            if not hits or len({e.path for e in hits}) > QUOTE_MAX_FILES:
                continue
            for entity in hits:
                scores[entity] = min(1.0, scores.get(entity, 0.0) + 1.0 / len(hits))
        return scores

    def _verbatim(self, text: str, sources: dict[str, str], raising: bool = False) -> set[Entity]:
        """Entities (not modules) whose lines hold `text` (when `raising`, only after a raise or a warn);
        files lacking any of its words are not read."""
        terms = set(tokenize(text))
        tables = self.tables
        found: set[Entity] = set()
        for path, documents in zip(tables.paths, tables.documents, strict=True):
            if not terms or not terms <= documents.terms.keys():
                continue
            if path not in sources:
                sources[path] = self.index.source(path).decode("utf-8", "replace")
            source, start = sources[path], 0
            while (start := sources[path].find(text, start)) >= 0:
                owner = innermost(self.index.entities(path), source.count("\n", 0, start))
                if owner is not None and owner.qualname and (not raising or _raised(source, start)):
                    found.add(owner)
                start += len(text)
        return found

    def bm25_file(self, words: Sequence[str]) -> FileScores:
        """BM25 of the issue's words against whole non-test files (path and content), normalized. Every file that
        shares a word keeps its score: a cut at the 50th file (until session 29) gave the 51st nothing, while its
        entities' own BM25 could still rank it."""
        if not words or not self.tables.paths:
            return {}
        raw = self.tables.file_bm25.scores(words)
        best = float(raw.max()) if raw.size else 0.0
        if best <= 0:
            return {}
        return {self.tables.paths[i]: float(raw[i]) / best for i in np.flatnonzero(raw > 0)}

    def path_mention(self, facts: IssueFacts) -> FileScores:
        """Files named by path (a bare name shared by several files counts little) or by dotted module name, which
        is much less sure (`extensions = ['pkg.ext.x']` names a package, not the file to fix)."""
        scores: FileScores = {}
        for mention in facts.paths:
            if found := self.printed_path(mention):
                scores[found[0]] = max(scores.get(found[0], 0.0), found[1])
        tuning = self.weights.tuning
        for dotted in (i for i in facts.code_identifiers + facts.prose_identifiers if "." in i):
            if module := self.module_path(dotted):
                package = module.endswith("/__init__.py")
                value = tuning.dotted_package if package else tuning.dotted_module
                if value > 0:
                    scores[module] = max(scores.get(module, 0.0), value)
        return {p: s for p, s in scores.items() if not is_test_file(p)}

    def test_import(self, facts: IssueFacts) -> FileScores:
        """Repository modules imported by the test files the issue mentions (path or frame)."""
        tests = {p for m in [*facts.paths, *(f.path for f in facts.frames)] if (p := self.repo_path(m))}
        scores: FileScores = {}
        for test in (t for t in tests if is_test_file(t)):
            for module in imported_modules(self.index.source(test)):
                if path := self.module_path(module):
                    scores[path] = 1.0
        return scores

    def imported(self, mentioned: FileScores, named: Scores) -> FileScores:
        """The import graph one step out: repository files imported by the files the issue names or points
        into (its frames, its named entities), a seed's strength shared over what it imports."""
        seeds: FileScores = dict(mentioned)
        for entity, value in sorted(named.items(), key=lambda pair: (-pair[1], pair[0].selector))[:CALLEE_SEEDS]:
            seeds[entity.path] = max(seeds.get(entity.path, 0.0), min(1.0, value))
        scores: FileScores = {}
        for seed, strength in seeds.items():
            targets = {p for m in imported_modules(self.index.source(seed)) if (p := self.module_path(m))}
            targets = {p for p in targets if p != seed and not is_test_file(p)}
            for target in targets:
                scores[target] = max(scores.get(target, 0.0), strength / math.sqrt(len(targets)))
        return scores

    def repo_path(self, printed: str) -> str | None:
        """The repo file a printed path refers to: the longest matching suffix of path components."""
        found = self.printed_path(printed)
        return found[0] if found else None

    def printed_path(self, printed: str) -> tuple[str, float] | None:
        """The repo file a printed path refers to, and how sure that is: 1 when a directory matches too or no
        other file has the name, else 1/n for a bare name that n files share (`__init__.py`, `conf.py`)."""
        parts = printed.replace("\\", "/").split("/")
        files = self.tables.files_by_name.get(parts[-1], [])
        best, best_len = None, 0
        for candidate in files:
            length = _common_suffix(candidate.split("/"), parts)
            if length > best_len:
                best, best_len = candidate, length
        if best is None:
            return None
        return best, 1.0 if best_len > 1 or len(files) == 1 else 1.0 / len(files)

    def module_path(self, dotted: str) -> str | None:
        """`pkg.mod.name` -> pkg/mod.py or pkg/mod/__init__.py (longest module prefix that exists)."""
        if dotted not in self._modules:  # asked again for every file that imports the module
            parts = dotted.split(".")
            self._modules[dotted] = next((path for _, path in self._module_files(parts, len(parts))), None)
        return self._modules[dotted]

    def _module_files(self, parts: Sequence[str], longest: int) -> Iterator[tuple[int, str]]:
        """The repository files the leading parts of a dotted name name as a module (`pkg/mod.py`, then
        `pkg/mod/__init__.py`), longest prefix first and at most `longest` parts, with how many parts each takes. A
        name of more than `DOTTED_PARTS_CAP` parts names none."""
        for end in range(longest if len(parts) <= DOTTED_PARTS_CAP else 0, 0, -1):
            stem = "/".join(parts[:end])
            for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
                if (path := self.repo_path(candidate)) and path.endswith(candidate):
                    yield end, path


def frame_entity(entities: Sequence[Entity], frame: Frame) -> tuple[Entity | None, bool]:
    """The entity a frame ran in, and whether its name says so: the innermost entity at the frame's line when
    its name is the frame's function, else the nearest definition of that name in the file (the printed line
    comes from another version of the code), else the line's entity, unconfirmed."""
    at_line = innermost(entities, frame.line - 1)
    function = frame.function.rsplit(".", 1)[-1]
    if not function or function.startswith("<"):
        return at_line, True
    if at_line is not None and at_line.name == function:
        return at_line, True
    named = [e for e in entities if e.qualname and e.name == function]
    if named:
        return min(named, key=lambda e: (abs(e.start_line - (frame.line - 1)), e.start_line)), True
    return at_line, False


def _raised(source: str, offset: int) -> bool:
    """Whether a raise or a warning call starts within `RAISE_WINDOW` lines before `offset`."""
    line_start = source.rfind("\n", 0, offset) + 1
    window_start = line_start
    for _ in range(RAISE_WINDOW):
        window_start = source.rfind("\n", 0, max(window_start - 1, 0)) + 1
    window = source[window_start:offset]
    return any(marker in window for marker in RAISE_MARKERS)


def _unless(skipped: frozenset[str], signal: str) -> bool:
    return signal not in skipped


def per_file(scores: Scores) -> FileScores:
    """A file's value of an entity signal: its best entity's (modules are files, not entities)."""
    found: FileScores = {}
    for entity, value in scores.items():
        if entity.qualname and value > 0:
            found[entity.path] = max(found.get(entity.path, 0.0), value)
    return found


def _name_table(entities: Iterable[Entity]) -> dict[str, list[Entity]]:
    """Entities by their own name and by their qualname (`Class.method`)."""
    by_name: dict[str, list[Entity]] = defaultdict(list)
    for entity in entities:
        if entity.qualname:
            qualname = entity.qualname.split("@")[0]
            by_name[qualname.rsplit(".", 1)[-1]].append(entity)
            if "." in qualname:
                by_name[qualname].append(entity)
    return dict(by_name)


def _token_table(entities: Iterable[Entity]) -> dict[str, list[Entity]]:
    """Functions and methods by their name as a body's tokens spell it (`_sum_of_weights` -> sum_of_weights)."""
    by_token: dict[str, list[Entity]] = defaultdict(list)
    for entity in entities:
        if entity.kind in ("function", "method"):
            by_token[entity.qualname.rsplit(".", 1)[-1].lower().strip("_")].append(entity)
    return dict(by_token)


def _suffix_table(entities: Iterable[Entity]) -> dict[str, list[Entity]]:
    """Functions and methods by what follows each `_` of their name past a prefix: `_print_MatAdd` under `MatAdd`,
    `_eval_is_zero` under `is_zero` and `zero` (the name itself, and a bare leading `_`, are not suffixes)."""
    by_suffix: dict[str, list[Entity]] = defaultdict(list)
    for entity in (e for e in entities if e.kind in ("function", "method") and e.qualname):
        name = entity.name.lstrip("_")
        at = name.find("_", 1)  # each `_` past the first character and before the last, found by str.find
        while 0 < at < len(name) - 1:
            suffix = name[at + 1 :].lstrip("_")
            if suffix and not suffix.endswith("_"):
                by_suffix[suffix].append(entity)
            at = name.find("_", at + 1)
    return dict(by_suffix)


def _member_table(entities: Iterable[Entity]) -> dict[Entity, list[Entity]]:
    """Each class's methods (direct members only)."""
    classes: dict[tuple[str, str], Entity] = {}
    members: dict[Entity, list[Entity]] = defaultdict(list)
    for entity in entities:
        if entity.kind == "class":
            classes[(entity.path, entity.qualname)] = entity
        elif entity.kind == "method" and (owner := classes.get((entity.path, entity.qualname.rpartition(".")[0]))):
            members[owner].append(entity)
    return dict(members)


def _group_by_basename(paths: Iterable[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        grouped[path.rsplit("/", 1)[-1]].append(path)
    return dict(grouped)


def _name_forms(identifier: str) -> list[str]:
    parts = identifier.split(".")
    forms = [identifier, parts[-1]]
    if len(parts) >= 2:
        forms.append(".".join(parts[-2:]))
    return list(dict.fromkeys(forms))


def rank(
    signals: Signals, weights: Weights, top: int
) -> tuple[tuple[tuple[str, float], ...], tuple[RankedEntity, ...]]:
    """Weighted sums. An entity's evidence is its signals; a file scores its file-level signals plus a share of its
    best entity's evidence; an entity scores its evidence plus a share of what its file passes on (the file's score,
    in which the history counts `history_to_entity` of its weight) relative to the most any file passes on (the
    first-ranked file's when the history counts whole): that file's entities get the whole share, whatever the
    issue's evidence adds up to. Peripheral files
    (docs, examples, scripts, setup.py) are scaled down; among the entities, classes and functions are scaled by
    their kind's prior, and generic files by their hubness. Modules are ranked as files, not as entities."""
    tuning = weights.tuning
    prior = partial(_file_prior, tuning=tuning, generic=signals.generic)
    evidence, fired = _evidence(signals.entity, weights.weights)
    best: FileScores = defaultdict(float)
    for entity, value in evidence.items():
        best[entity.path] = max(best[entity.path], value)
    file_level = _weighted_files(signals.file, weights.weights)
    entity_share, file_share = tuning.entity_to_file, tuning.file_to_entity
    files = {p: (file_level.get(p, 0.0) + entity_share * best.get(p, 0.0)) * prior(p) for p in {*best, *file_level}}
    shared_weights = {**weights.weights, "history": weights.weights["history"] * tuning.history_to_entity}
    shared_level = _weighted_files(signals.file, shared_weights)  # what a file passes on to its entities
    shared = {p: (shared_level.get(p, 0.0) + entity_share * best.get(p, 0.0)) * prior(p) for p in files}
    lead = max(shared.values(), default=0.0)
    relative = {p: value / lead for p, value in shared.items()} if lead > 0 else {}
    totals = {
        e: (v + file_share * relative.get(e.path, 0.0)) * _entity_prior(e, tuning, prior) for e, v in evidence.items()
    }
    if tuning.member_yield > 0:
        totals = yield_to_members(totals, tuning.member_yield)
    ranked_files = sorted(files.items(), key=lambda pair: (-pair[1], pair[0]))[:top]
    if tuning.top_file_lead > 0 and ranked_files:
        totals = lead_from_file(totals, ranked_files[0][0], tuning.top_file_lead)
    ranked = sorted(totals.items(), key=lambda pair: (-pair[1], pair[0].selector))[:top]
    entities = tuple(RankedEntity(e.selector, e.path, s, tuple(fired[e])) for e, s in ranked if s > 0)
    return tuple((p, s) for p, s in ranked_files if s > 0), entities


def yield_to_members(totals: Scores, share: float) -> Scores:
    """A class or function whose best contained entity (a method, a nested function) scores at least `1 - share`
    of its own score is placed just below that entity: an issue names the class it used, and a function's body
    holds its nested functions' words, while the fix is mostly in the member (issue 17: `HTTPDigestAuth` above
    `HTTPDigestAuth.build_digest_header`). Measured: it also moves down the containers that are the gold."""
    by_selector = {e.selector: e for e in totals}
    best: dict[Entity, float] = {}
    for entity, value in totals.items():
        for outer in (by_selector[s] for s in container_selectors(entity.selector) if s in by_selector):
            best[outer] = max(best.get(outer, 0.0), value)
    moved = dict(totals)
    for outer, inner in best.items():
        if 0 < inner < totals[outer] and inner >= (1 - share) * totals[outer]:
            moved[outer] = math.nextafter(inner, 0.0)
    return moved


def lead_from_file(totals: Scores, path: str, share: float) -> Scores:
    """The best entity of the first-ranked file is placed first when it scores at least `1 - share` of the entity
    ranked first: the file ranking weighs more evidence (its own signals and its entities'), so the first entity is
    taken from the first file (issue 17: the gold file ranked first while another file's entity led, 14 of 169)."""
    best = max(totals.values(), default=0.0)
    own = max((v for e, v in totals.items() if e.path == path), default=0.0)
    if not 0 < own < best or own < (1 - share) * best:
        return totals
    lifted = math.nextafter(best, math.inf)
    return {e: lifted if e.path == path and v == own else v for e, v in totals.items()}


def container_selectors(selector: str) -> list[str]:
    """The selectors of the definitions a selector's qualname lies in: `p::A.b.c` -> `p::A`, `p::A.b`."""
    path, _, qualname = selector.partition("::")
    parts = qualname.split("@")[0].split(".")
    return [f"{path}::{'.'.join(parts[:end])}" for end in range(1, len(parts))]


def _evidence(
    entity_signals: Mapping[str, Scores], weights: Mapping[str, float]
) -> tuple[Scores, dict[Entity, list[str]]]:
    """Per entity (not module), the weighted sum of its signals and the names of those that fired; a signal
    weighted 0 takes no part (its entities are not candidates on its account)."""
    evidence: Scores = defaultdict(float)
    fired: dict[Entity, list[str]] = defaultdict(list)
    for name, scores in entity_signals.items():
        for entity, value in scores.items() if weights[name] > 0 else ():
            if entity.qualname and value > 0:
                evidence[entity] += weights[name] * value
                fired[entity].append(name)
    return evidence, fired


def _prior(path: str, tuning: Tuning) -> float:
    """How likely a file is to need the fix before reading the issue: peripheral files much less."""
    return tuning.peripheral_prior if is_peripheral(path) else 1.0


def _file_prior(path: str, tuning: Tuning, generic: Mapping[str, float]) -> float:
    """A file's prior: `_prior`, discounted by its hubness (`[tuning] generic_prior`; 1 when that is 0)."""
    return _prior(path, tuning) * discount(generic.get(path, 0.0), tuning.generic_prior)


def _entity_prior(entity: Entity, tuning: Tuning, file_prior: Callable[[str], float]) -> float:
    """An entity's prior: its file's, times its kind's (`KIND_PRIORS`; a method's is 1)."""
    prior = KIND_PRIORS.get(entity.kind)
    return file_prior(entity.path) * (float(getattr(tuning, prior)) if prior else 1.0)


def ranked_paths(index: RepoIndex, generated: GeneratedRule) -> list[str]:
    """The files whose entities are ranked: every one but the test files and the files a tool generated."""
    sources = [p for p in index.files() if not is_test_file(p)]
    left_out = generated_files(index.root, sources, generated)
    return [p for p in sources if p not in left_out]


def is_peripheral(path: str) -> bool:
    """Documentation, examples, scripts, benchmarks and packaging files: code that rarely holds the bug."""
    parts = path.split("/")
    return parts[0] in PERIPHERAL_DIRS if len(parts) > 1 else parts[0] in PERIPHERAL_FILES


def _weighted_files(file_signals: Mapping[str, FileScores], weights: Mapping[str, float]) -> FileScores:
    bonus: FileScores = defaultdict(float)
    for name, scores in file_signals.items():
        for path, value in scores.items():
            bonus[path] += weights[name] * value
    return bonus


def _common_suffix(a: list[str], b: list[str]) -> int:
    length = 0
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y:
            break
        length += 1
    return length


def localize_repo(repo: Path, issue: str, failing_test: str | None = None, top: int = TOP) -> Localization:
    """Index `repo` (with the user cache), add SBFL when a failing test is given, and rank."""
    started = time.monotonic()
    index = RepoIndex(repo, cache_dir=cache_dir("structure"))
    sbfl = None
    if failing_test:
        from snaffle.agentless.sbfl import sbfl_scores  # here: the sandbox's imports are only paid with a test
        from snaffle.sandbox import Sandbox
        from snaffle.scratch import scratch_dir

        with scratch_dir("snaffle-localize-") as scratch:
            sbfl = sbfl_scores(index, failing_test, Sandbox.create(scratch))
    result = Localizer(index).localize(issue, sbfl=sbfl, top=top)
    return Localization(result.files, result.entities, time.monotonic() - started)
