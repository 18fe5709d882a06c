"""The program that runs one issue snippet inside the sandbox (`python -c` with this file's text; Python >= 3.7).

It reads `job.json` from its working directory: the statements, the kind (a `session` runs statement by statement as
the REPL would, printing each expression's value; a `script` runs whole), the expected values by statement, the
repository root, whether to measure coverage and which functions to watch. Before each statement it prints a marker
line; after each it rewrites `report.json` (so a snippet killed later still leaves what it did). Coverage asked of an
interpreter that cannot import it leaves `coverage.missing` saying why. A watched function's calls are recorded per
statement (arguments, and what it returned, yielded or raised) with `sys.settrace`, which coverage would replace: a
run watches or measures, not both. It imports nothing of snaffle.
"""

from __future__ import annotations

import ast
import dis
import json
import os
import re
import sys
import traceback
from typing import Any

LIMIT = 600
VALUE_LIMIT = 80
"""A watched call's argument or result is cut to this many characters."""
CALLS_PER_FUNCTION = 3
"""Calls recorded per watched function in the whole run (a loop or recursion records its first ones), unless the job
says another number."""
SAVED_STARTS = 64
"""A statement's first calls rewrite the report as they start (one that never ends is still said); later ones wait
for the statement's end, so a run watching hundreds of functions does not rewrite a growing report at every call."""
YIELDS = 4
"""Values recorded per generator call."""
YIELD_OPS = frozenset(dis.opmap[n] for n in ("YIELD_VALUE", "YIELD_FROM") if n in dis.opmap)
LEAVE_OPS = YIELD_OPS | frozenset(dis.opmap[n] for n in ("RETURN_VALUE", "RETURN_CONST") if n in dis.opmap)
"""A frame that ends on one of these returned or yielded; on any other (the raising instruction, a re-raise after an
`except` of another type or a `finally`) an exception left it. A line event does not say the exception was handled."""
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR
NO_VALUE = object()
"""A statement that gave no value (an assignment, an import, a failure): no call is where its value came from."""


def main() -> None:
    with open("job.json", encoding="utf-8") as handle:
        job = json.load(handle)
    coverage = start_coverage(job)
    results: list[dict[str, Any]] = []
    limit = int(job.get("calls_per_function", CALLS_PER_FUNCTION))
    watcher = Watcher(job.get("watch", []), results, limit) if coverage is None and job.get("watch") else None
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        for number, source in enumerate(job["statements"]):
            print(job["marker"], number, flush=True)
            if coverage is not None:  # what an import runs (module bodies) is not what the snippet exercises
                coverage.switch_context("import" if only_imports(source) else "run")
            expected = job["expectations"].get(str(number))
            if watcher is not None:
                sys.settrace(watcher.call)
            try:
                result, value = run_statement(source, job["kind"], expected, namespace)
            finally:
                sys.settrace(None)
            results.append(result)
            if watcher is not None:
                result["calls"] = watcher.take(value)
            sys.stdout.flush()
            save(coverage, results)
            if "exception" in results[-1] and job["kind"] != "session":
                break
    finally:
        save(coverage, results)


def run_statement(
    source: str, kind: str, expected: str | None, namespace: dict[str, Any]
) -> tuple[dict[str, Any], Any]:
    """One statement's value (sessions), expectation check and exception, as a JSON-ready record; and the value
    itself (`NO_VALUE` for a statement or a failure)."""
    result: dict[str, Any] = {}
    value: Any = NO_VALUE
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
    return result, value


