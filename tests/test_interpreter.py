"""The interpreter a run's tests use: `--python`, the repository's own `.venv`, else snaffle's; the regression
baseline run in it (passing, or "no working tests" and why); planted venvs that would expose the home refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from snaffle.cli import main
from snaffle.interpreter import OWN, choose, prepare
from snaffle.trajectory import read_trajectory
from tests.helpers import CALC_SOURCE, CALC_TEST, Start, make_repo

PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
DEP_SOURCE = "from localdep import OFFSET\n\n" + CALC_SOURCE.replace("return a * b", "return a * b + OFFSET")
FIX = '```python\ndef add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n```'
ISSUE = "add(2, 3) returns -1 instead of 5. The add function in calc/__init__.py subtracts."


def local_package(root: Path) -> Path:
    """A package directory `localdep` packed as a wheel (no build step, so pip installs it with --no-index)."""
    root.mkdir(parents=True)
    dist = "localdep-0.1.dist-info"
    files = {
        "localdep/__init__.py": "OFFSET = 0\n",
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: localdep\nVersion: 0.1\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    wheel = root / "localdep-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as packed:
        for name in files:
            packed.write(root / name, name)
        packed.writestr(f"{dist}/RECORD", "".join(f"{m},,\n" for m in [*files, f"{dist}/RECORD"]))
    return wheel


def dep_venv(target: Path, wheel: Path) -> Path:
    """A venv holding `localdep` (installed offline) and seeing pytest and pip from snaffle's own env."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    site = target / "lib" / PY / "site-packages"
    tools = Path(pytest.__file__).resolve().parent.parent
    (site / "tools_from_snaffle.pth").write_text(f"{tools}\n")
    python = target / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)]
    subprocess.run(install, check=True, env={**os.environ, "PIP_NO_INDEX": "1"})
    return python


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("second-venv")
    return dep_venv(root / "venv", local_package(root / "localdep-src"))


def dep_repo(root: Path) -> Path:
    files: dict[str, str | bytes] = {
        "calc/__init__.py": DEP_SOURCE,
        "tests/test_calc.py": CALC_TEST,
        ".gitignore": ".venv/\n",
    }
    return make_repo(root, files)


def solve(repo: Path, out: Path, url: str, *extra: str) -> int:
    args = ["solve", "--repo", str(repo), "--issue", ISSUE, "--base-url", url, "--no-shim", "--out", str(out)]
    return main([*args, "--samples", "1", "--one-shot", "--no-reproduce", "--no-line-repair", *extra])


def baseline(out: Path) -> dict[str, object]:
    stages = read_trajectory(out / "trajectory.jsonl").of_type("stage")
    return next(e for e in stages if e["stage"] == "regression_baseline")


def header(out: Path) -> dict[str, object]:
    return next(read_trajectory(out / "trajectory.jsonl").of_type("header"))


