"""Issue facts on the A/B tasks, zero tokens: do the issue's snippets run, reproduce the bug, and make a TRUE oracle?

    python bench/facts_bench.py [--tasks REGEX] [--split all|dev|test] [--cache DIR] [--work DIR] [--results FILE]

For every task of bench/ab_tasks.toml the issue_facts stage (snaffle/agentless/facts.py: extraction and sandboxed
runs) runs on the planted tree and each snippet that reproduces the issue is asked again of the pristine
(unplanted) tree, once per variant of the [snippets] switches (import inference, ordered expectations). A true
oracle fails on the planted tree and passes on the pristine one; evidence that fails on the correct code would veto
right patches. The snippet-made reproduction test (`snippet_test`) is run on both trees too. Package dists come from
the A/B bench's --cache (downloaded by pinned version with pip when missing); trees are unpacked under --work.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import ab_bench as ab

from snaffle.agentless import facts
from snaffle.agentless.facts import ExecutionFacts, SnippetLimits, SnippetRun
from snaffle.agentless.validate import run_tests
from snaffle.sandbox import Sandbox
from snaffle.workspace import Workspace

SWITCHES = ("infer_imports", "ordered_expectations", "indented_scripts", "kind_expectations", "raised_expectations")
VARIANTS = {
    "today": {},
    "+imports": {"infer_imports": True},
    "+ordered": {"ordered_expectations": True},
    "+indented": {"indented_scripts": True},
    "+kind": {"ordered_expectations": True, "kind_expectations": True},
    "+raised": {"ordered_expectations": True, "raised_expectations": True},
    "+all": dict.fromkeys(SWITCHES, True),
    "+all-kind": {**dict.fromkeys(SWITCHES, True), "kind_expectations": False, "raised_expectations": False},
}
"""The [snippets] switches each row turns on (the others off, every other key as in snaffle/data/agentless.toml)."""


def variant_limits(base: SnippetLimits, variant: str) -> SnippetLimits:
    """`base` with the variant's switches on and the other switches off."""
    return replace(base, **{**dict.fromkeys(SWITCHES, False), **VARIANTS[variant]})


STOPPED = frozenset({"ModuleNotFoundError", "ImportError", "SyntaxError"})
"""A snippet that ended in one of these (or an undefined name of its own) never reached the repository's code."""


@dataclass(frozen=True)
class Trees:
    """A task's planted tree and the pristine tree of its package (both git repositories)."""

    planted: Path
    pristine: Path


@dataclass(frozen=True)
class TaskRow:
    """One task under one variant: what its snippets did on the planted tree, and whether they are true oracles."""

    task: str
    split: str
    variant: str
    snippets: int
    ran: int
    raised_in_repo: int
    reproduced: int
    oracle_true: int
    oracle_false: int
    oracle_unknown: int
    imports_added: int
    expectations: int
    snippet_test: str
    """`true` (fails on planted, passes on pristine), `false` (passes or errors on either), `none` (no test)."""
    seconds: float


def tree(archive: Path, into: Path, plant: tuple[str, str, str] | None = None) -> Path:
    """The dist unpacked at `into` (again each time), the plant applied (file, search, replace), one commit."""
    shutil.rmtree(into, ignore_errors=True)
    root = ab.unpack(archive, into)
    if plant is not None:
        path = root / plant[0]
        path.write_text(ab.plant(path.read_text(encoding="utf-8"), plant[1], plant[2], plant[0]), "utf-8")
    ab.git(root, "init", "-q")
    ab.git(root, "add", "-A")
    ab.git(root, "commit", "-q", "-m", "tree")
    return root


def trees_for(task: ab.BenchTask, cache: Path, work: Path, pristine: dict[str, Path]) -> Trees:
    """The task's planted tree (built afresh) and its package's pristine tree (built once per package: `pristine`)."""
    archive = ab.download(task.package, cache)
    planted = tree(archive, work / "planted" / task.id, (task.file, task.search, task.replace))
    name = f"{task.package.name}-{task.package.version}"
    if name not in pristine:
        pristine[name] = tree(archive, work / "pristine" / name)
    return Trees(planted, pristine[name])


def ran(run: SnippetRun) -> bool:
    """The snippet reached the repository's code: it finished, and did not stop at an import or a name of its own."""
    raised = run.seen.raised
    if run.seen.timed_out:
        return False
    return raised is None or not (raised.type in STOPPED or (raised.type == "NameError" and not raised.repo_frames))


def oracle_counts(verdicts: Sequence[bool | None]) -> tuple[int, int, int]:
    """How many of the pristine tree's verdicts passed, failed, could not tell."""
    return sum(v is True for v in verdicts), sum(v is False for v in verdicts), sum(v is None for v in verdicts)


def pristine_verdicts(
    found: ExecutionFacts, pristine: Path, sandbox: Sandbox, limits: SnippetLimits
) -> list[bool | None]:
    """Each reproducing snippet's verdict on the pristine tree (as validation would judge a right patch)."""
    verdicts = []
    for evidence in found.evidence():
        after = facts.run_snippet(evidence.run.snippet, pristine, sandbox, limits)
        verdicts.append(facts.judged(evidence.name, evidence.run, after).passed)
    return verdicts


def made_test_verdict(found: ExecutionFacts, trees: Trees, sandbox: Sandbox) -> str:
    """The snippet-made test: `true` when it fails (not errors) on the planted tree and passes on the pristine."""
    source = facts.snippet_test(found)
    if source is None:
        return "none"
    path = sandbox.scratch / "repro" / "test_snaffle_repro.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    with Workspace.open(trees.planted) as workspace:
        planted = run_tests(workspace, sandbox, [], [str(path)])
    if not (planted.ran and planted.failed and not planted.errored):
        return "false"
    with Workspace.open(trees.pristine) as workspace:
        pristine = run_tests(workspace, sandbox, [], [str(path)])
    return "true" if pristine.passed and not pristine.failed and not pristine.errored else "false"


