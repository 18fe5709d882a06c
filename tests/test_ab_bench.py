"""bench/ab_bench.py without a model: the task data loads and is well formed, plants are exact, the table prints."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from snaffle import data
from snaffle.agentless.config import EXECUTION_SWITCHES, PipelineConfig
from snaffle.types import Limits

BENCH = Path(__file__).resolve().parents[1] / "bench" / "ab_bench.py"


def load_bench() -> ModuleType:
    if str(BENCH.parent) not in sys.path:
        sys.path.insert(0, str(BENCH.parent))  # as when run as a script: its siblings import by name
    spec = importlib.util.spec_from_file_location("ab_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ab_bench"] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


ab = load_bench()


def test_task_set_is_large_and_well_formed() -> None:
    tasks = ab.load_tasks()
    assert len(tasks) >= 12
    assert len({t.package.name for t in tasks}) >= 4
    for task in tasks:
        assert task.search != task.replace
        assert "def test_" in task.test
        assert task.package.version.count(".") >= 1
        assert task.file.endswith(".py")
        # the issue is a user's report: it must not quote the planted line or its fix
        for planted in (task.search.strip(), task.replace.strip()):
            assert not planted or planted not in task.issue


def test_loader_rejects_unknown_package(tmp_path: Path) -> None:
    data = tmp_path / "tasks.toml"
    data.write_text(
        '[packages.a]\nversion = "1.0"\n\n[[tasks]]\nid = "t"\npackage = "b"\nfile = "x.py"\nsearch = "1"\n'
        'replace = "2"\nissue = "i"\ntest = "def test_x(): pass"\n'
    )
    with pytest.raises(ValueError, match="unknown package"):
        ab.load_tasks(data)


def test_a_packages_test_requirements_are_read_and_only_they_call_for_an_environment(tmp_path: Path) -> None:
    funcy = next(t.package for t in ab.load_tasks() if t.package.name == "funcy")
    assert funcy.test_requires == ("whatever==0.7",), "its tests import `whatever`: without it they never collect"
    plain = next(t.package for t in ab.load_tasks() if t.package.name == "toolz")
    assert plain.test_requires == ()
    assert ab.test_python(plain, tmp_path) is None and not (tmp_path / "envs").exists()


@pytest.mark.parametrize(("text", "count"), [("a = 1\n", 0), ("x = 1\nx = 1\n", 2)])
def test_plant_needs_exactly_one_match(text: str, count: int) -> None:
    with pytest.raises(ValueError, match=f"occurs {count} times"):
        ab.plant(text, "x = 1", "x = 2", "t")


def test_plant_replaces_the_one_match() -> None:
    assert ab.plant("x = 1\ny = 1\n", "x = 1", "x = 2", "t") == "x = 2\ny = 1\n"


def fake_row(variant: str, task: str, resolved: bool, output: int, wall: float, **extra: Any) -> dict[str, Any]:
    row = {
        "kind": "run",
        "variant": variant,
        "arm": variant,
        "task": task,
        "status": "validated",
        "resolved": resolved,
        "prompt_tokens": 10 * output,
        "output_tokens": output,
        "calls": 2,
        "wall_s": wall,
        "samples": 0,
        "applied_samples": 0,
    }
    return {**row, **extra}


def test_table_counts_resolves_and_ratios_against_the_baseline() -> None:
    speed = {
        "kind": "speed",
        "model": "m",
        "prompt_tokens": 1000,
        "prefill_s": 25.0,
        "prefill_tps": 40.0,
        "output_tokens": 96,
        "decode_s": 8.0,
        "decode_tps": 12.0,
    }
    rows = [
        speed,
        fake_row("minimal", "t1", True, 100, 10.0),
        fake_row("minimal", "t2", False, 100, 30.0),
        fake_row("agentless-oneshot", "t1", True, 50, 5.0, samples=3, applied_samples=2),
        fake_row("agentless-oneshot", "t2", False, 10, 5.0, samples=3, applied_samples=1),
        fake_row("agentless-oneshot", "t2", True, 50, 5.0, samples=3, applied_samples=3),  # a rerun replaces
    ]
    text = ab.table(rows, "minimal", ["agentless-oneshot", "minimal"])
    lines = text.splitlines()
    oneshot = next(line for line in lines if line.startswith("agentless-oneshot "))
    minimal = next(line for line in lines if line.startswith("minimal "))
    assert "2/2" in oneshot and "1/2" in minimal
    assert "83%" in oneshot  # 5 of 6 samples produced an applicable edit
    assert oneshot.split("|")[1].split() == ["2.00", "0.50", "0.50", "1.00", "0.25"]
    assert "prefill 40.0 tok/s" in text and "decode 12.0 tok/s" in text
    grid = ab.per_task(rows, ["agentless-oneshot", "minimal"])
    assert "R 50t 5s" in grid and ". 100t 30s" in grid


def test_variants_for_ablation_pairs_each_arm(tmp_path: Path) -> None:
    args = ab.parse_args(["--ablate", "lint_gate", "--arms", "structured,agentless"])
    variants, baseline = ab.variants_for(args)
    assert [v.label for v in variants] == [
        "structured",
        "structured-no-lint_gate",
        "agentless",
        "agentless-no-lint_gate",
    ]
    assert baseline == "structured"
    assert not variants[1].mechanisms.lint_gate and variants[0].mechanisms.lint_gate
    formats, base = ab.variants_for(ab.parse_args(["--edit-formats"]))
    assert [v.pipeline.edit_format for v in formats] == ["rewrite", "search_replace", "auto"]
    assert all(v.pipeline.one_shot for v in formats) and base == "oneshot-rewrite"
    named, base = ab.variants_for(ab.parse_args(["--edit-formats", "rewrite,line_diff"]))
    assert [v.label for v in named] == ["oneshot-rewrite", "oneshot-line_diff"] and base == "oneshot-rewrite"


def test_given_test_is_committed_next_to_the_import_root(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "src" / "pkg" / "__init__.py").write_text("X = 1\n")
    ab.git(repo, "init", "-q")
    ab.git(repo, "add", "-A")
    ab.git(repo, "commit", "-q", "-m", "base")
    task = next(t for t in ab.load_tasks() if t.package.pythonpath == "src")
    node = ab.give_test(task, repo)
    assert node == "src/test_bench_given.py"
    assert (repo / node).read_text() == task.test
    assert ab.git(repo, "status", "--porcelain") == ""  # committed: the arm's patch never contains it
    flat = next(t for t in ab.load_tasks() if t.package.pythonpath == "")
    assert ab.give_test(flat, repo) == "test_bench_given.py"


def test_without_tests_commits_away_every_test_file_and_keeps_the_source(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for name in (
        "pkg/__init__.py",
        "pkg/core.py",
        "tests/test_core.py",
        "tests/data/x.txt",
        "conftest.py",
        "pkg/a_test.py",
    ):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("X = 1\n")
    ab.git(repo, "init", "-q")
    ab.git(repo, "add", "-A")
    ab.git(repo, "commit", "-q", "-m", "base")
    removed = ab.drop_tests(repo)
    assert sorted(removed) == ["conftest.py", "pkg/a_test.py", "tests/data/x.txt", "tests/test_core.py"]
    assert sorted(ab.git(repo, "ls-files").split()) == ["pkg/__init__.py", "pkg/core.py"]
    assert ab.git(repo, "status", "--porcelain") == "", "committed: the run's patch never holds the removal"
    assert ab.drop_tests(repo) == [], "nothing left to remove, no empty commit"
    labelled, _ = ab.suffixed(*ab.variants_for(ab.parse_args(["--arms", "agentless-oneshot"])), "+without-tests")
    assert ab.parse_args(["--without-tests"]).without_tests and labelled[0].label.endswith("+without-tests")


def test_prompt_and_given_test_variants_are_labelled(tmp_path: Path) -> None:
    args = ab.parse_args(["--arms", "agentless-oneshot,minimal", "--given-test"])
    variants, baseline = ab.variants_for(args)
    labelled, base = ab.suffixed(variants, baseline, "+given-test")
    assert [v.label for v in labelled] == ["agentless-oneshot+given-test", "minimal+given-test"]
    assert base == "minimal+given-test"
    with pytest.raises(SystemExit, match="unknown mechanism nope"):
        ab.variants_for(ab.parse_args(["--ablate", "lint_gate,nope"]))
    every, _ = ab.variants_for(ab.parse_args(["--ablate", "all", "--arms", "structured"]))
    assert len(every) == 1 + len(ab.MECHANISMS)


def test_the_test_split_is_twelve_tasks_in_four_packages_the_dev_split_lacks() -> None:
    tasks = ab.load_tasks()
    dev = [t for t in tasks if t.split == "dev"]
    test = [t for t in tasks if t.split == "test"]
    assert len(dev) == 12 and len(test) == 12
    test_packages = {t.package.name for t in test}
    assert len(test_packages) == 4 and not test_packages & {t.package.name for t in dev}
    assert ab.select_tasks(tasks, "", 0, "test") == test and ab.select_tasks(tasks, "", 0, "all") == tasks
    assert any(">>>" in t.issue for t in test) and any("Traceback" in t.issue for t in test)
    assert any(">>>" not in t.issue and "Traceback" not in t.issue for t in test)  # prose only


def test_loader_rejects_an_unknown_split(tmp_path: Path) -> None:
    data = tmp_path / "tasks.toml"
    data.write_text(
        '[packages.a]\nversion = "1.0"\n\n[[tasks]]\nid = "t"\nsplit = "train"\npackage = "a"\nfile = "x.py"\n'
        'search = "1"\nreplace = "2"\nissue = "i"\ntest = "def test_x(): pass"\n'
    )
    with pytest.raises(ValueError, match="split 'train'"):
        ab.load_tasks(data)


def test_table_says_per_exit_status_how_many_patches_were_right_and_tokens_per_second() -> None:
    rows = [
        fake_row("a", "t1", True, 100, 10.0, model_s=10.0),
        fake_row("a", "t2", False, 100, 10.0, model_s=10.0),
        fake_row("a", "t3", False, 50, 10.0, status="submitted", model_s=5.0),
        fake_row("a", "t4", False, 0, 1.0, status="no_valid_patch"),
    ]
    text = ab.table(rows, "a")
    assert "  a: no_valid_patch 1 (0 right), submitted 1 (0 right), validated 2 (1 right)" in text
    assert next(line for line in text.splitlines() if line.startswith("a ")).split("|")[0].split()[-1] == "10.0"


def test_table_says_each_variants_model_seconds_and_the_load_its_runs_saw() -> None:
    """Time ratios are only as fair as the machine's load: a variant replayed later on a quieter machine looks
    faster. Each row records the load average; the table prints its median beside the model seconds."""
    rows = [
        fake_row("a", "t1", True, 100, 10.0, model_s=10.0, load=3.5),
        fake_row("a", "t2", False, 100, 10.0, model_s=20.0, load=2.5),
        fake_row("a", "t3", False, 100, 10.0, model_s=5.0, load=0.5),
        fake_row("b", "t1", True, 100, 10.0, model_s=7.0),
    ]
    text = ab.table(rows, "a")
    assert "  a: 35 model s (replayed calls at their recorded seconds), load average median 2.50" in text
    assert "  b: 7 model s (replayed calls at their recorded seconds), load average not recorded" in text


def test_execution_variants_compare_today_with_every_switch_and_each_ablation() -> None:
    variants, baseline = ab.variants_for(ab.parse_args(["--execution", "--arms", "agentless-oneshot"]))
    labels = [v.label for v in variants]
    assert baseline == labels[0] == "agentless-oneshot" and labels[1] == "agentless-oneshot+exec"
    assert labels[2:] == [f"agentless-oneshot+exec-no-{name}" for name in ab.EXECUTION_SWITCHES]
    today, new = variants[0].pipeline, variants[1].pipeline
    assert not any(getattr(today, name) for name in ab.EXECUTION_SWITCHES)
    assert all(getattr(new, name) for name in ab.EXECUTION_SWITCHES) and today.one_shot and new.one_shot
    off = variants[2].pipeline
    assert not getattr(off, ab.EXECUTION_SWITCHES[0]) and all(getattr(off, n) for n in ab.EXECUTION_SWITCHES[1:])


def test_interleaved_runs_take_every_variant_per_task_and_the_splits_in_turn() -> None:
    tasks = ab.load_tasks()
    variants = [ab.arm_variant("agentless-oneshot"), ab.arm_variant("minimal")]
    order = ab.run_order(variants, tasks, interleave=True)
    assert len(order) == 2 * len(tasks) and [v.label for v, _ in order[:2]] == ["agentless-oneshot", "minimal"]
    assert [t.split for _, t in order[::2]][:4] == ["dev", "test", "dev", "test"]
    assert ab.run_order(variants, tasks, interleave=False)[len(tasks)][0].label == "minimal"
    args = ab.parse_args(["--execution", "--variants", r"\+exec$"])
    assert args.variants and args.interleave is False


TINY_SOURCE = "def add(a, b):\n    return a + b\n"
TINY_TEST = "from tiny import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def tiny_task(cache: Path) -> Any:
    """A planted-bug task over a package sdist the test builds into the bench's download cache (no network)."""
    import io
    import tarfile

    dest = cache / "dists" / "tiny-1.0"
    dest.mkdir(parents=True)
    with tarfile.open(dest / "tiny-1.0.tar.gz", "w:gz") as sdist:
        for name, text in {"tiny/__init__.py": TINY_SOURCE, "tests/test_tiny.py": TINY_TEST}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"tiny-1.0/{name}")
            info.size = len(data)
            sdist.addfile(info, io.BytesIO(data))
    issue = "add() subtracts: add(2, 3) gives -1, expected 5.\n"
    return ab.BenchTask("tiny-add", ab.Package("tiny", "1.0"), "tiny/__init__.py", "a + b", "a - b", issue, TINY_TEST)


