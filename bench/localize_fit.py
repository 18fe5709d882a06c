"""Fitting data/localize.toml's weights to cached signals, and judging them leave-one-repository-out.

Each instance's signals (every scorer's values, per entity and per file) are computed once by the bench; the
ranking over them is `snaffle.agentless.localize.rank` in matrix form (`hits` per instance, `Batch` for many at
once: one product and segment reductions, no sort), so a weight setting costs milliseconds for the whole set. The
fit is a best-improvement search from several starts: each round tries every parameter over its grid (and x0.8,
x1.25 of its value) and takes the single move that most improves the objective (the mean of file hit@5, entity
hit@10 and entity hit@1), until none does; the best start wins (ties: the earlier start). Signal-level constants
(traceback decay, BM25F parameters) are not refit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from snaffle.agentless.localize import (
    ENTITY_SIGNALS,
    EXECUTION_SIGNALS,
    FILE_SIGNALS,
    KIND_PRIORS,
    Weights,
    container_selectors,
)

FILE_SHARE_SCALE = 8.0
"""`file_to_entity`'s grid and start are the shares' times this: an entity adds that share of its file's score
relative to the first file's, which is at most 1. Chosen within each fold of a nested leave-one-repository-out run
by the fold's own training objective (session 30, 169 dev instances): from 1, 2, 4, 8 and 16 every fold chose 8; with
6 and 10 in the grid too, the folds chose 6, 8 or 10."""
NEUTRAL_SHARES = {
    "entity_to_file": 0.5,
    "file_to_entity": 0.5 * FILE_SHARE_SCALE,
    "peripheral_prior": 0.5,
    **dict.fromkeys(KIND_PRIORS.values(), 1.0),
    "member_yield": 0.0,
    "generic_prior": 0.0,
    "top_file_lead": 0.0,
    "history_to_entity": 0.0,
}
"""The [tuning] constants that act in `rank` (the others shape the signals themselves), and where fits start."""
SHARES = tuple(NEUTRAL_SHARES)
PRIORS_OFF = {
    **dict.fromkeys(KIND_PRIORS.values(), 1.0),
    "member_yield": 0.0,
    "generic_prior": 0.0,
    "top_file_lead": 0.0,
}
"""The value that switches a prior (or the member yield) off, for its ablation row."""
UNFIT = frozenset({"sbfl"})
"""Signals the dev-set bench has no values for (SBFL needs a failing test run). The execution signals have values
only in records `--execute` computed (the issue's snippets run in an interpreter with the repository's dependencies);
a fit holds a signal no instance has a value for at its packaged weight (`absent`)."""
WEIGHT_GRID = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
SHARE_GRID = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)
ROUNDS = 40
"""At most this many moves per start (a best-improvement search stops earlier, when no move improves)."""
POOL_DEPTH = 20
"""The search's shortlist: per instance, the entities in the top this many under some probe setting."""
PROBES = 40
"""Random grid settings among the probes (beside the start and each signal alone)."""
RANDOM_STARTS = 3
"""Seeded random starts beside the neutral one (each fittable parameter a random value of its grid)."""
METRICS = ("file@1", "file@3", "file@5", "entity@1", "entity@5", "entity@10")
Params = dict[str, float]
Array = npt.NDArray[Any]


@dataclass(frozen=True)
class Instance:
    """One instance's signals as matrices, with its gold, ready to rank under any weights."""

    instance_id: str
    repo: str
    entity: Array
    """entities x ENTITY_SIGNALS"""
    entity_file: Array
    entity_order: Array
    """each entity's rank by selector (the tie-break of `rank`)"""
    gold_entity: Array
    kind_masks: tuple[tuple[str, Array], ...]
    """per prior of `KIND_PRIORS`, which entities are of its kind"""
    containers: Array
    """2 x pairs: (outer, inner) entity numbers, the inner one defined inside the outer one"""
    file: Array
    """files x FILE_SIGNALS"""
    peripheral: Array
    generic: Array
    """each file's hubness (`[tuning] generic_prior` scales its score by 1 - strength x this)"""
    file_order: Array
    gold_file: Array
    graded_entities: bool


