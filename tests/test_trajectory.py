"""The trajectory file: one flushed line per event, torn last lines tolerated, secrets redacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from snaffle.exceptions import StateError
from snaffle.trajectory import TrajectoryWriter, read_trajectory


def test_lines_are_numbered_flushed_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = TrajectoryWriter(path, secrets=("sk-secret-1234",))
    writer.write({"type": "header", "format": "snaffle-trajectory/1"})
    writer.write({"type": "model_call", "note": "key sk-secret-1234 here"})
    assert len(path.read_text().splitlines()) == 2  # visible before close: flushed per line
    writer.close()
    trajectory = read_trajectory(path)
    assert [e["seq"] for e in trajectory.events] == [0, 1] and not trajectory.torn
    assert trajectory.events[1]["note"] == "key [redacted] here"


def test_a_torn_last_line_is_skipped_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"type": "header"}\n{"type": "model_call", "tur')
    trajectory = read_trajectory(path)
    assert trajectory.torn and len(trajectory.events) == 1 and trajectory.header is not None


def test_a_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"type": "header"}\n{broken\n{"type": "exit"}\n')
    with pytest.raises(ValueError, match=":2: corrupt"):
        read_trajectory(path)


def test_a_failed_save_is_a_state_error(tmp_path: Path) -> None:
    writer = TrajectoryWriter(tmp_path / "t.jsonl")
    writer.close()
    with pytest.raises(StateError):
        writer.write({"type": "model_call"})
    with pytest.raises(StateError):
        TrajectoryWriter(Path("/proc/forbidden/t.jsonl"))
