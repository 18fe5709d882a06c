"""The localization bench's fit (bench/localize_fit.py): its matrix ranking (per instance and stacked) is `rank`, on
real signals of a built repository; its best-improvement search from several starts finds the weight a case needs,
takes the best single move each round, keeps the best start, and leaves given weights as they are when not fitting."""

from __future__ import annotations

import importlib
import sys
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

import pytest

from snaffle.agentless.issue_text import parse_issue
from snaffle.agentless.localize import KIND_PRIORS, Localizer, Weights, is_peripheral, rank
from snaffle.index.repo import RepoIndex
from tests.helpers import make_repo
from tests.test_localize_graph import FILES
from tests.test_localize_reach import hub_localizer

FIT = Path(__file__).resolve().parents[1] / "bench" / "localize_fit.py"
ISSUES = (
    'Traceback (most recent call last):\n  File "web/sessions.py", line 3, in send\nValueError: bad\n',
    "`leaf_helper` doubles instead of adding; see web/chain.py",
    "```\nValueError: the method is not allowed here: 'PATCH'\n```",
    "`test_entry_doubles` fails and `web.sessions.Session.put` too",
)
NAMING = (*ISSUES, "```\ns = Session()\ns.put(url)\n```\nThe `method` of `Session` is lost")
"""... and one for the naming signals and the class prior (`named_member`, `own_name`, `param_name`)."""


@pytest.fixture(scope="module")
def fitting() -> ModuleType:
    if str(FIT.parent) not in sys.path:
        sys.path.insert(0, str(FIT.parent))  # as when the bench runs it: siblings import by name
    return importlib.import_module("localize_fit")


def records(
    tmp_path: Path, gold_entity: str, gold_file: str, issues: tuple[str, ...] = ISSUES
) -> tuple[Localizer, list[dict[str, Any]]]:
    located = Localizer(RepoIndex(make_repo(tmp_path / "web", FILES)))
    found = []
    for number, issue in enumerate(issues):
        signals = located.signals(parse_issue(issue), every=True)
        found.append(
            {
                "instance_id": f"web-{number}",
                "repo": "acme/web" if number % 2 else "acme/other",
                "entity_signals": {n: {e.selector: v for e, v in s.items()} for n, s in signals.entity.items()},
                "file_signals": {n: dict(s) for n, s in signals.file.items()},
                "kinds": {e.selector: e.kind for s in signals.entity.values() for e in s if e.kind in KIND_PRIORS},
                "file_priors": {"generic": dict(signals.generic)},
                "gold_files": [gold_file],
                "gold_entities": [gold_entity],
            }
        )
    return located, found


def weights_of(params: dict[str, float]) -> Weights:
    packaged = Weights.load()
    names = ("entity_to_file", "file_to_entity", "peripheral_prior", "member_yield", "generic_prior", "top_file_lead")
    names = (*names, *KIND_PRIORS.values())
    shares = {n: params[n] for n in names}
    table = MappingProxyType({n: params[n] for n in packaged.weights})
    return replace(packaged, weights=table, tuning=replace(packaged.tuning, **shares))


