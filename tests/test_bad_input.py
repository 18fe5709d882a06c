"""Bad input to `trace`, `ab`, `swebench grade`, `solve`, `localize`, `model` and `shim serve`: one clear line on
stderr naming the file, the line or the flag and what is wrong, exit 2, never a traceback, nothing of the user's
lost; a torn last line is not bad input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from snaffle.cli import main
from snaffle.exceptions import UserError
from snaffle.swebench.instances import load_instances
from snaffle.swebench.outputs import prediction_patches
from tests.helpers import CALC_SOURCE, CALC_TEST, make_repo
from tests.loopback import closed_port

ROOT = Path(__file__).resolve().parents[1]
TASK = {"instance_id": "x", "repo": "/nowhere", "issue": "add subtracts"}
HEADER = {
    "type": "header",
    "seq": 0,
    "t": 1.0,
    "format": "snaffle-trajectory/1",
    "arm": "minimal",
    "model": "m",
    "task": TASK,
    "caps": {"max_turns": 5},
}
CALL = {
    "type": "model_call",
    "seq": 1,
    "t": 2.0,
    "turn": 1,
    "usage": {"prompt_tokens": 10, "dollars": 0.0},
    "latency_s": 0.1,
    "response": {"content": "looking"},
    "cumulative": {"dollars": 0.0},
}
TOOL_CALL = {"type": "tool_call", "turn": 1, "id": "c1", "name": "bash", "arguments": {"command": "ls"}, "valid": True}
RESULT = {"type": "tool_result", "turn": 1, "call_id": "c1", "name": "bash", "output": "a.py", "ok": True}
EXIT = {"type": "exit", "seq": 5, "t": 3.0, "status": "submitted", "message": "done", "patch": "", "totals": {}}
GOOD = [HEADER, CALL, TOOL_CALL, RESULT, EXIT]
FILE = "trajectory.jsonl"


def line(event: object) -> str:
    return json.dumps(event)


def good_lines() -> list[str]:
    return [line(e) for e in GOOD]


def write_run(root: Path, text: str | bytes) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / FILE
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return root


def commands(run: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Every command that reads a trajectory, aimed at `run`; `ab` compares it against a good run."""
    good = tmp_path / "good"
    if not (good / FILE).is_file():
        write_run(good, "\n".join(good_lines()) + "\n")
    return {
        "show": ["trace", "show", str(run)],
        "stats": ["trace", "stats", str(run)],
        "labels": ["trace", "labels", str(run)],
        "html": ["trace", "html", str(run), "-o", str(tmp_path / "report.html")],
        "ab": ["ab", str(good), str(run)],
    }


