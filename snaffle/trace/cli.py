"""The `snaffle trace ...` and `snaffle ab` commands; `register(sub)` adds both to snaffle's parser."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from snaffle.exceptions import UserError
from snaffle.trace import ab, export, html, show
from snaffle.trace.analysis import Analysis, analyze
from snaffle.trace.runs import load_gold, load_report, load_reports, load_runs, run_names
from snaffle.trace.schema import load_trajectory
from snaffle.trace.stats import AttemptStats, Summary, summarize
from snaffle.trajectory import TRAJECTORY_FILE, environment_secrets

EXIT_USAGE = 2
PIPE_WIDTH = 200
"""Columns when the output is not a terminal (a pipe or a file): wide enough that tables do not fold."""

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: Subparsers) -> None:
    """Add `trace` (show, stats, labels, html, export) and `ab`."""
    register_trace(sub)
    register_ab(sub)


def register_trace(sub: Subparsers) -> None:
    trace = sub.add_parser("trace", help="read trajectories back: show, stats, labels, html, export")
    trace.set_defaults(func=lambda args: _usage(trace))
    commands = trace.add_subparsers(title="trace commands", metavar="COMMAND")
    p = commands.add_parser("show", help="a trajectory turn by turn in the terminal")
    p.add_argument("traj", type=Path, metavar="TRAJ", help="a trajectory.jsonl, or a run dir holding one")
    p.add_argument("--turn", type=int, help="only this turn (1-based; of each sample, or of --sample's)")
    p.add_argument("--sample", type=int, help="agentless: only this repair sample's events (0 is the greedy one)")
    p.add_argument("--stage", help="agentless: only this stage's events (localize, reproduce, repair, validate, ...)")
    p.add_argument("--full", action="store_true", help="observations and reasoning in full, not windowed")
    p.add_argument("--follow", action="store_true", help="keep rendering a file still being written")
    p.add_argument("--idle-timeout", type=float, default=0.0, help="with --follow: stop after S s without growth")
    p.set_defaults(func=cmd_show)
    p = commands.add_parser("stats", help="efficiency profile per attempt and aggregated")
    _add_runs(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_stats)
    p = commands.add_parser("labels", help="deterministic failure labels per attempt")
    _add_runs(p, gold=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_labels)
    p = commands.add_parser("html", help="a self-contained HTML report")
    _add_runs(p, gold=True)
    p.add_argument("-o", "--out", type=Path, required=True, help="the HTML file to write")
    p.add_argument("--title", default="snaffle run report", help="the page's title")
    p.set_defaults(func=cmd_html)
    p = commands.add_parser("export", help="runs as another harness's trajectories (mini-swe-agent's inspector)")
    p.add_argument(
        "--format",
        choices=export.EXPORT_FORMATS,
        default="mini-swe-agent",
        help="format",
    )
    p.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="run dirs, batch dirs or trajectory files")
    p.add_argument("out", type=Path, metavar="OUT", help="the directory to write (one folder per run)")
    p.set_defaults(func=cmd_export)


def register_ab(sub: Subparsers) -> None:
    p = sub.add_parser("ab", help="two runs side by side, head-to-head, CI on the resolve-rate difference")
    p.add_argument("run_a", type=Path, metavar="RUN_A", help="a batch dir (or run dir) of arm A")
    p.add_argument("run_b", type=Path, metavar="RUN_B", help="a batch dir (or run dir) of arm B")
    p.add_argument("--md", action="store_true", help="print a Markdown table")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--names", nargs=2, metavar=("A", "B"), help="column names (default: the dirs' names)")
    help_text = "SWE-bench report JSON; once for both runs, or twice: A's then B's"
    p.add_argument("--report", type=Path, action="append", metavar="FILE", help=help_text)
    p.add_argument("--gold", type=Path, metavar="FILE", help="gold patches (a diff, or SWE-bench instances)")
    p.add_argument("--repo", type=Path, help="a checkout at the base, for mapping patches to entities")
    p.set_defaults(func=cmd_ab)


def _add_runs(p: argparse.ArgumentParser, gold: bool = False) -> None:
    p.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR", help="run dirs, batch dirs or trajectory files")
    p.add_argument("--report", type=Path, action="append", metavar="FILE", help="SWE-bench report JSON (resolved)")
    if gold:
        p.add_argument("--gold", type=Path, metavar="FILE", help="gold patches: a diff, or SWE-bench instances")
        p.add_argument("--repo", type=Path, help="a checkout at the base (default: the task's repo, if present)")


def console() -> Console:
    """A console for stdout; when it is not a terminal, wide and without colour codes."""
    terminal = Console(highlight=False)
    return terminal if terminal.is_terminal else Console(highlight=False, width=PIPE_WIDTH)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return EXIT_USAGE


def _analyses(args: argparse.Namespace) -> list[Analysis]:
    gold = load_gold(args.gold) if getattr(args, "gold", None) else None
    return analyze(load_runs(args.runs), load_reports(args.report), gold, getattr(args, "repo", None))


def trajectory_path(path: Path) -> Path:
    """A file as named; else a run dir's trajectory (a .jsonl not there yet is taken as named, for --follow)."""
    return path if path.is_file() or (path.suffix == ".jsonl" and not path.is_dir()) else path / TRAJECTORY_FILE


