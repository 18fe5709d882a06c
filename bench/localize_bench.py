"""Localization on real SWE-bench Verified dev issues: snaffle's localizer vs plain BM25 over files, same run.

    python bench/localize_bench.py --repos /work/.mirror [--limit N] [--repo-filter REGEX] [--jsonl OUT] [--execute]

Checkouts of each instance's base commit go to --work (default /tmp/snaffle-bench/worktrees), outside the repo.
The index column times the structure index and `Localizer.prepare` (documents cached by content hash); the
localize column is the per-issue cost after that. Every instance gets a checkout of its own (a fresh worktree), so
the warm figure is a new worktree of a repository seen before; --cold N indexes the first N checkouts of each
repository with an empty cache too. The speed table gives both per repository, wall and CPU seconds (median, p90),
beside the targets, and the load average (the CPU figure is the fair one on a shared machine).
--execute also runs each issue's snippets in the sandbox (interpreter: --snippet-python, default the one running the
bench) and ranks a second time with the execution signals: both rankings and the seconds the snippets took are
reported side by side, and the record keeps the signals (`execution_signals`), so `--cv` on such a cache fits their
weights (a signal no record has a value for is held at its packaged weight).
Gold = the files and the functions/methods the gold `patch` touches (old-side lines mapped to entities).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from localize_fit import (
    METRICS,
    PRIORS_OFF,
    RANDOM_STARTS,
    SHARES,
    UNFIT,
    absent,
    fit,
    hits,
    instance,
    leave_one_repo_out,
    nested_scale,
    neutral,
    probes,
    rates,
    score_folds,
    shortlist,
    start,
)

from snaffle.agentless import facts, origin
from snaffle.agentless.issue_text import parse_issue, tokenize
from snaffle.agentless.localize import (
    ENTITY_SIGNALS,
    FILE_PRIORS,
    FILE_SIGNALS,
    KIND_PRIORS,
    Localizer,
    Signals,
    Weights,
    is_peripheral,
    ranked_paths,
)
from snaffle.gates import is_test_file
from snaffle.index.parse import innermost
from snaffle.index.repo import RepoIndex
from snaffle.sandbox import Sandbox

DEV_SET = Path(__file__).resolve().parents[2] / "shared" / "data" / "swebench_verified_dev.jsonl.gz"
Row = dict[str, Any]
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def main() -> int:
    args = parse_args()
    snippet_python = args.snippet_python or sys.executable  # without one, the sandbox runs this one's packages
    if args.execute and lacks_coverage(snippet_python):
        print(
            f"localize_bench: {snippet_python} cannot import coverage, so the `executed` signal "
            "would be empty on every instance; install coverage into that interpreter",
            file=sys.stderr,
        )
        return 2
    rows = [r for r in load(args.instances) if re.search(args.repo_filter, r["repo"])]
    rows = [r for r in rows if mirror(args.repos, r["repo"]) is not None]
    rows = spread_per_repo(rows, args.per_repo)[: args.limit or None]
    results = []
    cold_left: dict[str, int] = {}
    for row in rows:
        result = cached(row, args)
        if result is None and args.extend:
            result = extend(row, args)
        if result is None and not args.cached_only:
            result = measure(row, args, cold_left)
        if result is not None:
            results.append(result)
            if args.jsonl:
                with args.jsonl.open("a", encoding="utf-8") as out:
                    out.write(json.dumps({"instance_id": row["instance_id"], **result}, default=sorted) + "\n")
    print_table(results)
    print_speed(results)
    if args.cv and results:
        print_cv(results, args)
    return 0


def lacks_coverage(python: str) -> bool:
    """Whether `python` cannot import coverage.py (the snippet driver then measures nothing, silently)."""
    try:
        done = subprocess.run([python, "-c", "import coverage"], capture_output=True, timeout=120, check=False)
    except OSError:
        return True
    return done.returncode != 0


def spread_per_repo(rows: list[Row], count: int) -> list[Row]:
    """At most `count` instances of each repository, evenly spaced through its list (0: all)."""
    if count <= 0:
        return rows
    kept: list[Row] = []
    for repo in dict.fromkeys(r["repo"] for r in rows):
        mine = [r for r in rows if r["repo"] == repo]
        step = max(1, len(mine)) / min(count, len(mine))
        kept.extend(mine[int(i * step)] for i in range(min(count, len(mine))))
    return kept


def names(text: str) -> list[str]:
    """A comma-separated list of signal names (a,b)."""
    return text.split(",")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=Path, default=DEV_SET)
    parser.add_argument("--repos", type=Path, required=True, help="dir of mirrors: owner+name/repo or owner__name")
    parser.add_argument("--work", type=Path, default=Path("/tmp/snaffle-bench/worktrees"))
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--repo-filter", default=".")
    parser.add_argument("--per-repo", type=int, default=0, help="at most N instances per repository, spread out")
    parser.add_argument("--jsonl", type=Path, help="append each instance's rankings, gold and timings here")
    parser.add_argument("--execute", action="store_true", help="also rank with the issue snippets' execution signals")
    parser.add_argument("--snippet-python", help="with --execute: the interpreter (a venv's python) running snippets")
    parser.add_argument("--cv", action="store_true", help="leave-one-repository-out fit, and an ablation per signal")
    parser.add_argument("--cache", type=Path, help="dir of per-instance signals, reused while the code is unchanged")
    parser.add_argument("--cached-only", action="store_true", help="score only the instances --cache holds")
    parser.add_argument(
        "--extend",
        type=names,
        default=[],
        help="with --cache: a stale record gets only these signals (a,b; `generic`: the hubness prior) computed "
        "anew, the rest kept (only when the code of the rest did not change); `none`: restamped as they are (after "
        "a change to the ranking code only)",
    )
    parser.add_argument("--no-baseline", dest="baseline", action="store_false", help="skip plain BM25 over files")
    parser.add_argument("--cold", type=int, default=1, help="instances per repository also indexed with no cache")
    parser.add_argument("--cold-workers", type=int, default=1, help="parse processes of the cold index (0: auto)")
    parser.add_argument("--skip", type=names, default=[], help="signals not computed for the fit (a,b)")
    parser.add_argument(
        "--new",
        type=names,
        default=[],
        help="with --cv: signals or priors (a,b) new in this change: a row of today's ranking without them (held "
        "off), neutral start, and its folds",
    )
    parser.add_argument(
        "--other-cache",
        type=Path,
        help="with --cv: another --cache of the same instances, computed by other code (say, before a change to what "
        "is a candidate): both caches' leave-one-repo-out fold weights, each scored on both",
    )
    parser.add_argument("--ablate", type=names, help="with --cv: ablation rows for these only (default: all)")
    parser.add_argument("--no-variants", dest="variants", action="store_false", help="with --cv: no [issue] rows")
    parser.add_argument(
        "--share-scales",
        type=lambda text: [float(v) for v in text.split(",")],
        default=[],
        help="with --cv: a leave-one-repo-out row with file_to_entity's grid scale (a,b: say 1,2,4,8,16) chosen "
        "inside each fold by its own training objective, and the scale each fold chose",
    )
    parser.add_argument(
        "--hold",
        type=names,
        default=[],
        help="with --cv: signals held at 0 in every fit (a,b; the packaged weights' procedure holds "
        "callee,caller,pagerank,test_callee,reach,reach_file,title_named,generic_prior)",
    )
    return parser.parse_args()


SIGNAL_MODULES = (
    "localize.py",
    "graph.py",
    "documents.py",
    "issue_text.py",
    "sbfl.py",
    "priors.py",
    "at_commit.py",
    "permalink.py",
    "referenced.py",
    "history.py",
    "generated.py",
)
"""The agentless modules whose code makes the signals (the index's are all in)."""
VARIANTS = {"strip_template": True}
"""[issue] switches whose signals every record also holds (under `variants`), so the fit compares both ways."""


@functools.cache
def fingerprint() -> str:
    """What a cached record depends on: the localizer's and the index's code, and the signal-level constants (not
    the weights, nor the shares and priors that act only when ranking, nor a switch the record holds both ways)."""
    package = Path(__file__).resolve().parents[1] / "snaffle"
    digest = hashlib.sha1()
    modules = [package / "agentless" / name for name in SIGNAL_MODULES]
    for path in sorted([*modules, *(package / "index").glob("*.py")]):
        digest.update(path.name.encode() + path.read_bytes())
    tables = tomllib.loads((package / "data" / "localize.toml").read_text(encoding="utf-8"))
    tables["tuning"] = {k: v for k, v in tables["tuning"].items() if k not in SHARES}
    tables["issue"] = {k: v for k, v in tables["issue"].items() if k not in VARIANTS}
    digest.update(json.dumps({k: v for k, v in tables.items() if k != "weights"}, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def cached(row: Row, args: argparse.Namespace) -> Row | None:
    """The instance's record from --cache, when it was computed by the same code."""
    if args.cache is None:
        return None
    path = args.cache / f"{row['instance_id']}.json"
    if not path.exists():
        return None
    record: Row = json.loads(path.read_text(encoding="utf-8"))
    if record.get("fingerprint") == fingerprint():
        return record
    print(f"stale cache: {path} was computed by other code (recomputed unless --cached-only)", file=sys.stderr)
    return None


def load(path: Path) -> list[Row]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def mirror(root: Path, repo: str) -> Path | None:
    for candidate in (root / repo.replace("/", "+") / "repo", root / repo.replace("/", "__")):
        if candidate.exists():
            return candidate
    return None


def checkout(row: Row, args: argparse.Namespace) -> Path | None:
    target: Path = args.work / str(row["instance_id"])
    if (target / ".git").exists():
        return target
    git_dir = mirror(args.repos, str(row["repo"]))
    assert git_dir is not None
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(git_dir), str(target)], check=True)
    done = subprocess.run(
        ["git", "-C", str(target), "checkout", "-q", "--detach", str(row["base_commit"])],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:  # a snapshot lacks large blobs: check out the Python sources only
        subprocess.run(["git", "-C", str(target), "sparse-checkout", "set", "--no-cone", "*.py"], check=True)
        retry = subprocess.run(
            ["git", "-C", str(target), "checkout", "-q", "--detach", str(row["base_commit"])],
            capture_output=True,
            text=True,
        )
        if retry.returncode != 0:
            print(f"skip {row['instance_id']}: {retry.stderr.strip()[:120]}", file=sys.stderr)
            return None
    return target


def gold(patch: str, index: RepoIndex) -> tuple[set[str], set[str]]:
    """Files and entity selectors the gold patch touches (non-test files only)."""
    files: set[str] = set()
    entities: set[str] = set()
    for path, lines in touched_lines(patch):
        if is_test_file(path) or not path.endswith(".py"):
            continue
        files.add(path)
        for line in lines:
            owner = innermost(index.entities(path), line)
            if owner is not None and owner.qualname:
                entities.add(owner.selector)
    return files, entities


def touched_lines(patch: str) -> Iterator[tuple[str, list[int]]]:
    """Per file, 0-based old-side lines removed or next to an insertion."""
    path, old = "", 0
    lines: list[int] = []
    for line in patch.splitlines():
        if line.startswith("--- "):
            if path:
                yield path, lines
            path, lines = line[6:] if line.startswith("--- a/") else "", []
        elif match := HUNK_RE.match(line):
            old = int(match.group(1)) - 1
        elif line.startswith("-") and not line.startswith("---"):
            lines.append(old)
            old += 1
        elif line.startswith("+") and not line.startswith("+++"):
            lines.append(max(old - 1, 0))
        elif line.startswith(" "):
            old += 1
    if path:
        yield path, lines


def measure(row: Row, args: argparse.Namespace, cold_left: dict[str, int]) -> Row | None:
    """Index (warm: the bench's cache), rank with the packaged weights, and keep every signal for the fit."""
    repo = checkout(row, args)
    if repo is None:
        return None
    cold, cold_cpu = (
        cold_seconds(repo, args.cold_workers) if cold_left.setdefault(row["repo"], args.cold) > 0 else (None, None)
    )
    cold_left[row["repo"]] -= 1
    started, started_cpu = time.monotonic(), time.process_time()
    index = RepoIndex(repo, cache_dir=args.work.parent / "index-cache")
    built_stats = index.build(paths=sources(index))  # what `snaffle localize` indexes (test files when read)
    built = time.monotonic()
    localizer = Localizer(index).prepare()  # documents from their cache (by content hash), BM25 and name tables
    indexed, prepared = time.monotonic() - started, time.monotonic() - built
    indexed_cpu = time.process_time() - started_cpu
    gold_files, gold_entities = gold(str(row["patch"]), index)
    if not gold_files:
        return None
    issue = str(row["problem_statement"])
    started, started_cpu = time.monotonic(), time.process_time()
    result = localizer.localize(issue, top=10)
    elapsed, elapsed_cpu = time.monotonic() - started, time.process_time() - started_cpu
    signals = localizer.signals(parse_issue(issue), every=True, skip=args.skip)
    variants = {
        name: signal_record(localizer.signals(parse_issue(issue, **{name: value}), every=True, skip=args.skip))
        for name, value in VARIANTS.items()
    }
    files = [p for p, _ in result.files]
    entities = [c.selector for c in result.entities]
    baseline_started = time.monotonic()
    baseline = bm25_files(index, repo, issue) if args.baseline else []
    baseline_elapsed = time.monotonic() - baseline_started
    hits = f"file@5={hit(files, gold_files, 5)} entity@10={hit(entities, gold_entities, 10)}"
    executed = execute(row, repo, index, localizer, args) if args.execute else {}
    if executed:
        hits += f" exec: entity@1={hit(executed['exec_entities'], gold_entities, 1)} +{executed['exec_seconds']:.1f}s"
    times = f"index={indexed:.1f}s (prepare {prepared:.1f}s) localize={elapsed:.2f}s"
    cold_text = f" cold={cold:.1f}s" if cold is not None else ""
    print(f"{row['instance_id']}: {hits} bm25-file@5={hit(baseline, gold_files, 5)} {times}{cold_text}", flush=True)
    record = {
        "instance_id": row["instance_id"],
        "repo": row["repo"],
        "fingerprint": fingerprint(),
        "files": files,
        "entities": entities,
        "baseline": baseline,
        "gold_files": sorted(gold_files),
        "gold_entities": sorted(gold_entities),
        "seconds": elapsed,
        "baseline_seconds": baseline_elapsed,
        "index_seconds": indexed,
        "prepare_seconds": prepared,
        "cold_seconds": cold,
        "cold_cpu_seconds": cold_cpu,
        "warm_parsed": built_stats.parsed,
        "warm_seconds": indexed + elapsed,
        "warm_cpu_seconds": indexed_cpu + elapsed_cpu,
        **signal_record(signals),
        "variants": variants,
        **executed,
    }
    if args.cache is not None:
        args.cache.mkdir(parents=True, exist_ok=True)
        (args.cache / f"{row['instance_id']}.json").write_text(json.dumps(record), encoding="utf-8")
    return record


def signal_record(signals: Signals) -> Row:
    """Every scorer's values by selector and path, and the kinds the priors scale."""
    return {
        "entity_signals": {n: {e.selector: round(v, 6) for e, v in s.items()} for n, s in signals.entity.items()},
        "file_signals": {n: {p: round(v, 6) for p, v in s.items()} for n, s in signals.file.items()},
        "kinds": {e.selector: e.kind for s in signals.entity.values() for e in s if e.kind in KIND_PRIORS},
        "file_priors": {"generic": {p: round(v, 6) for p, v in signals.generic.items()}},
    }


def extend(row: Row, args: argparse.Namespace) -> Row | None:
    """A stale cached record with the `--extend` signals computed on the instance's checkout (the others kept:
    they must be what today's code computes), stored under today's fingerprint; None when there is none.
    `--extend none` computes nothing: the record is restamped as it is (after a change to the ranking code only)."""
    path = args.cache / f"{row['instance_id']}.json" if args.cache is not None else None
    if path is None or not path.exists():
        return None
    started = time.monotonic()
    record: Row = json.loads(path.read_text(encoding="utf-8"))
    if args.extend == ["none"]:
        record["fingerprint"] = fingerprint()
        path.write_text(json.dumps(record), encoding="utf-8")
        return record
    if (repo := checkout(row, args)) is None:
        return None
    index = RepoIndex(repo, cache_dir=args.work.parent / "index-cache")
    index.build(paths=sources(index))
    localizer = Localizer(index).prepare()
    skip = [n for n in (*ENTITY_SIGNALS, *FILE_SIGNALS, *FILE_PRIORS) if n not in args.extend]
    issue = str(row["problem_statement"])
    _merge(record, signal_record(localizer.signals(parse_issue(issue), every=True, skip=skip)), args.extend)
    for name, value in VARIANTS.items():
        found = localizer.signals(parse_issue(issue, **{name: value}), every=True, skip=skip)
        _merge(record["variants"][name], signal_record(found), args.extend)
    record["fingerprint"] = fingerprint()
    path.write_text(json.dumps(record), encoding="utf-8")
    print(
        f"{row['instance_id']}: extended with {','.join(args.extend)} in {time.monotonic() - started:.1f}s", flush=True
    )
    return record


def _merge(record: Row, found: Row, names: Iterable[str]) -> None:
    """`names`' values from `found` into `record`, in place (each in its part: entity, file, file prior)."""
    for part in ("entity_signals", "file_signals", "file_priors"):
        for name in (n for n in names if n in found[part]):
            record.setdefault(part, {})[name] = found[part][name]
    record["kinds"] = {**found["kinds"], **record["kinds"]}


def cold_seconds(repo: Path, workers: int) -> tuple[float, float]:
    """Index and prepare with an empty cache (a repository never seen): the cold cost, wall and CPU seconds. The
    parse runs in this process (`cold_workers` 1, the default) so that the CPU seconds count all of it: the parse
    workers of a pool are the forkserver's children, whose CPU time this process never sees."""
    started, started_cpu = time.monotonic(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="snaffle-cold-") as scratch:
        index = RepoIndex(repo, cache_dir=Path(scratch))
        index.build(workers=workers, paths=sources(index))
        Localizer(index).prepare()
    return time.monotonic() - started, time.process_time() - started_cpu


def sources(index: RepoIndex) -> list[str]:
    """The files `Localizer.prepare` indexes: every one but the test files and the generated ones."""
    return ranked_paths(index, Weights.load().generated)


def snippet_sandbox(scratch: Path, python: str | None) -> Sandbox:
    """The sandbox, with another interpreter (and its prefixes, read-only) for the snippets when one is given."""
    if not python:
        return Sandbox.create(scratch)
    prefixes = {Path(python).parent.parent, Path(python).resolve().parent.parent}
    return Sandbox.create(scratch, python=python, python_paths=tuple(sorted(p.resolve() for p in prefixes)))


def execute(row: Row, repo: Path, index: RepoIndex, localizer: Localizer, args: argparse.Namespace) -> Row:
    """The issue's snippets run on the checkout (sandboxed), and the ranking with their signals."""
    sandbox = snippet_sandbox(args.work.parent / "snippet-sandbox", args.snippet_python)
    started = time.monotonic()
    found = facts.gather(str(row["problem_statement"]), repo, sandbox)
    signals = {**facts.signals(found, index), "origin": origin.scores(origin.origins(found, index, repo, sandbox))}
    result = localizer.localize(str(row["problem_statement"]), top=10, execution=signals)
    return {
        "exec_files": [p for p, _ in result.files],
        "exec_entities": [c.selector for c in result.entities],
        "exec_seconds": time.monotonic() - started,
        "snippets": len(found.runs),
        "reproducing": len(found.reproducing),
        "raised_entities": len(signals["raised"]),
        "executed_entities": len(signals["executed"]),
        "origin_entities": len(signals["origin"]),
        "execution_signals": {n: {e.selector: round(v, 6) for e, v in s.items()} for n, s in signals.items()},
    }


def bm25_files(index: RepoIndex, repo: Path, issue: str) -> list[str]:
    """The baseline: BM25 over whole non-test Python files (path + content)."""
    paths = [p for p in index.files() if not is_test_file(p)]
    corpus = [tokenize(p + " " + (repo / p).read_text(encoding="utf-8", errors="replace")) or ["_"] for p in paths]
    model = bm25s.BM25()
    model.index(corpus, show_progress=False)
    scores = np.asarray(model.get_scores(tokenize(issue)))
    return [paths[i] for i in np.argsort(-scores)[:10]]


def hit(ranked: list[str], gold_set: Iterable[str], k: int) -> int:
    gold_set = set(gold_set)
    return int(bool(gold_set) and bool(set(ranked[:k]) & gold_set))


def print_table(results: list[Row]) -> None:
    if not results:
        print("no instance measured")
        return

    def rate(key: str, gold_key: str, k: int) -> float:
        graded = [r for r in results if r[gold_key]]
        return 100.0 * sum(hit(r[key], r[gold_key], k) for r in graded) / max(1, len(graded))

    def median(key: str) -> float:
        return statistics.median(float(r[key]) for r in results)

    print(f"\n{len(results)} instances; baseline = plain BM25 over files, same run\n")
    print("| metric | snaffle localize | BM25 files | ratio |\n|---|---|---|---|")
    for k in (1, 3, 5):
        ours, base = rate("files", "gold_files", k), rate("baseline", "gold_files", k)
        print(f"| file hit@{k} | {ours:.1f}% | {base:.1f}% | {ours / base if base else float('nan'):.2f} |")
    for k in (1, 5, 10):
        print(f"| entity hit@{k} | {rate('entities', 'gold_entities', k):.1f}% | - | - |")
    ours_s, base_s = median("seconds"), median("baseline_seconds")
    ratio = f"{ours_s / base_s:.2f}" if base_s > 1e-3 else "-"
    print(f"| seconds/instance (median, after indexing) | {ours_s:.2f} | {base_s:.2f} | {ratio} |")
    print(f"| seconds/instance (max, after indexing) | {max(float(r['seconds']) for r in results):.2f} | - | - |")
    print(f"| index seconds/instance (median, incl. prepare) | {median('index_seconds'):.2f} | - | - |")
    print(f"| prepare seconds/instance (median, documents cached) | {median('prepare_seconds'):.2f} | - | - |")
    cold = [float(r["cold_seconds"]) for r in results if r.get("cold_seconds") is not None]
    if cold:
        print(
            f"| cold index + prepare seconds (median of {len(cold)}, max) | {statistics.median(cold):.2f}, "
            f"{max(cold):.2f} | - | - |"
        )
    warm = [float(r["index_seconds"]) + float(r["seconds"]) for r in results]
    print(f"| warm seconds/instance (median: index from cache + localize) | {statistics.median(warm):.2f} | - | - |")
    if "exec_entities" in results[0]:
        print_execution(results, rate)


SPEED_TARGETS = {"warm": 1.5, "cold": 15.0}
"""Issue 17's targets, wall seconds: a new worktree of a repository seen before (median), a cold sympy-sized one."""
SPEED_HEADER = (
    "| repository | n warm | new files parsed (median / p90) | warm wall median / p90 | warm CPU median / p90 "
    "| n cold | cold wall | cold CPU |"
)


def print_speed(results: list[Row]) -> None:
    """Per repository: cold and warm fresh-worktree seconds, wall and CPU, median and p90, beside the targets. The
    first instance of a repository is left out of the warm columns: the bench's cache had not seen it before."""
    if not results or "warm_cpu_seconds" not in results[0]:
        return
    firsts = {id(next(r for r in results if r["repo"] == repo)) for repo in {r["repo"] for r in results}}
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"\nspeed (load average now {load}; targets: warm median <= {SPEED_TARGETS['warm']} s wall, cold <= ")
    print(f"{SPEED_TARGETS['cold']} s wall for a sympy-sized repository)\n")
    print(SPEED_HEADER + "\n" + "|---" * SPEED_HEADER.count(" | ") + "|---|")
    for repo in [*dict.fromkeys(r["repo"] for r in results), "all"]:
        mine = [r for r in results if repo in ("all", r["repo"])]
        cold = [r for r in mine if r.get("cold_seconds") is not None]
        warm = [r for r in mine if id(r) not in firsts]
        cells = [str(len(warm)), _spread(warm, "warm_parsed"), _spread(warm, "warm_seconds")]
        cells += [_spread(warm, "warm_cpu_seconds"), str(len(cold))]
        cells += [_spread(cold, "cold_seconds"), _spread(cold, "cold_cpu_seconds")]
        print(f"| {repo} | " + " | ".join(cells) + " |")


def _spread(rows: list[Row], key: str) -> str:
    """`median / p90` of one column (the nearest-rank p90), or - when no row has it."""
    values = sorted(float(r[key]) for r in rows if r.get(key) is not None)
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} / {values[min(len(values) - 1, int(0.9 * len(values)))]:.2f}"


