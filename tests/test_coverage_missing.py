"""A Python without coverage.py (`--python VENV` where coverage was never installed): the snippets still run and
reproduce, SBFL scores nothing, and each says so (stage decision, trajectory) instead of leaving an empty signal
that reads like "the snippet ran nothing"."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from snaffle.agentless import facts
from snaffle.agentless.config import PipelineConfig, switch_defaults
from snaffle.agentless.sbfl import spectrum
from snaffle.index.repo import RepoIndex
from snaffle.interpreter import BY_FLAG, PythonChoice, bind_paths
from snaffle.model.client import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.sandbox import Sandbox
from snaffle.types import Limits, Task
from tests.helpers import Start, make_repo, stage_events
from tests.test_facts import FAST, RAISING_ISSUE, SHELF_FILES, WRONG_VALUE_ISSUE
from tests.test_facts_pipeline import DONE, TOTAL_FILES, edit

PYTEST_PARTS = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py.py")
"""What `python -m pytest` imports, shown to the bare venv without the rest of snaffle's site-packages."""


def bare_venv(target: Path, with_pytest: bool) -> Path:
    """A venv that cannot import coverage; with pytest (only pytest and what it imports) when asked."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    python = target / "bin" / "python"
    if with_pytest:
        shelf = target / "pytest-only"
        shelf.mkdir()
        site = Path(pytest.__file__).resolve().parent.parent
        for name in PYTEST_PARTS:
            if (site / name).exists():
                (shelf / name).symlink_to(site / name)
        (site_packages(python) / "pytest_only.pth").write_text(f"{shelf}\n")
    probe = subprocess.run([str(python), "-c", "import coverage"], capture_output=True, check=False)
    assert probe.returncode != 0, "the premise: this venv cannot import coverage"
    return python


def site_packages(python: Path) -> Path:
    found = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(found.stdout.strip())


def sandbox_for(python: Path, scratch: Path) -> Sandbox:
    return Sandbox.create(scratch, python=str(python), python_paths=bind_paths(python))


def test_a_snippet_run_by_a_python_without_coverage_still_reproduces_and_says_coverage_was_missing(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "shelf", SHELF_FILES)
    python = bare_venv(tmp_path / "bare", with_pytest=False)
    found = facts.gather(RAISING_ISSUE, repo, sandbox_for(python, tmp_path / "box"), FAST)
    (run,) = found.runs
    assert run.reason == "raised" and dict(run.seen.executed) == {}
    assert "No module named 'coverage'" in found.coverage_missing
    assert facts.decision(found).startswith("1 snippets run, 1 reproduce the issue; coverage unavailable")
    assert facts.facts_fields(found)["coverage_missing"] == found.coverage_missing


def test_snippets_with_coverage_report_nothing_missing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shelf", SHELF_FILES)
    found = facts.gather(RAISING_ISSUE, repo, Sandbox.create(tmp_path / "box"), FAST)
    assert found.coverage_missing == "" and "coverage_missing" not in facts.facts_fields(found)
    assert facts.decision(found) == "1 snippets run, 1 reproduce the issue"


def test_sbfl_in_a_python_without_coverage_says_so_instead_of_scoring_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shelf", TOTAL_FILES)
    python = bare_venv(tmp_path / "bare", with_pytest=True)
    found = spectrum(RepoIndex(repo), "tests/test_core.py::test_sum_of_slots", sandbox_for(python, tmp_path / "box"))
    assert found.scores == {} and found.failing_lines == {}
    assert "No module named coverage" in found.unavailable
    assert found.decision().startswith("no coverage measured: ") and "coverage" in found.decision()[20:]


def test_sbfl_with_coverage_says_what_it_scored(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shelf", TOTAL_FILES)
    found = spectrum(RepoIndex(repo), "tests/test_core.py::test_sum_of_slots", Sandbox.create(tmp_path / "box"))
    assert found.unavailable == ""
    assert found.decision() == "1 of 3 tests failed under coverage; 3 entities scored"
    scored = {e.selector for e, s in found.scores.items() if s > 0}  # what the failing test ran
    assert scored == {f"shelf/core.py::Shelf.{name}" for name in ("__init__", "__setitem__", "total")}


def test_a_run_with_a_python_without_coverage_goes_on_and_its_trajectory_says_why_no_coverage(
    scripted: Start, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "shelf", TOTAL_FILES)
    python = bare_venv(tmp_path / "bare", with_pytest=True)
    server = scripted([edit("shelf/core.py::Shelf.total", " + 1\n", "\n"), DONE])
    out = tmp_path / "run"
    pipeline = PipelineConfig(
        samples=1,
        line_repair=False,
        mutation=False,
        switches=replace(switch_defaults(), issue_facts=True),
        reproduce=False,
    )
    config = SolveConfig(
        "agentless",
        ModelConfig(server.base_url, "scripted"),
        Limits(max_turns=40),
        out,
        zero_pricer,
        pipeline=pipeline,
        python=PythonChoice(str(python), BY_FLAG),
    )
    task = Task(repo=repo, issue=WRONG_VALUE_ISSUE, failing_test="tests/test_core.py::test_sum_of_slots")
    attempt = solve(task, config)
    (sbfl,) = stage_events(out, "sbfl")
    assert sbfl["decision"].startswith("no coverage measured: ") and "No module named coverage" in sbfl["decision"]
    (issue_facts,) = stage_events(out, "issue_facts")
    assert "coverage unavailable" in issue_facts["decision"]
    assert attempt.exit_status == "validated" and "-        return sum(self.slots.values()) + 1" in attempt.patch


FORGED_ISSUE = """Shelf breaks

```python
with open("coverage.missing", "w") as handle:
    handle.write("x" * 3_000_000 + "\\nsecond line")
from shelf import Shelf
Shelf()["fish"] = 1
```

It raises ValueError.
"""


def test_a_snippet_that_forges_a_huge_coverage_note_gets_one_short_line_into_the_trajectory(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shelf", SHELF_FILES)
    found = facts.gather(FORGED_ISSUE, repo, Sandbox.create(tmp_path / "box"), FAST)
    (run,) = found.runs
    assert run.reason == "raised"
    assert 0 < len(found.coverage_missing) <= facts.SHORT_OUTPUT and "\n" not in found.coverage_missing
    assert len(facts.decision(found)) < 600