COMMANDS = ("show", "stats", "labels", "html", "ab")


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    """The command exits 2 with exactly one line on stderr holding every needle (and no traceback)."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("snaffle: error: "), err
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


def with_line(number: int, text: str) -> str:
    """The good trajectory with line `number` (1-based) replaced by `text`."""
    lines = good_lines()
    lines[number - 1] = text
    return "\n".join(lines) + "\n"


BAD_TRAJECTORIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("a list line", with_line(2, "[1, 2]"), (f"{FILE}:2:", "JSON object", "a list")),
    ("a string line", with_line(3, '"x"'), (f"{FILE}:3:", "JSON object", "a string")),
    ("a number line", with_line(4, "3"), (f"{FILE}:4:", "JSON object", "a number")),
    ("a list header", with_line(1, "[]"), (f"{FILE}:1:", "JSON object")),
    ("a line without a type", with_line(3, '{"seq": 2}'), (f"{FILE}:3:", '"type"')),
    (
        "turn not an integer",
        with_line(2, line({**CALL, "turn": "abc"})),
        (f"{FILE}:2:", "model_call", '"turn"', "a string"),
    ),
    ("usage a list", with_line(2, line({**CALL, "usage": []})), (f"{FILE}:2:", '"usage"', "a list", "an object")),
    ("dollars a string", with_line(2, line({**CALL, "usage": {"dollars": "1"}})), (f"{FILE}:2:", '"usage.dollars"')),
    ("latency a string", with_line(2, line({**CALL, "latency_s": "slow"})), (f"{FILE}:2:", '"latency_s"')),
    ("output a number", with_line(4, line({**RESULT, "output": 5})), (f"{FILE}:4:", "tool_result", '"output"')),
    ("ok a string", with_line(4, line({**RESULT, "ok": "yes"})), (f"{FILE}:4:", '"ok"')),
    ("arguments a string", with_line(3, line({**TOOL_CALL, "arguments": "str"})), (f"{FILE}:3:", '"arguments"')),
    ("totals a list", with_line(5, line({**EXIT, "totals": [1]})), (f"{FILE}:5:", "exit", '"totals"')),
    ("a total a string", with_line(5, line({**EXIT, "totals": {"dollars": "x"}})), (f"{FILE}:5:", "totals.dollars")),
    ("task a string", with_line(1, line({**HEADER, "task": "x"})), (f"{FILE}:1:", "header", '"task"')),
    ("a cap a string", with_line(1, line({**HEADER, "caps": {"max_turns": "5"}})), (f"{FILE}:1:", "caps.max_turns")),
    (
        "another format",
        with_line(1, line({**HEADER, "format": "snaffle-trajectory/99"})),
        (f"{FILE}:1:", "unsupported trajectory format snaffle-trajectory/99 (this snaffle reads snaffle-trajectory/1)"),
    ),
    ("no format", with_line(1, line({k: v for k, v in HEADER.items() if k != "format"})), (f"{FILE}:1:", "format")),
    ("no header", "\n".join(good_lines()[1:]) + "\n", (f"{FILE}:1:", "no header")),
    ("an empty file", "", (FILE, "empty")),
    ("only blank lines", "\n\n  \n", (FILE, "empty")),
    ("a torn middle line", with_line(3, '{"type": "tool_ca'), (f"{FILE}:3:", "corrupt")),
    ("a bad line after a blank one", line(HEADER) + "\n\n" + "[1]\n", (f"{FILE}:3:", "JSON object")),
)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("case", "text", "needles"), BAD_TRAJECTORIES, ids=[c[0] for c in BAD_TRAJECTORIES])
def test_a_bad_trajectory_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, case: str, text: str, needles: tuple[str, ...]
) -> None:
    run = write_run(tmp_path / "bad", text)
    refused(capsys, commands(run, tmp_path)[command], str(run / FILE), *needles)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_binary_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    blob = bytes(range(256)) * 4 + b"\n" + bytes(range(255, -1, -1)) * 4
    for run in (write_run(tmp_path / "blob", blob), write_run(tmp_path / "blob-one-line", blob.replace(b"\n", b""))):
        refused(capsys, commands(run, tmp_path)[command], str(run / FILE), "a binary file")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_with_no_trajectory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    empty = tmp_path / "empty"
    (empty / "some-instance").mkdir(parents=True)
    refused(capsys, commands(empty, tmp_path)[command], str(empty), "no trajectory")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_torn_last_line_is_tolerated(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    run = write_run(tmp_path / "torn", "\n".join([*good_lines()[:-1], '{"type": "exit", "sta']))
    assert main(commands(run, tmp_path)[command]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command", COMMANDS)
def test_what_the_writers_write_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Nulls where a field is unknown, a rejected call's raw argument string, stage fields, unknown event types."""
    lines = [
        line({**HEADER, "fixed_context_tokens": None, "caps": {"max_turns": 5, "timeout_s": 0.5}}),
        line({**CALL, "response": {"content": None, "reasoning_content": None, "tool_calls": []}, "shim": {}}),
        line({**TOOL_CALL, "arguments": '{"command": ', "valid": False, "error": "not JSON"}),
        line({"type": "gate", "turn": 1, "call_id": None, "gate": "format", "ok": False, "reason": "no call"}),
        line({"type": "stage", "stage": "validate", "decision": "kept", "sample": 1, "fixed": True}),
        line({"type": "retry", "sample": 2, "attempt": 1, "error": "503", "wait_s": 0.5}),
        line({"type": "something_new", "turn": 2, "anything": [1, {"x": None}]}),
        line({**EXIT, "totals": {"dollars": 0.25, "elapsed_s": 3, "refusals": 0}}),
    ]
    run = write_run(tmp_path / "run", "\n".join(lines) + "\n")
    assert main(commands(run, tmp_path)[command]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command", COMMANDS)
def test_arguments_are_the_tools_business(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Inside a valid call's arguments anything goes; the readers look at what they know and skip the rest."""
    odd = {**TOOL_CALL, "name": "str_replace_editor", "arguments": {"command": ["view"], "path": {"x": 1}}}
    run = write_run(tmp_path / "run", with_line(3, line(odd)))
    assert main(commands(run, tmp_path)[command]) == 0
    assert capsys.readouterr().err == ""


def test_a_bad_result_json_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "run", "\n".join(good_lines()) + "\n")
    (run / "result.json").write_text(json.dumps({"instance_id": "x", "totals": []}))
    refused(capsys, ["trace", "stats", str(run)], str(run / "result.json"), '"totals"')
    (run / "result.json").write_text("[1, 2]")
    refused(capsys, ["trace", "stats", str(run)], str(run / "result.json"), "JSON object")


FOLLOWED = (
    "a list line",
    "turn not an integer",
    "arguments a string",
    "another format",
    "no header",
    "a torn middle line",
)


@pytest.mark.parametrize(
    ("case", "text", "needles"), [c for c in BAD_TRAJECTORIES if c[0] in FOLLOWED], ids=list(FOLLOWED)
)
def test_follow_refuses_what_show_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, text: str, needles: tuple[str, ...]
) -> None:
    run = write_run(tmp_path / "bad", text)
    refused(capsys, ["trace", "show", str(run), "--follow", "--idle-timeout", "0.2"], str(run / FILE), *needles)