def cmd_show(args: argparse.Namespace) -> int:
    path, out = trajectory_path(args.traj), console()
    options = show.ShowOptions(full=args.full, turn=args.turn, sample=args.sample, stage=args.stage)
    if args.follow:
        tail = show.Tail(path, idle_timeout_s=args.idle_timeout)
        try:
            show.show(tail.events(), out, options)
        except KeyboardInterrupt:
            return 0
        if tail.torn:
            out.print("(the last line is incomplete: torn, or still being written)", style="yellow")
        return 0
    if not path.is_file():
        raise UserError(f"no trajectory at {path}: pass a trajectory.jsonl or a run dir (add --follow to wait)")
    trajectory = load_trajectory(path)
    if not show.show(trajectory.events, out, options) and (args.turn, args.sample, args.stage) != (None,) * 3:
        wanted = (("stage", args.stage), ("sample", args.sample), ("turn", args.turn))
        asked = " ".join(f"{k} {v}" for k, v in wanted if v is not None)
        raise UserError(f"no {asked} in {path}: {show.addresses(trajectory.events)}")
    if trajectory.torn:
        out.print("(torn last line skipped)", style="yellow")
    return 0


STATS_COLUMNS: tuple[tuple[str, Callable[[AttemptStats], str]], ...] = (
    ("calls", lambda s: str(s.calls)),
    ("fixed ctx", lambda s: "—" if s.fixed_context is None else str(s.fixed_context)),
    ("prompt/call", lambda s: f"{s.prompt_per_call:.0f}"),
    ("out tok", lambda s: str(s.output_tokens)),
    ("wall s", lambda s: f"{s.wall_s:.1f}"),
    ("tests", lambda s: str(s.test_runs)),
    ("harness tests", lambda s: str(s.harness_test_runs)),
    ("re-runs", lambda s: str(s.test_reruns_unchanged)),
    ("test edits", lambda s: str(s.test_file_edits)),
    ("rejected", lambda s: str(s.rejected_calls)),
    ("malformed", lambda s: str(s.malformed_turns)),
    ("lint", lambda s: str(s.lint_rejections)),
    ("collapsed", lambda s: str(s.collapsed)),
    ("$", lambda s: f"{s.dollars:.4f}"),
)


def stats_table(stats: Sequence[AttemptStats]) -> Table:
    table = Table(title="attempts")
    for name in ("instance", "status", *(c[0] for c in STATS_COLUMNS)):
        table.add_column(name, justify="left" if name in ("instance", "status") else "right")
    for s in stats:
        status = s.status + (" (torn)" if s.torn else "") + {True: " ✓", False: " ✗", None: ""}[s.resolved]
        table.add_row(s.instance_id, status, *(cell(s) for _, cell in STATS_COLUMNS))
    return table


def summary_lines(summary: Summary) -> list[str]:
    m = summary.metrics
    graded = f"resolved {summary.resolved}/{summary.graded}" if summary.graded else "not graded"
    return [
        f"{summary.attempts} attempts ({summary.complete} finished) · {graded} · statuses {dict(summary.statuses)}",
        f"calls median {m['calls'].median:g} · prompt tokens per call {m['prompt_per_call'].mean:.0f} · "
        f"output tokens mean {m['output_tokens'].mean:.0f} · wall s median {m['wall_s'].median:.1f} · "
        f"test runs mean {m['test_runs'].mean:.2f} (harness's {m['harness_test_runs'].total:g} more) · "
        f"re-runs {m['test_reruns_unchanged'].total:g} · "
        f"test-file edits {m['test_file_edits'].total:g} · ${m['dollars'].total:.4f} ({summary.dollars_source})",
    ]


