"""Value origin on the A/B tasks, zero tokens: where does the first call to return a wrong value's wrong part point,
and where does the planted bug's entity rank with and without that signal?

    python bench/origin_bench.py [--tasks REGEX] [--split all|dev|test] [--cache DIR] [--work DIR]

For every task of bench/ab_tasks.toml the issue's snippets run on the planted tree (snaffle/agentless/facts.py, the
packaged [snippets] reading), value origin looks for the call where a missed expectation's wrong part was first
returned (snaffle/agentless/origin.py), and the localizer ranks the tree twice with the execution signals: without
`origin` and with it. The gold entity is the innermost definition holding the planted line. No SBFL (the pipeline
adds it when related tests fail on the original), no model.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import ab_bench as ab
import facts_bench as fb

from snaffle.agentless import facts, origin
from snaffle.agentless.localize import Localizer
from snaffle.index.parse import innermost
from snaffle.index.repo import RepoIndex
from snaffle.sandbox import Sandbox

DEPTH = 10
"""Ranks beyond this are shown as `-`."""


@dataclass(frozen=True)
class OriginRow:
    task: str
    split: str
    gold: str
    origin: str
    """The origin's selector, `-` when no call returned a wrong part (or no line missed an expectation)."""
    without: int | None
    """The gold entity's 1-based rank without the `origin` signal (None: below `DEPTH`)."""
    with_origin: int | None
    seconds: float


def gold_selector(index: RepoIndex, task: ab.BenchTask) -> str:
    """The innermost definition of the pristine file (`index`'s) holding the first non-blank line the plant replaces
    (a plant may delete its lines)."""
    lines = (index.root / task.file).read_text(encoding="utf-8").splitlines()
    first = next(line.strip() for line in task.search.splitlines() if line.strip())
    number = next(n for n, line in enumerate(lines) if first in line)
    entity = innermost(index.entities(task.file), number)
    return entity.selector if entity is not None else task.file


def rank_of(selector: str, ranked: Sequence[str]) -> int | None:
    return ranked.index(selector) + 1 if selector in ranked else None


def measure(task: ab.BenchTask, trees: fb.Trees, sandbox: Sandbox) -> OriginRow:
    planted = trees.planted
    index = RepoIndex(planted)
    gold = gold_selector(RepoIndex(trees.pristine), task)
    found = facts.gather(task.issue, planted, sandbox)
    started = time.monotonic()
    origins = origin.origins(found, index, planted, sandbox)
    seconds = time.monotonic() - started
    signals = facts.signals(found, index)
    ranks = []
    for extra in ({}, {"origin": origin.scores(origins)}):
        located = Localizer(index).localize(task.issue, top=DEPTH, execution={**signals, **extra})
        ranks.append(rank_of(gold, [e.selector for e in located.entities]))
    shown = ", ".join(o.entity.selector.split("::")[-1] for o in origins) or "-"
    return OriginRow(task.id, task.split, gold.split("::")[-1], shown, ranks[0], ranks[1], seconds)


def table(rows: Sequence[OriginRow]) -> str:
    head = f"{'task':36} {'split':5} {'gold entity':28} {'origin':28} {'rank without':>12} {'rank with':>9} {'s':>5}"
    lines = [head, "-" * len(head)]
    for r in rows:
        without, with_origin = (str(n) if n else "-" for n in (r.without, r.with_origin))
        named = f"{r.task:36} {r.split:5} {r.gold[:28]:28} {r.origin[:28]:28}"
        lines.append(f"{named} {without:>12} {with_origin:>9} {r.seconds:5.2f}")
    return "\n".join(lines)


def within(rows: Sequence[OriginRow], column: str, k: int) -> int:
    """How many rows rank the gold entity at `k` or better in `column`."""
    return sum(1 for r in rows if (rank := getattr(r, column)) is not None and rank <= k)


def totals(rows: Sequence[OriginRow]) -> str:
    out = []
    for split in sorted({r.split for r in rows}) + ["all"]:
        part = [r for r in rows if split in ("all", r.split)]
        fired = [r for r in part if r.origin != "-"]
        right = sum(r.origin.split(", ")[0] == r.gold for r in fired)
        at = {k: (within(part, "without", k), within(part, "with_origin", k)) for k in (1, 3)}
        out.append(
            f"{split}: {len(part)} tasks, origin found in {len(fired)} (the gold entity in {right}); "
            f"gold ranked first {at[1][0]} without, {at[1][1]} with; in the top 3 {at[3][0]} without, {at[3][1]} with"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="", help="regex over task ids")
    parser.add_argument("--split", default="all", choices=("all", *ab.SPLITS))
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "snaffle" / "bench"), help="the A/B cache")
    parser.add_argument("--work", default="/tmp/origin_bench", help="unpacked trees and the sandbox's scratch")
    args = parser.parse_args(argv)
    tasks = ab.select_tasks(ab.load_tasks(), args.tasks, 0, args.split)
    if not tasks:
        print("origin_bench: no task matches; see --help", file=sys.stderr)
        return 2
    work = Path(args.work).resolve()
    sandbox = Sandbox.create(work / "sandbox")
    rows: list[OriginRow] = []
    pristine: dict[str, Path] = {}
    for task in tasks:
        trees = fb.trees_for(task, Path(args.cache), work, pristine)
        rows.append(measure(task, trees, sandbox))
        print(f"{task.id}: origin {rows[-1].origin}", file=sys.stderr, flush=True)
    print(table(rows) + "\n\n" + totals(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
