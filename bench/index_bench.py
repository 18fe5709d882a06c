"""Benchmark the repository index (snaffle.index) on a large real tree: cold, warm and one-file refresh.

Run: .venv/bin/python bench/index_bench.py [--root DIR] [--repeat 3] [--workers 2] [--max-lines N]
     .venv/bin/python bench/index_bench.py --git-dir MIRROR --commits A,B,C,...   # fresh worktrees of one repo
     .venv/bin/python bench/index_bench.py --git-dir MIRROR --instances ROWS.jsonl.gz --repo-name OWNER/NAME
         [--limit N | --probes N] [--baseline-code DIR]   # SWE-bench rows' commits and issues

The tree (default: this interpreter's standard library, offline) is copied to a scratch directory so the
refresh phase can edit files. Every phase runs in a fresh process; the table gives the median over the
repetitions, the ratio to the baselines measured in the same run (reading every file; `ast.parse` of every
file), the peak RSS of the phase's whole process tree (sampled every 10 ms, and never below the phase
process's own ru_maxrss), and the target. Targets are stated per 500k lines; they are scaled to the tree.
A second table compares the two ways of extracting definitions from the same parsed trees: the manual
cursor walk the index uses, and a tree-sitter query.

With --git-dir, the held-out-like setting instead: a new worktree per commit (a `git clone --shared` checkout at a new
path, as one SWE-bench instance gets), indexed in order with one cache that keeps what the earlier worktrees left:
the first is a cold repository, the later ones are new worktrees of a repository seen before. Each row times the
index build of the non-test files (what `Localizer.prepare` builds), the rest of `prepare` (documents, tables) and
one `localize` in a fresh process, with the ratio to reading that worktree's
files and to the first (cold) worktree's total, both measured in the same run; the last row is a worktree at the
first commit again. Targets: cold <= 15 s, a later worktree's median <= 1.5 s.

With --instances the worktrees are the base commits of a repository's SWE-bench rows, each localizing its own
issue; with --probes N, N of those rows (spread over the file) are new worktrees while the cache holds every other
row's commit (filled first, not timed; each probe gets a fresh copy of it): a repository seen before, as a held-out
instance meets it. --baseline-code DIR runs every phase a second time with the snaffle package under DIR (e.g.
`git archive BASE snaffle | tar -x -C DIR`) and its own cache, taking turns at going first, and prints the ratios
and whether the two top-10 rankings are byte-identical. Every row gives the load average when it started and the
CPU seconds of the phase's process tree (parse workers included): on a shared machine CPU is the figure to read.
A phase imports this checkout's snaffle (not an installed one).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from snaffle.index import parse
from snaffle.index.repo import RepoIndex

TARGET_LINES = 500_000
COLD_TARGET_S = 20.0
WARM_TARGET_S = 2.0
REFRESH_TARGET_S = 0.050
REFRESH_EDITS = 5
COLD_REPO_TARGET_S = 15.0
SEEN_REPO_TARGET_S = 1.5
LOCALIZE_ISSUE = "The result is wrong when the expression is printed; the function returns None instead of a value."
SAMPLE_INTERVAL_S = 0.01
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CHECKOUT = Path(__file__).resolve().parent.parent
DEFINITIONS_QUERY = """
(function_definition name: (identifier) @name) @definition
(class_definition name: (identifier) @name) @definition
"""

# -- phases: each runs in its own process and prints one JSON object -------------------------------------------


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _since(started: tuple[float, float]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) since `started`, a (perf_counter, process_time) pair."""
    return time.perf_counter() - started[0], time.process_time() - started[1]


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def phase_read(tree: Path, files: list[str]) -> dict[str, float]:
    started = _now()
    total = sum(len((tree / name).read_bytes()) for name in files)
    wall, cpu = _since(started)
    return {"seconds": wall, "cpu": cpu, "bytes": total}