def instance(record: Mapping[str, Any], peripheral: Any, variant: str | None = None) -> Instance:
    """The matrices of one cached bench record (with `variant`, the signals it holds for that [issue] switch);
    `peripheral(path)` is the localizer's own test."""
    signals = record["variants"][variant] if variant else record
    entity_signals: Mapping[str, Mapping[str, float]] = {**signals["entity_signals"], **executed(record)}
    file_signals: Mapping[str, Mapping[str, float]] = signals["file_signals"]
    kinds: Mapping[str, str] = signals.get("kinds", {})
    selectors = sorted({s for scores in entity_signals.values() for s, v in scores.items() if v > 0 and "::" in s})
    paths = sorted({s.split("::")[0] for s in selectors} | {p for scores in file_signals.values() for p in scores})
    file_number = {p: i for i, p in enumerate(paths)}
    entity_number = {s: i for i, s in enumerate(selectors)}
    entity = np.zeros((len(selectors), len(ENTITY_SIGNALS)))
    for column, name in enumerate(ENTITY_SIGNALS):
        for selector, value in entity_signals.get(name, {}).items():
            if value > 0 and "::" in selector:  # modules are ranked as files, not as entities
                entity[entity_number[selector], column] = value
    file = np.zeros((len(paths), len(FILE_SIGNALS)))
    for column, name in enumerate(FILE_SIGNALS):
        for path, value in file_signals.get(name, {}).items():
            file[file_number[path], column] = value
    return Instance(
        instance_id=str(record["instance_id"]),
        repo=str(record["repo"]),
        entity=entity,
        entity_file=np.array([file_number[s.split("::")[0]] for s in selectors], dtype=np.int64),
        entity_order=np.arange(len(selectors)),
        gold_entity=np.array([s in record["gold_entities"] for s in selectors], dtype=bool),
        kind_masks=tuple(
            (prior, np.array([kinds.get(s) == kind for s in selectors], dtype=bool))
            for kind, prior in KIND_PRIORS.items()
        ),
        containers=_containers(selectors, entity_number),
        file=file,
        peripheral=np.array([bool(peripheral(p)) for p in paths], dtype=bool),
        generic=np.array([float(signals.get("file_priors", {}).get("generic", {}).get(p, 0.0)) for p in paths]),
        file_order=np.arange(len(paths)),
        gold_file=np.array([p in record["gold_files"] for p in paths], dtype=bool),
        graded_entities=bool(record["gold_entities"]),
    )


def executed(record: Mapping[str, Any]) -> dict[str, Mapping[str, float]]:
    """The execution signals' values a record holds (`localize_bench.py --execute`; none without it)."""
    found: Mapping[str, Mapping[str, float]] = record.get("execution_signals", {})
    return {name: found[name] for name in EXECUTION_SIGNALS if name in found}


def absent(cases: Sequence[Instance] | Batch) -> tuple[str, ...]:
    """The execution signals no instance has a value for: their weights cannot be fitted, so a fit holds them."""
    stack = cases if isinstance(cases, Batch) else batch(cases)
    return tuple(n for n in EXECUTION_SIGNALS if not stack.entity[:, ENTITY_SIGNALS.index(n)].any())


def _containers(selectors: Sequence[str], number: Mapping[str, int]) -> Array:
    """(outer, inner) pairs of entity numbers: each entity and the entities its selector lies in."""
    pairs = [(number[o], i) for i, s in enumerate(selectors) for o in container_selectors(s) if o in number]
    return np.array(pairs, dtype=np.int64).reshape(-1, 2).T


def _yield(totals: Array, containers: Array, share: float) -> Array:
    """`localize.yield_to_members` on a score vector (the pairs sorted by outer entity or not: `maximum.at`)."""
    if share <= 0 or not containers.size:
        return totals
    best = np.zeros(len(totals))
    np.maximum.at(best, containers[0], totals[containers[1]])
    moved = (best > 0) & (best < totals) & (best >= (1 - share) * totals)
    return np.where(moved, np.nextafter(best, 0.0), totals)


