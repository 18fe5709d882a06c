"""The local grader: SWE-bench's report format, resolved / unresolved / error / env_unavailable per instance."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from snaffle.swebench import cli
from snaffle.swebench import grade as grade_module
from snaffle.swebench.grade import GradeConfig, grade
from snaffle.swebench.instances import load_instances
from snaffle.swebench.specs import EnvSpec, EnvUnavailable
from snaffle.swebench.workspaces import Sources
from tests.helpers import git
from tests.swebench_helpers import instance, make_mirror, write_jsonl

swebench_constants = pytest.importorskip("swebench.harness.constants")
if not hasattr(swebench_constants, "MAP_REPO_VERSION_TO_SPECS"):
    pytest.skip("the local grader needs swebench 4.x (its environment specs)", allow_module_level=True)

NEW_TEST = "    assert mul(2, 3) == 6\n\n\ndef test_add_negative():\n    assert add(-2, -3) == -5\n"
F2P = ["tests/test_calc.py::test_add", "tests/test_calc.py::test_add_negative"]
P2P = ["tests/test_calc.py::test_mul"]
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def diff_of(repo: Path, path: str, old: str, new: str) -> str:
    target = repo / path
    original = target.read_text()
    target.write_text(original.replace(old, new))
    patch = git(repo, "diff")
    target.write_text(original)
    return patch


def fake_spec(repo: str, version: str) -> EnvSpec:
    """A SWE-bench-style spec for the test repo: no packages, the host's pytest (so no index is needed)."""
    if version == "0.1":
        return EnvSpec(repo, version, PYTHON, test_cmd=f"{sys.executable} -m pytest -rA -p no:cacheprovider")
    if (repo, version) == ("acme/calc", "0.0"):
        return EnvSpec(repo, version, "2.5", test_cmd="pytest -rA")
    raise EnvUnavailable(f"SWE-bench has no environment spec for {repo} {version}")


@pytest.fixture
def calc_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    monkeypatch.setattr(grade_module, "env_spec", fake_spec)
    monkeypatch.setitem(swebench_constants.MAP_REPO_VERSION_TO_SPECS, "acme/calc", {"0.1": {"test_cmd": "pytest"}})
    monkeypatch.setitem(MAP_REPO_TO_PARSER, "acme/calc", MAP_REPO_TO_PARSER["pytest-dev/pytest"])


def test_local_grader_verdicts(tmp_path: Path, calc_specs: None, capsys: pytest.CaptureFixture[str]) -> None:
    mirror, commits = make_mirror(tmp_path)
    src = tmp_path / "src" / "calc"
    gold = diff_of(src, "calc/__init__.py", "return a - b", "return a + b")
    cheat = diff_of(src, "tests/test_calc.py", "assert add(2, 3) == 5", "assert True")
    test_patch = diff_of(src, "tests/test_calc.py", "    assert mul(2, 3) == 6\n", NEW_TEST)
    common = {"test_patch": test_patch, "FAIL_TO_PASS": json.dumps(F2P), "PASS_TO_PASS": json.dumps(P2P)}
    rows = [
        instance(f"acme__calc-{name}", "acme/calc", commits["calc-1"], **common, patch=gold)
        for name in ("gold", "empty", "bad", "cheat")
    ]
    rows += [
        instance("acme__calc-envbroken", "acme/calc", commits["calc-1"], **common, patch=cheat),
        instance("acme__calc-oldpy", "acme/calc", commits["calc-1"], version="0.0"),
        instance("acme__calc-nospec", "acme/calc", commits["calc-1"], version="7.7"),
        instance("acme__nothing-1", "acme/nothing", "0" * 40),
    ]
    predictions = {
        "acme__calc-gold": gold,
        "acme__calc-empty": "",
        "acme__calc-bad": "diff --git a/x b/x\nnonsense\n",
        "acme__calc-cheat": cheat,
        "acme__calc-envbroken": gold,
        "acme__calc-oldpy": gold,
        "acme__calc-nospec": gold,
        "acme__nothing-1": gold,
    }
    preds = write_jsonl(
        tmp_path / "preds.jsonl",
        [{"instance_id": k, "model_name_or_path": "m", "model_patch": v} for k, v in predictions.items()],
    )
    out = tmp_path / "graded"
    code = cli.main(
        [
            "grade",
            "--instances",
            str(write_jsonl(tmp_path / "i.jsonl", rows)),
            "--predictions",
            str(preds),
            "--repos",
            str(mirror),
            "--out",
            str(out),
            "--grader",
            "local",
            "--env-dir",
            str(tmp_path / "envs"),
        ]
    )
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["statuses"] == {
        "acme__calc-gold": "resolved",
        "acme__calc-empty": "unresolved",
        "acme__calc-bad": "error",
        "acme__calc-cheat": "unresolved",
        "acme__calc-envbroken": "env_unavailable",
        "acme__calc-oldpy": "env_unavailable",
        "acme__calc-nospec": "env_unavailable",
        "acme__nothing-1": "env_unavailable",
    }
    assert report["resolved_ids"] == ["acme__calc-gold"] and report["empty_patch_ids"] == ["acme__calc-empty"]
    assert report["env_unavailable_instances"] == 4 and report["completed_instances"] == 3
    assert "the gold patch does not resolve here" in report["reasons"]["acme__calc-envbroken"]
    assert (tmp_path / "envs" / "calibration" / "acme__calc-gold.json").is_file()
    assert "no Python 2.5" in report["reasons"]["acme__calc-oldpy"]
    assert "--repos DIR" in report["reasons"]["acme__nothing-1"]
    gold_report = json.loads((out / "acme__calc-gold" / "report.json").read_text())["acme__calc-gold"]
    assert gold_report["resolved"] and gold_report["patch_successfully_applied"]
    assert gold_report["tests_status"]["FAIL_TO_PASS"] == {"success": F2P, "failure": []}
    empty = json.loads((out / "acme__calc-empty" / "report.json").read_text())["acme__calc-empty"]
    assert empty["tests_status"]["FAIL_TO_PASS"]["failure"] == F2P
    assert empty["tests_status"]["PASS_TO_PASS"]["success"] == P2P
    assert json.loads(capsys.readouterr().out)["resolved_instances"] == 1


