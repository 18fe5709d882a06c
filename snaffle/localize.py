"""Deterministic localization, zero model tokens: named scorers with weights from data, summed per entity.

Scorers: traceback frames, file paths and dotted modules named in the issue, identifiers matched to entity names,
BM25 over entity documents (bm25s), imports of the tests the issue names, and Ochiai SBFL from per-test coverage
when a failing test is given. Test files are never candidates.
"""

from __future__ import annotations

import ast
import math
import tempfile
import time
import tomllib
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

from snaffle.gates import is_test_file
from snaffle.issue_text import IssueFacts, parse_issue, tokenize
from snaffle.primitives import innermost
from snaffle.sbfl import sbfl_scores
from snaffle.shell import Sandbox
from snaffle.structure import Entity, RepoIndex, default_cache_dir

Scores = dict[Entity, float]
FileScores = dict[str, float]
BODY_TOKENS_CAP = 400


@dataclass(frozen=True)
class Candidate:
    """A ranked entity and the signals that fired for it."""

    selector: str
    path: str
    score: float
    signals: tuple[str, ...]


@dataclass(frozen=True)
class Localization:
    """Ranked files and entities."""

    files: tuple[tuple[str, float], ...]
    entities: tuple[Candidate, ...]
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


@dataclass(frozen=True)
class Weights:
    """Signal weights and tuning constants (snaffle/data/localize.toml)."""

    weights: Mapping[str, float]
    tuning: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls) -> Weights:
        data = tomllib.loads(resources.files("snaffle.data").joinpath("localize.toml").read_text())
        return cls(data["weights"], data.get("tuning", {}))


class Localizer:
    """Ranks the entities of one indexed repository against an issue."""

    def __init__(self, index: RepoIndex, weights: Weights | None = None) -> None:
        self.index = index
        self.weights = weights or Weights.load()
        self.candidates = [e for e in index.all_entities() if not is_test_file(e.path)]
        self._bm25: bm25s.BM25 | None = None
        self._bm25_files: bm25s.BM25 | None = None

    def localize(self, issue: str, sbfl: Scores | None = None, top: int = 10) -> Localization:
        started = time.monotonic()
        facts = parse_issue(issue)
        entity_signals: dict[str, Scores] = {
            "traceback": self.traceback(facts),
            "identifier": self.identifier(facts),
            "bm25": self.bm25(facts),
            "sbfl": sbfl or {},
        }
        file_signals: dict[str, FileScores] = {
            "path_mention": self.path_mention(facts),
            "test_import": self.test_import(facts),
            "bm25_file": self.bm25_file(facts),
        }
        return self.rank(entity_signals, file_signals, top, time.monotonic() - started)

    def rank(
        self, entity_signals: dict[str, Scores], file_signals: dict[str, FileScores], top: int, elapsed: float
    ) -> Localization:
        share = self.weights.tuning.get("file_signal_share", 0.5)
        totals: Scores = defaultdict(float)
        fired: dict[Entity, list[str]] = defaultdict(list)
        for name, scores in entity_signals.items():
            for entity, value in scores.items():
                totals[entity] += self.weights.weights.get(name, 0.0) * value
                fired[entity].append(name)
        file_bonus = _weighted_files(file_signals, self.weights.weights)
        for entity in list(totals) + [e for e in self.candidates if e.path in file_bonus and not e.qualname]:
            totals[entity] += share * file_bonus.get(entity.path, 0.0)
        files = _file_ranking(totals, file_bonus)
        ranked = sorted(totals.items(), key=lambda pair: (-pair[1], pair[0].selector))[:top]
        entities = tuple(Candidate(e.selector, e.path, s, tuple(fired[e])) for e, s in ranked if s > 0)
        return Localization(tuple(files[:top]), entities, elapsed)

    def traceback(self, facts: IssueFacts) -> Scores:
        """Frames mapped to repo files; the innermost frame in the repo scores 1, outer ones decay."""
        decay = self.weights.tuning.get("traceback_decay", 0.7)
        scores: Scores = {}
        in_repo = [(path, f) for f in facts.frames if (path := self.repo_path(f.path))]
        for depth, (path, frame) in enumerate(reversed(in_repo)):
            entity = innermost(self.index.entities(path), frame.line - 1)
            if entity is not None and not is_test_file(path):
                scores[entity] = max(scores.get(entity, 0.0), decay**depth)
        return scores

    def identifier(self, facts: IssueFacts) -> Scores:
        """Names from the issue equal to entity names, weighted down when a name is common (IDF-like)."""
        by_name: dict[str, list[Entity]] = defaultdict(list)
        for entity in self.candidates:
            if entity.qualname:
                by_name[entity.qualname.rsplit(".", 1)[-1].split("@")[0]].append(entity)
                by_name[entity.qualname.split("@")[0]].append(entity)
        prose = self.weights.tuning.get("prose_identifier", 0.5)
        scores: Scores = {}
        weighted = [(i, 1.0) for i in facts.code_identifiers] + [(i, prose) for i in facts.prose_identifiers]
        for identifier, weight in weighted:
            for name in _name_forms(identifier):
                matches = by_name.get(name, [])
                for entity in matches:
                    value = weight / math.log2(1 + len(matches))
                    scores[entity] = min(1.0, scores.get(entity, 0.0) + value)
        return scores

    def bm25(self, facts: IssueFacts) -> Scores:
        """BM25 of the issue's words against entity documents, normalized to the best score."""
        if not facts.words or not self.candidates:
            return {}
        if self._bm25 is None:
            self._bm25 = bm25s.BM25()
            self._bm25.index([self.document(e) for e in self.candidates], show_progress=False)
        raw = np.asarray(self._bm25.get_scores(list(facts.words)))
        best = float(raw.max()) if raw.size else 0.0
        if best <= 0:
            return {}
        top = np.argsort(-raw)[:200]
        return {self.candidates[i]: float(raw[i]) / best for i in top if raw[i] > 0}

    def bm25_file(self, facts: IssueFacts) -> FileScores:
        """BM25 of the issue's words against whole non-test files (path and content), normalized."""
        paths = sorted({e.path for e in self.candidates})
        if not facts.words or not paths:
            return {}
        if self._bm25_files is None:
            self._bm25_files = bm25s.BM25()
            corpus = [tokenize(p + " " + self.index.source(p).decode("utf-8", "replace")) or ["_"] for p in paths]
            self._bm25_files.index(corpus, show_progress=False)
        raw = np.asarray(self._bm25_files.get_scores(list(facts.words)))
        best = float(raw.max()) if raw.size else 0.0
        return {paths[i]: float(raw[i]) / best for i in np.argsort(-raw)[:50] if raw[i] > 0} if best > 0 else {}

    def document(self, entity: Entity) -> list[str]:
        """Path pieces, name, signature, docstring, and (functions) identifiers used in the body."""
        text = f"{entity.path} {entity.qualname} {entity.signature} {entity.doc}"
        words = tokenize(text)
        if entity.kind in ("function", "method"):
            lines = self.index.source(entity.path).decode("utf-8", "replace").splitlines()
            words += tokenize("\n".join(lines[entity.body_start_line : entity.end_line + 1]))[:BODY_TOKENS_CAP]
        return words or ["_"]

    def path_mention(self, facts: IssueFacts) -> FileScores:
        """Files named by path or by dotted module name (`pkg.mod`, `pkg.mod.func`)."""
        scores: FileScores = {}
        for mention in facts.paths:
            if path := self.repo_path(mention):
                scores[path] = 1.0
        for dotted in (i for i in facts.code_identifiers + facts.prose_identifiers if "." in i):
            if path := self.module_path(dotted):
                scores[path] = max(scores.get(path, 0.0), 0.8)
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

    def repo_path(self, printed: str) -> str | None:
        """The repo file a printed path refers to: the longest matching suffix of path components."""
        parts = printed.replace("\\", "/").split("/")
        files = self._files_by_name().get(parts[-1], [])
        best, best_len = None, 0
        for candidate in files:
            length = _common_suffix(candidate.split("/"), parts)
            if length > best_len:
                best, best_len = candidate, length
        return best

    def module_path(self, dotted: str) -> str | None:
        """`pkg.mod.name` -> pkg/mod.py or pkg/mod/__init__.py (longest module prefix that exists)."""
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            stem = "/".join(parts[:end])
            for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
                if path := self.repo_path(candidate):
                    if path.endswith(candidate):
                        return path
        return None

    def _files_by_name(self) -> dict[str, list[str]]:
        if not hasattr(self, "_by_name"):
            grouped: dict[str, list[str]] = defaultdict(list)
            for path in self.index.files():
                grouped[path.rsplit("/", 1)[-1]].append(path)
            self._by_name = dict(grouped)
        return self._by_name


