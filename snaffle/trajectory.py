"""State boundary: `trajectory.jsonl` written one flushed line per event, read back tolerating a torn last line.

The format is `snaffle-trajectory/1`, described in docs/trajectory.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from snaffle.exceptions import StateError
from snaffle.types import Event

FORMAT = "snaffle-trajectory/1"
RESULT_FORMAT = "snaffle-result/1"
TRAJECTORY_FILE = "trajectory.jsonl"
PATCH_FILE = "patch.diff"
RESULT_FILE = "result.json"


class TrajectoryWriter:
    """Appends events as JSON lines, flushing each; numbers them with `seq` and stamps `t`."""

    def __init__(
        self, path: Path, secrets: tuple[str, ...] = (), observer: Callable[[Event], None] | None = None
    ) -> None:
        self.path = path
        self.observer = observer
        self._secrets = tuple(s for s in secrets if len(s) >= 4)
        self._seq = 0
        self._file: IO[str] | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise StateError(f"cannot open trajectory {path}: {exc}") from exc

    def write(self, event: Event) -> None:
        line = json.dumps({"type": event["type"], "seq": self._seq, "t": round(time.time(), 3), **event})
        for secret in self._secrets:
            line = line.replace(secret, "[redacted]")
        try:
            assert self._file is not None, "trajectory writer is closed"
            self._file.write(line + "\n")
            self._file.flush()
        except (OSError, ValueError, AssertionError) as exc:
            raise StateError(f"cannot append to trajectory {self.path}: {exc}") from exc
        self._seq += 1
        if self.observer is not None:
            self.observer(event)

    def close(self) -> None:
        """Close; a flush failure here was already reported by `write` as a StateError."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None


@dataclass(frozen=True)
class Trajectory:
    """The events of a trajectory file, and whether its last line was torn (and skipped)."""

    events: tuple[Event, ...]
    torn: bool

    @property
    def header(self) -> Event | None:
        return self.events[0] if self.events and self.events[0].get("type") == "header" else None

    @property
    def exit(self) -> Event | None:
        return next((e for e in reversed(self.events) if e.get("type") == "exit"), None)

    def of_type(self, kind: str) -> Iterator[Event]:
        return (e for e in self.events if e.get("type") == kind)


def read_trajectory(path: Path) -> Trajectory:
    """Parse every complete line; a torn final line is skipped and reported, a torn middle line is an error."""
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    events: list[Event] = []
    torn = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if any(rest.strip() for rest in lines[number:]):
                raise ValueError(f"{path}:{number}: corrupt trajectory line ({exc.msg})") from exc
            torn = True
    return Trajectory(tuple(events), torn)


def write_result(run_dir: Path, result: Mapping[str, Any]) -> Path:
    """Write result.json atomically (temp file, then rename)."""
    path = run_dir / RESULT_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"format": RESULT_FORMAT, **result}, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