def test_gold_predictions_and_a_missing_file(tmp_path: Path, calc_specs: None) -> None:
    mirror, commits = make_mirror(tmp_path)
    instances = load_instances(write_jsonl(tmp_path / "i.jsonl", [instance("a__b-1", "acme/calc", commits["calc-1"])]))
    config = GradeConfig(instances, Path("gold"), tmp_path / "o", Sources(mirror), grader="local")
    assert grade_module.load_predictions(config) == {"a__b-1": instances[0].patch}
    missing = GradeConfig(instances, tmp_path / "none.jsonl", tmp_path / "o", Sources(mirror), grader="local")
    with pytest.raises(Exception, match="predictions file not found"):
        grade(missing)


DEV_SET = Path(os.environ.get("SNAFFLE_SWEBENCH_DEV", "/work/shared/data/swebench_verified_dev.jsonl.gz"))
MIRRORS = Path(os.environ.get("SNAFFLE_SWEBENCH_REPOS", "/work/.mirror"))
REAL_INSTANCE = "psf__requests-6028"


@pytest.mark.slow
@pytest.mark.parametrize(("patch", "status"), [("gold", "resolved"), ("empty", "unresolved")])
def test_real_instance_gold_resolves_and_empty_fails(tmp_path: Path, patch: str, status: str) -> None:
    """psf__requests-6028 (SWE-bench Verified), graded locally from a mirror of psf/requests and Python 3.9."""
    if not DEV_SET.is_file() or not (MIRRORS / "psf+requests").exists():
        pytest.skip(f"needs {DEV_SET} and a psf/requests mirror in {MIRRORS}")
    chosen = [i for i in load_instances(DEV_SET) if i.instance_id == REAL_INSTANCE]
    predictions: Any = Path("gold")
    if patch == "empty":
        row = {"instance_id": REAL_INSTANCE, "model_name_or_path": "m", "model_patch": ""}
        predictions = write_jsonl(tmp_path / "p.jsonl", [row])
    config = GradeConfig(
        tuple(chosen), predictions, tmp_path / "out", Sources(MIRRORS), grader="local", env_dir=tmp_path / "envs"
    )
    report = grade(config)
    assert report["statuses"] == {REAL_INSTANCE: status}, report.get("reasons")
    tests = json.loads((tmp_path / "out" / REAL_INSTANCE / "report.json").read_text())[REAL_INSTANCE]["tests_status"]
    assert len(tests["PASS_TO_PASS"]["success"]) == len(chosen[0].PASS_TO_PASS)
    assert len(tests["FAIL_TO_PASS"]["success" if patch == "gold" else "failure"]) == len(chosen[0].FAIL_TO_PASS)
