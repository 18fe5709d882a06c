"""Settings as data: `--config FILE` and `-c key=value` layered under the flags, as a user runs `snaffle`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from snaffle.trajectory import read_trajectory
from tests.helpers import CALC_ISSUE, FIX_SCRIPT, Start


def snaffle(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[1]
    environment = {**os.environ, "PYTHONPATH": str(root), **(env or {})}
    for name in ("SNAFFLE_BASE_URL", "SNAFFLE_MODEL"):
        if name not in (env or {}):
            environment.pop(name, None)
    command = [sys.executable, "-m", "snaffle.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=environment, timeout=120)


def shown(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = snaffle("config", "show", "--json", *args, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2, one line on stderr naming each of `words`, nothing on stdout."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert all(word in lines[0] for word in words), lines[0]


def test_default_then_file_then_c_then_flag(tmp_path: Path) -> None:
    config = write(tmp_path / "exp.toml", "samples = 5\ntop_k = 4\nrepair_turns = 6\nmax-turns = 12\n")
    got = shown("solve", "--config", str(config), "-c", "samples=2", "-c", "repair-turns=7", "--repair-turns", "9")
    where = f"config {config}"
    assert got["concurrency"] == {"value": 1, "from": "default"}
    assert got["top_k"] == {"value": 4, "from": where}
    assert got["max_turns"] == {"value": 12, "from": where}
    assert got["samples"] == {"value": 2, "from": "-c"}
    assert got["repair_turns"] == {"value": 9, "from": "flag"}


def test_the_pipeline_switches_are_settings(tmp_path: Path) -> None:
    config = write(tmp_path / "exp.toml", "early_stop = true\nmax_samples = 4\n")
    got = shown("solve", "--config", str(config), "-c", "extra_samples=true", "--no-evidence-veto")
    assert got["early_stop"] == {"value": True, "from": f"config {config}"}
    assert got["extra_samples"] == {"value": True, "from": "-c"}
    assert got["evidence_veto"] == {"value": False, "from": "flag"}
    assert got["max_samples"] == {"value": 4, "from": f"config {config}"}
    assert got["feedback"] == {"value": False, "from": "default"}


def test_max_samples_below_one_is_refused(tmp_path: Path) -> None:
    args = ("--max-samples", "0", "--repo", ".", "--issue", "x", "--out", str(tmp_path / "o"))
    proc = snaffle("solve", *args, "--base-url", "http://127.0.0.1:9/v1")
    refused(proc, "--max-samples must be at least 1")


def test_the_one_entity_scope_is_a_setting_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    assert shown("solve", "-c", "one_entity_scope=greedy")["one_entity_scope"] == {"value": "greedy", "from": "-c"}
    args = ("--repo", ".", "--issue", "x", "--out", str(tmp_path / "o"), "--base-url", "http://127.0.0.1:9/v1")
    proc = snaffle("solve", "-c", "one_entity_scope=first", *args)
    refused(proc, "one_entity_scope = 'first': expected one of all, greedy, temperature")


def test_the_environment_sits_between_the_defaults_and_the_file(tmp_path: Path) -> None:
    env = {"SNAFFLE_MODEL": "from-env"}
    assert shown("solve", env=env)["model"] == {"value": "from-env", "from": "env SNAFFLE_MODEL"}
    config = write(tmp_path / "c.toml", 'model = "from-file"\n')
    assert shown("solve", "--config", str(config), env=env)["model"]["value"] == "from-file"


def test_a_switch_and_its_opposite_layer_like_one_option(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", "one_shot = true\nreproduce = false\n")
    got = shown("solve", "--config", str(config), "--loop")
    assert got["one_shot"] == {"value": False, "from": "flag"}
    assert got["reproduce"] == {"value": False, "from": f"config {config}"}
    assert shown("solve", "-c", "reproduce=yes")["reproduce"] == {"value": True, "from": "-c"}


def test_a_flag_replaces_the_files_choice_of_an_exclusive_option(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", 'issue_file = "issue.md"\n')
    got = shown("solve", "--config", str(config), "--issue", "text")
    assert got["issue"] == {"value": "text", "from": "flag"}
    assert got["issue_file"]["value"] is None


def test_relative_paths_in_a_file_are_the_files_own(tmp_path: Path) -> None:
    (tmp_path / "exp").mkdir()
    config = write(tmp_path / "exp" / "c.toml", 'repo = "checkout"\nout = "/abs/run"\n')
    got = shown("solve", "--config", str(config), "-c", "issue_file=i.md", cwd=tmp_path)
    assert got["repo"]["value"] == str(tmp_path / "exp" / "checkout")
    assert got["out"]["value"] == "/abs/run"
    assert got["issue_file"]["value"] == str(tmp_path / "i.md")


def test_config_show_prints_a_config_file_that_reads_back_the_same(tmp_path: Path) -> None:
    first = write(tmp_path / "c.toml", 'samples = 4\nissue = "two\\nlines \\"quoted\\""\nsample_temperature = 1\n')
    flags = ("--config", str(first), "--max-dollars", "0.5", "--repo", "checkout")
    proc = snaffle("config", "show", "solve", *flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"samples = 4{' ' * 10}" in proc.stdout and f"# config {first}" in proc.stdout
    (tmp_path / "elsewhere").mkdir()
    again = write(tmp_path / "elsewhere" / "again.toml", proc.stdout)
    before = {k: v["value"] for k, v in shown("solve", *flags, cwd=tmp_path).items()}
    after = shown("solve", "--config", str(again))
    assert before["repo"] == str(tmp_path / "checkout")
    assert {k: v["value"] for k, v in after.items()} == before
    assert after["max_dollars"] == {"value": 0.5, "from": f"config {again}"}


@pytest.mark.parametrize(
    ("text", "words"),
    (
        ("sampels = 3\n", ("sampels", "did you mean 'samples'")),
        ("samples = 'three'\n", ("samples", "integer")),
        ("samples = 2.5\n", ("samples", "integer")),
        ("one_shot = 'yes'\n", ("one_shot", "true or false")),
        ("arm = 'best'\n", ("arm", "agentless")),
        ("max_dollars = [1]\n", ("max_dollars", "number")),
        ("[solve]\nsamples = 3\n", ("solve",)),
        ("config = 'other.toml'\n", ("config", "cannot be set")),
        ("issue = 'a'\nissue_file = 'b'\n", ("issue", "issue_file", "exclude")),
        ("samples = = 3\n", ("not TOML",)),
    ),
)
def test_a_bad_config_file_is_one_line_naming_the_key(tmp_path: Path, text: str, words: tuple[str, ...]) -> None:
    config = write(tmp_path / "c.toml", text)
    refused(snaffle("solve", "--config", str(config), "--repo", ".", "--issue", "x", "--out", "o"), *words)


@pytest.mark.parametrize(
    ("override", "words"),
    (
        ("top_kk=3", ("top_kk", "did you mean 'top_k'")),
        ("samples", ("'samples'", "KEY=VALUE")),
        ("timeout=soon", ("timeout", "number")),
        ("apply=maybe", ("apply", "true or false")),
        ("sandbox=docker", ("sandbox", "bubblewrap")),
        ("early_stop=maybe", ("early_stop", "true or false")),
        ("max_samples=many", ("max_samples", "integer")),
    ),
)
def test_a_bad_override_is_one_line_naming_the_key(tmp_path: Path, override: str, words: tuple[str, ...]) -> None:
    refused(snaffle("solve", "-c", override, "--repo", ".", "--issue", "x", "--out", str(tmp_path)), *words)


def test_a_missing_config_file_and_an_abbreviated_option_are_refused(tmp_path: Path) -> None:
    refused(snaffle("solve", "--config", str(tmp_path / "nope.toml")), "nope.toml", "cannot read")
    config = write(tmp_path / "c.toml", "samples = 2\n")
    refused(snaffle("solve", "--conf", str(config), "--repo", ".", "--issue", "x", "--out", "o"), "in full")


def test_what_no_layer_gives_is_still_required(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", 'repo = "."\n')
    refused(snaffle("solve", "--config", str(config), "--out", "o"), "--issue")
    refused(snaffle("solve", "--issue", "x", "--out", "o"), "--repo")


def test_swebench_run_takes_the_same_layers(tmp_path: Path, scripted: Start) -> None:
    config = write(tmp_path / "batch.toml", 'instances = "missing.jsonl"\nworkers = 3\n')
    got = shown("swebench", "run", "--config", str(config), "-c", "samples=1")
    assert (got["workers"]["value"], got["samples"]["from"]) == (3, "-c")
    url = scripted([]).base_url
    proc = snaffle("swebench", "run", "--config", str(config), "--out", str(tmp_path / "out"), "--base-url", url)
    assert proc.returncode == 2 and "missing.jsonl" in proc.stderr, proc.stderr
    refused(snaffle("swebench", "run", "-c", "wokers=2", "--instances", "i", "--out", "o"), "wokers")


def test_config_show_refuses_a_command_without_settings() -> None:
    refused(snaffle("config", "show", "prompt-size"), "prompt-size")


def test_a_run_from_a_config_file_records_its_settings(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted(FIX_SCRIPT)
    issue = write(tmp_path / "issue.md", CALC_ISSUE)
    body = (
        f'arm = "minimal"\nrepo = "{calc_repo}"\nissue_file = "issue.md"\nout = "run"\n'
        f'base_url = "{server.base_url}"\nmodel = "scripted"\nmax_turns = 9\n'
    )
    config = write(tmp_path / "run.toml", body)
    proc = snaffle("solve", "--config", str(config), "-c", "max_turns=8", "--timeout", "120", cwd=calc_repo)
    assert proc.returncode == 0, proc.stderr
    header = read_trajectory(tmp_path / "run" / "trajectory.jsonl").header
    assert header is not None and header["caps"]["max_turns"] == 8
    settings = header["settings"]
    assert settings["issue_file"] == {"value": str(issue), "from": f"config {config}"}
    assert settings["max_turns"] == {"value": 8, "from": "-c"}
    assert settings["timeout"] == {"value": 120.0, "from": "flag"}
    assert "issue" not in settings and header["task"]["issue"] == CALC_ISSUE


def test_a_batch_keeps_its_settings_as_a_config_file(tmp_path: Path, scripted: Start) -> None:
    from tests.swebench_helpers import ONE_SHOT_FIX, make_mirror, three_instances, write_jsonl

    mirror, commits = make_mirror(tmp_path)
    instances = write_jsonl(tmp_path / "instances.jsonl", three_instances(commits)[:1])
    server = scripted([ONE_SHOT_FIX])
    body = 'arm = "minimal"\ninstances = "instances.jsonl"\nrepos = "mirror"\nmodel = "scripted"\nmax_turns = 3\n'
    config = write(tmp_path / "batch.toml", body)
    out = tmp_path / "out"
    proc = snaffle("swebench", "run", "--config", str(config), "--base-url", server.base_url, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ran"] == 1
    kept = (out / "settings.toml").read_text()
    assert f"# config {config}" in kept and "# flag" in kept
    again = shown("swebench", "run", "--config", str(out / "settings.toml"))
    assert again["instances"]["value"] == str(instances) and again["repos"]["value"] == str(mirror)
    assert (again["max_turns"]["value"], again["base_url"]["value"]) == (3, server.base_url)


def test_no_config_file_is_read_unless_named(tmp_path: Path) -> None:
    """A checkout cannot change how snaffle runs on it: a settings file lying there is no --config."""
    for name in ("snaffle.toml", ".snaffle.toml", "config.toml"):
        write(tmp_path / name, 'sandbox = "none"\napply = true\n')
    got = shown("solve", "--repo", str(tmp_path), cwd=tmp_path)
    assert (got["sandbox"], got["apply"]) == (
        {"value": "bubblewrap", "from": "default"},
        {"value": False, "from": "default"},
    )


def test_the_line_repair_settings_are_settings_and_bad_values_are_refused(tmp_path: Path) -> None:
    got = shown("solve", "-c", "line_entities=2", "--line-passes", "2", "--no-line-repair")
    assert got["line_entities"] == {"value": 2, "from": "-c"}
    assert got["line_passes"] == {"value": 2, "from": "flag"}
    assert got["line_repair"] == {"value": False, "from": "flag"}
    args = ("--repo", ".", "--issue", "x", "--out", str(tmp_path / "o"), "--base-url", "http://127.0.0.1:9/v1")
    refused(snaffle("solve", "--line-entities", "0", *args), "--line-entities must be at least 1")
    passes = snaffle("solve", "--line-passes", "5", *args)
    assert passes.returncode == 2 and "--line-passes: invalid choice: 5" in passes.stderr
    refused(snaffle("solve", "-c", "line_passes=0", *args), "line_passes = '0': expected one of 1, 2, 3, 4")


def test_the_existing_failures_cap_is_a_setting_and_below_one_is_refused(tmp_path: Path) -> None:
    got = shown("solve", "-c", "max_existing_failures=12", "--line-nested")
    assert got["max_existing_failures"] == {"value": 12, "from": "-c"}
    assert got["line_nested"] == {"value": True, "from": "flag"}
    args = ("--repo", ".", "--issue", "x", "--out", str(tmp_path / "o"), "--base-url", "http://127.0.0.1:9/v1")
    refused(snaffle("solve", "--max-existing-failures", "0", *args), "max_existing_failures = 0: expected 1 or more")


def test_the_survivors_validation_budget_is_a_setting_and_nothing_is_refused(tmp_path: Path) -> None:
    got = shown("solve", "-c", "survivor_validation_s=30", "--no-mutation")
    assert got["survivor_validation_s"] == {"value": 30, "from": "-c"}
    assert got["mutation"] == {"value": False, "from": "flag"}
    args = ("--repo", ".", "--issue", "x", "--out", str(tmp_path / "o"), "--base-url", "http://127.0.0.1:9/v1")
    refused(
        snaffle("solve", "--survivor-validation-s", "0", *args), "survivor_validation_s = 0.0: expected more than 0"
    )