def imported_modules(source: bytes) -> list[str]:
    """Absolute module names a file imports (`from a.b import c` gives a.b and a.b.c)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _name_forms(identifier: str) -> list[str]:
    parts = identifier.split(".")
    forms = [identifier, parts[-1]]
    if len(parts) >= 2:
        forms.append(".".join(parts[-2:]))
    return list(dict.fromkeys(forms))


def _weighted_files(file_signals: dict[str, FileScores], weights: Mapping[str, float]) -> FileScores:
    bonus: FileScores = defaultdict(float)
    for name, scores in file_signals.items():
        for path, value in scores.items():
            bonus[path] += weights.get(name, 0.0) * value
    return bonus


def _file_ranking(totals: Scores, file_bonus: FileScores) -> list[tuple[str, float]]:
    best: FileScores = defaultdict(float)
    for entity, score in totals.items():
        best[entity.path] = max(best[entity.path], score)
    for path, bonus in file_bonus.items():
        best[path] = max(best[path], bonus)
    return sorted(best.items(), key=lambda pair: (-pair[1], pair[0]))


def _common_suffix(a: list[str], b: list[str]) -> int:
    length = 0
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y:
            break
        length += 1
    return length


def localize_repo(repo: Path, issue: str, failing_test: str | None = None, top: int = 10) -> Localization:
    """Index `repo` (with the user cache), add SBFL when a failing test is given, and rank."""
    started = time.monotonic()
    index = RepoIndex(repo, cache_dir=default_cache_dir())
    sbfl = None
    if failing_test:
        with tempfile.TemporaryDirectory(prefix="snaffle-localize-") as scratch:
            sbfl = sbfl_scores(index, failing_test, Sandbox.create(Path(scratch)))
    result = Localizer(index).localize(issue, sbfl=sbfl, top=top)
    return Localization(result.files, result.entities, time.monotonic() - started)
