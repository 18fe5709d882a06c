"""The repository as a graph of definitions and references: which entity's body names which definition.

Built once per repository from the body documents the localizer already holds (no second parse): an edge runs
from an entity to every function, method or class whose name its body spells, shared out when several
definitions bear that name. Callers, callees and a personalized PageRank from the entities an issue names read it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from snaffle.agentless.documents import FileDocuments
from snaffle.index.parse import Entity

DEFINITION_KINDS = frozenset({"function", "method", "class"})
DAMPING = 0.85
"""The share of rank that follows an edge; the rest returns to the seeds (the entities the issue names)."""
ITERATIONS = 20
NEIGHBOURHOOD_CAP = 3000
"""Nodes the PageRank walks over: the seeds' neighbourhood, two hops out, in order of discovery."""
COMMON_NAME = 20
"""A name defined more often than this (`__init__`, `get`) is not followed: it points nowhere in particular."""


def name_token(entity: Entity) -> str:
    """The entity's name as a body's tokens spell it (`_sum_of_weights` -> sum_of_weights)."""
    return entity.name.lower().strip("_")


class RefGraph:
    """Edges entity -> the definitions its body names, and their reverse, from the per-file body documents."""

    def __init__(self, files: Sequence[Sequence[Entity]], documents: Sequence[FileDocuments]) -> None:
        definitions: dict[str, list[Entity]] = defaultdict(list)
        for entities in files:
            for entity in entities:
                if entity.kind in DEFINITION_KINDS:
                    definitions[name_token(entity)].append(entity)
        self.definitions = {t: d for t, d in definitions.items() if len(d) <= COMMON_NAME}
        self.names: dict[Entity, list[str]] = defaultdict(list)
        self.referrers: dict[str, list[Entity]] = defaultdict(list)
        for entities, document in zip(files, documents, strict=True):
            for term, postings in document.bodies.items():
                if term in self.definitions:
                    for local in postings[0::2]:
                        self.names[entities[local]].append(term)
                        self.referrers[term].append(entities[local])

    def callees(self, entity: Entity) -> list[tuple[Entity, float]]:
        """The definitions the entity's body names, each with 1/n when n definitions share the name."""
        found: list[tuple[Entity, float]] = []
        for term in self.names.get(entity, []):
            targets = self.definitions[term]
            found.extend((t, 1.0 / len(targets)) for t in targets if t != entity)
        return found

    def callers(self, entity: Entity) -> list[tuple[Entity, float]]:
        """The entities whose bodies name this one, each with 1/n when n definitions share the name."""
        term = name_token(entity)
        shared = len(self.definitions.get(term, ())) or 1
        return [(r, 1.0 / shared) for r in self.referrers.get(term, []) if r != entity]

    def neighbours(self, entity: Entity) -> list[tuple[Entity, float]]:
        return self.callees(entity) + self.callers(entity)


def pagerank(graph: RefGraph, seeds: Mapping[Entity, float]) -> dict[Entity, float]:
    """Personalized PageRank over the seeds' neighbourhood (edges both ways), restarting at the seeds in
    proportion to their scores; normalized to the best node outside the seeds, which score 1."""
    total = sum(seeds.values())
    if total <= 0:
        return {}
    restart = {e: v / total for e, v in seeds.items()}
    edges = _neighbourhood(graph, list(restart))
    rank = dict(restart)
    for _ in range(ITERATIONS):
        step: dict[Entity, float] = defaultdict(float)
        for node, value in rank.items():
            out = edges.get(node, [])
            spread = sum(w for _, w in out)
            for target, weight in out if spread > 0 else ():
                step[target] += DAMPING * value * weight / spread
        for node, value in restart.items():
            step[node] += (1 - DAMPING) * value
        rank = dict(step)
    others = [v for e, v in rank.items() if e not in restart]
    best = max(others, default=0.0)
    if best <= 0:
        return {}
    return {e: 1.0 if e in restart else min(1.0, v / best) for e, v in rank.items()}


def _neighbourhood(graph: RefGraph, seeds: list[Entity]) -> dict[Entity, list[tuple[Entity, float]]]:
    """Edges of the nodes within two hops of the seeds (at most `NEIGHBOURHOOD_CAP` nodes), kept inside."""
    order = list(dict.fromkeys(seeds))
    known = set(order)
    frontier = order
    for _ in range(2):
        reached: list[Entity] = []
        for node in frontier:
            for target, _ in graph.neighbours(node):
                if target not in known and len(known) < NEIGHBOURHOOD_CAP:
                    known.add(target)
                    reached.append(target)
        frontier = reached
    return {node: [(t, w) for t, w in graph.neighbours(node) if t in known] for node in known}