@pytest.mark.parametrize(
    ("changes"),
    (
        {},
        {"pagerank": 2.0, "caller": 1.0, "bm25": 0.0},
        {"traceback": 0.0, "raises": 3.0, "file_to_entity": 1.0},
        {"identifier": 0.0, "qualified": 2.0, "test_callee": 1.5, "entity_to_file": 0.0},
        {"own_name": 1.0, "param_name": 2.0, "named_member": 1.5, "class_prior": 0.25},
        {"bm25": 0.0, "own_name": 2.0, "class_prior": 0.0, "function_prior": 0.5},
        {"member_yield": 0.5, "dispatch": 1.0, "class_prior": 1.25},
        {"member_yield": 1.0, "caller": 2.0, "file_to_entity": 0.0},
        {"identifier": 0.25, "named_file": 2.0, "reach": 1.0, "reach_file": 1.5},
        {"identifier": 0.0, "reach": 3.0, "entity_to_file": 0.0, "generic_prior": 0.5},
        {"top_file_lead": 1.0, "bm25_file": 4.0, "path_mention": 4.0},
        {"top_file_lead": 0.25, "member_yield": 0.5, "traceback": 0.5, "bm25_file": 3.0},
    ),
)
def test_the_matrix_ranking_is_rank(tmp_path: Path, fitting: ModuleType, changes: dict[str, float]) -> None:
    located, found = records(tmp_path, "web/chain.py::middle_step", "web/chain.py", NAMING)
    params = {**fitting.start(Weights.load()), **changes}
    for issue, record in zip(NAMING, found, strict=True):
        files, entities = rank(located.signals(parse_issue(issue), every=True), weights_of(params), 10)
        ranked_files, ranked = [p for p, _ in files], [e.selector for e in entities]
        expected = tuple(int(record["gold_files"][0] in ranked_files[:k]) for k in (1, 3, 5)) + tuple(
            int(record["gold_entities"][0] in ranked[:k]) for k in (1, 5, 10)
        )
        case = fitting.instance(record, is_peripheral)
        assert fitting.hits(case, params) == expected
        assert tuple(fitting.batch_hits(fitting.batch([case]), params)[0]) == expected
    cases = [fitting.instance(r, is_peripheral) for r in found]
    stacked = fitting.batch_hits(fitting.batch(cases), params)
    assert [tuple(row) for row in stacked] == [fitting.hits(c, params) for c in cases]


def test_the_fit_turns_on_the_signal_the_cases_need(tmp_path: Path, fitting: ModuleType) -> None:
    """Gold `Session.send`: the frame and the raised message point at it, BM25 and names mostly elsewhere."""
    _, found = records(tmp_path, "web/sessions.py::Session.send", "web/sessions.py")
    cases = [fitting.instance(r, is_peripheral) for r in found]
    naming = dict.fromkeys(("named_member", "own_name", "param_name"), 0.0)  # `send` spelled by the frame: held off
    initial = {**fitting.neutral(fitting.start(Weights.load())), "traceback": 0.0, "raises": 0.0, **naming}
    fitted = fitting.fit(cases, initial, frozen=naming)
    assert fitting.objective(cases, fitted) > fitting.objective(cases, initial)
    assert fitted["traceback"] > 0 or fitted["raises"] > 0
    frozen = fitting.fit(cases, initial, frozen=("traceback", "raises", *naming))
    assert frozen["traceback"] == 0 and frozen["raises"] == 0
    folds = fitting.leave_one_repo_out(cases, initial, frozen=naming)
    assert set(folds["fitted"]) == {"acme/web", "acme/other"}
    assert folds["fitted"]["acme/web"] == fitting.fit([c for c in cases if c.repo != "acme/web"], initial, naming)


def synthetic(fitting: ModuleType) -> list[Any]:
    """Six instances of two repositories, made up: gold `m.py::A.f`, which BM25 puts below the class holding it and
    a sibling, a frame points at, and the file-level BM25 puts in the second file of each."""
    made = []
    for number in range(6):
        entity = {
            "bm25": {"m.py::A": 1.0, "m.py::A.f": 0.7 + 0.05 * number, "m.py::B.g": 0.9, "n.py::h": 0.6},
            "traceback": {"m.py::A.f": 0.49} if number % 3 else {"n.py::h": 1.0},
            "caller": {"n.py::h": 0.5, "m.py::B.g": 0.3},
        }
        made.append(
            {
                "instance_id": f"x-{number}",
                "repo": f"acme/{'one' if number < 3 else 'two'}",
                "entity_signals": entity,
                "file_signals": {"bm25_file": {"n.py": 1.0, "m.py": 0.8}},
                "kinds": {"m.py::A": "class"},
                "gold_files": ["m.py"],
                "gold_entities": ["m.py::A.f"],
            }
        )
    return [fitting.instance(r, is_peripheral) for r in made]


