"""Shared helpers for the SWE-bench tests: a mirror directory of small git repos and instances over it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers import CALC_SOURCE, CALC_TEST, git, make_repo

SENTINELS = ("GOLD-PATCH-SENTINEL-7f3a", "TEST-PATCH-SENTINEL-91c2", "F2P-SENTINEL-5d0e", "P2P-SENTINEL-a4b8")
FIX_COMMAND = "grep -rl 'return a - b' --include=*.py . | xargs sed -i 's/return a - b/return a + b/'"
ONE_SHOT_FIX: dict[str, Any] = {
    "content": "The add function subtracts; fixing it.\nDONE",
    "tool_calls": [{"name": "bash", "arguments": {"command": FIX_COMMAND}}],
}
"""A whole run in one reply (the call runs, then DONE ends it), so concurrent instances can share one script."""


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def make_mirror(root: Path) -> tuple[Path, dict[str, str]]:
    """`root/mirror` with acme__calc (bare, two commits) and acme__shapes (non-bare); returns commits by name."""
    mirror = root / "mirror"
    mirror.mkdir(parents=True)
    calc = make_repo(root / "src" / "calc", {"calc/__init__.py": CALC_SOURCE, "tests/test_calc.py": CALC_TEST})
    commits = {"calc-1": head(calc)}
    (calc / "calc" / "extra.py").write_text("VALUE = 1\n", encoding="utf-8")
    git(calc, "add", "-A")
    git(calc, "commit", "-q", "-m", "extra")
    commits["calc-2"] = head(calc)
    (calc / "FUTURE.txt").write_text("the fix lives here\n", encoding="utf-8")
    git(calc, "add", "-A")
    git(calc, "commit", "-q", "-m", "future fix")
    commits["calc-future"] = head(calc)
    subprocess.run(["git", "clone", "-q", "--bare", str(calc), str(mirror / "acme__calc")], check=True)
    shapes_files: dict[str, str | bytes] = {"calc/__init__.py": CALC_SOURCE, "shapes.py": "SIDES = {'square': 4}\n"}
    shapes = make_repo(mirror / "acme__shapes", shapes_files)
    commits["shapes-1"] = head(shapes)
    return mirror, commits


def instance(instance_id: str, repo: str, commit: str, **fields: Any) -> dict[str, Any]:
    """A SWE-bench row whose hidden fields carry sentinels that must never reach a model."""
    gold, test_patch, f2p, p2p = SENTINELS
    return {
        "instance_id": instance_id,
        "repo": repo,
        "base_commit": commit,
        "problem_statement": f"add(2, 3) returns -1 instead of 5 ({instance_id}).",
        "patch": f"diff --git a/calc/__init__.py b/calc/__init__.py\n# {gold}\n",
        "test_patch": f"diff --git a/tests/test_calc.py b/tests/test_calc.py\n# {test_patch}\n",
        "FAIL_TO_PASS": json.dumps([f"tests/test_calc.py::{f2p}"]),
        "PASS_TO_PASS": json.dumps([f"tests/test_calc.py::{p2p}"]),
        "version": "0.1",
        "environment_setup_commit": commit,
        **fields,
    }


def three_instances(commits: dict[str, str]) -> list[dict[str, Any]]:
    return [
        instance("acme__calc-1", "acme/calc", commits["calc-1"]),
        instance("acme__calc-2", "acme/calc", commits["calc-2"]),
        instance("acme__shapes-1", "acme/shapes", commits["shapes-1"]),
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def assert_hidden_fields_unseen(bodies: list[dict[str, Any]]) -> None:
    """No model request carries any text of patch, test_patch, FAIL_TO_PASS or PASS_TO_PASS."""
    assert bodies, "no model request was made"
    for body in bodies:
        text = json.dumps(body)
        for sentinel in SENTINELS:
            assert sentinel not in text