def test_show_reads_a_trajectory_of_any_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "saved.txt"
    path.write_text("\n".join(good_lines()) + "\n")
    assert main(["trace", "show", str(path)]) == 0
    assert "submitted: done" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("report", "needle"),
    [
        ("[1]", "JSON object"),
        ('{"resolved_ids": 3}', "resolved_ids"),
        ('{"resolved_ids": [], "error_ids": 1}', "error_ids"),
        ("\x00\x01", "report"),
    ],
)
def test_a_bad_report_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], report: str, needle: str) -> None:
    run = write_run(tmp_path / "run", "\n".join(good_lines()) + "\n")
    (tmp_path / "report.json").write_text(report)
    refused(capsys, ["trace", "stats", str(run), "--report", str(tmp_path / "report.json")], needle)
    refused(capsys, ["ab", str(run), str(run), "--report", str(tmp_path / "report.json")], needle)


@pytest.mark.parametrize(
    ("gold", "needle"),
    [
        ('[{"patch": "diff"}]', "instance_id"),
        ('[{"instance_id": "x", "patch": 5}]', "patch"),
        ('{"instance_id": "x", "patch": "d"}\n[2]\n', "JSON object"),
    ],
)
def test_bad_gold_patches_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gold: str, needle: str
) -> None:
    run = write_run(tmp_path / "run", "\n".join(good_lines()) + "\n")
    (tmp_path / "gold.json").write_text(gold)
    refused(capsys, ["trace", "labels", str(run), "--gold", str(tmp_path / "gold.json")], str(tmp_path), needle)


def test_the_real_cli_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    run = write_run(tmp_path / "bad", with_line(2, "[1, 2]"))
    code = "import sys; from snaffle.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, "trace", "stats", str(run)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr and f"{FILE}:2:" in proc.stderr


# --- swebench grade: predictions and instances ---


def instance_row(instance_id: str = "acme__calc-1") -> dict[str, str]:
    return {"instance_id": instance_id, "repo": "acme/calc", "base_commit": "0" * 40, "problem_statement": "add"}


def grade(tmp_path: Path, predictions: Path, instances: Path | None = None) -> list[str]:
    if instances is None:
        instances = tmp_path / "instances.jsonl"
        instances.write_text(json.dumps(instance_row()) + "\n")
    return [
        "swebench",
        "grade",
        "--instances",
        str(instances),
        "--predictions",
        str(predictions),
        "--out",
        str(tmp_path / "graded"),
        "--grader",
        "local",
    ]