def phase_ast(tree: Path, files: list[str]) -> dict[str, float]:
    failed = 0
    started = _now()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in files:
            try:
                ast.parse((tree / name).read_bytes())
            except (SyntaxError, ValueError):
                failed += 1
    wall, cpu = _since(started)
    return {"seconds": wall, "cpu": cpu, "failed": failed}


def phase_build(tree: Path, cache: Path, workers: int) -> dict[str, float]:
    started = _now()
    stats = RepoIndex(tree, cache).build(workers=workers)
    wall, cpu = _since(started)
    return {"seconds": wall, "cpu": cpu, "files": stats.files, "cached": stats.cached, "workers": stats.workers}


def phase_refresh(tree: Path, cache: Path) -> dict[str, float]:
    """Warm index, then edit the median-sized and the largest file REFRESH_EDITS times each: the first
    refresh parses the file in full (a warm index holds no trees), later ones reparse incrementally."""
    index = RepoIndex(tree, cache)
    index.build()
    by_size = sorted(index.files(), key=lambda name: (tree / name).stat().st_size)
    result: dict[str, float] = {}
    for label, name in (("median", by_size[len(by_size) // 2]), ("largest", by_size[-1])):
        walls, cpus = _timed_refreshes(index, tree / name, name)
        result[f"{label}_first"], result[f"{label}_later"] = walls[0], statistics.median(walls[1:])
        result[f"{label}_first_cpu"], result[f"{label}_later_cpu"] = cpus[0], statistics.median(cpus[1:])
        result[f"{label}_lines"] = index.info(name).lines
    return result


def _timed_refreshes(index: RepoIndex, path: Path, name: str) -> tuple[list[float], list[float]]:
    original, stat = path.read_bytes(), path.stat()
    walls, cpus = [], []
    try:
        for edit in range(REFRESH_EDITS):
            path.write_bytes(original + f"\n\ndef bench_edit_{edit}():\n    return {edit}\n".encode())
            started = _now()
            index.refresh(name)
            wall, cpu = _since(started)
            walls.append(wall)
            cpus.append(cpu)
            assert index.resolve(f"{name}::bench_edit_{edit}").kind == "function"
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        index.refresh(name)
    return walls, cpus


def phase_extract(tree: Path, files: list[str]) -> dict[str, float]:
    """Time the index's walk against a query over the same parsed trees (parsing is not timed)."""
    from tree_sitter import Parser, Query, QueryCursor

    language = parse.python_language()
    sources = [(tree / name).read_bytes() for name in files]
    trees = [Parser(language).parse(source) for source in sources]
    started = time.perf_counter()
    walked = sum(
        sum(1 for _ in parse._walk(t.root_node, source, False)) for t, source in zip(trees, sources, strict=True)
    )
    walk_s = time.perf_counter() - started
    query = Query(language, DEFINITIONS_QUERY)
    started = time.perf_counter()
    queried = sum(len(QueryCursor(query).captures(t.root_node).get("definition", [])) for t in trees)
    query_s = time.perf_counter() - started
    return {"walk": walk_s, "query": query_s, "walk_found": walked, "query_found": queried}


def phase_worktree(tree: Path, cache: Path, issue_file: str | None) -> dict[str, Any]:
    """What one instance pays on a fresh worktree: imports, the index build (inside `Localizer.prepare`), the rest
    of `prepare`, one localization (of the instance's issue when given). Runs under whichever snaffle is on the
    path (the bench's `--baseline-code` puts another one there), so it uses only what both have."""
    started, cpu_started = time.perf_counter(), time.process_time()
    from snaffle.agentless.localize import Localizer

    imported = time.perf_counter()
    index = RepoIndex(tree, cache)
    timed: dict[str, Any] = {}
    build = index.build

    def timed_build(*args: Any, **kwargs: Any) -> Any:
        build_started = time.perf_counter()
        timed["stats"] = build(*args, **kwargs)
        timed["build"] = time.perf_counter() - build_started
        return timed["stats"]

    index.build = timed_build  # type: ignore[method-assign]  # the bench's stopwatch around prepare's build
    localizer = Localizer(index).prepare()
    prepared = time.perf_counter()
    issue = Path(issue_file).read_text("utf-8") if issue_file else LOCALIZE_ISSUE
    ranked = localizer.localize(issue, top=10).as_json()
    done = time.perf_counter()
    ranked.pop("elapsed_s")
    stats = timed["stats"]
    return {
        "seconds": done - started,
        "cpu": time.process_time() - cpu_started,
        "imports": imported - started,
        "build": timed["build"],
        "prepare": prepared - imported - timed["build"],
        "localize": done - prepared,
        "files": stats.files,
        "parsed": stats.parsed,
        "workers": stats.workers,
        "ranking": hashlib.sha1(json.dumps(ranked, sort_keys=True).encode()).hexdigest(),
    }


def phase_fill(tree: Path, cache: Path, commits: list[str]) -> dict[str, Any]:
    """Fill the cache the way earlier instances would have: check each commit out in one clone, prepare a
    localizer on it (index and documents) and localize an empty issue (what a repository's first localization keeps:
    the history store), in order."""
    from snaffle.agentless.localize import Localizer

    started = _now()
    for number, commit in enumerate(commits):
        subprocess.run(["git", "-C", str(tree), "checkout", "-q", "--detach", "--force", commit], check=True)
        Localizer(RepoIndex(tree, cache)).prepare().localize("")
        print(f"  filled {number + 1}/{len(commits)} {commit[:10]}", file=sys.stderr, flush=True)
    wall, cpu = _since(started)
    return {"seconds": wall, "cpu": cpu, "commits": len(commits)}


def run_phase(args: argparse.Namespace) -> None:
    if args.phase == "fill":
        commits = json.loads(Path(args.files).read_text())
        print(json.dumps(phase_fill(Path(args.tree), Path(args.cache), commits) | {"own_peak_mib": _peak_mib()}))
        return
    tree, files = Path(args.tree), json.loads(Path(args.files).read_text())
    if args.phase == "worktree":
        print(json.dumps(phase_worktree(tree, Path(args.cache), args.issue) | {"own_peak_mib": _peak_mib()}))
        return
    if args.phase == "read":
        result = phase_read(tree, files)
    elif args.phase == "ast":
        result = phase_ast(tree, files)
    elif args.phase == "build":
        result = phase_build(tree, Path(args.cache), args.workers)
    elif args.phase == "refresh":
        result = phase_refresh(tree, Path(args.cache))
    else:
        result = phase_extract(tree, files)
    print(json.dumps(result | {"own_peak_mib": _peak_mib()}))


# -- the orchestrator --------------------------------------------------------------------------------------------


def _tree_sample(pid: int) -> tuple[float, dict[int, float]]:
    """Resident memory (MiB) of `pid` and all its descendants, and each one's CPU seconds so far, from /proc."""
    total, pending, cpu = 0, [pid], {}
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            fields = Path(f"/proc/{current}/stat").read_text().rpartition(")")[2].split()
            cpu[current] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, StopIteration, ValueError, IndexError):
            continue
    return total / 1024, cpu


def spawn_phase(phase: str, common: list[str], code: Path | None = None, **extra: object) -> dict[str, Any]:
    """Run one phase in a fresh process (this checkout's snaffle, or the one under `code`); its result, the peak
    RSS of its process tree and the tree's CPU seconds (sampled every 10 ms: parse workers included)."""
    command = [sys.executable, __file__, "--phase", phase, *common]
    command += [f"--{key}={value}" for key, value in extra.items()]
    env = dict(os.environ)  # the phase imports this checkout's snaffle (not an installed one) unless told `code`
    env["PYTHONPATH"] = os.pathsep.join([str(code or CHECKOUT), *filter(None, [env.get("PYTHONPATH")])])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    peak, cpu = 0.0, dict[int, float]()
    while process.poll() is None:
        rss, seen = _tree_sample(process.pid)
        peak, cpu = max(peak, rss), cpu | seen
        time.sleep(SAMPLE_INTERVAL_S)
    output = process.stdout.read() if process.stdout else ""
    if process.returncode != 0:
        raise SystemExit(f"phase {phase} failed with exit status {process.returncode}")
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    result["peak_mib"] = max(peak, result["own_peak_mib"])
    result["tree_cpu"] = max(sum(cpu.values()), result.get("cpu", 0.0))
    return result


def prepare_tree(source: Path, scratch: Path, max_lines: int) -> tuple[Path, list[str], int]:
    """Copy the Python files the index would see (mtimes kept) into `scratch`; returns (tree, files, lines)."""
    tree, files, lines = scratch / "tree", [], 0
    for name in RepoIndex(source).files():
        data = (source / name).read_bytes()
        if max_lines and lines >= max_lines:
            break
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, target)
        files.append(name)
        lines += data.count(b"\n")
    return tree, files, lines


def run_repetition(common: list[str], scratch: Path, workers: int, rep: int) -> dict[str, dict[str, float]]:
    results = {"read": spawn_phase("read", common), "ast": spawn_phase("ast", common)}
    for label, count in (("cold-1", 1), (f"cold-{workers}", workers)):
        cache = scratch / f"cache-{label}-{rep}"
        results[label] = spawn_phase("build", common, cache=cache, workers=count)
    cache = scratch / f"cache-cold-{workers}-{rep}"
    results["warm"] = spawn_phase("build", common, cache=cache, workers=0)
    assert results["warm"]["cached"] == results["warm"]["files"], "warm run re-parsed files"
    results["refresh"] = spawn_phase("refresh", common, cache=cache)
    for label in ("cold-1", f"cold-{workers}"):
        shutil.rmtree(scratch / f"cache-{label}-{rep}", ignore_errors=True)
    return results


def print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


PHASES = (
    ("read files (baseline)", "read", "seconds", None),
    ("ast.parse (baseline)", "ast", "seconds", None),
    ("cold build, 1 worker", "cold-1", "seconds", "cold"),
    ("cold build, {workers} workers", "cold-{workers}", "seconds", "cold"),
    ("warm build (cache valid)", "warm", "seconds", "warm"),
    ("refresh, 1st edit (median file)", "refresh", "median_first", "refresh"),
    ("refresh, later edits (median file)", "refresh", "median_later", "refresh"),
    ("refresh, 1st edit (largest file)", "refresh", "largest_first", "refresh"),
    ("refresh, later edits (largest file)", "refresh", "largest_later", "refresh"),
)
"""(label, phase, result key, target) for each table row."""


def summarize(runs: list[dict[str, dict[str, float]]], workers: int, lines: int) -> list[tuple[str, ...]]:
    scale = lines / TARGET_LINES
    targets = {"cold": COLD_TARGET_S * scale, "warm": WARM_TARGET_S * scale, "refresh": REFRESH_TARGET_S}
    header = ("phase", "median s", "min–max s", "cpu s", "× read", "× ast.parse", "peak MiB", "target", "met")
    rows: list[tuple[str, ...]] = [header]
    baselines = (_median(runs, "read", "seconds"), _median(runs, "ast", "seconds"))
    for label, phase, key, target_name in PHASES:
        phase = phase.format(workers=workers)
        target = targets[target_name] if target_name else None
        rows.append(_row(runs, label.format(workers=workers), phase, key, target, baselines))
    return rows


def _median(runs: list[dict[str, dict[str, float]]], phase: str, key: str) -> float:
    return statistics.median(run[phase][key] for run in runs)


def _row(
    runs: list[dict[str, dict[str, float]]],
    label: str,
    phase: str,
    key: str,
    target: float | None,
    baselines: tuple[float, float],
) -> tuple[str, ...]:
    values = [run[phase][key] for run in runs]
    value = statistics.median(values)
    cpu = _median(runs, phase, "cpu" if key == "seconds" else f"{key}_cpu")
    cpu_text = f"{cpu:.3f}" + ("*" if phase.startswith("cold-") and phase != "cold-1" else "")
    target_text = "" if target is None else f"≤ {target:.3f} s" if target < 1 else f"≤ {target:.1f} s"
    met = "" if target is None else ("yes" if value <= target else "NO")
    ratios = (f"{value / baselines[0]:.2f}", f"{value / baselines[1]:.2f}")
    spread = f"{min(values):.3f}–{max(values):.3f}"
    peak = f"{_median(runs, phase, 'peak_mib'):.0f}"
    return (label, f"{value:.3f}", spread, cpu_text, *ratios, peak, target_text, met)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--max-lines", type=int, default=0, help="stop copying files at this many lines (0: all)")
    parser.add_argument("--git-dir", type=Path, help="a repository (bare is fine): measure fresh worktrees of it")
    parser.add_argument("--commits", default="", help="with --git-dir: comma-separated commits, in order")
    parser.add_argument("--instances", type=Path, help="with --git-dir: SWE-bench rows (.jsonl[.gz]): their commits")
    parser.add_argument("--repo-name", default="", help="with --instances: the rows of this repository (owner/name)")
    parser.add_argument("--limit", type=int, default=0, help="with --instances: the first N rows (0: all)")
    parser.add_argument(
        "--probes",
        type=int,
        default=0,
        help="with --instances: N rows as new worktrees, the cache filled from the rest",
    )
    parser.add_argument("--baseline-code", type=Path, help="a directory holding another snaffle package to compare")
    parser.add_argument("--issue", help=argparse.SUPPRESS)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--files", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        run_phase(args)
        return 0
    if args.git_dir and args.probes:
        return orchestrate_probes(args)
    if args.git_dir:
        return orchestrate_worktrees(args)
    return orchestrate(args)


def orchestrate(args: argparse.Namespace) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="snaffle-index-bench-"))
    try:
        tree, files, lines = prepare_tree(args.root.resolve(), scratch, args.max_lines)
        listing = scratch / "files.json"
        listing.write_text(json.dumps(files))
        common = [f"--tree={tree}", f"--files={listing}"]
        print(f"tree: {args.root} -> {len(files)} Python files, {lines:,} lines, {sum_mib(tree, files):.1f} MiB")
        print(
            f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start; "
            f"repetitions: {args.repeat}; targets scaled from {TARGET_LINES:,} lines to {lines:,}"
        )
        runs = [run_repetition(common, scratch, args.workers, rep) for rep in range(args.repeat)]
        print()
        print_table(summarize(runs, args.workers, lines))
        refresh = runs[0]["refresh"]
        print(
            f"refresh files: median-size file {refresh['median_lines']:.0f} lines, "
            f"largest {refresh['largest_lines']:.0f} lines; {REFRESH_EDITS} edits each (later = median of the rest)"
        )
        print("cpu s: CPU time of the phase's main process (* the workers' CPU time is not included)")
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
        print_extraction(spawn_phase("extract", common))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def orchestrate_worktrees(args: argparse.Namespace) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="snaffle-worktree-bench-"))
    try:
        targets = _worktree_targets(args, scratch)
        if len(targets) < 2:
            raise SystemExit("give at least two commits: --commits A,B or --instances FILE --repo-name OWNER/NAME")
        print(f"repository: {args.git_dir}; {len(targets)} worktrees; load average {_load()} at start")
        if args.baseline_code:
            print(f"baseline: the snaffle package under {args.baseline_code}, its own cache, same worktrees")
        rows = [
            _worktree_row(args, commit, issue, scratch, n) for n, (commit, issue) in enumerate([*targets, targets[0]])
        ]
        print()
        print_table(summarize_worktrees(rows, [commit for commit, _ in targets], bool(args.baseline_code)))
        print("cpu s: CPU of the phase's process; tree cpu s: with its parse workers (sampled every 10 ms)")
        print("load: the 1-minute load average when the row started (2 cores)")
        print(f"load average at end: {_load()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def orchestrate_probes(args: argparse.Namespace) -> int:
    """The held-out-like setting: the cache holds every other row's commit (each filled in order in one clone,
    not timed), then each probe row is a new worktree indexed with a fresh copy of that cache, so no probe
    profits from another. The baseline code, when given, fills and uses its own cache the same way."""
    scratch = Path(tempfile.mkdtemp(prefix="snaffle-probe-bench-"))
    try:
        targets = _worktree_targets(args, scratch)
        step = max(1, len(targets) // args.probes)
        probes = [targets[n] for n in range(step // 2, len(targets), step)][: args.probes]
        fill = list(dict.fromkeys(c for c, _ in targets if c not in {p for p, _ in probes}))
        print(f"repository: {args.git_dir}; {len(probes)} probes, cache filled from {len(fill)} other commits")
        codes: dict[str, Path | None] = {"result": None, **({"base": args.baseline_code} if args.baseline_code else {})}
        filled = {label: _fill(args.git_dir, fill, scratch, label, code) for label, code in codes.items()}
        print(f"load average {_load()} after filling; fill: {json.dumps(filled)}", flush=True)
        rows = [_probe_row(args, probe, scratch, n, codes) for n, probe in enumerate(probes)]
        print()
        print_table(summarize_probes(rows, bool(args.baseline_code)))
        print("cpu s: CPU of the phase's process; tree cpu s: with its parse workers (sampled every 10 ms)")
        print(f"load: the 1-minute load average when the row started (2 cores); at end {_load()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _fill(git_dir: Path, commits: list[str], scratch: Path, label: str, code: Path | None) -> dict[str, Any]:
    tree, listing = scratch / f"fill-{label}", scratch / f"fill-{label}.json"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(git_dir), str(tree)], check=True)
    listing.write_text(json.dumps(commits))
    common = [f"--tree={tree}", f"--files={listing}"]
    result = spawn_phase("fill", common, code=code, cache=scratch / f"filled-{label}")
    shutil.rmtree(tree, ignore_errors=True)
    return {k: round(v, 2) for k, v in result.items() if k in ("seconds", "cpu", "tree_cpu")}


def _probe_row(
    args: argparse.Namespace,
    probe: tuple[str, str | None],
    scratch: Path,
    number: int,
    codes: dict[str, Path | None],
) -> dict[str, Any]:
    """One probe: a new worktree at its commit, indexed by each code path with a fresh copy of its filled cache
    (taking turns at going first)."""
    commit, issue = probe
    tree = scratch / f"probe-{number}"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(args.git_dir), str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "checkout", "-q", "--detach", commit], check=True)
    common = [f"--tree={tree}", f"--files={scratch / 'none.json'}", *([f"--issue={issue}"] if issue else [])]
    (scratch / "none.json").write_text("[]")
    load = os.getloadavg()[0]
    order = list(codes.items())
    order = order[number % len(order) :] + order[: number % len(order)]
    found = {}
    for label, code in order:
        cache = scratch / f"probe-cache-{label}"
        shutil.copytree(scratch / f"filled-{label}", cache)
        found[label] = spawn_phase("worktree", common, code=code, cache=cache)
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(tree, ignore_errors=True)
    print(f"probe {number + 1} at {commit[:10]}: {json.dumps(found)}", flush=True)
    return found["result"] | {"commit": commit, "load": load, "base": found.get("base", {})}


def summarize_probes(rows: list[dict[str, Any]], baseline: bool) -> list[tuple[str, ...]]:
    header: tuple[str, ...] = ("probe", "load", "files", "parsed", "workers", "build s", "prepare s", "localize s")
    header += ("total s", "cpu s", "tree cpu s")
    header += ("base total s", "base tree cpu s", "× base wall", "× base cpu", "same top-10") if baseline else ()
    table: list[tuple[str, ...]] = [header]
    for number, row in enumerate(rows):
        cells: tuple[str, ...] = (f"{row['load']:.1f}", f"{row['files']:.0f}", f"{row['parsed']:.0f}")
        cells += (f"{row['workers']:.0f}", f"{row['build']:.2f}", f"{row['prepare']:.2f}", f"{row['localize']:.2f}")
        cells += (f"{row['seconds']:.2f}", f"{row['cpu']:.2f}", f"{row['tree_cpu']:.2f}")
        table.append((f"{number + 1} {row['commit'][:10]}", *cells, *(_baseline_cells(row) if baseline else ())))
    blank = ("",) * (len(header) - 1)
    medians = {8: f"{statistics.median(r['seconds'] for r in rows):.2f}"}
    medians[9] = f"{statistics.median(r['cpu'] for r in rows):.2f}"
    medians[10] = f"{statistics.median(r['tree_cpu'] for r in rows):.2f}"
    medians[3] = f"{statistics.median(r['parsed'] for r in rows):.0f}"
    if baseline:
        medians[11] = f"{statistics.median(r['base']['seconds'] for r in rows):.2f}"
        medians[12] = f"{statistics.median(r['base']['tree_cpu'] for r in rows):.2f}"
    table.append(("median", *_put(blank, medians)))
    met = "yes" if statistics.median(r["seconds"] for r in rows) <= SEEN_REPO_TARGET_S else "NO"
    table.append(("seen-repo target", *_put(blank, {8: f"≤ {SEEN_REPO_TARGET_S}", 9: met})))
    return table


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def _worktree_targets(args: argparse.Namespace, scratch: Path) -> list[tuple[str, str | None]]:
    """(commit, issue file) per worktree: --commits with the bench's stock issue, or the base commits and problem
    statements of --instances' rows of --repo-name, in the file's order."""
    if not args.instances:
        return [(c, None) for c in args.commits.split(",") if c]
    opener = gzip.open if str(args.instances).endswith(".gz") else open
    with opener(args.instances, "rt", encoding="utf-8") as handle:
        rows = [row for line in handle if (row := json.loads(line))["repo"] == args.repo_name]
    targets: list[tuple[str, str | None]] = []
    for number, row in enumerate(rows[: args.limit or None]):
        issue = scratch / f"issue-{number}.md"
        issue.write_text(row["problem_statement"], "utf-8")
        targets.append((row["base_commit"], str(issue)))
    return targets


def _worktree_row(
    args: argparse.Namespace, commit: str, issue: str | None, scratch: Path, number: int
) -> dict[str, Any]:
    """Check `commit` out at a new path, then read its files and index it (build, prepare, localize) with the
    shared cache, each in a fresh process; with a baseline, the baseline's code the same way with its own cache."""
    tree = scratch / f"worktree-{number}"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(args.git_dir), str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "checkout", "-q", "--detach", commit], check=True)
    files = RepoIndex(tree).files()
    listing = scratch / f"files-{number}.json"
    listing.write_text(json.dumps(files))
    common = [f"--tree={tree}", f"--files={listing}", *([f"--issue={issue}"] if issue else [])]
    load = os.getloadavg()[0]
    read = spawn_phase("read", common)
    runs: list[tuple[str, Path | None, Path]] = [("result", None, scratch / "cache")]
    if args.baseline_code:  # taking turns at going first: the second of two runs finds more of the tree in memory
        runs.insert(number % 2, ("base", args.baseline_code, scratch / "cache-baseline"))
    found = {label: spawn_phase("worktree", common, code=code, cache=cache) for label, code, cache in runs}
    result, base = found["result"], found.get("base", {})
    shutil.rmtree(tree, ignore_errors=True)
    print(f"worktree {number + 1} at {commit[:10]}: {json.dumps(result)}", flush=True)
    if base:
        print(f"  baseline: {json.dumps(base)}", flush=True)
    return result | {"read": read["seconds"], "load": load, "base": base}