def localized_hits(record: Row) -> tuple[int, ...]:
    """The hits of the ranking `Localizer.localize` returned, in the order of `METRICS`."""
    ranked = "exec_" if "execution_signals" in record else ""  # signals with the execution ones: their ranking
    files, entities = record[f"{ranked}files"], record[f"{ranked}entities"]
    gold_files, gold_entities = record["gold_files"], record["gold_entities"]
    return (*(hit(files, gold_files, k) for k in (1, 3, 5)), *(hit(entities, gold_entities, k) for k in (1, 5, 10)))


def print_cv(results: list[Row], args: argparse.Namespace) -> None:
    """In-sample and leave-one-repository-out figures (single start and several starts), today's without the
    `--new` signals, each [issue] variant's, the folds and their spread, then each signal's ablation (refit without
    it, single start); each row printed as soon as it is measured. The leave-one-out fits start from neutral and
    seeded random weights only: the packaged ones were tuned on every repository."""
    cases = [instance(r, is_peripheral) for r in results]
    packaged = start(Weights.load())
    agree = sum(hits(c, packaged) == localized_hits(r) for c, r in zip(cases, results, strict=True))
    print(f"\nthe matrix ranking agrees with Localizer.localize on every metric for {agree} of {len(cases)} instances")
    held = tuple(args.hold)
    initial = {**neutral(packaged), **dict.fromkeys(held, 0.0)}
    search = shortlist(cases, probes(initial))
    print(f"\n| weights ({len(cases)} instances) | {' | '.join(METRICS)} |\n" + "|---" * (len(METRICS) + 1) + "|")
    print_row("packaged, in-sample (not fitted)", rates(cases, packaged))
    print_row("neutral, no fit", rates(cases, initial))
    single = leave_one_repo_out(cases, initial, held, search=search, seeds=0)
    print_row("**leave-one-repo-out, neutral start** (the packaged weights' procedure)", single["rates"])
    full = leave_one_repo_out(cases, initial, held, search=search)
    print_row(f"leave-one-repo-out, {1 + RANDOM_STARTS} starts", full["rates"])
    if args.share_scales:
        nested = nested_scale(cases, initial, args.share_scales, held, search=search)
        chosen = Counter(nested["chosen"].values())
        picked = ", ".join(f"{scale:g} in {count}" for scale, count in sorted(chosen.items()))
        print_row(
            f"leave-one-repo-out, file_to_entity's scale chosen in each fold (folds chose {picked})", nested["rates"]
        )
    today = new_rows(cases, initial, search, args.new, held)
    for name, measured in print_variants(results, initial, held) if args.variants else []:
        print_row(name, measured)
    fitted = fit(search, initial, held, seeds=0)
    print_row("fitted on all from the neutral start, in-sample", rates(cases, fitted))
    if args.other_cache:
        print_cross(results, cases, single, initial, held, args.other_cache)
    print_folds(cases, single)
    if today is not None:
        print(f"\ntoday's (without {', '.join(args.new)}), by held-out repository:")
        print_folds(cases, today)
    print_ablations(cases, initial, single, search, args.ablate, held)
    print("\nfitted on all instances (judge by the leave-one-repo-out rows above):")
    print("\n".join(f"{name} = {value:g}" for name, value in fitted.items()))