@pytest.mark.parametrize(("answer", "resolved"), [("return a + b", True), ("return b - a", False)])
def test_a_run_is_judged_on_the_patch_it_left(scripted: Any, tmp_path: Path, answer: str, resolved: bool) -> None:
    """snaffle's arms leave the user's tree as it was and their answer in patch.diff: the judge must see the patch."""

    reproduction = "```python\nfrom tiny import add\n\n\ndef test_sums():\n    assert add(2, 3) == 5\n```"
    rewrite = f"```python\ndef add(a, b):\n    {answer}\n```"
    server = scripted([{"content": reproduction}] + [{"content": rewrite}] * 5)
    task = tiny_task(tmp_path / "cache")
    bench = ab.Bench(server.base_url, "scripted", Limits(max_turns=12), tmp_path / "work", tmp_path / "cache")
    row = ab.run_one(bench, ab.arm_variant(ab.ONE_SHOT), task)
    assert row["failed_before"] and row["resolved"] is resolved, row
    if resolved:  # the user's copy of the repo was left as it was; the answer is the run's patch.diff
        kept = tmp_path / "work" / ab.ONE_SHOT / "tiny-add"
        assert "a - b" in (kept / "repo" / "tiny" / "__init__.py").read_text()
        assert f"+    {answer}" in (kept / "run" / "patch.diff").read_text()