def cmd_stats(args: argparse.Namespace) -> int:
    analyses = _analyses(args)
    stats = [x.stats for x in analyses]
    summary = summarize(stats)
    if args.json:
        print(json.dumps({"attempts": [s.as_dict() for s in stats], "aggregate": summary.as_dict()}, indent=2))
        return 0
    out = console()
    out.print(stats_table(stats))
    for line in summary_lines(summary):
        out.print(line)
    return 0


def cmd_labels(args: argparse.Namespace) -> int:
    analyses = _analyses(args)
    if args.json:
        print(json.dumps([_labels_record(x) for x in analyses], indent=2))
        return 0
    out = console()
    for x in analyses:
        names = ", ".join(label.name for label in x.labels) or "no failure label"
        out.print(f"[bold]{_escape(x.stats.instance_id)}[/bold] ({x.stats.status}): {names}")
        for lab in x.labels:
            out.print(f"  {lab.name}: {_escape(lab.evidence)}", highlight=False)
    if not args.gold:
        out.print("(wrong_location not checked: pass --gold FILE)", style="dim")
    return 0


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _labels_record(x: Analysis) -> dict[str, object]:
    where = x.location
    return {
        "instance_id": x.stats.instance_id,
        "path": x.stats.path,
        "status": x.stats.status,
        "labels": [{"name": lab.name, "evidence": lab.evidence} for lab in x.labels],
        "location": None if where is None else {"edited": sorted(where.edited), "gold": sorted(where.gold)},
    }


def cmd_html(args: argparse.Namespace) -> int:
    page = html.report(_analyses(args), args.title, environment_secrets(os.environ))
    try:
        args.out.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {args.out}: {exc}") from exc
    print(f"wrote {args.out} ({len(page) // 1024} KiB)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write the runs as mini-swe-agent trajectories; `mini-extra inspector OUT` browses them."""
    if args.out.exists() and not args.out.is_dir():
        raise UserError(f"{args.out} is a file; pass a directory to export into")
    runs = load_runs(args.runs)
    written = export.export_runs(runs, run_names(runs), args.out)
    print(f"wrote {len(written)} {args.format} trajectories under {args.out} (browse: mini-extra inspector {args.out})")
    return 0


def cmd_ab(args: argparse.Namespace) -> int:
    reports = args.report or []
    if len(reports) > 2:
        raise UserError("--report is given once (for both runs) or twice (A's, then B's)")
    report_a = load_report(reports[0]) if reports else {}
    report_b = load_report(reports[-1]) if reports else {}
    gold = load_gold(args.gold) if args.gold else None
    a = analyze(load_runs([args.run_a]), report_a, gold, args.repo)
    b = analyze(load_runs([args.run_b]), report_b, gold, args.repo)
    names = tuple(args.names) if args.names else _names(args.run_a, args.run_b)
    comparison = ab.compare(a, b, (names[0], names[1]))
    if args.json:
        print(json.dumps(comparison.as_dict(), indent=2))
    elif args.md:
        print(ab.markdown(comparison), end="")
    else:
        _print_ab(comparison)
    return 0


def _names(a: Path, b: Path) -> tuple[str, str]:
    name_a, name_b = a.resolve().name, b.resolve().name
    return (name_a, name_b) if name_a != name_b else ("A", "B")


def _print_ab(comparison: ab.Comparison) -> None:
    out = console()
    table = Table(title="A/B")
    table.add_column("metric")
    for name in comparison.names:
        table.add_column(name, justify="right")
    for row in ab.table_rows(comparison):
        table.add_row(*row)
    out.print(table)
    for line in ab.verdict_lines(comparison):
        out.print(line)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m snaffle.trace.cli ...`: the same commands without the rest of snaffle's CLI."""
    parser = argparse.ArgumentParser(prog="snaffle", description="Read snaffle trajectories back.")
    register(parser.add_subparsers(title="commands", metavar="COMMAND"))
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        return _usage(parser)
    try:
        return int(args.func(args))
    except UserError as exc:
        print(f"snaffle: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
