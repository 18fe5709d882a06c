"""The localization bench's fit (bench/localize_fit.py): its matrix ranking is `rank`, on real signals of a built
repository, and its coordinate search finds the weight a case needs."""

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
                "gold_files": [gold_file],
                "gold_entities": [gold_entity],
            }
        )
    return located, found


def weights_of(params: dict[str, float]) -> Weights:
    packaged = Weights.load()
    shares = {n: params[n] for n in ("entity_to_file", "file_to_entity", "peripheral_prior", *KIND_PRIORS.values())}
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
        assert fitting.hits(fitting.instance(record, is_peripheral), params) == expected


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
