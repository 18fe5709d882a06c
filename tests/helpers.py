"""Shared test helpers: the planted-bug calc repo, git with a fixed identity, and the scripted loop's fix."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from snaffle.agentless.config import PipelineConfig, switch_defaults
from snaffle.agentless.localize import ENTITY_SIGNALS, FILE_SIGNALS, Weights
from snaffle.testing import ScriptedServer
from snaffle.trajectory import read_trajectory
from snaffle.types import Event

Start = Callable[[list[dict[str, Any]]], ScriptedServer]
"""The `scripted` fixture: starts a scripted model server, stopped at the end of the test."""

GIT_ENV = [
    "-c",
    "user.email=test@snaffle.invalid",
    "-c",
    "user.name=snaffle-test",
    "-c",
    "commit.gpgsign=false",
]

CALC_SOURCE = '''"""A tiny calculator package."""


def add(a, b):
    """Return the sum of a and b."""
    return a - b


def mul(a, b):
    return a * b
'''

CALC_TEST = """from calc import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
"""

CALC_ISSUE = "add(2, 3) returns -1 instead of 5. The add function in calc/__init__.py seems to subtract."

FIX_SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "python -m pytest -q tests"}}]},
    {"tool_calls": [{"name": "str_replace_editor", "arguments": {"command": "view", "path": "calc/__init__.py"}}]},
    {
        "content": "The add function subtracts; fixing it.",
        "tool_calls": [
            {
                "name": "str_replace_editor",
                "arguments": {
                    "command": "str_replace",
                    "path": "calc/__init__.py",
                    "old_str": "return a - b",
                    "new_str": "return a + b",
                },
            }
        ],
    },
    {"tool_calls": [{"name": "bash", "arguments": {"command": "python -m pytest -q tests"}}]},
    {"content": "The tests pass now.\nDONE"},
]
"""The minimal arm's fix of the calc repo: run the tests, view, fix, run the tests, DONE."""


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *GIT_ENV, *args], cwd=repo, capture_output=True, text=True, check=True)
    return proc.stdout


def make_repo(root: Path, files: dict[str, str | bytes]) -> Path:
    """A committed git repository holding `files`."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


def bash(command: str) -> dict[str, Any]:
    """A scripted reply making one bash call."""
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def repo_tests_pass(repo: Path) -> bool:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=repo)
    return proc.returncode == 0


FORK_BOMB = (
    "import os, time\n"
    "n = 0\n"
    "for _ in range(400):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError:\n"
    "        break\n"
    "    if pid == 0:\n"
    "        time.sleep(30)\n"
    "        os._exit(0)\n"
    "    n += 1\n"
    "print('forked', n)\n"
)
"""400 children that stay alive (the count cannot pass the limit by children exiting early, whatever the load)."""


def tiny_wheel(directory: Path) -> Path:
    """A minimal pure-Python wheel (no build step: pip installs it offline)."""
    name, dist = "tiny_snaffle_probe", "tiny_snaffle_probe-0.1.dist-info"
    files = {
        f"{name}.py": "X = 1\n",
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: tiny-snaffle-probe\nVersion: 0.1\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    path = directory / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
        wheel.writestr(f"{dist}/RECORD", "".join(f"{m},,\n" for m in [*files, f"{dist}/RECORD"]))
    return path


def stage_events(out: Path, name: str) -> list[Event]:
    """The `stage` events named `name` of the run whose directory is `out`, in order."""
    return [e for e in read_trajectory(out / "trajectory.jsonl").of_type("stage") if e["stage"] == name]


def packaged_with(weights: Mapping[str, float], **tuning: float) -> Weights:
    """The packaged localization weights with these signal weights and [tuning] values changed."""
    packaged = Weights.load()
    return replace(packaged, weights={**packaged.weights, **weights}, tuning=replace(packaged.tuning, **tuning))


def only_signals(**weights: float) -> Weights:
    """The packaged localization weights with every signal at 0 but `weights` (shares and priors as packaged)."""
    return packaged_with({**dict.fromkeys((*ENTITY_SIGNALS, *FILE_SIGNALS), 0.0), **weights})


def scripted_pipeline(**pipeline: Any) -> PipelineConfig:
    """A pipeline drawing exactly the samples a test scripts: no extra samples, related tests failing on the
    original not required, every candidate shown whole to every sample, no line repair calls (one pass when asked)
    and no mutants, unless the test asks (all five are on by default; tests/test_sampling.py,
    tests/test_facts_pipeline.py, tests/test_feedback.py, tests/test_line_repair.py and tests/test_mutation.py test
    them)."""
    pipeline.setdefault("extra_samples", False)
    pipeline.setdefault("one_entity", False)
    pipeline.setdefault("line_repair", False)
    pipeline.setdefault("line_passes", 1)
    pipeline.setdefault("mutation", False)
    if "switches" not in pipeline:
        pipeline["switches"] = replace(switch_defaults(), failing_existing=False)
    return PipelineConfig(**pipeline)