def hits(case: Instance, params: Params) -> tuple[int, ...]:
    """Hit or miss at each of `METRICS`: `rank` with these weights, as matrix arithmetic."""
    weights = np.array([params[n] for n in ENTITY_SIGNALS])
    evidence = case.entity @ weights
    present = (case.entity > 0) @ (weights > 0) > 0
    best = np.zeros(len(case.file_order))
    np.maximum.at(best, case.entity_file, evidence)
    prior = _file_prior(case.peripheral, case.generic, params)
    files, shared = _files(case.file, best, prior, params)
    relative = _relative(shared, np.zeros(len(shared), dtype=int), 1)
    totals = (evidence + params["file_to_entity"] * relative[case.entity_file]) * prior[case.entity_file]
    for prior, mask in case.kind_masks:
        totals = totals * np.where(mask, params[prior], 1.0)
    totals = np.where(present, totals, 0.0)  # an entity only a 0-weighted signal found is no candidate
    totals = _yield(totals, case.containers, params["member_yield"])
    totals = _lead(totals, files, case.file_order, case.entity_file, params["top_file_lead"])
    return (*_hits_at(files, case.file_order, case.gold_file, (1, 3, 5)),) + (
        *_hits_at(totals, case.entity_order, case.gold_entity, (1, 5, 10)),
    )


def _files(signals: Array, best: Array, prior: Array, params: Params) -> tuple[Array, Array]:
    """`rank`'s file scores, and what each file passes on to its entities (the history scaled by
    `history_to_entity`)."""
    weights = np.array([params[n] for n in FILE_SIGNALS])
    shared_weights = np.array(
        [params[n] * (params["history_to_entity"] if n == "history" else 1.0) for n in FILE_SIGNALS]
    )
    from_entities = params["entity_to_file"] * best
    return (signals @ weights + from_entities) * prior, (signals @ shared_weights + from_entities) * prior


def _relative(shared: Array, file_case: Array, count: int) -> Array:
    """`rank`'s relative share: what each file passes on over the most any file of its instance passes on (0 where
    none passes anything)."""
    lead = np.zeros(count)
    np.maximum.at(lead, file_case, shared)
    top = lead[file_case]
    return np.divide(shared, top, out=np.zeros_like(shared), where=top > 0)


def _file_prior(peripheral: Array, generic: Array, params: Params) -> Array:
    """`localize._file_prior` over a file vector: the peripheral prior times the generic discount."""
    prior = np.where(peripheral, params["peripheral_prior"], 1.0)
    strength = params["generic_prior"]
    return prior * (1.0 - strength * generic) if strength > 0 else prior


def _lead(totals: Array, files: Array, file_order: Array, entity_file: Array, share: float) -> Array:
    """`localize.lead_from_file` on one instance's vectors: the first file's best entity first, within `share`."""
    if share <= 0 or not len(files) or not len(totals):
        return totals
    first = int(np.lexsort((file_order, -files))[0])
    if files[first] <= 0:
        return totals
    mine = entity_file == first
    best, own = float(totals.max()), float(totals[mine].max(initial=0.0))
    if not 0 < own < best or own < (1 - share) * best:
        return totals
    return np.where(mine & (totals == own), np.nextafter(best, np.inf), totals)


def _batch_lead(stack: Batch, files: Array, totals: Array, share: float) -> Array:
    """`_lead` for every instance of a batch at once (per-instance maxima by `maximum.at`)."""
    if share <= 0 or not len(totals):
        return totals
    count = len(stack.cases)
    first = (_places(files, stack.file_order, stack.file_case) == 0) & (files > 0)
    mine = first[stack.entity_file]
    best = np.zeros(count)
    np.maximum.at(best, stack.entity_case, totals)
    own = np.zeros(count)
    np.maximum.at(own, stack.entity_case[mine], totals[mine])
    lead = (own > 0) & (own < best) & (own >= (1 - share) * best)
    case = stack.entity_case
    lifted = mine & lead[case] & (totals == own[case])
    return np.where(lifted, np.nextafter(best[case], np.inf), totals)


def _hits_at(scores: Array, order: Array, gold: Array, ks: Sequence[int]) -> list[int]:
    ranked = np.lexsort((order, -scores))[: max(ks)]
    good = gold[ranked] & (scores[ranked] > 0)
    return [int(good[:k].any()) for k in ks]