PREDICTION = {"instance_id": "acme__calc-1", "model_name_or_path": "m", "model_patch": "diff --git a/x b/x\n"}
BAD_PREDICTIONS: tuple[tuple[str, bytes, tuple[str, ...]], ...] = (
    ("invalid JSON line", f"{line(PREDICTION)}\n{{nope\n{line(PREDICTION)}\n".encode(), (":2:", "not valid JSON")),
    ("invalid JSON list", b'[{"instance_id": "a",\n "model_patch": }]', (":2:", "not valid JSON")),
    ("a single invalid line", b"{nope", (":1:", "not valid JSON")),
    ("binary", bytes(range(256)) * 8, ("a binary file",)),
    ("a list line", f"{line(PREDICTION)}\n[1, 2]\n".encode(), (":2:", "JSON object", "got [1, 2]")),
    ("a list of numbers", b"[1, 2]\n", ("[0]", "JSON object", "got 1")),
    ("a number in a list", b'[{"instance_id": "a", "model_patch": ""}, 3]', ("[1]", "JSON object", "got 3")),
    ("a top-level object", b'{"acme__calc-1": "diff"}\n', (":1:", '"instance_id"')),
    ("no instance_id", line({"model_patch": "d"}).encode() + b"\n", (":1:", '"instance_id"')),
    ("instance_id a number", line({**PREDICTION, "instance_id": 7}).encode() + b"\n", (":1:", '"instance_id"')),
    ("no model_patch", line({"instance_id": "a"}).encode() + b"\n", (":1:", '"model_patch"')),
    ("model_patch a number", line({**PREDICTION, "model_patch": 5}).encode() + b"\n", (":1:", '"model_patch"')),
    ("an id twice", (line(PREDICTION) + "\n").encode() * 2, (":2:", "acme__calc-1", "twice", "preds.jsonl:1)")),
    ("an empty file", b"", ("no predictions",)),
    ("a list of none", b"[]", ("no predictions",)),
)


@pytest.mark.parametrize(("case", "data", "needles"), BAD_PREDICTIONS, ids=[c[0] for c in BAD_PREDICTIONS])
def test_bad_predictions_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, data: bytes, needles: tuple[str, ...]
) -> None:
    path = tmp_path / "preds.jsonl"
    path.write_bytes(data)
    refused(capsys, grade(tmp_path, path), str(path), *needles)
    assert not (tmp_path / "graded").exists()


def test_predictions_read_back(tmp_path: Path) -> None:
    """JSON lines with a null patch (SWE-bench's empty prediction) and a torn last line; a JSON list."""
    path = tmp_path / "preds.jsonl"
    rows = [PREDICTION, {**PREDICTION, "instance_id": "b", "model_patch": None}]
    path.write_text("".join(line(r) + "\n" for r in rows) + '\n{"instance_id": "c", "model_pa')
    assert prediction_patches(path) == {"acme__calc-1": PREDICTION["model_patch"], "b": ""}
    path.write_text(json.dumps(rows, indent=2))
    assert prediction_patches(path) == {"acme__calc-1": PREDICTION["model_patch"], "b": ""}


BAD_INSTANCES: tuple[tuple[str, bytes, tuple[str, ...]], ...] = (
    (
        "invalid JSON line 3",
        f"{line(instance_row('a'))}\n{line(instance_row('b'))}\n{{nope\n".encode(),
        (":3:", "not JSON"),
    ),
    ("a list line", f"{line(instance_row())}\n[1]\n".encode(), (":2:", "JSON object")),
    ("binary", bytes(range(256)) * 8, ("cannot read instances",)),
    ("a test list not JSON", line({**instance_row(), "FAIL_TO_PASS": "[nope"}).encode(), (":1:", "FAIL_TO_PASS")),
    ("a test list a number", line({**instance_row(), "PASS_TO_PASS": 5}).encode(), (":1:", "PASS_TO_PASS")),
    ("a patch a number", line({**instance_row(), "patch": 5}).encode(), (":1:", "'patch'")),
    ("a truncated gzip", gzip.compress(line(instance_row()).encode() * 50)[:-20], ("cannot read instances",)),
)


@pytest.mark.parametrize(("case", "data", "needles"), BAD_INSTANCES, ids=[c[0] for c in BAD_INSTANCES])
def test_bad_instances_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, data: bytes, needles: tuple[str, ...]
) -> None:
    path = tmp_path / ("instances.jsonl.gz" if case.endswith("gzip") else "instances.jsonl")
    path.write_bytes(data)
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(line(PREDICTION) + "\n")
    refused(capsys, grade(tmp_path, predictions, path), str(path), *needles)
    with pytest.raises(UserError):
        load_instances(path)