class Watcher:
    """The calls of the watched functions (`[path, first line, last line, name]` each): per call its arguments (not
    `self` or `cls`) and how it ended: the value returned, the values yielded, or the exception that left it."""

    def __init__(self, watched: list[list[Any]], results: list[dict[str, Any]], limit: int) -> None:
        self.results = results
        self.limit = limit
        self.ends = 0
        """How many watched calls have ended so far: each ended call's record says its place (`end`)."""
        self.watched: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
        for number, (path, first, last, name) in enumerate(watched):
            key = (os.path.realpath(str(path)), str(name))
            self.watched.setdefault(key, []).append((int(first), int(last), number))
        self.counts: dict[int, int] = {}
        self.calls: list[dict[str, Any]] = []
        self.open: dict[int, dict[str, Any]] = {}
        self.paths: dict[str, str] = {}
        self.returned: dict[int, Any] = {}
        """The object each call of this statement returned, by `id` of its record (kept only until `take`)."""

    def take(self, value: Any) -> list[dict[str, Any]]:
        """This statement's calls; the first to start whose returned object is the statement's `value` is marked
        `shown`: the call the line's value came from."""
        taken, self.calls = self.calls, []
        returned, self.returned = self.returned, {}
        for record in taken if value is not NO_VALUE else ():
            if id(record) in returned and returned[id(record)] is value:
                record["shown"] = True
                break
        return taken

    def number(self, code: Any) -> Any:
        path = self.paths.get(code.co_filename)
        if path is None:
            path = self.paths[code.co_filename] = os.path.realpath(code.co_filename)
        for first, last, number in self.watched.get((path, code.co_name), ()):
            if first <= code.co_firstlineno <= last:
                return number
        return None

    def call(self, frame: Any, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        record = self.open.get(id(frame))
        if record is None:  # a generator resumed keeps its record
            number = self.number(frame.f_code)
            if number is None or self.counts.get(number, 0) >= self.limit:
                return None
            self.counts[number] = self.counts.get(number, 0) + 1
            record = {"function": number, "args": arguments(frame)}
            self.calls.append(record)
            self.open[id(frame)] = record
            if len(self.calls) <= SAVED_STARTS:  # a call that never ends is still said
                save(None, [*self.results, {"calls": self.calls}])
        return Local(self, record).trace

    def close(self, frame: Any, record: dict[str, Any]) -> None:
        self.open.pop(id(frame), None)
        record["end"] = self.ends
        self.ends += 1


class Local:
    """One watched frame's tracer: a frame that ends away from a return or yield left on its last exception; else the
    value is the result."""

    def __init__(self, watcher: Watcher, record: dict[str, Any]) -> None:
        self.watcher = watcher
        self.record = record
        self.pending: Any = None

    def trace(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "exception":
            self.pending = arg[1]
        elif event == "return":
            self.ended(frame, arg)
        return self.trace

    def ended(self, frame: Any, value: Any) -> None:
        generator = frame.f_code.co_flags & GENERATOR_FLAGS
        if self.pending is not None and not at(frame, LEAVE_OPS):
            self.record["raised"] = f"{type(self.pending).__name__}: {safe_str(self.pending)}"[:VALUE_LIMIT]
        elif generator and suspended(frame):
            yielded = self.record.setdefault("yielded", [])
            if len(yielded) < YIELDS:
                yielded.append(short_repr(value))
            return
        elif not generator:
            self.record["returned"] = short_repr(value)
            self.watcher.returned[id(self.record)] = value
        self.watcher.close(frame, self.record)


def suspended(frame: Any) -> bool:
    """A generator frame stopped at a `yield` (not finished)."""
    return at(frame, YIELD_OPS)


def at(frame: Any, ops: frozenset[int]) -> bool:
    """The frame's last instruction is one of `ops`."""
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] in ops


def arguments(frame: Any) -> str:
    """`name=value, ...` of a call's parameters as they arrived (`self` and `cls` left out)."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    names = [n for n in code.co_varnames[:count] if n not in ("self", "cls")]
    return ", ".join(f"{n}={short_repr(frame.f_locals.get(n))}" for n in names)


def short_repr(value: Any) -> str:
    """The value's repr, without memory addresses (`<function f at 0x7f...>`: the prompt stays the same run to run),
    cut to `VALUE_LIMIT`."""
    shown = ADDRESS.sub("", safe_repr(value))
    return shown if len(shown) <= VALUE_LIMIT else shown[: VALUE_LIMIT - 3] + "..."


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
