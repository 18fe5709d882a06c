"""SWE-bench environments as a cached resource: built once per (repo, version) under a lock and reused by the next
instance and by parallel workers; `swebench run` solves each instance in its own; `snaffle env build|list`."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from snaffle.adapters import AdapterSpec
from snaffle.cli import main
from snaffle.swebench.batch import BatchConfig, run_batch
from snaffle.swebench.environments import Prepared, prepare_one
from snaffle.swebench.envs import MARKER
from snaffle.swebench.instances import Instance, load_instances
from snaffle.swebench.progress import LineProgress
from snaffle.swebench.workspaces import Sources
from snaffle.trajectory import read_trajectory
from snaffle.types import Limits
from tests.helpers import Start, tiny_wheel
from tests.swebench_helpers import instance, make_mirror, write_jsonl

swebench_constants = pytest.importorskip("swebench.harness.constants")
if not hasattr(swebench_constants, "MAP_REPO_VERSION_TO_SPECS"):
    pytest.skip("environments need swebench 4.x (its environment specs)", allow_module_level=True)

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
FIX = '```python\ndef add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n```'


@pytest.fixture
def calc_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, dict[str, str]]]:
    """SWE-bench's spec table holds acme/calc 0.1 (this Python, one local wheel) and 0.0 (a Python not here)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    spec = {"python": PYTHON, "pip_packages": [str(tiny_wheel(wheels))], "install": "", "test_cmd": "pytest"}
    specs = {"0.1": spec, "0.0": {**spec, "python": "2.5"}}
    monkeypatch.setitem(swebench_constants.MAP_REPO_VERSION_TO_SPECS, "acme/calc", specs)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing reaches the network: the wheel is a local file
    yield make_mirror(tmp_path)


def instances_of(tmp_path: Path, commits: dict[str, str], *rows: tuple[str, str, str]) -> tuple[Instance, ...]:
    path = tmp_path / "instances.jsonl"
    write_jsonl(path, [instance(i, "acme/calc", commits[c], version=v) for i, c, v in rows])
    return load_instances(path)


def builds(env_dir: Path) -> int:
    """How many times a venv was created: each build logs its `-m venv` step."""
    logs = (env_dir / "logs").glob("*.log")
    return sum(line.count(" -m venv ") for log in logs for line in log.read_text().splitlines())


def test_an_environment_built_once_is_reused_by_a_second_instance(
    tmp_path: Path, calc_env: tuple[Path, dict[str, str]]
) -> None:
    mirror, commits = calc_env
    first, second = instances_of(tmp_path, commits, ("calc-1", "calc-1", "0.1"), ("calc-2", "calc-2", "0.1"))
    env_dir = tmp_path / "envs"
    built = prepare_one(first, env_dir, Sources(mirror))
    assert built.reason == "" and built.build_s is not None and builds(env_dir) == 1
    marker = env_dir / "acme__calc__0.1" / MARKER
    stamp = marker.stat().st_mtime_ns
    reused = prepare_one(second, env_dir, Sources(mirror))
    assert reused.python == built.python and builds(env_dir) == 1 and marker.stat().st_mtime_ns == stamp
    assert reused.python.path == str(env_dir / "acme__calc__0.1" / "bin" / "python")


def prepare_in_worker(job: tuple[Instance, Path, Path]) -> Prepared:
    return prepare_one(job[0], job[1], Sources(job[2]))


def test_parallel_workers_build_an_environment_once(tmp_path: Path, calc_env: tuple[Path, dict[str, str]]) -> None:
    mirror, commits = calc_env
    rows = [(f"calc-{n}", "calc-1", "0.1") for n in range(3)]
    env_dir = tmp_path / "envs"
    jobs = [(i, env_dir, mirror) for i in instances_of(tmp_path, commits, *rows)]
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("fork")) as pool:
        done = list(pool.map(prepare_in_worker, jobs))
    assert {p.reason for p in done} == {""} and len({p.python.path for p in done}) == 1
    assert builds(env_dir) == 1


def test_swebench_run_solves_each_instance_in_its_environment(
    tmp_path: Path, calc_env: tuple[Path, dict[str, str]], scripted: Start
) -> None:
    mirror, commits = calc_env
    rows = (("calc-1", "calc-1", "0.1"), ("calc-old", "calc-2", "0.0"))
    server = scripted([{"content": FIX, "repeat": 2}])
    config = BatchConfig(
        instances=instances_of(tmp_path, commits, *rows),
        adapter=AdapterSpec("agentless", "scripted"),
        base_url=server.base_url,
        out=tmp_path / "out",
        limits=Limits(max_turns=5),
        sources=Sources(mirror),
        env_dir=tmp_path / "envs",
    )
    run_batch(config, LineProgress(io.StringIO()))
    envs = json.loads((tmp_path / "out" / "environments.json").read_text())
    assert envs["acme__calc__0.1"]["reason"] is None and envs["acme__calc__0.1"]["build_s"] is not None
    assert "no Python 2.5" in envs["acme__calc__0.0"]["reason"]
    ready = read_trajectory(tmp_path / "out" / "calc-1" / "trajectory.jsonl")
    header, baseline = next(ready.of_type("header")), stage(ready, "regression_baseline")
    assert header["interpreter"]["path"] == str(tmp_path / "envs" / "acme__calc__0.1" / "bin" / "python")
    assert header["interpreter"]["chosen"] == "the SWE-bench environment acme__calc__0.1"
    assert baseline["python"] == header["interpreter"]["path"]
    assert str(baseline["decision"]).endswith("python: No module named pytest")  # the env has no pytest
    missing = read_trajectory(tmp_path / "out" / "calc-old" / "trajectory.jsonl")
    chosen = next(missing.of_type("header"))["interpreter"]["chosen"]
    assert chosen.startswith("snaffle's own; no environment for acme__calc__0.0: no Python 2.5")
    result = json.loads((tmp_path / "out" / "calc-old" / "result.json").read_text())
    assert result["exit_status"] != "crashed" and "no Python 2.5" in result["environment"]["reason"]


def stage(trajectory: object, name: str) -> dict[str, object]:
    return next(e for e in trajectory.of_type("stage") if e["stage"] == name)  # type: ignore[attr-defined]


def test_env_build_and_list(
    tmp_path: Path, calc_env: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    mirror, commits = calc_env
    path = tmp_path / "instances.jsonl"
    rows = [instance("calc-1", "acme/calc", commits["calc-1"], version="0.1")]
    write_jsonl(path, [*rows, instance("calc-0", "acme/calc", commits["calc-1"], version="0.0")])
    env_dir = str(tmp_path / "envs")
    args = ["env", "build", "--instances", str(path), "--repos", str(mirror), "--env-dir", env_dir]
    assert main(args) == 1  # one of the two cannot be built here
    out = capsys.readouterr()
    assert "acme__calc__0.1: ready (built in" in out.out and "acme__calc__0.0: unavailable: no Python 2.5" in out.out
    assert "1 of 2 environments ready" in out.err
    assert main(["env", "list", "--env-dir", env_dir]) == 0
    listed = capsys.readouterr()
    assert listed.out.startswith("acme__calc__0.1\t") and " MB\t" in listed.out and "1 environments" in listed.err
    assert main(["env", "build", "--instances", str(tmp_path / "none.jsonl"), "--env-dir", env_dir]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert os.path.isdir(env_dir)