def shortlist(cases: Sequence[Instance], probes: Sequence[Params], depth: int = POOL_DEPTH) -> list[Instance]:
    """Each instance with only its gold entities and files, and those ranked in the top `depth` under some probe
    setting (files: also those holding a kept entity): the search scores the shortlist (what falls below it under
    every probe rarely reaches a top 10); every figure reported is scored on the whole instances."""
    stack = batch(cases)
    keep, keep_files = stack.gold_entity.copy(), stack.gold_file.copy()
    for params in probes:
        files, totals = _totals(stack, params)
        keep |= (_places(totals, stack.entity_order, stack.entity_case) < depth) & (totals > 0)
        keep_files |= (_places(files, stack.file_order, stack.file_case) < depth) & (files > 0)
    keep_files[stack.entity_file[keep]] = True
    entities = np.cumsum([0, *(len(c.entity_order) for c in cases)])
    files = np.cumsum([0, *(len(c.file_order) for c in cases)])
    return [
        _subset(c, keep[entities[i] : entities[i + 1]], keep_files[files[i] : files[i + 1]])
        for i, c in enumerate(cases)
    ]


def _places(scores: Array, order: Array, case: Array) -> Array:
    """Each item's 0-based place in its instance's ranking by (-score, order)."""
    ranked = np.lexsort((order, -scores, case))
    place = np.empty(len(ranked), dtype=np.int64)
    place[ranked] = np.arange(len(ranked)) - np.searchsorted(case[ranked], case[ranked])
    return place


def probes(initial: Params, count: int = PROBES) -> list[Params]:
    """Where the shortlist looks: `initial`, each fittable signal alone (shares neutral) and seeded random grid
    settings."""
    fittable = [n for n in (*ENTITY_SIGNALS, *FILE_SIGNALS) if n not in UNFIT]
    alone = [
        {**initial, **dict.fromkeys(fittable, 0.0), n: 1.0, "bm25": 1.0 if n in FILE_SIGNALS else 0.0} for n in fittable
    ]
    rng = np.random.default_rng(29)
    grid = [{n: v if n in UNFIT else float(rng.choice(_grid(n))) for n, v in initial.items()} for _ in range(count)]
    return [initial, *alone, *grid]


def _subset(case: Instance, keep: Array, keep_files: Array) -> Instance:
    """The instance with the entities and files kept (every kept entity's file among them)."""
    kept, kept_files = np.flatnonzero(keep), np.flatnonzero(keep_files)
    renumber = np.full(len(case.entity_order), -1)
    renumber[kept] = np.arange(len(kept))
    file_number = np.full(len(case.file_order), -1)
    file_number[kept_files] = np.arange(len(kept_files))
    pairs = case.containers
    pairs = renumber[pairs[:, (renumber[pairs] >= 0).all(axis=0)]] if pairs.size else pairs
    return Instance(
        instance_id=case.instance_id,
        repo=case.repo,
        entity=case.entity[kept],
        entity_file=file_number[case.entity_file[kept]],
        entity_order=case.entity_order[kept],
        gold_entity=case.gold_entity[kept],
        kind_masks=tuple((name, mask[kept]) for name, mask in case.kind_masks),
        containers=pairs,
        file=case.file[kept_files],
        peripheral=case.peripheral[kept_files],
        generic=case.generic[kept_files],
        file_order=case.file_order[kept_files],
        gold_file=case.gold_file[kept_files],
        graded_entities=case.graded_entities,
    )


@dataclass(frozen=True)
class Batch:
    """Many instances' matrices stacked, entities grouped by instance and file, to score all at once."""

    cases: tuple[Instance, ...]
    entity: Array
    present: Array
    """entities x ENTITY_SIGNALS: which values are > 0"""
    entity_file: Array
    """each entity's file, numbered over the batch"""
    entity_case: Array
    entity_order: Array
    gold_entity: Array
    kind_masks: tuple[tuple[str, Array], ...]
    containers: Array
    file: Array
    peripheral: Array
    generic: Array
    file_case: Array
    file_order: Array
    gold_file: Array
    graded: Array
    file_entities: Array
    """the files that hold an entity, and where their entities start"""
    file_entity_start: Array