# --- solve and localize: the issue file, the repository, the failing test, the base URL ---


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    files: dict[str, str | bytes] = {"calc/__init__.py": CALC_SOURCE, "tests/test_calc.py": CALC_TEST}
    return make_repo(tmp_path / "calc", files)


def solve(repo: Path, tmp_path: Path, *args: str) -> list[str]:
    return ["solve", "--repo", str(repo), "--base-url", closed_port(), "--out", str(tmp_path / "out"), *args]


def localize(repo: Path, tmp_path: Path, *args: str) -> list[str]:
    return ["localize", "--repo", str(repo), *args]


BAD_ISSUE_FILES: tuple[tuple[str, bytes, str], ...] = (
    ("not UTF-8", b"add subtracts \xff\xfe\x80", "is not UTF-8 text"),
    ("a NUL byte", b"add subtracts\x00\x01\x02", "a binary file"),
    ("an image", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "a binary file"),
    ("empty", b"", "issue text is empty"),
    ("only blanks", b" \n\t\n", "issue text is empty"),
)


@pytest.mark.parametrize("command", (solve, localize), ids=("solve", "localize"))
@pytest.mark.parametrize(("case", "data", "needle"), BAD_ISSUE_FILES, ids=[c[0] for c in BAD_ISSUE_FILES])
def test_a_bad_issue_file_is_one_line(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: object, case: str, data: bytes, needle: str
) -> None:
    issue = tmp_path / "issue.md"
    issue.write_bytes(data)
    argv = command(repo, tmp_path, "--issue-file", str(issue))  # type: ignore[operator]
    refused(capsys, argv, needle)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", (solve, localize), ids=("solve", "localize"))
def test_a_repository_that_is_not_one_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: object
) -> None:
    plain, a_file = tmp_path / "plain", tmp_path / "a-file"
    plain.mkdir()
    a_file.write_text("x")
    for where, needle in ((plain, "not a git repository"), (a_file, "repository not found"), (tmp_path / "no", "not")):
        refused(capsys, command(where, tmp_path, "--issue", "x"), str(where), needle)  # type: ignore[operator]


BAD_NODE_IDS: tuple[tuple[str, str, str], ...] = (
    ("empty", "", "is empty"),
    ("blank", "  ", "is empty"),
    ("an option", "-pevil", "looks like an option"),
    ("a long option", "--pre=touch /tmp/x", "looks like an option"),
    ("a newline", "tests/test_calc.py::test_add\nrm -rf /", "control character"),
    ("a NUL", "tests/test_calc.py\x00::test_add", "control character"),
    ("absolute", "/etc/passwd::x", "outside the repository"),
    ("outside", "../../etc/passwd", "outside the repository"),
    ("missing", "tests/test_nope.py::test_add", "tests/test_nope.py is not in the repository"),
    ("an empty name", "tests/test_calc.py::", "empty name"),
    ("an empty middle name", "tests/test_calc.py::::test_add", "empty name"),
)


@pytest.mark.parametrize("command", (solve, localize), ids=("solve", "localize"))
@pytest.mark.parametrize(("case", "node", "needle"), BAD_NODE_IDS, ids=[c[0] for c in BAD_NODE_IDS])
def test_a_malformed_failing_test_is_one_line(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: object, case: str, node: str, needle: str
) -> None:
    argv = command(repo, tmp_path, "--issue", "x", f"--failing-test={node}")  # type: ignore[operator]
    refused(capsys, argv, "--failing-test", needle, "pytest node id")
    assert not (tmp_path / "out").exists()


