"""Fitting data/localize.toml's weights to cached signals, and judging them leave-one-repository-out.

Each instance's signals (every scorer's values, per entity and per file) are computed once by the bench; the
ranking over them is `snaffle.agentless.localize.rank` in matrix form, so a weight setting costs microseconds per
instance. The fit is a coordinate search: one parameter at a time over a fixed grid (and x0.8, x1.25 of its value),
a change kept only when the objective (the mean of file hit@5, entity hit@10 and entity hit@1) strictly improves,
rounds until nothing improves. Signal-level constants (traceback decay, BM25F parameters) are not refit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from snaffle.agentless.localize import ENTITY_SIGNALS, FILE_SIGNALS, KIND_PRIORS, Weights

NEUTRAL_SHARES = {
    "entity_to_file": 0.5,
    "file_to_entity": 0.5,
    "peripheral_prior": 0.5,
    **dict.fromkeys(KIND_PRIORS.values(), 1.0),
    "member_yield": 0.0,
}
"""The [tuning] constants that act in `rank` (the others shape the signals themselves), and where fits start."""
SHARES = tuple(NEUTRAL_SHARES)
PRIORS_OFF = dict.fromkeys(KIND_PRIORS.values(), 1.0)
"""The value that switches a prior off (for its ablation row)."""
UNFIT = frozenset({"sbfl", "raised", "executed"})
"""Signals the dev-set bench has no values for (SBFL needs a failing test run; the execution signals need the
issue's snippets run in each instance's environment: `--execute` measures them apart)."""
WEIGHT_GRID = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
SHARE_GRID = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)
ROUNDS = 4
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
    file: Array
    """files x FILE_SIGNALS"""
    peripheral: Array
    file_order: Array
    gold_file: Array
    graded_entities: bool


def instance(record: Mapping[str, Any], peripheral: Any) -> Instance:
    """The matrices of one cached bench record; `peripheral(path)` is the localizer's own test."""
    entity_signals: Mapping[str, Mapping[str, float]] = record["entity_signals"]
    file_signals: Mapping[str, Mapping[str, float]] = record["file_signals"]
    kinds: Mapping[str, str] = record.get("kinds", {})
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
        file=file,
        peripheral=np.array([bool(peripheral(p)) for p in paths], dtype=bool),
        file_order=np.arange(len(paths)),
        gold_file=np.array([p in record["gold_files"] for p in paths], dtype=bool),
        graded_entities=bool(record["gold_entities"]),
    )


def hits(case: Instance, params: Params) -> tuple[int, ...]:
    """Hit or miss at each of `METRICS`: `rank` with these weights, as matrix arithmetic."""
    weights = np.array([params[n] for n in ENTITY_SIGNALS])
    evidence = case.entity @ weights
    present = (case.entity > 0) @ (weights > 0) > 0
    best = np.zeros(len(case.file_order))
    np.maximum.at(best, case.entity_file, evidence)
    prior = np.where(case.peripheral, params["peripheral_prior"], 1.0)
    files = (case.file @ np.array([params[n] for n in FILE_SIGNALS]) + params["entity_to_file"] * best) * prior
    totals = (evidence + params["file_to_entity"] * files[case.entity_file]) * prior[case.entity_file]
    for prior, mask in case.kind_masks:
        totals = totals * np.where(mask, params[prior], 1.0)
    totals = np.where(present, totals, 0.0)  # an entity only a 0-weighted signal found is no candidate
    return (*_hits_at(files, case.file_order, case.gold_file, (1, 3, 5)),) + (
        *_hits_at(totals, case.entity_order, case.gold_entity, (1, 5, 10)),
    )


def _hits_at(scores: Array, order: Array, gold: Array, ks: Sequence[int]) -> list[int]:
    ranked = np.lexsort((order, -scores))[: max(ks)]
    good = gold[ranked] & (scores[ranked] > 0)
    return [int(good[:k].any()) for k in ks]


def rates(cases: Sequence[Instance], params: Params) -> dict[str, float]:
    """Per metric, the percentage of instances hit (entity metrics over instances with gold entities)."""
    table = np.array([hits(c, params) for c in cases]) if cases else np.zeros((0, len(METRICS)))
    graded = np.array([c.graded_entities for c in cases], dtype=bool)
    out: dict[str, float] = {}
    for column, metric in enumerate(METRICS):
        rows = table[graded, column] if metric.startswith("entity") else table[:, column]
        out[metric] = 100.0 * float(rows.mean()) if rows.size else 0.0
    return out


def objective(cases: Sequence[Instance], params: Params) -> float:
    """What the fit maximizes: the three acceptance figures, equally weighted."""
    measured = rates(cases, params)
    return (measured["file@5"] + measured["entity@10"] + measured["entity@1"]) / 3


def start(weights: Weights) -> Params:
    """The packaged weights as a flat parameter set."""
    return {**weights.weights, **{n: float(getattr(weights.tuning, n)) for n in SHARES}}


def neutral(packaged: Params) -> Params:
    """Where every fit starts: each fittable weight 1 and each share its `NEUTRAL_SHARES` value (unfit signals
    keep their weight), so no fold starts from weights once tuned on the repository it holds out."""
    return {n: packaged[n] if n in UNFIT else NEUTRAL_SHARES.get(n, 1.0) for n in packaged}


def fit(cases: Sequence[Instance], initial: Params, frozen: Iterable[str] = ()) -> Params:
    """Coordinate search from `initial`; `frozen` parameters keep their initial value."""
    fixed = set(frozen) | UNFIT
    params, best = dict(initial), objective(cases, initial)
    for _ in range(ROUNDS):
        improved = False
        for name in (n for n in (*ENTITY_SIGNALS, *FILE_SIGNALS, *SHARES) if n not in fixed):
            for value in _candidates(name, params[name]):
                trial = {**params, name: value}
                if (score := objective(cases, trial)) > best + 1e-9:
                    params, best, improved = trial, score, True
        if not improved:
            break
    return params


def _candidates(name: str, current: float) -> list[float]:
    grid = SHARE_GRID if name in SHARES else WEIGHT_GRID
    return sorted({*grid, round(current * 0.8, 4), round(current * 1.25, 4)} - {current})


def leave_one_repo_out(cases: Sequence[Instance], initial: Params, frozen: Iterable[str] = ()) -> dict[str, Any]:
    """Per repository: weights fitted on the others, hits scored on it; pooled rates over all instances."""
    frozen = tuple(frozen)
    pooled: list[tuple[int, ...]] = []
    graded: list[bool] = []
    per_repo: dict[str, dict[str, float]] = {}
    fitted: dict[str, Params] = {}
    for repo in sorted({c.repo for c in cases}):
        held = [c for c in cases if c.repo == repo]
        params = fit([c for c in cases if c.repo != repo], initial, frozen)
        fitted[repo] = params
        per_repo[repo] = rates(held, params)
        pooled.extend(hits(c, params) for c in held)
        graded.extend(c.graded_entities for c in held)
    return {"rates": _pool(pooled, graded), "per_repo": per_repo, "fitted": fitted}


def _pool(rows: list[tuple[int, ...]], graded: list[bool]) -> dict[str, float]:
    table, mask = np.array(rows), np.array(graded, dtype=bool)
    return {
        metric: 100.0 * float((table[mask, i] if metric.startswith("entity") else table[:, i]).mean())
        for i, metric in enumerate(METRICS)
    }