def summarize_worktrees(rows: list[dict[str, Any]], commits: list[str], baseline: bool) -> list[tuple[str, ...]]:
    header: tuple[str, ...] = (
        "worktree",
        "load",
        "files",
        "parsed",
        "build s",
        "prepare s",
        "localize s",
        "total s",
        "cpu s",
    )
    header += ("tree cpu s", "× read", "× cold")
    header += ("base total s", "base tree cpu s", "× base wall", "× base cpu", "same top-10") if baseline else ()
    table: list[tuple[str, ...]] = [header]
    cold = rows[0]["seconds"]
    labels = [f"1 {commits[0][:10]} (cold)", *(f"{n + 2} {c[:10]}" for n, c in enumerate(commits[1:]))]
    labels.append(f"{len(commits) + 1} {commits[0][:10]} again")
    for label, row in zip(labels, rows, strict=True):
        cells: tuple[str, ...] = (
            f"{row['load']:.1f}",
            f"{row['files']:.0f}",
            f"{row['parsed']:.0f}",
            f"{row['build']:.2f}",
        )
        cells += (f"{row['prepare']:.2f}", f"{row['localize']:.2f}", f"{row['seconds']:.2f}", f"{row['cpu']:.2f}")
        cells += (f"{row['tree_cpu']:.2f}", f"{row['seconds'] / row['read']:.1f}", f"{row['seconds'] / cold:.3f}")
        table.append((label, *cells, *(_baseline_cells(row) if baseline else ())))
    seen = rows[1:-1]
    median = statistics.median(row["seconds"] for row in seen)
    blank = ("",) * (len(header) - 1)
    met_cold = "yes" if cold <= COLD_REPO_TARGET_S else "NO"
    table.append(("cold target", *_put(blank, {7: f"≤ {COLD_REPO_TARGET_S:.0f}", 8: met_cold})))
    medians = {7: f"{median:.2f}", 8: f"{statistics.median(r['cpu'] for r in seen):.2f}"}
    medians[9] = f"{statistics.median(r['tree_cpu'] for r in seen):.2f}"
    if baseline:
        medians[12] = f"{statistics.median(r['base']['seconds'] for r in seen):.2f}"
        medians[13] = f"{statistics.median(r['base']['tree_cpu'] for r in seen):.2f}"
    table.append(("median of worktrees 2..n (seen repo)", *_put(blank, medians)))
    met_seen = "yes" if median <= SEEN_REPO_TARGET_S else "NO"
    table.append(("seen-repo target", *_put(blank, {7: f"≤ {SEEN_REPO_TARGET_S}", 8: met_seen})))
    return table


def _put(blank: tuple[str, ...], cells: dict[int, str]) -> tuple[str, ...]:
    """`blank` with the cells of `cells` (numbered from the table's second column) filled in."""
    return tuple(cells.get(n, text) for n, text in enumerate(blank, start=1))


def _baseline_cells(row: dict[str, Any]) -> tuple[str, ...]:
    base = row["base"]
    ratios = (f"{row['seconds'] / base['seconds']:.2f}", f"{row['tree_cpu'] / base['tree_cpu']:.2f}")
    same = "yes" if row["ranking"] == base["ranking"] else "NO"
    return (f"{base['seconds']:.2f}", f"{base['tree_cpu']:.2f}", *ratios, same)


def sum_mib(tree: Path, files: list[str]) -> float:
    return sum((tree / name).stat().st_size for name in files) / 2**20


def print_extraction(result: dict[str, float]) -> None:
    print()
    print_table(
        [
            ("extraction over the parsed trees", "seconds", "definitions found"),
            ("manual walk (used by the index)", f"{result['walk']:.3f}", f"{result['walk_found']:.0f}"),
            ("tree-sitter query + captures", f"{result['query']:.3f}", f"{result['query_found']:.0f}"),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
