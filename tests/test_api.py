"""The Python API as docs/api.md documents it: its example runs as written, against the scripted model server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import snaffle
from snaffle.arms import DEFAULT_ARM
from snaffle.exceptions import UserError
from tests.helpers import Start

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
ROOT = DOC.parents[1]
FIXED_ADD = "```python\ndef add(a, b):\n    return a + b\n```"


def example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len(blocks) == 1, "docs/api.md holds one runnable example"
    return str(blocks[0])


def test_the_documented_example_runs(scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": FIXED_ADD}])
    env = {**os.environ, "SNAFFLE_BASE_URL": server.base_url, "SNAFFLE_MODEL": "scripted", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", example()], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "top entity: calc/__init__.py::add" in proc.stdout
    assert "stage localize:" in proc.stdout and "stage validate: valid" in proc.stdout
    assert "exit status: validated" in proc.stdout and "+    return a + b" in proc.stdout
    assert f"model calls: {len(server.requests)} " in proc.stdout and len(server.requests) == 1


def test_import_snaffle_loads_no_pipeline_and_the_api_names_resolve() -> None:
    code = "import sys, snaffle; print(sorted(m for m in sys.modules if m.startswith('snaffle')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "['snaffle', 'snaffle.version']"
    assert all(getattr(snaffle, name) is not None for name in snaffle.__all__)
    assert snaffle.Limits.__module__ == "snaffle.types" and snaffle.ModelConfig.__name__ == "ModelConfig"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        snaffle.nope  # noqa: B018
    assert snaffle.solve.__kwdefaults__["arm"] == DEFAULT_ARM


def test_api_bad_input_raises_one_line_before_any_model_call(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": FIXED_ADD}])
    model = snaffle.ModelConfig(server.base_url, "scripted")
    (tmp_path / "plain").mkdir()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "keep.txt").write_text("mine")
    cases = [
        ((tmp_path / "plain", tmp_path / "o1", None), "not a git repository"),
        ((calc_repo, tmp_path / "used", None), "is not empty"),
        ((calc_repo, tmp_path / "o2", "tests/test_calc.py::test_nope"), "pytest collects no such test"),
    ]
    for (repo, out, failing), message in cases:
        with pytest.raises(UserError, match=message) as caught:
            snaffle.solve(repo, "x", model, out, failing_test=failing)
        assert "\n" not in str(caught.value)
    with pytest.raises(UserError, match="top must be at least 1"):
        snaffle.localize(calc_repo, "x", top=0)
    assert server.requests == [] and (tmp_path / "used" / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "o2").exists()