def batch(cases: Sequence[Instance]) -> Batch:
    """The instances stacked (their entities in file order, as `instance` numbers them: selectors sorted)."""
    file_offsets = np.cumsum([0, *(len(c.file_order) for c in cases)])
    entity_offsets = np.cumsum([0, *(len(c.entity_order) for c in cases)])
    entity_file = np.concatenate([c.entity_file + o for c, o in zip(cases, file_offsets, strict=False)])
    assert np.all(np.diff(entity_file) >= 0), "the entities of an instance are numbered in file order"
    holders, starts = np.unique(entity_file, return_index=True)
    return Batch(
        cases=tuple(cases),
        entity=np.concatenate([c.entity for c in cases]),
        present=np.concatenate([c.entity > 0 for c in cases]),
        entity_file=entity_file,
        entity_case=np.repeat(np.arange(len(cases)), [len(c.entity_order) for c in cases]),
        entity_order=np.concatenate([c.entity_order for c in cases]),
        gold_entity=np.concatenate([c.gold_entity for c in cases]),
        kind_masks=tuple(
            (prior, np.concatenate([dict(c.kind_masks)[prior] for c in cases])) for prior in KIND_PRIORS.values()
        ),
        containers=np.concatenate([c.containers + o for c, o in zip(cases, entity_offsets, strict=False)], axis=1),
        file=np.concatenate([c.file for c in cases]),
        peripheral=np.concatenate([c.peripheral for c in cases]),
        generic=np.concatenate([c.generic for c in cases]),
        file_case=np.repeat(np.arange(len(cases)), [len(c.file_order) for c in cases]),
        file_order=np.concatenate([c.file_order for c in cases]),
        gold_file=np.concatenate([c.gold_file for c in cases]),
        graded=np.array([c.graded_entities for c in cases], dtype=bool),
        file_entities=holders,
        file_entity_start=starts,
    )


def batch_hits(stack: Batch, params: Params) -> Array:
    """`hits` of every instance of the batch (instances x METRICS), as the same arithmetic over the stack."""
    files, totals = _totals(stack, params)
    count = len(stack.cases)
    file_ranks = _best_gold_rank(files, stack.file_order, stack.gold_file, stack.file_case, count)
    entity_ranks = _best_gold_rank(totals, stack.entity_order, stack.gold_entity, stack.entity_case, count)
    columns = [file_ranks < k for k in (1, 3, 5)] + [entity_ranks < k for k in (1, 5, 10)]
    return np.stack(columns, axis=1).astype(int)


def _totals(stack: Batch, params: Params) -> tuple[Array, Array]:
    """Every file's and every entity's ranking score under `params` (`rank`'s arithmetic)."""
    weights = np.array([params[n] for n in ENTITY_SIGNALS])
    evidence = stack.entity @ weights
    present = stack.present @ (weights > 0) > 0
    best = np.zeros(len(stack.file_order))
    if len(evidence):
        best[stack.file_entities] = np.maximum.reduceat(evidence, stack.file_entity_start)
    prior = _file_prior(stack.peripheral, stack.generic, params)
    files, shared = _files(stack.file, best, prior, params)
    relative = _relative(shared, stack.file_case, len(stack.cases))
    totals = (evidence + params["file_to_entity"] * relative[stack.entity_file]) * prior[stack.entity_file]
    for name, mask in stack.kind_masks:
        totals = totals * np.where(mask, params[name], 1.0)
    totals = _yield(np.where(present, totals, 0.0), stack.containers, params["member_yield"])
    return files, _batch_lead(stack, files, totals, params["top_file_lead"])