def test_each_round_takes_the_best_single_move(fitting: ModuleType) -> None:
    cases = synthetic(fitting)
    stack = fitting.batch(cases)
    initial = {**fitting.neutral(fitting.start(Weights.load())), "traceback": 0.0, "caller": 0.0}
    names = [n for n in initial if n not in fitting.UNFIT]
    moves = [{**initial, n: v} for n in names for v in fitting._candidates(n, initial[n])]
    best = max(fitting.objective(stack, m) for m in moves)
    assert best > fitting.objective(stack, initial)
    assert fitting.objective(stack, fitting.climb(stack, initial, rounds=1)) == best
    assert fitting.objective(stack, fitting.climb(stack, initial)) >= best
    gain = best - fitting.objective(stack, initial)
    assert fitting.climb(stack, initial, min_gain=gain) == initial  # no move gains more than that
    assert fitting.climb(stack, initial, rounds=1, min_gain=gain / 2) == fitting.climb(stack, initial, rounds=1)


def test_the_fit_keeps_the_best_start_and_leaves_given_weights_when_not_fitting(fitting: ModuleType) -> None:
    cases = synthetic(fitting)
    stack = fitting.batch(cases)
    packaged = fitting.start(Weights.load())
    initial = fitting.neutral(packaged)
    assert fitting.climb(stack, packaged, rounds=0) == packaged
    assert fitting.rates(cases, packaged) == fitting.rates(stack, packaged)
    begun = fitting.starts(initial, frozen=("traceback",), seeds=3)
    assert begun[0] == initial and len({tuple(s.values()) for s in begun}) == 4
    assert all(s["traceback"] == initial["traceback"] and s["sbfl"] == initial["sbfl"] for s in begun)
    fitted = fitting.fit(stack, initial, seeds=3, also=(packaged,))
    climbed = [fitting.objective(stack, fitting.climb(stack, s)) for s in [packaged, *fitting.starts(initial)]]
    assert fitting.objective(stack, fitted) == max(climbed)
    frozen = fitting.fit(stack, initial, frozen=("member_yield",), seeds=2)
    assert frozen["member_yield"] == initial["member_yield"] == 0.0


def test_the_shortlist_keeps_gold_and_what_probes_rank_and_folds_spread(fitting: ModuleType) -> None:
    cases = synthetic(fitting)
    initial = fitting.neutral(fitting.start(Weights.load()))
    short = fitting.shortlist(cases, [initial], depth=1)
    assert all(c.gold_entity.any() and len(c.entity_order) <= 2 for c in short)
    assert fitting.rates(short, initial)["entity@1"] == fitting.rates(cases, initial)["entity@1"]
    folds = fitting.leave_one_repo_out(cases, initial, search=short, seeds=1)
    assert set(folds["per_repo"]) == {"acme/one", "acme/two"}
    low, high = folds["spread"]["entity@1"]
    assert low == min(r["entity@1"] for r in folds["per_repo"].values()) <= high


def test_the_nested_run_picks_each_folds_scale_by_its_training_objective(fitting: ModuleType) -> None:
    cases = synthetic(fitting)
    initial = {**fitting.neutral(fitting.start(Weights.load())), "traceback": 0.0, "caller": 0.0}
    alone = fitting.nested_scale(cases, initial, [fitting.FILE_SHARE_SCALE])
    assert alone["rates"] == fitting.leave_one_repo_out(cases, initial, seeds=0)["rates"]
    nested = fitting.nested_scale(cases, initial, [1.0, 8.0, 16.0])
    assert set(nested["chosen"]) == {"acme/one", "acme/two"}
    for repo, scale in nested["chosen"].items():
        assert nested["trained"][repo][scale] == max(nested["trained"][repo].values())
        train = [c for c in cases if c.repo != repo]
        refit = fitting.fit(train, {**initial, "file_to_entity": 0.5 * scale}, seeds=0, scale=scale)
        assert fitting.objective(train, refit) == nested["trained"][repo][scale]
    assert fitting._grid("file_to_entity", 2.0) == tuple(2.0 * v for v in fitting.SHARE_GRID)