def measure(task: ab.BenchTask, variant: str, limits: SnippetLimits, trees: Trees, sandbox: Sandbox) -> TaskRow:
    """One task under one variant's limits."""
    started = time.monotonic()
    found = facts.gather(task.issue, trees.planted, sandbox, limits)
    verdicts = pristine_verdicts(found, trees.pristine, sandbox, limits)
    made = made_test_verdict(found, trees, sandbox)
    return row_of(task, variant, found, verdicts, made, time.monotonic() - started)


def row_of(
    task: ab.BenchTask,
    variant: str,
    found: ExecutionFacts,
    verdicts: Sequence[bool | None],
    snippet_test: str,
    seconds: float,
) -> TaskRow:
    """The row from what the facts stage found and the pristine tree's verdicts."""
    runs = found.runs
    return TaskRow(
        task.id,
        task.split,
        variant,
        len(runs),
        sum(ran(r) for r in runs),
        sum(bool(r.seen.raised and r.seen.raised.repo_frames) for r in runs),
        len(found.reproducing),
        *oracle_counts(verdicts),
        sum(len(r.imports_added) for r in runs),
        sum(len(r.snippet.expectations) for r in runs),
        snippet_test,
        round(seconds, 1),
    )


def oracle(row: TaskRow) -> str:
    """The task's evidence as validation would use it: `true` when every reproducing snippet passes on the pristine
    tree, `FALSE` when any fails there (it would veto a right patch), `unknown`, or `-` (nothing reproduced)."""
    if not row.reproduced:
        return "-"
    if row.oracle_false:
        return "FALSE"
    return "true" if row.oracle_true == row.reproduced else "unknown"


COLUMNS = ("task", "split", "variant", "snip", "ran", "raised", "repro", "oracle", "imports", "expect", "test", "s")


def table(rows: Sequence[TaskRow]) -> str:
    """One line per task and variant."""
    lines = [" | ".join(COLUMNS), " | ".join("---" for _ in COLUMNS)]
    for r in rows:
        cells = (r.task, r.split, r.variant, r.snippets, r.ran, r.raised_in_repo, r.reproduced, oracle(r))
        lines.append(" | ".join(map(str, (*cells, r.imports_added, r.expectations, r.snippet_test, r.seconds))))
    return "\n".join(lines)


TOTAL_COLUMNS = ("split", "variant", "tasks", "snippets ran", "reproduced", "true oracle", "FALSE oracle", "test")


def totals(rows: Sequence[TaskRow]) -> str:
    """Per split and variant: snippets that ran of all, and tasks with a reproduction, a true oracle, a false one
    (evidence failing on the correct code), a zero-token true-oracle test."""
    lines = [" | ".join(TOTAL_COLUMNS), " | ".join("---" for _ in TOTAL_COLUMNS)]
    for split in sorted({r.split for r in rows}):
        for variant in dict.fromkeys(r.variant for r in rows):
            group = [r for r in rows if r.split == split and r.variant == variant]
            if not group:
                continue
            snippets = f"{sum(r.ran for r in group)}/{sum(r.snippets for r in group)}"
            counts = [sum(oracle(r) == o for r in group) for o in ("true", "FALSE")]
            reproduced = sum(bool(r.reproduced) for r in group)
            tests = sum(r.snippet_test == "true" for r in group)
            lines.append(" | ".join(map(str, (split, variant, len(group), snippets, reproduced, *counts, tests))))
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="", help="regex over task ids")
    parser.add_argument("--split", default="all", choices=("all", *ab.SPLITS))
    parser.add_argument("--variants", default="", help=f"regex over variant names: {', '.join(VARIANTS)}")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "snaffle" / "bench"), help="the A/B cache")
    parser.add_argument("--work", default="/tmp/facts_bench", help="unpacked trees and the sandbox's scratch")
    parser.add_argument("--results", help="JSONL of rows (default <work>/rows.jsonl)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(args.work).resolve()
    tasks = ab.select_tasks(ab.load_tasks(), args.tasks, 0, args.split)
    variants = [v for v in VARIANTS if re.search(args.variants, v)]
    if not tasks or not variants:
        print(f"facts_bench: no {'task' if not tasks else 'variant'} matches; see --help", file=sys.stderr)
        return 2
    sandbox = Sandbox.create(work / "sandbox")
    base = facts.snippet_limits()
    rows: list[TaskRow] = []
    pristine: dict[str, Path] = {}
    results = Path(args.results) if args.results else work / "rows.jsonl"
    results.parent.mkdir(parents=True, exist_ok=True)
    with results.open("w", encoding="utf-8") as out:
        for task in tasks:
            try:
                trees = trees_for(task, Path(args.cache), work, pristine)
            except (subprocess.CalledProcessError, OSError, ValueError) as error:
                print(f"facts_bench: {task.id}: no tree ({error}); is {task.package.name} on PyPI?", file=sys.stderr)
                return 1
            for variant in variants:
                rows.append(measure(task, variant, variant_limits(base, variant), trees, sandbox))
                out.write(json.dumps(asdict(rows[-1])) + "\n")
                out.flush()
                print(f"{task.id} {variant}: {oracle(rows[-1])}", file=sys.stderr, flush=True)
    print(table(rows) + "\n\n" + totals(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
