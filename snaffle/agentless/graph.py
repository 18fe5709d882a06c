"""The repository as a graph of definitions and references: which entity's body names which definition.

Built once per repository from the body documents the localizer already holds (no second parse): an edge runs
from an entity to every function, method or class whose name its body spells, shared out when several
definitions bear that name. Callers, callees and a personalized PageRank from the entities an issue names read it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from snaffle.agentless.documents import FileDocuments
from snaffle.index.parse import Entity

Array = npt.NDArray[np.float64] | npt.NDArray[np.int64]
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
            for term in document.bodies:
                if term in self.definitions:
                    for local in document.body(term)[0::2]:
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
    proportion to their scores; normalized to the best node outside the seeds, which score 1. Rank that reaches
    a node without edges out is dropped, not spread. Computed over node numbers (hashing entities is slow)."""
    total = sum(seeds.values())
    if total <= 0:
        return {}
    nodes, source, target, weight = _neighbourhood(graph, list(seeds))
    restart = np.zeros(len(nodes))
    number = {node: i for i, node in enumerate(nodes)}
    for seed, value in seeds.items():
        restart[number[seed]] += value / total
    spread = np.bincount(source, weights=weight, minlength=len(nodes))
    share = weight / np.where(spread > 0, spread, 1.0)[source]
    rank = restart.copy()
    for _ in range(ITERATIONS):
        rank = (
            DAMPING * np.bincount(target, weights=rank[source] * share, minlength=len(nodes)) + (1 - DAMPING) * restart
        )
    seeded = restart > 0
    best = float(rank[~seeded].max(initial=0.0))
    if best <= 0:
        return {}
    return {n: 1.0 if seeded[i] else min(1.0, float(rank[i]) / best) for i, n in enumerate(nodes) if rank[i] > 0}


def _neighbourhood(graph: RefGraph, seeds: list[Entity]) -> tuple[list[Entity], Array, Array, Array]:
    """The nodes within two hops of the seeds (at most `NEIGHBOURHOOD_CAP`, seeds first), and the edges among
    them as arrays of source and target node numbers and weights."""
    number = {node: i for i, node in enumerate(dict.fromkeys(seeds))}
    out: dict[Entity, list[tuple[Entity, float]]] = {}
    frontier = list(number)
    for _ in range(2):
        reached: list[Entity] = []
        for node in frontier:
            out[node] = graph.neighbours(node)
            for found, _ in out[node]:
                if found not in number and len(number) < NEIGHBOURHOOD_CAP:
                    number[found] = len(number)
                    reached.append(found)
        frontier = reached
    edges = [
        (i, j, w)
        for node, i in number.items()
        for found, w in (out[node] if node in out else graph.neighbours(node))
        if (j := number.get(found)) is not None
    ]
    columns = np.array(edges, dtype=np.float64).reshape(-1, 3)
    return list(number), columns[:, 0].astype(np.int64), columns[:, 1].astype(np.int64), columns[:, 2]