@pytest.mark.parametrize("strength", (0.0, 0.5, 1.0))
def test_the_matrix_ranking_applies_the_generic_prior_as_rank_does(
    tmp_path: Path, fitting: ModuleType, strength: float
) -> None:
    located = hub_localizer(tmp_path)
    issue = "The theme is ignored when the project has a language set."
    signals = located.signals(parse_issue(issue), every=True)
    assert signals.generic["site/quickstart.py"] == 1.0
    params = {**fitting.start(Weights.load()), "bm25_file": 2.0, "generic_prior": strength}
    files, entities = rank(signals, weights_of(params), 10)
    record = {
        "instance_id": "site-0",
        "repo": "acme/site",
        "entity_signals": {n: {e.selector: v for e, v in s.items()} for n, s in signals.entity.items()},
        "file_signals": {n: dict(s) for n, s in signals.file.items()},
        "kinds": {e.selector: e.kind for s in signals.entity.values() for e in s if e.kind in KIND_PRIORS},
        "file_priors": {"generic": dict(signals.generic)},
        "gold_files": [files[1][0]],
        "gold_entities": [entities[1].selector],
    }
    assert fitting.hits(fitting.instance(record, is_peripheral), params) == (0, 1, 1, 0, 1, 1)


def test_the_matrix_ranking_leads_from_the_first_file_as_rank_does(fitting: ModuleType) -> None:
    record = {
        "instance_id": "pkg-0",
        "repo": "acme/pkg",
        "entity_signals": {"bm25": {"pkg/a.py::alpha": 0.5, "pkg/b.py::beta": 1.0}},
        "file_signals": {"path_mention": {"pkg/a.py": 1.0}},
        "gold_files": ["pkg/a.py"],
        "gold_entities": ["pkg/a.py::alpha"],
    }
    case = fitting.instance(record, is_peripheral)
    params = {**fitting.start(Weights.load()), "bm25": 1.0, "path_mention": 3.0, "file_to_entity": 0.0}
    for lead, entity_first in ((0.0, 0), (0.25, 0), (0.5, 1), (1.0, 1)):
        expected = (1, 1, 1, entity_first, 1, 1)
        assert fitting.hits(case, {**params, "top_file_lead": lead}) == expected
        assert tuple(fitting.batch_hits(fitting.batch([case, case]), {**params, "top_file_lead": lead})[1]) == expected


def test_a_records_execution_signals_are_fitted_and_held_where_no_record_has_them(fitting: ModuleType) -> None:
    """`--execute` records carry the snippets' signals: the fit may weigh them; without them it leaves their weights."""
    made = []
    for number in range(4):
        made.append(
            {
                "instance_id": f"x-{number}",
                "repo": f"acme/{'one' if number < 2 else 'two'}",
                "entity_signals": {"bm25": {"m.py::A.f": 0.5, "m.py::B.g": 0.9, "n.py::h": 0.8}},
                "file_signals": {"bm25_file": {"n.py": 1.0, "m.py": 0.9}},
                "execution_signals": {"executed": {"m.py::A.f": 1.0, "n.py::h": 0.2}, "raised": {}},
                "gold_files": ["m.py"],
                "gold_entities": ["m.py::A.f"],
            }
        )
    packaged = fitting.start(Weights.load())
    initial = {**fitting.neutral(packaged), "executed": 0.0}
    ran = [fitting.instance(r, is_peripheral) for r in made]
    assert fitting.absent(ran) == ("raised", "origin")
    fitted = fitting.fit(ran, initial)
    assert fitted["executed"] > 0 and fitted["raised"] == initial["raised"]
    assert fitting.rates(ran, fitted)["entity@1"] == 100.0 > fitting.rates(ran, initial)["entity@1"]
    static = [fitting.instance({k: v for k, v in r.items() if k != "execution_signals"}, is_peripheral) for r in made]
    assert fitting.absent(static) == ("raised", "executed", "origin")
    held = fitting.fit(static, initial)
    assert held["executed"] == 0.0 and held["raised"] == initial["raised"] == packaged["raised"]
