"""The program that runs one issue snippet inside the sandbox (`python -c` with this file's text; Python >= 3.7).

It reads `job.json` from its working directory: the statements, the kind (a `session` runs statement by statement as
the REPL would, printing each expression's value; a `script` runs whole), the expected values by statement, the
repository root and whether to measure coverage. Before each statement it prints a marker line; after each it
rewrites `report.json` (so a snippet killed later still leaves what it did). Coverage asked of an interpreter that
cannot import it leaves `coverage.missing` saying why. It imports nothing of snaffle.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import traceback
from typing import Any

LIMIT = 600


def main() -> None:
    with open("job.json", encoding="utf-8") as handle:
        job = json.load(handle)
    coverage = start_coverage(job)
    results: list[dict[str, Any]] = []
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        for number, source in enumerate(job["statements"]):
            print(job["marker"], number, flush=True)
            if coverage is not None:  # what an import runs (module bodies) is not what the snippet exercises
                coverage.switch_context("import" if only_imports(source) else "run")
            expected = job["expectations"].get(str(number))
            results.append(run_statement(source, job["kind"], expected, namespace))
            sys.stdout.flush()
            save(coverage, results)
            if "exception" in results[-1] and job["kind"] != "session":
                break
    finally:
        save(coverage, results)


def run_statement(source: str, kind: str, expected: str | None, namespace: dict[str, Any]) -> dict[str, Any]:
    """One statement's value (sessions), expectation check and exception, as a JSON-ready record."""
    result: dict[str, Any] = {}
    try:
        expression = compiled_expression(source) if kind == "session" or expected is not None else None
        if expression is not None:  # what the REPL would echo: the value, unless it is None
            value = eval(expression, namespace)
            shown = safe_repr(value)
            if value is not None or expected is not None:
                print(shown)
                result["value"] = shown
            if expected is not None:
                result["met"] = matches(value, shown, expected, namespace)
        else:
            mode = "single" if kind == "session" else "exec"
            exec(compile(source, "<snippet>", mode), namespace)
    except BaseException as exc:  # the snippet's own failure is the fact being recorded
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # this driver's frame left out
        result["exception"] = describe(exc, tb)
        traceback.print_exception(type(exc), exc, tb)
    return result


def compiled_expression(source: str) -> Any:
    """`source` compiled as one expression, or None when it is a statement."""
    try:
        return compile(source, "<snippet>", "eval")
    except SyntaxError:
        return None


def matches(value: Any, shown: str, expected: str, namespace: dict[str, Any]) -> bool:
    """The value equals the expected one: the same repr, or `==` the expected expression's value."""
    if " ".join(shown.split()) == " ".join(expected.split()):
        return True
    try:
        return bool(value == eval(expected, namespace))
    except Exception:
        return False


def only_imports(source: str) -> bool:
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in body)


def describe(exc: BaseException, tb: Any) -> dict[str, Any]:
    frames = [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(tb)]
    return {"type": type(exc).__name__, "message": safe_str(exc)[:LIMIT], "frames": frames[-40:]}


def safe_repr(value: Any) -> str:
    try:
        return repr(value)[:LIMIT]
    except Exception as exc:
        return f"<repr failed: {type(exc).__name__}>"


def safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return "<str failed>"


def start_coverage(job: dict[str, Any]) -> Any:
    if not job["coverage"]:
        return None
    try:
        import coverage
    except ImportError as exc:  # the snippet still runs; the missing measurement is said, not silent
        with open("coverage.missing", "w", encoding="utf-8") as handle:
            handle.write(f"{type(exc).__name__}: {exc}"[:LIMIT])
        return None
    measured = coverage.Coverage(data_file=os.path.abspath("coverage.data"), include=[job["root"] + "/*"])
    measured.start()
    return measured


def save(measured: Any, results: list[dict[str, Any]]) -> None:
    if measured is not None:
        measured.stop()
        measured.save()
        measured.start()
    with open("report.json.tmp", "w", encoding="utf-8") as handle:
        json.dump(results, handle)
    os.replace("report.json.tmp", "report.json")


if __name__ == "__main__":
    main()