def print_cross(
    results: list[Row], cases: list[Any], single: Row, initial: dict[str, float], held: tuple[str, ...], other: Path
) -> None:
    """A change that is not a weight (what is a candidate, how a file is read), judged apart from the fit's own
    variance: the neutral-start fold weights of this cache and of `other` (the same instances' signals computed by
    other code) each scored on both."""
    records = [other / f"{r['instance_id']}.json" for r in results]
    missing = [p.stem for p in records if not p.exists()]
    if missing:
        print(f"\n--other-cache lacks {len(missing)} of these instances (e.g. {missing[0]}): no cross rows")
        return
    theirs = [instance(json.loads(p.read_text(encoding="utf-8")), is_peripheral) for p in records]
    their_folds = leave_one_repo_out(theirs, initial, held, search=shortlist(theirs, probes(initial)), seeds=0)
    for fitted_on, folds in (("this cache", single), ("--other-cache", their_folds)):
        for scored_on, scored in (("this cache", cases), ("--other-cache", theirs)):
            measured = score_folds(scored, folds["fitted"])
            print_row(f"fold weights fitted on {fitted_on}, scored on {scored_on}", measured)


def print_row(name: str, measured: dict[str, float]) -> None:
    print(f"| {name} | " + " | ".join(f"{measured[m]:.1f}%" for m in METRICS) + " |", flush=True)