def test_candidate_variants_are_today_the_new_default_and_one_row_per_group_left_out() -> None:
    variants = {v.label: v.pipeline for v in ab.candidate_variants(ab.ONE_SHOT)}
    today, new = variants.pop(ab.ONE_SHOT), variants.pop(f"{ab.ONE_SHOT}+new")
    left_out = [f"{ab.ONE_SHOT}+new-no-{g}" for g in ab.CANDIDATE_GROUPS if g not in ab.EXTRA_GROUPS]
    assert sorted(variants) == sorted(left_out + [f"{ab.ONE_SHOT}+new+{g}" for g in ab.EXTRA_GROUPS])
    assert not today.feedback and not today.one_entity and not today.switches.snippet_test
    assert not new.feedback and new.one_entity and new.switches.snippet_test and new.snippets.infer_imports
    no_reading = variants[f"{ab.ONE_SHOT}+new-no-reading"]
    assert not no_reading.snippets.infer_imports and no_reading.one_entity and no_reading.switches.snippet_test
    assert variants[f"{ab.ONE_SHOT}+new+feedback"] == replace(new, feedback=True)


def test_on_variants_are_today_each_group_on_and_all_together() -> None:
    variants = {v.label: v.pipeline for v in ab.on_variants(ab.ONE_SHOT, "early_stop, extra_samples")}
    today = PipelineConfig(one_shot=True)
    assert list(variants) == [ab.ONE_SHOT] + [
        f"{ab.ONE_SHOT}{s}" for s in ("+early_stop", "+extra_samples", "+early_stop+extra_samples")
    ]
    assert variants[ab.ONE_SHOT] == today
    from snaffle.agentless.facts import snippet_limits

    read = replace(today, snippets=snippet_limits())  # the groups spell out the packaged [snippets] reading
    assert variants[f"{ab.ONE_SHOT}+early_stop"] == replace(read, early_stop=True)
    assert variants[f"{ab.ONE_SHOT}+early_stop+extra_samples"] == replace(read, early_stop=True, extra_samples=True)
    with pytest.raises(SystemExit, match="--on: unknown group early; one of: early_stop"):
        ab.on_variants(ab.ONE_SHOT, "early")
    existing = {v.label: v.pipeline for v in ab.on_variants(ab.ONE_SHOT, "failing_existing")}
    on = existing[f"{ab.ONE_SHOT}+failing_existing"]
    assert on == replace(read, switches=replace(today.switches, failing_existing=True))
    assert on.uses("failing_existing")


