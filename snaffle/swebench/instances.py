"""SWE-bench instances: read JSON/JSONL (gzipped or not), select with a regex, a slice and a seeded shuffle.

Only `problem_statement` ever reaches a model (`Instance.task`); the gold patch, the test patch and the test lists
are kept for grading.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snaffle.exceptions import UserError
from snaffle.types import Task

REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement")
TEXTS = ("patch", "test_patch", "environment_setup_commit")
"""Optional fields that, when present, are strings."""
HIDDEN = ("patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")
"""Fields the harness never shows a model."""


@dataclass(frozen=True)
class Instance:
    """One SWE-bench task instance (SWE-bench field names; the test lists decoded to tuples)."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str = ""
    test_patch: str = ""
    FAIL_TO_PASS: tuple[str, ...] = ()
    PASS_TO_PASS: tuple[str, ...] = ()
    version: str = ""
    environment_setup_commit: str = ""

    def task(self, workdir: Path) -> Task:
        """What a harness gets: the checkout and the problem statement, nothing else."""
        return Task(repo=workdir, issue=self.problem_statement, instance_id=self.instance_id)

    def as_swebench(self) -> dict[str, Any]:
        """The instance as the `swebench` package expects it (test lists as JSON strings)."""
        return {
            "instance_id": self.instance_id,
            "repo": self.repo,
            "base_commit": self.base_commit,
            "problem_statement": self.problem_statement,
            "patch": self.patch,
            "test_patch": self.test_patch,
            "FAIL_TO_PASS": json.dumps(list(self.FAIL_TO_PASS)),
            "PASS_TO_PASS": json.dumps(list(self.PASS_TO_PASS)),
            "version": self.version,
            "environment_setup_commit": self.environment_setup_commit,
        }


def load_instances(path: Path) -> tuple[Instance, ...]:
    """Read a JSON list or JSON lines (optionally .gz) of SWE-bench instances; ids must be unique."""
    instances = tuple(parse_instance(row, where) for where, row in read_rows(path))
    seen: set[str] = set()
    for instance in instances:
        if instance.instance_id in seen:
            raise UserError(f"{path}: instance_id {instance.instance_id!r} appears twice; ids must be unique")
        seen.add(instance.instance_id)
    return instances


def read_rows(path: Path) -> list[tuple[str, Mapping[str, Any]]]:
    """Each row with where it is (`FILE:LINE` in JSON lines, `FILE[INDEX]` in a JSON list)."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read instances from {path} ({exc}); pass a SWE-bench .json or .jsonl file") from exc
    rows = _json_list(path, text) if text.lstrip().startswith("[") else _json_lines(path, text)
    for where, row in rows:
        if not isinstance(row, dict):
            raise UserError(f"{where}: every instance must be a JSON object, got {json.dumps(row)[:40]}")
    return rows


def _json_list(path: Path, text: str) -> list[tuple[str, Any]]:
    try:
        return [(f"{path}[{n}]", row) for n, row in enumerate(json.loads(text))]
    except (json.JSONDecodeError, RecursionError) as exc:
        raise UserError(f"{path}:{getattr(exc, 'lineno', 1)}: not JSON ({getattr(exc, 'msg', exc)})") from exc


def _json_lines(path: Path, text: str) -> list[tuple[str, Any]]:
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rows.append((f"{path}:{number}", json.loads(line)))
        except (json.JSONDecodeError, RecursionError) as exc:
            raise UserError(f"{path}:{number}: not JSON or JSON lines ({getattr(exc, 'msg', exc)})") from exc
    return rows


def parse_instance(row: Mapping[str, Any], where: str) -> Instance:
    missing = [key for key in REQUIRED if not isinstance(row.get(key), str) or not row.get(key)]
    if missing:
        raise UserError(f"{where}: missing SWE-bench field(s) {missing}")
    wrong = [key for key in TEXTS if not isinstance(row.get(key), str | None)]
    if wrong:
        raise UserError(f"{where}: field(s) {wrong} must be strings")
    return Instance(
        instance_id=row["instance_id"],
        repo=row["repo"],
        base_commit=row["base_commit"],
        problem_statement=row["problem_statement"],
        patch=str(row.get("patch") or ""),
        test_patch=str(row.get("test_patch") or ""),
        FAIL_TO_PASS=decode_tests(row.get("FAIL_TO_PASS"), f"{where}: FAIL_TO_PASS"),
        PASS_TO_PASS=decode_tests(row.get("PASS_TO_PASS"), f"{where}: PASS_TO_PASS"),
        version=str(row.get("version") or ""),
        environment_setup_commit=str(row.get("environment_setup_commit") or ""),
    )


def decode_tests(value: object, where: str = "a test list") -> tuple[str, ...]:
    """SWE-bench stores test lists as JSON strings; accept real lists too."""
    if value is None or value == "":
        return ()
    try:
        decoded = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        decoded = value
    if not isinstance(decoded, list):
        raise UserError(f"{where} must be a JSON list of test ids, got {value!r:.80}")
    return tuple(str(item) for item in decoded)


def parse_slice(text: str) -> slice:
    """`a:b`, `:b`, `a:` or `a` (a single index) into a slice."""
    match = re.fullmatch(r"\s*(-?\d*)\s*(?::\s*(-?\d*)\s*)?", text)
    if match is None:
        raise UserError(f"--slice {text!r}: use START:STOP, e.g. 0:10")
    start, stop = match.group(1), match.group(2)
    if match.group(0).count(":") == 0:
        index = int(start)
        return slice(index, index + 1 if index != -1 else None)
    return slice(int(start) if start else None, int(stop) if stop else None)


def select(
    instances: Sequence[Instance],
    pattern: str | None = None,
    window: str | None = None,
    shuffle: bool = False,
    seed: int = 0,
) -> tuple[Instance, ...]:
    """Filter by a regex on instance_id, shuffle with a seed, then take the slice (in that order)."""
    chosen: list[Instance] = list(instances)
    if pattern:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise UserError(f"--filter {pattern!r} is not a valid regular expression: {exc}") from exc
        chosen = [i for i in chosen if regex.search(i.instance_id)]
    if shuffle:
        random.Random(seed).shuffle(chosen)
    if window:
        chosen = chosen[parse_slice(window)]
    return tuple(chosen)


def by_id(instances: Iterable[Instance]) -> dict[str, Instance]:
    return {instance.instance_id: instance for instance in instances}