def test_with_python_the_baseline_passes_in_that_venv(
    tmp_path: Path, venv_python: Path, scripted: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, out = dep_repo(tmp_path / "proj"), tmp_path / "run"
    code = solve(repo, out, scripted([{"content": FIX}]).base_url, "--python", str(venv_python))
    assert code == 0
    assert f"snaffle: python {venv_python} (--python)" in capsys.readouterr().err
    stage = baseline(out)
    assert stage["decision"] == "1 passing tests in 1 related files", stage
    assert (stage["collected"], stage["passed"], stage["failed"], stage["errored"]) == (2, 1, 1, 0)
    python = header(out)["interpreter"]
    assert python == {
        "path": str(venv_python),
        "version": ".".join(map(str, sys.version_info[:3])),
        "chosen": "--python",
    }
    assert json.loads((out / "result.json").read_text())["exit_status"] == "validated"


def test_without_it_the_baseline_says_no_working_tests_and_why(
    tmp_path: Path, scripted: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, out = dep_repo(tmp_path / "proj"), tmp_path / "run"
    solve(repo, out, scripted([{"content": FIX}]).base_url)
    stage = baseline(out)
    assert stage["decision"] == "no working tests: ModuleNotFoundError: No module named 'localdep'", stage
    assert (stage["passed"], stage["errored"]) == (0, stage["collected"]) and stage["errored"]
    assert header(out)["interpreter"]["chosen"] == OWN  # type: ignore[index]
    capsys.readouterr()
    assert main(["trace", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "regression_baseline: no working tests: ModuleNotFoundError: No module named 'localdep'" in shown
    assert "0 passed" in shown and "errored" in shown


def test_a_repository_with_a_venv_is_picked_up_on_its_own(tmp_path: Path, scripted: Start) -> None:
    repo, out = dep_repo(tmp_path / "proj"), tmp_path / "run"
    python = dep_venv(repo / ".venv", local_package(tmp_path / "localdep-src"))
    assert solve(repo, out, scripted([{"content": FIX}]).base_url) == 0
    assert header(out)["interpreter"]["chosen"] == "the repository's .venv"  # type: ignore[index]
    assert header(out)["interpreter"]["path"] == str(python)  # type: ignore[index]
    assert baseline(out)["decision"] == "1 passing tests in 1 related files"


def test_a_python_that_is_no_file_is_one_line_and_exit_2(
    tmp_path: Path, calc_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert solve(calc_repo, out, "http://127.0.0.1:9/v1", "--python", str(tmp_path / "nope")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--python" in err[0] and "no executable file" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("home_dir", ["bin", ".secrets/bin"])
def test_a_planted_venv_cannot_show_the_home_to_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home_dir: str
) -> None:
    home = tmp_path / "home"
    (home / ".secrets").mkdir(parents=True)
    (home / ".secrets" / "key").write_text("SECRET-HOME-KEY-3f1c")
    monkeypatch.setenv("HOME", str(home))
    repo = dep_repo(tmp_path / "proj")
    venv = repo / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {home / home_dir}\n")
    (venv / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    choice = choose(repo, None)
    assert choice.path == sys.executable and "refused" in choice.how
    sandbox, _ = prepare(choice, tmp_path / "sandbox", "bubblewrap")
    read = f"print(open({str(home / '.secrets' / 'key')!r}).read())"
    done = sandbox.run([sandbox.python, "-c", read], sandbox.scratch, 30, writable=sandbox.scratch)
    assert "SECRET-HOME-KEY" not in done.output and done.returncode != 0


def test_a_planted_python_is_only_run_inside_the_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repo's `.venv/bin/python` is a script: asking its version must not run it on the host."""
    marker = tmp_path / "ran-on-host"
    repo = dep_repo(tmp_path / "proj")
    venv = repo / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).resolve().parent}\n")
    script = venv / "bin" / "python"
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho 3.99.0\n")
    script.chmod(0o755)
    choice = choose(repo, None)
    assert choice.how == "the repository's .venv"
    _, interpreter = prepare(choice, tmp_path / "sandbox", "bubblewrap")
    assert interpreter.version == "3.99.0"  # it ran, inside: the host path it touched is not the host's
    assert not marker.exists()


def test_a_shell_in_the_sandbox_runs_the_chosen_python_and_cannot_change_its_venv(
    tmp_path: Path, venv_python: Path
) -> None:
    sandbox, interpreter = prepare(choose(tmp_path, str(venv_python)), tmp_path / "sandbox", "bubblewrap")
    assert interpreter.how == "--python"
    done = sandbox.run(
        "python -c 'import localdep, sys; print(sys.prefix)'", sandbox.scratch, 30, writable=sandbox.scratch
    )
    assert done.returncode == 0 and done.output.strip() == str(venv_python.parent.parent)
    site = venv_python.parent.parent / "lib" / PY / "site-packages"
    write = f"open({str(site / 'planted.pth')!r}, 'w').write('x')"
    assert sandbox.run(["python", "-c", write], sandbox.scratch, 30, writable=sandbox.scratch).returncode != 0
    assert not (site / "planted.pth").exists()
