"""bench/localize_bench.py refuses `--execute` with a snippet interpreter that has no coverage.py: the `executed`
signal would be empty on every instance without a word (how a first dev-set run measured 2 of 53 snippets)."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "localize_bench.py"


def test_execute_with_an_interpreter_without_coverage_is_refused_in_one_line(tmp_path: Path) -> None:
    venv.create(tmp_path / "bare", with_pip=False)
    bare = tmp_path / "bare" / "bin" / "python"
    assert subprocess.run([bare, "-c", "import coverage"], capture_output=True, check=False).returncode != 0
    args = [sys.executable, BENCH, "--repos", tmp_path, "--work", tmp_path / "work", "--execute"]
    done = subprocess.run([*args, "--snippet-python", bare], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"localize_bench: {bare} cannot import coverage, so the `executed` signal would be empty on every instance; "
        "install coverage into that interpreter"
    ]
    assert not (tmp_path / "work").exists()
    missing = subprocess.run(
        [*args, "--snippet-python", tmp_path / "nowhere"], capture_output=True, text=True, check=False
    )
    assert missing.returncode == 2 and "cannot import coverage" in missing.stderr
