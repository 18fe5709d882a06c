"""The batch's live progress: done / running / exit statuses / tokens / dollars, as a bar on a terminal or as one
line per finished instance otherwise."""

from __future__ import annotations

import sqlite3
import sys
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from snaffle.types import Usage

LEDGER_USAGE = (
    "SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0), COALESCE(SUM(dollars), 0.0) FROM calls WHERE run = ?"
)


@dataclass(frozen=True)
class BatchState:
    """What the progress view shows."""

    total: int
    done: int = 0
    running: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    tokens: int = 0
    dollars: float = 0.0
    last: str = ""

    def finished(self, instance_id: str, status: str, usage: Usage) -> BatchState:
        statuses = Counter(self.statuses)
        statuses[status] += 1
        return replace(
            self,
            done=self.done + 1,
            statuses=statuses,
            tokens=self.tokens + usage.total_tokens,
            dollars=self.dollars + usage.dollars,
            last=f"{instance_id}: {status}",
        )

    def summary(self) -> str:
        statuses = " ".join(f"{k}={v}" for k, v in sorted(self.statuses.items())) or "-"
        return (
            f"done {self.done}/{self.total} · running {self.running} · {statuses} · "
            f"tokens {self.tokens:,} · ${self.dollars:.4f}"
        )


class ProgressView(Protocol):
    def show(self, state: BatchState) -> None: ...

    def close(self) -> None: ...


class BarProgress:
    """A rich progress bar on stderr (a terminal)."""

    def __init__(self, total: int) -> None:
        columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"))
        self.progress = Progress(*columns, console=Console(stderr=True), transient=False)
        self.task = self.progress.add_task("starting", total=total)
        self.progress.start()

    def show(self, state: BatchState) -> None:
        self.progress.update(self.task, completed=state.done, description=state.summary())

    def close(self) -> None:
        self.progress.stop()


class LineProgress:
    """One line each time an instance finishes (logs, CI, pipes)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.done = -1

    def show(self, state: BatchState) -> None:
        if state.done != self.done:
            self.done = state.done
            print(
                f"[swebench] {state.summary()}" + (f" · {state.last}" if state.last else ""),
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        return None


def make_view(total: int) -> ProgressView:
    return BarProgress(total) if sys.stderr.isatty() else LineProgress()


def ledger_usage(db: Path, run: str) -> tuple[int, float] | None:
    """Tokens and dollars the shim's ledger holds for `run` so far (running instances included)."""
    if not db.exists():
        return None
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)) as conn:
            tokens, dollars = conn.execute(LEDGER_USAGE, (run,)).fetchone()
    except sqlite3.Error:
        return None
    return int(tokens), float(dollars)