def test_since_issue_compares_issue_16s_baseline_with_every_switch_off_to_todays_default() -> None:
    args = ab.parse_args(["--since-issue", "--arms", ab.ONE_SHOT])
    variants, baseline = ab.variants_for(args)
    assert [v.label for v in variants] == [f"{ab.ONE_SHOT}@issue16", ab.ONE_SHOT] and baseline == variants[0].label
    then, today = variants[0].pipeline, variants[1].pipeline
    assert today == PipelineConfig(one_shot=True)
    assert not any(getattr(then, name) for name in (*EXECUTION_SWITCHES, "early_stop", "extra_samples", "mutation"))
    assert not then.docstrings_apart and not any(vars(then.switches).values())
    assert (then.samples, then.top_k, then.reproduce) == (today.samples, today.top_k, today.reproduce)
    assert not then.uses("issue_facts") and today.uses("issue_facts")


def test_the_new_default_makes_its_reproduction_test_from_the_issue_session_with_no_model_call(
    scripted: Any, tmp_path: Path
) -> None:
    """The candidate's [snippets] reading reaches the run: the session lacks its import, states the value it expected,
    and becomes the reproduction test, so every model call is a repair call."""
    rewrite = "```python\ndef add(a, b):\n    return a + b\n```"
    server = scripted([{"content": rewrite}] * 6)
    task = tiny_task(tmp_path / "cache")
    issue = "add() subtracts:\n\n    >>> tiny.add(2, 3)\n    -1\n\nExpected 5.\n"
    task = ab.BenchTask(task.id, task.package, task.file, task.search, task.replace, issue, task.test)
    bench = ab.Bench(server.base_url, "scripted", Limits(max_turns=12), tmp_path / "work", tmp_path / "cache")
    new = next(v for v in ab.candidate_variants(ab.ONE_SHOT) if v.label.endswith("+new"))
    row = ab.run_one(bench, new, task)
    assert row["resolved"] and row["status"] == "validated", row
    events = [dict(e) for e in ab.read_events(tmp_path / "work" / new.label / task.id / "run" / "trajectory.jsonl")]
    reproduce = [e for e in events if e.get("type") == "stage" and e.get("stage") == "reproduce"]
    assert reproduce and reproduce[0].get("source") == "issue snippet", reproduce
    calls = [e for e in events if e.get("type") == "model_call"]
    assert calls and len(calls) == len(server.requests) and not [e for e in calls if e.get("stage") == "reproduce"]


def test_the_bench_caps_turns_as_snaffle_solve_does_unless_told() -> None:
    solve = data.load_record(Limits, "limits.toml", "run").max_turns
    assert ab.parse_args([]).max_turns == solve
    assert ab.parse_args(["--max-turns", "20"]).max_turns == 20