def _best_gold_rank(scores: Array, order: Array, gold: Array, case: Array, count: int) -> Array:
    """Per instance, the 0-based rank of its best gold item by (-score, order), or a large number when no gold item
    scores above 0: the items that outrank it, counted per instance."""
    top = np.full(count, -np.inf)
    np.maximum.at(top, case[gold], scores[gold])
    best = gold & (scores == top[case])
    first = np.full(count, np.iinfo(np.int64).max)
    np.minimum.at(first, case[best], order[best])
    beats = (scores > top[case]) | ((scores == top[case]) & (order < first[case]))
    above = np.bincount(case[beats], minlength=count)
    return np.where(top > 0, above, np.iinfo(np.int64).max)


def rates(cases: Sequence[Instance] | Batch, params: Params) -> dict[str, float]:
    """Per metric, the percentage of instances hit (entity metrics over instances with gold entities)."""
    stack = cases if isinstance(cases, Batch) else batch(cases)
    if not stack.cases:
        return dict.fromkeys(METRICS, 0.0)
    return _pool(batch_hits(stack, params), stack.graded)


def objective(cases: Sequence[Instance] | Batch, params: Params) -> float:
    """What the fit maximizes: the three acceptance figures, equally weighted."""
    measured = rates(cases, params)
    return (measured["file@5"] + measured["entity@10"] + measured["entity@1"]) / 3


def start(weights: Weights) -> Params:
    """The packaged weights as a flat parameter set."""
    return {**weights.weights, **{n: float(getattr(weights.tuning, n)) for n in SHARES}}


def neutral(packaged: Params) -> Params:
    """A neutral start: each fittable weight 1 and each share its `NEUTRAL_SHARES` value (unfit and execution signals
    keep their weight: never tuned on these instances), so no fold starts from weights once tuned on the repository it
    holds out."""
    return {n: packaged[n] if n in UNFIT or n in EXECUTION_SIGNALS else NEUTRAL_SHARES.get(n, 1.0) for n in packaged}


def starts(
    initial: Params, frozen: Iterable[str] = (), seeds: int = RANDOM_STARTS, scale: float = FILE_SHARE_SCALE
) -> list[Params]:
    """`initial`, then `seeds` seeded random starts: every fittable parameter (not `frozen`) a value of its grid."""
    fixed = set(frozen) | UNFIT
    rng = np.random.default_rng(17)
    found = [dict(initial)]
    for _ in range(seeds):
        found.append({n: v if n in fixed else float(rng.choice(_grid(n, scale))) for n, v in initial.items()})
    return found


def fit(
    cases: Sequence[Instance] | Batch,
    initial: Params,
    frozen: Iterable[str] = (),
    seeds: int = RANDOM_STARTS,
    also: Sequence[Params] = (),
    min_gain: float = 0.0,
    scale: float = FILE_SHARE_SCALE,
) -> Params:
    """The best of a best-improvement search from each start: `also` (e.g. the packaged weights), `initial` and
    `seeds` random starts; `frozen` parameters keep their value of `initial` in every start; a move must gain more
    than `min_gain` points of the objective; `file_to_entity`'s grid is the shares' times `scale`."""
    stack = cases if isinstance(cases, Batch) else batch(cases)
    frozen = (*frozen, *absent(stack))
    pinned = {n: initial[n] for n in frozen}
    begun = [*also, *starts(initial, frozen, seeds, scale)]
    found = [climb(stack, {**s, **pinned}, frozen, min_gain=min_gain, scale=scale) for s in begun]
    return max(found, key=lambda params: objective(stack, params))


def climb(
    stack: Batch,
    initial: Params,
    frozen: Iterable[str] = (),
    rounds: int = ROUNDS,
    min_gain: float = 0.0,
    scale: float = FILE_SHARE_SCALE,
) -> Params:
    """Best-improvement search from `initial`: each round the one move (a parameter to a value of its
    candidates) that most improves the objective, until none gains more than `min_gain` points or `rounds` moves
    were made."""
    fixed = set(frozen) | UNFIT
    names = [n for n in (*ENTITY_SIGNALS, *FILE_SIGNALS, *SHARES) if n not in fixed and n in initial]
    params, best = dict(initial), objective(stack, initial)
    for _ in range(rounds):
        moves = [{**params, n: v} for n in names for v in _candidates(n, params[n], scale)]
        scored = [(objective(stack, trial), -number) for number, trial in enumerate(moves)]
        if not scored or max(scored)[0] <= best + min_gain + 1e-9:
            break
        score, number = max(scored)
        params, best = moves[-number], score
    return params


