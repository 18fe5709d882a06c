"""`snaffle` as a user runs it: real subprocesses, one-line errors, exit codes."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest import MonkeyPatch

from snaffle.testing import ScriptedServer
from snaffle.trajectory import read_trajectory
from tests.helpers import CALC_ISSUE, FIX_SCRIPT, Start, bash
from tests.loopback import busy_server, closed_port, web_page


def snaffle(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "snaffle.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def minimal_solve(repo: Path, issue: str, base_url: str, out: Path) -> list[str]:
    return [
        "solve",
        "--arm",
        "minimal",
        "--repo",
        str(repo),
        "--issue",
        issue,
        "--base-url",
        base_url,
        "--out",
        str(out),
        "--json",
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_version_and_help() -> None:
    assert snaffle("--version").stdout.startswith("snaffle ")
    for command in ([], ["solve"], ["prompt-size"]):
        proc = snaffle(*command, "--help")
        assert proc.returncode == 0 and "usage: snaffle" in proc.stdout


def test_solve_fixes_the_planted_bug(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted(FIX_SCRIPT)
    out = tmp_path / "run"
    proc = snaffle(*minimal_solve(calc_repo, CALC_ISSUE, server.base_url, out), "--model", "scripted")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["exit_status"] == "submitted"
    assert "return a + b" in (out / "patch.diff").read_text()


def test_api_key_never_reaches_a_file(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    secret = "sk-test-very-secret-key-123"
    server = scripted([bash("echo $OPENAI_API_KEY; env | grep -c SECRET_KEY || true"), {"content": "DONE"}])
    out = tmp_path / "run"
    env = {**os.environ, "MY_KEY": secret}
    proc = snaffle(
        *minimal_solve(calc_repo, f"fix it {secret}", server.base_url, out), "--api-key-env", "MY_KEY", env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert server.requests[0].headers.get("authorization") == f"Bearer {secret}"
    assert (out / "ledger.sqlite").exists()
    for path in out.iterdir():
        assert secret.encode() not in path.read_bytes(), path
    result = json.loads((out / "result.json").read_text())
    assert result["shim"]["calls"] == 2 and result["usage_disagreement"] is False


def test_bad_inputs_fail_in_one_line(calc_repo: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    dead = f"http://127.0.0.1:{free_port()}/v1"
    cases = [
        (["--repo", str(tmp_path / "missing"), "--issue", "x"], "repository not found"),
        (["--repo", str(plain), "--issue", "x"], "not a git repository"),
        (["--repo", str(calc_repo), "--issue-file", str(tmp_path / "nope.md")], "cannot read the issue file"),
        (["--repo", str(calc_repo), "--issue", "   "], "issue text is empty"),
        (["--repo", str(calc_repo), "--issue", "x", "--max-turns", "-1"], "caps must be >= 0"),
        (["--repo", str(calc_repo), "--issue", "x", "--memory-mb", "-5"], "a size cannot be negative: -5"),
        (["--repo", str(calc_repo), "--issue", "x", "--disk-mb", "lots"], "not a whole number of MB: 'lots'"),
    ]
    for args, message in cases:
        proc = snaffle("solve", *args, "--base-url", dead, "--out", str(tmp_path / "out"))
        assert proc.returncode != 0
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], proc.stderr
    proc = snaffle("solve", "--repo", str(calc_repo), "--issue", "x", "--base-url", dead, "--out", str(tmp_path / "o"))
    assert proc.returncode != 0 and "unreachable" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    env = {k: v for k, v in os.environ.items() if k != "SNAFFLE_BASE_URL"}
    proc = snaffle("solve", "--repo", str(calc_repo), "--issue", "x", "--out", str(tmp_path / "o"), env=env)
    assert proc.returncode != 0 and "pass --base-url or set SNAFFLE_BASE_URL" in proc.stderr


def test_the_memory_cap_is_the_users_to_set(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    """`--memory-mb`: a repository whose tests need more than the packaged 4 GiB, or a user who wants less. A patch
    that floods memory is killed at the cap the user gave, and the validation says so."""
    flood = {"name": "edit_entity", "arguments": {"selector": "calc/__init__.py::add", "search": "return a - b"}}
    flood["arguments"]["replace"] = "return [bytearray(2**24) for _ in iter(int, 1)]"
    server = scripted([{"tool_calls": [flood]}, {"content": "DONE"}])
    out = tmp_path / "run"
    args = ["--repo", str(calc_repo), "--issue", CALC_ISSUE, "--base-url", server.base_url, "--model", "scripted"]
    options = [
        "--loop",
        "--samples",
        "1",
        "--no-reproduce",
        "--no-line-repair",
        "--memory-mb",
        "300",
        "--out",
        str(out),
    ]
    proc = snaffle("solve", *args, *options)
    trajectory = read_trajectory(out / "trajectory.jsonl")
    assert next(trajectory.of_type("exit"))["status"] == "no_valid_patch", proc.stderr
    validate = [e for e in trajectory.of_type("stage") if e["stage"] == "validate"]
    assert validate[0]["decision"] == "invalid" and validate[0]["stopped"] == "killed at the memory cap of 300 MB"
    assert next(trajectory.of_type("header"))["settings"]["memory_mb"] == {"value": 300, "from": "flag"}


def test_prompt_size_is_within_budget() -> None:
    for protocol in ("native", "text"):
        proc = snaffle("prompt-size", "--arm", "minimal", "--tool-protocol", protocol)
        assert json.loads(proc.stdout)["fixed_context_tokens"] <= 2000


def test_sigkill_mid_run_leaves_a_readable_trajectory(calc_repo: Path, tmp_path: Path) -> None:
    script = [bash(f"echo step {i}") for i in range(3)] + [{**bash("echo slow"), "delay": 30}]
    out = tmp_path / "run"
    with ScriptedServer(script) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "snaffle.cli", *minimal_solve(calc_repo, "x", server.base_url, out)]
        )
        deadline = time.monotonic() + 60
        while len(server.requests) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    trajectory = read_trajectory(out / "trajectory.jsonl")
    assert trajectory.header is not None and trajectory.exit is None
    assert len(list(trajectory.of_type("tool_result"))) == 3


def test_sigterm_records_interrupted(calc_repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ScriptedServer([bash("echo 1"), {**bash("echo 2"), "delay": 30}]) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "snaffle.cli", *minimal_solve(calc_repo, "x", server.base_url, out)]
        )
        deadline = time.monotonic() + 60
        while len(server.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert json.loads((out / "result.json").read_text())["exit_status"] == "interrupted"


def test_a_trajectory_that_cannot_grow_ends_in_state_error(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([bash(f"echo {'x' * 2000} {i}") for i in range(6)])
    out = tmp_path / "run"
    command = [sys.executable, "-m", "snaffle.cli", *minimal_solve(calc_repo, "x", server.base_url, out), "--no-shim"]
    proc = subprocess.run(["bash", "-c", 'ulimit -f 12; exec "$@"', "bash", *command], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["exit_status"] == "state_error" and "trajectory" in result["message"]
    assert read_trajectory(out / "trajectory.jsonl").header is not None


def test_demo_runs_end_to_end_on_the_scripted_model(tmp_path: Path) -> None:
    proc = snaffle("demo", "--scripted", "--out", str(tmp_path / "demo"))
    assert proc.returncode == 0, proc.stderr
    assert "tests before: FAILED" in proc.stdout and "tests after: passed" in proc.stdout
    assert "scripted model server" in proc.stdout and "the model fixed the bug." in proc.stdout
    assert json.loads((tmp_path / "demo" / "run" / "result.json").read_text())["exit_status"] == "validated"
    again = snaffle("demo", "--scripted", "--out", str(tmp_path / "demo"))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "not an empty directory" in again.stderr


def test_a_running_shim_enforces_its_limits_from_outside(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    from snaffle.shim.server import ShimConfig, start_shim
    from snaffle.types import Limits

    server = scripted([bash(f"echo {i}") for i in range(5)])
    out = tmp_path / "run"
    config = ShimConfig(upstream=server.base_url, db=tmp_path / "ledger.sqlite", limits=Limits(max_turns=2))
    with start_shim(config) as shim:
        args = ["solve", "--arm", "minimal", "--repo", str(calc_repo), "--issue", "x", "--out", str(out)]
        proc = snaffle(*args, "--shim", shim.url)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["exit_status"] == "max_turns_exceeded" and result["shim"]["calls"] == 2
    assert len(server.requests) == 2


def test_a_key_the_model_writes_and_echoes_reaches_no_file(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    secret = "sk-test-written-by-the-model-456"
    leak = f"echo {secret} > leaked.txt && echo {secret} >> calc/__init__.py && echo {secret}"
    server = scripted([bash(leak), {"content": f"DONE {secret}"}])
    out = tmp_path / "run"
    env = {**os.environ, "MY_KEY": secret}
    proc = snaffle(*minimal_solve(calc_repo, "fix it", server.base_url, out), "--api-key-env", "MY_KEY", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "leaked.txt" in (out / "patch.diff").read_text()
    report = tmp_path / "report.html"
    proc = snaffle("trace", "html", str(out), "-o", str(report), env=env)
    assert proc.returncode == 0, proc.stderr
    for path in [*out.rglob("*"), report]:
        assert path.is_dir() or secret.encode() not in path.read_bytes(), path
    assert secret not in (calc_repo / "calc" / "__init__.py").read_text() and not (calc_repo / "leaked.txt").exists()


def run_twice(repo: Path, start: Start, out: Path, *second: str) -> subprocess.CompletedProcess[str]:
    for number, extra in enumerate([(), second]):
        server = start(FIX_SCRIPT)
        proc = snaffle(*minimal_solve(repo, CALC_ISSUE, server.base_url, out), "--model", "scripted", *extra)
        if number == 0:
            assert proc.returncode == 0, proc.stderr
    return proc


def test_a_rerun_into_a_used_out_is_refused(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_twice(calc_repo, scripted, out)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "--overwrite" in lines[0], proc.stderr
    assert len(list(read_trajectory(out / "trajectory.jsonl").of_type("header"))) == 1


def test_overwrite_clears_a_previous_run(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_twice(calc_repo, scripted, out, "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert len(list(read_trajectory(out / "trajectory.jsonl").of_type("header"))) == 1
    result = json.loads((out / "result.json").read_text())
    assert result["shim"]["calls"] == len(FIX_SCRIPT) and result["usage_disagreement"] is False


def test_out_that_is_a_file_or_holds_other_files_is_refused(calc_repo: Path, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    a_file = tmp_path / "thesis.tex"
    a_file.write_text("years of work\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("years of work\n")
    (other / "result.json").write_text("{}\n")
    cases = [
        ([str(a_file)], "is a file"),
        ([str(a_file), "--overwrite"], "is a file"),
        ([str(other)], "--overwrite"),
        ([str(other), "--overwrite"], "thesis.tex"),
    ]
    for args, message in cases:
        proc = snaffle("solve", "--repo", str(calc_repo), "--issue", "x", "--base-url", dead, "--out", *args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], (args, proc.stderr)
    assert a_file.read_text() == "years of work\n" and (other / "thesis.tex").read_text() == "years of work\n"


def test_an_older_runs_unredacted_key_stays_out_of_the_report(trace_runs: dict[str, Path], tmp_path: Path) -> None:
    secret = "sk-test-from-an-older-snaffle-789"
    run = tmp_path / "old-run"
    shutil.copytree(trace_runs["clean"], run)
    (run / "patch.diff").write_text((run / "patch.diff").read_text() + f"+# {secret}\n")
    report = tmp_path / "report.html"
    proc = snaffle("trace", "html", str(run), "-o", str(report), env={**os.environ, "OPENAI_API_KEY": secret})
    assert proc.returncode == 0, proc.stderr
    assert secret.encode() not in report.read_bytes() and b"[redacted]" in report.read_bytes()


def test_a_batch_writes_the_key_into_no_prediction(tmp_path: Path, scripted: Start, monkeypatch: MonkeyPatch) -> None:
    from snaffle.adapters import AdapterSpec
    from snaffle.swebench.batch import BatchConfig, run_batch
    from snaffle.swebench.instances import load_instances
    from snaffle.swebench.progress import LineProgress
    from snaffle.swebench.workspaces import Sources
    from snaffle.types import Limits
    from tests.swebench_helpers import FIX_COMMAND, make_mirror, three_instances, write_jsonl

    secret = "sk-test-batch-key-0123456789"
    monkeypatch.setenv("MY_KEY", secret)
    mirror, commits = make_mirror(tmp_path)
    leak = {
        "content": f"{secret}\nDONE",
        "tool_calls": [{"name": "bash", "arguments": {"command": f"{FIX_COMMAND}; echo {secret} >> calc/__init__.py"}}],
    }
    server = scripted([{**leak, "repeat": 3}])
    instances = load_instances(write_jsonl(tmp_path / "instances.jsonl", three_instances(commits)))
    adapter = AdapterSpec("minimal", "scripted", api_key_env="MY_KEY")
    config = BatchConfig(
        instances, adapter, server.base_url, tmp_path / "out", Limits(max_turns=3), Sources(repos=mirror)
    )
    summary = run_batch(config, LineProgress(io.StringIO()))
    assert set(summary.statuses.values()) == {"submitted"}
    predictions = (tmp_path / "out" / "predictions.jsonl").read_bytes()
    assert b"[redacted]" in predictions and b"return a + b" in predictions
    for path in (tmp_path / "out").rglob("*"):
        assert path.is_dir() or secret.encode() not in path.read_bytes(), path


def one_error_line(stderr: str) -> str:
    """The one `snaffle: error:` line, the last on stderr (the in-process shim may log its calls before it)."""
    errors = [line for line in stderr.splitlines() if line.startswith("snaffle: error: ")]
    assert len(errors) == 1 and stderr.strip().splitlines()[-1] == errors[0] and "Traceback" not in stderr, stderr
    return errors[0]


def test_an_unreachable_endpoint_exits_3_in_one_line(calc_repo: Path, tmp_path: Path) -> None:
    dead = closed_port()
    for url in (dead, "http://no-such-host.invalid/v1"):
        proc = snaffle(*minimal_solve(calc_repo, "x", url, tmp_path / "out"))
        assert proc.returncode == 3, proc.stderr
        assert proc.stderr.count("\n") == 1 and "unreachable" in proc.stderr and url in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_busy_endpoint_is_reachable_and_the_run_ends_on_its_cap(calc_repo: Path, tmp_path: Path) -> None:
    """The start-up probe times out reading from a server that accepted it: solve goes on and ends on its time cap
    with a run record, instead of calling the endpoint unreachable."""
    out = tmp_path / "run"
    with busy_server() as url:
        proc = snaffle(*minimal_solve(calc_repo, "x", url, out), "--timeout", "2")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["exit_status"] == "timeout"
    assert json.loads((out / "result.json").read_text())["exit_status"] == "timeout"
    assert "unreachable" not in proc.stderr


def test_a_web_page_at_the_base_url_is_refused_at_start_up(calc_repo: Path, tmp_path: Path) -> None:
    with web_page() as url:
        proc = snaffle(*minimal_solve(calc_repo, "x", url, tmp_path / "out"))
    assert proc.returncode == 3, proc.stderr
    line = one_error_line(proc.stderr)
    assert proc.stderr.count("\n") == 1 and "not an OpenAI-compatible API" in line and "text/html" in line


@pytest.mark.parametrize("shim", [(), ("--no-shim",)], ids=["shim", "no-shim"])
def test_a_chat_answer_that_is_a_web_page_ends_the_run_with_a_record(
    calc_repo: Path, scripted: Start, tmp_path: Path, shim: tuple[str, ...]
) -> None:
    """The model list is fine but the chat answer is HTML: a model_error exit, result.json, one line, exit 3."""
    page = "<html><body>Welcome to nginx!</body></html>"
    server = scripted([{"raw_body": page, "repeat": 10}])
    out = tmp_path / "run"
    proc = snaffle(*minimal_solve(calc_repo, "x", server.base_url, out), *shim)
    assert proc.returncode == 3, proc.stderr
    assert "not a chat completion" in one_error_line(proc.stderr) and len(server.requests) == 1
    result = json.loads((out / "result.json").read_text())
    assert result["exit_status"] == "model_error" and "not a chat completion" in result["message"]
    trajectory = read_trajectory(out / "trajectory.jsonl")
    assert trajectory.exit is not None and trajectory.exit["status"] == "model_error"


def test_a_failing_test_that_does_not_exist_is_one_line_before_any_model_call(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    """pytest collects the node id in the sandbox on a private copy first: a test the file does not hold (and a
    file that holds no test) is refused in one line, exit 2, with the model never called and --out left unmade."""
    server = scripted(FIX_SCRIPT)
    (calc_repo / "tests" / "helpers_only.py").write_text("X = 1\n")
    for node in ("tests/test_calc.py::test_nope", "tests/helpers_only.py"):
        out = tmp_path / "run"
        proc = snaffle(*minimal_solve(calc_repo, CALC_ISSUE, server.base_url, out), "--failing-test", node)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.count("\n") == 1 and node in proc.stderr and "pytest collects no" in proc.stderr
        assert proc.stdout == "" and not out.exists()
    assert len(server.requests) == 0
    good = snaffle(
        *minimal_solve(calc_repo, CALC_ISSUE, server.base_url, tmp_path / "ok"),
        "--failing-test",
        "tests/test_calc.py::test_add",
    )
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["exit_status"] == "submitted" and len(server.requests) == len(FIX_SCRIPT)


CONSOLE_SCRIPT = "import sys; from snaffle.cli import main; sys.exit(main())"
"""What the installed `snaffle` script runs."""


@pytest.mark.parametrize(("args", "code"), ((("--help",), 0), (("--version",), 0), ((), 2)))
def test_help_and_version_import_neither_numpy_nor_the_pipeline(args: tuple[str, ...], code: int) -> None:
    command = [sys.executable, "-X", "importtime", "-c", CONSOLE_SCRIPT, *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == code and "snaffle" in proc.stdout
    modules = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "snaffle.cli" in modules
    heavy = {"numpy", "bm25s", "snaffle.agentless.pipeline", "snaffle.agentless.localize", "httpx", "rich"}
    assert not modules & heavy


def test_the_lazy_help_is_the_full_help() -> None:
    from snaffle.cli import build_parser

    assert build_parser("").format_help() == build_parser().format_help()


def all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from all_parsers(child)


def test_every_help_shows_every_default() -> None:
    from snaffle.cli import build_parser, shows_default

    missing, checked = [], 0
    for parser in all_parsers(build_parser()):
        text = parser.format_help()
        for action in parser._actions:
            if shows_default(action) and action.dest != "help":
                checked += 1
                if f"default {action.default}" not in " ".join(text.split()):
                    missing.append(f"{parser.prog} {action.option_strings[0]}")
    assert checked > 40 and not missing


def test_every_option_of_localize_has_help_and_swebench_speaks_to_users() -> None:
    options = " ".join(snaffle("localize", "--help").stdout.split("options:", 1)[1].split())
    for option, words in (("--repo REPO", "path of"), ("--issue ISSUE", "the issue"), ("--top TOP", "how many")):
        assert f"{option} {words}" in options
    assert "entities are shown (default 10)" in options
    text = snaffle("swebench", "--help").stdout
    assert "register" not in text and "Run a harness on SWE-bench instances" in text


def test_the_external_harnesses_named_for_help_are_the_adapters() -> None:
    from snaffle.adapters import EXTERNAL
    from snaffle.swebench import cli as swebench_cli

    assert swebench_cli.EXTERNAL == tuple(EXTERNAL)
