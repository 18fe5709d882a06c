"""Reading and selecting SWE-bench instances; only the problem statement reaches a task."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from snaffle.exceptions import UserError
from snaffle.swebench.instances import HIDDEN, load_instances, parse_slice, select
from tests.swebench_helpers import SENTINELS, instance, write_jsonl


def rows(n: int) -> list[dict[str, object]]:
    return [instance(f"acme__calc-{i}", "acme/calc", f"{i:040d}") for i in range(n)]


@pytest.mark.parametrize("form", ["jsonl", "json", "jsonl.gz"])
def test_reads_json_jsonl_and_gzip(tmp_path: Path, form: str) -> None:
    path = tmp_path / f"instances.{form}"
    if form == "json":
        path.write_text(json.dumps(rows(3)))
    elif form == "jsonl":
        write_jsonl(path, rows(3))
    else:
        path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows(3)).encode()))
    instances = load_instances(path)
    assert [i.instance_id for i in instances] == ["acme__calc-0", "acme__calc-1", "acme__calc-2"]
    first = instances[0]
    assert first.FAIL_TO_PASS == (f"tests/test_calc.py::{SENTINELS[2]}",) and first.version == "0.1"
    assert json.loads(first.as_swebench()["PASS_TO_PASS"]) == [f"tests/test_calc.py::{SENTINELS[3]}"]


def test_a_task_carries_the_problem_statement_only(tmp_path: Path) -> None:
    first = load_instances(write_jsonl(tmp_path / "i.jsonl", rows(1)))[0]
    task = first.task(tmp_path)
    assert task.issue == first.problem_statement and task.instance_id == first.instance_id
    assert not any(s in repr(task) for s in SENTINELS)
    assert set(HIDDEN) == {"patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS"}


@pytest.mark.parametrize(
    ("row", "message"),
    [({"instance_id": "x", "repo": "a/b"}, "missing SWE-bench field"), ("not an object", "JSON object")],
)
def test_bad_rows_name_the_problem(tmp_path: Path, row: object, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(UserError, match=message):
        load_instances(path)


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="appears twice"):
        load_instances(write_jsonl(tmp_path / "d.jsonl", rows(2) + rows(1)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:3", slice(1, 3)),
        (":2", slice(None, 2)),
        ("4:", slice(4, None)),
        ("2", slice(2, 3)),
        ("-2:", slice(-2, None)),
    ],
)
def test_parse_slice(text: str, expected: slice) -> None:
    assert parse_slice(text) == expected


def test_filter_shuffle_slice(tmp_path: Path) -> None:
    instances = load_instances(write_jsonl(tmp_path / "i.jsonl", rows(10)))
    assert [i.instance_id for i in select(instances, pattern=r"-[2-4]$")] == [f"acme__calc-{i}" for i in (2, 3, 4)]
    assert [i.instance_id for i in select(instances, window="8:")] == ["acme__calc-8", "acme__calc-9"]
    shuffled = select(instances, shuffle=True, seed=7)
    assert shuffled == select(instances, shuffle=True, seed=7) and shuffled != instances
    assert sorted(shuffled, key=lambda i: i.instance_id) == sorted(instances, key=lambda i: i.instance_id)
    assert select(instances, pattern="calc", window="0:3", shuffle=True, seed=7) == shuffled[:3]
    with pytest.raises(UserError, match="not a valid regular expression"):
        select(instances, pattern="(")