def _grid(name: str, scale: float = FILE_SHARE_SCALE) -> tuple[float, ...]:
    if name == "file_to_entity":
        return tuple(scale * value for value in SHARE_GRID)
    return SHARE_GRID if name in SHARES else WEIGHT_GRID


def _candidates(name: str, current: float, scale: float = FILE_SHARE_SCALE) -> list[float]:
    return sorted({*_grid(name, scale), round(current * 0.8, 4), round(current * 1.25, 4)} - {current})


def leave_one_repo_out(
    cases: Sequence[Instance],
    initial: Params,
    frozen: Iterable[str] = (),
    search: Sequence[Instance] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Per repository: weights fitted on the others (on their `search` shortlists when given, with `fit`'s
    `options`), hits scored on it (whole); pooled rates over all instances, each fold's rates and weights, and each
    metric's spread over the folds (min, max)."""
    frozen, search = tuple(frozen), search or cases
    pooled: list[Array] = []
    graded: list[Array] = []
    per_repo: dict[str, dict[str, float]] = {}
    fitted: dict[str, Params] = {}
    for repo in sorted({c.repo for c in cases}):
        held = batch([c for c in cases if c.repo == repo])
        params = fit(batch([c for c in search if c.repo != repo]), initial, frozen, **options)
        fitted[repo] = params
        per_repo[repo] = rates(held, params)
        pooled.append(batch_hits(held, params))
        graded.append(held.graded)
    spread = {m: (min(r[m] for r in per_repo.values()), max(r[m] for r in per_repo.values())) for m in METRICS}
    rates_all = _pool(np.concatenate(pooled), np.concatenate(graded))
    return {"rates": rates_all, "per_repo": per_repo, "fitted": fitted, "spread": spread}


def nested_scale(
    cases: Sequence[Instance],
    initial: Params,
    scales: Sequence[float],
    frozen: Iterable[str] = (),
    search: Sequence[Instance] | None = None,
) -> dict[str, Any]:
    """`leave_one_repo_out` (single start) with `file_to_entity`'s scale chosen inside each fold: per scale, the
    folds fitted from that scale's neutral share; in each fold, the scale whose weights score the best training
    objective (on the other repositories' whole instances; a tie to the first given) is the fold's, and its weights
    score the held-out repository. Pooled rates, the scale each fold chose, and each fold's training objectives."""
    runs = {
        s: leave_one_repo_out(cases, {**initial, "file_to_entity": 0.5 * s}, frozen, search, seeds=0, scale=s)
        for s in scales
    }
    trained: dict[str, dict[float, float]] = {}
    for repo in sorted({c.repo for c in cases}):
        train = batch([c for c in cases if c.repo != repo])
        trained[repo] = {s: objective(train, run["fitted"][repo]) for s, run in runs.items()}
    chosen = {repo: max(scales, key=lambda s: (trained[repo][s], -scales.index(s))) for repo in trained}
    fitted = {repo: runs[scale]["fitted"][repo] for repo, scale in chosen.items()}
    return {"rates": score_folds(cases, fitted), "chosen": chosen, "trained": trained}


def score_folds(cases: Sequence[Instance], fitted: Mapping[str, Params]) -> dict[str, float]:
    """Pooled rates of each repository's instances under the weights fitted without it (`leave_one_repo_out`'s
    `fitted`), on these cases: the same fold weights scored on signals another code computed."""
    held = {repo: batch([c for c in cases if c.repo == repo]) for repo in fitted}
    pooled = [batch_hits(held[repo], params) for repo, params in fitted.items()]
    return _pool(np.concatenate(pooled), np.concatenate([stack.graded for stack in held.values()]))


def _pool(table: Array, graded: Array) -> dict[str, float]:
    mask = np.asarray(graded, dtype=bool)
    out: dict[str, float] = {}
    for i, metric in enumerate(METRICS):
        rows = table[mask, i] if metric.startswith("entity") else table[:, i]
        out[metric] = 100.0 * float(rows.mean()) if rows.size else 0.0
    return out