def new_rows(
    cases: list[Any], initial: dict[str, float], search: list[Any], new: list[str], held: tuple[str, ...] = ()
) -> Row | None:
    """Leave-one-repo-out (neutral start) with the `new` signals and priors held at their off value: today's
    ranking, judged in the same run as the change (printed; the run returned for its folds)."""
    if not new:
        return None
    off = {n: PRIORS_OFF.get(n, 0.0) for n in new}
    today = leave_one_repo_out(cases, {**initial, **off}, frozen=(*new, *held), search=search, seeds=0)
    print_row(f"today's signals (without {', '.join(new)}), neutral start", today["rates"])
    return today


def print_variants(
    results: list[Row], initial: dict[str, float], held: tuple[str, ...] = ()
) -> list[tuple[str, dict[str, float]]]:
    """Leave-one-repo-out with each [issue] switch of `VARIANTS` on (the records hold its signals)."""
    rows = []
    for variant in (v for v in VARIANTS if all(v in r.get("variants", {}) for r in results)):
        cases = [instance(r, is_peripheral, variant) for r in results]
        search = shortlist(cases, probes(initial))
        rows.append(
            (
                f"{variant} on: leave-one-repo-out, neutral start",
                leave_one_repo_out(cases, initial, held, search=search, seeds=0)["rates"],
            )
        )
        rows.append(
            (
                f"{variant} on: leave-one-repo-out, {1 + RANDOM_STARTS} starts",
                leave_one_repo_out(cases, initial, held, search=search)["rates"],
            )
        )
    return rows