def test_a_good_failing_test_passes_the_front_door(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Accepted node ids reach the endpoint check (a closed port here: exit 3), so the front door let them in."""
    for node in ("tests/test_calc.py::test_add", "tests/test_calc.py", "tests", "tests/test_calc.py::test_add[a b]"):
        assert main(solve(repo, tmp_path, "--issue", "x", "--failing-test", node)) == 3
        assert "unreachable" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["localhost:8080/v1", "ftp://127.0.0.1/v1", "http://", "http://127.0.0.1:99999/v1"])
def test_a_base_url_that_is_no_url_is_one_line(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    argv = ["solve", "--repo", str(repo), "--issue", "x", "--base-url", url, "--out", str(tmp_path / "out")]
    refused(capsys, argv, "--base-url", "http:// or https://")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["solve", "--max-turns", "many"], "--max-turns"),
        (["solve", "--arm", "maximal"], "--arm"),
        (["localize", "--top", "x"], "--top"),
        (["model", "path", "--size", "7b"], "--size"),
        (["model", "serve", "--size", "7b"], "--size"),
        (["model", "serve", "--port", "eighty"], "--port"),
        (["shim", "serve", "--db", "x"], "--upstream"),
        (["no-such-command"], "no-such-command"),
    ],
)
def test_an_argument_parsers_refusal_is_one_line(argv: list[str], needle: str) -> None:
    code = "import sys; from snaffle.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and " error: " in proc.stderr and needle in proc.stderr, proc.stderr
    assert "--help" in proc.stderr


# --- model serve and shim serve ---


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "99999"], "--port"),
        (["--port", "-1"], "--port"),
        (["--threads", "-1"], "--threads"),
        (["--ctx", "0"], "--ctx"),
        (["--ctx", "-5"], "--ctx"),
    ],
)
def test_model_serve_refuses_bad_numbers_before_anything(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    refused(capsys, ["model", "serve", *args], needle)


def shim_serve(*args: str) -> subprocess.CompletedProcess[str]:
    """`snaffle shim serve` in a subprocess: a defence that is missing shows as a shim that serves (a timeout)."""
    code = "import sys; from snaffle.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "shim", "serve", "--port", "0", *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=30)


def shim_refused(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("snaffle shim: ") and "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


@pytest.mark.parametrize("upstream", ["nothing", "localhost:8080/v1", "ftp://127.0.0.1/v1", "http://", "http://h:0/v1"])
def test_shim_serve_refuses_an_upstream_that_is_no_url(tmp_path: Path, upstream: str) -> None:
    proc = shim_serve("--upstream", upstream, "--db", str(tmp_path / "ledger.sqlite"))
    shim_refused(proc, "--upstream", "http:// or https://")
    assert not (tmp_path / "ledger.sqlite").exists()


def test_shim_serve_never_overwrites_a_file_that_is_not_a_ledger(tmp_path: Path) -> None:
    for name, data in (("notes.txt", b"x"), ("big.txt", b"my notes\n" * 500), ("bin", bytes(range(256)))):
        path = tmp_path / name
        path.write_bytes(data)
        shim_refused(shim_serve("--upstream", closed_port(), "--db", str(path)), str(path), "not a SQLite")
        assert path.read_bytes() == data


@pytest.mark.parametrize(
    ("where", "needle"),
    [("a-dir", "cannot open the ledger"), ("missing/sub/ledger.sqlite", "cannot open the ledger")],
)
def test_shim_serve_refuses_a_ledger_it_cannot_write(tmp_path: Path, where: str, needle: str) -> None:
    (tmp_path / "a-dir").mkdir()
    shim_refused(shim_serve("--upstream", closed_port(), "--db", str(tmp_path / where)), needle, "--db")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "99999"], "--port"),
        (["--max-turns", "-1"], ">= 0"),
        (["--max-dollars", "-0.5"], ">= 0"),
        (["--run-max-dollars", "-1"], ">= 0"),
        (["--upstream-timeout", "-1"], "--upstream-timeout"),
        (["--max-body-bytes", "0"], "--max-body-bytes"),
        (["--reserve-output-tokens", "-1"], "--reserve-output-tokens"),
    ],
)
def test_shim_serve_refuses_bad_numbers(tmp_path: Path, args: list[str], needle: str) -> None:
    proc = shim_serve("--upstream", closed_port(), "--db", str(tmp_path / "ledger.sqlite"), *args)
    shim_refused(proc, needle)


def test_shim_serve_refuses_a_binary_pricing_file(tmp_path: Path) -> None:
    pricing = tmp_path / "pricing.toml"
    pricing.write_bytes(bytes(range(256)))
    proc = shim_serve("--upstream", closed_port(), "--db", str(tmp_path / "l.sqlite"), "--pricing", str(pricing))
    shim_refused(proc, str(pricing), "UTF-8")