def print_folds(cases: list[Any], full: Row) -> None:
    """Each held-out repository's figures, the spread over the folds, and how far the fitted weights move."""
    print("\n| held-out repo | n | file@5 | entity@10 | entity@1 |\n|---|---|---|---|---|")
    for repo, measured in full["per_repo"].items():
        n = sum(c.repo == repo for c in cases)
        figures = " | ".join(f"{measured[m]:.1f}%" for m in ("file@5", "entity@10", "entity@1"))
        print(f"| {repo} | {n} | {figures} |")
    spread = " | ".join(
        f"{full['spread'][m][0]:.1f}..{full['spread'][m][1]:.1f}" for m in ("file@5", "entity@10", "entity@1")
    )
    print(f"| spread over folds (min..max) | | {spread} |")
    folds = list(full["fitted"].values())
    moved = ", ".join(f"{n} {min(f[n] for f in folds):g}..{max(f[n] for f in folds):g}" for n in folds[0])
    print(f"\nfitted weights across folds (min..max): {moved}")


def print_ablations(
    cases: list[Any],
    initial: dict[str, float],
    base_run: Row,
    search: list[Any],
    only: list[str] | None = None,
    held: tuple[str, ...] = (),
) -> None:
    """Per signal, leave-one-repo-out (neutral start) with it held at 0 (a prior: at its off value), against the
    same fit with it; a signal no fold turned on is not refit."""
    header = ("without (refit, leave-one-repo-out)", "file@5", "entity@10", "entity@1", "d file@5", "d entity@10")
    print("\n| " + " | ".join((*header, "d entity@1")) + " |\n" + "|---" * 7 + "|")
    base = base_run["rates"]
    unmeasured = set(UNFIT) | set(absent(cases))
    off = {**{s: 0.0 for s in (*ENTITY_SIGNALS, *FILE_SIGNALS) if s not in unmeasured}, **PRIORS_OFF}
    for signal, value in ((s, v) for s, v in off.items() if only is None or s in only):
        if all(fold[signal] == value for fold in base_run["fitted"].values()):
            print(f"| {signal} | (off in every fold) | | | +0.0 | +0.0 | +0.0 |")
            continue
        frozen = (signal, *held)
        ablated = leave_one_repo_out(cases, {**initial, signal: value}, frozen=frozen, search=search, seeds=0)
        deltas = " | ".join(f"{ablated['rates'][m] - base[m]:+.1f}" for m in ("file@5", "entity@10", "entity@1"))
        figures = " | ".join(f"{ablated['rates'][m]:.1f}%" for m in ("file@5", "entity@10", "entity@1"))
        print(f"| {signal} | {figures} | {deltas} |", flush=True)


def print_execution(results: list[Row], rate: Any) -> None:
    """With vs without the execution signals, on all instances and on those whose snippets ran some repo code."""
    ran = [r for r in results if r["raised_entities"] or r["executed_entities"]]
    print(f"\nexecution signals: {sum(r['snippets'] > 0 for r in results)} instances with a runnable snippet, ")
    print(f"{len(ran)} ran repo code, {sum(r['reproducing'] > 0 for r in results)} reproduced (raised/wrong value)\n")
    print("| metric | without | with execution | without (ran) | with (ran) |\n|---|---|---|---|---|")
    for key, gold_key, k in (
        ("files", "gold_files", 5),
        ("entities", "gold_entities", 1),
        ("entities", "gold_entities", 5),
    ):
        subset = [rate(f, gold_key, k) for f in (key, f"exec_{key}")]
        cells = [*subset, *(_rate(ran, f, gold_key, k) for f in (key, f"exec_{key}"))]
        print(
            f"| {key[:-1] if key == 'files' else 'entity'} hit@{k} | " + " | ".join(f"{c:.1f}%" for c in cells) + " |"
        )
    seconds = sorted(float(r["exec_seconds"]) for r in results)
    print(
        f"| snippet seconds/instance (median / mean / max) | {statistics.median(seconds):.2f} / "
        f"{statistics.mean(seconds):.2f} / {seconds[-1]:.2f} | | | |"
    )


def _rate(results: list[Row], key: str, gold_key: str, k: int) -> float:
    graded = [r for r in results if r[gold_key]]
    return 100.0 * sum(hit(r[key], r[gold_key], k) for r in graded) / max(1, len(graded))


if __name__ == "__main__":
    raise SystemExit(main())
